-- The toolsets a conversation's turns may use (a JSON array of names); NULL: every configured
-- one.
ALTER TABLE conversations ADD COLUMN toolsets TEXT;
