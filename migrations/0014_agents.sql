-- The agent a conversation belongs to (a name in AGENTS); NULL: the deployment's default agent.
ALTER TABLE conversations ADD COLUMN agent TEXT;
