//! What a person sees while a task runs, and its result. On a terminal (stderr is a TTY): a live
//! progress bar with the status message, and under it one line per running node of a graph.
//! Anywhere else (a pipe, a log, CI): plain lines, one per change, without colours. Progress and
//! notes go to stderr; the result goes to stdout, so `conveyor call … > out.txt` keeps only it.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::Duration;

use console::style;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::Value;

/// A task's state as the `conveyor://tasks/{id}` resource reports it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskState {
    pub task_id: String,
    pub tool: String,
    pub status: String,
    pub message: Option<String>,
    pub progress: Option<f64>,
    pub total: Option<f64>,
    pub nodes: Vec<NodeState>,
}

/// One node of a task's graph.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeState {
    pub id: String,
    pub tool: String,
    pub status: String,
    pub attempt: u64,
    pub started_at_ms: Option<u64>,
    pub finished_at_ms: Option<u64>,
}

impl TaskState {
    pub fn from_json(value: &Value) -> Self {
        let text = |k: &str| value.get(k).and_then(Value::as_str).map(str::to_owned);
        let nodes = value
            .get("nodes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|n| NodeState {
                id: n.get("nodeId").and_then(Value::as_str).unwrap_or_default().to_owned(),
                tool: n.get("tool").and_then(Value::as_str).unwrap_or_default().to_owned(),
                status: n.get("status").and_then(Value::as_str).unwrap_or_default().to_owned(),
                attempt: n.get("attempt").and_then(Value::as_u64).unwrap_or(0),
                started_at_ms: n.get("startedAtMs").and_then(Value::as_u64),
                finished_at_ms: n.get("finishedAtMs").and_then(Value::as_u64),
            })
            .collect();
        TaskState {
            task_id: text("taskId").unwrap_or_default(),
            tool: text("tool").unwrap_or_default(),
            status: text("status").unwrap_or_default(),
            message: text("statusMessage"),
            progress: value.get("progress").and_then(Value::as_f64),
            total: value.get("total").and_then(Value::as_f64),
            nodes,
        }
    }

    /// A graph of more than one node (a single call is one node named after its tool).
    pub fn is_graph(&self) -> bool {
        self.nodes.len() > 1
    }

    fn nodes_done(&self) -> usize {
        self.nodes.iter().filter(|n| is_settled(&n.status)).count()
    }
}

fn is_settled(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "cancelled" | "skipped")
}

/// A status word, coloured on a terminal.
pub fn status_word(status: &str) -> String {
    let styled = match status {
        "completed" => style(status).green(),
        "failed" => style(status).red(),
        "cancelled" => style(status).yellow(),
        "input_required" => style(status).magenta(),
        _ => style(status).cyan(),
    };
    styled.for_stderr().to_string()
}

/// A duration in milliseconds, for a person.
pub fn duration(ms: u64) -> String {
    if ms < 1000 { format!("{ms} ms") } else { format!("{:.1} s", ms as f64 / 1000.0) }
}

enum Mode {
    Terminal { bars: MultiProgress, main: ProgressBar, nodes: HashMap<String, ProgressBar> },
    Plain { last: Option<TaskState>, last_line: String },
}

/// The live view of one task.
pub struct Display {
    mode: Mode,
}

impl Display {
    /// A bar on a terminal, plain lines elsewhere.
    pub fn new(label: &str) -> Self {
        Self::with_terminal(label, std::io::stderr().is_terminal())
    }

    pub fn with_terminal(label: &str, terminal: bool) -> Self {
        if !terminal {
            return Display { mode: Mode::Plain { last: None, last_line: String::new() } };
        }
        let bars = MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(10));
        let main = bars.add(ProgressBar::new(1000));
        main.set_style(bar_style());
        main.set_prefix(label.to_owned());
        main.enable_steady_tick(Duration::from_millis(120));
        Display { mode: Mode::Terminal { bars, main, nodes: HashMap::new() } }
    }

    /// Shows `state`.
    pub fn update(&mut self, state: &TaskState) {
        match &mut self.mode {
            Mode::Terminal { bars, main, nodes } => {
                let fraction = match (state.progress, state.total) {
                    (Some(p), Some(t)) if t > 0.0 => Some((p / t).clamp(0.0, 1.0)),
                    _ if state.is_graph() => Some(state.nodes_done() as f64 / state.nodes.len() as f64),
                    _ => None,
                };
                match fraction {
                    // A task that stopped keeps the bar where it stopped.
                    Some(_) if matches!(state.status.as_str(), "cancelled" | "failed") => {}
                    Some(f) => {
                        main.set_style(bar_style());
                        main.set_position((f * 1000.0).round() as u64);
                    }
                    None => main.set_style(spinner_style()),
                }
                let mut message = status_word(&state.status);
                if state.is_graph() {
                    message.push_str(&format!(" · {} of {} nodes", state.nodes_done(), state.nodes.len()));
                }
                if let Some(text) = &state.message {
                    message.push_str(" · ");
                    message.push_str(text);
                }
                main.set_message(message);
                if state.is_graph() {
                    let now = conveyor_now_ms();
                    let running: Vec<&NodeState> =
                        state.nodes.iter().filter(|n| n.status == "running").collect();
                    nodes.retain(|id, bar| {
                        let keep = running.iter().any(|n| &n.id == id);
                        if !keep {
                            bar.finish_and_clear();
                            bars.remove(bar);
                        }
                        keep
                    });
                    for node in running {
                        let bar = nodes.entry(node.id.clone()).or_insert_with(|| {
                            let bar = bars.add(ProgressBar::new_spinner());
                            bar.set_style(node_style());
                            bar.enable_steady_tick(Duration::from_millis(120));
                            bar
                        });
                        let elapsed =
                            node.started_at_ms.map(|s| duration(now.saturating_sub(s))).unwrap_or_default();
                        let attempt = if node.attempt > 1 {
                            format!(", attempt {}", node.attempt)
                        } else {
                            String::new()
                        };
                        bar.set_message(format!("{} ({}{attempt}) {elapsed}", node.id, node.tool));
                    }
                }
            }
            Mode::Plain { last, last_line } => {
                let percent = match (state.progress, state.total) {
                    (Some(p), Some(t)) if t > 0.0 => {
                        Some(format!("{:.0}%", (p / t * 100.0).clamp(0.0, 100.0)))
                    }
                    _ => None,
                };
                let mut line = format!("{} {}", state.task_id, state.status);
                if let Some(percent) = percent {
                    line.push(' ');
                    line.push_str(&percent);
                }
                if state.is_graph() {
                    line.push_str(&format!(" {}/{} nodes", state.nodes_done(), state.nodes.len()));
                }
                if let Some(message) = &state.message {
                    line.push(' ');
                    line.push_str(message);
                }
                if state.is_graph() {
                    let before = last.as_ref().map(|l| l.nodes.clone()).unwrap_or_default();
                    for node in &state.nodes {
                        let was = before.iter().find(|b| b.id == node.id).map(|b| b.status.as_str());
                        if was != Some(node.status.as_str())
                            && node.status != "pending"
                            && node.status != "waiting"
                        {
                            eprintln!("  node {} {} (attempt {})", node.id, node.status, node.attempt);
                        }
                    }
                }
                if line != *last_line {
                    eprintln!("{line}");
                    *last_line = line;
                }
                *last = Some(state.clone());
            }
        }
    }

    /// Prints a line above the bars (or as it is).
    pub fn note(&self, line: &str) {
        match &self.mode {
            Mode::Terminal { bars, .. } => {
                let _ = bars.println(line);
            }
            Mode::Plain { .. } => eprintln!("{line}"),
        }
    }

    /// Runs `f` with the bars off the screen: a question is asked there.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.mode {
            Mode::Terminal { bars, .. } => bars.suspend(f),
            Mode::Plain { .. } => f(),
        }
    }

    /// Hides the bars while a question is asked in the terminal (the answer is read on another
    /// thread, so [`Display::suspend`] cannot hold them off the screen); [`Display::resume`]
    /// brings them back.
    pub fn pause(&self) {
        if let Mode::Terminal { bars, .. } = &self.mode {
            let _ = bars.clear();
            bars.set_draw_target(ProgressDrawTarget::hidden());
        }
    }

    pub fn resume(&self) {
        if let Mode::Terminal { bars, .. } = &self.mode {
            bars.set_draw_target(ProgressDrawTarget::stderr_with_hz(10));
        }
    }

    /// Leaves the last state on screen and stops drawing.
    pub fn finish(&mut self) {
        if let Mode::Terminal { bars, main, nodes } = &mut self.mode {
            for (_, bar) in nodes.drain() {
                bar.finish_and_clear();
                bars.remove(&bar);
            }
            main.disable_steady_tick();
            main.finish();
        }
    }
}

fn bar_style() -> ProgressStyle {
    ProgressStyle::with_template(
        "{spinner:.cyan} {prefix:.bold} [{bar:32.cyan/blue}] {percent:>3}% {wide_msg}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ")
}

fn spinner_style() -> ProgressStyle {
    ProgressStyle::with_template("{spinner:.cyan} {prefix:.bold} {wide_msg}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
}

fn node_style() -> ProgressStyle {
    ProgressStyle::with_template("    {spinner:.blue} {wide_msg}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
}

fn conveyor_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Prints a `CallToolResult` to stdout: its text (and a line for each other kind of content), or
/// the whole result as JSON with `json`.
pub fn print_result(result: &Value, json: bool) {
    if json {
        println!("{}", serde_json::to_string_pretty(result).unwrap_or_else(|_| result.to_string()));
        return;
    }
    let content = result.get("content").and_then(Value::as_array).cloned().unwrap_or_default();
    for item in &content {
        match item.get("type").and_then(Value::as_str) {
            Some("text") => println!("{}", item.get("text").and_then(Value::as_str).unwrap_or_default()),
            Some("resource") => {
                let resource = item.get("resource").cloned().unwrap_or_default();
                let uri = resource.get("uri").and_then(Value::as_str).unwrap_or("?");
                match resource.get("text").and_then(Value::as_str) {
                    Some(text) => println!("--- {uri} ---\n{text}"),
                    None => println!("[resource {uri}]"),
                }
            }
            Some("resource_link") => {
                println!("[link {}]", item.get("uri").and_then(Value::as_str).unwrap_or("?"));
            }
            Some(kind @ ("image" | "audio")) => {
                let mime = item.get("mimeType").and_then(Value::as_str).unwrap_or("?");
                let bytes = item.get("data").and_then(Value::as_str).map_or(0, |d| d.len() * 3 / 4);
                println!("[{kind} {mime}, about {bytes} bytes; --json shows it]");
            }
            _ => println!("{item}"),
        }
    }
    if content.is_empty()
        && let Some(structured) = result.get("structuredContent")
    {
        println!("{}", serde_json::to_string_pretty(structured).unwrap_or_default());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_task_state_reads_the_resource_shape() {
        let state = TaskState::from_json(&json!({
            "taskId": "t1", "tool": "plan_fanout", "status": "working", "statusMessage": "2 of 3",
            "progress": 2, "total": 3,
            "nodes": [
                {"nodeId": "a", "tool": "slow_compute", "status": "completed", "attempt": 1},
                {"nodeId": "b", "tool": "slow_compute", "status": "running", "attempt": 2, "startedAtMs": 5},
                {"nodeId": "join", "tool": "collect", "status": "pending", "attempt": 0}
            ]
        }));
        assert!(state.is_graph());
        assert_eq!(state.nodes_done(), 1);
        assert_eq!(state.nodes[1].attempt, 2);
        assert_eq!(state.progress, Some(2.0));
        assert_eq!(duration(1500), "1.5 s");
        assert_eq!(duration(20), "20 ms");
    }
}
