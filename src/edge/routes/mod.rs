//! One module per resource; each handler is small: extract, call, answer.

pub mod chat;
pub mod conversations;
pub mod health;
pub mod messages;
pub mod models;
