//! The Worker's typed client for a conversation's object: one method per route of the object.

use worker::{Env, Headers, Method, Request, Response, Stub};

use crate::agent::schedules::Schedule;
use crate::edge::error::ApiError;
use crate::edge::platform::fetch::new_request;
use crate::edge::protocol::{route, Handover, Status, BINDING, REQUEST_ID};

/// The object of one conversation.
pub struct ConversationClient {
    stub: Stub,
    /// The Worker request this acts for, passed on so the object's log lines and error
    /// messages name it.
    request_id: Option<String>,
}

impl ConversationClient {
    pub fn for_conversation(env: &Env, conversation_id: &str) -> Result<Self, ApiError> {
        let stub = env.durable_object(BINDING)?.get_by_name(conversation_id)?;
        Ok(Self {
            stub,
            request_id: None,
        })
    }

    pub fn for_request(mut self, request_id: &str) -> Self {
        self.request_id = Some(request_id.to_string());
        self
    }

    /// Hands a message, answers or a retry over; the object's answer is the client's.
    pub async fn send(&self, send: &Handover) -> Result<Response, ApiError> {
        let body = serde_json::to_string(send)?;
        let response = self.request(Method::Post, route::SEND, Some(body)).await?;
        relay(response)
    }

    /// The running turn's stream from its start (200), or 204 when no turn runs.
    pub async fn stream(&self) -> Result<Response, ApiError> {
        let response = self.request(Method::Get, route::STREAM, None).await?;
        relay(response)
    }

    /// Stops the running turn at once: `false` when no turn runs.
    pub async fn cancel(&self) -> Result<bool, ApiError> {
        let answer: serde_json::Value = self.json(Method::Post, route::CANCEL).await?;
        Ok(answer["cancelling"] == true)
    }

    /// Stops a running turn and forgets the queue, the log and what a pause waited for (the
    /// conversation of `owner` is being deleted); the object refuses messages until
    /// [`ConversationClient::forget`].
    pub async fn clear(&self, conversation: &str, owner: &str) -> Result<(), ApiError> {
        let body = serde_json::json!({ "conversation": conversation, "owner": owner });
        let mut response = self
            .request(Method::Post, route::CLEAR, Some(body.to_string()))
            .await?;
        if response.status_code() != 200 {
            let text = response.text().await.unwrap_or_default();
            return Err(ApiError::Internal(format!(
                "conversation object /clear answered {}: {text}",
                response.status_code()
            )));
        }
        Ok(())
    }

    /// The conversation's D1 rows are gone: the object may forget it was deleted.
    pub async fn forget(&self) -> Result<(), ApiError> {
        let _: serde_json::Value = self.json(Method::Post, route::FORGET).await?;
        Ok(())
    }

    /// The conversation's schedules: created (`POST`, a [`ScheduleHandover`]), listed (`GET`),
    /// cancelled (`DELETE`, `id`); the object's answer is the client's.
    ///
    /// [`ScheduleHandover`]: crate::edge::protocol::ScheduleHandover
    pub async fn schedules(
        &self,
        method: Method,
        id: Option<&str>,
        body: Option<String>,
    ) -> Result<Response, ApiError> {
        let route = match id {
            Some(id) => format!("{}{id}", route::SCHEDULE),
            None => route::SCHEDULES.to_string(),
        };
        relay(self.request(method, &route, body).await?)
    }

    /// The conversation's schedules, as its object lists them (for the export).
    pub async fn list_schedules(&self) -> Result<Vec<Schedule>, ApiError> {
        struct Listed {
            schedules: Vec<Schedule>,
        }

        crate::json_struct!(Listed {
            "schedules" => schedules,
        });
        let listed: Listed = self.json(Method::Get, route::SCHEDULES).await?;
        Ok(listed.schedules)
    }

    pub async fn status(&self) -> Result<Status, ApiError> {
        self.json(Method::Get, route::STATUS).await
    }

    async fn json<R: crate::llm::json::FromJsonOwned>(
        &self,
        method: Method,
        route: &str,
    ) -> Result<R, ApiError> {
        Ok(crate::llm::json::from_str(
            &self.text(method, route).await?,
        )?)
    }

    /// The object's answer to a request without a body, which must be a 200 (not generic: one
    /// copy of the waiting serves every answer's type).
    async fn text(&self, method: Method, route: &str) -> Result<String, ApiError> {
        let mut response = self.request(method, route, None).await?;
        if response.status_code() != 200 {
            let text = response.text().await.unwrap_or_default();
            return Err(ApiError::Internal(format!(
                "conversation object {route} answered {}: {text}",
                response.status_code()
            )));
        }
        Ok(response.text().await?)
    }

    async fn request(
        &self,
        method: Method,
        route: &str,
        body: Option<String>,
    ) -> Result<Response, ApiError> {
        let request_id = self.request_id.as_deref().map(|id| (REQUEST_ID, id));
        let request = new_request(
            method.as_ref(),
            &format!("https://conversation{route}"),
            request_id.as_slice(),
            body.as_deref(),
            None,
        )
        .map_err(ApiError::Internal)?;
        Ok(self.stub.fetch_with_request(Request::from(request)).await?)
    }
}

/// The object's response with headers the Worker may add to (a fetched response's are
/// immutable). The body passes through untouched: the Worker never handles the stream's chunks.
fn relay(response: Response) -> Result<Response, ApiError> {
    let status = response.status_code();
    let headers = Headers::new();
    for (name, value) in response.headers().entries() {
        headers.set(&name, &value)?;
    }
    let (_, body) = response.into_parts();
    Ok(Response::from_body(body)?
        .with_status(status)
        .with_headers(headers))
}
