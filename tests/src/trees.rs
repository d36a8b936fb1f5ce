//! Generated trees for the heavy tools' tests and benchmarks: a source tree of any size with a
//! few planted files, and a folder of ADRs in the three formats the validator reads.

use std::path::{Path, PathBuf};

/// Words filler files are made of: code and prose alike, so that every chunk has terms.
const WORDS: &[&str] = &[
    "request", "handler", "config", "value", "buffer", "stream", "parse", "render", "index", "cache",
    "session", "token", "worker", "queue", "retry", "timeout", "limit", "error", "result", "option",
    "builder", "layout", "vector", "matrix", "node", "graph", "edge", "weight", "signal", "channel",
    "socket", "header", "payload",
];

/// A deterministic generator, so that a tree is the same on every run.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn word(&mut self) -> &'static str {
        WORDS[(self.next() as usize) % WORDS.len()]
    }
}

/// The phrase planted files hold, which no filler file does.
pub const PLANTED_PHRASE: &str = "quantum flux capacitor calibration";

/// Writes `files` files under `dir` (folders of 100), each about 30 lines of filler; the files
/// named by `planted` (indexes) also hold [`PLANTED_PHRASE`]. Returns the planted files' paths,
/// relative to `dir`.
pub fn generate_tree(dir: &Path, files: usize, planted: &[usize]) -> std::io::Result<Vec<String>> {
    let mut rng = Lcg(42);
    let mut planted_paths = Vec::new();
    for i in 0..files {
        let extension = ["rs", "py", "md", "ts"][i % 4];
        let relative = format!("pkg{:03}/mod{:02}/file{i:06}.{extension}", i / 1000, (i / 100) % 10);
        let path = dir.join(&relative);
        if i % 100 == 0 {
            std::fs::create_dir_all(path.parent().unwrap_or(dir))?;
        }
        let mut text = String::with_capacity(1200);
        for line in 0..30 {
            if planted.contains(&i) && line == 12 {
                text.push_str(&format!("// The {PLANTED_PHRASE} happens here.\n"));
                planted_paths.push(relative.clone());
                continue;
            }
            let (a, b, c, d) = (rng.word(), rng.word(), rng.word(), rng.word());
            text.push_str(&format!("fn {a}_{b}(x: u32) -> u32 {{ {c}({d}, x + {line}) }}\n"));
        }
        std::fs::write(&path, text)?;
    }
    Ok(planted_paths)
}

/// Writes `count` ADRs into `dir` (Nygard, MADR with front matter, and bold fields in turn), all
/// valid except every 50th, which has an unknown status. Returns the folder.
pub fn generate_adrs(dir: &Path, count: usize) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let mut rng = Lcg(7);
    for n in 1..=count {
        let title = format!("{} the {} {}", rng.word(), rng.word(), rng.word());
        let slug = title.replace(' ', "-");
        let status = if n % 50 == 0 { "Pondering" } else { "Accepted" };
        let body = (0..8).map(|_| rng.word()).collect::<Vec<_>>().join(" ");
        let text = match n % 3 {
            0 => format!(
                "# {n}. {title}\n\nDate: 2024-01-{:02}\n\n## Status\n\n{status}\n\n## Context\n\n{body}.\n\n## Decision\n\nWe will {body}.\n\n## Consequences\n\n{body}.\n",
                1 + n % 28
            ),
            1 => format!(
                "---\nstatus: {}\ndate: 2024-02-{:02}\n---\n\n# {title}\n\n## Context and Problem Statement\n\n{body}?\n\n## Considered Options\n\n* {body}\n* nothing\n\n## Decision Outcome\n\nChosen option: \"{body}\", because it works.\n",
                status.to_lowercase(),
                1 + n % 28
            ),
            _ => format!(
                "# ADR-{n:04}: {title}\n\n**Status**: {status}\n**Date**: 2024-03-{:02}\n\n## Context\n\n{body}.\n\n## Decision\n\n{body}.\n\n## Consequences\n\n{body}.\n",
                1 + n % 28
            ),
        };
        std::fs::write(dir.join(format!("{n:04}-{slug}.md")), text)?;
    }
    Ok(dir.to_path_buf())
}
