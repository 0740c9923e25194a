-- Compaction: rows a summary replaced stay readable in the history but are never loaded for a
-- turn again. A turn loads the live rows: neither superseded nor compacted.
ALTER TABLE messages ADD COLUMN compacted INTEGER NOT NULL DEFAULT 0;
CREATE INDEX messages_live ON messages (conversation_id, compacted, superseded, seq);
