-- Users being erased (`DELETE /v1/me`, `DELETE /v1/admin/users/{user}`), in the database that
-- holds their data: the erasure runs right after the request, and the scheduled run finishes
-- any that did not end (the row goes once nothing of the user is left).
CREATE TABLE erasures (
  owner        TEXT PRIMARY KEY,
  requested_by TEXT NOT NULL,
  requested_at INTEGER NOT NULL
);
