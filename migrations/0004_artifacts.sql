-- Artifacts: versioned documents of a conversation, written by its model or its user. Every
-- version is kept; the latest is the one with the highest version.
CREATE TABLE artifacts (
  conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
  id          TEXT NOT NULL,
  version     INTEGER NOT NULL,   -- 1, 2, 3... per artifact
  title       TEXT NOT NULL,
  kind        TEXT NOT NULL,      -- markdown, json, html, text, code
  content     TEXT NOT NULL,
  author      TEXT NOT NULL,      -- model, user
  created_at  INTEGER NOT NULL,   -- the artifact's first version, ms since the epoch
  updated_at  INTEGER NOT NULL,   -- this version
  PRIMARY KEY (conversation_id, id, version)
);
