//! `GET /openapi.json`: the HTTP API as an OpenAPI 3.1 document (`api/openapi.json`, kept in
//! step with the router by the test below and fuzzed by `make test`), made this deployment's:
//! the model ids it takes name the providers it serves, and toolsets and agents are the ones it
//! has.

use worker::{Env, Response};

use crate::edge::config::Config;
use crate::edge::error::ApiError;

pub const DOCUMENT: &str = include_str!("../../../../api/openapi.json");

/// Where the document takes this deployment's model ids, toolsets and agents (an `enum`'s
/// items).
const MODEL_PATTERN: &str = "\"MODEL_PATTERN\"";
const TOOLSETS: &str = "\"TOOLSETS\"";
const AGENTS: &str = "\"AGENTS\"";

pub fn get(env: &Env, config: Option<&Config>) -> Result<Response, ApiError> {
    let workers_ai = crate::edge::platform::ai::WorkersAiBinding::from_env(env).is_ok();
    let toolsets = config.map(Config::toolsets).unwrap_or_default();
    let agents: Vec<String> = config
        .map(|c| c.agents.iter().map(|a| a.name.clone()).collect())
        .unwrap_or_default();
    let document = deployed(workers_ai, &toolsets, &agents)?;
    let headers = worker::Headers::new();
    headers.set("content-type", "application/json")?;
    Ok(Response::ok(document)?.with_headers(headers))
}

/// The document with the placeholders filled in.
fn deployed(workers_ai: bool, toolsets: &[String], agents: &[String]) -> Result<String, ApiError> {
    let items = |names: &[String]| -> Result<String, ApiError> {
        Ok(serde_json::to_string(names)?
            .trim_matches(['[', ']'])
            .to_string())
    };
    Ok(DOCUMENT
        .replace(
            MODEL_PATTERN,
            &serde_json::to_string(&model_pattern(workers_ai))?,
        )
        .replace(TOOLSETS, &items(toolsets)?)
        .replace(AGENTS, &items(agents)?))
}

/// A regular expression for the model ids [`crate::llm::ModelRef::parse`] takes of the
/// providers served: the model in letters, digits and `._-:@` (and `/` for Workers AI), never
/// `..`. Without lookarounds, which not every generator of examples knows.
fn model_pattern(workers_ai: bool) -> String {
    use crate::llm::providers::{Reach, PROVIDERS};
    let model = |chars: &str| format!("(?:(?:\\.?[{chars}])+\\.?|\\.)");
    // Every HTTP provider is served; one reached through a binding when it is bound.
    let http: Vec<&str> = PROVIDERS
        .iter()
        .filter(|p| matches!(p.reach, Reach::Http(_)))
        .map(|p| p.name)
        .collect();
    let mut pattern = format!("^(?:(?:{}):{}", http.join("|"), model("A-Za-z0-9_:@-"));
    if workers_ai {
        let bound = PROVIDERS
            .iter()
            .filter(|p| matches!(p.reach, Reach::Binding));
        for p in bound {
            // Workers AI's model ids may hold `/` (`@cf/vendor/model`).
            pattern.push_str(&format!("|{}:{}", p.name, model("A-Za-z0-9_:@/-")));
        }
    }
    pattern.push_str(")$");
    pattern
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_document_names_the_providers_and_toolsets_served() {
        let document: serde_json::Value = serde_json::from_str(
            &super::deployed(false, &["artifacts".into()], &["a".into(), "b".into()]).unwrap(),
        )
        .unwrap();
        let create = &document["paths"]["/v1/conversations"]["post"]["requestBody"]["content"]
            ["application/json"]["schema"]["properties"];
        assert_eq!(
            create["toolsets"]["items"]["enum"],
            serde_json::json!(["artifacts"])
        );
        assert_eq!(
            create["agent"]["anyOf"][0]["enum"],
            serde_json::json!(["a", "b"])
        );
        let chat = &document["components"]["schemas"]["ChatRequest"]["properties"];
        assert_eq!(
            chat["agent"]["anyOf"][0]["enum"],
            serde_json::json!(["a", "b"])
        );
        let pattern = create["model"]["pattern"].as_str().unwrap();
        assert!(!pattern.contains("workers-ai"));
        let with_ai = super::model_pattern(true);
        assert!(
            with_ai.contains("|workers-ai:(?:(?:\\.?[A-Za-z0-9_:@/-])+"),
            "{with_ai}"
        );
        let bare = super::deployed(true, &[], &[]).unwrap();
        assert!(!bare.contains("\"TOOLSETS\"") && !bare.contains("\"AGENTS\""));
    }

    use std::collections::BTreeSet;

    /// `(METHOD, /path/{name}/...)` for every route of the router's table
    /// ([`crate::edge::gateway::table::ROUTES`]): the document cannot drift from the code
    /// without this failing.
    fn routed() -> BTreeSet<(String, String)> {
        crate::edge::gateway::table::ROUTES
            .iter()
            .map(|route| (route.method.to_string(), route.path.to_string()))
            .collect()
    }

    fn documented() -> BTreeSet<(String, String)> {
        let doc: serde_json::Value = crate::llm::json::from_str(super::DOCUMENT).unwrap();
        let mut routes = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            // The table writes paths as the document does, parameter names and all.
            for method in item.as_object().unwrap().keys() {
                if ["get", "post", "put", "delete", "patch"].contains(&method.as_str()) {
                    routes.insert((method.to_uppercase(), path.clone()));
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
