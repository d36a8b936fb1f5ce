//! Validation of architecture decision records (ADRs) as teams write them: Michael Nygard's
//! format (as adr-tools writes it), MADR 2 to 4 (with or without front matter), and records that
//! keep their metadata in bold inline fields.
//!
//! Both halves are pure and deterministic, so that a tool can run them on any worker and hand the
//! parsed records from one graph node to the next as JSON:
//!
//! - [`parse`]: one record's Markdown text into an [`parse::AdrDoc`] (number, title, status,
//!   date, sections, links, relations to other records), without touching the filesystem.
//! - [`rules`]: the checks on one record, the checks across a set of records, and the report
//!   (JSON, its schema, and a text summary).
//! - [`tool`]: `validate_adrs`, one node per batch of files, then a cross-check node, then (when
//!   asked and the client samples) a review of each record by the client's model.

pub mod parse;
pub mod rules;
pub mod tool;
