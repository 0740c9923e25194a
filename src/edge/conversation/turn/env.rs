//! What a turn runs with (the object's bindings, configuration and stores), and the resolver of
//! a turn without budgets: apart from `mod.rs`, so that the parts of a turn that `mod.rs` names
//! (memory, the work after the stream) can use them without an import circle.

use std::rc::Rc;

use async_trait::async_trait;
use worker::Env;

use crate::agent::{CallSize, ProviderResolver, Resolved};
use crate::edge::config::Config;
use crate::edge::conversation::storage::ObjectStorage;
use crate::edge::d1::Store;
use crate::llm::{LlmError, Provider};

/// What a turn is run with; shared by the object and the turns it runs.
pub struct TurnEnv {
    pub env: Env,
    pub config: Rc<Config>,
    pub store: Rc<Store>,
    pub storage: Rc<ObjectStorage>,
}

/// The resolver of a turn without budgets: always its provider, at the size asked.
pub struct FixedProvider(pub Rc<dyn Provider>);

#[async_trait(?Send)]
impl ProviderResolver for FixedProvider {
    async fn resolve(&self, call: CallSize<'_>) -> Result<Resolved, LlmError> {
        Ok(Resolved {
            provider: self.0.clone(),
            max_tokens: call.max_tokens,
        })
    }
}
