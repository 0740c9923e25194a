//! What a turn that keeps memory does once its stream has ended ([`after_stream`]): the
//! exchange's vectors written, and memory kept in the background.
//!
//! Memory kept in the background (`managed_by: "background"`): once a turn's answer has
//! finished and its stream has ended, one extractor call ([`crate::agent::memory::extract`]) on
//! `MEMORY_MODEL` (else the agent's model) says what the working memory should keep, and it is
//! written as `update_memory` writes. The call is reserved against the user's budget and
//! charged to the ledger like any other; a failure costs a log line, never the turn.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use async_trait::async_trait;
use worker::{console_error, console_log};

use super::budget_store::D1Budget;
use super::env::{FixedProvider, TurnEnv};
use super::memory::{Embed, TurnMemory};
use super::resolver::{BudgetResolver, BudgetStore};
use crate::agent::memory::extract::{extract, max_tokens};
use crate::agent::memory::MemoryError;
use crate::agent::resolve::AttemptLedger;
use crate::agent::AgentMessage;
use crate::agent::ProviderResolver;
use crate::edge::budget::{Budget, Period};
use crate::edge::config::agents::AgentSpec;
use crate::edge::d1::{Store, UsageRow};
use crate::edge::error::ApiError;
use crate::edge::platform::clock::now_ms;
use crate::edge::platform::providers::resilient_provider;
use crate::edge::spend::{Ask, Charge, Reply, Settle};
use crate::llm::{AssistantMessage, ModelRef, Usage};

/// Times an extraction is made again when another writer changed the memory while it ran.
const TRIES: u32 = 2;

/// What a turn that keeps memory does once its stream has ended: the exchange's vectors
/// written, the working memory extracted.
pub async fn after_stream(turn_env: Rc<TurnEnv>, embed: Option<Embed>, extract: Option<Pending>) {
    if let Some(embed) = embed {
        embed.run(&turn_env).await;
    }
    if let Some(extract) = extract {
        extract.run(&turn_env).await;
    }
}

/// An extraction to run once the turn's stream has ended.
pub struct Pending {
    pub memory: TurnMemory,
    pub agent: Rc<AgentSpec>,
    pub owner: String,
    pub conversation_id: String,
    /// The user's message, and the answer.
    pub exchange: (String, String),
}

impl Pending {
    /// Runs the extraction and writes what it found; says how it went in a log line.
    pub async fn run(self, turn_env: &TurnEnv) {
        let started = now_ms();
        let outcome = self.extract_and_write(turn_env).await;
        let (changed, failed) = match &outcome {
            Ok(changed) => (*changed, None),
            Err(e) => (false, Some(e.as_str())),
        };
        let line = serde_json::json!({
            "event": "memory_extraction",
            "level": if failed.is_some() { "error" } else { "info" },
            "conversation_id": self.conversation_id,
            "user": self.owner,
            "agent": self.agent.name,
            "changed": changed,
            "failed": failed,
            "duration_ms": now_ms() - started,
        });
        if failed.is_some() {
            console_error!("{line}");
        } else {
            console_log!("{line}");
        }
    }

    async fn extract_and_write(&self, turn_env: &TurnEnv) -> Result<bool, String> {
        let config = &turn_env.config;
        let model = config
            .memory
            .model
            .clone()
            .unwrap_or_else(|| self.agent.model.clone());
        let provider = resilient_provider(
            &turn_env.env,
            config,
            (&model, &self.agent.fallback_models),
            None,
        )
        .map_err(|e| format!("the extractor's model: {e}"))?;
        let resolver: Rc<dyn ProviderResolver> = match config.user_budget_usd {
            Some(limit) => Rc::new(BudgetResolver {
                store: Rc::new(Unheard(D1Budget::new(
                    turn_env,
                    (&self.owner, &self.conversation_id),
                    limit,
                ))),
                model: provider,
                economy: None,
                fallbacks: self.agent.fallback_models.clone(),
                models: config.models.clone(),
                switches: Rc::new(Cell::new(0)),
                read: RefCell::new(None),
                open: RefCell::default(),
                uncharged: Default::default(),
                first: None,
            }),
            None => Rc::new(FixedProvider(provider)),
        };
        let ledger = Ledger {
            store: turn_env.store.clone(),
            owner: &self.owner,
            conversation_id: &self.conversation_id,
            turn_env,
        };
        let shape = self.memory.spec.shape.clone();
        let max = config.memory.max_bytes;
        let writer = self
            .memory
            .store(turn_env, (&self.owner, &self.conversation_id));
        let (asked, answer) = (&self.exchange.0, &self.exchange.1);
        // Within what the model may answer at all.
        let limit = max_tokens(max).min(config.models.info(&model).max_output_tokens);
        for _ in 0..TRIES {
            // Read now: the turn's own copy may be old.
            let seen = match turn_env.store.memory(&self.owner, &self.agent.name).await {
                Ok(row) => row.map_or_else(|| shape.initial(), |r| r.body),
                Err(e) => return Err(format!("reading the memory: {e}")),
            };
            let form = (&*shape, seen.as_str(), limit);
            let extraction = extract(resolver.as_ref(), &ledger, form, (asked, answer)).await;
            for (model, usage) in &extraction.calls {
                ledger.row(model, usage).await;
            }
            if let Some(why) = extraction.failed {
                return Err(why);
            }
            let Some(update) = extraction.update else {
                return Ok(false);
            };
            // Made on `seen`: a text made whole on it would undo a change made meanwhile, so
            // it is made again on the newer one.
            let written = writer
                .update(&|current| {
                    if current != seen {
                        return Err(CHANGED.into());
                    }
                    shape.apply(current, &update, max)
                })
                .await;
            match written {
                Ok(_) => return Ok(true),
                Err(MemoryError::Refused(e)) if e == CHANGED => continue,
                Err(e) => return Err(e.to_string()),
            }
        }
        Err("the memory kept changing while it was extracted; left as it is".into())
    }
}

const CHANGED: &str = "changed meanwhile";

/// The extractor's budget store: its calls are reserved, settled and charged as a turn's, but it
/// says nothing in the conversation, whose turn has ended (a note would land among the next
/// turn's messages). A warning it would give is left for the next turn to give.
struct Unheard(D1Budget);

#[async_trait(?Send)]
impl BudgetStore for Unheard {
    async fn budget(&self) -> Result<Option<Budget>, ApiError> {
        self.0.budget().await
    }

    async fn reserve(&self, ask: &Ask) -> Result<Reply, ApiError> {
        self.0.reserve(ask).await
    }

    async fn settle(&self, settle: &Settle) {
        self.0.settle(settle).await;
    }

    async fn charge(&self, charge: &Charge) -> Result<Option<f64>, ApiError> {
        self.0.charge(charge).await
    }

    async fn note(&self, _: AgentMessage) {}

    async fn mark_warned(&self, _: Period) {}
}

/// The ledger rows of the extractor's calls.
struct Ledger<'a> {
    store: Rc<Store>,
    owner: &'a str,
    conversation_id: &'a str,
    turn_env: &'a TurnEnv,
}

impl Ledger<'_> {
    async fn row(&self, model: &ModelRef, usage: &Usage) {
        if *usage == Usage::default() {
            return;
        }
        let row = UsageRow::of_call(self.owner, model, usage, &self.turn_env.config.models);
        if let Err(e) = self
            .store
            .record_usage(self.conversation_id, &row, now_ms())
            .await
        {
            console_error!("the memory extractor's ledger row was not written: {e}");
        }
    }
}

#[async_trait(?Send)]
impl AttemptLedger for Ledger<'_> {
    async fn record(&self, attempt: &AssistantMessage) {
        self.row(&attempt.model_ref(), &attempt.usage).await;
    }
}
