//! What a model can do beyond text, as the registry ([`super::models`]) knows it: what a
//! request is shaped to (files it can see, tools it can call, thinking it can show).

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Capabilities {
    pub tools: bool,
    pub thinking: bool,
    pub vision: bool,
    /// The provider's own structured output (an answer in JSON of a given schema), where a
    /// provider's models differ in having it (Anthropic's); see `agent::output::form`.
    pub structured_output: bool,
}
