-- Sub-agents: a child conversation, where an agent tool's call runs another agent, names the
-- conversation that asked (`parent`) and the tool call it answers (`tool_call_id`). Listed under
-- its parent, not in its owner's list (nor counted there), and deleted with its parent.
ALTER TABLE conversations ADD COLUMN parent TEXT;
ALTER TABLE conversations ADD COLUMN tool_call_id TEXT;
CREATE INDEX conversations_by_parent ON conversations (parent, created_at DESC, id) WHERE parent IS NOT NULL;
-- The owner's own conversations (`parent IS NULL`) and a parent's children: their lists, and the
-- count a new conversation is made within, read from the index alone (a partial index on
-- `parent IS NULL` made that count read every row it counted).
CREATE INDEX conversations_started ON conversations (owner, parent, created_at DESC, id);
