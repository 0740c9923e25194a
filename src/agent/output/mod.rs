//! Typed answers: a turn that answers with a JSON value of a given shape (issue 58). Here so
//! far, tested natively and not yet reachable through the API: what a request's `output` says
//! (`spec`, with OpenAI's strict form of a schema) and the parser that shows the answer as it
//! streams (`partial`); each provider's request takes the form asked for
//! (`llm::AnswerFormat`); answers are checked by `agent::schema::problems` (JSON pointers),
//! after `spec::unstrict` for OpenAI's strict form. Choosing the form per provider, repair, the
//! loop's extra step and the stream's `data-output` part come next.

pub mod partial;
pub mod spec;

pub use partial::PartialJson;
pub use spec::{OutputSpec, SpecError};
