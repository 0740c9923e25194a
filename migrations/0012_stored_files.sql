-- Every file put in R2 (FILES, `files/{id}`), recorded with its owner and the conversation its
-- request named before its bytes are written, so nothing stored is ever unaccounted for:
-- `files` (0009) says which stored message names a file; this says who stored it and when.
-- `accepted`: the conversation took the message that carries it (a row never accepted, and
-- named by no message, is a refused or cut-off upload, which the scheduled run sweeps after an
-- hour). The owner's rows sum to the bytes their quota (`MAX_FILE_BYTES_PER_USER`) counts.
CREATE TABLE stored_files (
  id              TEXT PRIMARY KEY,
  owner           TEXT NOT NULL,
  conversation_id TEXT NOT NULL,
  size            INTEGER NOT NULL,
  created_at      INTEGER NOT NULL,
  accepted        INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX stored_files_by_owner ON stored_files (owner);
CREATE INDEX stored_files_by_conversation ON stored_files (conversation_id);
CREATE INDEX stored_files_unaccepted ON stored_files (created_at) WHERE accepted = 0;

-- The files stored before: those messages name.
INSERT OR IGNORE INTO stored_files (id, owner, conversation_id, size, created_at, accepted)
SELECT f.id, c.owner, f.conversation_id, f.size, f.created_at, 1
FROM files f JOIN conversations c ON c.id = f.conversation_id;
