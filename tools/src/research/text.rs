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

/// Calls `part` with the byte range of each part of one identifier: split at `_`, at a
/// lower-to-upper change, before the last capital of a run of capitals followed by a lower-case
/// letter (`HTTPServer` → `HTTP`, `Server`), and between letters and digits.
fn identifier_parts(word: &str, mut part: impl FnMut(&str)) {
    for piece in word.split('_').filter(|p| !p.is_empty()) {
        let mut start = 0;
        let mut chars = piece.char_indices().peekable();
        let mut prev: Option<char> = None;
        while let Some((i, here)) = chars.next() {
            if let Some(prev) = prev {
                let next_is_lower = chars.peek().is_some_and(|(_, c)| c.is_lowercase());
                let boundary = (prev.is_lowercase() && here.is_uppercase())
                    || (prev.is_uppercase() && here.is_uppercase() && next_is_lower)
                    || (prev.is_alphabetic() && here.is_numeric())
                    || (prev.is_numeric() && here.is_alphabetic());
                if boundary {
                    part(&piece[start..i]);
                    start = i;
                }
            }
            prev = Some(here);
        }
        part(&piece[start..]);
    }
}

/// `text` lowercased into `buffer` (reused, so that scanning a tree allocates almost nothing).
fn lowercase_into<'b>(text: &str, buffer: &'b mut String) -> &'b str {
    buffer.clear();
    if text.is_ascii() {
        buffer.push_str(text);
        buffer.make_ascii_lowercase();
    } else {
        buffer.extend(text.chars().flat_map(char::to_lowercase));
    }
    buffer.as_str()
}

/// The parts of one identifier, lowercased (see [`identifier_parts`]).
pub fn split_identifier(word: &str) -> Vec<String> {
    let mut parts = Vec::new();
    identifier_parts(word, |p| parts.push(p.to_lowercase()));
    parts
}

/// Calls `term` with each index term of `text`, lowercased, without allocating per term: every
/// part of an identifier that is not a stop word, and every compound identifier whole.
pub fn visit_terms(text: &str, buffer: &mut String, mut term: impl FnMut(&str)) {
    for identifier in identifiers(text) {
        let mut parts = 0;
        identifier_parts(identifier, |part| {
            parts += 1;
            let lower = lowercase_into(part, buffer);
            if !is_stopword(lower) {
                term(lower);
            }
        });
        if parts > 1 {
            term(lowercase_into(identifier, buffer));
        }
    }
}

/// Calls `word` with each word part of `text` in order, lowercased, without stop words: what
/// phrases match on.
pub fn visit_words(text: &str, buffer: &mut String, mut word: impl FnMut(&str)) {
    for identifier in identifiers(text) {
        identifier_parts(identifier, |part| {
            let lower = lowercase_into(part, buffer);
            if !is_stopword(lower) {
                word(lower);
            }
        });
    }
}

/// The sequence of word parts of `text` (see [`visit_words`]).
pub fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    visit_words(text, &mut String::new(), |w| out.push(w.to_owned()));
    out
}

/// The index terms of `text` (see [`visit_terms`]).
pub fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    visit_terms(text, &mut String::new(), |t| out.push(t.to_owned()));
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
        assert_eq!(terms("fn verify_signature(x)"), ["fn", "verify", "signature", "verify_signature", "x"]);
        assert_eq!(terms("HTTPServer ÉCOLE"), ["http", "server", "httpserver", "école"]);
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
