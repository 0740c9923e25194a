//! Retries and fallback, written once for every provider.
//!
//! [`Resilient`] wraps a chain of providers (the configured model, then `FALLBACK_MODELS`). A
//! retryable failure before any output streamed is retried with jittered exponential backoff,
//! honouring the provider's own wait hint, up to a cap; when the attempts run out the next model
//! in the chain takes over, announced by [`LlmEvent::Fallback`]. Once output has streamed
//! nothing is retried: the partial answer is kept and the error reported, since replaying it
//! would show the user the same words twice. An attempt given up on may still have been billed
//! (Anthropic reports a prompt's tokens before an overload cuts it off): what it reported goes
//! with the answer that ends the call ([`Completion::given_up`]), each attempt with its own
//! model, so the ledger and the budget see it at that model's prices. The request's
//! [`Billing`] hears of each such attempt as it is given up on, before the next is made: a
//! budget charges it at once and may stop the call there, so no attempt is made that the
//! budget no longer covers.

use std::rc::Rc;

use async_trait::async_trait;

pub use super::types::Billing;
use super::types::{
    answer_tool_def, answer_tool_instruction, schema_refused, system_with, tool_refused,
};
use super::{
    AnswerFormat, AssistantMessage, Completion, LlmEvent, LlmRequest, ModelRef, Provider, ToolDef,
    Usage,
};

/// The models a call to `model` may be answered by, in the order [`Resilient`] tries them:
/// `model`, then each of `fallbacks` but it. The factory builds its chain from this, and a
/// budget prices a call at the priciest of them.
pub fn chain(model: &ModelRef, fallbacks: &[ModelRef]) -> Vec<ModelRef> {
    std::iter::once(model)
        .chain(fallbacks.iter().filter(|m| *m != model))
        .cloned()
        .collect()
}

/// Waiting and randomness, supplied by the platform (timers and RNGs differ between wasm and
/// native).
#[async_trait(?Send)]
pub trait Sleeper {
    async fn sleep(&self, ms: u64);
    /// A random number in `[0, 1)` for jitter.
    fn random(&self) -> f64;
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Calls per model, the first included.
    pub max_attempts: u32,
    pub base_delay_ms: u64,
    /// No single wait is longer than this, whatever the provider asks.
    pub max_delay_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            base_delay_ms: 500,
            max_delay_ms: 8_000,
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (1-based): the provider's hint if it gave one,
    /// else `base * 2^(retry-1)` with full jitter on its upper half; never above the cap.
    pub fn delay_ms(&self, retry: u32, hint_ms: Option<u64>, random: f64) -> u64 {
        let delay = match hint_ms {
            Some(hint) => hint,
            None => {
                let backoff = self
                    .base_delay_ms
                    .saturating_mul(1 << retry.saturating_sub(1).min(16));
                backoff / 2 + (backoff as f64 / 2.0 * random.clamp(0.0, 1.0)) as u64
            }
        };
        delay.min(self.max_delay_ms)
    }
}

/// A provider that retries and falls back. Its `model()` is the first in the chain.
pub struct Resilient {
    chain: Vec<Rc<dyn Provider>>,
    policy: RetryPolicy,
    sleeper: Rc<dyn Sleeper>,
}

impl Resilient {
    /// `chain` must not be empty: the first is the configured model.
    pub fn new(
        chain: Vec<Rc<dyn Provider>>,
        policy: RetryPolicy,
        sleeper: Rc<dyn Sleeper>,
    ) -> Option<Self> {
        (!chain.is_empty()).then_some(Self {
            chain,
            policy,
            sleeper,
        })
    }
}

#[async_trait(?Send)]
impl Provider for Resilient {
    fn model(&self) -> &ModelRef {
        self.chain[0].model()
    }

    fn capabilities(&self) -> super::capabilities::Capabilities {
        self.chain[0].capabilities()
    }

    /// The configured model's health; fallbacks exist for when it is unwell.
    async fn health_check(&self) -> Result<(), super::LlmError> {
        self.chain[0].health_check().await
    }

    async fn stream(
        &self,
        request: &LlmRequest<'_>,
        on_event: &mut dyn for<'e> FnMut(&'e LlmEvent),
    ) -> Completion {
        // The last model's last failure, by its place in the chain.
        let mut last: Option<(usize, Completion)> = None;
        // The attempts given up on that reported usage (billed all the same).
        let mut spent: Vec<AssistantMessage> = Vec::new();
        for (i, provider) in self.chain.iter().enumerate() {
            if let (Some(previous), Some((_, failed))) = (i.checked_sub(1), &last) {
                on_event(&LlmEvent::Fallback {
                    from: self.chain[previous].model().clone(),
                    to: provider.model().clone(),
                    reason: failed
                        .error
                        .as_ref()
                        .map(ToString::to_string)
                        .unwrap_or_default(),
                });
            }
            // A fallback model gets the history prepared for it (the caller prepared it for the
            // first), and a typed answer in a form it takes.
            let prepared;
            let adapted;
            let mut fallback_request = *request;
            if i > 0 {
                let capabilities = provider.capabilities();
                prepared = super::transform::prepare_for(
                    request.messages.to_vec(),
                    provider.model(),
                    &capabilities,
                );
                fallback_request.messages = &prepared;
                adapted = request.answer.and_then(|answer| {
                    let call = (request.tools, request.messages);
                    let (tools, answer) =
                        adapt_answer(answer, call, provider.model(), &capabilities)?;
                    // Offered beside others, the answer tool is named in the prompt.
                    let system = match answer {
                        Some(AnswerFormat::Offered { name }) => {
                            Some(system_with(request.system, &answer_tool_instruction(name)))
                        }
                        _ => None,
                    };
                    Some((tools, answer, system))
                });
                if let Some((tools, answer, system)) = &adapted {
                    fallback_request.tools = tools;
                    fallback_request.answer = *answer;
                    if let Some(system) = system {
                        fallback_request.system = Some(system);
                    }
                }
            }
            let request = &fallback_request;
            let mut attempt = 1;
            loop {
                let mut streamed = false;
                let mut completion = provider
                    .stream(request, &mut |event| {
                        // Usage and the answer's id alone (`message_start`) show the user
                        // nothing: the attempt may still be retried.
                        streamed |= !matches!(event, LlmEvent::Usage(_) | LlmEvent::ResponseId(_));
                        on_event(event)
                    })
                    .await;
                let retryable = match &completion.error {
                    None => return with_spent(completion, spent),
                    Some(error) => error.is_retryable() && !streamed,
                };
                if !retryable {
                    return with_spent(completion, spent);
                }
                // Given up on, and perhaps billed all the same: it goes with the answer, and
                // the request's billing hears of it before anything else is tried.
                if completion.message.usage != Usage::default() {
                    let mut given_up = completion.message.clone();
                    given_up.content.clear();
                    completion.message.usage = Usage::default();
                    let billed = match request.billing {
                        Some(billing) => billing.given_up(&given_up).await,
                        None => Ok(()),
                    };
                    spent.push(given_up);
                    // Nothing follows the last attempt of the last model: its own failure is
                    // what the caller must hear, not that no other attempt is covered.
                    let more = attempt < self.policy.max_attempts || i + 1 < self.chain.len();
                    if let (Err(stop), true) = (billed, more) {
                        completion.error = Some(stop);
                        return with_spent(completion, spent);
                    }
                }
                if attempt >= self.policy.max_attempts {
                    last = Some((i, completion));
                    break;
                }
                let hint = completion.error.as_ref().and_then(|e| e.retry_after_ms());
                let wait = self.policy.delay_ms(attempt, hint, self.sleeper.random());
                attempt += 1;
                on_event(&LlmEvent::Retry {
                    attempt,
                    wait_ms: wait,
                    reason: completion
                        .error
                        .as_ref()
                        .map(|e| e.kind().to_string())
                        .unwrap_or_default(),
                });
                self.sleeper.sleep(wait).await;
            }
        }
        // Every model failed retryably: report the last failure, with what every attempt used.
        match last {
            Some((_, failed)) => with_spent(failed, spent),
            None => unreachable_empty_chain(self.model()),
        }
    }
}

/// A typed answer's format and the call's tools as fallback `model` takes them, when it cannot
/// take `answer` as it is: a schema it refuses becomes a tool whose input is the answer (forced
/// when the call offers no other), a tool it cannot be made to call becomes its schema. The
/// caller reads an answer given either way.
fn adapt_answer<'a>(
    answer: AnswerFormat<'a>,
    (tools, messages): (&'a [ToolDef], &[super::Message]),
    model: &ModelRef,
    capabilities: &super::capabilities::Capabilities,
) -> Option<(Vec<ToolDef>, Option<AnswerFormat<'a>>)> {
    let provider = model.provider.as_str();
    // Claude refuses a history of tool calls on a call that defines no tool (the typed answer's
    // steps with the tools off): it is asked for the answer tool then.
    let claude_bare = provider == "anthropic" && tools.is_empty() && holds_tool_calls(messages);
    match answer {
        AnswerFormat::Schema { name, schema, .. }
            if claude_bare
                || schema_refused(provider, !tools.is_empty(), capabilities.structured_output)
                    .is_some() =>
        {
            let mut with_answer = tools.to_vec();
            with_answer.push(answer_tool_def(name, None, schema));
            let asked = match tools.is_empty() {
                true => AnswerFormat::Tool { name },
                false => AnswerFormat::Offered { name },
            };
            Some((with_answer, Some(asked)))
        }
        AnswerFormat::Tool { name } | AnswerFormat::Offered { name }
            if tool_refused(provider).is_some() =>
        {
            let tool = tools.iter().find(|t| t.name == name)?;
            let schema = AnswerFormat::Schema {
                name,
                schema: &tool.input_schema,
                strict: false,
            };
            Some((tools.to_vec(), Some(schema)))
        }
        _ => None,
    }
}

/// Whether a history holds tool calls or their results.
fn holds_tool_calls(messages: &[super::Message]) -> bool {
    messages.iter().any(|m| match m {
        super::Message::ToolResult(_) => true,
        super::Message::Assistant(a) => a.tool_calls().next().is_some(),
        super::Message::User { .. } => false,
    })
}

/// `completion`, with the attempts given up on before it that were billed.
fn with_spent(mut completion: Completion, spent: Vec<AssistantMessage>) -> Completion {
    completion.given_up = spent;
    completion
}

/// `Resilient::new` refuses an empty chain, so the loop above always ran; this keeps the type
/// system satisfied without a panic.
fn unreachable_empty_chain(model: &ModelRef) -> Completion {
    super::provider::failed(model, super::LlmError::Config("no model to call".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{AssistantMessage, ContentBlock, LlmError, StopReason, Usage};
    use std::cell::RefCell;
    use std::collections::VecDeque;

    /// Plays outcomes: `Ok(text)` answers, `Err((error, streamed_text))` fails.
    struct Flaky {
        model: ModelRef,
        outcomes: RefCell<VecDeque<Result<&'static str, (LlmError, &'static str)>>>,
        calls: RefCell<u32>,
    }

    fn flaky(id: &str, outcomes: Vec<Result<&'static str, (LlmError, &'static str)>>) -> Rc<Flaky> {
        Rc::new(Flaky {
            model: ModelRef::parse(id).unwrap(),
            outcomes: RefCell::new(outcomes.into()),
            calls: RefCell::new(0),
        })
    }

    #[async_trait(?Send)]
    impl Provider for Flaky {
        fn model(&self) -> &ModelRef {
            &self.model
        }

        async fn health_check(&self) -> Result<(), LlmError> {
            Ok(())
        }

        async fn stream(
            &self,
            _: &LlmRequest<'_>,
            on_event: &mut dyn for<'e> FnMut(&'e LlmEvent),
        ) -> Completion {
            *self.calls.borrow_mut() += 1;
            // As Anthropic's `message_start`: the prompt's usage and the answer's id, before
            // anything a user would see (an attempt that fails after them is still retried).
            on_event(&LlmEvent::Usage(Usage {
                input_tokens: 1,
                ..Default::default()
            }));
            on_event(&LlmEvent::ResponseId("msg_fake".into()));
            let (text, error) = match self
                .outcomes
                .borrow_mut()
                .pop_front()
                .expect("no outcome left")
            {
                Ok(text) => (text, None),
                Err((error, text)) => (text, Some(error)),
            };
            if !text.is_empty() {
                on_event(&LlmEvent::TextStart { index: 0 });
                on_event(&LlmEvent::TextDelta {
                    index: 0,
                    delta: text.into(),
                });
            }
            Completion {
                message: AssistantMessage {
                    content: if text.is_empty() {
                        vec![]
                    } else {
                        vec![ContentBlock::Text { text: text.into() }]
                    },
                    stop_reason: if error.is_some() {
                        StopReason::Error
                    } else {
                        StopReason::EndTurn
                    },
                    model: self.model.model.clone(),
                    provider: self.model.provider.clone(),
                    // What the `Usage` event above reported: every attempt's prompt.
                    usage: Usage {
                        input_tokens: 1,
                        ..Default::default()
                    },
                    output: None,
                },
                error,
                given_up: Vec::new(),
            }
        }
    }

    #[derive(Default)]
    struct FakeClock {
        slept: RefCell<Vec<u64>>,
    }

    #[async_trait(?Send)]
    impl Sleeper for FakeClock {
        async fn sleep(&self, ms: u64) {
            self.slept.borrow_mut().push(ms);
        }
        fn random(&self) -> f64 {
            0.5
        }
    }

    fn rate_limited(after: Option<u64>) -> LlmError {
        LlmError::RateLimited {
            provider: "anthropic".into(),
            message: "slow down".into(),
            retry_after_ms: after,
        }
    }

    fn overloaded() -> LlmError {
        LlmError::Overloaded {
            provider: "anthropic".into(),
            message: "Overloaded".into(),
            retry_after_ms: None,
        }
    }

    fn run(chain: Vec<Rc<dyn Provider>>, clock: &Rc<FakeClock>) -> (Completion, Vec<LlmEvent>) {
        let resilient = Resilient::new(chain, RetryPolicy::default(), clock.clone()).unwrap();
        let mut events = vec![];
        let request = crate::llm::providers::testing::request();
        let c = futures::executor::block_on(
            resilient.stream(&request, &mut |e| events.push(e.clone())),
        );
        (c, events)
    }

    #[test]
    fn a_fallback_is_asked_for_a_typed_answer_in_a_form_it_takes() {
        let schema = serde_json::json!({"type": "object"});
        let clock = ToolDef {
            name: "current_time".into(),
            description: String::new(),
            input_schema: schema.clone(),
        };
        let as_schema = AnswerFormat::Schema {
            name: "answer",
            schema: &schema,
            strict: true,
        };
        let caps = crate::llm::capabilities::Capabilities::default();
        let model = |id: &str| ModelRef::parse(id).unwrap();
        // Workers AI takes no schema: the answer becomes a tool, forced when it is alone.
        let (tools, answer) =
            adapt_answer(as_schema, (&[], &[]), &model("workers-ai:@cf/m"), &caps).unwrap();
        assert_eq!(tools.len(), 1);
        assert_eq!(answer, Some(AnswerFormat::Tool { name: "answer" }));
        // Beside other tools, offered and not forced.
        let offered = [clock.clone()];
        let (tools, answer) =
            adapt_answer(as_schema, (&offered, &[]), &model("gemini:g"), &caps).unwrap();
        assert_eq!(tools.len(), 2);
        assert_eq!(answer, Some(AnswerFormat::Offered { name: "answer" }));
        // Claude, with no tools on a history of tool calls, is asked for the answer tool.
        let history = [crate::llm::Message::ToolResult(crate::llm::ToolResult {
            tool_call_id: "c1".into(),
            tool_name: "current_time".into(),
            content: "noon".into(),
            is_error: false,
        })];
        let caps_claude = crate::llm::capabilities::Capabilities {
            structured_output: true,
            ..caps
        };
        let claude = model("anthropic:claude-sonnet-4-5");
        let (tools, answer) =
            adapt_answer(as_schema, (&[], &history), &claude, &caps_claude).unwrap();
        assert_eq!(
            (tools.len(), answer),
            (1, Some(AnswerFormat::Tool { name: "answer" }))
        );
        assert!(adapt_answer(as_schema, (&[], &[]), &claude, &caps_claude).is_none());
        // OpenAI takes the schema as it is; Ollama takes a forced tool as its schema.
        assert!(adapt_answer(as_schema, (&[], &[]), &model("openai:gpt-4o"), &caps).is_none());
        let answer_tool = ToolDef {
            name: "answer".into(),
            ..clock
        };
        let tools = [answer_tool];
        let (_, answer) = adapt_answer(
            AnswerFormat::Tool { name: "answer" },
            (&tools, &[]),
            &model("ollama:llama3.2"),
            &caps,
        )
        .unwrap();
        assert!(matches!(
            answer,
            Some(AnswerFormat::Schema { strict: false, .. })
        ));
    }

    #[test]
    fn a_429_is_retried_after_the_providers_wait_and_then_succeeds() {
        let primary = flaky(
            "anthropic:claude-sonnet-4-5",
            vec![Err((rate_limited(Some(7_000)), "")), Ok("hello")],
        );
        let clock = Rc::new(FakeClock::default());
        let (c, _) = run(vec![primary.clone()], &clock);
        assert_eq!(c.error, None);
        assert_eq!(c.message.text(), "hello");
        assert_eq!(*clock.slept.borrow(), [7_000]);
        assert_eq!(*primary.calls.borrow(), 2);
    }

    #[test]
    fn backoff_grows_with_jitter_and_is_capped() {
        let p = RetryPolicy::default();
        assert_eq!(
            [
                p.delay_ms(1, None, 0.5),
                p.delay_ms(2, None, 0.5),
                p.delay_ms(3, None, 0.5)
            ],
            [375, 750, 1500]
        );
        assert_eq!(p.delay_ms(1, None, 0.0), 250);
        assert_eq!(p.delay_ms(10, None, 1.0), 8_000);
        assert_eq!(p.delay_ms(1, Some(60_000), 0.5), 8_000);
    }

    #[test]
    fn exhausted_retries_fall_back_to_the_next_model_and_say_so() {
        let primary = flaky(
            "anthropic:claude-sonnet-4-5",
            vec![
                Err((overloaded(), "")),
                Err((overloaded(), "")),
                Err((overloaded(), "")),
            ],
        );
        let fallback = flaky("openai:gpt-4o", vec![Ok("from the fallback")]);
        let clock = Rc::new(FakeClock::default());
        let (c, events) = run(vec![primary.clone(), fallback.clone()], &clock);
        assert_eq!(c.error, None);
        assert_eq!(
            (c.message.provider.as_str(), c.message.text().as_str()),
            ("openai", "from the fallback")
        );
        assert_eq!(*primary.calls.borrow(), 3);
        assert_eq!(clock.slept.borrow().len(), 2);
        let switch = events.iter().find_map(|e| match e {
            LlmEvent::Fallback { from, to, reason } => {
                Some((from.to_string(), to.to_string(), reason.clone()))
            }
            _ => None,
        });
        assert_eq!(
            switch,
            Some((
                "anthropic:claude-sonnet-4-5".into(),
                "openai:gpt-4o".into(),
                overloaded().to_string()
            ))
        );
    }

    #[test]
    fn nothing_is_retried_once_output_has_streamed() {
        let primary = flaky(
            "anthropic:claude-sonnet-4-5",
            vec![Err((overloaded(), "Partial"))],
        );
        let fallback = flaky("openai:gpt-4o", vec![Ok("unused")]);
        let clock = Rc::new(FakeClock::default());
        let (c, _) = run(vec![primary.clone(), fallback.clone()], &clock);
        assert_eq!(c.message.text(), "Partial");
        assert_eq!(c.error, Some(overloaded()));
        assert_eq!((*primary.calls.borrow(), *fallback.calls.borrow()), (1, 0));
    }

    #[test]
    fn a_bad_request_is_neither_retried_nor_sent_elsewhere() {
        let bad = LlmError::BadRequest {
            provider: "anthropic".into(),
            status: 400,
            message: "bad".into(),
        };
        let primary = flaky("anthropic:claude-sonnet-4-5", vec![Err((bad.clone(), ""))]);
        let fallback = flaky("openai:gpt-4o", vec![Ok("unused")]);
        let clock = Rc::new(FakeClock::default());
        let (c, _) = run(vec![primary, fallback.clone()], &clock);
        assert_eq!(c.error, Some(bad));
        assert_eq!(*fallback.calls.borrow(), 0);
        assert!(clock.slept.borrow().is_empty());
    }

    #[test]
    fn every_attempt_given_up_on_is_charged_with_the_answer() {
        // Issue 56: a retried attempt that reported its prompt was billed for it.
        let given_up = |c: &Completion| -> Vec<(String, u64)> {
            c.given_up
                .iter()
                .map(|a| (a.model.clone(), a.usage.input_tokens))
                .collect()
        };
        let primary = flaky(
            "anthropic:claude-sonnet-4-5",
            vec![Err((overloaded(), "")), Err((overloaded(), "")), Ok("hi")],
        );
        let clock = Rc::new(FakeClock::default());
        let (c, _) = run(vec![primary], &clock);
        assert_eq!(c.message.usage.input_tokens, 1, "the answer's own");
        let sonnet = "claude-sonnet-4-5".to_string();
        assert_eq!(given_up(&c), [(sonnet.clone(), 1), (sonnet.clone(), 1)]);
        assert!(c.given_up.iter().all(|a| a.content.is_empty()));

        // After a fallback the first model's attempts count too, each at its own model.
        let primary = flaky(
            "anthropic:claude-sonnet-4-5",
            vec![Err((overloaded(), "")); 3],
        );
        let fallback = flaky("openai:gpt-4o", vec![Ok("from the fallback")]);
        let (c, _) = run(vec![primary, fallback], &clock);
        assert_eq!(
            (c.message.model.as_str(), c.message.usage.input_tokens),
            ("gpt-4o", 1)
        );
        assert_eq!(given_up(&c), vec![(sonnet.clone(), 1); 3]);

        // Every model failed: the reported failure carries all of them, and nothing twice.
        let primary = flaky("anthropic:a", vec![Err((overloaded(), "")); 3]);
        let fallback = flaky("openai:b", vec![Err((rate_limited(None), "")); 3]);
        let (c, _) = run(vec![primary, fallback], &clock);
        let all: u64 = c.message.usage.input_tokens
            + c.given_up.iter().map(|a| a.usage.input_tokens).sum::<u64>();
        assert_eq!(all, 6);

        // An answer that fails after streaming is not retried: it is its own usage.
        let primary = flaky(
            "anthropic:claude-sonnet-4-5",
            vec![Err((overloaded(), "")), Err((overloaded(), "Partial"))],
        );
        let (c, _) = run(vec![primary], &clock);
        assert_eq!(
            (c.message.text().as_str(), c.message.usage.input_tokens),
            ("Partial", 1)
        );
        assert_eq!(given_up(&c), [(sonnet, 1)]);
    }

    #[test]
    fn billing_hears_of_each_billed_attempt_before_the_next_and_may_stop_the_call() {
        // Issue 56: a budget charges an attempt as it is given up on, and no attempt is made
        // that it no longer covers.
        struct Covers {
            heard: RefCell<Vec<String>>,
            attempts: usize,
        }
        #[async_trait(?Send)]
        impl Billing for Covers {
            async fn given_up(&self, attempt: &AssistantMessage) -> Result<(), LlmError> {
                self.heard.borrow_mut().push(attempt.model.clone());
                if self.heard.borrow().len() < self.attempts {
                    Ok(())
                } else {
                    Err(LlmError::BudgetExceeded("no more".into()))
                }
            }
        }
        let attempt = |billing: &Covers, chain: Vec<Rc<dyn Provider>>| {
            let resilient =
                Resilient::new(chain, RetryPolicy::default(), Rc::new(FakeClock::default()))
                    .unwrap();
            let mut request = crate::llm::providers::testing::request();
            request.billing = Some(billing);
            futures::executor::block_on(resilient.stream(&request, &mut |_| {}))
        };
        // Covered: every attempt heard of, in order, then the answer.
        let billing = Covers {
            heard: RefCell::default(),
            attempts: 9,
        };
        let primary = flaky(
            "anthropic:claude-sonnet-4-5",
            vec![Err((overloaded(), "")), Ok("hi")],
        );
        let c = attempt(&billing, vec![primary]);
        assert_eq!((c.error, c.given_up.len()), (None, 1));
        assert_eq!(*billing.heard.borrow(), ["claude-sonnet-4-5"]);
        // The budget covers no third attempt: the call ends with the budget's error, the
        // fallback never called, both attempts carried with it.
        let billing = Covers {
            heard: RefCell::default(),
            attempts: 2,
        };
        let primary = flaky("anthropic:a", vec![Err((overloaded(), "")); 3]);
        let fallback = flaky("openai:b", vec![Ok("unused")]);
        let c = attempt(&billing, vec![primary.clone(), fallback.clone()]);
        assert_eq!(c.error, Some(LlmError::BudgetExceeded("no more".into())));
        assert_eq!((*primary.calls.borrow(), *fallback.calls.borrow()), (2, 0));
        assert_eq!(c.given_up.len(), 2);
        // Refused at the last attempt of the last model, nothing more would have been tried:
        // the provider's own failure is what the call reports.
        let billing = Covers {
            heard: RefCell::default(),
            attempts: 3,
        };
        let primary = flaky("anthropic:a", vec![Err((overloaded(), "")); 3]);
        let c = attempt(&billing, vec![primary]);
        assert_eq!((c.error, c.given_up.len()), (Some(overloaded()), 3));
    }

    #[test]
    fn a_chain_is_the_model_then_its_other_fallbacks() {
        let id = |s: &str| ModelRef::parse(s).unwrap();
        let names = |models: Vec<ModelRef>| -> Vec<String> {
            models.iter().map(ToString::to_string).collect()
        };
        assert_eq!(
            names(chain(
                &id("anthropic:claude-sonnet-4-5"),
                &[id("openai:gpt-4o"), id("anthropic:claude-sonnet-4-5")]
            )),
            ["anthropic:claude-sonnet-4-5", "openai:gpt-4o"]
        );
        assert_eq!(names(chain(&id("openai:gpt-4o"), &[])), ["openai:gpt-4o"]);
    }

    #[test]
    fn when_every_model_fails_the_last_error_is_reported() {
        let primary = flaky("anthropic:a", vec![Err((overloaded(), "")); 3]);
        let fallback = flaky("openai:b", vec![Err((rate_limited(None), "")); 3]);
        let clock = Rc::new(FakeClock::default());
        let (c, _) = run(vec![primary, fallback], &clock);
        assert_eq!(c.error, Some(rate_limited(None)));
    }
}
