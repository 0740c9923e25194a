//! Who is calling: `Authorization: Bearer <token>`, where the token is a server key from
//! `API_KEYS` or an HS256 JWT signed with `JWT_SECRET` (its `sub` is the user; `exp` and `nbf`
//! are checked). Without a token, only `ALLOW_ANONYMOUS=true` lets a request through, as the
//! user `anonymous`. Pure logic over strings, so it is tested natively.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::Sha256;

use super::error::ApiError;

pub const ANONYMOUS: &str = "anonymous";

/// Clock skew tolerated on `exp` and `nbf`, in seconds.
const LEEWAY_S: i64 = 30;

/// The settings that decide who may call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuthConfig {
    pub jwt_secret: Option<String>,
    /// (user, key): `API_KEYS` entries `user:key`, or a bare `key` for the user `api`.
    pub api_keys: Vec<(String, String)>,
    pub allow_anonymous: bool,
}

impl AuthConfig {
    /// Parses `API_KEYS` (comma-separated `user:key` or `key`).
    pub fn parse_api_keys(list: &str) -> Vec<(String, String)> {
        list.split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(|entry| match entry.split_once(':') {
                Some((user, key)) if !user.is_empty() && !key.is_empty() => {
                    (user.to_string(), key.to_string())
                }
                _ => ("api".to_string(), entry.to_string()),
            })
            .collect()
    }

    /// The user behind an `Authorization` header value (or its absence), at `now_s`.
    pub fn user(&self, authorization: Option<&str>, now_s: i64) -> Result<String, ApiError> {
        let Some(header) = authorization.map(str::trim).filter(|h| !h.is_empty()) else {
            return if self.allow_anonymous {
                Ok(ANONYMOUS.to_string())
            } else {
                Err(ApiError::Unauthorized(
                    "send `Authorization: Bearer <token>` (a JWT or a server key)".into(),
                ))
            };
        };
        let token = header
            .strip_prefix("Bearer ")
            .or_else(|| header.strip_prefix("bearer "))
            .map(str::trim)
            .ok_or_else(|| {
                ApiError::Unauthorized("the Authorization header must be `Bearer <token>`".into())
            })?;
        // Compare keys in constant time: through an HMAC of each, so timing says nothing.
        if let Some((user, _)) = self
            .api_keys
            .iter()
            .find(|(_, key)| same_secret(key, token))
        {
            return Ok(user.clone());
        }
        match &self.jwt_secret {
            Some(secret) if token.matches('.').count() == 2 => verify_jwt(token, secret, now_s),
            _ => Err(ApiError::Unauthorized(
                "the token is not a valid key or JWT".into(),
            )),
        }
    }
}

fn same_secret(a: &str, b: &str) -> bool {
    let tag = |s: &str| {
        mac(b"edge-agent key comparison").map(|mut m| {
            m.update(s.as_bytes());
            m.finalize().into_bytes()
        })
    };
    match (tag(a), tag(b)) {
        (Some(x), Some(y)) => {
            x.iter()
                .zip(y.iter())
                .fold(0u8, |acc, (p, q)| acc | (p ^ q))
                == 0
        }
        _ => false,
    }
}

/// An HMAC-SHA256 keyed with `key` (it takes keys of any length, so this is always `Some`).
fn mac(key: &[u8]) -> Option<Hmac<Sha256>> {
    Hmac::<Sha256>::new_from_slice(key).ok()
}

#[derive(Deserialize)]
struct Header {
    alg: String,
}

#[derive(Deserialize)]
struct Claims {
    sub: Option<String>,
    exp: Option<f64>,
    nbf: Option<f64>,
}

fn verify_jwt(token: &str, secret: &str, now_s: i64) -> Result<String, ApiError> {
    let invalid = |why: &str| ApiError::Unauthorized(format!("invalid JWT: {why}"));
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(signature)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(invalid("expected header.payload.signature"));
    };
    let decode = |part: &str| URL_SAFE_NO_PAD.decode(part.trim_end_matches('='));
    let header: Header = decode(header)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|s| serde_json::from_str(&s).ok())
        .ok_or_else(|| invalid("unreadable header"))?;
    if header.alg != "HS256" {
        return Err(invalid(&format!(
            "algorithm {} is not accepted (HS256 only)",
            header.alg
        )));
    }
    let signature = decode(signature).map_err(|_| invalid("unreadable signature"))?;
    let mut check = mac(secret.as_bytes()).ok_or_else(|| invalid("unusable JWT_SECRET"))?;
    check.update(&token.as_bytes()[..token.rfind('.').unwrap_or(0)]);
    check
        .verify_slice(&signature)
        .map_err(|_| invalid("bad signature"))?;
    let claims: Claims = decode(payload)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|s| serde_json::from_str(&s).ok())
        .ok_or_else(|| invalid("unreadable claims"))?;
    if let Some(exp) = claims.exp {
        if (exp as i64) + LEEWAY_S <= now_s {
            return Err(invalid("expired"));
        }
    }
    if let Some(nbf) = claims.nbf {
        if (nbf as i64) - LEEWAY_S > now_s {
            return Err(invalid("not valid yet"));
        }
    }
    claims
        .sub
        .filter(|s| !s.is_empty())
        .ok_or_else(|| invalid("no `sub` claim"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Signs claims as an HS256 JWT (test helper; the Worker only verifies).
    pub fn jwt(claims: &str, secret: &str) -> String {
        let header = URL_SAFE_NO_PAD.encode(r#"{"alg":"HS256","typ":"JWT"}"#);
        let payload = URL_SAFE_NO_PAD.encode(claims);
        let mut m = mac(secret.as_bytes()).unwrap();
        m.update(format!("{header}.{payload}").as_bytes());
        let sig = URL_SAFE_NO_PAD.encode(m.finalize().into_bytes());
        format!("{header}.{payload}.{sig}")
    }

    const NOW: i64 = 1_795_241_405;

    fn config() -> AuthConfig {
        AuthConfig {
            jwt_secret: Some("s3cret".into()),
            api_keys: AuthConfig::parse_api_keys("backend:sk-live-1, sk-bare"),
            allow_anonymous: false,
        }
    }

    fn user(header: Option<&str>) -> Result<String, String> {
        config().user(header, NOW).map_err(|e| e.to_string())
    }

    #[test]
    fn a_valid_jwt_names_its_subject() {
        let token = jwt(
            &format!(r#"{{"sub":"alice","exp":{},"nbf":{}}}"#, NOW + 60, NOW - 60),
            "s3cret",
        );
        assert_eq!(user(Some(&format!("Bearer {token}"))), Ok("alice".into()));
    }

    #[test]
    fn bad_jwts_are_refused_with_the_reason() {
        let cases = [
            (jwt(r#"{"sub":"alice"}"#, "wrong"), "bad signature"),
            (
                jwt(
                    &format!(r#"{{"sub":"alice","exp":{}}}"#, NOW - 3600),
                    "s3cret",
                ),
                "expired",
            ),
            (
                jwt(
                    &format!(r#"{{"sub":"alice","nbf":{}}}"#, NOW + 3600),
                    "s3cret",
                ),
                "not valid yet",
            ),
            (jwt(r#"{"name":"alice"}"#, "s3cret"), "no `sub` claim"),
        ];
        for (token, why) in cases {
            let e = user(Some(&format!("Bearer {token}"))).unwrap_err();
            assert!(e.contains(why), "{e} should say {why}");
        }
        // alg=none, signature stripped
        let none = format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#),
            URL_SAFE_NO_PAD.encode(r#"{"sub":"mallory"}"#)
        );
        assert!(user(Some(&format!("Bearer {none}")))
            .unwrap_err()
            .contains("HS256 only"));
    }

    #[test]
    fn server_keys_and_anonymous_access() {
        assert_eq!(user(Some("Bearer sk-live-1")), Ok("backend".into()));
        assert_eq!(user(Some("Bearer sk-bare")), Ok("api".into()));
        assert!(user(Some("Bearer sk-live-2")).is_err());
        assert!(user(Some("Basic abc")).unwrap_err().contains("Bearer"));
        assert!(user(None).unwrap_err().contains("Authorization"));
        let open = AuthConfig {
            allow_anonymous: true,
            ..config()
        };
        assert_eq!(open.user(None, NOW).unwrap(), ANONYMOUS);
    }
}
