//! The index of a conversation's artifacts the system prompt carries, so the model knows what
//! there is without reading it, held to a budget of bytes.

use super::ArtifactSummary;
use crate::agent::text::shorten;

/// The index of a conversation's artifacts for the system prompt, within `budget` bytes
/// (whole entries only; the rest are counted).
pub fn index(artifacts: &[ArtifactSummary], budget: usize) -> Option<String> {
    if artifacts.is_empty() {
        return None;
    }
    let mut out = String::from(
        "Artifacts in this conversation (newest last; read_artifact shows the content):",
    );
    for (shown, a) in artifacts.iter().enumerate() {
        let entry = format!(
            "\n- {} \"{}\" ({}, version {}): {}",
            a.id,
            shorten(&a.title, 80),
            a.kind.as_str(),
            a.version,
            a.first_line
        );
        if out.len() + entry.len() > budget {
            // The newest matter most: say how many older ones are left out.
            out.push_str(&format!("\n- ... and {} more", artifacts.len() - shown));
            break;
        }
        out.push_str(&entry);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::artifacts::ArtifactKind;

    #[test]
    fn the_index_keeps_within_its_budget() {
        let summary = |i: u32| ArtifactSummary {
            id: format!("art{i}"),
            title: format!("Doc {i}"),
            kind: ArtifactKind::Markdown,
            version: i,
            first_line: "# Heading".into(),
            updated_at: 0,
        };
        assert_eq!(index(&[], 1000), None);
        let all: Vec<_> = (1..=50).map(summary).collect();
        let text = index(&all, 600).unwrap();
        assert!(text.len() <= 600 + 40, "{}", text.len());
        assert!(text.contains("art1 \"Doc 1\" (markdown, version 1): # Heading"));
        assert!(text.contains("more"));
        assert!(!index(&all[..2], 600).unwrap().contains("more"));
    }
}
