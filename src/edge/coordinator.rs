//! The Worker's typed client for the conversation Durable Object, and the messages they
//! exchange. Queued messages travel as their stored JSON, so the object never parses them.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use worker::{Env, Method, Request, RequestInit, Stub};

use super::error::ApiError;
use crate::agent::AgentMessage;

pub const BINDING: &str = "CONVERSATIONS";

/// When a message sent during a turn joins it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Delivery {
    /// Before the next tool call (the remaining calls are skipped).
    Steering,
    /// When the turn would end.
    Followup,
}

impl Delivery {
    pub fn as_str(self) -> &'static str {
        match self {
            Delivery::Steering => "steering",
            Delivery::Followup => "followup",
        }
    }
}

#[derive(Serialize, Deserialize)]
pub struct Submit {
    pub turn_id: String,
    /// `None` asks for the lease only (a retry): refused while a turn runs, never queued.
    pub message: Option<String>,
    pub delivery: Delivery,
    pub ttl_ms: i64,
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Submitted {
    /// This request runs the turn; `stranded` are messages a dead turn left queued.
    Acquired { stranded: Vec<String> },
    /// A turn is running; the message waits for it.
    Queued { delivery: Delivery, position: i64 },
    /// A turn is running and nothing was queued (a lease-only request).
    Busy,
}

#[derive(Serialize, Deserialize)]
pub struct Drain {
    pub turn_id: String,
    pub at_end: bool,
    pub ttl_ms: i64,
}

#[derive(Serialize, Deserialize)]
pub struct Drained {
    pub messages: Vec<String>,
    pub lease_lost: bool,
}

#[derive(Serialize, Deserialize)]
pub struct Renew {
    pub turn_id: String,
    pub ttl_ms: i64,
}

#[derive(Serialize, Deserialize)]
pub struct Renewed {
    pub held: bool,
    /// Someone asked this turn to stop.
    pub cancelled: bool,
}

#[derive(Serialize, Deserialize)]
pub struct Release {
    pub turn_id: String,
}

#[derive(Serialize, Deserialize)]
pub struct Status {
    pub running: bool,
    pub steering: i64,
    pub followup: i64,
}

/// The coordinator of one conversation.
pub struct Coordinator {
    stub: Stub,
    /// How long a lease lives without renewal. A turn renews it whenever it touches the
    /// coordinator and while it streams; a turn that dies frees the conversation after this.
    pub lease_ttl_ms: i64,
}

impl Coordinator {
    pub fn for_conversation(
        env: &Env,
        conversation_id: &str,
        lease_ttl_ms: u32,
    ) -> Result<Self, ApiError> {
        let stub = env.durable_object(BINDING)?.get_by_name(conversation_id)?;
        Ok(Self {
            stub,
            lease_ttl_ms: lease_ttl_ms.into(),
        })
    }

    pub async fn submit(
        &self,
        turn_id: &str,
        message: &AgentMessage,
        delivery: Delivery,
    ) -> Result<Submitted, ApiError> {
        let body = Submit {
            turn_id: turn_id.into(),
            message: Some(serde_json::to_string(message)?),
            delivery,
            ttl_ms: self.lease_ttl_ms,
        };
        self.post("submit", &body).await
    }

    pub async fn drain(&self, turn_id: &str, at_end: bool) -> Result<Vec<AgentMessage>, ApiError> {
        let drained: Drained = self
            .post(
                "drain",
                &Drain {
                    turn_id: turn_id.into(),
                    at_end,
                    ttl_ms: self.lease_ttl_ms,
                },
            )
            .await?;
        drained
            .messages
            .iter()
            .map(|m| serde_json::from_str(m).map_err(ApiError::from))
            .collect()
    }

    /// Extends the turn's lease; says whether it has been asked to stop.
    pub async fn renew(&self, turn_id: &str) -> Result<Renewed, ApiError> {
        let body = Renew {
            turn_id: turn_id.into(),
            ttl_ms: self.lease_ttl_ms,
        };
        self.post("renew", &body).await
    }

    /// Takes the lease without sending a message (a retry): `Busy` while a turn runs.
    pub async fn acquire(&self, turn_id: &str) -> Result<Submitted, ApiError> {
        let body = Submit {
            turn_id: turn_id.into(),
            message: None,
            delivery: Delivery::Steering,
            ttl_ms: self.lease_ttl_ms,
        };
        self.post("submit", &body).await
    }

    /// Asks the running turn to stop: `false` when no turn runs.
    pub async fn cancel(&self) -> Result<bool, ApiError> {
        let answer: serde_json::Value = self.post("cancel", &serde_json::json!({})).await?;
        Ok(answer["cancelling"] == true)
    }

    pub async fn release(&self, turn_id: &str) -> Result<(), ApiError> {
        let _: serde_json::Value = self
            .post(
                "release",
                &Release {
                    turn_id: turn_id.into(),
                },
            )
            .await?;
        Ok(())
    }

    /// Forgets the lease and the queue (the conversation is being deleted).
    pub async fn clear(&self) -> Result<(), ApiError> {
        let _: serde_json::Value = self.post("clear", &serde_json::json!({})).await?;
        Ok(())
    }

    pub async fn status(&self) -> Result<Status, ApiError> {
        let mut response = self
            .stub
            .fetch_with_str("https://coordinator/status")
            .await?;
        Ok(response.json().await?)
    }

    async fn post<B: Serialize, R: DeserializeOwned>(
        &self,
        route: &str,
        body: &B,
    ) -> Result<R, ApiError> {
        let mut init = RequestInit::new();
        init.with_method(Method::Post)
            .with_body(Some(serde_json::to_string(body)?.into()));
        let request = Request::new_with_init(&format!("https://coordinator/{route}"), &init)?;
        let mut response = self.stub.fetch_with_request(request).await?;
        if response.status_code() != 200 {
            let text = response.text().await.unwrap_or_default();
            return Err(ApiError::Internal(format!(
                "coordinator /{route} answered {}: {text}",
                response.status_code()
            )));
        }
        Ok(response.json().await?)
    }
}
