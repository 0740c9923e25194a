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

pub mod agent;
pub mod llm;

pub mod edge;
