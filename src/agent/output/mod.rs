//! Typed answers: a turn that answers with a JSON value of a given shape (issue 58). Here so
//! far, tested natively and not yet reachable through the API: what a request's `output` says
//! (`spec`, with OpenAI's strict form of a schema) and the parser that shows the answer as it
//! streams (`partial`); each provider's request takes the form asked for
//! (`llm::AnswerFormat`); answers are checked by `agent::schema::problems` (JSON pointers),
//! after `spec::unstrict` for OpenAI's strict form; `form` chooses, per provider, the form a
//! call asks in. Still to come: carrying `output` from the request into the loop, the loop's
//! extra step and repair call, the stream's `data-output` part, storage and the API's answers.

pub mod form;
pub mod partial;
pub mod spec;

pub use partial::PartialJson;
pub use spec::{OutputSpec, SpecError};
