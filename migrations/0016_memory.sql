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
-- Recall: the text of users' and assistants' messages, searched per owner by BM25. `scope` is
-- the owner's UTF-8 bytes in hex and a `0` (so the stemmer leaves it whole): one token no other
-- owner's can match, and no message's words can be read as.
CREATE VIRTUAL TABLE message_search USING fts5(
  body, scope, message_id UNINDEXED, conversation_id UNINDEXED, created_at UNINDEXED,
  tokenize = 'porter unicode61 remove_diacritics 2'
);
-- The search row a message has (its rowid there), so deleting the message deletes it.
ALTER TABLE messages ADD COLUMN search_rowid INTEGER;
-- Kept up to date by the database itself as messages are written and deleted (a conversation's
-- deletion, retention, erasure, a message taken back): nothing in the Worker can forget it.
CREATE TRIGGER message_search_add AFTER INSERT ON messages
WHEN new.kind IN ('user', 'assistant')
  AND EXISTS (SELECT 1 FROM conversations c
              WHERE c.id = new.conversation_id AND c.memory = 1 AND c.parent IS NULL)
BEGIN
  INSERT INTO message_search (body, scope, message_id, conversation_id, created_at)
  SELECT coalesce((SELECT group_concat(json_extract(value, '$.text'), ' ')
                   FROM json_each(new.body, '$.content')
                   WHERE json_extract(value, '$.type') = 'text'), ''),
         hex(c.owner) || '0', new.id, new.conversation_id, new.created_at
  FROM conversations c WHERE c.id = new.conversation_id;
  UPDATE messages SET search_rowid = last_insert_rowid() WHERE rowid = new.rowid;
END;
CREATE TRIGGER message_search_drop AFTER DELETE ON messages
WHEN old.search_rowid IS NOT NULL
BEGIN
  DELETE FROM message_search WHERE rowid = old.search_rowid;
END;
