//! Log lines: human-readable on a terminal, one JSON object per line for a log pipeline. Every
//! line written inside a span carries that span's `trace_id` and `span_id`, so that a line found
//! in the logs leads to its trace and back.
//!
//! A log line is one line whatever it quotes: values come from clients (a request id, a token's
//! header, a tool's name), and one holding a line break would otherwise start a line of its own
//! that reads like Conveyor's. The JSON format escapes them as JSON does; the human format writes
//! every control character (line breaks, carriage returns, escape sequences) and Unicode line or
//! paragraph separator as an escape (`\n`, `\r`, `\u{1b}`), so that nothing written there can
//! start a line, move the cursor or colour a terminal.

use std::str::FromStr;

use opentelemetry::trace::TraceContextExt;
use tracing::{Event, Subscriber};
use tracing_appender::non_blocking::{NonBlocking, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::Layer;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// How log lines look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// One readable line per event (coloured on a terminal).
    #[default]
    Human,
    /// One JSON object per line, the event's fields at the top level.
    Json,
}

impl FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "human" | "text" => Ok(Self::Human),
            "json" => Ok(Self::Json),
            other => Err(format!("unknown log format {other:?}: use `human` or `json`")),
        }
    }
}

/// The log layer for `format`, writing to standard error through `writer`: a thread of its own
/// writes the lines (a request that logs its audit line never waits on the write), and a caller
/// waits only when it has [`LINES_BUFFERED`] lines ahead of it, so that no line is dropped.
pub(super) fn layer<S>(format: LogFormat, writer: NonBlocking) -> Box<dyn Layer<S> + Send + Sync>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let base = tracing_subscriber::fmt::layer().with_writer(writer);
    match format {
        LogFormat::Human => base
            // Lines inside a span are formatted into a buffer to add the ids, which drops
            // colour; all lines stay plain so that they look alike.
            .with_ansi(false)
            .map_event_format(|inner| WithTraceIds { inner, json: false })
            .boxed(),
        LogFormat::Json => base
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .map_event_format(|inner| WithTraceIds { inner, json: true })
            .boxed(),
    }
}

/// Lines waiting for the writer thread before a logging caller waits for room.
pub(super) const LINES_BUFFERED: usize = 16_384;

/// The writer of standard error for [`layer`], and the guard that writes what is left when it
/// is dropped. Standard error is unbuffered: the writer thread gathers what is waiting into one
/// write, and flushes as soon as no line waits (a line a second is written at once; a busy
/// gateway's audit lines, one per call, went out in a system call each).
pub(super) fn stderr_writer() -> (NonBlocking, WorkerGuard) {
    NonBlockingBuilder::default()
        .lossy(false)
        .buffered_lines_limit(LINES_BUFFERED)
        .thread_name("conveyor-log")
        .finish(std::io::BufWriter::with_capacity(LOG_WRITE_BYTES, std::io::stderr()))
}

/// The most the writer thread gathers into one write of standard error.
const LOG_WRITE_BYTES: usize = 64 * 1024;

/// Wraps a line format and adds the ids of the span the event was written in.
struct WithTraceIds<F> {
    inner: F,
    json: bool,
}

impl<S, N, F> FormatEvent<S, N> for WithTraceIds<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let ids = ctx.lookup_current().and_then(|span| {
            let cx =
                tracing::dispatcher::get_default(|d| tracing_opentelemetry::get_otel_context(&span.id(), d))?;
            let sc = cx.span().span_context().clone();
            sc.is_valid().then(|| (sc.trace_id(), sc.span_id()))
        });
        if self.json && ids.is_none() {
            return self.inner.format_event(ctx, writer, event);
        }
        let mut line = String::new();
        self.inner.format_event(ctx, Writer::new(&mut line), event)?;
        let body = line.trim_end_matches('\n');
        match ids {
            Some((trace_id, span_id)) if self.json && body.ends_with('}') => {
                let open = &body[..body.len() - 1];
                writeln!(writer, "{open},\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\"}}")
            }
            // JSON escapes what it quotes already.
            _ if self.json => writeln!(writer, "{body}"),
            Some((trace_id, span_id)) => {
                writeln!(writer, "{} trace_id={trace_id} span_id={span_id}", one_line(body))
            }
            None => writeln!(writer, "{}", one_line(body)),
        }
    }
}

/// `text` with every character that could end a line or drive a terminal written as an escape.
fn one_line(text: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() || matches!(c, '\u{2028}' | '\u{2029}');
    if !text.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if unsafe_char(c) => out.push_str(&c.escape_unicode().to_string()),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Log lines as `format` writes them, for events logged inside `emit`.
    fn logged(format: LogFormat, emit: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Captured {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().expect("lock").extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let captured = Captured::default();
        let writer = captured.clone();
        let base = tracing_subscriber::fmt::layer().with_writer(move || writer.clone()).with_ansi(false);
        let layer: Box<dyn Layer<tracing_subscriber::Registry> + Send + Sync> = match format {
            LogFormat::Human => base.map_event_format(|inner| WithTraceIds { inner, json: false }).boxed(),
            LogFormat::Json => base
                .json()
                .flatten_event(true)
                .map_event_format(|inner| WithTraceIds { inner, json: true })
                .boxed(),
        };
        let subscriber =
            tracing_subscriber::layer::SubscriberExt::with(tracing_subscriber::Registry::default(), layer);
        tracing::subscriber::with_default(subscriber, emit);
        let bytes = captured.0.lock().expect("lock").clone();
        String::from_utf8(bytes).expect("utf-8")
    }

    #[test]
    fn a_value_with_a_line_break_or_an_escape_sequence_stays_on_its_line() {
        let forged =
            "x\n2026-01-01T00:00:00Z  INFO conveyor::audit: event=\"granted\" principal=root\r\u{1b}[2J";
        for format in [LogFormat::Human, LogFormat::Json] {
            let text = logged(format, || {
                tracing::info!(error = %forged, id = ?forged, "{forged} in the message too");
            });
            assert_eq!(text.lines().count(), 1, "one event, one line:\n{text}");
            assert!(!text.contains('\r') && !text.contains('\u{1b}'), "{text:?}");
            assert!(text.contains("principal=root"), "the text itself is kept, escaped: {text}");
        }
        let human = logged(LogFormat::Human, || tracing::warn!(id = %"a\u{2028}b\tc", "plain"));
        assert!(human.contains("a\\u{2028}b\\tc"), "{human}");
    }

    #[test]
    fn formats_are_named_and_bad_names_say_what_is_accepted() {
        assert_eq!("json".parse::<LogFormat>(), Ok(LogFormat::Json));
        assert_eq!("Human".parse::<LogFormat>(), Ok(LogFormat::Human));
        let refused = "yaml".parse::<LogFormat>().expect_err("yaml is not a format");
        assert!(refused.contains("`human` or `json`"), "{refused}");
    }
}
