//! The names of the runtime's own tools, taken from the modules that define them, so a tool
//! added there is known here too: a configured tool may not take one of them.

use super::plan::UPDATE_PLAN;
use super::tools::CURRENT_TIME;
use super::{artifacts, memory, schedules};

/// Every built-in tool's name: `current_time`, `update_plan`, `update_memory`, and the
/// `artifacts` and `schedules` toolsets'.
pub fn built_in_tool_names() -> impl Iterator<Item = &'static str> {
    [CURRENT_TIME, UPDATE_PLAN, memory::UPDATE_MEMORY]
        .into_iter()
        .chain(artifacts::TOOLS)
        .chain(schedules::TOOLS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::tools::is_tool_name;

    #[test]
    fn every_built_in_name_is_a_valid_tool_name_and_taken_once() {
        let names: Vec<&str> = built_in_tool_names().collect();
        assert_eq!(names.len(), 11);
        for (i, name) in names.iter().enumerate() {
            assert!(is_tool_name(name), "{name}");
            assert!(!names[..i].contains(name), "{name} twice");
        }
    }
}
