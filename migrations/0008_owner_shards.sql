-- Which D1 database holds each owner's data, when `D1_SHARDS` names several (read and written in
-- the first of them only; the table stays empty elsewhere). An owner is recorded the first time
-- the deployment meets them with several databases: where their data already is (the first
-- database, for owners from before), else the database their id hashes to.
CREATE TABLE owner_shards (
  owner TEXT PRIMARY KEY,
  shard TEXT NOT NULL
);
