//! Log lines: human-readable on a terminal, one JSON object per line for a log pipeline. Every
//! line written inside a span carries that span's `trace_id` and `span_id`, so that a line found
//! in the logs leads to its trace and back.

use std::str::FromStr;

use opentelemetry::trace::TraceContextExt;
use tracing::{Event, Subscriber};
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

/// The log layer for `format`, writing to standard error.
pub(super) fn layer<S>(format: LogFormat) -> Box<dyn Layer<S> + Send + Sync>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let base = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
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
        let Some((trace_id, span_id)) = ids else {
            return self.inner.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.inner.format_event(ctx, Writer::new(&mut line), event)?;
        let body = line.trim_end_matches('\n');
        if self.json && body.ends_with('}') {
            let open = &body[..body.len() - 1];
            writeln!(writer, "{open},\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\"}}")
        } else {
            writeln!(writer, "{body} trace_id={trace_id} span_id={span_id}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_named_and_bad_names_say_what_is_accepted() {
        assert_eq!("json".parse::<LogFormat>(), Ok(LogFormat::Json));
        assert_eq!("Human".parse::<LogFormat>(), Ok(LogFormat::Human));
        let refused = "yaml".parse::<LogFormat>().expect_err("yaml is not a format");
        assert!(refused.contains("`human` or `json`"), "{refused}");
    }
}
