-- `RETENTION_DAYS` keeps a conversation with a scheduled run still to come, however long it has
-- been idle. Schedules live in the conversation's object, out of D1's sight: the scheduled run
-- asks the object before deleting, and when it keeps a conversation writes here the earliest run
-- to come, so later runs pass over it until then (NULL: ask once it is idle). A run that finds
-- the time passed asks again.
ALTER TABLE conversations ADD COLUMN retain_until INTEGER;
