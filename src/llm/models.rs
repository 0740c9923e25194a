//! Model ids (`provider:model`, e.g. `anthropic:claude-sonnet-4-5`) and the model registry:
//! context window, output limit, price and capabilities of the models we know. Unknown models
//! still work, with conservative defaults and no price.

use serde::Serialize;

use super::fields::{self, Fields};

pub use super::capabilities::Capabilities;
pub use super::model_ref::{ModelRef, MAX_MODEL_ID};
use super::Usage;

impl ModelRef {
    /// What the registry knows about this model.
    pub fn info(&self) -> ModelInfo {
        lookup(self)
    }
}

/// Whether `full` is the registry entry `entry` itself or one of its dated snapshots: the entry
/// followed by `-latest` (`:latest` for Ollama's tags) or by `-` and a date or revision (`-20250929`, `-2024-07-18`, `-001`).
/// A longer name is another model (`gpt-5-pro` is not `gpt-5`, `claude-sonnet-4-5` not
/// `claude-sonnet-4`), with its own price or none.
pub fn is_variant_of(full: &str, entry: &str) -> bool {
    let Some(rest) = full.strip_prefix(entry) else {
        return false;
    };
    let Some(suffix) = rest.strip_prefix('-') else {
        // Ollama's `:latest` tag is the untagged model.
        return rest.is_empty() || rest == ":latest";
    };
    suffix == "latest"
        || suffix.split('-').enumerate().all(|(i, part)| {
            (if i == 0 {
                part.len() >= 3
            } else {
                !part.is_empty()
            }) && part.bytes().all(|b| b.is_ascii_digit())
        })
}

/// US dollars per million tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    pub cache_write: f64,
    /// Long-context pricing: what a call whose prompt is longer pays instead (Gemini 2.5 Pro
    /// past 200,000 tokens). Left out of `GET /v1/models` when there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub above: Option<Tier>,
}

/// The prices of a call whose prompt (input, cache reads and cache writes together) is longer
/// than `input_tokens`, for every token of the call, its output included, as providers bill
/// long-context calls. US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Tier {
    pub input_tokens: u64,
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    pub cache_write: f64,
}

impl Price {
    /// The prices a call with a prompt of `prompt_tokens` pays: the tier's past its threshold.
    pub fn at(&self, prompt_tokens: u64) -> Price {
        match self.above {
            Some(tier) if prompt_tokens > tier.input_tokens => Price {
                input: tier.input,
                output: tier.output,
                cache_read: tier.cache_read,
                cache_write: tier.cache_write,
                above: None,
            },
            _ => Price {
                above: None,
                ..*self
            },
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ModelInfo {
    /// The registry entry matched (`provider:model` prefix), or `None` for an unknown model.
    pub id: Option<&'static str>,
    pub context_window: u32,
    pub max_output_tokens: u32,
    /// `None` when the price is unknown.
    pub price: Option<Price>,
    pub capabilities: Capabilities,
}

impl ModelInfo {
    /// What `usage` cost, in US dollars, if the price is known (at the long-context prices when
    /// its prompt is past their threshold).
    pub fn cost(&self, usage: &Usage) -> Option<f64> {
        self.price.map(|p| {
            let prompt = usage
                .input_tokens
                .saturating_add(usage.cache_read_tokens)
                .saturating_add(usage.cache_write_tokens);
            let p = p.at(prompt);
            (usage.input_tokens as f64 * p.input
                + usage.output_tokens as f64 * p.output
                + usage.cache_read_tokens as f64 * p.cache_read
                + usage.cache_write_tokens as f64 * p.cache_write)
                / 1_000_000.0
        })
    }
}

const fn price(input: f64, output: f64, cache_read: f64, cache_write: f64) -> Option<Price> {
    Some(Price {
        input,
        output,
        cache_read,
        cache_write,
        above: None,
    })
}

/// `price` with long-context prices past `input_tokens` of prompt.
const fn above(price: Option<Price>, input_tokens: u64, tier: Option<Price>) -> Option<Price> {
    match (price, tier) {
        (Some(base), Some(t)) => Some(Price {
            above: Some(Tier {
                input_tokens,
                input: t.input,
                output: t.output,
                cache_read: t.cache_read,
                cache_write: t.cache_write,
            }),
            ..base
        }),
        _ => price,
    }
}

const ALL: Capabilities = Capabilities {
    tools: true,
    thinking: true,
    vision: true,
    structured_output: true,
};
const NO_THINKING: Capabilities = Capabilities {
    thinking: false,
    ..ALL
};
/// Claude models from before Anthropic's structured outputs.
const NO_STRUCTURED: Capabilities = Capabilities {
    structured_output: false,
    ..ALL
};

const fn model(
    id: &'static str,
    context_window: u32,
    max_output_tokens: u32,
    price: Option<Price>,
    capabilities: Capabilities,
) -> ModelInfo {
    ModelInfo {
        id: Some(id),
        context_window,
        max_output_tokens,
        price,
        capabilities,
    }
}

/// Published list prices (USD per million tokens: input, output, cache read, cache write), with
/// the long-context prices of the models that have them.
pub const MODELS: &[ModelInfo] = &[
    model(
        "anthropic:claude-opus-4-1",
        200_000,
        32_000,
        price(15.0, 75.0, 1.5, 18.75),
        ALL,
    ),
    model(
        "anthropic:claude-opus-4",
        200_000,
        32_000,
        price(15.0, 75.0, 1.5, 18.75),
        NO_STRUCTURED,
    ),
    model(
        "anthropic:claude-sonnet-4-5",
        200_000,
        64_000,
        price(3.0, 15.0, 0.3, 3.75),
        ALL,
    ),
    model(
        "anthropic:claude-sonnet-4",
        200_000,
        64_000,
        price(3.0, 15.0, 0.3, 3.75),
        NO_STRUCTURED,
    ),
    model(
        "anthropic:claude-haiku-4-5",
        200_000,
        64_000,
        price(1.0, 5.0, 0.1, 1.25),
        ALL,
    ),
    model(
        "anthropic:claude-3-5-haiku",
        200_000,
        8_192,
        price(0.8, 4.0, 0.08, 1.0),
        Capabilities {
            structured_output: false,
            ..NO_THINKING
        },
    ),
    model(
        "openai:gpt-5-mini",
        400_000,
        128_000,
        price(0.25, 2.0, 0.025, 0.0),
        ALL,
    ),
    model(
        "openai:gpt-5-nano",
        400_000,
        128_000,
        price(0.05, 0.4, 0.005, 0.0),
        ALL,
    ),
    model(
        "openai:gpt-5",
        400_000,
        128_000,
        price(1.25, 10.0, 0.125, 0.0),
        ALL,
    ),
    model(
        "openai:gpt-4.1-mini",
        1_047_576,
        32_768,
        price(0.4, 1.6, 0.1, 0.0),
        NO_THINKING,
    ),
    model(
        "openai:gpt-4.1-nano",
        1_047_576,
        32_768,
        price(0.1, 0.4, 0.025, 0.0),
        NO_THINKING,
    ),
    model(
        "openai:gpt-4.1",
        1_047_576,
        32_768,
        price(2.0, 8.0, 0.5, 0.0),
        NO_THINKING,
    ),
    model(
        "openai:gpt-4o-mini",
        128_000,
        16_384,
        price(0.15, 0.6, 0.075, 0.0),
        NO_THINKING,
    ),
    model(
        "openai:gpt-4o",
        128_000,
        16_384,
        price(2.5, 10.0, 1.25, 0.0),
        NO_THINKING,
    ),
    model(
        "gemini:gemini-2.5-pro",
        1_048_576,
        65_536,
        above(
            price(1.25, 10.0, 0.31, 0.0),
            200_000,
            price(2.5, 15.0, 0.625, 0.0),
        ),
        ALL,
    ),
    model(
        "gemini:gemini-2.5-flash-lite",
        1_048_576,
        65_536,
        price(0.1, 0.4, 0.025, 0.0),
        ALL,
    ),
    model(
        "gemini:gemini-2.5-flash",
        1_048_576,
        65_536,
        price(0.3, 2.5, 0.075, 0.0),
        ALL,
    ),
    model(
        "gemini:gemini-2.0-flash",
        1_048_576,
        8_192,
        price(0.1, 0.4, 0.025, 0.0),
        NO_THINKING,
    ),
];

/// Defaults for a model the registry does not know: small enough to be safe anywhere.
const UNKNOWN: ModelInfo = ModelInfo {
    id: None,
    context_window: 8_192,
    max_output_tokens: 4_096,
    price: None,
    capabilities: Capabilities {
        tools: true,
        thinking: false,
        vision: false,
        // Only Anthropic's registry entries say; other providers' models are not asked.
        structured_output: false,
    },
};

impl Default for Capabilities {
    /// What an unknown model is assumed to do: call tools, nothing more.
    fn default() -> Self {
        UNKNOWN.capabilities
    }
}

/// The fields of a long-context tier in `MODELS` (`price.above`).
const TIER_FIELDS: [&str; 5] = [
    "input_tokens",
    "input",
    "output",
    "cache_read",
    "cache_write",
];

/// A registry entry a deployment adds or overrides (`MODELS`), for self-hosted and fine-tuned
/// models whose limits and prices the built-in table cannot know.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CustomModel {
    /// `provider:model`; like built-in ids it also matches its dated variants ([`is_variant_of`]).
    pub id: String,
    pub context_window: u32,
    pub max_output_tokens: u32,
    pub price: Option<Price>,
    /// Each left out is the unknown model's ([`Capabilities::default`]).
    pub capabilities: Capabilities,
}

impl CustomModel {
    fn read(f: &mut Fields) -> Result<Self, String> {
        let known = ["input", "output", "cache_read", "cache_write", "above"];
        let price = match f.object("price", &known)? {
            Some(mut p) => {
                // Optional, so that entries written before long-context prices still read.
                let tier = match p.object("above", &TIER_FIELDS)? {
                    Some(mut t) => Some(Tier {
                        input_tokens: u64::from(t.required("input_tokens", fields::U32)?),
                        input: t.required("input", fields::NUMBER)?,
                        output: t.required("output", fields::NUMBER)?,
                        cache_read: t.required("cache_read", fields::NUMBER)?,
                        cache_write: t.required("cache_write", fields::NUMBER)?,
                    }),
                    None => None,
                };
                Some(Price {
                    input: p.required("input", fields::NUMBER)?,
                    output: p.required("output", fields::NUMBER)?,
                    cache_read: p.required("cache_read", fields::NUMBER)?,
                    cache_write: p.required("cache_write", fields::NUMBER)?,
                    above: tier,
                })
            }
            None => None,
        };
        let mut capabilities = Capabilities::default();
        if let Some(mut c) = f.object(
            "capabilities",
            &["tools", "thinking", "vision", "structured_output"],
        )? {
            for (name, flag) in [
                ("tools", &mut capabilities.tools),
                ("thinking", &mut capabilities.thinking),
                ("vision", &mut capabilities.vision),
                ("structured_output", &mut capabilities.structured_output),
            ] {
                if let Some(on) = c.optional(name, fields::BOOL)? {
                    *flag = on;
                }
            }
        }
        Ok(Self {
            id: f.required("id", fields::STRING)?,
            context_window: f.required("context_window", fields::U32)?,
            max_output_tokens: f.required("max_output_tokens", fields::U32)?,
            price,
            capabilities,
        })
    }

    fn check(&self) -> Result<(), String> {
        ModelRef::parse(&self.id).map_err(|e| e.to_string())?;
        if self.context_window < 256 || self.max_output_tokens == 0 {
            return Err(
                "context_window must be at least 256 and max_output_tokens at least 1".into(),
            );
        }
        if self
            .price
            .and_then(|p| p.above)
            .is_some_and(|t| t.input_tokens == 0)
        {
            return Err("`price.above.input_tokens` must be at least 1".into());
        }
        // A price below zero would make the model free to a budget, and pay the user back.
        let prices = self.price.map(|p| {
            let mut all = vec![p.input, p.output, p.cache_read, p.cache_write];
            if let Some(t) = p.above {
                all.extend([t.input, t.output, t.cache_read, t.cache_write]);
            }
            all
        });
        if prices
            .unwrap_or_default()
            .iter()
            .any(|usd| !usd.is_finite() || *usd < 0.0)
        {
            return Err("prices must be numbers of US dollars, 0 or more".into());
        }
        Ok(())
    }
}

/// The built-in table with a deployment's own entries in front of it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Registry {
    pub custom: Vec<CustomModel>,
}

impl Registry {
    /// Parses `MODELS`: a JSON array of [`CustomModel`]s. The error says which entry is wrong.
    pub fn parse(json: &str) -> Result<Self, String> {
        let known = [
            "id",
            "context_window",
            "max_output_tokens",
            "price",
            "capabilities",
        ];
        let custom = fields::entries(json, &known, "id", CustomModel::read, CustomModel::check)?;
        Ok(Self { custom })
    }

    /// What `usage` of `model` cost, in US dollars, if its price is known.
    pub fn cost(&self, model: &ModelRef, usage: &Usage) -> Option<f64> {
        self.info(model).cost(usage)
    }

    /// What an answer cost: its own model's (a fallback's, after a switch) price.
    pub fn answer_cost(&self, answer: &crate::llm::AssistantMessage) -> Option<f64> {
        self.cost(&answer.model_ref(), &answer.usage)
    }

    /// What is known about `model`: the deployment's entry with the longest matching id, else
    /// the built-in table.
    pub fn info(&self, model: &ModelRef) -> ModelInfo {
        let full = model.to_string();
        let custom = self
            .custom
            .iter()
            .filter(|m| is_variant_of(&full, &m.id))
            .max_by_key(|m| m.id.len());
        match custom {
            Some(m) => ModelInfo {
                id: None,
                context_window: m.context_window,
                max_output_tokens: m.max_output_tokens,
                price: m.price,
                capabilities: m.capabilities,
            },
            None => lookup(model),
        }
    }

    /// Every entry for `GET /v1/models`: the deployment's first, then the built-in ones it does
    /// not override.
    pub fn entries(&self) -> Vec<serde_json::Value> {
        let custom = self
            .custom
            .iter()
            .filter_map(|m| serde_json::to_value(m).ok());
        let builtin = MODELS
            .iter()
            .filter(|b| !self.custom.iter().any(|c| Some(c.id.as_str()) == b.id))
            .filter_map(|b| serde_json::to_value(b).ok());
        custom.chain(builtin).collect()
    }
}

/// The registry entry `model` is, or is a dated snapshot of (`claude-sonnet-4-5-20250929`), else
/// `UNKNOWN`. Local Ollama models cost nothing.
pub fn lookup(model: &ModelRef) -> ModelInfo {
    let full = model.to_string();
    let found = MODELS
        .iter()
        .filter(|m| m.id.is_some_and(|id| is_variant_of(&full, id)))
        .max_by_key(|m| m.id.map_or(0, str::len));
    match found {
        Some(info) => *info,
        None if model.provider == "ollama" => ModelInfo {
            price: price(0.0, 0.0, 0.0, 0.0),
            ..UNKNOWN
        },
        None => UNKNOWN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deployment_entries_override_and_extend_the_table() {
        let registry = Registry::parse(
            r#"[{"id": "openai:my-finetune", "context_window": 2048, "max_output_tokens": 256,
                 "price": {"input": 1, "output": 2, "cache_read": 0, "cache_write": 0}},
                {"id": "anthropic:claude-sonnet-4-5", "context_window": 1000000, "max_output_tokens": 64000}]"#,
        )
        .unwrap();
        let tuned = registry.info(&ModelRef::parse("openai:my-finetune-20260101").unwrap());
        assert_eq!((tuned.context_window, tuned.max_output_tokens), (2048, 256));
        assert_eq!(
            tuned.cost(&Usage {
                input_tokens: 1_000_000,
                ..Default::default()
            }),
            Some(1.0)
        );
        assert_eq!(
            registry
                .info(&ModelRef::parse("anthropic:claude-sonnet-4-5").unwrap())
                .context_window,
            1_000_000
        );
        // Capabilities left out are an unknown model's.
        let seeing = Registry::parse(
            r#"[{"id": "ollama:llava", "context_window": 4096, "max_output_tokens": 512,
                 "capabilities": {"vision": true}}]"#,
        )
        .unwrap()
        .info(&ModelRef::parse("ollama:llava").unwrap())
        .capabilities;
        assert_eq!(
            seeing,
            Capabilities {
                vision: true,
                ..Capabilities::default()
            }
        );
        assert!(seeing.tools && !seeing.thinking);
        // Untouched entries still come from the table.
        assert_eq!(
            registry.info(&ModelRef::parse("anthropic:claude-haiku-4-5").unwrap()),
            lookup(&ModelRef::parse("anthropic:claude-haiku-4-5").unwrap())
        );
        let listed = registry.entries();
        assert_eq!(listed[0]["id"], "openai:my-finetune");
        assert_eq!(
            listed
                .iter()
                .filter(|e| e["id"] == "anthropic:claude-sonnet-4-5")
                .count(),
            1,
            "an override replaces the built-in entry in the list"
        );
    }

    #[test]
    fn bad_entries_say_which_and_why() {
        for (json, needle) in [
            ("{}", "not a JSON array"),
            (
                r#"[{"id": "x", "context_window": 2048, "max_output_tokens": 1}]"#,
                "entry 0 (`x`)",
            ),
            (
                r#"[{"id": "a:b", "context_window": 4096, "max_output_tokens": 1},
                    {"id": "a:b", "context_window": 8192, "max_output_tokens": 1}]"#,
                "entry 1 (`a:b`): another entry has this `id`",
            ),
            (
                r#"[{"id": "a:b", "context_window": 2048}]"#,
                "max_output_tokens",
            ),
            (
                r#"[{"id": "a:b", "context_window": 10, "max_output_tokens": 1}]"#,
                "at least 256",
            ),
            (
                r#"[{"id": "a:b", "context_window": 4096, "max_output_tokens": 1, "colour": 1}]"#,
                "colour",
            ),
            (
                r#"[{"id": "a:b", "context_window": "big", "max_output_tokens": 1}]"#,
                "entry 0 (`a:b`): `context_window` must be a whole number",
            ),
            (
                r#"[{"id": "a:b", "context_window": 4096, "max_output_tokens": 1, "price": {"input": 1}}]"#,
                "entry 0 (`a:b`): missing field `price.output`",
            ),
            (
                r#"[{"id": "a:b", "context_window": 4096, "max_output_tokens": 1, "capabilities": {"vision": "yes"}}]"#,
                "`capabilities.vision` must be true or false",
            ),
        ] {
            let message = Registry::parse(json).unwrap_err();
            assert!(message.contains(needle), "{json}: {message}");
        }
    }

    #[test]
    fn parses_provider_and_model_keeping_later_colons() {
        let m = ModelRef::parse("ollama:llama3.2:3b").unwrap();
        assert_eq!(
            (m.provider.as_str(), m.model.as_str()),
            ("ollama", "llama3.2:3b")
        );
        assert_eq!(m.to_string(), "ollama:llama3.2:3b");
        assert!(ModelRef::parse("gpt-4o").is_err());
        assert!(ModelRef::parse(":x").is_err());
        assert!(ModelRef::parse("openai:").is_err());
    }

    #[test]
    fn dated_snapshots_match_their_family_and_other_names_do_not() {
        let info = ModelRef::parse("anthropic:claude-sonnet-4-5-20250929")
            .unwrap()
            .info();
        assert_eq!(info.id, Some("anthropic:claude-sonnet-4-5"));
        assert_eq!(
            ModelRef::parse("openai:gpt-4o-mini-2024-07-18")
                .unwrap()
                .info()
                .id,
            Some("openai:gpt-4o-mini")
        );
        assert_eq!(
            ModelRef::parse("openai:gpt-5-mini").unwrap().info().id,
            Some("openai:gpt-5-mini")
        );
        for (id, entry) in [
            ("openai:gpt-4o-latest", Some("openai:gpt-4o")),
            (
                "gemini:gemini-2.0-flash-001",
                Some("gemini:gemini-2.0-flash"),
            ),
            // Other models whose names only start like a priced one: unknown, so unpriced.
            ("openai:gpt-5-pro", None),
            ("openai:o3", None),
            ("anthropic:claude-sonnet-4-6", None),
            ("anthropic:claude-sonnet-4-5x", None),
            ("openai:gpt-4o-mini-tts", None),
        ] {
            let info = ModelRef::parse(id).unwrap().info();
            assert_eq!(info.id, entry, "{id}");
            assert_eq!(info.price.is_some(), entry.is_some(), "{id}");
        }
        // A deployment's entries match the same way.
        let registry = Registry::parse(
            r#"[{"id": "openai:house", "context_window": 4096, "max_output_tokens": 1,
                 "price": {"input": 1, "output": 1, "cache_read": 0, "cache_write": 0}}]"#,
        )
        .unwrap();
        let priced = |id: &str| registry.info(&ModelRef::parse(id).unwrap()).price.is_some();
        assert!(priced("openai:house") && priced("openai:house-20260101"));
        assert!(!priced("openai:house-big"));
    }

    #[test]
    fn model_ids_that_could_steer_a_provider_url_are_refused() {
        for id in [
            "gemini:../../v1/files",
            "gemini:gemini-2.5-pro/../x",
            "gemini:gemini-2.5-pro?key=x",
            "gemini:a#b",
            "gemini:a/b",
            "openai:gpt 4o",
            "Open_AI:gpt-4o",
            "openai:gpt-4o\n",
            "openai:é",
        ] {
            let err = ModelRef::parse(id).unwrap_err().to_string();
            assert!(err.contains("is not valid"), "{id}: {err}");
        }
        let long = format!("openai:{}", "a".repeat(200));
        let err = ModelRef::parse(&long).unwrap_err().to_string();
        assert!(err.contains("at most 128") && err.len() < 400, "{err}");
        assert!(ModelRef::parse(&format!("openai:{}", "a".repeat(121))).is_ok());
        assert!(ModelRef::parse(&format!("openai:{}", "a".repeat(122))).is_err());
        for id in [
            "workers-ai:@cf/meta/llama-3.3-70b-instruct-fp8-fast",
            "ollama:llama3.2:3b",
            "openai:ft:gpt-4o-mini:org:custom_1.2",
        ] {
            assert!(ModelRef::parse(id).is_ok(), "{id}");
        }
    }

    #[test]
    fn a_turns_cost_comes_from_its_usage() {
        let info = ModelRef::parse("anthropic:claude-sonnet-4-5")
            .unwrap()
            .info();
        let usage = Usage {
            input_tokens: 1_000_000,
            output_tokens: 100_000,
            cache_read_tokens: 2_000_000,
            cache_write_tokens: 0,
            estimated: false,
        };
        let cost = info.cost(&usage).unwrap();
        assert!((cost - (3.0 + 1.5 + 0.6)).abs() < 1e-9, "{cost}");
    }

    #[test]
    fn long_context_prices_apply_to_the_whole_call_past_their_threshold() {
        // Issue 56: Gemini 2.5 Pro bills a prompt past 200,000 tokens at $2.50 in, $15 out.
        let pro = ModelRef::parse("gemini:gemini-2.5-pro").unwrap().info();
        let call = |input_tokens, cache_read_tokens| Usage {
            input_tokens,
            output_tokens: 10_000,
            cache_read_tokens,
            ..Usage::default()
        };
        let short = pro.cost(&call(200_000, 0)).unwrap();
        assert!((short - (0.25 + 0.1)).abs() < 1e-9, "{short}");
        let long = pro.cost(&call(200_001, 0)).unwrap();
        assert!((long - (0.500_002_5 + 0.15)).abs() < 1e-9, "{long}");
        // Cached tokens are part of the prompt: they cross the threshold too.
        let cached = pro.cost(&call(100_000, 150_000)).unwrap();
        assert!((cached - (0.25 + 0.093_75 + 0.15)).abs() < 1e-9, "{cached}");
        // An answer is charged the same way.
        let answer = crate::llm::AssistantMessage {
            content: vec![],
            stop_reason: crate::llm::StopReason::EndTurn,
            model: "gemini-2.5-pro".into(),
            provider: "gemini".into(),
            usage: call(300_000, 0),
            output: None,
        };
        let charged = Registry::default().answer_cost(&answer).unwrap();
        assert!((charged - (0.75 + 0.15)).abs() < 1e-9, "{charged}");
        // Models without such prices pay the same whatever the prompt.
        let flash = ModelRef::parse("gemini:gemini-2.5-flash").unwrap().info();
        let price = flash.price.unwrap();
        assert_eq!(price.at(900_000), price);
    }

    #[test]
    fn a_deployment_entry_may_give_long_context_prices_and_older_entries_still_read() {
        let registry = Registry::parse(
            r#"[{"id": "anthropic:claude-sonnet-4-5", "context_window": 1000000, "max_output_tokens": 64000,
                 "price": {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75,
                           "above": {"input_tokens": 200000, "input": 6, "output": 22.5, "cache_read": 0.6, "cache_write": 7.5}}},
                {"id": "openai:house", "context_window": 4096, "max_output_tokens": 1,
                 "price": {"input": 1, "output": 2, "cache_read": 0, "cache_write": 0}}]"#,
        )
        .unwrap();
        let sonnet = registry.info(&ModelRef::parse("anthropic:claude-sonnet-4-5").unwrap());
        let usage = Usage {
            input_tokens: 400_000,
            output_tokens: 1_000,
            ..Usage::default()
        };
        let cost = sonnet.cost(&usage).unwrap();
        assert!((cost - (2.4 + 0.022_5)).abs() < 1e-9, "{cost}");
        let house = registry.info(&ModelRef::parse("openai:house").unwrap());
        assert_eq!(house.price.and_then(|p| p.above), None);
        // Listed with its tier; a model without one is listed as before.
        let listed = registry.entries();
        assert_eq!(listed[0]["price"]["above"]["input_tokens"], 200_000);
        assert!(listed[1]["price"].get("above").is_none());
        for (json, needle) in [
            (
                r#"[{"id": "a:b", "context_window": 4096, "max_output_tokens": 1, "price": {"input": 1, "output": 1, "cache_read": 0, "cache_write": 0, "above": {"input_tokens": 10}}}]"#,
                "missing field `price.above.input`",
            ),
            (
                r#"[{"id": "a:b", "context_window": 4096, "max_output_tokens": 1, "price": {"input": 1, "output": 1, "cache_read": 0, "cache_write": 0, "above": {"input_tokens": 0, "input": 1, "output": 1, "cache_read": 0, "cache_write": 0}}}]"#,
                "`price.above.input_tokens` must be at least 1",
            ),
        ] {
            let message = Registry::parse(json).unwrap_err();
            assert!(message.contains(needle), "{json}: {message}");
        }
    }

    #[test]
    fn unknown_models_get_conservative_defaults_and_no_price() {
        let info = ModelRef::parse("openai:smollm2").unwrap().info();
        assert_eq!(
            (info.id, info.context_window, info.max_output_tokens),
            (None, 8_192, 4_096)
        );
        assert_eq!(info.cost(&Usage::default()), None);
        assert_eq!(
            ModelRef::parse("ollama:qwen3:8b")
                .unwrap()
                .info()
                .cost(&Usage {
                    output_tokens: 5,
                    ..Default::default()
                }),
            Some(0.0)
        );
    }

    #[test]
    fn a_negative_price_is_refused() {
        for price in [
            r#"{"input": -1, "output": 1, "cache_read": 0, "cache_write": 0}"#,
            r#"{"input": 1, "output": 1, "cache_read": 0, "cache_write": 0, "above": {"input_tokens": 10, "input": 1, "output": -2, "cache_read": 0, "cache_write": 0}}"#,
        ] {
            let json = format!(
                r#"[{{"id": "a:b", "context_window": 4096, "max_output_tokens": 1, "price": {price}}}]"#
            );
            let e = Registry::parse(&json).unwrap_err();
            assert!(e.contains("0 or more"), "{e}");
        }
    }
}
