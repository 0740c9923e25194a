//! The resolver's way to a user's spend object.

use worker::{Env, Method, Request, Stub};

use super::{Ask, Charge, Renew, Reply, Settle, BINDING};
use crate::edge::error::ApiError;
use crate::edge::platform::fetch::new_request;

/// The resolver's way to a user's spend object.
pub struct SpendClient {
    stub: Stub,
}

impl SpendClient {
    /// The spend object of `user`.
    pub fn for_user(env: &Env, user: &str) -> Result<Self, ApiError> {
        let namespace = env.durable_object(BINDING).map_err(|_| {
            ApiError::Internal(format!(
                "USER_BUDGET_USD needs the `{BINDING}` Durable Object binding (class `UserSpend`, see wrangler.toml)"
            ))
        })?;
        Ok(Self {
            stub: namespace.get_by_name(user)?,
        })
    }

    /// Reserves a call's worst case.
    pub async fn reserve(&self, ask: &Ask) -> Result<Reply, ApiError> {
        let text = self.post("reserve", &serde_json::to_string(ask)?).await?;
        Ok(crate::llm::json::from_str(&text)?)
    }

    /// Renews a call's reservation while it streams; `false` when the object holds none for
    /// it any more (then there is nothing to renew).
    pub async fn renew(&self, call: &str) -> Result<bool, ApiError> {
        let renew = Renew {
            call: call.to_string(),
        };
        let text = self.post("renew", &serde_json::to_string(&renew)?).await?;
        Ok(crate::llm::json::from_str(&text)?)
    }

    /// Charges an attempt given up on; what is spent and held now, if the call's reservation
    /// is still held (see [`super::Spend::charge`]).
    pub async fn charge(&self, charge: &Charge) -> Result<Option<f64>, ApiError> {
        let text = self.post("charge", &serde_json::to_string(charge)?).await?;
        Ok(crate::llm::json::from_str(&text)?)
    }

    /// Settles a call that ended (or charges a cost that held nothing).
    pub async fn settle(&self, settle: &Settle) -> Result<(), ApiError> {
        self.post("settle", &serde_json::to_string(settle)?).await?;
        Ok(())
    }

    async fn post(&self, route: &str, body: &str) -> Result<String, ApiError> {
        let request = new_request(
            Method::Post.as_ref(),
            &format!("https://spend/{route}"),
            &[] as &[(&str, &str)],
            Some(body),
            None,
        )
        .map_err(ApiError::Internal)?;
        let mut response = self.stub.fetch_with_request(Request::from(request)).await?;
        let text = response.text().await?;
        if response.status_code() >= 300 {
            return Err(ApiError::Internal(format!(
                "spend object /{route} answered {}: {text}",
                response.status_code()
            )));
        }
        Ok(text)
    }
}
