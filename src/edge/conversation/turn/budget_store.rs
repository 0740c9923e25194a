//! The budget resolver's store: the budget in D1, calls reserved, renewed while they stream and
//! settled with the user's spend object, notes and warnings in the history.

use super::resolver::BudgetStore;
use crate::agent::AgentMessage;
use crate::edge::budget::{Budget, Period};
use crate::edge::d1::Store;
use crate::edge::error::ApiError;
use crate::edge::platform::clock::now_ms;
use crate::edge::spend::client::SpendClient;
use crate::edge::spend::{Ask, Charge, Reply, Settle, RENEW_MS};
use async_trait::async_trait;
use futures::channel::oneshot;
use futures::future::Either;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;
use worker::{console_error, wasm_bindgen_futures, Delay, Env};

/// A user's budget in D1, for the [`BudgetResolver`](super::resolver::BudgetResolver).
pub(super) struct D1Budget {
    pub(super) store: Rc<Store>,
    /// For the owner's spend object.
    pub(super) env: Env,
    pub(super) owner: String,
    pub(super) conversation_id: String,
    pub(super) default: (f64, Period),
    /// The calls in flight whose reservations are renewed, each with what stops the renewing:
    /// dropped when the call settles (or the turn is dropped with this store).
    pub(super) renewing: RefCell<HashMap<String, oneshot::Sender<()>>>,
}

impl D1Budget {
    /// The budget store of conversation `conversation_id` of `owner`, whose budget is `limit`
    /// per the deployment's period unless an admin set another.
    pub(super) fn new(
        turn_env: &super::env::TurnEnv,
        (owner, conversation_id): (&str, &str),
        limit: f64,
    ) -> Self {
        Self {
            store: turn_env.store.clone(),
            env: turn_env.env.clone(),
            owner: owner.to_string(),
            conversation_id: conversation_id.to_string(),
            default: (limit, turn_env.config.budget_period),
            renewing: RefCell::default(),
        }
    }

    /// Renews `call`'s reservation every [`RENEW_MS`] until it settles: a call may stream for
    /// longer than a reservation holds, and its share of the budget must not be handed to
    /// another call meanwhile. A runtime that dies stops renewing, and the reservation lapses.
    fn keep_renewing(&self, call: String) {
        let (stop, mut stopped) = oneshot::channel::<()>();
        self.renewing.borrow_mut().insert(call.clone(), stop);
        let env = self.env.clone();
        let owner = self.owner.clone();
        wasm_bindgen_futures::spawn_local(async move {
            loop {
                let beat = Delay::from(Duration::from_millis(RENEW_MS.unsigned_abs()));
                // Settled: the sender was dropped, and the renewing ends at once.
                if let Either::Right(_) = futures::future::select(beat, &mut stopped).await {
                    return;
                }
                let renewed = match SpendClient::for_user(&env, &owner) {
                    Ok(client) => client.renew(&call).await,
                    Err(e) => Err(e),
                };
                match renewed {
                    Ok(true) => {}
                    // Nothing held any more (lapsed, or its period ended): nothing to renew.
                    Ok(false) => return,
                    // Tried again at the next beat: the reservation outlasts a few failures.
                    Err(e) => console_error!("renewing a call's reservation: {e}"),
                }
            }
        });
    }
}

#[async_trait(?Send)]
impl BudgetStore for D1Budget {
    async fn budget(&self) -> Result<Option<Budget>, ApiError> {
        self.store
            .budget(&self.owner, Some(self.default), now_ms())
            .await
    }

    async fn reserve(&self, ask: &Ask) -> Result<Reply, ApiError> {
        let reply = SpendClient::for_user(&self.env, &self.owner)?
            .reserve(ask)
            .await?;
        if let Reply::Granted { call, .. } = &reply {
            self.keep_renewing(call.clone());
        }
        Ok(reply)
    }

    async fn settle(&self, settle: &Settle) {
        if let Some(call) = &settle.call {
            // Dropping its sender stops the renewing.
            self.renewing.borrow_mut().remove(call);
        }
        let settled = match SpendClient::for_user(&self.env, &self.owner) {
            Ok(client) => client.settle(settle).await,
            Err(e) => Err(e),
        };
        // The reservation lapses; the ledger has the cost for the next period's seed.
        if let Err(e) = settled {
            console_error!("settling a call's cost: {e}");
        }
    }

    async fn charge(&self, charge: &Charge) -> Result<Option<f64>, ApiError> {
        SpendClient::for_user(&self.env, &self.owner)?
            .charge(charge)
            .await
    }

    async fn note(&self, message: AgentMessage) {
        if let Err(e) = self.store.append_new(&self.conversation_id, &message).await {
            console_error!("storing a budget note: {e}");
        }
    }

    async fn mark_warned(&self, period: Period) {
        let (start, _) = period.bounds(now_ms());
        if let Err(e) = self.store.mark_warned(&self.owner, start, now_ms()).await {
            console_error!("recording the budget warning: {e}");
        }
    }
}
