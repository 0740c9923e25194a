//! Declarative HTTP tools (`HTTP_TOOLS`): a tool that calls an HTTP API, declared as data.
//! `url`, `query` and `body` are templates over the validated arguments; `headers` may name
//! secrets (`secret:NAME`), resolved by the application and never shown to the model; `result`
//! picks a part of the response (a JSON Pointer) and caps its size.

use std::collections::BTreeMap;
use std::rc::Rc;

use async_trait::async_trait;
use futures::StreamExt;
use serde_json::{Map, Value};

use super::redirects::{self, SendError};
use super::template::{encode, fill, fill_json, placeholders};
use super::{
    answer, call_service, check_name, check_url, failure, host_of, resolve_headers, Attempt,
    Breakers, DEFAULT_RESULT_BYTES, MAX_RESULT_BYTES,
};
use crate::agent::tools::{ServerTool, MAX_TOOL_NAME};
use crate::llm::fields::{self, Fields};
use crate::llm::{ApiRequest, HttpTransport, Sleeper, ToolDef};

/// Most of a response read, in bytes.
const MAX_READ_BYTES: usize = 1 << 20;

/// One entry of `HTTP_TOOLS`.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpToolSpec {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
    /// `GET` unless declared.
    pub method: String,
    pub url: String,
    /// Query parameters: name → template.
    pub query: BTreeMap<String, String>,
    /// A JSON body template (for POST, PUT, PATCH).
    pub body: Option<Value>,
    /// Header name → value, or `secret:NAME`.
    pub headers: BTreeMap<String, String>,
    pub result: Option<ResultSpec>,
    /// At most the deployment's `TOOL_TIMEOUT_MS`, which bounds every tool call.
    pub timeout_ms: Option<u32>,
    /// The toolset the tool joins (default: `http`).
    pub toolset: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ResultSpec {
    /// A JSON Pointer into the response (`/data/items`).
    pub pointer: Option<String>,
    /// Largest result given to the model, in bytes (longer ones are cut and marked degraded).
    pub max_bytes: Option<usize>,
}

/// Parses and checks `HTTP_TOOLS`. Errors name the entry, the tool and the field.
pub fn parse_http_tools(json: &str) -> Result<Vec<HttpToolSpec>, String> {
    let known = [
        "name",
        "description",
        "input_schema",
        "method",
        "url",
        "query",
        "body",
        "headers",
        "result",
        "timeout_ms",
        "toolset",
    ];
    fields::entries(json, &known, "name", read_spec, check_spec)
}

fn read_spec(f: &mut Fields) -> Result<HttpToolSpec, String> {
    let result = match f.object("result", &["pointer", "max_bytes"])? {
        Some(mut r) => Some(ResultSpec {
            pointer: r.optional("pointer", fields::STRING)?,
            max_bytes: r.optional("max_bytes", fields::USIZE)?,
        }),
        None => None,
    };
    Ok(HttpToolSpec {
        name: f.required("name", fields::STRING)?,
        description: f.required("description", fields::STRING)?,
        input_schema: f.required("input_schema", fields::JSON)?,
        method: f
            .optional("method", fields::STRING)?
            .unwrap_or_else(|| "GET".into()),
        url: f.required("url", fields::STRING)?,
        query: f.optional("query", fields::STRING_MAP)?.unwrap_or_default(),
        body: f.value("body"),
        headers: f
            .optional("headers", fields::STRING_MAP)?
            .unwrap_or_default(),
        result,
        timeout_ms: f.optional("timeout_ms", fields::U32)?,
        toolset: f.optional("toolset", fields::STRING)?,
    })
}

fn check_spec(spec: &HttpToolSpec) -> Result<(), String> {
    check_name(&spec.name, MAX_TOOL_NAME)?;
    if !["GET", "POST", "PUT", "PATCH", "DELETE"].contains(&spec.method.as_str()) {
        return Err(format!(
            "`method` must be GET, POST, PUT, PATCH or DELETE, not `{}`",
            spec.method
        ));
    }
    let host = host_of(&spec.url).ok_or("`url` must start with http:// or https://")?;
    if host.contains('{') {
        return Err("`url` may not template its host".into());
    }
    if spec.input_schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err("`input_schema` must be a JSON Schema with \"type\": \"object\"".into());
    }
    let declared = spec
        .input_schema
        .get("properties")
        .and_then(Value::as_object);
    if spec.body.is_some() && spec.method == "GET" {
        return Err("`body` is not sent with GET".into());
    }
    let body_text = spec.body.as_ref().map(Value::to_string);
    let mut used: Vec<(&str, &str)> = placeholders(&spec.url)
        .into_iter()
        .map(|p| ("url", p))
        .collect();
    used.extend(
        spec.query
            .values()
            .flat_map(|t| placeholders(t))
            .map(|p| ("query", p)),
    );
    if let Some(text) = &body_text {
        used.extend(placeholders(text).into_iter().map(|p| ("body", p)));
    }
    for (field, name) in used {
        if !declared.is_some_and(|d| d.contains_key(name)) {
            return Err(format!(
                "`{field}` uses {{{name}}}, which `input_schema` does not declare"
            ));
        }
    }
    for (header, value) in &spec.headers {
        if let Some(secret) = value.strip_prefix("secret:") {
            if secret.is_empty() {
                return Err(format!("header `{header}`: `secret:` needs a name"));
            }
        }
    }
    if spec
        .result
        .as_ref()
        .and_then(|r| r.max_bytes)
        .is_some_and(|max| max == 0 || max > MAX_RESULT_BYTES)
    {
        return Err(format!(
            "`result.max_bytes` must be from 1 to {MAX_RESULT_BYTES}"
        ));
    }
    if let Some(pointer) = spec.result.as_ref().and_then(|r| r.pointer.as_deref()) {
        if !pointer.is_empty() && !pointer.starts_with('/') {
            return Err("`result.pointer` must be a JSON Pointer (start with `/`)".into());
        }
    }
    Ok(())
}

/// What an HTTP tool runs with.
pub struct HttpTool {
    pub spec: HttpToolSpec,
    pub definition: ToolDef,
    /// The headers with their secrets resolved (never shown to the model or logged).
    pub headers: Vec<(String, String)>,
    /// The names of the headers the deployment configured: they go to the tool's own origin
    /// only, never to where it redirects.
    pub configured_headers: Vec<String>,
    pub transport: Rc<dyn HttpTransport>,
    pub sleeper: Rc<dyn Sleeper>,
    pub breakers: Rc<Breakers>,
    pub now_ms: fn() -> i64,
    /// Whether the turn was cancelled (a failed attempt then is no failure of the API).
    pub cancelled: Rc<dyn Fn() -> bool>,
    pub allow_private_hosts: bool,
    /// What the tool's calls belong to (the conversation): part of every `Idempotency-Key`, so
    /// two conversations' calls never share one, whatever ids their models gave the calls.
    pub scope: String,
}

impl HttpTool {
    /// `secret` resolves `secret:NAME` header values; a missing one is a configuration error.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        spec: HttpToolSpec,
        secret: &dyn Fn(&str) -> Option<String>,
        transport: Rc<dyn HttpTransport>,
        sleeper: Rc<dyn Sleeper>,
        breakers: Rc<Breakers>,
        now_ms: fn() -> i64,
        cancelled: Rc<dyn Fn() -> bool>,
        allow_private_hosts: bool,
    ) -> Result<Self, String> {
        let mut headers = resolve_headers(&spec.name, &spec.headers, secret)?;
        let configured_headers = headers.iter().map(|(name, _)| name.clone()).collect();
        if spec.body.is_some() && !headers.iter().any(|(n, _)| n == "content-type") {
            headers.push(("content-type".into(), "application/json".into()));
        }
        let definition = ToolDef {
            name: spec.name.clone(),
            description: spec.description.clone(),
            input_schema: spec.input_schema.clone(),
        };
        Ok(Self {
            spec,
            definition,
            headers,
            configured_headers,
            transport,
            sleeper,
            breakers,
            now_ms,
            cancelled,
            allow_private_hosts,
            scope: String::new(),
        })
    }

    /// The tool for calls of `scope` (a conversation): see [`HttpTool::scope`].
    pub fn scoped(mut self, scope: &str) -> Self {
        self.scope = scope.to_string();
        self
    }

    fn request(&self, arguments: &Map<String, Value>) -> Result<ApiRequest, String> {
        let mut url = fill(&self.spec.url, arguments, true)?;
        let mut first = !url.contains('?');
        for (name, template) in &self.spec.query {
            // A query value from an argument the call left out is left out.
            let absent = placeholders(template)
                .iter()
                .any(|p| arguments.get(*p).is_none_or(Value::is_null));
            if absent {
                continue;
            }
            url.push(if first { '?' } else { '&' });
            first = false;
            url.extend(encode(name));
            url.push('=');
            url.push_str(&fill(template, arguments, true)?);
        }
        check_url(&url, self.allow_private_hosts)?;
        let body = match &self.spec.body {
            Some(template) => Some(fill_json(template, arguments)?.to_string()),
            None => None,
        };
        Ok(ApiRequest {
            method: method_name(&self.spec.method),
            url,
            headers: self.headers.clone(),
            body,
        })
    }

    /// Reads the body (at most `MAX_READ_BYTES`); `true` when it was longer.
    async fn read(response: crate::llm::HttpResponse) -> Result<(Vec<u8>, bool), String> {
        let mut body = Vec::new();
        let mut stream = response.body;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            if body.len() + chunk.len() > MAX_READ_BYTES {
                body.extend_from_slice(&chunk[..MAX_READ_BYTES - body.len()]);
                return Ok((body, true));
            }
            body.extend_from_slice(&chunk);
        }
        Ok((body, false))
    }

    /// The model's view of a successful response.
    fn result(&self, body: &[u8], cut: bool) -> Value {
        let text = String::from_utf8_lossy(body);
        let parsed: Option<Value> = crate::llm::json::from_str(&text).ok();
        let spec = self.spec.result.as_ref();
        let picked = match (parsed, spec.and_then(|r| r.pointer.as_deref())) {
            (Some(json), Some(pointer)) => json.pointer(pointer).cloned(),
            (Some(json), None) => Some(json),
            (None, _) if text.trim().is_empty() => None,
            (None, _) => Some(Value::String(text.into_owned())),
        };
        let Some(picked) = picked.filter(|v| !v.is_null()) else {
            return answer("no_result", None, None);
        };
        let max = spec
            .and_then(|r| r.max_bytes)
            .unwrap_or(DEFAULT_RESULT_BYTES);
        let rendered = match &picked {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        if rendered.len() > max || cut {
            return super::cut(&rendered, max);
        }
        answer("ok", Some(picked), None)
    }
}

/// The key a tool call is known by to the API: derived from the conversation, the tool, the
/// call's id (which a resumed or recovered turn keeps) and its arguments (a server may give two
/// calls one id), never the id itself.
pub fn idempotency_key(scope: &str, tool: &str, call_id: &str, arguments: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new()
        .chain_update(scope.as_bytes())
        .chain_update([0])
        .chain_update(tool.as_bytes())
        .chain_update([0])
        .chain_update(call_id.as_bytes())
        .chain_update([0])
        .chain_update(arguments.as_bytes())
        .finalize();
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

fn method_name(method: &str) -> &'static str {
    match method {
        "POST" => "POST",
        "PUT" => "PUT",
        "PATCH" => "PATCH",
        "DELETE" => "DELETE",
        _ => "GET",
    }
}

#[async_trait(?Send)]
impl ServerTool for HttpTool {
    fn definition(&self) -> &ToolDef {
        &self.definition
    }

    fn concurrent(&self) -> bool {
        self.spec.method == "GET"
    }

    async fn call(&self, arguments: &Map<String, Value>) -> Result<Value, String> {
        self.call_as("", arguments).await
    }

    /// Every attempt of the model's call `call_id` carries the same `Idempotency-Key`, so an
    /// API that honours it runs a repeated call (a retry, a resumed turn) once.
    async fn call_as(
        &self,
        call_id: &str,
        arguments: &Map<String, Value>,
    ) -> Result<Value, String> {
        let name = &self.spec.name;
        let mut request = self.request(arguments).map_err(failure)?;
        if !call_id.is_empty() && !request.headers.iter().any(|(n, _)| n == "idempotency-key") {
            request.headers.push((
                "idempotency-key".into(),
                idempotency_key(
                    &self.scope,
                    name,
                    call_id,
                    &serde_json::to_string(arguments).unwrap_or_default(),
                ),
            ));
        }
        let who = format!("`{name}`");
        let call = call_service(
            name,
            &who,
            &self.breakers,
            self.sleeper.as_ref(),
            self.now_ms,
            self.cancelled.as_ref(),
            || self.attempt(request.clone()),
        );
        // The tool's own limit, inside the deployment's TOOL_TIMEOUT_MS that bounds every call.
        let Some(ms) = self.spec.timeout_ms else {
            return call.await;
        };
        let limit = std::pin::pin!(self.sleeper.sleep(ms.into()));
        let call = std::pin::pin!(call);
        let finished = match futures::future::select(call, limit).await {
            futures::future::Either::Left((result, _)) => Some(result),
            futures::future::Either::Right(_) => None,
        };
        finished.unwrap_or_else(|| {
            Err(failure(format!(
                "`{name}` did not answer within its timeout_ms ({ms} ms)"
            )))
        })
    }
}

impl HttpTool {
    async fn attempt(&self, request: ApiRequest) -> Attempt {
        let sent = redirects::send(
            self.transport.as_ref(),
            request,
            self.allow_private_hosts,
            &self.configured_headers,
        );
        let response = match sent.await {
            Ok(response) => response,
            Err(SendError::Refused(e)) => return Attempt::Done(Err(failure(e))),
            Err(SendError::Network(e)) => {
                return Attempt::Failed(format!("the API could not be reached: {e}"))
            }
        };
        let status = response.status;
        let (body, cut) = match Self::read(response).await {
            Ok(read) => read,
            Err(e) => return Attempt::Failed(format!("the response broke off: {e}")),
        };
        if status >= 500 || status == 429 {
            return Attempt::Failed(format!("the API answered HTTP {status}"));
        }
        // The service is up: a 4xx is this call's problem, not the service's.
        Attempt::Done(match status {
            404 => Ok(answer(
                "no_result",
                None,
                Some("the API answered 404".into()),
            )),
            400.. => {
                let detail = String::from_utf8_lossy(&body[..body.len().min(500)]).into_owned();
                Err(failure(format!("the API answered HTTP {status}: {detail}")))
            }
            _ => Ok(self.result(&body, cut)),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};
    use std::collections::VecDeque;

    use serde_json::json;

    use super::*;
    use crate::llm::{HttpRequest, HttpResponse};

    /// Answers each request with the next scripted status and body (or a network error), and
    /// records what was sent.
    #[derive(Default)]
    struct Api {
        answers: RefCell<VecDeque<Result<(u16, &'static str), &'static str>>>,
        sent: RefCell<Vec<ApiRequest>>,
    }

    #[async_trait(?Send)]
    impl HttpTransport for Api {
        async fn post(&self, _: HttpRequest) -> Result<HttpResponse, String> {
            unreachable!()
        }
        async fn get(&self, _: HttpRequest) -> Result<HttpResponse, String> {
            unreachable!()
        }
        async fn send(&self, request: ApiRequest) -> Result<HttpResponse, String> {
            self.sent.borrow_mut().push(request);
            let (status, body) = self
                .answers
                .borrow_mut()
                .pop_front()
                .expect("no answer scripted")?;
            // The body arrives in two pieces, split mid-way.
            let (a, b) = body.as_bytes().split_at(body.len() / 2);
            Ok(HttpResponse {
                status,
                headers: vec![],
                body: Box::pin(futures::stream::iter(vec![Ok(a.to_vec()), Ok(b.to_vec())])),
            })
        }
    }

    #[derive(Default)]
    struct Waits(RefCell<Vec<u64>>);

    #[async_trait(?Send)]
    impl Sleeper for Waits {
        async fn sleep(&self, ms: u64) {
            self.0.borrow_mut().push(ms);
        }
        fn random(&self) -> f64 {
            0.0
        }
    }

    thread_local!(static NOW: Cell<i64> = const { Cell::new(0) });
    fn now() -> i64 {
        NOW.with(Cell::get)
    }

    const WEATHER: &str = r#"[{
        "name": "weather",
        "description": "Forecast for a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]},
        "url": "https://api.weather.example/v1/{city}",
        "query": {"days": "{days}", "units": "metric"},
        "headers": {"Authorization": "secret:WEATHER_KEY"},
        "result": {"pointer": "/forecast", "max_bytes": 40}
    }]"#;

    fn tool(
        api: &Rc<Api>,
        breakers: &Rc<Breakers>,
        waits: &Rc<Waits>,
        declaration: &str,
    ) -> HttpTool {
        let spec = parse_http_tools(declaration).unwrap().remove(0);
        HttpTool::new(
            spec,
            &|name| (name == "WEATHER_KEY").then(|| "Bearer s3cret".to_string()),
            api.clone(),
            waits.clone(),
            breakers.clone(),
            now,
            Rc::new(|| false),
            false,
        )
        .unwrap()
    }

    fn call(t: &HttpTool, args: Value) -> Result<Value, String> {
        futures::executor::block_on(t.call(args.as_object().unwrap()))
    }

    #[test]
    fn a_call_fills_the_templates_sends_the_secret_and_picks_the_result() {
        let (api, breakers, waits) = (Rc::new(Api::default()), Rc::default(), Rc::default());
        let t = tool(&api, &breakers, &waits, WEATHER);
        api.answers
            .borrow_mut()
            .push_back(Ok((200, r#"{"forecast": ["sun", "rain"], "noise": 1}"#)));
        let out = call(&t, json!({"city": "New York", "days": 2})).unwrap();
        assert_eq!(out, json!({"status": "ok", "result": ["sun", "rain"]}));
        let sent = api.sent.borrow()[0].clone();
        assert_eq!(sent.method, "GET");
        assert_eq!(
            sent.url,
            "https://api.weather.example/v1/New%20York?days=2&units=metric"
        );
        assert_eq!(
            sent.headers,
            vec![("authorization".to_string(), "Bearer s3cret".to_string())]
        );
        // An optional argument left out leaves its query parameter out; a long result is cut.
        api.answers.borrow_mut().push_back(Ok((
            200,
            r#"{"forecast": "sunny all week with a light breeze from the west"}"#,
        )));
        let out = call(&t, json!({"city": "Oslo"})).unwrap();
        assert_eq!(out["status"], "degraded");
        assert_eq!(out["result"].as_str().unwrap().len(), 40);
        assert!(api.sent.borrow()[1].url.ends_with("/v1/Oslo?units=metric"));
        // Nothing where the pointer points, a 404: no result.
        api.answers
            .borrow_mut()
            .push_back(Ok((200, r#"{"other": 1}"#)));
        assert_eq!(
            call(&t, json!({"city": "X"})).unwrap()["status"],
            "no_result"
        );
        api.answers.borrow_mut().push_back(Ok((404, "not found")));
        assert_eq!(
            call(&t, json!({"city": "X"})).unwrap()["status"],
            "no_result"
        );
    }

    #[test]
    fn every_attempt_of_a_call_carries_the_same_idempotency_key_and_other_calls_another() {
        let (api, breakers, waits) = (Rc::new(Api::default()), Rc::default(), Rc::default());
        let t = tool(&api, &breakers, &waits, WEATHER);
        api.answers.borrow_mut().extend([
            Ok((503, "busy")),
            Ok((200, r#"{"forecast": "sun"}"#)),
            Ok((200, r#"{"forecast": "rain"}"#)),
        ]);
        let args = json!({"city": "A"});
        let run = |id: &str| {
            futures::executor::block_on(t.call_as(id, args.as_object().unwrap())).unwrap()
        };
        run("toolu_01");
        run("toolu_02");
        let keys: Vec<String> = api
            .sent
            .borrow()
            .iter()
            .map(|r| {
                r.headers
                    .iter()
                    .find(|(n, _)| n == "idempotency-key")
                    .map(|(_, v)| v.clone())
                    .unwrap()
            })
            .collect();
        assert_eq!(keys[0], keys[1], "a retry is the same call");
        assert_ne!(keys[1], keys[2]);
        assert_eq!(
            keys[0],
            idempotency_key("", "weather", "toolu_01", r#"{"city":"A"}"#)
        );
        assert!(!keys[0].contains("toolu") && keys[0].len() == 32);
    }

    #[test]
    fn two_conversations_calls_with_one_id_carry_different_keys() {
        // Gemini, Ollama and id-less servers once gave both `call_<history length>_0`.
        let key = |conversation: &str| {
            let (api, breakers, waits) = (Rc::new(Api::default()), Rc::default(), Rc::default());
            let t = tool(&api, &breakers, &waits, WEATHER).scoped(conversation);
            api.answers
                .borrow_mut()
                .push_back(Ok((200, r#"{"forecast": "sun"}"#)));
            let args = json!({"city": "A"});
            futures::executor::block_on(t.call_as("call_4_0", args.as_object().unwrap())).unwrap();
            let sent = api.sent.borrow();
            let header = sent[0].headers.iter().find(|(n, _)| n == "idempotency-key");
            header.map(|(_, v)| v.clone()).unwrap()
        };
        assert_ne!(key("conversation-a"), key("conversation-b"));
        // A server that gives two calls one id: their arguments tell them apart.
        let (api, breakers, waits) = (Rc::new(Api::default()), Rc::default(), Rc::default());
        let t = tool(&api, &breakers, &waits, WEATHER).scoped("conversation-a");
        for city in ["A", "B"] {
            api.answers
                .borrow_mut()
                .push_back(Ok((200, r#"{"forecast": "sun"}"#)));
            let args = json!({ "city": city });
            futures::executor::block_on(t.call_as("call_0", args.as_object().unwrap())).unwrap();
        }
        let sent = api.sent.borrow();
        let keys: Vec<_> = sent
            .iter()
            .filter_map(|r| r.headers.iter().find(|(n, _)| n == "idempotency-key"))
            .collect();
        assert_ne!(keys[0], keys[1]);
        assert_eq!(
            key("conversation-a"),
            key("conversation-a"),
            "stable across retries"
        );
    }

    #[test]
    fn a_cancelled_or_dropped_call_is_no_failure_of_the_api() {
        let (api, breakers, waits) = (
            Rc::new(Api::default()),
            Rc::<Breakers>::default(),
            Rc::<Waits>::default(),
        );
        let mut t = tool(&api, &breakers, &waits, WEATHER);
        t.cancelled = Rc::new(|| true);
        // Three cancelled calls (the abort fails the fetch): one attempt each, no failure.
        for _ in 0..3 {
            api.answers
                .borrow_mut()
                .push_back(Err("The operation was aborted"));
            let e = call(&t, json!({"city": "A"})).unwrap_err();
            assert!(e.contains("cancelled"), "{e}");
        }
        assert_eq!(api.sent.borrow().len(), 3);
        assert_eq!(
            breakers.state("weather"),
            super::super::breaker::State::Closed { failures: 0 }
        );
        // A half-open trial dropped by a timeout lets the next call try at once.
        use super::super::breaker::State;
        use futures::FutureExt;
        breakers.with("weather", |b| b.state = State::Open { until_ms: 0 });
        let never = call_service(
            "weather",
            "w",
            &breakers,
            waits.as_ref(),
            now,
            &|| false,
            futures::future::pending::<Attempt>,
        );
        assert!(never.now_or_never().is_none(), "dropped after one poll");
        assert!(matches!(breakers.state("weather"), State::Open { .. }));
        api.answers
            .borrow_mut()
            .push_back(Ok((200, r#"{"forecast": "sun"}"#)));
        assert_eq!(call(&t, json!({"city": "A"})).unwrap()["result"], "sun");
        assert_eq!(breakers.state("weather"), State::Closed { failures: 0 });
    }

    #[test]
    fn failures_are_retried_then_open_the_breaker_which_half_opens_after_the_cool_down() {
        let (api, breakers, waits) = (
            Rc::new(Api::default()),
            Rc::default(),
            Rc::<Waits>::default(),
        );
        let t = tool(&api, &breakers, &waits, WEATHER);
        // A 503 then a network error then a 200: one call, two waits.
        api.answers.borrow_mut().extend([
            Ok((503, "busy")),
            Err("connection refused"),
            Ok((200, r#"{"forecast": "sun"}"#)),
        ]);
        assert_eq!(call(&t, json!({"city": "A"})).unwrap()["result"], "sun");
        assert_eq!(
            *waits.0.borrow(),
            vec![super::super::BACKOFF_MS, super::super::BACKOFF_MS * 2]
        );
        // Three calls that fail every attempt open the circuit.
        for _ in 0..3 {
            api.answers
                .borrow_mut()
                .extend([Ok((500, "x")), Ok((502, "x")), Err("reset")]);
            let e = call(&t, json!({"city": "A"})).unwrap_err();
            let e: Value = crate::llm::json::from_str(&e).unwrap();
            assert_eq!(e["status"], "error");
            assert!(e["message"].as_str().unwrap().contains("after 3 attempts"));
        }
        let sent = api.sent.borrow().len();
        let e = call(&t, json!({"city": "A"})).unwrap_err();
        assert!(e.contains("unavailable"), "{e}");
        assert_eq!(
            api.sent.borrow().len(),
            sent,
            "an open circuit sends nothing"
        );
        NOW.with(|n| n.set(super::super::breaker::COOL_DOWN_MS));
        api.answers
            .borrow_mut()
            .push_back(Ok((200, r#"{"forecast": "back"}"#)));
        assert_eq!(call(&t, json!({"city": "A"})).unwrap()["result"], "back");
        NOW.with(|n| n.set(0));
        // A 4xx is the call's fault: reported, not retried, and the service stays up.
        api.answers.borrow_mut().push_back(Ok((400, "bad city")));
        let e = call(&t, json!({"city": "?"})).unwrap_err();
        assert!(e.contains("HTTP 400: bad city"), "{e}");
    }

    #[test]
    fn bodies_keep_types_and_private_hosts_are_refused() {
        let (api, breakers, waits) = (Rc::new(Api::default()), Rc::default(), Rc::default());
        let post = r#"[{"name": "ticket", "description": "d", "method": "POST",
            "input_schema": {"type": "object", "properties": {"title": {"type": "string"}, "priority": {"type": "integer"}}},
            "url": "http://127.0.0.1:9/tickets", "body": {"title": "{title}", "priority": "{priority}"}}]"#;
        let t = tool(&api, &breakers, &waits, post);
        let e = call(&t, json!({"title": "t", "priority": 2})).unwrap_err();
        assert!(e.contains("ALLOW_PRIVATE_TOOL_HOSTS"), "{e}");
        assert!(api.sent.borrow().is_empty());
        let mut t = t;
        t.allow_private_hosts = true;
        api.answers
            .borrow_mut()
            .push_back(Ok((201, r#"{"id": 7}"#)));
        assert_eq!(
            call(&t, json!({"title": "t", "priority": 2})).unwrap()["result"],
            json!({"id": 7})
        );
        let sent = api.sent.borrow()[0].clone();
        // The arguments in the order the model wrote them.
        assert_eq!(sent.body.as_deref(), Some(r#"{"title":"t","priority":2}"#));
        assert!(sent
            .headers
            .contains(&("content-type".into(), "application/json".into())));
    }

    /// A transport that never answers.
    struct Hangs;

    #[async_trait(?Send)]
    impl HttpTransport for Hangs {
        async fn post(&self, _: HttpRequest) -> Result<HttpResponse, String> {
            unreachable!()
        }
        async fn get(&self, _: HttpRequest) -> Result<HttpResponse, String> {
            unreachable!()
        }
        async fn send(&self, _: ApiRequest) -> Result<HttpResponse, String> {
            futures::future::pending().await
        }
    }

    #[test]
    fn timeout_ms_bounds_a_call() {
        let declared = WEATHER.replace(r#""url":"#, r#""timeout_ms": 1500, "url":"#);
        let spec = parse_http_tools(&declared).unwrap().remove(0);
        // The sleeper's waits end at once: the limit is reached before the API answers.
        let t = HttpTool::new(
            spec,
            &|_| Some("k".into()),
            Rc::new(Hangs),
            Rc::new(Waits::default()),
            Rc::default(),
            now,
            Rc::new(|| false),
            false,
        )
        .unwrap();
        let e = call(&t, json!({"city": "Oslo"})).unwrap_err();
        assert!(e.contains("within its timeout_ms (1500 ms)"), "{e}");
    }

    #[test]
    fn bad_declarations_name_the_tool_and_the_field() {
        let err = |json: &str| parse_http_tools(json).unwrap_err();
        assert!(err("{}").contains("not a JSON array"));
        let e = err(r#"[{"name": "w", "description": "d", "input_schema": {"type": "object"}}]"#);
        assert!(e.contains("entry 0 (`w`)") && e.contains("`url`"), "{e}");
        let e = err(
            r#"[{"name": "w", "description": "d", "input_schema": {"type": "object"}, "url": "ftp://x"}]"#,
        );
        assert!(e.contains("http://"), "{e}");
        let e = err(
            r#"[{"name": "w", "description": "d", "input_schema": {"type": "object", "properties": {}}, "url": "https://x/{city}"}]"#,
        );
        assert!(e.contains("`url` uses {city}"), "{e}");
        let e = err(
            r#"[{"name": "w", "description": "d", "input_schema": {"type": "object"}, "url": "https://{host}/"}]"#,
        );
        assert!(e.contains("host"), "{e}");
        let e = err(
            r#"[{"name": "w", "description": "d", "input_schema": {"type": "object"}, "url": "https://x/", "method": "TRACE"}]"#,
        );
        assert!(e.contains("`method`"), "{e}");
        let e = err(
            r#"[{"name": "w", "description": "d", "input_schema": {"type": "object"}, "url": "https://x/", "retries": 3}]"#,
        );
        assert!(e.contains("unknown field `retries`"), "{e}");
        // A value of the wrong kind is named by its field, nested ones by their path.
        let e = err(
            r#"[{"name": "w", "description": "d", "input_schema": {"type": "object"}, "url": "https://x/", "timeout_ms": "soon"}]"#,
        );
        assert!(
            e.contains("entry 0 (`w`): `timeout_ms` must be a whole number"),
            "{e}"
        );
        let e = err(
            r#"[{"name": "w", "description": "d", "input_schema": {"type": "object"}, "url": "https://x/", "result": {"max_bytes": -1}}]"#,
        );
        assert!(
            e.contains("`result.max_bytes` must be a whole number"),
            "{e}"
        );
        let e = err(
            r#"[{"name": "w", "description": "d", "input_schema": {"type": "object"}, "url": "https://x/", "headers": {"x-key": 1}}]"#,
        );
        assert!(
            e.contains("`headers` must be an object whose values are strings"),
            "{e}"
        );
        let missing_secret = HttpTool::new(
            parse_http_tools(WEATHER).unwrap().remove(0),
            &|_| None,
            Rc::new(Api::default()),
            Rc::new(Waits::default()),
            Rc::default(),
            now,
            Rc::new(|| false),
            false,
        );
        let e = missing_secret.err().unwrap();
        assert!(
            e.contains("`WEATHER_KEY`, which is not set") && !e.contains("s3cret"),
            "{e}"
        );
    }
}
