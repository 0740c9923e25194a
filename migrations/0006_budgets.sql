-- Budgets per user, set by an admin (`PUT /v1/admin/budgets/{user}`); users without a row have
-- USER_BUDGET_USD per USER_BUDGET_PERIOD. `warned_period` is the start (ms) of the period in which
-- the user was told 80% is spent, so they are told once per period. A row may hold only that
-- (limit_usd NULL: the default applies).
CREATE TABLE budgets (
  user          TEXT PRIMARY KEY,
  limit_usd     REAL,
  period        TEXT CHECK (period IN ('day', 'month')),
  warned_period INTEGER,
  updated_at    INTEGER NOT NULL
);
