//! Text cut to a bound at a character boundary, for what the host keeps or writes about its decisions (an
//! Autoscaler's status, a decision record): a policy's words or a message over thousands of nodes must not be.

/// `text`, or its first `limit` bytes (back to a character boundary) and `...`.
pub fn truncated(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_string();
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

#[cfg(test)]
mod tests {
    #[test]
    fn text_is_cut_at_a_character_boundary() {
        assert_eq!(super::truncated("short", 10), "short");
        assert_eq!(super::truncated("héllo", 2), "h...", "é is two bytes: cut before it");
    }
}
