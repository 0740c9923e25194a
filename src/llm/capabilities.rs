//! What a model can do beyond text, as the registry ([`super::models`]) knows it: what a
//! request is shaped to (files it can see, tools it can call, thinking it can show).

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Capabilities {
    pub tools: bool,
    pub thinking: bool,
    pub vision: bool,
}
