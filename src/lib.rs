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
//! - [`edge`]: Layer 3, the Worker. Routes, the D1 store, the conversation Durable
//!   Object, the AI SDK UI message stream encoder, configuration. The only layer that imports
//!   `worker`.

pub mod agent;
pub mod llm;

pub mod edge;
