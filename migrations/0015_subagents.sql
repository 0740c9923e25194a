-- Sub-agents: a child conversation, where an agent tool's call runs another agent, names the
-- conversation that asked (`parent`) and the tool call it answers (`tool_call_id`). Listed under
-- its parent, not in its owner's list, and deleted with its parent.
ALTER TABLE conversations ADD COLUMN parent TEXT;
ALTER TABLE conversations ADD COLUMN tool_call_id TEXT;
CREATE INDEX conversations_by_parent ON conversations (parent, created_at DESC, id) WHERE parent IS NOT NULL;
