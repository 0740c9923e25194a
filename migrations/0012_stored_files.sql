-- Every file put in R2 (FILES, `files/{id}`), recorded with its owner and the conversation its
-- request named before its bytes are written, so nothing stored is ever unaccounted for:
-- `files` (0009) says which stored message names a file; this says who stored it and when.
-- `accepted`: 0 while no conversation has taken the message that carries it (a refused or
-- cut-off upload, which the scheduled run sweeps after an hour), 1 once one has (it waits to be
-- stored), 2 once a stored message names it (never swept: it goes with its conversation). The
-- owner's rows, each counted at least 64 KiB, are what their quota (`MAX_FILE_BYTES_PER_USER`)
-- counts.
CREATE TABLE stored_files (
  id              TEXT PRIMARY KEY,
  owner           TEXT NOT NULL,
  conversation_id TEXT NOT NULL,
  size            INTEGER NOT NULL,
  created_at      INTEGER NOT NULL,
  accepted        INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX stored_files_by_owner ON stored_files (owner, size);
CREATE INDEX stored_files_by_conversation ON stored_files (conversation_id);
CREATE INDEX stored_files_by_state ON stored_files (accepted, created_at);

CREATE TRIGGER stored_files_named AFTER INSERT ON files
BEGIN
  UPDATE stored_files SET accepted = 2 WHERE id = NEW.id;
END;

-- The files stored before: those messages name.
INSERT OR IGNORE INTO stored_files (id, owner, conversation_id, size, created_at, accepted)
SELECT f.id, c.owner, f.conversation_id, f.size, f.created_at, 2
FROM files f JOIN conversations c ON c.id = f.conversation_id;
