//! Who is calling: `Authorization: Bearer <token>`, where the token is a server key from
//! `API_KEYS` or an HS256 JWT signed with `JWT_SECRET` (its `sub` is the user; `exp` is required,
//! `nbf` checked, and `iss` / `aud` when `JWT_ISSUER` / `JWT_AUDIENCE` are set). Without a
//! token, only `ALLOW_ANONYMOUS=true` lets a request through, as the user `anonymous`. Pure logic
//! over strings, so it is tested natively.
//!
//! The two kinds of user never meet: a server key's user is `key:<name>`, and a JWT whose `sub`
//! starts with `key:` or is `anonymous` is refused, so no token can act as another kind's user.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::edge::config::access::{AuthConfig, ANONYMOUS, KEY_USER_PREFIX};
use crate::edge::error::ApiError;
use crate::llm::json::{self, FromJson, Reader};

/// Clock skew tolerated on `exp` and `nbf`, in seconds.
const LEEWAY_S: i64 = 30;

/// Who a request acts for.
#[derive(Debug, Clone, PartialEq)]
pub struct Caller {
    pub user: String,
    /// Came with a server key marked admin.
    pub admin: bool,
}

impl AuthConfig {
    /// The user behind an `Authorization` header value (or its absence), at `now_s`.
    pub fn user(&self, authorization: Option<&str>, now_s: i64) -> Result<String, ApiError> {
        self.caller(authorization, now_s).map(|c| c.user)
    }

    /// The caller behind an `Authorization` header value (or its absence), at `now_s`.
    pub fn caller(&self, authorization: Option<&str>, now_s: i64) -> Result<Caller, ApiError> {
        let Some(header) = authorization.map(str::trim).filter(|h| !h.is_empty()) else {
            return if self.allow_anonymous {
                Ok(Caller {
                    user: ANONYMOUS.to_string(),
                    admin: false,
                })
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
        if let Some(key) = self.api_keys.iter().find(|k| same_secret(&k.key, token)) {
            return Ok(Caller {
                user: key.user.clone(),
                admin: key.admin,
            });
        }
        match &self.jwt_secret {
            Some(secret) if token.matches('.').count() == 2 => {
                let user = verify_jwt(token, secret, now_s, self)?;
                Ok(Caller { user, admin: false })
            }
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

struct Header {
    alg: String,
}

crate::json_struct!(Header {
    "alg" => alg,
});

struct Claims {
    sub: Option<String>,
    exp: Option<f64>,
    nbf: Option<f64>,
    iss: Option<String>,
    aud: Audience,
}

crate::json_struct!(Claims {
    "sub" => sub,
    "exp" => exp,
    "nbf" => nbf,
    "iss" => iss,
    "aud" => aud: default,
});

/// `aud`: one string or a list of them.
#[derive(Default)]
struct Audience(Vec<String>);

impl<'a> FromJson<'a> for Audience {
    fn read(r: &mut Reader<'a>) -> json::Result<Self> {
        let value = serde_json::Value::read(r)?;
        Ok(Audience(match value {
            serde_json::Value::String(one) => vec![one],
            serde_json::Value::Array(many) => many
                .into_iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect(),
            _ => Vec::new(),
        }))
    }
}

fn verify_jwt(
    token: &str,
    secret: &str,
    now_s: i64,
    config: &AuthConfig,
) -> Result<String, ApiError> {
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
        .and_then(|s| crate::llm::json::from_str(&s).ok())
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
        .and_then(|s| crate::llm::json::from_str(&s).ok())
        .ok_or_else(|| invalid("unreadable claims"))?;
    // A token without an expiry would be good forever once leaked.
    let exp = claims.exp.ok_or_else(|| invalid("no `exp` claim"))?;
    if (exp as i64) + LEEWAY_S <= now_s {
        return Err(invalid("expired"));
    }
    if let Some(nbf) = claims.nbf {
        if (nbf as i64) - LEEWAY_S > now_s {
            return Err(invalid("not valid yet"));
        }
    }
    if let Some(issuer) = &config.jwt_issuer {
        if claims.iss.as_deref() != Some(issuer.as_str()) {
            return Err(invalid("`iss` is not the expected issuer"));
        }
    }
    if let Some(audience) = &config.jwt_audience {
        if !claims.aud.0.iter().any(|a| a == audience) {
            return Err(invalid("`aud` does not name this service"));
        }
    }
    let sub = claims
        .sub
        .filter(|s| !s.is_empty())
        .ok_or_else(|| invalid("no `sub` claim"))?;
    if sub.starts_with(KEY_USER_PREFIX) || sub == ANONYMOUS {
        return Err(invalid(&format!(
            "`sub` may not be `{ANONYMOUS}` or start with `{KEY_USER_PREFIX}` (reserved)"
        )));
    }
    Ok(sub)
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
            api_keys: AuthConfig::parse_api_keys("backend:sk-live-1, sk-bare, ops:sk-ops:admin"),
            ..AuthConfig::default()
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
            (jwt(r#"{"sub":"alice","exp":1}"#, "wrong"), "bad signature"),
            (
                jwt(
                    &format!(r#"{{"sub":"alice","exp":{}}}"#, NOW - 3600),
                    "s3cret",
                ),
                "expired",
            ),
            (
                jwt(
                    &format!(
                        r#"{{"sub":"alice","nbf":{},"exp":{}}}"#,
                        NOW + 3600,
                        NOW + 7200
                    ),
                    "s3cret",
                ),
                "not valid yet",
            ),
            (
                jwt(
                    &format!(r#"{{"name":"alice","exp":{}}}"#, NOW + 60),
                    "s3cret",
                ),
                "no `sub` claim",
            ),
            (jwt(r#"{"sub":"alice"}"#, "s3cret"), "no `exp` claim"),
            // A JWT cannot act as a server key's user or as anonymous.
            (
                jwt(
                    &format!(r#"{{"sub":"key:backend","exp":{}}}"#, NOW + 60),
                    "s3cret",
                ),
                "reserved",
            ),
            (
                jwt(
                    &format!(r#"{{"sub":"anonymous","exp":{}}}"#, NOW + 60),
                    "s3cret",
                ),
                "reserved",
            ),
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
    fn issuer_and_audience_are_checked_when_configured() {
        let strict = AuthConfig {
            jwt_issuer: Some("https://id.example".into()),
            jwt_audience: Some("edge-agent".into()),
            ..config()
        };
        let check = |claims: &str| {
            strict
                .user(Some(&format!("Bearer {}", jwt(claims, "s3cret"))), NOW)
                .map_err(|e| e.to_string())
        };
        let exp = NOW + 60;
        assert_eq!(
            check(&format!(
                r#"{{"sub":"alice","exp":{exp},"iss":"https://id.example","aud":["x","edge-agent"]}}"#
            )),
            Ok("alice".into())
        );
        assert!(check(&format!(
            r#"{{"sub":"alice","exp":{exp},"iss":"https://evil.example","aud":"edge-agent"}}"#
        ))
        .unwrap_err()
        .contains("issuer"));
        assert!(check(&format!(
            r#"{{"sub":"alice","exp":{exp},"iss":"https://id.example","aud":"other"}}"#
        ))
        .unwrap_err()
        .contains("aud"));
        assert!(check(&format!(r#"{{"sub":"alice","exp":{exp}}}"#))
            .unwrap_err()
            .contains("issuer"));
    }

    #[test]
    fn server_keys_and_anonymous_access() {
        assert_eq!(user(Some("Bearer sk-live-1")), Ok("key:backend".into()));
        assert_eq!(user(Some("Bearer sk-bare")), Ok("key:api".into()));
        let ops = config().caller(Some("Bearer sk-ops"), NOW).unwrap();
        assert_eq!((ops.user.as_str(), ops.admin), ("key:ops", true));
        assert!(
            !config()
                .caller(Some("Bearer sk-live-1"), NOW)
                .unwrap()
                .admin
        );
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
