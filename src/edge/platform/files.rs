//! The R2 bucket bound as `FILES`, where the files users attach are kept: one object per file,
//! keyed by the file's id (ids are random, so a key says nothing of its owner). Which
//! conversation a file belongs to is D1's (`files`, filled from the messages that carry them).

use std::collections::HashMap;

use worker::{Bucket, Env, HttpMetadata, Object};

use crate::edge::error::ApiError;

/// The binding's name in `wrangler.toml`.
pub const BINDING: &str = "FILES";

pub struct Files {
    bucket: Bucket,
}

fn key(id: &str) -> String {
    format!("files/{id}")
}

impl Files {
    /// The bucket, or `None` when the deployment binds none (then no file can exist).
    pub fn from_env(env: &Env) -> Option<Self> {
        env.bucket(BINDING).ok().map(|bucket| Self { bucket })
    }

    /// The bucket, or the error a request carrying a file gets without one.
    pub fn required(env: &Env) -> Result<Self, ApiError> {
        Self::from_env(env).ok_or_else(|| {
            ApiError::config(
                BINDING,
                "files need an R2 bucket bound as FILES (`[[r2_buckets]]` in wrangler.toml)",
            )
        })
    }

    pub async fn put(
        &self,
        id: &str,
        bytes: Vec<u8>,
        media_type: &str,
        name: Option<&str>,
    ) -> Result<(), ApiError> {
        let mut custom = HashMap::new();
        if let Some(name) = name {
            custom.insert("name".to_string(), name.to_string());
        }
        self.bucket
            .put(key(id), bytes)
            .http_metadata(HttpMetadata {
                content_type: Some(media_type.to_string()),
                ..Default::default()
            })
            .custom_metadata(custom)
            .execute()
            .await?;
        Ok(())
    }

    /// The stored file, if it is there.
    pub async fn get(&self, id: &str) -> Result<Option<Object>, ApiError> {
        Ok(self.bucket.get(key(id)).execute().await?)
    }

    /// A file's bytes, if it is there.
    pub async fn bytes(&self, id: &str) -> Result<Option<Vec<u8>>, ApiError> {
        match self.get(id).await?.as_ref().and_then(Object::body) {
            Some(body) => Ok(Some(body.bytes().await?)),
            None => Ok(None),
        }
    }

    /// Deletes `ids` (at most 1,000 per call, R2's limit for one request).
    pub async fn delete(&self, ids: &[String]) -> Result<(), ApiError> {
        for batch in ids.chunks(1_000) {
            let keys: Vec<String> = batch.iter().map(|id| key(id)).collect();
            self.bucket.delete_multiple(keys).await?;
        }
        Ok(())
    }
}
