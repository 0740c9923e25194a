//! The tables of objects created before turns moved into the object: a `lease`, a `cancelled`
//! flag and a `queue` whose messages had no ids. Opening such an object (its `queue` table is
//! there, which [`ObjectStorage::open`] asks with the tables' creation) keeps the queued
//! messages, moved into the inbox, and drops the rest.
//!
//! [`ObjectStorage::open`]: super::ObjectStorage::open

use super::engine::Engine;

/// Moves a legacy queue into the inbox, oldest first and each with a new id, and drops the
/// legacy tables. A statement that fails is logged, and the next still runs.
pub(super) fn migrate<E: Engine>(sql: &E) {
    for statement in [
        "INSERT INTO inbox (id, delivery, message, queued_at)
         SELECT lower(hex(randomblob(16))), delivery, message, queued_at FROM queue ORDER BY seq",
        "DROP TABLE queue",
        "DROP TABLE IF EXISTS lease",
        "DROP TABLE IF EXISTS cancelled",
    ] {
        if let Err(e) = sql.exec(statement, None) {
            worker::console_error!("conversation object migration: {e}");
        }
    }
}
