//! `GET /openapi.json`: the HTTP API as an OpenAPI 3.1 document (`api/openapi.json`, kept in
//! step with the router by the test below and fuzzed by `make test`).

use worker::Response;

use crate::edge::error::ApiError;

pub const DOCUMENT: &str = include_str!("../../../api/openapi.json");

pub fn get() -> Result<Response, ApiError> {
    let headers = worker::Headers::new();
    headers.set("content-type", "application/json")?;
    Ok(Response::ok(DOCUMENT)?.with_headers(headers))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    /// `(METHOD, /path/{}/...)` for every route the router's `match` arms name, read from
    /// `src/edge/mod.rs`: the document cannot drift from the code without this failing.
    fn routed() -> BTreeSet<(String, String)> {
        let source = include_str!("../mod.rs");
        let mut routes = BTreeSet::new();
        for arm in source.split("(Method::").skip(1) {
            let Some((method, rest)) = arm.split_once(',') else {
                continue;
            };
            let Some((patterns, _)) = rest.split_once(") =>") else {
                continue;
            };
            for pattern in patterns.split('|') {
                let inner = pattern.trim().trim_start_matches('[').trim_end_matches(']');
                let path: String = inner
                    .split(',')
                    .map(|seg| {
                        let seg = seg.trim();
                        match seg.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
                            Some(literal) => format!("/{literal}"),
                            None => "/{}".to_string(),
                        }
                    })
                    .collect();
                routes.insert((method.trim().to_uppercase(), path));
            }
        }
        routes
    }

    fn documented() -> BTreeSet<(String, String)> {
        let doc: serde_json::Value = crate::llm::json::from_str(super::DOCUMENT).unwrap();
        let mut routes = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            // Parameter names differ from the router's bindings; the shape is what matters.
            let shape: String = path
                .split('/')
                .filter(|s| !s.is_empty())
                .map(|s| {
                    if s.starts_with('{') {
                        "/{}".to_string()
                    } else {
                        format!("/{s}")
                    }
                })
                .collect();
            for method in item.as_object().unwrap().keys() {
                if ["get", "post", "put", "delete", "patch"].contains(&method.as_str()) {
                    routes.insert((method.to_uppercase(), shape.clone()));
                }
            }
        }
        routes
    }

    #[test]
    fn every_route_is_documented_and_every_documented_route_exists() {
        let routed = routed();
        let documented = documented();
        assert!(routed.len() > 15, "the router was not read: {routed:?}");
        let undocumented: Vec<_> = routed.difference(&documented).collect();
        let missing: Vec<_> = documented.difference(&routed).collect();
        assert!(
            undocumented.is_empty(),
            "routes missing from api/openapi.json: {undocumented:?}"
        );
        assert!(
            missing.is_empty(),
            "documented routes the router lacks: {missing:?}"
        );
    }

    #[test]
    fn the_document_is_openapi_3_1_with_one_error_shape() {
        let doc: serde_json::Value = crate::llm::json::from_str(super::DOCUMENT).unwrap();
        assert_eq!(doc["openapi"], "3.1.0");
        let error = &doc["components"]["schemas"]["Error"];
        assert_eq!(error["required"], serde_json::json!(["error"]));
        assert_eq!(
            error["properties"]["error"]["required"],
            serde_json::json!(["code", "message"])
        );
    }
}
