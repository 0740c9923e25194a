//! Text cut to a limit, at a character boundary. Two rules, for two readers: a size limit
//! (what is stored or sent) counts bytes and cuts silently, the caller saying what was cut; a
//! limit on what a person reads counts characters and marks the cut with `…`.

/// The longest start of `text` of at most `max` bytes that ends on a character boundary.
pub fn clip(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `text` cut to its first `max` characters, with `…` after them when anything was cut.
pub fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_counts_bytes_and_shorten_characters() {
        assert_eq!(clip("héllo", 2), "h");
        assert_eq!(clip("héllo", 3), "hé");
        assert_eq!(clip("hi", 10), "hi");
        assert_eq!(shorten("héllo", 2), "hé…");
        assert_eq!(shorten("héllo", 5), "héllo");
    }
}
