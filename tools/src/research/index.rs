//! Ranking chunks of files against a question with BM25 (Robertson and Zaragoza's Okapi BM25,
//! `k1 = 1.2`, `b = 0.75`), over a tree split into shards that run on different workers.
//!
//! A file is cut into chunks of [`CHUNK_LINES`] lines; a chunk's terms are its text's terms (see
//! [`super::text`]) plus its file path's, so that a question naming a module finds it. BM25 needs
//! corpus statistics (the number of chunks, their mean length, and each term's document
//! frequency), which no shard has alone. So a shard keeps, for every chunk that holds a query
//! term, only its length and term frequencies; it ranks them with its own statistics to choose
//! candidates, and sends the candidates with their raw counts and its statistics. The merge
//! sums the statistics of every shard and scores every candidate again with the corpus's, so
//! scores are comparable across shards and exact for what was sent.
//!
//! Memory per shard is bounded: one file's text at a time, and a small record per matching chunk,
//! capped at [`MAX_RECORDS`].

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::text::{self, Query};

/// Lines per chunk.
pub const CHUNK_LINES: usize = 20;
/// Larger files are skipped: they are data or generated, not something to cite.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// Matching chunks a shard keeps records of; past it, chunks that hold a single query term are
/// counted in the statistics but not kept.
pub const MAX_RECORDS: usize = 1_000_000;
/// Longest snippet, in characters.
const MAX_SNIPPET_CHARS: usize = 320;

const K1: f64 = 1.2;
const B: f64 = 0.75;
/// Score multiplier per adjacent pair of question words found in order in a chunk (at most 4).
const PAIR_BOOST: f64 = 0.25;
/// Score multiplier per quoted phrase of the question found in a chunk.
const PHRASE_BOOST: f64 = 1.0;
/// Evidence items from one file at most, so that one long file does not crowd out the rest.
pub const MAX_PER_FILE: usize = 3;

/// The statistics a shard contributes to the corpus's.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    pub files: u64,
    /// Files left out: too large, binary, or unreadable.
    pub skipped: u64,
    pub chunks: u64,
    /// Sum of the chunks' lengths in terms.
    pub terms: u64,
    /// Chunks holding each query term, aligned with `Query::terms`.
    pub document_frequency: Vec<u64>,
    /// Whether some matching chunks were not kept ([`MAX_RECORDS`]).
    #[serde(default)]
    pub truncated: bool,
}

impl Stats {
    fn add(&mut self, other: &Stats) {
        self.files += other.files;
        self.skipped += other.skipped;
        self.chunks += other.chunks;
        self.terms += other.terms;
        if self.document_frequency.len() < other.document_frequency.len() {
            self.document_frequency.resize(other.document_frequency.len(), 0);
        }
        for (sum, df) in self.document_frequency.iter_mut().zip(&other.document_frequency) {
            *sum += df;
        }
        self.truncated |= other.truncated;
    }
}

/// A chunk a shard proposes, with what scoring it again needs.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Candidate {
    pub path: String,
    /// The chunk's line that holds the most query terms (1-based).
    pub line: u32,
    pub snippet: String,
    pub length: u32,
    pub term_frequency: Vec<u32>,
    pub pairs: u32,
    pub phrases: u32,
}

/// What one shard found.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ShardScan {
    pub stats: Stats,
    pub candidates: Vec<Candidate>,
}

/// One piece of evidence of a ranked answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Evidence {
    pub path: String,
    pub line: u32,
    pub snippet: String,
    pub score: f64,
}

/// Which shard of `shards` a path (relative to its root) belongs to: FNV-1a of the path, so that
/// every worker agrees without sharing a listing.
pub fn shard_of(relative: &str, shards: u32) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in relative.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    u32::try_from(hash % u64::from(shards.max(1))).unwrap_or(0)
}

/// A matching chunk, before it is chosen.
struct Record {
    file: u32,
    line: u32,
    length: u32,
    term_frequency: Vec<u32>,
    pairs: u32,
    phrases: u32,
}

/// Scans `files` (relative path, absolute path) and keeps the `keep` best chunks by this shard's
/// statistics. `stop` is polled between files; `on_file` counts progress.
pub fn scan_shard(
    files: impl Iterator<Item = (String, PathBuf)>,
    query: &Query,
    keep: usize,
    stop: &dyn Fn() -> bool,
    on_file: &dyn Fn(),
) -> ShardScan {
    let positions: HashMap<&str, usize> =
        query.terms.iter().enumerate().map(|(i, t)| (t.as_str(), i)).collect();
    let mut stats = Stats { document_frequency: vec![0; query.terms.len()], ..Stats::default() };
    let mut paths: Vec<String> = Vec::new();
    let mut absolute: Vec<PathBuf> = Vec::new();
    let mut records: Vec<Record> = Vec::new();
    let mut buffer = String::new();
    for (relative, path) in files {
        if stop() {
            break;
        }
        on_file();
        let Some(content) = read_text(&path) else {
            stats.skipped += 1;
            continue;
        };
        stats.files += 1;
        let path_terms = text::terms(&relative);
        let file_index = u32::try_from(paths.len()).unwrap_or(u32::MAX);
        let mut kept_any = false;
        let lines: Vec<&str> = content.lines().collect();
        for (chunk_index, chunk) in lines.chunks(CHUNK_LINES).enumerate() {
            let mut term_frequency = vec![0u32; query.terms.len()];
            let mut length = path_terms.len() as u32;
            for term in &path_terms {
                if let Some(&i) = positions.get(term.as_str()) {
                    term_frequency[i] += 1;
                }
            }
            let (mut best_line, mut best_hits) = (0usize, 0usize);
            for (offset, line) in chunk.iter().enumerate() {
                let mut hits_on_line = 0;
                text::visit_terms(line, &mut buffer, |term| {
                    length += 1;
                    if let Some(&i) = positions.get(term) {
                        term_frequency[i] += 1;
                        hits_on_line += 1;
                    }
                });
                if hits_on_line > best_hits {
                    (best_line, best_hits) = (offset, hits_on_line);
                }
            }
            stats.chunks += 1;
            stats.terms += u64::from(length);
            let distinct = term_frequency.iter().filter(|&&tf| tf > 0).count();
            for (df, tf) in stats.document_frequency.iter_mut().zip(&term_frequency) {
                *df += u64::from(*tf > 0);
            }
            if distinct == 0 || best_hits == 0 {
                continue;
            }
            if records.len() >= MAX_RECORDS && distinct < 2 {
                stats.truncated = true;
                continue;
            }
            // Word order matters only where two query words meet: read the chunk again for it.
            let (mut pairs, mut phrases) = (0, 0);
            if distinct >= 2 && (!query.pairs.is_empty() || !query.phrases.is_empty()) {
                let mut chunk_words: Vec<String> = Vec::new();
                for line in chunk {
                    text::visit_words(line, &mut buffer, |w| chunk_words.push(w.to_owned()));
                }
                pairs = query
                    .pairs
                    .iter()
                    .filter(|(a, b)| chunk_words.windows(2).any(|w| &w[0] == a && &w[1] == b))
                    .count();
                phrases = query.phrases.iter().filter(|p| text::contains_run(&chunk_words, p)).count();
            }
            records.push(Record {
                file: file_index,
                line: u32::try_from(chunk_index * CHUNK_LINES + best_line + 1).unwrap_or(u32::MAX),
                length,
                term_frequency,
                pairs: pairs as u32,
                phrases: phrases as u32,
            });
            kept_any = true;
        }
        if kept_any {
            paths.push(relative);
            absolute.push(path);
        }
    }
    let scorer = Scorer::new(&stats);
    let mut scored: Vec<(f64, Record)> = records
        .into_iter()
        .map(|r| (scorer.score(r.length, &r.term_frequency, r.pairs, r.phrases), r))
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.file.cmp(&b.1.file)).then(a.1.line.cmp(&b.1.line)));
    scored.truncate(keep);
    let mut texts: BTreeMap<u32, Option<String>> = BTreeMap::new();
    let candidates = scored
        .into_iter()
        .map(|(_, record)| {
            let content =
                texts.entry(record.file).or_insert_with(|| read_text(&absolute[record.file as usize]));
            Candidate {
                path: paths[record.file as usize].clone(),
                line: record.line,
                snippet: content.as_deref().map(|c| snippet(c, record.line)).unwrap_or_default(),
                length: record.length,
                term_frequency: record.term_frequency,
                pairs: record.pairs,
                phrases: record.phrases,
            }
        })
        .collect();
    ShardScan { stats, candidates }
}

/// The corpus's statistics from every shard's, and every candidate scored with them, best first,
/// at most [`MAX_PER_FILE`] per file and `max_results` in all.
pub fn merge(scans: &[ShardScan], max_results: usize) -> (Stats, Vec<Evidence>) {
    let mut stats = Stats::default();
    for scan in scans {
        stats.add(&scan.stats);
    }
    let scorer = Scorer::new(&stats);
    let mut ranked: Vec<Evidence> = scans
        .iter()
        .flat_map(|s| &s.candidates)
        .map(|c| Evidence {
            path: c.path.clone(),
            line: c.line,
            snippet: c.snippet.clone(),
            score: scorer.score(c.length, &c.term_frequency, c.pairs, c.phrases),
        })
        .collect();
    ranked.sort_by(|a, b| {
        b.score.total_cmp(&a.score).then_with(|| a.path.cmp(&b.path)).then(a.line.cmp(&b.line))
    });
    let mut per_file: HashMap<String, usize> = HashMap::new();
    let evidence = ranked
        .into_iter()
        .filter(|e| {
            let n = per_file.entry(e.path.clone()).or_default();
            *n += 1;
            *n <= MAX_PER_FILE
        })
        .take(max_results)
        .map(|mut e| {
            e.score = (e.score * 1000.0).round() / 1000.0;
            e
        })
        .collect();
    (stats, evidence)
}

struct Scorer {
    idf: Vec<f64>,
    mean_length: f64,
}

impl Scorer {
    fn new(stats: &Stats) -> Self {
        let n = stats.chunks as f64;
        let idf = stats
            .document_frequency
            .iter()
            .map(|&df| {
                let df = df as f64;
                (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
            })
            .collect();
        Self { idf, mean_length: if stats.chunks == 0 { 1.0 } else { stats.terms as f64 / n } }
    }

    fn score(&self, length: u32, term_frequency: &[u32], pairs: u32, phrases: u32) -> f64 {
        let norm = K1 * (1.0 - B + B * f64::from(length) / self.mean_length.max(1.0));
        let bm25: f64 = term_frequency
            .iter()
            .zip(&self.idf)
            .map(|(&tf, idf)| {
                let tf = f64::from(tf);
                idf * tf * (K1 + 1.0) / (tf + norm)
            })
            .sum();
        bm25 * (1.0 + PAIR_BOOST * f64::from(pairs.min(4))) * (1.0 + PHRASE_BOOST * f64::from(phrases))
    }
}

/// A file's text, or `None` when it is too large, binary or unreadable.
pub fn read_text(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    if meta.len() > MAX_FILE_BYTES {
        return None;
    }
    let bytes = std::fs::read(path).ok()?;
    if bytes[..bytes.len().min(8192)].contains(&0) {
        return None;
    }
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// The cited line itself, out of a snippet made by [`snippet`] (which starts a line before it).
pub fn cited_line(snippet: &str, line: u32) -> &str {
    snippet.lines().nth(usize::from(line > 1)).unwrap_or_default().trim()
}

/// The line and its neighbours, trimmed to [`MAX_SNIPPET_CHARS`].
fn snippet(content: &str, line: u32) -> String {
    let index = line.saturating_sub(1) as usize;
    let lines: Vec<&str> = content.lines().collect();
    let from = index.saturating_sub(1);
    let to = (index + 2).min(lines.len());
    let joined =
        lines.get(from..to).unwrap_or_default().iter().map(|l| l.trim_end()).collect::<Vec<_>>().join("\n");
    if joined.chars().count() <= MAX_SNIPPET_CHARS {
        return joined;
    }
    let mut cut: String = joined.chars().take(MAX_SNIPPET_CHARS).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus(files: &[(&str, &str)]) -> (tempfile::TempDir, Vec<(String, PathBuf)>) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let listed = files
            .iter()
            .map(|(name, body)| {
                let path = dir.path().join(name);
                std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
                std::fs::write(&path, body).expect("write");
                ((*name).to_owned(), path)
            })
            .collect();
        (dir, listed)
    }

    fn rank(files: &[(String, PathBuf)], question: &str, shards: u32) -> Vec<Evidence> {
        let query = Query::parse(question);
        let scans: Vec<ShardScan> = (0..shards)
            .map(|s| {
                let mine = files.iter().filter(|(r, _)| shard_of(r, shards) == s).cloned();
                scan_shard(mine, &query, 50, &|| false, &|| {})
            })
            .collect();
        merge(&scans, 10).1
    }

    #[test]
    fn the_chunk_that_names_the_thing_ranks_first_however_the_tree_is_sharded() {
        let mut files: Vec<(String, String)> = (0..40)
            .map(|i| {
                (
                    format!("src/filler{i}.rs"),
                    format!("fn helper{i}() {{ let value = {i}; value + 1 }}\n// config loading\n"),
                )
            })
            .collect();
        files.push(("src/retry.rs".into(), "fn schedule() {}\n\n/// Exponential backoff with jitter before a retry.\nfn retry_backoff_ms(attempt: u32) -> u64 { 200 << attempt }\n".into()));
        let borrowed: Vec<(&str, &str)> = files.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        let (_dir, listed) = corpus(&borrowed);
        let one = rank(&listed, "how is the retry backoff computed", 1);
        let four = rank(&listed, "how is the retry backoff computed", 4);
        assert_eq!(one[0].path, "src/retry.rs");
        assert_eq!(one[0].line, 3, "the first line with the most query terms");
        assert_eq!(one, four, "global statistics make shards agree");
    }

    #[test]
    fn phrases_in_order_rank_above_the_same_words_apart() {
        let (_dir, listed) = corpus(&[
            ("a.md", "The letter was dead on arrival.\n"),
            ("b.md", "Failed nodes go to the dead letter stream.\n"),
            ("c.md", "unrelated text\n"),
        ]);
        let ranked = rank(&listed, "\"dead letter\"", 1);
        assert_eq!(ranked[0].path, "b.md");
        assert!(ranked[0].score > ranked[1].score);
    }

    #[test]
    fn binary_and_large_files_are_skipped_and_counted() {
        let (_dir, listed) = corpus(&[("bin.dat", "abc\0def"), ("ok.txt", "searchable words")]);
        let scan = scan_shard(listed.into_iter(), &Query::parse("searchable"), 5, &|| false, &|| {});
        assert_eq!((scan.stats.files, scan.stats.skipped), (1, 1));
        assert_eq!(scan.candidates.len(), 1);
    }

    #[test]
    fn one_file_gives_at_most_three_items() {
        let body = (0..10).map(|i| format!("needle {i}\n{}", "x\n".repeat(CHUNK_LINES))).collect::<String>();
        let (_dir, listed) = corpus(&[("long.txt", &body), ("short.txt", "needle")]);
        let ranked = rank(&listed, "needle", 1);
        assert_eq!(ranked.iter().filter(|e| e.path == "long.txt").count(), MAX_PER_FILE);
        assert!(ranked.iter().any(|e| e.path == "short.txt"));
    }
}
