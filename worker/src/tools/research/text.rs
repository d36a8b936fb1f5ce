//! Words of code and prose as search terms: identifiers are split on case and underscores
//! (`parseConfigFile`, `parse_config_file` and `ParseConfigFile` all give `parse`, `config`,
//! `file`), and the whole identifier is kept too, so that an exact name still ranks first.

/// Words too common to tell one chunk from another.
const STOPWORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "do", "does", "for", "from", "has", "have", "how", "i",
    "if", "in", "is", "it", "its", "of", "on", "or", "so", "than", "that", "the", "their", "then", "there",
    "these", "this", "to", "was", "we", "what", "when", "where", "which", "who", "why", "will", "with",
    "you",
];

pub fn is_stopword(word: &str) -> bool {
    STOPWORDS.binary_search(&word).is_ok()
}

/// Each identifier-like run of `text` (letters, digits, `_`), with its byte offset.
fn identifiers(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|w| !w.is_empty())
}

/// The parts of one identifier, lowercased: split at `_`, at a lower-to-upper change, before the
/// last capital of a run of capitals followed by a lower-case letter (`HTTPServer` → `http`,
/// `server`), and between letters and digits.
pub fn split_identifier(word: &str) -> Vec<String> {
    let mut parts = Vec::new();
    for piece in word.split('_').filter(|p| !p.is_empty()) {
        let chars: Vec<char> = piece.chars().collect();
        let mut start = 0;
        for i in 1..chars.len() {
            let (prev, here) = (chars[i - 1], chars[i]);
            let next_is_lower = chars.get(i + 1).is_some_and(|c| c.is_lowercase());
            let boundary = (prev.is_lowercase() && here.is_uppercase())
                || (prev.is_uppercase() && here.is_uppercase() && next_is_lower)
                || (prev.is_alphabetic() && here.is_numeric())
                || (prev.is_numeric() && here.is_alphabetic());
            if boundary {
                parts.push(chars[start..i].iter().collect::<String>().to_lowercase());
                start = i;
            }
        }
        parts.push(chars[start..].iter().collect::<String>().to_lowercase());
    }
    parts
}

/// The sequence of word parts of `text`, in order, without stop words: what phrases match on.
pub fn words(text: &str) -> Vec<String> {
    identifiers(text).flat_map(split_identifier).filter(|w| !is_stopword(w)).collect()
}

/// The index terms of `text`: every part, and every compound identifier whole.
pub fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for identifier in identifiers(text) {
        let parts = split_identifier(identifier);
        if parts.len() > 1 {
            out.push(identifier.to_lowercase());
        }
        out.extend(parts.into_iter().filter(|p| !is_stopword(p)));
    }
    out
}

/// A question as a search: its distinct terms, the phrases it quotes, and its adjacent word pairs
/// (a chunk that holds a pair in order is closer to the question than one that holds both words
/// apart).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Query {
    pub terms: Vec<String>,
    pub phrases: Vec<Vec<String>>,
    pub pairs: Vec<(String, String)>,
}

impl Query {
    pub fn parse(question: &str) -> Self {
        let mut terms = self::terms(question);
        terms.sort();
        terms.dedup();
        let phrases = question.split('"').skip(1).step_by(2).map(words).filter(|w| w.len() > 1).collect();
        let sequence = words(question);
        let mut pairs: Vec<(String, String)> =
            sequence.windows(2).filter(|w| w[0] != w[1]).map(|w| (w[0].clone(), w[1].clone())).collect();
        pairs.dedup();
        Self { terms, phrases, pairs }
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }
}

/// Whether `needle` occurs in `haystack` as a run of consecutive words.
pub fn contains_run(haystack: &[String], needle: &[String]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stopwords_are_sorted_for_binary_search() {
        let mut sorted = STOPWORDS.to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, STOPWORDS);
    }

    #[test]
    fn identifiers_split_on_case_underscores_and_digits() {
        assert_eq!(split_identifier("parseConfigFile"), ["parse", "config", "file"]);
        assert_eq!(split_identifier("parse_config_file"), ["parse", "config", "file"]);
        assert_eq!(split_identifier("HTTPServer"), ["http", "server"]);
        assert_eq!(split_identifier("sha256Digest"), ["sha", "256", "digest"]);
        assert_eq!(split_identifier("__init__"), ["init"]);
        assert_eq!(terms("fn verify_signature(x)"), ["fn", "verify_signature", "verify", "signature", "x"]);
    }

    #[test]
    fn a_question_keeps_its_quoted_phrases_and_word_pairs() {
        let query = Query::parse("Where is the \"dead letter\" stream trimmed?");
        assert_eq!(query.phrases, vec![vec!["dead".to_owned(), "letter".to_owned()]]);
        assert!(query.pairs.contains(&("letter".to_owned(), "stream".to_owned())));
        assert!(query.terms.contains(&"trimmed".to_owned()) && !query.terms.contains(&"the".to_owned()));
        assert!(contains_run(&words("a dead_letter stream"), &query.phrases[0]));
    }
}
