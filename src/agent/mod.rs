//! Layer 2: the agent runtime.
//!
//! [`run_agent_turn`] runs one turn: it calls the LLM, stores each message through the hooks as it
//! is produced, runs server tools, injects steering messages between tool calls, takes follow-ups
//! when it would end, and repeats until the model stops or a limit is hit. It knows nothing of D1,
//! Durable Objects or HTTP; the application plugs in through [`TurnHooks`], [`Queues`],
//! [`ProviderResolver`] and [`ContextTransform`].
//!
//! Vocabulary (the glossary is in the crate's root): a *turn* is one run of the loop (one user
//! request, or a schedule's); each LLM call inside it is a *step*, numbered by
//! [`AgentEvent::StepStart`]'s `step` field.

pub mod artifacts;
mod built_in;
pub mod calendar;
pub mod compact;
pub mod estimate;
pub mod event;
pub mod hooks;
pub mod memory;
pub mod message;
pub mod output;
pub mod plan;
pub mod remote;
pub mod resolve;
pub mod schedules;
pub mod schema;
pub mod state;
pub mod stats;
pub mod text;
mod tool_calls;
pub mod tools;
pub mod trace;
mod turn;

pub use built_in::built_in_tool_names;
pub use compact::{Compaction, Compactor};
pub use estimate::charge_unreported;
pub use event::AgentEvent;
pub use hooks::{HookError, NoHooks, StepEndInfo, TurnHooks};
pub use message::{convert_to_llm, AgentMessage};
pub use plan::{plan_from_history, Plan, PlanItem, UpdatePlan};
pub use resolve::{AttemptLedger, CallSize, ProviderResolver, Resolved};
pub use state::TurnOutcome;
pub use state::{AgentState, CancelToken, LocalQueues, Queues, ToolAnswers};
pub use stats::{CallStats, TurnStats};
pub use tool_calls::CANCELLED;
pub use tool_calls::{DENIED, SKIPPED_FOR_STEERING};
pub use tools::{
    tool_fn, Approval, CurrentTime, ServerTool, ToolKind, ToolRegistry, ToolsetSelector,
};
pub use turn::{pending_calls, run_agent_turn, ContextTransform, MOVED_ON};
