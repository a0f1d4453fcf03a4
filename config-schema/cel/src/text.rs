//! Wording shared by the messages of every crate (each depends on this one).

/// `word` after its indefinite article, as the word is read aloud: "an AccessPolicy",
/// "a Gateway", "an int", "a uint". A word opening with two capitals opens with an acronym read
/// letter by letter ("an HTTPRoute", "an XBackend", "an XAccessPolicy", "a JWT"); a `u` reads as
/// "you" ("a uint", "a unique") except in `un-` ("an unset").
pub fn a_or_an(word: &str) -> String {
    let mut chars = word.chars();
    let an = match (chars.next(), chars.next()) {
        (Some(f), Some(s)) if f.is_ascii_uppercase() && s.is_ascii_uppercase() => {
            "AEFHILMNORSX".contains(f)
        }
        (Some(f), _) => match f.to_ascii_lowercase() {
            'a' | 'e' | 'i' | 'o' => true,
            'u' => {
                let rest = word.get(1..).unwrap_or_default().to_ascii_lowercase();
                rest.starts_with('n') && !rest.starts_with("ni")
            }
            _ => false,
        },
        (None, _) => false,
    };
    format!("{} {word}", if an { "an" } else { "a" })
}

#[cfg(test)]
mod tests {
    use super::a_or_an;

    #[test]
    fn the_article_goes_with_how_the_word_is_read() {
        for (word, want) in [
            ("AccessPolicy", "an AccessPolicy"),
            ("XAccessPolicy", "an XAccessPolicy"),
            ("XBackend", "an XBackend"),
            ("HTTPRoute", "an HTTPRoute"),
            ("Gateway", "a Gateway"),
            ("ToolPin", "a ToolPin"),
            ("FilterSettings", "a FilterSettings"),
            ("ExternalAuth", "an ExternalAuth"),
            ("InferencePool", "an InferencePool"),
            ("JWT", "a JWT"),
            ("int", "an int"),
            ("uint", "a uint"),
            ("unset", "an unset"),
            ("unique", "a unique"),
            ("double", "a double"),
            ("error_response", "an error_response"),
            ("denied_response", "a denied_response"),
        ] {
            assert_eq!(a_or_an(word), want);
        }
    }
}
