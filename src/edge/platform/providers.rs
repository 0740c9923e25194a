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
use crate::llm::providers::{HttpProvider, Reach, WorkersAi, PROVIDERS};
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
    let Some(info) = crate::llm::providers::info(&model.provider) else {
        let known: Vec<&str> = PROVIDERS.iter().map(|p| p.name).collect();
        return Err(LlmError::Config(format!(
            "unknown provider `{}` in model `{model}` (known: {})",
            model.provider,
            known.join(", ")
        )));
    };
    match info.reach {
        Reach::Http(wire) => {
            let settings = config.provider(info.name);
            Ok(Rc::new(HttpProvider::new(
                wire,
                model.clone(),
                settings.and_then(|s| s.base_url.as_deref()),
                settings.and_then(|s| s.api_key.clone()),
                transport,
            )))
        }
        Reach::Binding => {
            let binding = WorkersAiBinding::from_env(env).map_err(LlmError::Config)?;
            Ok(Rc::new(WorkersAi::new(model.clone(), Rc::new(binding))))
        }
    }
}

/// `model` with `fallbacks` behind it, retried as the policy says.
pub fn resilient_provider(
    env: &Env,
    config: &Config,
    (model, fallbacks): (&ModelRef, &[ModelRef]),
    signal: Option<&AbortSignal>,
) -> Result<Rc<dyn Provider>, LlmError> {
    let chain = crate::llm::retry::chain(model, fallbacks);
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
