//! Requests to a tool's API with redirects followed by hand (the transport sends with
//! `redirect: "manual"`): at most [`MAX_REDIRECTS`] hops, each target checked against the host
//! rules as the first URL is, and the deployment's headers (where its secrets are) dropped once
//! a hop leaves the first URL's origin, so a redirect cannot carry a key to another server or
//! steer a call into a private network.

use crate::llm::{ApiRequest, HttpResponse, HttpTransport};

use super::check_url;

/// Redirects followed for one request.
pub const MAX_REDIRECTS: usize = 3;

/// Why a request got no response to use.
#[derive(Debug, PartialEq)]
pub enum SendError {
    /// The network failed: worth another attempt.
    Network(String),
    /// A URL on the way broke the rules (a private host, another scheme, too many hops): the
    /// call's fault, not the service's, and no attempt will do better.
    Refused(String),
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::Network(e) | SendError::Refused(e) => f.write_str(e),
        }
    }
}

/// Headers that carry credentials whoever set them.
const CREDENTIALS: [&str; 3] = ["authorization", "cookie", "proxy-authorization"];

/// Sends `request` and follows its redirects. `deployment_headers` names the headers the
/// deployment configured (lower-case); they, and any credentials, go only to the first
/// origin.
pub async fn send(
    transport: &dyn HttpTransport,
    mut request: ApiRequest,
    allow_private: bool,
    deployment_headers: &[String],
) -> Result<HttpResponse, SendError> {
    check_url(&request.url, allow_private).map_err(SendError::Refused)?;
    let first_origin = origin(&request.url);
    for hop in 0..=MAX_REDIRECTS {
        let response = transport
            .send(request.clone())
            .await
            .map_err(SendError::Network)?;
        let location = match response.status {
            301 | 302 | 303 | 307 | 308 => response.header("location").map(str::to_string),
            _ => None,
        };
        let Some(location) = location else {
            return Ok(response);
        };
        if hop == MAX_REDIRECTS {
            break;
        }
        let next = resolve(&request.url, location.trim()).ok_or_else(|| {
            SendError::Refused("the API redirected to a URL that is not http(s)".into())
        })?;
        check_url(&next, allow_private)
            .map_err(|e| SendError::Refused(format!("the API redirected: {e}")))?;
        if origin(&next) != first_origin {
            request.headers.retain(|(name, _)| {
                !CREDENTIALS.contains(&name.as_str()) && !deployment_headers.contains(name)
            });
        }
        // As `fetch` does: a 303, or a 301/302 after a POST, becomes a GET without a body.
        if response.status == 303 || (request.method == "POST" && response.status < 303) {
            request.method = "GET";
            request.body = None;
            request.headers.retain(|(name, _)| name != "content-type");
        }
        request.url = next;
    }
    Err(SendError::Refused(format!(
        "the API redirected more than {MAX_REDIRECTS} times"
    )))
}

/// `scheme://host:port` of an http(s) URL, lower-cased, the default port left out.
fn origin(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let scheme = scheme.to_ascii_lowercase();
    let authority = rest.split(['/', '\\', '?', '#']).next().unwrap_or("");
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let authority = authority.to_ascii_lowercase();
    let default = if scheme == "https" { ":443" } else { ":80" };
    let authority = authority.strip_suffix(default).unwrap_or(&authority);
    format!("{scheme}://{authority}")
}

/// A `Location` against the URL that sent it; `None` for another scheme.
fn resolve(base: &str, location: &str) -> Option<String> {
    let lower = location.to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") {
        return Some(location.to_string());
    }
    let (scheme, rest) = base.split_once("://")?;
    if let Some(host_relative) = location.strip_prefix("//") {
        return Some(format!("{scheme}://{host_relative}"));
    }
    // Any other `scheme:` before the first `/` is not for us.
    if location
        .split(['/', '?', '#'])
        .next()
        .is_some_and(|first| first.contains(':'))
    {
        return None;
    }
    let path_start = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..path_start];
    if location.starts_with('/') {
        return Some(format!("{scheme}://{authority}{location}"));
    }
    let path = rest[path_start..].split(['?', '#']).next().unwrap_or("");
    if location.starts_with(['?', '#']) {
        return Some(format!("{scheme}://{authority}{path}{location}"));
    }
    let directory = path.rfind('/').map_or("/", |end| &path[..=end]);
    Some(format!("{scheme}://{authority}{directory}{location}"))
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::VecDeque;

    use async_trait::async_trait;

    use super::*;
    use crate::llm::HttpRequest;

    /// Answers each request with the next scripted status and `location`, and records it.
    #[derive(Default)]
    struct Hops {
        answers: RefCell<VecDeque<(u16, Option<&'static str>)>>,
        sent: RefCell<Vec<ApiRequest>>,
    }

    #[async_trait(?Send)]
    impl HttpTransport for Hops {
        async fn post(&self, _: HttpRequest) -> Result<HttpResponse, String> {
            unreachable!()
        }
        async fn get(&self, _: HttpRequest) -> Result<HttpResponse, String> {
            unreachable!()
        }
        async fn send(&self, request: ApiRequest) -> Result<HttpResponse, String> {
            self.sent.borrow_mut().push(request);
            let (status, location) = self.answers.borrow_mut().pop_front().unwrap_or((200, None));
            Ok(HttpResponse {
                status,
                headers: location
                    .map(|l| vec![("location".to_string(), l.to_string())])
                    .unwrap_or_default(),
                body: Box::pin(futures::stream::empty()),
            })
        }
    }

    fn hops(answers: &[(u16, Option<&'static str>)]) -> Hops {
        Hops {
            answers: RefCell::new(answers.iter().copied().collect()),
            ..Hops::default()
        }
    }

    fn post(url: &str) -> ApiRequest {
        ApiRequest {
            method: "POST",
            url: url.into(),
            headers: vec![
                ("x-api-key".into(), "s3cret".into()),
                ("authorization".into(), "Bearer s3cret".into()),
                ("content-type".into(), "application/json".into()),
                ("idempotency-key".into(), "k".into()),
            ],
            body: Some("{}".into()),
        }
    }

    fn run(api: &Hops, request: ApiRequest, allow_private: bool) -> Result<u16, String> {
        let configured = ["x-api-key".to_string()];
        match futures::executor::block_on(send(api, request, allow_private, &configured)) {
            Ok(response) => Ok(response.status),
            Err(SendError::Refused(e)) => Err(e),
            Err(SendError::Network(e)) => panic!("not a refusal: {e}"),
        }
    }

    #[test]
    fn a_redirect_into_a_private_network_is_refused_at_its_hop() {
        for target in [
            "http://127.0.0.1:8080/admin",
            "http://2130706433/",
            "http://[::ffff:169.254.169.254]/latest/meta-data",
            "file:///etc/passwd",
        ] {
            let api = hops(&[(302, Some(target))]);
            let e = run(&api, post("https://api.example.com/v1/x"), false).unwrap_err();
            assert!(e.contains("redirect"), "{target}: {e}");
            assert_eq!(api.sent.borrow().len(), 1, "{target}: never called");
        }
    }

    #[test]
    fn secrets_stay_with_their_origin_and_hops_are_bounded() {
        let api = hops(&[
            (307, Some("/v2/x")),
            (308, Some("https://other.example.net/y")),
            (302, Some("z")),
        ]);
        assert_eq!(
            run(&api, post("https://api.example.com/v1/x"), false),
            Ok(200)
        );
        let sent = api.sent.borrow();
        let urls: Vec<&str> = sent.iter().map(|r| r.url.as_str()).collect();
        assert_eq!(
            urls,
            [
                "https://api.example.com/v1/x",
                "https://api.example.com/v2/x",
                "https://other.example.net/y",
                "https://other.example.net/z",
            ]
        );
        let names = |r: &ApiRequest| r.headers.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
        // The same origin keeps the key; another one gets neither it nor the credentials.
        assert!(names(&sent[1]).contains(&"x-api-key".to_string()));
        assert_eq!(names(&sent[2]), ["content-type", "idempotency-key"]);
        // 307 and 308 keep the method and body; a 302 after a POST is a GET without one.
        assert_eq!((sent[2].method, sent[2].body.is_some()), ("POST", true));
        assert_eq!((sent[3].method, sent[3].body.as_deref()), ("GET", None));
        drop(sent);

        let api = hops(&[
            (302, Some("/a")),
            (302, Some("/b")),
            (302, Some("/c")),
            (302, Some("/d")),
        ]);
        let e = run(&api, post("https://api.example.com/"), false).unwrap_err();
        assert!(e.contains("more than 3"), "{e}");
        assert_eq!(api.sent.borrow().len(), 4);
        // A private first URL is refused before anything is sent, unless allowed.
        let api = hops(&[]);
        assert!(run(&api, post("http://127.0.0.1:9/"), false).is_err());
        assert!(api.sent.borrow().is_empty());
        assert_eq!(run(&api, post("http://127.0.0.1:9/"), true), Ok(200));
    }

    #[test]
    fn locations_resolve_against_the_url_that_sent_them() {
        let base = "https://api.example.com/v1/items/7?q=1";
        for (location, resolved) in [
            ("https://x.example/a", Some("https://x.example/a")),
            ("//x.example/a", Some("https://x.example/a")),
            ("/root", Some("https://api.example.com/root")),
            ("8", Some("https://api.example.com/v1/items/8")),
            ("?page=2", Some("https://api.example.com/v1/items/7?page=2")),
            ("mailto:a@b", None),
        ] {
            assert_eq!(resolve(base, location).as_deref(), resolved, "{location}");
        }
        assert_eq!(
            origin("HTTPS://API.example.com:443/x"),
            "https://api.example.com"
        );
        assert_ne!(
            origin("https://api.example.com"),
            origin("https://api.example.com:8443")
        );
    }
}
