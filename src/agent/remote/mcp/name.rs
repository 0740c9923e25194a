//! The name a server's tool is offered to the model under: `<server>__<tool>`, made to fit the
//! tool-name rule every provider holds to, which the names a server chooses need not.

use crate::agent::tools::{is_tool_name_char, MAX_TOOL_NAME};

/// `<server>__<tool>`, in the characters and length every provider accepts; a name clipped to
/// fit keeps a short hash of the whole so two long names stay apart.
pub fn exposed_name(server: &str, tool: &str) -> String {
    let full = format!("{server}__{tool}");
    let clean: String = full
        .chars()
        .map(|c| if is_tool_name_char(c) { c } else { '_' })
        .collect();
    if clean.len() <= MAX_TOOL_NAME && clean == full {
        return clean;
    }
    // FNV-1a of the original name.
    let hash = full.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let keep = MAX_TOOL_NAME - 9;
    format!("{}_{:08x}", &clean[..clean.len().min(keep)], hash as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_every_provider() {
        assert_eq!(exposed_name("docs", "search"), "docs__search");
        let odd = exposed_name("docs", "get.page/v2");
        assert!(
            odd.starts_with("docs__get_page_v2_") && odd.len() <= MAX_TOOL_NAME,
            "{odd}"
        );
        let long = "x".repeat(80);
        let (a, b) = (
            exposed_name("docs", &long),
            exposed_name("docs", &format!("{long}y")),
        );
        assert!(a.len() <= MAX_TOOL_NAME && a != b);
    }
}
