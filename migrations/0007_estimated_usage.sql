-- A ledger row whose counts the provider never reported (an answer cancelled or failed before
-- its usage came) is charged from estimates and says so.
ALTER TABLE usage_ledger ADD COLUMN estimated INTEGER NOT NULL DEFAULT 0;
