-- Memory across conversations.
-- Whether a conversation is remembered: 1, its messages are indexed for recall as they are
-- written; 0, made with `memory: false` (neither remembered nor given memory); 2, made while no
-- agent of the deployment kept memory (not indexed: the index costs D1 writes). Every insert
-- says which; those made before this migration are 2 (docs/memory.md says how to index them).
ALTER TABLE conversations ADD COLUMN memory INTEGER NOT NULL DEFAULT 2;
-- Working memory: one document per user and agent. `version` counts its writes: a write names
-- the version it read, so two conversations writing at once never lose one another's update.
CREATE TABLE memories (
  owner      TEXT NOT NULL,
  agent      TEXT NOT NULL,
  body       TEXT NOT NULL,
  version    INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  PRIMARY KEY (owner, agent)
) WITHOUT ROWID;
-- Retention forgets the memories not written for `RETENTION_DAYS`.
CREATE INDEX memories_by_age ON memories (updated_at);
-- The search row a message has in the recall index (`message_search`, an FTS5 table the Worker
-- makes with its triggers when it first needs them, `edge/d1/memory.rs`: a database with a
-- virtual table cannot be exported by `wrangler d1 export`, and a deployment whose agents keep
-- no memory should keep that).
ALTER TABLE messages ADD COLUMN search_rowid INTEGER;
