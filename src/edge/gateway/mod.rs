//! The Worker's side of a request: the `fetch` entry and the one route table. It authenticates
//! the caller, applies CORS, the rate limit and the budget gate, and hands each request to its
//! route; a route that runs or queues a turn hands it over to the conversation's object.
//!
//! - [`routes`]: one handler per endpoint
//! - [`body`]: reading request bodies within their limits
//! - [`attachments`]: a message's files, checked and stored in R2
//! - [`auth`], [`cors`]: who calls, from where (how often: `platform::rate_limit`)

use worker::{event, Context, Env, Method, Request, Response};

use crate::edge::config::Config;
use crate::edge::d1;
use crate::edge::error::ApiError;
use crate::edge::platform::clock::now_ms;
use crate::edge::platform::ids::new_id;
use crate::edge::protocol::REQUEST_ID;
use crate::edge::{error_response, out_of_line};

pub mod attachments;
pub mod auth;
pub mod body;
pub mod cors;
pub mod routes;

#[event(fetch)]
async fn fetch(req: Request, env: Env, ctx: Context) -> worker::Result<Response> {
    let method = req.method();
    let path = req.path();
    let origin = req.headers().get("origin").ok().flatten();
    // Every response and log line carries it; a 5xx's message quotes it.
    let request_id = new_id().unwrap_or_else(|_| format!("r{}", now_ms()));
    // Parsed once per request; a bad configuration still lets `/healthz` and preflights answer.
    let config = Config::cached(&env);
    let cors = config.as_ref().map(|c| c.cors.clone()).unwrap_or_default();
    let mut response = if method == Method::Options {
        let preflight = Response::empty()?.with_status(204);
        for (name, value) in cors.preflight_headers(origin.as_deref()) {
            preflight.headers().set(name, &value)?;
        }
        preflight
    } else {
        match route(req, &env, &ctx, config, &request_id).await {
            Ok(response) => response,
            Err(e) => {
                let line = e.log_line(&request_id, method.as_ref(), &path);
                if e.status() >= 500 {
                    worker::console_error!("{line}");
                } else {
                    worker::console_warn!("{line}");
                }
                error_response(&e, &request_id)?
            }
        }
    };
    for (name, value) in cors.response_headers(origin.as_deref()) {
        response.headers_mut().set(name, &value)?;
    }
    response.headers_mut().set(REQUEST_ID, &request_id)?;
    Ok(response)
}

async fn route(
    req: Request,
    env: &Env,
    ctx: &Context,
    config: Result<std::rc::Rc<Config>, ApiError>,
    request_id: &str,
) -> Result<Response, ApiError> {
    let path = req.path();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let method = req.method();
    match (&method, segments.as_slice()) {
        (Method::Get, ["healthz"]) => return out_of_line(routes::health::get(env)).await,
        (Method::Get, ["openapi.json"]) => {
            return routes::openapi::get(env, config.as_deref().ok())
        }
        _ => {}
    }
    // Everything else acts for a caller, who must authenticate before learning anything of the
    // configuration (even that it is broken).
    let authorization = req.headers().get("authorization")?;
    let config = match config {
        Ok(config) => config,
        Err(broken) => {
            crate::edge::config::access::auth_from_lookup(|name| {
                env.var(name).ok().map(|v| v.to_string())
            })?
            .caller(authorization.as_deref(), now_ms() / 1000)?;
            return Err(broken);
        }
    };
    let config = &config;
    let caller = config
        .auth
        .caller(authorization.as_deref(), now_ms() / 1000)?;
    let user = caller.user.as_str();
    let sends = method == Method::Post
        && matches!(
            segments.as_slice(),
            ["v1", "chat"] | ["v1", "conversations", _, "messages" | "retry"]
        );
    // Writes that take D1 space count against the same limit as messages.
    let writes = matches!(
        (&method, segments.as_slice()),
        (
            Method::Post,
            ["v1", "conversations"] | ["v1", "conversations", _, "schedules"]
        ) | (Method::Put, ["v1", "conversations", _, "artifacts", _])
    );
    if sends || writes {
        crate::edge::platform::rate_limit::check(env, config, user).await?;
    }
    if sends {
        budget_check(env, config, user).await?;
    }
    // An admin route's target, percent-decoded; it lives as long as the handler borrowing it.
    let target;
    // One await for every handler (each behind the same boxed type), not one per route: the
    // route table is compiled by every cold request, and each await point is code of its own.
    let handler = match (method, segments.as_slice()) {
        (Method::Post, ["v1", "chat"]) => {
            out_of_line(routes::chat::post(req, env, config, user, request_id))
        }
        (Method::Get, ["v1", "chat", id, "stream"] | ["v1", "conversations", id, "stream"]) => {
            out_of_line(routes::conversations::stream(env, user, id))
        }
        (Method::Post, ["v1", "conversations"]) => {
            out_of_line(routes::conversations::create(req, env, config, user))
        }
        (Method::Get, ["v1", "conversations"]) => {
            out_of_line(routes::conversations::list(&req, env, user))
        }
        (Method::Get, ["v1", "conversations", id]) => {
            out_of_line(routes::conversations::get(env, user, id))
        }
        (Method::Post, ["v1", "conversations", id, "retry"]) => out_of_line(
            routes::messages::retry(req, env, config, user, id, request_id),
        ),
        (Method::Post, ["v1", "conversations", id, "cancel"]) => {
            out_of_line(routes::conversations::cancel(env, user, id))
        }
        (Method::Delete, ["v1", "conversations", id]) => {
            out_of_line(routes::conversations::delete(env, user, id))
        }
        (Method::Get, ["v1", "models"]) => return routes::models::list(config),
        (Method::Get, ["v1", "usage"]) => out_of_line(routes::usage::get(env, config, user)),
        (Method::Get, ["v1", "me", "export"]) => out_of_line(routes::me::export(&req, env, user)),
        (Method::Delete, ["v1", "me"]) => out_of_line(routes::me::erase(env, ctx, &caller, None)),
        (Method::Delete, ["v1", "admin", "users", raw]) => {
            target = percent_encoding::percent_decode_str(raw).decode_utf8_lossy();
            out_of_line(routes::me::erase(env, ctx, &caller, Some(&target)))
        }
        (Method::Put, ["v1", "admin", "budgets", raw]) => {
            target = percent_encoding::percent_decode_str(raw).decode_utf8_lossy();
            out_of_line(routes::usage::put(req, env, config, &caller, &target))
        }
        (Method::Get, ["v1", "conversations", id, "artifacts"]) => {
            out_of_line(routes::artifacts::list(env, user, id))
        }
        (Method::Get, ["v1", "conversations", id, "artifacts", artifact]) => {
            out_of_line(routes::artifacts::get(&req, env, user, id, artifact))
        }
        (Method::Put, ["v1", "conversations", id, "artifacts", artifact]) => {
            out_of_line(routes::artifacts::put(req, env, config, user, id, artifact))
        }
        (Method::Get, ["v1", "conversations", id, "files", file]) => {
            out_of_line(routes::files::get(env, user, id, file))
        }
        (Method::Post, ["v1", "conversations", id, "schedules"]) => {
            out_of_line(routes::schedules::create(req, env, user, id))
        }
        (Method::Get, ["v1", "conversations", id, "schedules"]) => {
            out_of_line(routes::schedules::list(env, user, id))
        }
        (Method::Delete, ["v1", "conversations", id, "schedules", schedule]) => {
            out_of_line(routes::schedules::cancel(env, user, id, schedule))
        }
        (Method::Get, ["v1", "conversations", id, "messages"]) => {
            out_of_line(routes::messages::list(&req, env, user, id))
        }
        (Method::Post, ["v1", "conversations", id, "messages"]) => out_of_line(
            routes::messages::send(req, env, config, user, id, request_id),
        ),
        (
            _,
            ["healthz"]
            | ["openapi.json"]
            | ["v1", "conversations"]
            | ["v1", "conversations", _]
            | ["v1", "models"]
            | ["v1", "usage"]
            | ["v1", "me"]
            | ["v1", "me", "export"]
            | ["v1", "admin", "budgets" | "users", _],
        )
        | (_, ["v1", "conversations", _, "messages" | "stream" | "artifacts" | "schedules"])
        | (_, ["v1", "conversations", _, "artifacts" | "files" | "schedules", _])
        | (_, ["v1", "chat"] | ["v1", "chat", _, "stream"]) => {
            return Err(ApiError::MethodNotAllowed(format!(
                "{:?} is not supported on {path}",
                req.method()
            )))
        }
        _ => return Err(ApiError::NotFound(format!("no route for {path}"))),
    };
    handler.await
}

/// A message that would start work for a user whose budget is spent, when no cheaper model
/// may answer instead: 402 with when the budget resets. (With `BUDGET_MODEL` the turn runs on it.)
async fn budget_check(env: &Env, config: &Config, user: &str) -> Result<(), ApiError> {
    let (Some(limit), None) = (config.user_budget_usd, &config.budget_model) else {
        return Ok(());
    };
    let budget = d1::Store::for_owner(env, user)
        .await?
        .budget(user, Some((limit, config.budget_period)), now_ms())
        .await?;
    match budget {
        Some(budget) if budget.over() => Err(ApiError::PaymentRequired(budget.exhausted_message())),
        _ => Ok(()),
    }
}
