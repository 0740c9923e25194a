-- `RETENTION_DAYS`: the scheduled run finds the conversations not updated for that long, oldest
-- first, across every owner.
CREATE INDEX conversations_by_update ON conversations (updated_at);
