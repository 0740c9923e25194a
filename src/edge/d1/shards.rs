//! Which D1 database holds an owner's data. `D1_SHARDS` names the D1 bindings (default the one
//! `DB`); each owner's conversations, history, artifacts, ledger and budget live in one of
//! them, so no query crosses databases. With one database nothing is looked up. With several,
//! the first records each owner's database (`owner_shards`) the first time the deployment meets
//! them: the first database for an owner whose data is there already (from before there were
//! several), else the one their id hashes to over the current list. Adding databases later
//! spreads new owners over the new list; recorded ones stay where they are. Each isolate keeps
//! what it looked up, so an owner costs one round trip per isolate.

use std::cell::RefCell;
use std::collections::HashMap;

use super::params::BindParams;
use super::rows;
use crate::edge::error::ApiError;

/// Owners looked up in this isolate, and their database; forgotten all at once when full.
const REMEMBERED: usize = 10_000;

thread_local! {
    static KNOWN: RefCell<HashMap<String, String>> = RefCell::new(HashMap::new());
}

/// The database an owner new to a deployment of `shards` goes to: their id's FNV-1a hash over
/// the list (stable across isolates, releases and platforms).
pub fn hashed<'a>(owner: &str, shards: &'a [String]) -> Option<&'a str> {
    let hash = owner.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let len = u64::try_from(shards.len()).ok().filter(|n| *n > 0)?;
    let at = usize::try_from(hash % len).ok()?;
    shards.get(at).map(String::as_str)
}

/// The D1 binding that holds `owner`'s data.
pub async fn binding_of(
    env: &worker::Env,
    shards: &[String],
    owner: &str,
) -> Result<String, ApiError> {
    let (Some(home), Some(new)) = (shards.first(), hashed(owner, shards)) else {
        return Err(ApiError::config("D1_SHARDS", "names no D1 binding"));
    };
    if shards.len() == 1 {
        return Ok(home.clone());
    }
    if let Some(known) = KNOWN.with(|k| k.borrow().get(owner).cloned()) {
        return Ok(known);
    }
    let db = env.d1(home)?;
    struct Recorded {
        shard: String,
    }

    crate::json_struct!(Recorded {
        "shard" => shard,
    });
    let results = rows::batch(
        &db,
        &[
            db.prepare(
                "INSERT INTO owner_shards (owner, shard)
                 SELECT ?1, CASE WHEN EXISTS (SELECT 1 FROM conversations WHERE owner = ?1)
                                   OR EXISTS (SELECT 1 FROM usage_ledger WHERE owner = ?1)
                                   OR EXISTS (SELECT 1 FROM budgets WHERE user = ?1)
                                 THEN ?2 ELSE ?3 END
                 WHERE true
                 ON CONFLICT (owner) DO NOTHING",
            )
            .bind_params(&[owner.into(), home.as_str().into(), new.into()])?,
            db.prepare("SELECT shard FROM owner_shards WHERE owner = ?1")
                .bind_params(&[owner.into()])?,
        ],
    )
    .await?;
    let recorded = results
        .get(1)
        .map(rows::results::<Recorded>)
        .transpose()?
        .and_then(|rows| rows.into_iter().next())
        .ok_or_else(|| ApiError::Internal(format!("no D1 database recorded for {owner}")))?;
    if !shards.contains(&recorded.shard) {
        return Err(ApiError::config(
            "D1_SHARDS",
            format!(
                "an owner's data is in D1 binding `{}`, which D1_SHARDS no longer names; \
                 keep every binding that holds data in the list",
                recorded.shard
            ),
        ));
    }
    KNOWN.with(|k| {
        let mut known = k.borrow_mut();
        if known.len() >= REMEMBERED {
            known.clear();
        }
        known.insert(owner.to_string(), recorded.shard.clone());
    });
    Ok(recorded.shard)
}

#[cfg(test)]
mod tests {
    use super::hashed;

    #[test]
    fn owners_spread_over_the_databases_and_each_stays_on_one() {
        let two = vec!["DB".to_string(), "DB2".to_string()];
        let mut counts = [0; 2];
        for i in 0..1000 {
            let owner = format!("user-{i}");
            let shard = hashed(&owner, &two).unwrap();
            assert_eq!(
                hashed(&owner, &two),
                Some(shard),
                "the same owner, the same database"
            );
            counts[usize::from(shard == "DB2")] += 1;
        }
        assert!(counts.iter().all(|n| *n > 400), "spread evenly: {counts:?}");
        // The end-to-end test's two users (server keys) land in different databases.
        assert_eq!(hashed("key:alice", &two), Some("DB"));
        assert_eq!(hashed("key:bob", &two), Some("DB2"));
        assert_eq!(hashed("anyone", &[]), None);
        assert_eq!(hashed("anyone", &["DB".to_string()]), Some("DB"));
    }
}
