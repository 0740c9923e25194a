-- The files users attach (their bytes are in R2, bound as FILES, under `files/{id}`): one row
-- per file, written by the trigger below whenever a user message that carries files is stored,
-- so every path that stores a message records its files with it, in the same statement.
CREATE TABLE files (
  id              TEXT PRIMARY KEY,
  conversation_id TEXT NOT NULL,
  media_type      TEXT NOT NULL,
  size            INTEGER NOT NULL,
  name            TEXT,
  created_at      INTEGER NOT NULL
);
CREATE INDEX files_by_conversation ON files (conversation_id);

CREATE TRIGGER files_of_a_message AFTER INSERT ON messages
WHEN NEW.kind = 'user' AND instr(NEW.body, '"type":"file"') > 0
BEGIN
  INSERT OR IGNORE INTO files (id, conversation_id, media_type, size, name, created_at)
  SELECT json_extract(value, '$.id'), NEW.conversation_id, json_extract(value, '$.media_type'),
         json_extract(value, '$.size'), json_extract(value, '$.name'), NEW.created_at
  FROM json_each(NEW.body, '$.content')
  WHERE json_extract(value, '$.type') = 'file';
END;
