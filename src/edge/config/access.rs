//! Who may call and from which browser origins: the settings `JWT_SECRET`, `API_KEYS`,
//! `ALLOW_ANONYMOUS`, `JWT_ISSUER`, `JWT_AUDIENCE` and `CORS_ORIGINS`, parsed. The gateway checks
//! each request against them (`gateway::auth`, `gateway::cors`).

use super::parse::{flag, Lookup};
use crate::edge::error::ApiError;

/// The user a request without a token acts as, when `ALLOW_ANONYMOUS` lets it through.
pub const ANONYMOUS: &str = "anonymous";

/// The namespace of users a server key acts as.
pub const KEY_USER_PREFIX: &str = "key:";

/// A server key from `API_KEYS`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiKey {
    /// The user it acts as, `key:<name>`.
    pub user: String,
    pub key: String,
    /// May use the admin routes (an entry ending in `:admin`).
    pub admin: bool,
}

/// The settings that decide who may call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuthConfig {
    pub jwt_secret: Option<String>,
    pub api_keys: Vec<ApiKey>,
    pub allow_anonymous: bool,
    /// `JWT_ISSUER`: when set, a JWT's `iss` must equal it.
    pub jwt_issuer: Option<String>,
    /// `JWT_AUDIENCE`: when set, a JWT's `aud` (a string or a list) must contain it.
    pub jwt_audience: Option<String>,
}

impl AuthConfig {
    /// Parses `API_KEYS`: comma-separated `name:key`, a bare `key` (the name `api`), either
    /// followed by `:admin` for a key that may use the admin routes.
    pub fn parse_api_keys(list: &str) -> Vec<ApiKey> {
        list.split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(|entry| {
                let (entry, admin) = match entry.strip_suffix(":admin") {
                    Some(rest) if !rest.is_empty() => (rest, true),
                    _ => (entry, false),
                };
                let (name, key) = match entry.split_once(':') {
                    Some((name, key)) if !name.is_empty() && !key.is_empty() => (name, key),
                    _ => ("api", entry),
                };
                ApiKey {
                    user: format!("{KEY_USER_PREFIX}{name}"),
                    key: key.to_string(),
                    admin,
                }
            })
            .collect()
    }
}

/// Who may call, read alone: a configuration that fails elsewhere is reported only to callers
/// who authenticate.
pub fn auth_from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<AuthConfig, ApiError> {
    auth(&|name: &str| get(name).filter(|v| !v.trim().is_empty()))
}

pub(super) fn auth(get: Lookup) -> Result<AuthConfig, ApiError> {
    Ok(AuthConfig {
        jwt_secret: get("JWT_SECRET"),
        api_keys: get("API_KEYS")
            .map(|list| AuthConfig::parse_api_keys(&list))
            .unwrap_or_default(),
        allow_anonymous: flag(get, "ALLOW_ANONYMOUS")?,
        jwt_issuer: get("JWT_ISSUER"),
        jwt_audience: get("JWT_AUDIENCE"),
    })
}

/// Which origins may call.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum CorsOrigins {
    /// No browser origin may call (the default).
    #[default]
    None,
    Any,
    List(Vec<String>),
}

impl CorsOrigins {
    pub fn parse(value: &str) -> Self {
        let value = value.trim();
        if value == "*" {
            return CorsOrigins::Any;
        }
        let list: Vec<String> = value
            .split(',')
            .map(|o| o.trim().trim_end_matches('/').to_string())
            .filter(|o| !o.is_empty())
            .collect();
        if list.is_empty() {
            CorsOrigins::None
        } else {
            CorsOrigins::List(list)
        }
    }
}
