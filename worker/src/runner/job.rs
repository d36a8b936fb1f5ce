//! The node job: one started attempt, from its span and the tool call to its completion, with
//! its timeout, its stop reasons and the persisting of its outcome.

use super::*;
use futures::FutureExt;

/// The span an attempt runs in. A process that exports spans makes the attempt's span of the
/// task's trace; one that does not makes a plain span under a target the trace layer leaves alone,
/// which only gives its log lines the attempt's ids (an OpenTelemetry span per call would cost
/// more than the call).
pub(super) fn node_span(
    attempt: &Attempt,
    tool: &str,
    worker: &str,
    losses: u32,
    resumed: bool,
) -> tracing::Span {
    if !conveyor_shared::telemetry::exporting() {
        return tracing::info_span!(
            target: "conveyor::node",
            "node",
            task = %attempt.task_id,
            node = %attempt.node_id,
            tool = %tool,
            attempt = attempt.try_number(),
        );
    }
    let reason = match (attempt.try_number(), resumed, losses) {
        (1, false, _) => "first",
        (_, true, _) => "resumed",
        (_, false, 0) => "retry",
        _ => "reclaimed",
    };
    let queue = attempt.stream.rsplit_once(":q:").map_or("", |(_, queue)| queue);
    let span = tracing::info_span!(
        "node",
        otel.name = %format!("node {tool}"),
        otel.kind = "consumer",
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
        { attr::TASK_ID } = %attempt.task_id,
        { attr::NODE_ID } = %attempt.node_id,
        { attr::TOOL } = %tool,
        { attr::ATTEMPT } = attempt.try_number(),
        { attr::QUEUE } = %queue,
        { attr::WORKER } = %worker,
        { attr::RUN_REASON } = reason,
        conveyor.node.losses = losses,
        { attr::OUTCOME } = tracing::field::Empty,
    );
    if let Some(trace) = attempt.traceparent.as_deref().and_then(TaskTrace::decode) {
        trace.adopt_node_span(&span, &attempt.node_id, attempt.try_number());
    }
    span
}

/// The W3C `traceparent` a tool hands on (to a child process, a remote call): its attempt's span,
/// whose id follows from the task's trace whether or not this process exports it.
fn w3c_traceparent(span: &tracing::Span, attempt: &Attempt) -> Option<String> {
    use opentelemetry::trace::TraceContextExt;
    if !conveyor_shared::telemetry::exporting() {
        let trace = attempt.traceparent.as_deref().and_then(TaskTrace::decode)?;
        let span_id = trace.node_span_id(&attempt.node_id, attempt.try_number());
        return Some(format!("00-{}-{}-{:02x}", trace.trace_id, span_id, u8::from(trace.sampled)));
    }
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    Some(format!("00-{}-{}-{:02x}", sc.trace_id(), sc.span_id(), sc.trace_flags().to_u8()))
}

/// One started attempt, from the tool call to its completion.
pub(super) struct NodeJob {
    /// The attempt's span, entered while it runs.
    pub(super) span: tracing::Span,
    /// Fires when the attempt must stop; `reason` says why. Its run is in the worker's registry
    /// from before the job is spawned until it ends.
    pub(super) token: CancellationToken,
    pub(super) reason: Arc<AtomicU8>,
    /// Counts the attempt as running until the job ends, and records how it ended.
    pub(super) metrics: NodeRun,
    pub(super) worker: Worker,
    /// The node as `start_nodes` handed it over: its attempt, arguments and the call record.
    pub(super) start: NodeStart,
}

impl NodeJob {
    pub(super) async fn run(self) {
        let span = self.span.clone();
        self.run_in_span().instrument(span).await
    }

    async fn run_in_span(self) {
        self.attempt_to_its_end().await;
        // Its entry was renewed until here, while its outcome was being recorded: an entry that
        // goes unrenewed for a lease is taken for abandoned.
        self.worker.running.remove(&self.start.attempt);
        self.worker.store.forget_adoption(&self.start.attempt);
    }

    async fn attempt_to_its_end(&self) {
        let store = &self.worker.store;
        let attempt = &self.start.attempt;
        let max_losses = self.worker.options.max_losses;
        if max_losses > 0 && self.start.losses >= max_losses {
            // This node took its worker down too often: it is not run again.
            tracing::warn!(task = %attempt.task_id, node = %attempt.node_id, losses = self.start.losses, "node lost its worker too often; failing it");
            let error = ToolOutcome::Error(RpcError {
                code: -32603,
                message: format!("the node lost its worker {} times; it is not run again", self.start.losses),
                data: None,
            });
            self.settle(Some(error), true).await;
            return;
        }
        let (token, reason) = (&self.token, &self.reason);
        // Arguments that cannot be resolved or that break the tool's schema fail the node for good:
        // another attempt would meet the same upstream values.
        let mut final_failure = false;
        let outcome = match self.arguments().await {
            Err(outcome) => {
                final_failure = true;
                outcome
            }
            Ok(arguments) => {
                let ctx = ToolContext {
                    task_id: attempt.task_id.clone(),
                    node_id: attempt.node_id.clone(),
                    attempt: attempt.try_number(),
                    arguments,
                    cancel: token.clone(),
                    traceparent: w3c_traceparent(&self.span, attempt),
                    store: store.clone(),
                    started: attempt.clone(),
                    answers: self.start.answers.clone(),
                    state: self.start.state.clone(),
                    call: self.start.call.clone(),
                };
                let call = self.call(ctx);
                tokio::pin!(call);
                match self.start.timeout {
                    None => call.await,
                    Some(limit) => tokio::select! {
                        outcome = &mut call => outcome,
                        () = tokio::time::sleep(limit) => {
                            // The tool is told to stop, and the slot stays held until it has (see
                            // `call`); the attempt counts as failed.
                            let _ = reason.compare_exchange(
                                0,
                                StopReason::Timeout as u8,
                                Ordering::SeqCst,
                                Ordering::SeqCst,
                            );
                            token.cancel();
                            let _ = call.await;
                            ToolOutcome::Error(RpcError {
                                code: -32001,
                                message: format!("timed out after {} ms", limit.as_millis()),
                                data: None,
                            })
                        }
                    },
                }
            }
        };
        // Told to stop before it returned: what it returned may be the stop's doing, not its work.
        let interrupted = token.is_cancelled();
        if self.worker.stop_running.is_cancelled() {
            let _ =
                reason.compare_exchange(0, StopReason::Shutdown as u8, Ordering::SeqCst, Ordering::SeqCst);
        }
        match reason_of(reason) {
            StopReason::Lost => {
                // Another worker runs the node now; this attempt's completion would be refused.
                self.finish(NodeOutcome::Lost, Some("another worker took the node over"));
                tracing::info!(task = %attempt.task_id, node = %attempt.node_id, "stopped a node another worker took over");
            }
            StopReason::Task => {
                tracing::info!(task = %attempt.task_id, node = %attempt.node_id, "node stopped: its task was cancelled");
                self.settle(None, false).await
            }
            // A node that finished before the stop reached it keeps its outcome below: finished
            // work is recorded, not run again by another worker.
            StopReason::Shutdown if interrupted => {
                if Box::pin(cancelled_by_task(store, &attempt.task_id)).await {
                    self.settle(None, false).await
                } else {
                    Box::pin(self.hand_back()).await
                }
            }
            StopReason::NotStopped | StopReason::Timeout | StopReason::Shutdown => match outcome {
                ToolOutcome::Plan(plan) => match Box::pin(crate::dag::check_plan(store, &plan)).await {
                    Ok(()) => Box::pin(self.expand(&plan)).await,
                    Err(invalid) => self.settle(Some(invalid), false).await,
                },
                ToolOutcome::InputRequired(input) => match self.askable(&input) {
                    Ok(()) => Box::pin(self.park(&input)).await,
                    Err(refused) => Box::pin(self.refuse(refused)).await,
                },
                outcome => self.settle(Some(outcome), final_failure).await,
            },
        }
    }

    /// The arguments the tool runs with. A node of a graph takes its upstream values in (within
    /// the worker's byte limits) and is checked against its tool's input schema here: the gateway
    /// could check only what the client sent, not what upstream nodes produced.
    pub(super) async fn arguments(&self) -> Result<serde_json::Value, ToolOutcome> {
        if !self.start.in_graph() {
            return Ok(self.start.arguments().clone());
        }
        let limits = &self.worker.options.node_limits;
        // Boxed: a graph's node reads its upstream values; a call's future holds no room for it.
        let resolved = Box::pin(crate::dag::resolve_arguments(
            &self.worker.store,
            &self.start.attempt.task_id,
            self.start.arguments(),
            &limits.resolve(),
        ))
        .await?;
        self.worker.registry.check_arguments(&self.start.tool, &resolved).map_err(|message| {
            ToolOutcome::Error(RpcError {
                code: -32602,
                message: format!("Invalid arguments for {}: {message}", offer_name(&self.start.tool)),
                data: None,
            })
        })?;
        Ok(resolved)
    }

    /// Records how the attempt ended, once: on its span (a failure also sets the span's status)
    /// and in the worker's metrics, in the same words.
    pub(super) fn finish(&self, outcome: NodeOutcome, error: Option<&str>) {
        self.span.record(attr::OUTCOME, outcome.as_str());
        if let Some(error) = error {
            self.span.record("otel.status_code", "ERROR");
            self.span.record("otel.status_description", error);
        }
        self.metrics.finish(outcome);
    }

    /// Runs one attempt of a tool or a built-in node. A panicking tool must not take the worker
    /// down: it fails its attempt instead.
    pub(super) async fn call(&self, ctx: ToolContext) -> ToolOutcome {
        if let Some(outcome) = crate::dag::builtin(&self.start.tool, &ctx) {
            return outcome;
        }
        match self.worker.registry.get(&self.start.tool) {
            Some(tool) => {
                let stop = ctx.cancel.clone();
                run_tool(&self.start.tool, tool.call(ctx), &stop, TOOL_STOP_GRACE).await
            }
            None => ToolOutcome::Error(RpcError {
                code: -32601,
                message: format!(
                    "tool `{}` is not registered on worker {}",
                    self.start.tool, self.worker.options.name
                ),
                data: None,
            }),
        }
    }

    /// Records the attempt's outcome (`None`: cancelled). Finished work is not thrown away because
    /// Redis is briefly away: the completion is tried again until Redis takes it (the lease stays
    /// held meanwhile); a repeat after a lost reply is refused as stale and changes nothing.
    async fn settle(&self, outcome: Option<ToolOutcome>, final_failure: bool) {
        let attempt = &self.start.attempt;
        let store = &self.worker.store;
        let error = match &outcome {
            Some(ToolOutcome::Error(error)) => Some(error.message.as_str()),
            _ => None,
        };
        self.finish(NodeOutcome::of(outcome.as_ref()), error);
        let max_output_bytes = self.worker.options.node_limits.max_output_bytes;
        let completed = self
            .persist("outcome", || store.complete(attempt, outcome.as_ref(), final_failure, max_output_bytes))
            .await;
        match completed {
            Some(CompleteOutcome::Retry { delay_ms }) => {
                metrics::node_retried(&self.start.tool);
                tracing::info!(task = %attempt.task_id, node = %attempt.node_id, attempt = attempt.number, delay_ms, "attempt failed; retry scheduled");
            }
            Some(CompleteOutcome::Stale) => {
                tracing::info!(task = %attempt.task_id, attempt = attempt.number, "completion refused: attempt is stale");
            }
            Some(done) => {
                tracing::debug!(task = %attempt.task_id, node = %attempt.node_id, outcome = ?done, "node completed");
            }
            None => {}
        }
    }

    /// Runs a transition of this attempt until Redis takes it (the lease stays held meanwhile);
    /// `None` when the worker shuts down first, or when Redis keeps refusing it for a lease for a
    /// reason that is not passing (then the entry, unrenewed, is queued again by the maintenance).
    /// A repeat after a lost reply is refused as stale and changes nothing.
    async fn persist<T, F, Fut>(&self, what: &str, mut op: F) -> Option<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        let mut backoff = Backoff::default();
        let mut stopping_since: Option<tokio::time::Instant> = None;
        let mut refused_since: Option<tokio::time::Instant> = None;
        loop {
            match op().await {
                Ok(done) => return Some(done),
                Err(e) => {
                    tracing::warn!(task = %self.start.attempt.task_id, error = %e, "could not record the node's {what} yet; retrying");
                    if e.may_pass_later() {
                        refused_since = None;
                    } else if refused_since.get_or_insert_with(tokio::time::Instant::now).elapsed()
                        >= self.worker.options.lease
                    {
                        tracing::warn!(task = %self.start.attempt.task_id, "gave up recording the node's {what}: Redis keeps refusing it");
                        return None;
                    }
                    // A stopping worker keeps trying for a while: work it finished and fails to
                    // record would be run again by another worker after its lease.
                    if self.worker.stop_running.is_cancelled() {
                        let since = *stopping_since.get_or_insert_with(tokio::time::Instant::now);
                        if since.elapsed() >= PERSIST_WHILE_STOPPING {
                            tracing::warn!(task = %self.start.attempt.task_id, "gave up recording the node's {what}: the worker stops");
                            return None;
                        }
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    } else {
                        backoff.wait(&self.worker.stop_running).await;
                    }
                }
            }
        }
    }

    /// Checks a request for input before the node parks: something to ask, and nothing the client
    /// did not declare it can answer (the protocol's missing-capability error, `-32021`).
    fn askable(&self, input: &InputRequired) -> Result<(), RpcError> {
        let refuse = |code: i32, message: String, data: Option<serde_json::Value>| {
            Err(RpcError { code, message, data })
        };
        if input.requests.is_empty() {
            return refuse(
                -32603,
                format!("tool `{}` asked for input but named no request", self.start.tool),
                None,
            );
        }
        for (key, request) in &input.requests {
            let Some(needed) = input::required_capability(request) else {
                return refuse(
                    -32603,
                    format!(
                        "{} asked for input `{key}` with a method the client cannot answer: {}",
                        offer_name(&self.start.tool),
                        request.get("method").unwrap_or(&serde_json::Value::Null)
                    ),
                    None,
                );
            };
            if !input::client_supports(&self.start.call.client_capabilities, request) {
                return refuse(
                    MISSING_CLIENT_CAPABILITY,
                    format!(
                        "{} needs to ask the client ({key}: {}), but the client did not declare the capability {needed}",
                        offer_name(&self.start.tool),
                        request.get("method").and_then(serde_json::Value::as_str).unwrap_or_default()
                    ),
                    Some(serde_json::json!({"requiredCapabilities": needed})),
                );
            }
        }
        Ok(())
    }

    /// Fails the attempt with a refusal that is the client's to fix (no retry, no dead letter).
    async fn refuse(&self, error: RpcError) {
        self.finish(NodeOutcome::Failed, Some(&error.message));
        let attempt = &self.start.attempt;
        let store = &self.worker.store;
        if let Some(done) = self.persist("refusal", || store.complete_refused(attempt, error.clone())).await {
            tracing::debug!(task = %attempt.task_id, node = %attempt.node_id, outcome = ?done, "refused a request for input");
        }
    }

    /// Parks the node until the client answers; like a completion, tried again while Redis is away.
    async fn park(&self, input: &InputRequired) {
        self.finish(NodeOutcome::Parked, None);
        let attempt = &self.start.attempt;
        let store = &self.worker.store;
        match self.persist("request for input", || store.park(attempt, input)).await {
            Some(ParkOutcome::Parked) => {
                tracing::debug!(task = %attempt.task_id, node = %attempt.node_id, "node parked for input");
            }
            Some(ParkOutcome::TaskAlreadyTerminal) => {
                tracing::info!(task = %attempt.task_id, "the task ended while its node asked for input");
            }
            Some(ParkOutcome::Stale) => {
                tracing::info!(task = %attempt.task_id, attempt = attempt.number, "park refused: attempt is stale");
            }
            None => {}
        }
    }

    /// Hands the node back so that another worker starts it at once; like a completion, tried
    /// again while Redis is away.
    pub(super) async fn hand_back(&self) {
        self.finish(NodeOutcome::HandedBack, None);
        let attempt = &self.start.attempt;
        match self.persist("hand-back", || self.worker.store.release(attempt)).await {
            Some(true) => {
                tracing::info!(task = %attempt.task_id, node = %attempt.node_id, "handed the node back to its queue")
            }
            Some(false) => {
                tracing::info!(task = %attempt.task_id, "node already settled elsewhere; nothing to hand back")
            }
            None => {}
        }
    }

    /// Adds a planning node's graph to its task; like a completion, tried again while Redis is
    /// away.
    async fn expand(&self, plan: &conveyor_shared::dag::DagSpec) {
        let store = &self.worker.store;
        let attempt = &self.start.attempt;
        let expanded = self
            .persist("plan", || async {
                let queues = store.tool_queues().await?;
                store.expand_plan(attempt, plan, &queues).await
            })
            .await;
        let Some(expanded) = expanded else { return };
        match expanded {
            ExpandOutcome::Expanded(n) => {
                self.finish(NodeOutcome::Planned, None);
                tracing::info!(task = %attempt.task_id, nodes = n, "expanded a planned graph")
            }
            ExpandOutcome::Refused(reason) => {
                // The plan cannot join this task: the node fails with the reason.
                let error = ToolOutcome::Error(RpcError { code: -32602, message: reason, data: None });
                self.settle(Some(error), false).await;
            }
            ExpandOutcome::Stale => {
                tracing::info!(task = %attempt.task_id, "plan refused: attempt is stale")
            }
            ExpandOutcome::TaskAlreadyTerminal => {
                // The task ended meanwhile: record the node as cancelled so its entry is done with.
                self.settle(None, false).await;
            }
        }
    }
}

/// Runs a tool's call in the attempt's own task (each node's is spawned already; a task more per
/// call was a tenth of a worker's scheduling): a panic ends it as a tool error, and a tool told to
/// stop (cancel, timeout, takeover, shutdown) has `grace` to clean up (its child processes). One
/// that ignores it is dropped, so that it never runs beside its retry or outside the concurrency
/// limit.
async fn run_tool(
    tool: &str,
    call: impl std::future::Future<Output = ToolOutcome>,
    stop: &CancellationToken,
    grace: Duration,
) -> ToolOutcome {
    let running = std::panic::AssertUnwindSafe(call).catch_unwind();
    tokio::pin!(running);
    let joined = tokio::select! {
        joined = &mut running => joined,
        () = stop.cancelled() => match tokio::time::timeout(grace, &mut running).await {
            Ok(joined) => joined,
            Err(_) => {
                tracing::warn!(tool = %tool, grace_ms = grace.as_millis() as u64, "the tool did not stop when told to; aborted it");
                return ToolOutcome::Error(RpcError {
                    code: -32800,
                    message: format!("tool `{tool}` did not stop when told to and was aborted"),
                    data: None,
                });
            }
        },
    };
    joined.unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_owned());
        ToolOutcome::Error(RpcError {
            code: -32603,
            message: format!("tool `{tool}` crashed: {what}"),
            data: None,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_of(outcome: ToolOutcome) -> RpcError {
        match outcome {
            ToolOutcome::Error(e) => e,
            other => panic!("not an error: {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_tool_that_panics_ends_its_attempt_with_an_error_not_the_worker() {
        let stop = CancellationToken::new();
        let call = async {
            let index: usize = "7".parse().unwrap_or(0);
            let empty: Vec<u8> = Vec::new();
            ToolOutcome::Result(serde_json::json!({"byte": empty[index]}))
        };
        let error = error_of(run_tool("crashy", call, &stop, Duration::from_secs(1)).await);
        assert_eq!(error.code, -32603);
        assert!(error.message.starts_with("tool `crashy` crashed: index out of bounds"), "{}", error.message);
    }

    #[tokio::test]
    async fn a_tool_that_ignores_its_stop_is_dropped_after_the_grace() {
        let stop = CancellationToken::new();
        let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        struct Flag(Arc<std::sync::atomic::AtomicBool>);
        impl Drop for Flag {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let flag = Flag(dropped.clone());
        let call = async move {
            let _flag = flag;
            std::future::pending::<()>().await;
            ToolOutcome::Result(serde_json::json!({}))
        };
        stop.cancel();
        let error = error_of(run_tool("stubborn", call, &stop, Duration::from_millis(50)).await);
        assert_eq!(error.code, -32800, "{}", error.message);
        assert!(dropped.load(Ordering::SeqCst), "the call's future is gone");
    }

    #[tokio::test]
    async fn a_tool_that_stops_when_told_gives_its_own_outcome() {
        let stop = CancellationToken::new();
        let token = stop.clone();
        let call = async move {
            token.cancelled().await;
            ToolOutcome::Result(serde_json::json!({"stopped": true}))
        };
        stop.cancel();
        match run_tool("polite", call, &stop, Duration::from_secs(5)).await {
            ToolOutcome::Result(v) => assert_eq!(v, serde_json::json!({"stopped": true})),
            other => panic!("{other:?}"),
        }
    }
}
