//! D1, where history lives: every message is written as it is produced. One [`Store`] per
//! request or turn counts its round trips; its queries are split by table group.
//!
//! - [`conversations`]: conversation rows, ids
//! - [`history`]: messages, a turn's history
//! - [`usage`]: the usage ledger and budgets
//! - [`artifacts`]: artifacts and their versions
//! - [`memory`]: working memories, and the search recall reads
//! - [`files`]: the files attached to messages; [`export`]: a user's data whole (export, erasure)
//! - [`rows`]: reading D1's results into Rust types; [`params`]: binding a statement's parameters
//! - [`shards`]: which D1 database holds an owner's data

use worker::D1Database;

pub mod artifacts;
pub mod conversations;
pub mod export;
pub mod files;
pub mod history;
pub mod memory;
pub mod params;
pub mod rows;
pub mod shards;
pub mod usage;

pub use conversations::{is_conversation_id, scoped_id, Conversation, Listing};
pub use history::TurnHistory;
pub use usage::{BudgetRead, ModelSpend, UsageRow};

/// The binding of the D1 database (one of `D1_SHARDS` when set).
pub use crate::edge::config::D1_BINDING as BINDING;

pub struct Store {
    db: D1Database,
    /// Its binding's name (the recall index is made once per database and isolate).
    binding: String,
    /// D1 round trips made through this store (a batch is one), for the per-turn log line.
    round_trips: std::cell::Cell<u32>,
}

impl Store {
    /// The store of the D1 database that holds `owner`'s data (`D1_SHARDS`).
    pub async fn for_owner(
        env: &worker::Env,
        owner: &str,
    ) -> Result<Self, crate::edge::error::ApiError> {
        let config = crate::edge::config::Config::cached(env)?;
        let binding = shards::binding_of(env, &config.d1_shards, owner).await?;
        Self::on(env, &binding)
    }

    /// The store of one D1 binding, by name.
    pub fn on(env: &worker::Env, binding: &str) -> Result<Self, crate::edge::error::ApiError> {
        Ok(Self {
            db: env.d1(binding)?,
            binding: binding.to_string(),
            round_trips: std::cell::Cell::new(0),
        })
    }

    pub fn round_trips(&self) -> u32 {
        self.round_trips.get()
    }

    fn tick(&self, n: u32) {
        self.round_trips.set(self.round_trips.get().wrapping_add(n));
    }
}

/// The rows a batch's statements changed, together (each result's `meta.changes`, read where
/// it lies rather than through workers-rs's `meta()`, which compiles serde_wasm_bindgen in).
fn changes(results: &[worker::wasm_bindgen::JsValue]) -> u64 {
    use worker::js_sys::Reflect;
    results
        .iter()
        .filter_map(|result| Reflect::get(result, &"meta".into()).ok())
        .filter_map(|meta| Reflect::get(&meta, &"changes".into()).ok()?.as_f64())
        .sum::<f64>() as u64
}

/// A row whose presence is the answer: one an `INSERT ... RETURNING` wrote (none when its
/// condition held it back), or one a check found.
struct Created {}

crate::json_struct!(Created {});
