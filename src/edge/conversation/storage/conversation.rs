//! The `conversation` table: one row, what a turn needs of the conversation's D1 row (so a
//! recovery needs no request to know it).

use worker::Result;

use super::{rows, ObjectStorage, Text};
use crate::edge::protocol::TurnConversation;

impl ObjectStorage {
    pub fn conversation(&self) -> Result<Option<TurnConversation>> {
        if let Some(known) = self.known.conversation.borrow().as_ref() {
            return Ok(known.clone());
        }
        let rows: Vec<Text> =
            rows::cursor(self.exec("SELECT row AS t FROM conversation WHERE id = 1", None)?)?;
        let row: Option<TurnConversation> = rows
            .first()
            .and_then(|r| crate::llm::json::from_str(&r.t).ok());
        *self.known.conversation.borrow_mut() = Some(row.clone());
        Ok(row)
    }

    pub fn set_conversation(&self, conversation: &TurnConversation) -> Result<()> {
        let row =
            serde_json::to_string(conversation).map_err(|e| worker::Error::from(e.to_string()))?;
        self.write(
            "INSERT INTO conversation (id, row) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET row = excluded.row",
            vec![row.into()],
        )?;
        *self.known.conversation.borrow_mut() = Some(Some(conversation.clone()));
        Ok(())
    }

    /// Forgets the conversation's row: its creation was refused, so a later message is checked
    /// against the owner's count again.
    pub fn forget_conversation(&self) -> Result<()> {
        self.write("DELETE FROM conversation", vec![])?;
        *self.known.conversation.borrow_mut() = Some(None);
        Ok(())
    }
}
