//! What a transition's reply says it did beyond its outcome: the task it settled (the task's tool
//! and final status) and the dead letter it wrote. Only the script knows; the process that ran it
//! counts it in its metrics, so that each transition is counted once, by whoever made it, and
//! writes the span of a task it settled (`telemetry::context`).

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::StoreError;
use crate::telemetry::context::TaskTrace;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Effects {
    /// The status the task settled with, when this transition settled it.
    #[serde(default)]
    settled: Option<String>,
    /// The task's tool, with `settled`.
    #[serde(default)]
    tool: Option<String>,
    /// The dead letter's entry id, when this transition wrote one.
    #[serde(default)]
    dead_letter: Option<String>,
    /// The tool of the dead-lettered node.
    #[serde(default)]
    node_tool: Option<String>,
    /// The settled task, and its stored trace context: the settler writes the task's span.
    #[serde(default)]
    task: Option<String>,
    #[serde(default)]
    trace: Option<String>,
}

/// Counts what a script's `reply` says it did, then decodes the reply's outcome.
pub(crate) fn recorded<T: DeserializeOwned>(reply: Value) -> Result<T, StoreError> {
    let effects = Effects::deserialize(&reply).unwrap_or_default();
    if let Some(status) = &effects.settled {
        let tool = effects.tool.as_deref().unwrap_or_default();
        crate::metrics::task_settled(tool, status);
        if let (Some(task), Some(trace)) =
            (&effects.task, effects.trace.as_deref().and_then(TaskTrace::decode))
        {
            trace.end_task_span(task, tool, status, None, std::time::SystemTime::now());
        }
    }
    if effects.dead_letter.is_some() {
        crate::metrics::dead_lettered(effects.node_tool.as_deref().unwrap_or_default());
    }
    T::deserialize(&reply).map_err(|e| StoreError::Corrupt(format!("script reply {reply}: {e}")))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(tag = "outcome", rename_all = "camelCase")]
    enum Reply {
        Settled,
        Released { count: u32 },
    }

    #[test]
    fn a_reply_decodes_whatever_effects_it_carries() {
        let settled = json!({"outcome": "settled", "settled": "completed", "tool": "effects_test_tool"});
        assert_eq!(recorded::<Reply>(settled).expect("decodes"), Reply::Settled);
        let released = json!({"outcome": "released", "count": 2, "deadLetter": "1-0", "nodeTool": "x"});
        assert_eq!(recorded::<Reply>(released).expect("decodes"), Reply::Released { count: 2 });
        assert!(recorded::<Reply>(json!({"outcome": "other"})).is_err(), "an unknown outcome is an error");
    }

    #[test]
    fn settled_tasks_and_dead_letters_are_counted_from_the_reply() {
        let text = || crate::metrics::render();
        let settled = r#"conveyor_tasks_settled_total{tool="effects_counted",status="failed"}"#;
        let dead = r#"conveyor_dead_letters_total{tool="effects_counted_node"}"#;
        let reply = json!({"outcome": "settled", "settled": "failed", "tool": "effects_counted",
            "deadLetter": "5-0", "nodeTool": "effects_counted_node"});
        recorded::<Reply>(reply).expect("decodes");
        assert!(text().contains(&format!("{settled} 1\n")), "{}", text());
        assert!(text().contains(&format!("{dead} 1\n")), "{}", text());
        recorded::<Reply>(json!({"outcome": "released", "count": 0})).expect("decodes");
        assert!(text().contains(&format!("{settled} 1\n")), "a reply without effects counts nothing");
    }
}
