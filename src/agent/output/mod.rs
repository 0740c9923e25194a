//! Typed answers: a turn that answers with a JSON value of a given shape. What a request's
//! `output` says (`spec`, with OpenAI's strict form of a schema); the form a call asks in, per
//! provider (`form`, through `llm::AnswerFormat`); the parser that shows the answer as it
//! streams (`partial`); and the turn's side (`answer`): each call shaped, the answer shown as it
//! forms, checked by `agent::schema::problems` (JSON pointers), repaired once or given up on.

pub mod answer;
pub mod form;
pub mod partial;
pub mod spec;

pub use answer::{Answering, Settled};
pub use partial::PartialJson;
pub use spec::{OutputSpec, SpecError};
