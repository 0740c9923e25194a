//! The configuration parsed from sample environments: defaults, every variable's errors.

use super::*;
use crate::edge::config::agents::ChildHistory;

fn config(vars: &[(&str, &str)]) -> Result<Config, ApiError> {
    Config::from_lookup(|name| {
        vars.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    })
}

#[test]
fn defaults_apply_when_nothing_is_set() {
    let c = config(&[]).unwrap();
    assert_eq!(c.default_model.to_string(), DEFAULT_MODEL);
    assert_eq!(c.max_llm_calls, 10);
    assert_eq!(c.provider("openai").map(|p| &p.base_url), Some(&None));
    assert!(c.fallback_models.is_empty());
    assert_eq!(c.compact_threshold, 0.8);
    assert!(c.models.custom.is_empty());
    assert!(
        !c.auth.allow_anonymous,
        "anonymous access is off unless asked for"
    );
}

#[test]
fn http_tools_read_their_secrets_and_bad_ones_name_the_tool() {
    let tool = r#"[{"name": "weather", "description": "d", "url": "https://w.example/",
        "input_schema": {"type": "object"}, "headers": {"x-key": "secret:W_KEY"}}]"#;
    let c = config(&[("HTTP_TOOLS", tool), ("W_KEY", "k1")]).unwrap();
    assert_eq!(c.http_tools[0].name, "weather");
    assert_eq!(
        c.tool_secrets,
        vec![("W_KEY".to_string(), "k1".to_string())]
    );
    let e = config(&[("HTTP_TOOLS", tool)]).unwrap_err().to_string();
    assert!(
        e.contains("HTTP_TOOLS") && e.contains("`weather`") && e.contains("`W_KEY`"),
        "{e}"
    );
    let clash = tool.replace("weather", "current_time");
    let e = config(&[("HTTP_TOOLS", &clash), ("W_KEY", "k")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("built-in"), "{e}");
    assert!(!config(&[]).unwrap().allow_private_tool_hosts);
}

#[test]
fn with_budgets_on_every_model_has_a_price_or_is_refused() {
    let model = |id: &str| ModelRef::parse(id).unwrap();
    let free = config(&[]).unwrap();
    assert!(free.check_model(&model("openai:o3")).is_ok());
    let budgets = config(&[("USER_BUDGET_USD", "5")]).unwrap();
    for unpriced in [
        "openai:o3",
        "workers-ai:@cf/meta/llama-3.1-8b",
        "openai:gpt-5-pro",
    ] {
        let e = budgets.check_model(&model(unpriced)).unwrap_err();
        assert_eq!(e.status(), 400);
        assert!(
            e.to_string()
                .contains(&format!("`{unpriced}` has no price")),
            "{e}"
        );
    }
    assert!(budgets.check_model(&model("openai:gpt-5")).is_ok());
    assert!(budgets.check_model(&model("ollama:qwen3:8b")).is_ok());
    // A price from MODELS serves.
    let priced = config(&[
        ("USER_BUDGET_USD", "5"),
        (
            "MODELS",
            r#"[{"id": "openai:o3", "context_window": 200000, "max_output_tokens": 100000,
                 "price": {"input": 2, "output": 8, "cache_read": 0.5, "cache_write": 0}}]"#,
        ),
    ])
    .unwrap();
    assert!(priced.check_model(&model("openai:o3")).is_ok());
    // The deployment's own models are checked when the configuration is read.
    for (variable, value) in [
        ("DEFAULT_MODEL", "openai:o3"),
        ("FALLBACK_MODELS", "openai:gpt-4o,workers-ai:@cf/x/y"),
        ("BUDGET_MODEL", "openai:gpt-5-pro"),
    ] {
        let e = config(&[("USER_BUDGET_USD", "1"), (variable, value)])
            .unwrap_err()
            .to_string();
        assert!(e.contains(variable) && e.contains("has no price"), "{e}");
        assert!(config(&[(variable, value)]).is_ok());
    }
}

#[test]
fn allowed_models_limit_what_users_choose() {
    let c = config(&[("ALLOWED_MODELS", "openai:gpt-4o-mini, anthropic:*")]).unwrap();
    let check = |id: &str| c.check_model(&ModelRef::parse(id).unwrap());
    assert!(check("openai:gpt-4o-mini").is_ok());
    assert!(check("anthropic:claude-haiku-4-5").is_ok());
    // The default is the deployment's own choice.
    assert!(check(DEFAULT_MODEL).is_ok());
    let e = check("openai:gpt-4o").unwrap_err().to_string();
    assert!(
        e.contains("`openai:gpt-4o` is not allowed") && e.contains("anthropic:*"),
        "{e}"
    );
    assert!(!c.allows("gemini:gemini-2.5-pro") && !c.allows("anthropic-x:y"));
    let e = config(&[("ALLOWED_MODELS", "gpt-4o")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("ALLOWED_MODELS"), "{e}");
    let e = config(&[("ALLOWED_MODELS", "Bad Provider:*")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("ALLOWED_MODELS"), "{e}");
}

#[test]
fn fallback_models_are_a_comma_separated_list() {
    let c = config(&[(
        "FALLBACK_MODELS",
        " openai:gpt-4o ,gemini:gemini-2.5-flash,",
    )])
    .unwrap();
    let ids: Vec<String> = c.fallback_models.iter().map(ToString::to_string).collect();
    assert_eq!(ids, ["openai:gpt-4o", "gemini:gemini-2.5-flash"]);
}

#[test]
fn bad_values_name_the_variable() {
    for (vars, name) in [
        (vec![("DEFAULT_MODEL", "gpt-4o")], "DEFAULT_MODEL"),
        (vec![("MAX_LLM_CALLS", "lots")], "MAX_LLM_CALLS"),
        (vec![("MAX_LLM_CALLS", "0")], "MAX_LLM_CALLS"),
        (
            vec![("OPENAI_BASE_URL", "localhost:8080")],
            "OPENAI_BASE_URL",
        ),
        (
            vec![("FALLBACK_MODELS", "openai:gpt-4o, haiku")],
            "FALLBACK_MODELS",
        ),
        (vec![("ALLOW_ANONYMOUS", "sure")], "ALLOW_ANONYMOUS"),
        (vec![("COMPACT_THRESHOLD", "1.5")], "COMPACT_THRESHOLD"),
        (vec![("MODELS", "[{\"id\": \"nope\"}]")], "MODELS"),
    ] {
        let message = config(&vars).unwrap_err().to_string();
        assert!(message.contains(name), "{message}");
    }
}

#[test]
fn d1_shards_default_to_the_one_binding_and_are_checked() {
    assert_eq!(config(&[]).unwrap().d1_shards, vec!["DB"]);
    assert_eq!(
        config(&[("D1_SHARDS", "DB, DB_2")]).unwrap().d1_shards,
        vec!["DB", "DB_2"]
    );
    for bad in ["DB,DB", "DB,2X", "DB,my-db", " , "] {
        let err = config(&[("D1_SHARDS", bad)]).unwrap_err().to_string();
        assert!(err.contains("D1_SHARDS"), "{bad}: {err}");
    }
}

#[test]
fn file_limits_and_retention_have_defaults_and_bounds() {
    let c = config(&[]).unwrap();
    assert_eq!((c.max_file_bytes, c.max_files_per_message), (10 << 20, 5));
    assert_eq!(c.max_file_bytes_per_user, 1 << 30);
    assert_eq!(
        config(&[("MAX_FILE_BYTES_PER_USER", "8589934592")])
            .unwrap()
            .max_file_bytes_per_user,
        8 << 30,
        "past 4 GiB"
    );
    assert_eq!(c.retention_days, None, "kept for ever unless set");
    assert_eq!(
        config(&[("RETENTION_DAYS", "0")]).unwrap().retention_days,
        None
    );
    assert_eq!(
        config(&[("RETENTION_DAYS", "30")]).unwrap().retention_days,
        Some(30)
    );
    for (name, bad) in [
        ("RETENTION_DAYS", "-1"),
        ("MAX_FILE_BYTES", "0"),
        ("MAX_FILE_BYTES", "999999999"),
        ("MAX_FILES_PER_MESSAGE", "21"),
        ("MAX_FILE_BYTES_PER_USER", "0"),
        ("MAX_FILE_BYTES_PER_USER", "1000"),
    ] {
        let e = config(&[(name, bad)]).unwrap_err().to_string();
        assert!(e.contains(name), "{name}={bad}: {e}");
    }
}

#[test]
fn schedule_limits_have_defaults_and_bounds() {
    let limits = config(&[]).unwrap().schedule_limits;
    assert_eq!(
        (
            limits.per_conversation,
            limits.min_interval_s,
            limits.per_day
        ),
        (20, 60, 50)
    );
    assert!(
        !limits.approval,
        "the model's schedules need no approval unless asked for"
    );
    let set = config(&[
        ("MAX_SCHEDULES_PER_DAY", "5"),
        ("SCHEDULE_APPROVAL", "true"),
    ])
    .unwrap()
    .schedule_limits;
    assert_eq!((set.per_day, set.approval), (5, true));
    for (name, bad) in [
        ("MAX_SCHEDULES_PER_DAY", "0"),
        ("MAX_SCHEDULES_PER_DAY", "1001"),
        ("SCHEDULE_APPROVAL", "sometimes"),
        ("SCHEDULE_MIN_INTERVAL_SECONDS", "0"),
    ] {
        let e = config(&[(name, bad)]).unwrap_err().to_string();
        assert!(e.contains(name), "{name}={bad}: {e}");
    }
}

#[test]
fn without_agents_there_is_one_default_agent_of_the_deployment_settings() {
    let c = config(&[
        ("DEFAULT_MODEL", "openai:gpt-4o"),
        ("FALLBACK_MODELS", "anthropic:claude-haiku-4-5"),
        ("MAX_LLM_CALLS", "7"),
    ])
    .unwrap();
    assert_eq!(c.agents.len(), 1);
    let agent = c.agent(None).unwrap();
    assert_eq!(agent.name, "default");
    assert_eq!(agent.model.to_string(), "openai:gpt-4o");
    assert_eq!(agent.fallback_models, c.fallback_models);
    assert_eq!(
        (agent.max_llm_calls, &agent.toolsets, &agent.tools),
        (7, &None, &None)
    );
    assert!(agent.system_with(None).is_none());
    assert_eq!(agent.system_with(Some("own")).as_deref(), Some("own"));
    assert_eq!(c.agent(Some("default")).unwrap().name, "default");
    let e = c.agent(Some("writer")).unwrap_err().to_string();
    assert!(e.contains("`writer`") && e.contains("`default`"), "{e}");
}

#[test]
fn agents_fill_in_the_deployment_settings_and_keep_their_order() {
    let agents = r#"{
        "writer": {"description": "Writes", "fallback_models": ["anthropic:claude-haiku-4-5"]},
        "support": {"description": "Answers customers", "system": "Be kind.",
                    "model": "openai:gpt-4o-mini", "toolsets": ["artifacts"],
                    "tools": ["current_time"], "max_llm_calls": 3}
    }"#;
    let c = config(&[("AGENTS", agents), ("MAX_LLM_CALLS", "9")]).unwrap();
    let names: Vec<_> = c.agents.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["writer", "support"], "in the order declared");
    // No `default` declared: the first is the default.
    assert_eq!(c.agent(None).unwrap().name, "writer");
    let support = &c.agents[1];
    assert_eq!(support.model.to_string(), "openai:gpt-4o-mini");
    assert_eq!(support.max_llm_calls, 3);
    assert_eq!(
        support.toolsets.as_deref(),
        Some(&["artifacts".to_string()][..])
    );
    assert_eq!(
        support.system_with(Some("Answer in French.")).as_deref(),
        Some("Be kind.\n\nAnswer in French.")
    );
    let writer = &c.agents[0];
    assert_eq!(writer.model, c.default_model);
    assert_eq!(writer.max_llm_calls, 9);
    assert_eq!(
        writer.fallback_models[0].to_string(),
        "anthropic:claude-haiku-4-5"
    );
    // An agent's model is the deployment's choice: its conversations call it whatever
    // ALLOWED_MODELS says, and conversations of other agents do not.
    let limited = config(&[("AGENTS", agents), ("ALLOWED_MODELS", "openai:o3")]).unwrap();
    let mini = ModelRef::parse("openai:gpt-4o-mini").unwrap();
    assert!(limited.check_model_for(&mini, &limited.agents[1]).is_ok());
    assert!(limited.check_model_for(&mini, &limited.agents[0]).is_err());
    assert!(!limited.allows("openai:gpt-4o-mini"));
    // Toolsets: a conversation's choice within the agent's, else the agent's own.
    let chosen = |t: &[&str]| Some(t.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    assert_eq!(
        support.toolsets_within(chosen(&["artifacts", "schedules"])),
        chosen(&["artifacts"])
    );
    assert_eq!(support.toolsets_within(None), chosen(&["artifacts"]));
    assert_eq!(
        writer.toolsets_within(chosen(&["schedules"])),
        chosen(&["schedules"])
    );
    assert_eq!(writer.toolsets_within(None), None);
    assert!(support.has_toolset("artifacts") && !support.has_toolset("schedules"));
    assert!(writer.has_toolset("schedules"));
    assert!(support.check_toolsets(&["schedules".into()]).is_err());
    // A declared `default` is the default wherever it stands.
    let declared = r#"{"a": {"description": "A"}, "default": {"description": "D"}}"#;
    let c = config(&[("AGENTS", declared)]).unwrap();
    assert_eq!(c.agent(None).unwrap().name, "default");
}

#[test]
fn bad_agents_name_the_variable_the_agent_and_the_field() {
    let cases = [
        ("[]", "JSON object"),
        ("{}", "declares no agent"),
        (r#"{"a b": {"description": "x"}}"#, "agent `a b`"),
        (
            &format!(r#"{{"{}": {{"description": "x"}}}}"#, "a".repeat(65)),
            "1 to 64",
        ),
        (r#"{"a": {}}"#, "`description`"),
        (r#"{"a": {"description": "x", "colour": 1}}"#, "`colour`"),
        (r#"{"a": {"description": "x", "model": "gpt"}}"#, "`model`"),
        (
            r#"{"a": {"description": "x", "toolsets": ["nope"]}}"#,
            "toolset `nope`",
        ),
        (
            r#"{"a": {"description": "x", "tools": ["nope"]}}"#,
            "`nope`",
        ),
        (
            r#"{"a": {"description": "x", "tools": ["no pe"]}}"#,
            "not a tool name",
        ),
        (
            r#"{"a": {"description": "x", "max_llm_calls": 0}}"#,
            "`max_llm_calls`",
        ),
        (
            r#"{"a": {"description": "x", "output": {"type": "object"}}}"#,
            "`output/schema`: is required",
        ),
    ];
    for (json, needle) in cases {
        let e = config(&[("AGENTS", json)]).unwrap_err();
        assert_eq!(e.status(), 500, "{json}");
        let text = e.to_string();
        assert!(
            text.contains("AGENTS") && text.contains(needle),
            "{json}: {text}"
        );
    }
    // With budgets on, an agent's model needs a price like any the deployment names.
    let priced = r#"{"a": {"description": "x", "model": "openai:my-own"}}"#;
    let e = config(&[("AGENTS", priced), ("USER_BUDGET_USD", "5")]).unwrap_err();
    assert!(
        e.to_string()
            .contains("agent `a`: `openai:my-own` has no price"),
        "{e}"
    );
}

#[test]
fn agent_tools_name_declared_agents_without_cycles_within_the_depth() {
    let c = config(&[(
        "AGENTS",
        r#"{"lead": {"description": "leads", "tools": ["current_time",
              {"type": "agent", "agent": "researcher"},
              {"type": "agent", "agent": "writer", "name": "draft", "history": "summary",
               "max_llm_calls": 3, "timeout_ms": 60000}]},
            "researcher": {"description": "finds things", "tools": []},
            "writer": {"description": "writes"}}"#,
    )])
    .unwrap();
    let lead = c.agent(Some("lead")).unwrap();
    assert_eq!(
        lead.tools.as_deref(),
        Some(&["current_time".to_string()][..])
    );
    let names: Vec<_> = lead.agent_tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["researcher", "draft"]);
    let draft = &lead.agent_tools[1];
    assert_eq!(draft.agent, "writer");
    assert_eq!(draft.history, ChildHistory::Summary);
    assert_eq!(
        (draft.max_llm_calls, draft.timeout_ms),
        (Some(3), Some(60_000))
    );
    assert_eq!(lead.agent_tools[0].input_schema["required"][0], "task");
    // An agent whose tools are agents alone offers tools.
    let only = config(&[(
        "AGENTS",
        r#"{"a": {"description": "x", "tools": [{"type": "agent", "agent": "b"}]},
            "b": {"description": "y", "tools": []}}"#,
    )])
    .unwrap();
    assert!(only.agent(Some("a")).unwrap().offers_tools());
    assert!(!only.agent(Some("b")).unwrap().offers_tools());

    let chain = |n: usize| {
        let mut agents: Vec<String> = (0..n)
            .map(|i| {
                format!(
                    r#""a{i}": {{"description": "x", "tools": [{{"type": "agent", "agent": "a{}"}}]}}"#,
                    i + 1
                )
            })
            .collect();
        agents.push(format!(r#""a{n}": {{"description": "x"}}"#));
        format!("{{{}}}", agents.join(","))
    };
    assert!(config(&[("AGENTS", &chain(3))]).is_ok());
    assert!(config(&[("AGENTS", &chain(4)), ("MAX_AGENT_DEPTH", "4")]).is_ok());
    let cases = [
        (chain(4), "a0 → a1 → a2 → a3 → a4 is 4 agents deep, past MAX_AGENT_DEPTH (3)"),
        (
            r#"{"a": {"description": "x", "tools": [{"type": "agent", "agent": "b"}]},
                "b": {"description": "x", "tools": [{"type": "agent", "agent": "c"}]},
                "c": {"description": "x", "tools": [{"type": "agent", "agent": "a"}]}}"#
                .into(),
            "a cycle: a → b → c → a",
        ),
        (
            r#"{"a": {"description": "x", "tools": [{"type": "agent", "agent": "a"}]}}"#.into(),
            "a cycle: a → a",
        ),
        (
            r#"{"a": {"description": "x", "tools": [{"type": "agent", "agent": "ghost"}]}}"#
                .into(),
            "asks the agent `ghost`, which is not declared; there are `a`",
        ),
        (
            r#"{"a": {"description": "x", "tools": [{"type": "agent", "agent": "b", "name": "current_time"}]},
                "b": {"description": "x"}}"#
                .into(),
            "the agent tool `current_time` has the name of another tool",
        ),
        (
            r#"{"a": {"description": "x", "tools": [{"type": "agent", "agent": "b"}, {"type": "agent", "agent": "b"}]},
                "b": {"description": "x"}}"#
                .into(),
            "`tools[1]`: the name `b` is taken twice",
        ),
        (
            r#"{"a": {"description": "x", "tools": [{"type": "agent", "agent": "b", "history": "all"}]},
                "b": {"description": "x"}}"#
                .into(),
            "`history` must be `none` or `summary`",
        ),
        (
            r#"{"a": {"description": "x", "tools": [{"type": "agent", "agent": "b", "input_schema": {"type": "string"}}]},
                "b": {"description": "x"}}"#
                .into(),
            "`input_schema` must be a JSON Schema of `type: object`",
        ),
        (
            r#"{"a": {"description": "x", "tools": [{"type": "robot", "agent": "b"}]}}"#.into(),
            "`type` must be `agent`",
        ),
        (
            r#"{"a": {"description": "x", "tools": [{"type": "agent"}]}}"#.into(),
            "missing field `agent`",
        ),
        (
            r#"{"a": {"description": "x", "tools": [7]}}"#.into(),
            "`tools[0]`: must be a tool name or an agent tool object",
        ),
    ];
    for (json, needle) in cases {
        let e = config(&[("AGENTS", &json)]).unwrap_err().to_string();
        assert!(e.contains("AGENTS") && e.contains(needle), "{json}: {e}");
    }
    // Handoffs name another declared agent, under a tool name every provider takes.
    let triage = config(&[(
        "AGENTS",
        r#"{"triage": {"description": "x", "tools": [{"type": "handoff", "agent": "billing"}]},
            "billing": {"description": "y", "tools": [{"type": "handoff", "agent": "triage", "description": "Back to triage."}]}}"#,
    )])
    .unwrap();
    let handoff = &triage.agent(Some("triage")).unwrap().handoffs[0];
    assert_eq!(
        (handoff.name.as_str(), handoff.agent.as_str()),
        ("transfer_to_billing", "billing")
    );
    assert!(triage.agent(Some("triage")).unwrap().offers_tools());
    for (json, needle) in [
        (
            r#"{"a": {"description": "x", "tools": [{"type": "handoff", "agent": "a"}]}}"#
                .to_string(),
            "`transfer_to_a` hands to `a`, which is not another declared agent",
        ),
        (
            r#"{"a": {"description": "x", "tools": [{"type": "handoff", "agent": "ghost"}]}}"#
                .to_string(),
            "hands to `ghost`",
        ),
        (
            format!(
                r#"{{"a": {{"description": "x", "tools": [{{"type": "handoff", "agent": "{0}"}}]}}, "{0}": {{"description": "y"}}}}"#,
                "b".repeat(60)
            ),
            "give the agent a shorter name",
        ),
    ] {
        let e = config(&[("AGENTS", &json)]).unwrap_err().to_string();
        assert!(e.contains(needle), "{json}: {e}");
    }
    // Its child's calls are what a person approves, not the agent tool's.
    let gated = config(&[
        (
            "AGENTS",
            r#"{"a": {"description": "x", "tools": [{"type": "agent", "agent": "b"}]},
                "b": {"description": "y"}}"#,
        ),
        ("APPROVAL_REQUIRED_TOOLS", "b"),
    ])
    .unwrap_err()
    .to_string();
    assert!(
        gated.contains("the agent tool `b` is in APPROVAL_REQUIRED_TOOLS"),
        "{gated}"
    );
}

#[test]
fn an_agents_memory_is_read_and_checked_against_its_toolsets_and_the_settings() {
    let agents = r#"{"concierge": {"description": "d", "memory": {"recall": {"top_k": 3}}},
        "plain": {"description": "p"}}"#;
    let c = config(&[("AGENTS", agents)]).unwrap();
    let memory = c.agents[0].memory.as_ref().expect("memory");
    assert_eq!(memory.top_k, 3);
    assert!(c.agents[1].memory.is_none());
    assert!(c.toolsets().contains(&"memory".to_string()));
    assert_eq!(c.memory.max_bytes, 16 * 1024);
    assert_eq!(c.memory.recall_ms, 150);
    assert_eq!(c.memory.embedding_model, memory::EMBEDDING_MODEL);
    // Kept by the model, the agent must have the toolset `update_memory` is in.
    let narrowed = r#"{"a": {"description": "d", "toolsets": ["artifacts"], "memory": {}}}"#;
    let e = config(&[("AGENTS", narrowed)]).unwrap_err().to_string();
    assert!(e.contains("leave out `memory`"), "{e}");
    let background = r#"{"a": {"description": "d", "toolsets": ["artifacts"],
        "memory": {"managed_by": "background"}}}"#;
    assert!(config(&[("AGENTS", background)]).is_ok());
    // A memory field that is wrong names the agent.
    let wrong = r#"{"a": {"description": "d", "memory": {"recall": 3}}}"#;
    let e = config(&[("AGENTS", wrong)]).unwrap_err().to_string();
    assert!(e.contains("agent `a`: `memory`"), "{e}");
    // The extractor's model is priced when budgets are on, like any.
    let e = config(&[
        ("USER_BUDGET_USD", "5"),
        ("MEMORY_MODEL", "openai:unpriced-x"),
    ])
    .unwrap_err()
    .to_string();
    assert!(e.contains("MEMORY_MODEL"), "{e}");
    assert!(config(&[("MEMORY_MAX_BYTES", "10")]).is_err());
    assert!(config(&[("MEMORY_RECALL_MS", "0")]).is_err());
}

#[test]
fn traces_are_off_without_an_endpoint_and_otel_settings_name_their_variable() {
    assert_eq!(config(&[]).unwrap().traces, None);
    let on = config(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-honeycomb-team=abc%3D"),
        ("OTEL_SAMPLE_RATE", "0.25"),
        ("OTEL_CAPTURE_CONTENT", "true"),
    ])
    .unwrap()
    .traces
    .unwrap();
    assert_eq!(on.endpoint, "http://collector:4318/v1/traces");
    assert_eq!(on.headers, vec![("x-honeycomb-team".into(), "abc=".into())]);
    assert_eq!((on.sample_rate, on.capture_content), (0.25, true));
    assert_eq!(on.service, "edge-agent");
    let exact = config(&[(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "https://x.example/otlp/traces",
    )]);
    assert_eq!(
        exact.unwrap().traces.unwrap().endpoint,
        "https://x.example/otlp/traces"
    );
    for (name, value) in [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"),
        ("OTEL_SAMPLE_RATE", "2"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "nokey"),
        ("OTEL_CAPTURE_CONTENT", "maybe"),
    ] {
        let vars = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            (name, value),
        ];
        let vars: Vec<_> = vars.iter().rev().copied().collect();
        let e = config(&vars).unwrap_err().to_string();
        assert!(e.contains(name), "{name}: {e}");
    }
}
