-- A retried turn's earlier answer stays in the history, marked superseded, and is never sent to
-- a model again.
ALTER TABLE messages ADD COLUMN superseded INTEGER NOT NULL DEFAULT 0;
