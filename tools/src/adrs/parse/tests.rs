use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

use super::metadata::title_number;
use super::*;
use crate::adrs::rules;

pub(in crate::adrs) fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/adrs")
}

/// Every record of the fixture set, parsed, by path.
pub(in crate::adrs) fn fixture_docs() -> Vec<AdrDoc> {
    let dir = fixture_dir();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("the fixture directory is part of the repository")
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| is_adr_path(name))
        .collect();
    names.sort();
    names
        .iter()
        .map(|name| {
            let text = std::fs::read_to_string(dir.join(name)).expect("fixture files are UTF-8");
            parse_adr(name, &text)
        })
        .collect()
}

pub(in crate::adrs) fn fixture_expected() -> Value {
    let text = std::fs::read_to_string(fixture_dir().join("expected.json"))
        .expect("expected.json is part of the fixture set");
    serde_json::from_str(&text).expect("expected.json is JSON")
}

fn kinds(doc: &AdrDoc) -> Vec<(RelationKind, Option<u32>, u32)> {
    doc.relations.iter().map(|r| (r.kind, r.number, r.line)).collect()
}

#[test]
fn fixture_records_parse_to_the_expected_metadata() {
    let expected = fixture_expected();
    let files = expected["files"].as_object().expect("files is an object");
    let docs = fixture_docs();
    let paths: Vec<&str> = docs.iter().map(|d| d.path.as_str()).collect();
    let listed: Vec<&str> = files.keys().map(String::as_str).collect();
    assert_eq!(paths, listed, "records found versus records listed");
    for doc in &docs {
        let want = &files[&doc.path];
        assert_eq!(doc.number.map(u64::from), want["number"].as_u64(), "{}", doc.path);
        assert_eq!(doc.format.as_str(), want["format"], "{}", doc.path);
        assert_eq!(doc.title.as_deref(), want["title"].as_str(), "{}", doc.path);
        assert_eq!(doc.status.as_deref(), want["status"].as_str(), "{}", doc.path);
        assert_eq!(doc.date.as_deref(), want["date"].as_str(), "{}", doc.path);
    }
    let skipped: Vec<&str> =
        expected["skipped"].as_array().expect("skipped is a list").iter().filter_map(Value::as_str).collect();
    for name in skipped {
        assert!(fixture_dir().join(name).exists(), "{name} is in the fixture set");
        assert!(!is_adr_path(name), "{name} is not a record");
    }
}

#[test]
fn the_document_survives_a_json_round_trip() {
    for doc in fixture_docs() {
        let json = serde_json::to_value(&doc).expect("an AdrDoc serialises");
        assert!(json.get("numberLine").is_some() && json.get("statusLine").is_some());
        let back: AdrDoc = serde_json::from_value(json).expect("and deserialises");
        assert_eq!(back, doc);
    }
    let doc = parse_adr("0002-x.md", "# 2. X\n\n## Status\n\nSuperseded by ADR-3\n");
    let json = serde_json::to_value(&doc).expect("an AdrDoc serialises");
    assert_eq!(json["format"], "nygard");
    assert_eq!(json["relations"][0]["kind"], "supersededBy");
}

#[test]
fn nygard_as_adr_tools_writes_it() {
    let text = "# 2. Use Redis\n\nDate: 2018-03-12\n\n## Status\n\nAccepted\n\nSupersedes [1. Record architecture decisions](0001-record-architecture-decisions.md)\n\nAmended by [3. Tune Redis](0003-tune-redis.md#status)\n\n## Context\n\nText.\n\n## Decision\n\nText.\n\n## Consequences\n\nText.\n";
    let doc = parse_adr("doc/adr/0002-use-redis.md", text);
    assert_eq!(doc.format, Format::Nygard);
    assert_eq!((doc.number, doc.number_line), (Some(2), None));
    assert_eq!((doc.title.as_deref(), doc.title_line), (Some("Use Redis"), Some(1)));
    assert_eq!((doc.date.as_deref(), doc.date_line), (Some("2018-03-12"), Some(3)));
    assert_eq!((doc.status.as_deref(), doc.status_line), (Some("Accepted"), Some(7)));
    assert_eq!(
        kinds(&doc),
        vec![(RelationKind::Supersedes, Some(1), 9), (RelationKind::AmendedBy, Some(3), 11)]
    );
    assert_eq!(doc.relations[1].target.as_deref(), Some("0003-tune-redis.md#status"));
    let titles: Vec<(&str, u8, u32)> =
        doc.sections.iter().map(|s| (s.title.as_str(), s.level, s.line)).collect();
    assert_eq!(
        titles,
        vec![
            ("2. Use Redis", 1, 1),
            ("Status", 2, 5),
            ("Context", 2, 13),
            ("Decision", 2, 17),
            ("Consequences", 2, 21)
        ]
    );
    assert!(doc.sections.iter().all(|s| !s.empty));
    assert_eq!(doc.links.len(), 2);
    assert_eq!(doc.links[0].text, "1. Record architecture decisions");
    assert_eq!(doc.links[0].line, 9);
}

#[test]
fn a_superseded_status_paragraph_is_the_status_and_a_relation() {
    let text = "# 1. Old\n\nDate: 2018-03-12\n\n## Status\n\nSuperseded by [2. New](0002-new.md)\n\n## Context\n\nx\n";
    let doc = parse_adr("0001-old.md", text);
    assert_eq!(doc.status.as_deref(), Some("Superseded by [2. New](0002-new.md)"));
    assert_eq!(kinds(&doc), vec![(RelationKind::SupersededBy, Some(2), 7)]);
}

#[test]
fn madr_4_with_front_matter() {
    let text = "---\nstatus: \"superseded by [ADR-0005](0005-example.md)\"\ndate: 2023-01-05 # last update\ndecision-makers: Ana\n---\n\n# Use MADR\n\n## Context and Problem Statement\n\nWhy?\n\n## Considered Options\n\n* MADR\n\n## Decision Outcome\n\nChosen option: MADR.\n";
    let doc = parse_adr("0003-use-madr.md", text);
    assert_eq!(doc.format, Format::Madr);
    assert_eq!(
        (doc.status.as_deref(), doc.status_line),
        (Some("superseded by [ADR-0005](0005-example.md)"), Some(2))
    );
    assert_eq!((doc.date.as_deref(), doc.date_line), (Some("2023-01-05"), Some(3)));
    assert_eq!((doc.title.as_deref(), doc.title_line), (Some("Use MADR"), Some(7)));
    assert_eq!(kinds(&doc), vec![(RelationKind::SupersededBy, Some(5), 2)]);
    assert_eq!(doc.sections[1].line, 9);
    // Front matter links are not Markdown links.
    assert!(doc.links.is_empty());
}

#[test]
fn madr_2_list_fields_under_the_title() {
    let text = "# Use JUnit5\n\n* Status: accepted\n- Deciders: Ana, Bo\n* Date: 2020-01-01\n\nTechnical Story: #12\n\n## Context and Problem Statement\n\nx\n";
    let doc = parse_adr("0004-use-junit5.md", text);
    assert_eq!(doc.format, Format::Madr);
    assert_eq!((doc.status.as_deref(), doc.status_line), (Some("accepted"), Some(3)));
    assert_eq!((doc.date.as_deref(), doc.date_line), (Some("2020-01-01"), Some(5)));
    assert_eq!(doc.title.as_deref(), Some("Use JUnit5"));
}

#[test]
fn bold_inline_fields_with_the_colon_inside_or_outside() {
    let text = "# ADR-007: Use Postgres\n\n**Status**: Accepted\n**Date:** 2024-02-01  \n\n## Context\n\nx\n";
    let doc = parse_adr("decisions/use-postgres.md", text);
    assert_eq!((doc.number, doc.number_line), (Some(7), Some(1)));
    assert_eq!(doc.title.as_deref(), Some("Use Postgres"));
    assert_eq!((doc.status.as_deref(), doc.status_line), (Some("Accepted"), Some(3)));
    assert_eq!((doc.date.as_deref(), doc.date_line), (Some("2024-02-01"), Some(4)));
    assert_eq!(doc.format, Format::Nygard);
    let doc = parse_adr("x.md", "# T\n\n__Status:__ *Proposed*\n\n## Context\n\nx\n");
    assert_eq!(doc.status.as_deref(), Some("*Proposed*"));
}

#[test]
fn fields_below_the_preamble_are_prose() {
    let text = "# 1. T\n\n## Context\n\nStatus: this is prose, not a field.\n";
    let doc = parse_adr("0001-t.md", text);
    assert_eq!(doc.status, None);
}

#[test]
fn front_matter_wins_over_fields_and_sections() {
    let text = "---\nstatus: accepted\n---\n# T\n\nStatus: proposed\n\n## Status\n\nRejected\n";
    assert_eq!(parse_adr("1-t.md", text).status.as_deref(), Some("accepted"));
    let text = "# T\n\nStatus: proposed\n\n## Status\n\nRejected\n";
    assert_eq!(parse_adr("1-t.md", text).status.as_deref(), Some("proposed"));
}

#[test]
fn unclosed_front_matter_is_a_thematic_break() {
    let doc = parse_adr("1-t.md", "---\nstatus: accepted\n\n# T\n");
    // Front matter would make it MADR; the line still reads as a field before the title.
    assert_eq!(doc.format, Format::Unknown);
    assert_eq!((doc.status.as_deref(), doc.status_line), (Some("accepted"), Some(2)));
}

#[test]
fn numbers_from_file_names() {
    for (name, number) in [
        ("0001-foo.md", Some(1)),
        ("doc/adr/ADR-001-foo.md", Some(1)),
        ("adr_12_foo.md", Some(12)),
        ("12-foo.md", Some(12)),
        ("adr-0042.md", Some(42)),
        ("0007.md", Some(7)),
        ("ADR0009-x.md", Some(9)),
        ("2024-01-05-use-x.md", None),
        ("foo.md", None),
        ("adrian.md", None),
        ("12abc.md", None),
        ("99999999999-x.md", None),
    ] {
        assert_eq!(number_from_file_name(name), number, "{name}");
    }
}

#[test]
fn numbers_from_titles() {
    for (title, want) in [
        ("1. Record architecture decisions", Some((1, "Record architecture decisions"))),
        ("ADR-007: Use Postgres", Some((7, "Use Postgres"))),
        ("ADR 7 - Use Postgres", Some((7, "Use Postgres"))),
        ("adr-0012 Use Postgres", Some((12, "Use Postgres"))),
        ("12: Use Postgres", Some((12, "Use Postgres"))),
        ("3 — Use Postgres", Some((3, "Use Postgres"))),
        ("2024 roadmap", None),
        ("1.5 release", None),
        ("Use Postgres", None),
        ("ADRs for everyone", None),
    ] {
        assert_eq!(title_number(title), want, "{title}");
    }
    let doc = parse_adr("use-x.md", "---\nnumber: 21\n---\n# Use X\n");
    assert_eq!((doc.number, doc.number_line), (Some(21), Some(2)));
    // The file name wins over the title.
    let doc = parse_adr("0003-x.md", "# 4. X\n");
    assert_eq!((doc.number, doc.number_line), (Some(3), None));
    assert_eq!(doc.title.as_deref(), Some("X"));
}

#[test]
fn formats() {
    let madr = parse_adr("1-a.md", "# A\n\n## Decision Outcome\n\nx\n");
    assert_eq!(madr.format, Format::Madr);
    let nygard = parse_adr("1-a.md", "# A\n\n## 1. Context\n\nx\n");
    assert_eq!(nygard.format, Format::Nygard);
    let front = parse_adr("1-a.md", "---\ndate: 2020-01-01\n---\n# A\n\nx\n");
    assert_eq!(front.format, Format::Madr);
    let nygard_with_front_matter =
        parse_adr("1-a.md", "---\nstatus: accepted\n---\n# A\n\n## Context\n\nx\n");
    assert_eq!(nygard_with_front_matter.format, Format::Nygard);
    let unknown = parse_adr("1-a.md", "# A\n\n## Background\n\nx\n");
    assert_eq!(unknown.format, Format::Unknown);
}

#[test]
fn section_keys_tolerate_numbering_case_and_ampersands() {
    assert_eq!(section_key("1. Context"), "context");
    assert_eq!(section_key("  CONTEXT  and problem   Statement:"), "context and problem statement");
    assert_eq!(section_key("Pros & Cons of the Options"), "pros and cons of the options");
    assert_eq!(section_key("2) Decision"), "decision");
}

#[test]
fn empty_sections() {
    let text = "# T\n\n## Context\n\n<!-- fill in -->\n\n## Decision\n\n### Detail\n\nx\n\n## Consequences\n\n   \n## Notes\n\n<details>open</details>\n\n## Options\n\n```\n```\n";
    let doc = parse_adr("1-t.md", text);
    let empty: Vec<(&str, bool)> = doc.sections.iter().map(|s| (s.title.as_str(), s.empty)).collect();
    assert_eq!(
        empty,
        vec![
            ("T", false),
            ("Context", true),
            ("Decision", false),
            ("Detail", false),
            ("Consequences", true),
            ("Notes", false),
            ("Options", false)
        ]
    );
    let multi_line_comment = "# T\n\n## Context\n\n<!--\nline one\nline two\n-->\n\n## Decision\n\nx\n";
    assert!(parse_adr("1-t.md", multi_line_comment).sections[1].empty);
    let setext = "T\n=\n\nContext\n-------\n\n## Decision\n\nx\n";
    let doc = parse_adr("1-t.md", setext);
    assert_eq!((doc.title.as_deref(), doc.title_line), (Some("T"), Some(1)));
    assert_eq!((doc.sections[1].line, doc.sections[1].empty), (4, true));
}

#[test]
fn links_keep_their_raw_targets_and_lines() {
    let text = "# T\n\nSee [a](b%20c.md#x), [ref][r], <https://example.com>, <me@example.com>\nand ![diagram](img/flow.png).\n\n[r]: ./other.md\n";
    let doc = parse_adr("1-t.md", text);
    let links: Vec<(&str, u32, &str)> =
        doc.links.iter().map(|l| (l.target.as_str(), l.line, l.text.as_str())).collect();
    assert_eq!(
        links,
        vec![
            ("b%20c.md#x", 3, "a"),
            ("./other.md", 3, "ref"),
            ("https://example.com", 3, "https://example.com"),
            ("mailto:me@example.com", 3, "me@example.com"),
            ("img/flow.png", 4, "diagram"),
        ]
    );
    assert_eq!(link_path("b%20c.md#x").as_deref(), Some("b c.md"));
    assert_eq!(link_path("x.md?plain=1").as_deref(), Some("x.md"));
    for not_relative in ["#anchor", "/root.md", "https://x.md", "mailto:a@b", "", "C:x"] {
        assert_eq!(link_path(not_relative), None, "{not_relative}");
    }
}

#[test]
fn mentions_and_relations_in_the_body() {
    let text = "# 5. T\n\n## Context\n\nLike ADR-12 and ADR 3, unlike ADR-0005 (this one).\nSee https://wiki/adr-44 and `ADR-45`.\n* **Supersedes** ADR-0003\n> Amends [the old one](0004-old.md)\n\n```\nADR-46\n```\n<!-- ADR-47 -->\n\nADR-3 was superseded by ADR-9.\n";
    let doc = parse_adr("0005-t.md", text);
    assert_eq!(
        kinds(&doc),
        vec![
            (RelationKind::Mentions, Some(12), 5),
            (RelationKind::Mentions, Some(3), 5),
            (RelationKind::Supersedes, Some(3), 7),
            (RelationKind::Amends, Some(4), 8),
            (RelationKind::Mentions, Some(3), 15),
            (RelationKind::Mentions, Some(9), 15),
        ]
    );
}

#[test]
fn a_relation_to_a_file_without_a_number_keeps_its_target() {
    let doc = parse_adr("0002-x.md", "# X\n\n## Status\n\nSuperseded by [the new way](new-way.md)\n");
    assert_eq!(doc.relations.len(), 1);
    assert_eq!(doc.relations[0].kind, RelationKind::SupersededBy);
    assert_eq!(doc.relations[0].number, None);
    assert_eq!(doc.relations[0].target.as_deref(), Some("new-way.md"));
    let doc = parse_adr("0002-x.md", "# X\n\nSee [the guide](guide.md).\n");
    assert!(doc.relations.is_empty(), "a plain link to a document is not a mention");
}

#[test]
fn skipped_files() {
    for name in [
        "README.md",
        "docs/adr/index.md",
        "template.md",
        "adr-template.md",
        "adr-template-minimal.md",
        "notes.txt",
    ] {
        assert!(!is_adr_path(name), "{name}");
    }
    for name in ["0001-x.md", "docs/adr/use-x.markdown", "0012-template-engine.md", "use-templates.md"] {
        assert!(is_adr_path(name), "{name}");
    }
}

#[test]
fn crlf_and_a_byte_order_mark() {
    let text =
        "\u{feff}---\r\nstatus: accepted\r\ndate: 2020-01-01\r\n---\r\n# 1. T\r\n\r\n## Context\r\n\r\nx\r\n";
    let doc = parse_adr("t.md", text);
    assert_eq!(doc.status.as_deref(), Some("accepted"));
    assert_eq!(doc.date.as_deref(), Some("2020-01-01"));
    assert_eq!((doc.number, doc.title_line), (Some(1), Some(5)));
    assert_eq!(doc.sections[1].line, 7);
}

#[test]
fn any_text_parses_without_panicking() {
    const PIECES: [&str; 36] = [
        "#",
        "# ",
        "## ",
        " ",
        "\n",
        "\r\n",
        "---\n",
        "[",
        "]",
        "(",
        ")",
        "!",
        "<",
        ">",
        "ADR-",
        "adr ",
        "1",
        "0",
        ":",
        "*",
        "**",
        "_",
        "`",
        "```\n",
        "<!--",
        "-->",
        "é",
        "中",
        "Status",
        "Date: ",
        "Supersedes ",
        "Superseded by ",
        "0002-x.md",
        "../",
        "|",
        "\t",
    ];
    // A fixed xorshift, so that a failure reproduces.
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut docs = Vec::new();
    for round in 0..2000 {
        let len = (next() % 120) as usize;
        let text: String = (0..len).map(|_| PIECES[(next() % PIECES.len() as u64) as usize]).collect();
        let doc = parse_adr(&format!("{round:04}-x.md"), &text);
        for section in &doc.sections {
            assert!(section.line >= 1 && section.line as usize <= text.lines().count() + 1, "{text:?}");
        }
        rules::file_findings(&doc, &|_| false);
        docs.push(doc);
    }
    let cross = rules::cross_check(&docs);
    rules::summary_text(&rules::report(&docs, &BTreeMap::new(), &cross));
    let brackets = "[".repeat(100_000) + &"](".repeat(1000);
    parse_adr("0001-x.md", &brackets);
}
