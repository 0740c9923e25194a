//! The provider factory: the `llm` provider serving a model id, configured from the environment
//! (keys, base URLs, the Workers AI binding), with the configured fallbacks and retries behind it.

use std::rc::Rc;

use async_trait::async_trait;
use worker::{AbortSignal, Env};

use super::ai::WorkersAiBinding;
use super::fetch::FetchTransport;
use super::timers::{UntilAborted, WorkerSleeper};
use crate::edge::config::Config;
use crate::llm::capabilities::Capabilities;
use crate::llm::providers::{Anthropic, Gemini, Ollama, OpenAiChat, WorkersAi};
use crate::llm::{
    Completion, HttpTransport, LlmError, LlmEvent, LlmRequest, ModelRef, Provider, Resilient,
    RetryPolicy, Sleeper,
};

/// The provider serving `model`, configured from the environment, taking what the
/// deployment's registry (`MODELS`) says the model takes.
pub fn provider_for(
    env: &Env,
    config: &Config,
    model: &ModelRef,
    signal: Option<&AbortSignal>,
) -> Result<Rc<dyn Provider>, LlmError> {
    let provider = wire_provider(env, config, model, signal)?;
    let capabilities = config.models.info(model).capabilities;
    if capabilities == provider.capabilities() {
        return Ok(provider);
    }
    Ok(Rc::new(Registered {
        inner: provider,
        capabilities,
    }))
}

/// A provider whose model the deployment's registry describes otherwise than the built-in one
/// (a self-hosted model with vision, say).
struct Registered {
    inner: Rc<dyn Provider>,
    capabilities: Capabilities,
}

#[async_trait(?Send)]
impl Provider for Registered {
    fn model(&self) -> &ModelRef {
        self.inner.model()
    }

    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    async fn stream(
        &self,
        request: &LlmRequest<'_>,
        on_event: &mut dyn for<'e> FnMut(&'e LlmEvent),
    ) -> Completion {
        self.inner.stream(request, on_event).await
    }

    async fn health_check(&self) -> Result<(), LlmError> {
        self.inner.health_check().await
    }
}

fn wire_provider(
    env: &Env,
    config: &Config,
    model: &ModelRef,
    signal: Option<&AbortSignal>,
) -> Result<Rc<dyn Provider>, LlmError> {
    let transport: Rc<dyn HttpTransport> = Rc::new(FetchTransport {
        signal: signal.cloned(),
        idle_timeout_ms: Some(config.provider_idle_timeout_ms.into()),
    });
    match model.provider.as_str() {
        "anthropic" => Ok(Rc::new(Anthropic::new(
            model.clone(),
            config.anthropic_base_url.as_deref(),
            config.anthropic_api_key.clone(),
            transport,
        ))),
        "openai" => Ok(Rc::new(OpenAiChat::new(
            model.clone(),
            config.openai_base_url.as_deref(),
            config.openai_api_key.clone(),
            transport,
        ))),
        "gemini" => Ok(Rc::new(Gemini::new(
            model.clone(),
            config.gemini_base_url.as_deref(),
            config.gemini_api_key.clone(),
            transport,
        ))),
        "ollama" => Ok(Rc::new(Ollama::new(
            model.clone(),
            config.ollama_base_url.as_deref(),
            transport,
        ))),
        "workers-ai" => {
            let binding = WorkersAiBinding::from_env(env).map_err(LlmError::Config)?;
            Ok(Rc::new(WorkersAi::new(model.clone(), Rc::new(binding))))
        }
        other => Err(LlmError::Config(format!(
            "unknown provider `{other}` in model `{model}` (known: anthropic, openai, gemini, ollama, workers-ai)"
        ))),
    }
}

/// The conversation's model with the configured fallbacks behind it, retried as the policy says.
pub fn resilient_provider(
    env: &Env,
    config: &Config,
    model: &ModelRef,
    signal: Option<&AbortSignal>,
) -> Result<Rc<dyn Provider>, LlmError> {
    let chain = crate::llm::retry::chain(model, &config.fallback_models);
    retried(env, config, &chain, signal)
}

/// `BUDGET_MODEL`, retried but never replaced: it answers past a user's budget, holding
/// nothing, so a fallback behind it (perhaps pricier) would spend without limit.
pub fn economy_provider(
    env: &Env,
    config: &Config,
    model: &ModelRef,
    signal: Option<&AbortSignal>,
) -> Result<Rc<dyn Provider>, LlmError> {
    retried(env, config, std::slice::from_ref(model), signal)
}

/// `models` in order, each retried as the policy says, the next taking over when one fails.
fn retried(
    env: &Env,
    config: &Config,
    models: &[ModelRef],
    signal: Option<&AbortSignal>,
) -> Result<Rc<dyn Provider>, LlmError> {
    let chain = models
        .iter()
        .map(|m| provider_for(env, config, m, signal))
        .collect::<Result<Vec<_>, _>>()?;
    // A cancelled turn does not sit out a retry's wait (up to 8 s, a fallback's too).
    let sleeper: Rc<dyn Sleeper> = match signal {
        Some(signal) => Rc::new(UntilAborted(signal.clone())),
        None => Rc::new(WorkerSleeper),
    };
    let provider = Resilient::new(chain, RetryPolicy::default(), sleeper)
        .ok_or_else(|| LlmError::Config("no model to call".into()))?;
    Ok(Rc::new(provider))
}
