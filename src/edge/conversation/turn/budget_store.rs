//! The budget resolver's store: the budget in D1, calls reserved and settled with the user's
//! spend object, notes and warnings in the history.

use super::resolver::BudgetStore;
use crate::agent::AgentMessage;
use crate::edge::budget::{Budget, Period};
use crate::edge::d1::Store;
use crate::edge::error::ApiError;
use crate::edge::platform::clock::now_ms;
use crate::edge::spend::client::SpendClient;
use crate::edge::spend::{Ask, Reply, Settle};
use async_trait::async_trait;
use std::rc::Rc;
use worker::{console_error, Env};

/// A user's budget in D1, for the [`BudgetResolver`].
pub(super) struct D1Budget {
    pub(super) store: Rc<Store>,
    /// For the owner's spend object.
    pub(super) env: Env,
    pub(super) owner: String,
    pub(super) conversation_id: String,
    pub(super) default: (f64, Period),
}

#[async_trait(?Send)]
impl BudgetStore for D1Budget {
    async fn budget(&self) -> Result<Option<Budget>, ApiError> {
        self.store
            .budget(&self.owner, Some(self.default), now_ms())
            .await
    }

    async fn reserve(&self, ask: &Ask) -> Result<Reply, ApiError> {
        SpendClient::for_user(&self.env, &self.owner)?
            .reserve(ask)
            .await
    }

    async fn settle(&self, settle: &Settle) {
        let settled = match SpendClient::for_user(&self.env, &self.owner) {
            Ok(client) => client.settle(settle).await,
            Err(e) => Err(e),
        };
        // The reservation expires; the ledger has the cost for the next period's seed.
        if let Err(e) = settled {
            console_error!("settling a call's cost: {e}");
        }
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
