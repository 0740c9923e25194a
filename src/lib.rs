//! edge-agent: an LLM agent runtime that runs as a Cloudflare Worker.
//!
//! # Layout
//! Three layers, dependencies pointing down only:
//! - [`llm`]: Layer 1, provider-agnostic LLM access. Shared message types, one streaming event
//!   union, typed errors, and one file per provider wire API. Bytes in, events out; the HTTP
//!   transport is a trait, so the layer runs natively under `cargo test`.
//! - [`agent`]: Layer 2, the agent runtime. `run_agent_turn` calls the LLM, runs server tools,
//!   injects steering messages between tool calls and follow-ups at the end. It knows nothing of
//!   D1, Durable Objects or HTTP routes; the application reaches it through hooks and traits.
//! - [`edge`]: Layer 3, the Worker: the gateway (routes, auth), the conversation Durable
//!   Object and the turn it runs, each user's spend object, the D1 queries, the platform
//!   adapters. The only layer that imports `worker`. How it all fits: `docs/design.md`.
//!
//! # Glossary
//! One word per idea; the code, the docs and the logs use these and no others for them.
//! - **agent**: one of the deployment's named agents (`AGENTS`; `edge::config::agents`), its
//!   instructions, model and tools; a conversation belongs to one. The [`agent`] layer is the
//!   runtime that runs a turn as one.
//! - **typed answer**: a turn's answer as a JSON value of a given shape (`output`;
//!   `agent::output`).
//! - **turn**: one run of the agent loop for a user's message (or a schedule's instruction),
//!   from the message to the answer that ends it; it may pause for client tools or approvals
//!   and resume in a later request. A turn makes one or more steps.
//! - **step**: one LLM call inside a turn and what follows from it (its tool calls run);
//!   `AgentEvent::StepStart`/`StepEnd`, `on_step_end`, `MAX_LLM_CALLS` counts them.
//! - **attempt**: one try at a step's call; a retry or a fallback makes another
//!   (`llm::retry`). An attempt given up on may still be billed.
//! - **answer**: the assistant message a step's call produced; a **partial answer** is what an
//!   interrupted turn had streamed, saved for recovery (`conversation/turn/partial.rs`); while it
//!   streams an answer is put together by `llm::assembler`.
//! - **steering**: messages a user sends while a turn runs, injected before the turn's next
//!   tool call; **follow-up**: those that wait until the turn would end. Together they are the
//!   conversation's **queue** (the object's `inbox` table, `conversation/storage/inbox.rs`;
//!   `agent::Queues`).
//! - **compaction** and its **summary**: older exchanges replaced by one `summary` message. The
//!   JSON a `stream: false` request gets is the turn's **result** (`conversation/turn/result.rs`).
//! - **plan**: the model's own checklist (`update_plan`), recited before each step. A schedule
//!   is *made* (`schedules::new_schedule`); a call's **size** (`CallSize`) is what a budget holds.
//! - **conversation object**: the Durable Object that owns one conversation (its class,
//!   `ConversationCoordinator`, is the name deployments bind; its state is `conversation::Object`).
//!   Its **storage** is its own SQLite (`conversation::storage`); the **store** is D1
//!   (`edge::d1::Store`), the record of history, ledger and budgets.
//! - **spend object**: each user's Durable Object that holds their spend for the period and the
//!   **reservations** of calls in flight (`edge::spend`); a call **reserves** its worst case and
//!   **settles** to what it cost. The **ledger** (D1 `usage_ledger`) records every paid call;
//!   a **budget** is a user's limit per period (`edge::budget`); **usage** is tokens, **cost**
//!   dollars.
//!
//! # Rules for wasm size
//! A cold start downloads and compiles the whole module, and V8 compiles every function a
//! request runs, so growth is a decision (`scripts/checks/size-ceiling`, checked by `make test`,
//! raised only by a commit that says why):
//! - JSON is read by [`llm::json`] (`json_struct!`, `FromJson`), never by serde's deserializer:
//!   no `derive(Deserialize)`, no `serde_json::from_*` outside tests. Writing stays serde's.
//! - No `serde_wasm_bindgen`, nor the workers-rs calls built on it (`Request::json`, D1's typed
//!   rows and `meta()`, `SqlCursor::to_array`, `RateLimiter::limit`): JS values are read as
//!   JSON text (`edge::d1::rows`) or with `Reflect::get`.
//! - Route handlers and rare paths go behind `edge::out_of_line` (a boxed future), out of their
//!   callers' code; generic wrappers stay thin over non-generic work.
//! - No dependency for what a few dozen lines do (`llm::repair`, `agent::schema`).
//!
//! `scripts/checks/banned.py` refuses the first two by file and line.

pub mod agent;
pub mod llm;

pub mod edge;
