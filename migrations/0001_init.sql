-- Conversations, their messages, and the per-user usage ledger.
-- Ids are TEXT: numbers cross the JS boundary as f64.

CREATE TABLE conversations (
  id          TEXT PRIMARY KEY,
  owner       TEXT NOT NULL,
  title       TEXT,
  system      TEXT,
  model       TEXT,
  metadata    TEXT,            -- JSON object
  created_at  INTEGER NOT NULL, -- ms since the epoch
  updated_at  INTEGER NOT NULL
);
CREATE INDEX conversations_by_owner ON conversations (owner, created_at DESC, id);

CREATE TABLE messages (
  conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
  seq             INTEGER NOT NULL, -- 1, 2, 3... per conversation; the order of the history
  id              TEXT NOT NULL UNIQUE,
  kind            TEXT NOT NULL,    -- user, assistant, tool_result, summary, context_note, system_event, tool_log
  body            TEXT NOT NULL,    -- the whole message, JSON (AgentMessage's stored form)
  model           TEXT,
  provider        TEXT,
  created_at      INTEGER NOT NULL,
  PRIMARY KEY (conversation_id, seq)
);

CREATE TABLE usage_ledger (
  id              INTEGER PRIMARY KEY AUTOINCREMENT,
  owner           TEXT NOT NULL,
  conversation_id TEXT NOT NULL,
  model           TEXT NOT NULL,
  provider        TEXT NOT NULL,
  input_tokens    INTEGER NOT NULL,
  output_tokens   INTEGER NOT NULL,
  cache_read_tokens  INTEGER NOT NULL DEFAULT 0,
  cache_write_tokens INTEGER NOT NULL DEFAULT 0,
  cost_usd        REAL,
  created_at      INTEGER NOT NULL
);
CREATE INDEX usage_by_owner ON usage_ledger (owner, created_at);
