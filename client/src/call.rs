//! `conveyor call TOOL`: run one tool through the endpoint as a person would. A tool that answers
//! at once prints its result; a tool that runs as a task shows a live bar until it settles; a
//! tool that asks a question is asked in the terminal (synchronously by multi-round-trip
//! requests, or as a task in `input_required` answered with `tasks/update`); Ctrl-C cancels the
//! task and waits until it says `cancelled`.

use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResponse};
use serde_json::Value;

use crate::arguments;
use crate::display::{self, Display};
use crate::exit::{ClientError, Exit};
use crate::follow::{self, Ending, OnInterrupt};
use crate::session::{Endpoint, Session, connect, request_error};

/// Rounds of questions a synchronous call may ask before the client gives up.
const MAX_ROUNDS: usize = 16;

/// What to call and how to show it.
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    pub tool: String,
    /// `key=value` pairs.
    pub args: Vec<String>,
    /// A JSON object of arguments.
    pub json_args: Option<String>,
    /// Print the result as JSON (the whole CallToolResult).
    pub json_output: bool,
    /// Poll at least this often, whatever the server suggests (milliseconds).
    pub poll_ms: Option<u64>,
}

pub async fn call(endpoint: &Endpoint, options: &CallOptions) -> Result<Exit, ClientError> {
    let session = connect(endpoint).await?;
    let outcome = run(&session, options).await;
    let _ = session.cancel().await;
    outcome
}

async fn run(session: &Session, options: &CallOptions) -> Result<Exit, ClientError> {
    let tools = session.list_all_tools().await.map_err(|e| request_error("tools/list", e))?;
    let Some(tool) = tools.iter().find(|t| t.name == options.tool) else {
        let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        names.sort_unstable();
        return Err(ClientError::usage(format!(
            "no tool `{}` at this endpoint; it offers: {}",
            options.tool,
            if names.is_empty() { "nothing (are its workers running?)".to_owned() } else { names.join(", ") }
        )));
    };
    let schema = Value::Object((*tool.input_schema).clone());
    let arguments = arguments::build(&schema, options.json_args.as_deref(), &options.args)?;
    let mut params = CallToolRequestParams::new(options.tool.clone()).with_arguments(arguments);
    let quiet = Display::with_terminal(&options.tool, false);
    for _ in 0..MAX_ROUNDS {
        let response =
            session.call_tool_once(params.clone()).await.map_err(|e| request_error("tools/call", e))?;
        match response {
            CallToolResponse::Complete(result) => {
                let result = serde_json::to_value(&result).unwrap_or_default();
                return Ok(finish_result(&result, options.json_output));
            }
            CallToolResponse::InputRequired(asked) => {
                let requests = asked.input_requests.unwrap_or_default();
                let Some(responses) = follow::answer(requests, &quiet).await? else {
                    eprintln!("conveyor: interrupted; the call was not completed");
                    return Ok(Exit::Interrupted);
                };
                params.input_responses = Some(responses);
                params.request_state = asked.request_state;
            }
            CallToolResponse::Task(created) => {
                let task = created.task;
                let mut interval = Duration::from_millis(task.poll_interval_ms.unwrap_or(1000).max(50));
                if let Some(ms) = options.poll_ms {
                    interval = interval.min(Duration::from_millis(ms.max(50)));
                }
                let mut display = Display::new(&options.tool);
                display.note(&format!("task {} started ({})", task.task_id, options.tool));
                let ending =
                    follow::follow(session, &task.task_id, interval, &mut display, OnInterrupt::Cancel).await;
                display.finish();
                return Ok(report(&task.task_id, ending?, options.json_output));
            }
            _ => {
                return Err(ClientError::failed(
                    "tools/call: the server answered with something this client does not know",
                ));
            }
        }
    }
    Err(ClientError::failed(format!("tools/call: the tool asked more than {MAX_ROUNDS} rounds of questions")))
}

/// Prints a tool's result; a tool error is exit code 1.
fn finish_result(result: &Value, json: bool) -> Exit {
    display::print_result(result, json);
    if result.get("isError") == Some(&Value::Bool(true)) {
        eprintln!("conveyor: the tool reported an error");
        Exit::ToolError
    } else {
        Exit::Completed
    }
}

/// Prints how a followed task ended and returns the exit code that says so.
pub fn report(task_id: &str, ending: Ending, json: bool) -> Exit {
    match ending {
        Ending::Completed(result) => finish_result(&result, json),
        Ending::Failed(error) => {
            let message = error.get("message").and_then(Value::as_str).unwrap_or("no message");
            let code = error.get("code").map(Value::to_string).unwrap_or_default();
            if json {
                println!("{}", serde_json::json!({"error": error}));
            }
            eprintln!("conveyor: task {task_id} failed: {message} [{code}]");
            Exit::Failed
        }
        Ending::Cancelled { interrupted: true } => {
            eprintln!("conveyor: task {task_id} cancelled");
            Exit::Interrupted
        }
        Ending::Cancelled { interrupted: false } => {
            eprintln!("conveyor: task {task_id} was cancelled (not by this client)");
            Exit::Cancelled
        }
        Ending::GaveUp => {
            eprintln!(
                "conveyor: stopped waiting for task {task_id}; it was asked to cancel (`conveyor tasks show {task_id}` tells how it ends)"
            );
            Exit::Interrupted
        }
        Ending::StoppedWatching => {
            eprintln!(
                "conveyor: stopped watching; task {task_id} goes on (`conveyor tasks watch {task_id}`)"
            );
            Exit::Interrupted
        }
        Ending::Gone => {
            eprintln!("conveyor: task {task_id} is gone: it expired after its TTL, or is not yours");
            Exit::Cancelled
        }
    }
}
