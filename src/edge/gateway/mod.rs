//! The Worker's side of a request: the `fetch` entry, the router and the dispatch to handlers.
//! It authenticates the caller, applies CORS, the rate limit and the budget gate, and hands each
//! request to its route; a route that runs or queues a turn hands it over to the conversation's
//! object.
//!
//! - [`table`]: the one route table: each route's method, path, class (the checks before its
//!   handler) and handler
//! - [`routes`]: one handler per endpoint
//! - [`body`]: reading request bodies within their limits
//! - [`attachments`]: a message's files, checked and stored in R2
//! - [`auth`], [`cors`]: who calls, from where (how often: `platform::rate_limit`)
//! - [`budget_gate`]: a spent budget refuses work before it starts

use worker::{event, Context, Env, Method, Request, Response};

use crate::edge::config::Config;
use crate::edge::error::ApiError;
use crate::edge::platform::clock::now_ms;
use crate::edge::platform::ids::new_id;
use crate::edge::protocol::REQUEST_ID;
use crate::edge::{error_response, out_of_line};

use self::auth::Caller;
use self::table::{Class, Handler, Params, Route};

pub mod attachments;
pub mod auth;
pub mod body;
pub mod budget_gate;
pub mod cors;
pub mod routes;
pub mod table;

#[event(fetch)]
async fn fetch(req: Request, env: Env, ctx: Context) -> worker::Result<Response> {
    let method = req.method();
    let path = req.path();
    let url = req.inner().url();
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
    if response.status_code() == 401 {
        // Where a token comes from (RFC 9728), for a client that speaks OAuth (MCP's do).
        let (own, _) = routes::mcp::origin_and_path(&url);
        let suffix = if path.trim_end_matches('/') == "/mcp" {
            "/mcp"
        } else {
            ""
        };
        let metadata = format!(
            "Bearer resource_metadata=\"{own}/.well-known/oauth-protected-resource{suffix}\""
        );
        response.headers_mut().set("www-authenticate", &metadata)?;
    }
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
    let method = req.method();
    let found = table::find(&method, &path);
    if let Some((route, _)) = found.filter(|(route, _)| route.class == Class::Public) {
        match route.handler {
            Handler::Health => return out_of_line(routes::health::get(env)).await,
            Handler::Openapi => return routes::openapi::get(env, config.as_deref().ok()),
            Handler::ProtectedResource | Handler::McpProtectedResource => {
                return routes::mcp::protected_resource(&req, config.as_deref().ok())
            }
            // No other public route (the table's tests say so); one would ask for a caller.
            _ => {}
        }
    }
    // Everything else acts for a caller, who must authenticate before learning anything of the
    // configuration (even that it is broken), or whether the route exists.
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
    let Some(found) = found else {
        return Err(if table::methods(&path).next().is_some() {
            ApiError::MethodNotAllowed(format!("{method:?} is not supported on {path}"))
        } else {
            ApiError::NotFound(format!("no route for {path}"))
        });
    };
    let user = caller.user.as_str();
    if matches!(found.0.class, Class::Write | Class::Turn) {
        crate::edge::platform::rate_limit::check(env, config, user).await?;
    }
    if found.0.class == Class::Turn {
        budget_gate::budget_check(env, config, user).await?;
    }
    dispatch(found, req, env, ctx, config, &caller, request_id).await
}

/// Calls the handler of a request's route (its class's checks passed) with the route's
/// parameters. One await for every handler (each behind the same boxed type), not one per
/// route: this match is compiled by every cold request, and each await point is code of its own.
async fn dispatch(
    (route, params): (&Route, Params<'_>),
    req: Request,
    env: &Env,
    ctx: &Context,
    config: &Config,
    caller: &Caller,
    request_id: &str,
) -> Result<Response, ApiError> {
    let user = caller.user.as_str();
    // `id`: the first `{…}` of the path (a conversation's id, an admin route's user); `item`:
    // the second (an artifact's, a file's or a schedule's id).
    let [id, item] = params;
    // An admin route's target, percent-decoded; it lives as long as the handler borrowing it.
    let target;
    let handler = match route.handler {
        // Answered before authentication (`route`); here only should their row ask for a caller.
        Handler::Health => out_of_line(routes::health::get(env)),
        Handler::Openapi => return routes::openapi::get(env, Some(config)),
        Handler::ProtectedResource | Handler::McpProtectedResource => {
            return routes::mcp::protected_resource(&req, Some(config))
        }
        Handler::Mcp => out_of_line(routes::mcp::post(req, env, config, user, request_id)),
        Handler::ListModels => return routes::models::list(config),
        Handler::ListAgents => return routes::agents::list(config),
        Handler::GetUsage => out_of_line(routes::usage::get(env, config, user)),
        Handler::SetBudget => {
            target = percent_encoding::percent_decode_str(id).decode_utf8_lossy();
            out_of_line(routes::usage::put(req, env, config, caller, &target))
        }
        Handler::EraseUser => {
            target = percent_encoding::percent_decode_str(id).decode_utf8_lossy();
            out_of_line(routes::me::erase(env, ctx, caller, Some(&target)))
        }
        Handler::ExportMe => out_of_line(routes::me::export(&req, env, user)),
        Handler::EraseMe => out_of_line(routes::me::erase(env, ctx, caller, None)),
        Handler::ListMemory => out_of_line(routes::memory::list(env, config, user)),
        Handler::SearchMemory => out_of_line(routes::memory::search(&req, env, config, user)),
        Handler::PutMemory | Handler::PatchMemory => {
            target = percent_encoding::percent_decode_str(id).decode_utf8_lossy();
            let whole = route.handler == Handler::PutMemory;
            out_of_line(routes::memory::change(
                req,
                env,
                config,
                user,
                (&target, whole),
            ))
        }
        Handler::DeleteMemory => {
            target = percent_encoding::percent_decode_str(id).decode_utf8_lossy();
            out_of_line(routes::memory::delete(env, config, user, &target))
        }
        Handler::Chat => out_of_line(routes::chat::post(req, env, config, user, request_id)),
        Handler::AttachChat | Handler::AttachConversation => {
            out_of_line(routes::conversations::stream(env, user, id))
        }
        Handler::CreateConversation => {
            out_of_line(routes::conversations::create(req, env, config, user))
        }
        Handler::ListConversations => out_of_line(routes::conversations::list(&req, env, user)),
        Handler::GetConversation => out_of_line(routes::conversations::get(env, user, id)),
        Handler::DeleteConversation => out_of_line(routes::conversations::delete(env, user, id)),
        Handler::ListMessages => out_of_line(routes::messages::list(&req, env, user, id)),
        Handler::SendMessage => out_of_line(routes::messages::send(
            req, env, config, user, id, request_id,
        )),
        Handler::RetryTurn => out_of_line(routes::messages::retry(
            req, env, config, user, id, request_id,
        )),
        Handler::CancelTurn => out_of_line(routes::conversations::cancel(env, user, id)),
        Handler::ListArtifacts => out_of_line(routes::artifacts::list(env, user, id)),
        Handler::GetArtifact => out_of_line(routes::artifacts::get(&req, env, user, id, item)),
        Handler::PutArtifact => {
            out_of_line(routes::artifacts::put(req, env, config, user, id, item))
        }
        Handler::GetFile => out_of_line(routes::files::get(env, user, id, item)),
        Handler::CreateSchedule => out_of_line(routes::schedules::create(req, env, user, id)),
        Handler::ListSchedules => out_of_line(routes::schedules::list(env, user, id)),
        Handler::CancelSchedule => out_of_line(routes::schedules::cancel(env, user, id, item)),
    };
    handler.await
}
