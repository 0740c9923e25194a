//! `POST /v1/conversations/{id}/messages` (run or queue a turn) and
//! `GET /v1/conversations/{id}/messages` (history).

use worker::{Env, Request, Response};

use super::client_tools::{client_tools, yes, ClientTool};
use super::owned;
use crate::agent::output::OutputSpec;
use crate::agent::AgentMessage;
use crate::edge::config::Config;
use crate::edge::conversation::client::ConversationClient;
use crate::edge::d1::{Conversation, Store};
use crate::edge::error::ApiError;
use crate::edge::gateway::attachments::{
    kept_if_taken, message_body_limit, user_message, FileIn, Piece, Source, Upload,
};
use crate::edge::gateway::body::{body_text, json_body, json_text};
use crate::edge::json_response;
use crate::edge::platform::ids::new_id;
use crate::edge::platform::providers::provider_for;
use crate::edge::protocol::{
    body_digest, check_key, keyed_id, ApprovalIn, Delivery, Handover, Keyed, ToolResultIn,
    TurnConversation, TurnRequest, ELSEWHERE, UNKNOWN_CONVERSATION,
};
use crate::llm::json::{self, FromJson, Reader};
use crate::llm::ToolDef;

struct SendBody {
    message: Option<UserContent>,
    /// Tools the client runs, offered to the model for this turn.
    tools: Vec<ClientTool>,
    /// Results for the client tool calls a paused turn waits on.
    tool_results: Vec<ToolResultIn>,
    /// Decisions on the calls a paused turn waits to have approved.
    approvals: Vec<ApprovalIn>,
    delivery: DeliveryRequest,
    /// `false` returns the whole turn as JSON instead of streaming it.
    stream: bool,
    /// Narrows the turn this message starts to these of the conversation's toolsets.
    toolsets: Option<Vec<String>>,
    /// The typed answer the turn this message starts ends with.
    output: Option<serde_json::Value>,
}

crate::json_struct!(SendBody {
    "message" => message,
    "tools" => tools: default,
    "tool_results" => tool_results: default,
    "approvals" => approvals: default,
    "delivery" => delivery: default,
    "stream" => stream: default_to(yes),
    "toolsets" => toolsets,
    "output" => output: default,
});

/// A request's typed answer (`output`), refused with what is wrong and where (a JSON pointer
/// into it). Whether the conversation's model can give it is checked where the model is known.
pub(crate) fn check_output(output: Option<&serde_json::Value>) -> Result<(), ApiError> {
    match output.map(OutputSpec::parse) {
        Some(Err(e)) => Err(ApiError::BadRequest(e.to_string())),
        _ => Ok(()),
    }
}

/// How a message joins a running turn: `auto` and `steer` before its next tool call,
/// `followup` when it would end. With no turn running, all three start one.
#[derive(Default, Clone, Copy)]
enum DeliveryRequest {
    #[default]
    Auto,
    Steer,
    Followup,
}

crate::json_enum!(DeliveryRequest { "auto" => Auto, "steer" => Steer, "followup" => Followup });

/// `"text"` or `[{"type": "text", "text": "..."}, {"type": "file", ...}]`.
enum UserContent {
    Text(String),
    Parts(Vec<Part>),
}

/// One part of a message: `{type: "text", text}` or `{type: "file", media_type, data (base64)
/// or url, filename}`.
struct Part {
    kind: String,
    text: Option<String>,
    media_type: Option<String>,
    data: Option<String>,
    url: Option<String>,
    filename: Option<String>,
}

crate::json_struct!(Part {
    "type" => kind,
    "text" => text,
    "media_type" => media_type,
    "data" => data,
    "url" => url,
    "filename" => filename,
});

/// Text, or a list of parts whose `type` is `text` or `file`.
impl<'a> FromJson<'a> for UserContent {
    fn read(r: &mut Reader<'a>) -> json::Result<Self> {
        match r.peek_kind()? {
            b'"' => String::read(r).map(UserContent::Text),
            b'[' => {
                let parts: Vec<Part> = Vec::read(r)?;
                if let Some(part) = parts.iter().find(|p| p.kind != "text" && p.kind != "file") {
                    return Err(r.unknown_name("variant", &part.kind, &["text", "file"]));
                }
                Ok(UserContent::Parts(parts))
            }
            _ => Err(r.invalid_type("text or a list of `text` and `file` parts")),
        }
    }
}

impl UserContent {
    /// The message's pieces in order; a part that is neither whole text nor a whole file is
    /// refused, naming its place.
    fn pieces(self) -> Result<Vec<Piece>, ApiError> {
        let parts = match self {
            UserContent::Text(text) => return Ok(vec![Piece::Text(text)]),
            UserContent::Parts(parts) => parts,
        };
        parts
            .into_iter()
            .enumerate()
            .map(|(n, part)| match (part.kind.as_str(), part.text) {
                ("text", Some(text)) => Ok(Piece::Text(text)),
                ("text", None) => Err(ApiError::BadRequest(format!(
                    "`message` part {} is a text part without `text`",
                    n + 1
                ))),
                _ => {
                    let source = match (part.data, part.url) {
                        (Some(data), None) => Source::Base64(data),
                        (None, Some(url)) => Source::Url(url),
                        _ => {
                            return Err(ApiError::BadRequest(format!(
                                "`message` part {} is a file part: it needs `data` (base64) or \
                                 `url`, one of them",
                                n + 1
                            )))
                        }
                    };
                    Ok(Piece::File(FileIn {
                        name: part.filename,
                        declared: part.media_type,
                        source,
                    }))
                }
            })
            .collect()
    }
}

pub async fn send(
    req: Request,
    env: &Env,
    config: &Config,
    user: &str,
    id: &str,
    request_id: &str,
) -> Result<Response, ApiError> {
    let key = req.headers().get("idempotency-key")?;
    let traceparent = super::traceparent(&req);
    if let Some(key) = &key {
        check_key(key, "Idempotency-Key")?;
    }
    let text = body_text(req, message_body_limit(config)).await?;
    // What the key is kept with: the same key with another body is refused.
    let keyed = key.map(|key| Keyed {
        key,
        body: body_digest(text.as_bytes()),
    });
    let mut body: SendBody = json_text(if text.is_empty() { "{}" } else { &text })?;
    check_output(body.output.as_ref())?;
    // The parsed body holds what it needs; the text would be a second copy of its files.
    drop(text);
    let resuming = !body.tool_results.is_empty() || !body.approvals.is_empty();
    let message = match body.message.take() {
        // Answers end a pause and a message starts a turn: one request may not do both, or a
        // failure between them would lose the answers.
        Some(_) if resuming => {
            return Err(ApiError::BadRequest(
                "send `tool_results` / `approvals` and a new `message` in separate requests: \
                 the answers first, then the message"
                    .into(),
            ))
        }
        Some(content) => {
            let pieces = content.pieces()?;
            if let Some(keyed) = keyed.as_ref().filter(|_| carries_files(&pieces)) {
                let message_id = keyed_id(user, id, &keyed.key);
                let probe = ConversationClient::for_conversation(env, id)?.for_request(request_id);
                if let Some(repeat) = probe_keyed(&probe, user, message_id, keyed).await? {
                    return Ok(repeat);
                }
            }
            let upload = Upload {
                owner: user,
                conversation: id,
            };
            Some(user_message(env, config, upload, pieces).await?)
        }
        None if resuming => None,
        None => {
            return Err(ApiError::BadRequest(
                "`message` is required (or `tool_results` / `approvals` for a paused turn)".into(),
            ))
        }
    };
    let (message, files) = match message {
        Some((message, files)) => (Some(message), files),
        None => (None, Vec::new()),
    };
    let answer = deliver(
        env,
        config,
        (user, id, request_id),
        body,
        keyed,
        (message, traceparent),
    )
    .await;
    kept_if_taken(env, user, &files, answer).await
}

/// Whether a message's pieces include a file.
pub(crate) fn carries_files(pieces: &[Piece]) -> bool {
    pieces.iter().any(|p| matches!(p, Piece::File(_)))
}

/// Asks the conversation's object whether keyed message `message_id` was taken before, before
/// its files are stored: `Some` is the object's answer to the repeat (or its refusal: the key
/// with another body, or in use right now), for the client; `None`, a new message.
pub(crate) async fn probe_keyed(
    object: &ConversationClient,
    caller: &str,
    message_id: String,
    keyed: &Keyed,
) -> Result<Option<Response>, ApiError> {
    let answer = object
        .send(&Handover {
            conversation: None,
            caller: caller.to_string(),
            request: TurnRequest::Message {
                id: message_id,
                message: AgentMessage::User { content: vec![] },
                delivery: Delivery::Steering,
                keyed: Some(keyed.clone()),
            },
            client_tools: vec![],
            stream: true,
            toolsets: None,
            chat: None,
            output: None,
            probe: true,
            from_parent: false,
            traceparent: None,
        })
        .await?;
    // Unknown there (204), or an object that keeps no conversation of the caller's: the send
    // itself finds out.
    Ok(match answer.status_code() {
        204 | 404 | UNKNOWN_CONVERSATION | ELSEWHERE => None,
        _ => Some(answer),
    })
}

/// Hands the send to the conversation's object (resolving the conversation in D1 when the
/// object keeps none).
async fn deliver(
    env: &Env,
    config: &Config,
    (user, id, request_id): (&str, &str, &str),
    body: SendBody,
    keyed: Option<Keyed>,
    (message, traceparent): (Option<AgentMessage>, Option<String>),
) -> Result<Response, ApiError> {
    let client_tools = client_tools(body.tools)?;
    let request = match message {
        None => TurnRequest::Resume {
            results: body.tool_results,
            approvals: body.approvals,
            only_pending: false,
        },
        Some(message) => TurnRequest::Message {
            id: match &keyed {
                Some(keyed) => keyed_id(user, id, &keyed.key),
                None => new_id()?,
            },
            keyed,
            message,
            delivery: match body.delivery {
                DeliveryRequest::Auto | DeliveryRequest::Steer => Delivery::Steering,
                DeliveryRequest::Followup => Delivery::Followup,
            },
        },
    };
    let object = ConversationClient::for_conversation(env, id)?.for_request(request_id);
    let mut send = Handover {
        conversation: None,
        caller: user.to_string(),
        request,
        client_tools,
        stream: body.stream,
        toolsets: body.toolsets,
        chat: None,
        output: body.output,
        probe: false,
        from_parent: false,
        traceparent,
    };
    // The conversation's object checks the caller against the conversation it keeps; only an
    // object that keeps none (a first message, or a narrowed turn, which needs the row) makes
    // the Worker read D1 first.
    if send.toolsets.is_none() {
        let answer = object.send(&send).await?;
        // 404: the object keeps someone else's conversation; `id` may still name one of the
        // caller's (a `/v1/chat` id), which D1 resolves.
        if !matches!(answer.status_code(), UNKNOWN_CONVERSATION | 404) {
            return Ok(answer);
        }
    }
    let conversation = owned(env, user, id).await?;
    let object = if conversation.id == id {
        object
    } else {
        ConversationClient::for_conversation(env, &conversation.id)?.for_request(request_id)
    };
    let turn = TurnConversation::from(&conversation);
    if let Some(narrowed) = &send.toolsets {
        config.check_toolsets(narrowed)?;
        if let Some(own) = &conversation.toolsets {
            // The conversation's choice, not the request, is what it conflicts with.
            if let Some(other) = narrowed.iter().find(|n| !own.contains(n)) {
                return Err(ApiError::Conflict(format!(
                    "`{other}` is not one of this conversation's toolsets ({})",
                    own.join(", ")
                )));
            }
        }
        turn.agent(config)?.check_toolsets(narrowed)?;
    }
    send.conversation = Some(checked_turn(env, turn, config)?);
    object.send(&send).await
}

/// The conversation as a turn needs it, refused with a 400 when no provider serves its model.
fn checked(
    env: &Env,
    conversation: &Conversation,
    config: &Config,
) -> Result<TurnConversation, ApiError> {
    checked_turn(env, TurnConversation::from(conversation), config)
}

pub(crate) fn checked_turn(
    env: &Env,
    conversation: TurnConversation,
    config: &Config,
) -> Result<TurnConversation, ApiError> {
    let model = conversation.model(config)?;
    provider_for(env, config, &model, None).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    Ok(conversation)
}

/// Hands a request to the conversation's object, whose answer (the turn's stream, 202, or an
/// error) is the client's.
pub(crate) async fn hand_over(
    env: &Env,
    conversation: &Conversation,
    request: TurnRequest,
    (client_tools, toolsets, output): (
        Vec<ToolDef>,
        Option<Vec<String>>,
        Option<serde_json::Value>,
    ),
    stream: bool,
    (config, request_id, traceparent): (&Config, &str, Option<String>),
) -> Result<Response, ApiError> {
    ConversationClient::for_conversation(env, &conversation.id)?
        .for_request(request_id)
        .send(&Handover {
            conversation: Some(checked(env, conversation, config)?),
            caller: conversation.owner.clone(),
            request,
            client_tools,
            stream,
            toolsets,
            chat: None,
            output,
            probe: false,
            from_parent: false,
            traceparent,
        })
        .await
}

#[derive(Default)]
struct Retry {
    stream: bool,
    /// The typed answer the retried turn ends with (as a message's would).
    output: Option<serde_json::Value>,
}

crate::json_struct!(#[deny_unknown_fields] Retry {
    "stream" => stream: default_to(yes),
    "output" => output: default,
});

/// `POST /v1/conversations/{id}/retry`: runs the last user message again. What followed it stays
/// in the history, marked superseded, and is never sent to a model again.
pub async fn retry(
    req: Request,
    env: &Env,
    config: &Config,
    user: &str,
    id: &str,
    request_id: &str,
) -> Result<Response, ApiError> {
    let traceparent = super::traceparent(&req);
    let body: Retry = json_body(req).await?;
    check_output(body.output.as_ref())?;
    let conversation = owned(env, user, id).await?;
    hand_over(
        env,
        &conversation,
        TurnRequest::Retry,
        (Vec::new(), None, body.output),
        body.stream,
        (config, request_id, traceparent),
    )
    .await
}

pub async fn list(req: &Request, env: &Env, user: &str, id: &str) -> Result<Response, ApiError> {
    let store = Store::for_owner(env, user).await?;
    let conversation = store
        .conversation(user, id)
        .await?
        .ok_or_else(|| ApiError::conversation_not_found(id))?;
    let id = conversation.id.as_str();
    let mut after = 0i64;
    let mut limit = 100i64;
    for (key, value) in super::query_pairs(req) {
        match key.as_str() {
            "after" => after = super::query_int("after", &value, 0, super::MAX_QUERY_INT)?,
            "limit" => limit = super::query_int("limit", &value, 1, 500)?,
            _ => {}
        }
    }
    let (messages, next) = store.history_page(id, after, limit).await?;
    json_response(
        200,
        &serde_json::json!({"messages": messages, "next_cursor": next.map(|n| n.to_string())}),
    )
}
