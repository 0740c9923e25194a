//! Artifacts other than `json` worked on by their text: exact find-and-replace edits (what
//! `patch_artifact` applies to them), and the ranges of lines `read_artifact` shows.

use serde_json::Value;

use crate::llm::fields::{self, Fields};

/// One find-and-replace edit of a text artifact.
#[derive(Debug, Clone)]
pub struct Edit {
    pub find: String,
    pub replace: String,
}

pub(super) fn read_edits(edits: Value) -> Result<Vec<Edit>, String> {
    fields::list(edits, "it", |edit| {
        let mut f = Fields::any(edit)?;
        Ok(Edit {
            find: f.required("find", fields::STRING)?,
            replace: f.required("replace", fields::STRING)?,
        })
    })
}

/// Applies exact find-and-replace edits in order; each `find` must match exactly once in the
/// text as the earlier edits left it.
pub fn apply_edits(content: &str, edits: &[Edit]) -> Result<String, String> {
    let mut text = content.to_string();
    for (i, edit) in edits.iter().enumerate() {
        if edit.find.is_empty() {
            return Err(format!("edit {i}: `find` is empty; nothing was changed"));
        }
        let mut matches = text.match_indices(&edit.find);
        let Some((at, _)) = matches.next() else {
            return Err(format!(
                "edit {i}: `find` does not occur in the artifact; nothing was changed"
            ));
        };
        let more = matches.count();
        if more > 0 {
            return Err(format!(
                "edit {i}: `find` occurs {} times; give more of the surrounding text so it \
                 matches once; nothing was changed",
                more + 1
            ));
        }
        text.replace_range(at..at + edit.find.len(), &edit.replace);
    }
    Ok(text)
}

/// Lines `from..=to` (1-based; either end open) of `content`, and how many lines it has.
pub fn line_range(content: &str, from: Option<u64>, to: Option<u64>) -> (String, usize) {
    let total = content.lines().count();
    let from = from.unwrap_or(1).max(1) as usize;
    let to = to.map_or(total, |t| (t as usize).min(total));
    let picked: Vec<&str> = content
        .lines()
        .skip(from - 1)
        .take((to + 1).saturating_sub(from))
        .collect();
    (picked.join("\n"), total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_edits_must_each_match_once() {
        let text = "one two\nthree two";
        let edit = |find: &str, replace: &str| Edit {
            find: find.into(),
            replace: replace.into(),
        };
        assert_eq!(
            apply_edits(text, &[edit("one", "1"), edit("three", "3")]).unwrap(),
            "1 two\n3 two"
        );
        let twice = apply_edits(text, &[edit("two", "2")]).unwrap_err();
        assert!(twice.contains("occurs 2 times"), "{twice}");
        let missing = apply_edits(text, &[edit("one", "1"), edit("four", "4")]).unwrap_err();
        assert!(missing.starts_with("edit 1:"), "{missing}");
        assert!(apply_edits(text, &[edit("", "x")]).is_err());
        // An edit sees what the earlier ones left: "1" now occurs once.
        assert_eq!(
            apply_edits(text, &[edit("one", "1"), edit("1 two", "x")]).unwrap(),
            "x\nthree two"
        );
    }

    #[test]
    fn line_ranges() {
        let content = "a\nb\nc\nd";
        assert_eq!(line_range(content, Some(2), Some(3)), ("b\nc".into(), 4));
        assert_eq!(line_range(content, Some(3), None), ("c\nd".into(), 4));
        assert_eq!(line_range(content, Some(9), None), (String::new(), 4));
        assert_eq!(line_range(content, Some(3), Some(2)), (String::new(), 4));
    }
}
