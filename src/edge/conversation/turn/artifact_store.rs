//! A turn's artifacts: the D1 store behind the `artifacts` tools, and the system prompt rebuilt
//! before every LLM call: the conversation's `system` text with `{{date}}`,
//! `{{user}}` and `{{model}}` filled in, then the index of the conversation's artifacts, which
//! is read again only after a tool changed one.

use std::cell::RefCell;
use std::rc::Rc;

use async_trait::async_trait;

use crate::agent::artifacts::{index, Artifact, ArtifactContext, ArtifactStore, ArtifactSummary};
use crate::agent::calendar::iso8601;
use crate::edge::config::ArtifactLimits;
use crate::edge::d1::Store;
use crate::edge::platform::clock::now_ms;

/// How much of the system prompt the artifact index may take, in bytes.
pub const INDEX_BUDGET: usize = 2_000;

/// One conversation's artifacts in D1.
pub struct D1Artifacts {
    pub store: Rc<Store>,
    pub conversation_id: String,
    pub limits: ArtifactLimits,
}

#[async_trait(?Send)]
impl ArtifactStore for D1Artifacts {
    async fn get(&self, id: &str, version: Option<u32>) -> Result<Option<Artifact>, String> {
        self.store
            .artifact(&self.conversation_id, id, version)
            .await
            .map_err(|e| e.to_string())
    }

    async fn list(&self) -> Result<Vec<ArtifactSummary>, String> {
        self.store
            .artifacts(&self.conversation_id)
            .await
            .map_err(|e| e.to_string())
    }

    async fn put(&self, artifact: &Artifact) -> Result<(), String> {
        self.store
            .put_artifact(&self.conversation_id, artifact, self.limits)
            .await
            .map_err(|e| e.to_string())
    }
}

/// The system prompt of one turn.
pub struct SystemPrompt {
    /// The conversation's `system` text with its placeholders filled in.
    base: Option<String>,
    artifacts: Rc<ArtifactContext>,
    index: RefCell<Option<String>>,
    /// The working memory (as `update_memory` last left it) and whether the model keeps it;
    /// then what recall found. Both follow the stable instructions.
    memory: Option<(Rc<RefCell<String>>, bool)>,
    recalled: Option<String>,
}

impl SystemPrompt {
    /// `listed`: the conversation's artifacts as the turn found them.
    pub fn new(
        template: Option<&str>,
        user: &str,
        model: &str,
        artifacts: Rc<ArtifactContext>,
        listed: &[ArtifactSummary],
    ) -> Self {
        let date = iso8601(now_ms());
        Self {
            base: template.map(|t| fill(t, &date[..10], user, model)),
            artifacts,
            index: RefCell::new(index(listed, INDEX_BUDGET)),
            memory: None,
            recalled: None,
        }
    }

    /// Shows the user's working memory (`by_tool`: kept by the model) and what recall found.
    pub fn remembering(
        mut self,
        memory: Option<(Rc<RefCell<String>>, bool)>,
        recalled: Option<String>,
    ) -> Self {
        self.memory = memory;
        self.recalled = recalled;
        self
    }

    /// The prompt for the next LLM call.
    pub async fn build(&self) -> Option<String> {
        if self.artifacts.changed.replace(false) {
            match self.artifacts.store.list().await {
                Ok(listed) => *self.index.borrow_mut() = index(&listed, INDEX_BUDGET),
                // The previous index is kept; the model can still list them.
                Err(e) => worker::console_error!("reading the artifact index: {e}"),
            }
        }
        let memory = self
            .memory
            .as_ref()
            .map(|(shown, by_tool)| crate::agent::memory::block(&shown.borrow(), *by_tool));
        let index = self.index.borrow();
        let parts = [
            self.base.as_deref(),
            memory.as_deref(),
            self.recalled.as_deref(),
            index.as_deref(),
        ];
        let mut prompt: Option<String> = None;
        for part in parts.into_iter().flatten() {
            match &mut prompt {
                None => prompt = Some(part.to_string()),
                Some(p) => {
                    p.push_str("\n\n");
                    p.push_str(part);
                }
            }
        }
        prompt
    }
}

/// Fills `{{date}}` (YYYY-MM-DD, UTC), `{{user}}` and `{{model}}` in a system prompt.
pub fn fill(template: &str, date: &str, user: &str, model: &str) -> String {
    if !template.contains("{{") {
        return template.to_string();
    }
    template
        .replace("{{date}}", date)
        .replace("{{user}}", user)
        .replace("{{model}}", model)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_filled_and_others_left_alone() {
        assert_eq!(
            fill(
                "Today is {{date}}; you help {{user}} as {{model}}. {{other}}",
                "2026-11-22",
                "ana",
                "anthropic:claude"
            ),
            "Today is 2026-11-22; you help ana as anthropic:claude. {{other}}"
        );
        assert_eq!(fill("plain", "d", "u", "m"), "plain");
    }

    #[test]
    fn memory_and_recall_follow_the_stable_instructions() {
        use crate::agent::artifacts::ArtifactStore;
        struct NoArtifacts;
        #[async_trait::async_trait(?Send)]
        impl ArtifactStore for NoArtifacts {
            async fn get(&self, _: &str, _: Option<u32>) -> Result<Option<Artifact>, String> {
                Ok(None)
            }
            async fn list(&self) -> Result<Vec<ArtifactSummary>, String> {
                Ok(vec![])
            }
            async fn put(&self, _: &Artifact) -> Result<(), String> {
                Ok(())
            }
        }
        let context = Rc::new(ArtifactContext {
            store: Rc::new(NoArtifacts),
            now: Box::new(|| 0),
            new_id: Box::new(|| "a".into()),
            changed: Default::default(),
            exists: Default::default(),
        });
        let shown = Rc::new(RefCell::new("{\"diet\":\"vegan\"}".to_string()));
        let prompt = SystemPrompt {
            base: Some("You are the concierge.".into()),
            artifacts: context,
            index: RefCell::new(None),
            memory: None,
            recalled: None,
        }
        .remembering(
            Some((shown.clone(), true)),
            Some("<recalled>\n- x\n</recalled>".into()),
        );
        let built = futures::executor::block_on(prompt.build()).expect("a prompt");
        // The agent's instructions first, a prefix a provider's cache keeps; then the memory,
        // then what was recalled.
        assert!(
            built.starts_with("You are the concierge.\n\n<memory>\n"),
            "{built}"
        );
        let memory_at = built.find("{\"diet\":\"vegan\"}").expect("the memory");
        assert!(memory_at < built.find("<recalled>").expect("the recall"));
        // An update during the turn shows from the next step.
        *shown.borrow_mut() = "{\"diet\":\"pescatarian\"}".into();
        assert!(futures::executor::block_on(prompt.build())
            .expect("a prompt")
            .contains("pescatarian"));
    }
}
