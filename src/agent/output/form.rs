//! Which form a typed answer takes with a given provider: the request's `strategy`, with `auto`
//! resolved to what each provider takes best (and `native` or `tool` refused where a provider
//! cannot), and the pieces each form adds to a call: the answer tool, the prompt's instruction.

use serde_json::Value;

use super::spec::{strict_openai, OutputSpec, Strategy};
use crate::llm::types::{answer_tool_def, schema_refused, tool_refused};
use crate::llm::ToolDef;

/// How a call asks for the answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Form {
    /// The provider's structured output on this schema (OpenAI's strict form when `strict`).
    Native { schema: Value, strict: bool },
    /// A tool the model must call, its input the answer ([`answer_tool`]).
    Tool,
    /// An instruction in the prompt ([`instruction`]); the answer's text is parsed.
    Prompt,
}

/// The form `spec` takes with `provider` (a model id's provider part) on a call that offers
/// tools or not; `native_model`: the model has the provider's structured output (the registry
/// says, where a provider's models differ: Anthropic's). A form the provider cannot take is an
/// error naming why, for a 400.
pub fn form(
    spec: &OutputSpec,
    provider: &str,
    offers_tools: bool,
    native_model: bool,
) -> Result<Form, String> {
    let native = || match provider {
        "openai" => match strict_openai(&spec.schema) {
            Some(strict) => Form::Native {
                schema: strict,
                strict: true,
            },
            None => Form::Native {
                schema: spec.schema.clone(),
                strict: false,
            },
        },
        _ => Form::Native {
            schema: spec.schema.clone(),
            strict: false,
        },
    };
    // Where the provider's structured output cannot serve this call, and why.
    let no_native = schema_refused(provider, offers_tools, native_model);
    let no_tool = tool_refused(provider);
    match spec.strategy {
        Strategy::Prompt => Ok(Form::Prompt),
        Strategy::Native => match no_native {
            Some(why) => Err(format!("{why}: ask for `strategy: \"tool\"` or `\"auto\"`")),
            None => Ok(native()),
        },
        Strategy::Tool => match no_tool {
            Some(why) => Err(format!(
                "{why}: ask for `strategy: \"native\"` or `\"auto\"`"
            )),
            None => Ok(Form::Tool),
        },
        Strategy::Auto => Ok(match (no_native, no_tool) {
            (None, _) => native(),
            (Some(_), None) => Form::Tool,
            (Some(_), Some(_)) => Form::Prompt,
        }),
    }
}

/// The tool a [`Form::Tool`] answer is the input of: named after the answer, its schema the
/// answer's (always an object).
pub fn answer_tool(spec: &OutputSpec) -> ToolDef {
    answer_tool_def(&spec.name, spec.description.as_deref(), &spec.schema)
}

/// What a [`Form::Prompt`] call adds to its system prompt.
pub fn instruction(spec: &OutputSpec) -> String {
    let schema = serde_json::to_string(&spec.schema).unwrap_or_default();
    format!(
        "Answer with one JSON object and nothing else (no prose, no code fence). It must match \
         this JSON Schema: {schema}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(strategy: &str) -> OutputSpec {
        OutputSpec::parse(&json!({
            "type": "object",
            "strategy": strategy,
            "schema": {"type": "object", "properties": {"city": {"type": "string"}}},
        }))
        .unwrap()
    }

    fn kind(form: &Result<Form, String>) -> &'static str {
        match form {
            Ok(Form::Native { strict: true, .. }) => "native strict",
            Ok(Form::Native { .. }) => "native",
            Ok(Form::Tool) => "tool",
            Ok(Form::Prompt) => "prompt",
            Err(_) => "refused",
        }
    }

    #[test]
    fn auto_takes_what_each_provider_does_best_and_the_others_are_refused_where_impossible() {
        // (strategy, provider, offers tools, native model) → form
        let table = [
            ("auto", "openai", true, true, "native strict"),
            ("auto", "anthropic", true, true, "native"),
            ("auto", "anthropic", true, false, "tool"),
            ("auto", "gemini", false, true, "native"),
            ("auto", "gemini", true, true, "tool"),
            ("auto", "ollama", true, true, "native"),
            ("auto", "workers-ai", false, true, "tool"),
            ("native", "workers-ai", false, true, "refused"),
            ("native", "gemini", true, true, "refused"),
            ("native", "anthropic", false, false, "refused"),
            ("tool", "ollama", false, true, "refused"),
            ("tool", "openai", true, true, "tool"),
            ("prompt", "workers-ai", true, false, "prompt"),
        ];
        for (strategy, provider, tools, native, expected) in table {
            let got = form(&spec(strategy), provider, tools, native);
            assert_eq!(
                kind(&got),
                expected,
                "{strategy} with {provider} (tools {tools}): {got:?}"
            );
            if let Err(why) = got {
                assert!(why.contains("strategy"), "{why}");
            }
        }
        // OpenAI gets the strict form when there is one, the schema as written when not.
        let Ok(Form::Native { schema, .. }) = form(&spec("auto"), "openai", false, true) else {
            panic!("not native");
        };
        assert_eq!(schema["additionalProperties"], json!(false));
        let any = OutputSpec::parse(&json!({"type": "json"})).unwrap();
        assert_eq!(kind(&form(&any, "openai", false, true)), "native");
    }

    #[test]
    fn the_answer_tool_and_the_instruction_carry_the_schema() {
        let spec = spec("tool");
        let tool = answer_tool(&spec);
        assert_eq!(
            (tool.name.as_str(), &tool.input_schema),
            ("answer", &spec.schema)
        );
        assert!(instruction(&spec).contains("\"city\""));
    }
}
