//! The Worker's one route table: each endpoint's method, path, class (what a request passes
//! before its handler runs) and handler. The router finds a request's route here, a 405 or a 404
//! comes from here, and `api/openapi.json` is checked against it (its tests, and those of
//! `routes::openapi`). A route is added with a row here, a [`Handler`] named after the
//! document's `operationId`, and its arm in the gateway's `dispatch`.
//!
//! The table is a `static`: finding a route allocates nothing and compares a request's path with
//! the rows' of its method, segment by segment.

use worker::Method;

/// One endpoint.
pub struct Route {
    pub method: Method,
    /// Its path as the OpenAPI document writes it: `{name}` is any one segment.
    pub path: &'static str,
    pub class: Class,
    pub handler: Handler,
}

/// What a request passes before its handler runs, in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Nothing: answered before authentication, even when the configuration is broken.
    Public,
    /// An authenticated caller.
    Caller,
    /// An authenticated caller, and the rate limit: a write that takes D1 space counts as much
    /// as a message.
    Write,
    /// An authenticated caller, the rate limit, and the caller's budget: it starts (or queues)
    /// a turn.
    Turn,
}

/// Which handler answers; the gateway's `dispatch` calls it with the route's parameters. Named
/// after the route's `operationId` in `api/openapi.json`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handler {
    Health,
    Openapi,
    ProtectedResource,
    McpProtectedResource,
    Mcp,
    ListModels,
    ListAgents,
    GetUsage,
    SetBudget,
    EraseUser,
    ExportMe,
    EraseMe,
    ListMemory,
    SearchMemory,
    PutMemory,
    PatchMemory,
    DeleteMemory,
    Chat,
    AttachChat,
    CreateConversation,
    ListConversations,
    GetConversation,
    DeleteConversation,
    ListMessages,
    SendMessage,
    RetryTurn,
    CancelTurn,
    AttachConversation,
    ListArtifacts,
    GetArtifact,
    PutArtifact,
    GetFile,
    CreateSchedule,
    ListSchedules,
    CancelSchedule,
}

const fn route(method: Method, path: &'static str, class: Class, handler: Handler) -> Route {
    Route {
        method,
        path,
        class,
        handler,
    }
}

/// Every route of the Worker.
#[rustfmt::skip]
pub static ROUTES: &[Route] = &[
    route(Method::Get, "/healthz", Class::Public, Handler::Health),
    route(Method::Get, "/openapi.json", Class::Public, Handler::Openapi),
    route(Method::Get, "/.well-known/oauth-protected-resource", Class::Public, Handler::ProtectedResource),
    route(Method::Get, "/.well-known/oauth-protected-resource/mcp", Class::Public, Handler::McpProtectedResource),
    // Its calls count against the rate limit and the budget as they start turns.
    route(Method::Post, "/mcp", Class::Caller, Handler::Mcp),
    route(Method::Get, "/v1/models", Class::Caller, Handler::ListModels),
    route(Method::Get, "/v1/agents", Class::Caller, Handler::ListAgents),
    route(Method::Get, "/v1/usage", Class::Caller, Handler::GetUsage),
    route(Method::Put, "/v1/admin/budgets/{user}", Class::Caller, Handler::SetBudget),
    route(Method::Delete, "/v1/admin/users/{user}", Class::Caller, Handler::EraseUser),
    route(Method::Get, "/v1/me/export", Class::Caller, Handler::ExportMe),
    route(Method::Delete, "/v1/me", Class::Caller, Handler::EraseMe),
    route(Method::Get, "/v1/me/memory", Class::Caller, Handler::ListMemory),
    route(Method::Get, "/v1/me/memory/search", Class::Write, Handler::SearchMemory),
    route(Method::Put, "/v1/me/memory/{agent}", Class::Write, Handler::PutMemory),
    route(Method::Patch, "/v1/me/memory/{agent}", Class::Write, Handler::PatchMemory),
    route(Method::Delete, "/v1/me/memory/{agent}", Class::Caller, Handler::DeleteMemory),
    route(Method::Post, "/v1/chat", Class::Turn, Handler::Chat),
    route(Method::Get, "/v1/chat/{id}/stream", Class::Caller, Handler::AttachChat),
    route(Method::Post, "/v1/conversations", Class::Write, Handler::CreateConversation),
    route(Method::Get, "/v1/conversations", Class::Caller, Handler::ListConversations),
    route(Method::Get, "/v1/conversations/{id}", Class::Caller, Handler::GetConversation),
    route(Method::Delete, "/v1/conversations/{id}", Class::Caller, Handler::DeleteConversation),
    route(Method::Get, "/v1/conversations/{id}/messages", Class::Caller, Handler::ListMessages),
    route(Method::Post, "/v1/conversations/{id}/messages", Class::Turn, Handler::SendMessage),
    route(Method::Post, "/v1/conversations/{id}/retry", Class::Turn, Handler::RetryTurn),
    route(Method::Post, "/v1/conversations/{id}/cancel", Class::Caller, Handler::CancelTurn),
    route(Method::Get, "/v1/conversations/{id}/stream", Class::Caller, Handler::AttachConversation),
    route(Method::Get, "/v1/conversations/{id}/artifacts", Class::Caller, Handler::ListArtifacts),
    route(Method::Get, "/v1/conversations/{id}/artifacts/{artifact_id}", Class::Caller, Handler::GetArtifact),
    route(Method::Put, "/v1/conversations/{id}/artifacts/{artifact_id}", Class::Write, Handler::PutArtifact),
    route(Method::Get, "/v1/conversations/{id}/files/{file_id}", Class::Caller, Handler::GetFile),
    route(Method::Post, "/v1/conversations/{id}/schedules", Class::Write, Handler::CreateSchedule),
    route(Method::Get, "/v1/conversations/{id}/schedules", Class::Caller, Handler::ListSchedules),
    route(Method::Delete, "/v1/conversations/{id}/schedules/{schedule_id}", Class::Caller, Handler::CancelSchedule),
];

/// The most `{…}` segments a route's path has.
pub const MAX_PARAMS: usize = 2;

/// A request path's `{…}` segments, in the route's order (`""` past its last), as sent: still
/// percent-encoded.
pub type Params<'p> = [&'p str; MAX_PARAMS];

/// The route `method` asks for on `path` (its outer slashes ignored), with its parameters.
pub fn find<'p>(method: &Method, path: &'p str) -> Option<(&'static Route, Params<'p>)> {
    let path = path.trim_matches('/');
    ROUTES
        .iter()
        .filter(|route| route.method == *method)
        .find_map(|route| Some((route, route.bind(path)?)))
}

/// The methods some route takes on `path`: none, and a request for it is a 404; some, and a
/// request with another method is a 405.
pub fn methods(path: &str) -> impl Iterator<Item = &'static Method> + '_ {
    let path = path.trim_matches('/');
    ROUTES
        .iter()
        .filter(move |route| route.bind(path).is_some())
        .map(|route| &route.method)
}

impl Route {
    /// `path`'s parameters when it is this route's path (`path` without its outer slashes).
    fn bind<'p>(&self, path: &'p str) -> Option<Params<'p>> {
        let mut params = [""; MAX_PARAMS];
        let mut bound = 0;
        let mut pattern = self.path.trim_start_matches('/').split('/');
        let mut segments = path.split('/');
        loop {
            match (pattern.next(), segments.next()) {
                (None, None) => return Some(params),
                (Some(want), Some(segment)) if want.starts_with('{') => {
                    *params.get_mut(bound)? = segment;
                    bound += 1;
                }
                (Some(want), Some(segment)) if want == segment => {}
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_route_and_its_parameters_as_sent() {
        let (route, params) = find(&Method::Put, "/v1/conversations/c1/artifacts/a%20b").unwrap();
        assert_eq!(route.handler, Handler::PutArtifact);
        assert_eq!(params, ["c1", "a%20b"]);
        // Outer slashes do not count; an empty segment is a parameter's value like any other.
        assert_eq!(
            find(&Method::Post, "/v1/chat/").unwrap().0.handler,
            Handler::Chat
        );
        let (route, params) = find(&Method::Get, "/v1/conversations//messages").unwrap();
        assert_eq!((route.handler, params), (Handler::ListMessages, ["", ""]));
        assert!(find(&Method::Get, "//v1//models").is_none());
        assert!(find(&Method::Get, "/v1/models/x").is_none());
        assert!(find(&Method::Get, "/").is_none());
        assert!(find(&Method::Post, "/v1/models").is_none());
    }

    #[test]
    fn a_path_without_the_method_is_a_405_and_an_unknown_path_a_404() {
        let on = |path| methods(path).cloned().collect::<Vec<_>>();
        assert_eq!(on("/v1/models"), [Method::Get]);
        assert_eq!(
            on("/v1/conversations/x/schedules"),
            [Method::Post, Method::Get]
        );
        assert_eq!(on("/v1/admin/users/bob/"), [Method::Delete]);
        assert!(on("/v1/nothing").is_empty());
        assert!(on("/v1/conversations/x/y/z/w").is_empty());
    }

    #[test]
    fn sends_take_the_budget_and_writes_the_rate_limit() {
        let class = |method, path| find(&method, path).unwrap().0.class;
        for (method, path) in [
            (Method::Post, "/v1/chat"),
            (Method::Post, "/v1/conversations/x/messages"),
            (Method::Post, "/v1/conversations/x/retry"),
        ] {
            assert_eq!(class(method, path), Class::Turn, "{path}");
        }
        for (method, path) in [
            (Method::Post, "/v1/conversations"),
            (Method::Post, "/v1/conversations/x/schedules"),
            (Method::Put, "/v1/conversations/x/artifacts/a"),
            (Method::Put, "/v1/me/memory/a"),
            (Method::Patch, "/v1/me/memory/a"),
            // A search is a pass over the index's lists, shared by every user of its database.
            (Method::Get, "/v1/me/memory/search"),
        ] {
            assert_eq!(class(method, path), Class::Write, "{path}");
        }
        let limited = ROUTES
            .iter()
            .filter(|r| matches!(r.class, Class::Write | Class::Turn))
            .count();
        assert_eq!(limited, 9, "only these nine count against the rate limit");
    }

    #[test]
    fn rows_are_well_formed() {
        for route in ROUTES {
            let path = route.path;
            assert!(path.starts_with('/') && !path.ends_with('/'), "{path}");
            let params = path.split('/').filter(|s| s.starts_with('{')).count();
            assert!(params <= MAX_PARAMS, "{path}: raise MAX_PARAMS");
            for segment in path.split('/').filter(|s| s.starts_with('{')) {
                assert!(segment.ends_with('}') && segment.len() > 2, "{path}");
            }
            // Its own path finds it, and no other row of its method does.
            assert!(
                std::ptr::eq(find(&route.method, path).unwrap().0, route),
                "{path}"
            );
            let overlapping = ROUTES
                .iter()
                .filter(|other| other.method == route.method)
                .filter(|other| other.bind(path.trim_matches('/')).is_some())
                .count();
            assert_eq!(overlapping, 1, "{path}: two rows of one method match it");
            // The gateway answers a public route before authentication, knowing it by its handler.
            assert_eq!(
                route.class == Class::Public,
                matches!(
                    route.handler,
                    Handler::Health
                        | Handler::Openapi
                        | Handler::ProtectedResource
                        | Handler::McpProtectedResource
                ),
                "{path}"
            );
        }
    }

    #[test]
    fn each_handler_is_named_after_its_operation() {
        let doc: serde_json::Value =
            crate::llm::json::from_str(crate::edge::gateway::routes::openapi::DOCUMENT).unwrap();
        for route in ROUTES {
            let method = route.method.to_string().to_ascii_lowercase();
            let operation = doc["paths"][route.path][&method]["operationId"]
                .as_str()
                .unwrap_or_else(|| panic!("{method} {} is not in the document", route.path));
            let name = format!("{:?}", route.handler);
            let mut expected = operation.to_string();
            expected[..1].make_ascii_uppercase();
            assert_eq!(name, expected, "{method} {}", route.path);
        }
    }
}
