-- Sub-agents: a child conversation, where an agent tool's call runs another agent, names the
-- conversation that asked (`parent`) and the tool call it answers (`tool_call_id`). Listed under
-- its parent, not in its owner's list (nor counted there), and deleted with its parent.
ALTER TABLE conversations ADD COLUMN parent TEXT;
ALTER TABLE conversations ADD COLUMN tool_call_id TEXT;
CREATE INDEX conversations_by_parent ON conversations (parent, created_at DESC, id) WHERE parent IS NOT NULL;
-- The owner's own conversations: their list and their count, without reading the children.
CREATE INDEX conversations_started ON conversations (owner, created_at DESC, id) WHERE parent IS NULL;
