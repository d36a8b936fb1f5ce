//! One task's whole life as one trace, exported over OTLP to a receiver inside the test: a DAG
//! task through a gateway process (OTLP over HTTP/protobuf) and two worker processes (OTLP over
//! gRPC), one of them killed mid-node.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use conveyor_shared::telemetry::context::TaskTrace;
use conveyor_tests::mcp::{create_2026, tasks_client_capabilities, wait_for_tools, wait_status};
use conveyor_tests::otlp::{OtlpReceiver, ReceivedSpan};
use conveyor_tests::{Conveyor, Mcp, RedisServer};
use serde_json::json;

const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

fn otel_env<'a>(protocol: &'a str, endpoint: &'a str, service: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol),
        ("OTEL_SERVICE_NAME", service),
        // Export soon after a span ends, so that a worker killed mid-node has sent what it had.
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ]
}

fn by_id(spans: &[ReceivedSpan]) -> HashMap<&str, &ReceivedSpan> {
    spans.iter().map(|s| (s.span_id.as_str(), s)).collect()
}

#[tokio::test]
async fn a_dag_task_is_one_trace_across_a_gateway_and_two_workers_one_of_them_killed() {
    let receiver = OtlpReceiver::start().await.expect("receiver");
    let redis = RedisServer::start().expect("redis");
    let gateway = Conveyor::with_env(
        "gateway",
        &redis.url(),
        &[],
        &otel_env("http/protobuf", &receiver.http_endpoint, "gateway"),
    )
    .expect("gateway");
    let lease = ["--fixtures", "--lease-ms", "1500"];
    let mut doomed = Conveyor::with_env(
        "worker",
        &redis.url(),
        &lease,
        &otel_env("grpc", &receiver.grpc_endpoint, "worker-a"),
    )
    .expect("worker a");
    let mcp = Mcp::new(gateway.mcp_url());
    wait_for_tools(&mcp, &["slow_compute"]).await;

    // The caller's own span, named in `_meta` with its tracestate and baggage.
    let graph = json!({"nodes": [
        {"id": "a", "tool": "echo", "arguments": {"v": 1}},
        {"id": "slow", "tool": "slow_compute", "dependsOn": ["a"], "arguments": {"seconds": 2.5}},
        {"id": "c", "tool": "greet", "dependsOn": ["slow"], "arguments": {"name": "trace"}}
    ], "output": "c"});
    let params = json!({
        "name": "run_dag",
        "arguments": graph,
        "_meta": {
            "traceparent": format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01"),
            "tracestate": "caller=1",
            "baggage": "team=observability"
        }
    });
    let reply = mcp.call_2026("tools/call", params, tasks_client_capabilities()).await.expect("tools/call");
    let task =
        reply.result()["taskId"].as_str().unwrap_or_else(|| panic!("no task: {}", reply.raw)).to_owned();

    // Kill the worker while it runs the slow node, once it has exported a span of that attempt
    // (its start's round trip, under the attempt's span): what it sent must hang under the span
    // its rescuer writes for the lost attempt. How soon the export comes depends on the machine's
    // load, so the test waits for it rather than for a while.
    redis.wait_node_status(&task, "slow", "running", Duration::from_secs(20)).await.expect("slow runs");
    let stored: String = redis::cmd("HGET")
        .arg(conveyor_tests::process::task_key(&task))
        .arg("traceparent")
        .query(&mut redis.connection().expect("redis connection"))
        .expect("the task's trace context");
    let first_attempt =
        TaskTrace::decode(&stored).expect("a trace context").node_span_id("slow", 1).to_string();
    let exported = |spans: &[ReceivedSpan]| {
        spans.iter().any(|s| s.service == "worker-a" && s.parent_span_id == first_attempt)
    };
    assert!(
        exported(&receiver.wait_for(20, exported).await),
        "worker a exported nothing of its attempt at the slow node"
    );
    doomed.kill();
    let _rescuer = Conveyor::with_env(
        "worker",
        &redis.url(),
        &lease,
        &otel_env("grpc", &receiver.grpc_endpoint, "worker-b"),
    )
    .expect("worker b");

    wait_status(&mcp, &task, "completed", &tasks_client_capabilities(), Duration::from_secs(40)).await;

    // A request that names its parent in the HTTP header instead.
    let header_trace = "0af7651916cd43dd8448eb211c80319c";
    let header_parent = "b7ad6b7169203331";
    let traceparent = format!("00-{header_trace}-{header_parent}-01");
    let body = json!({"jsonrpc": "2.0", "id": 99, "method": "tasks/get", "params": {"taskId": task}});
    mcp.post_raw(&[("mcp-protocol-version", "2025-11-25"), ("traceparent", &traceparent)], body.to_string())
        .await
        .expect("tasks/get with a traceparent header");

    let spans = receiver
        .wait_for(20, |spans| {
            spans.iter().any(|s| s.name == "task run_dag") && spans.iter().any(|s| s.trace_id == header_trace)
        })
        .await;
    let ours: Vec<ReceivedSpan> = spans.iter().filter(|s| s.trace_id == CALLER_TRACE).cloned().collect();
    let report = || {
        ours.iter()
            .map(|s| format!("{} {} <- {} {:?}", s.service, s.name, s.parent_span_id, s.attributes))
            .collect::<Vec<_>>()
            .join("\n")
    };

    // Every span of the task's work is in the caller's trace (a client's polls are traces of
    // their own).
    let work = spans.iter().filter(|s| !s.name.starts_with("tasks/"));
    for span in work.filter(|s| s.attr("conveyor.task.id") == Some(task.as_str())) {
        assert_eq!(span.trace_id, CALLER_TRACE, "{span:?}");
    }
    // The root is the gateway's request span, whose parent is the caller's span.
    let request = ours
        .iter()
        .find(|s| s.name == "tools/call run_dag")
        .unwrap_or_else(|| panic!("no request span:\n{}", report()));
    assert_eq!(request.parent_span_id, CALLER_SPAN);
    assert_eq!((request.service.as_str(), request.via), ("gateway", "http"));
    assert_eq!(request.attr("mcp.method.name"), Some("tools/call"));
    assert_eq!(request.attr("gen_ai.tool.name"), Some("run_dag"));
    assert_eq!(request.attr("conveyor.task.id"), Some(task.as_str()));
    // The task span is the request's child, and the parent of every node span.
    let task_span = ours.iter().find(|s| s.name == "task run_dag").expect("task span");
    assert_eq!(task_span.parent_span_id, request.span_id, "{}", report());
    assert_eq!(task_span.attr("conveyor.task.status"), Some("completed"));
    let nodes: Vec<&ReceivedSpan> = ours.iter().filter(|s| s.name.starts_with("node ")).collect();
    for node in &nodes {
        assert_eq!(node.parent_span_id, task_span.span_id, "{node:?}");
        assert_eq!(node.attr("conveyor.task.id"), Some(task.as_str()), "{node:?}");
        for name in ["conveyor.node.id", "gen_ai.tool.name", "conveyor.node.attempt"] {
            assert!(node.attr(name).is_some(), "{name} missing on {node:?}");
        }
    }
    let node_ids: HashSet<&str> = nodes.iter().filter_map(|n| n.attr("conveyor.node.id")).collect();
    assert_eq!(node_ids, HashSet::from(["a", "slow", "c"]), "{}", report());
    // The node whose worker was killed shows both attempts: the lost one, written by the worker
    // that took it over, and the one that completed.
    let mut slow: Vec<&&ReceivedSpan> =
        nodes.iter().filter(|n| n.attr("conveyor.node.id") == Some("slow")).collect();
    slow.sort_by_key(|n| n.attr("conveyor.node.attempt").map(str::to_owned));
    assert_eq!(slow.len(), 2, "{}", report());
    assert_eq!(slow[0].attr("conveyor.node.attempt"), Some("1"));
    assert_eq!(slow[0].attr("conveyor.node.outcome"), Some("lost"));
    assert!(slow[0].error);
    assert_eq!(slow[0].service, "worker-b");
    assert_eq!(slow[1].attr("conveyor.node.attempt"), Some("2"));
    assert_eq!(slow[1].attr("conveyor.node.run_reason"), Some("reclaimed"));
    assert_eq!(slow[1].attr("conveyor.node.outcome"), Some("completed"));
    // What the killed worker exported of its attempt hangs under the lost attempt's span.
    let from_a: Vec<&ReceivedSpan> = ours.iter().filter(|s| s.service == "worker-a").collect();
    assert!(from_a.iter().any(|s| s.parent_span_id == slow[0].span_id), "{}", report());
    // Redis round trips of the transitions are spans under the node spans.
    let node_span_ids: HashSet<&str> = nodes.iter().map(|n| n.span_id.as_str()).collect();
    let round_trips: Vec<&ReceivedSpan> =
        ours.iter().filter(|s| s.attr("db.system.name") == Some("redis")).collect();
    for name in ["EVALSHA start_nodes", "EVALSHA complete_node"] {
        assert!(
            round_trips.iter().any(|s| s.name == name && node_span_ids.contains(s.parent_span_id.as_str())),
            "no {name} under a node span:\n{}",
            report()
        );
    }
    assert!(
        round_trips.iter().any(|s| s.name == "EVALSHA create_task" && s.parent_span_id == request.span_id),
        "the create is not a round trip under the request:\n{}",
        report()
    );
    // No span of the trace lacks its parent (the caller's span is the only one outside).
    let known = by_id(&ours);
    for span in &ours {
        assert!(
            span.parent_span_id == CALLER_SPAN || known.contains_key(span.parent_span_id.as_str()),
            "orphan {} {:?}:\n{}",
            span.name,
            span.attributes,
            report()
        );
    }
    assert!(ours.iter().any(|s| s.via == "grpc") && ours.iter().any(|s| s.via == "http"));

    let header_request = spans
        .iter()
        .find(|s| s.trace_id == header_trace && s.name == "tasks/get")
        .expect("the header's request span");
    assert_eq!(header_request.parent_span_id, header_parent);
}

/// The spans of `task`'s nodes, by node id, in attempt order.
fn node_spans<'a>(spans: &'a [ReceivedSpan], task: &str) -> HashMap<String, Vec<&'a ReceivedSpan>> {
    let mut nodes: HashMap<String, Vec<&ReceivedSpan>> = HashMap::new();
    for span in
        spans.iter().filter(|s| s.name.starts_with("node ") && s.attr("conveyor.task.id") == Some(task))
    {
        nodes.entry(span.attr("conveyor.node.id").unwrap_or_default().to_owned()).or_default().push(span);
    }
    for attempts in nodes.values_mut() {
        attempts.sort_by_key(|s| s.attr("conveyor.node.attempt").and_then(|a| a.parse::<u32>().ok()));
    }
    nodes
}

#[tokio::test]
async fn a_retry_a_parked_node_resumed_and_a_cancellation_each_show_as_what_they_are() {
    let receiver = OtlpReceiver::start().await.expect("receiver");
    let redis = RedisServer::start().expect("redis");
    let up = Conveyor::with_env(
        "up",
        &redis.url(),
        &["--fixtures"],
        &otel_env("http/protobuf", &receiver.http_endpoint, "up"),
    )
    .expect("conveyor up");
    let mcp = Mcp::new(up.mcp_url());
    wait_for_tools(&mcp, &["confirm_delete"]).await;
    let mut asking = tasks_client_capabilities();
    asking["elicitation"] = json!({});
    let create =
        |name: &'static str, arguments: serde_json::Value| create_2026(&mcp, name, arguments, asking.clone());

    // A node that fails once and is retried.
    let retried = create(
        "run_dag",
        json!({"nodes": [{"id": "f", "tool": "flaky", "arguments": {"failures": 1}, "retries": 1, "backoffMs": 50}], "output": "f"}),
    )
    .await;
    wait_status(&mcp, &retried, "completed", &asking, Duration::from_secs(30)).await;
    // A node that asks, parks, and runs again with the answer.
    let parked = create("confirm_delete", json!({"filename": "a.txt"})).await;
    wait_status(&mcp, &parked, "input_required", &asking, Duration::from_secs(30)).await;
    let answer = json!({"confirm": {"action": "accept", "content": {"confirm": true}}});
    mcp.call_2026("tasks/update", json!({"taskId": parked, "inputResponses": answer}), asking.clone())
        .await
        .expect("tasks/update");
    wait_status(&mcp, &parked, "completed", &asking, Duration::from_secs(30)).await;
    // A running node whose task is cancelled.
    let cancelled = create("slow_compute", json!({"seconds": 30})).await;
    // Running, not merely queued (a queued node of a cancelled task never runs, and has no span).
    redis.wait_node_status(&cancelled, "root", "running", Duration::from_secs(30)).await.expect("it runs");
    mcp.call_2026("tasks/cancel", json!({"taskId": cancelled}), asking.clone()).await.expect("tasks/cancel");
    wait_status(&mcp, &cancelled, "cancelled", &asking, Duration::from_secs(30)).await;

    let spans = receiver
        .wait_for(20, |spans| {
            let tasks = spans.iter().filter(|s| s.name.starts_with("task ")).count();
            let cancelled_node = spans.iter().any(|s| s.attr("conveyor.node.outcome") == Some("cancelled"));
            tasks >= 3 && cancelled_node
        })
        .await;
    let dump = || {
        spans
            .iter()
            .map(|s| format!("{} {:?} {:?}", s.name, s.attributes, s.events))
            .collect::<Vec<_>>()
            .join("\n")
    };

    let retry = &node_spans(&spans, &retried)["f"];
    assert_eq!(retry.len(), 2, "{}", dump());
    assert_eq!(retry[0].attr("conveyor.node.outcome"), Some("tool_error"));
    assert!(retry[0].events.iter().any(|e| e.contains("retry scheduled")), "{:?}", retry[0].events);
    assert_eq!(retry[1].attr("conveyor.node.run_reason"), Some("retry"));
    assert_eq!(retry[1].attr("conveyor.node.outcome"), Some("completed"));

    let asked = node_spans(&spans, &parked);
    let asked = asked.values().next().unwrap_or_else(|| panic!("no node spans:\n{}", dump()));
    assert_eq!(asked.len(), 2, "{}", dump());
    assert_eq!(asked[0].attr("conveyor.node.outcome"), Some("parked"));
    assert_eq!(asked[1].attr("conveyor.node.run_reason"), Some("resumed"));
    assert_eq!(asked[1].attr("conveyor.node.outcome"), Some("completed"));
    let answer_request = spans
        .iter()
        .find(|s| s.name == "tasks/update" && s.attr("conveyor.task.id") == Some(parked.as_str()))
        .expect("the answer's request span");
    assert_eq!(answer_request.attr("mcp.method.name"), Some("tasks/update"));

    let stopped = node_spans(&spans, &cancelled);
    let stopped = stopped.values().next().unwrap_or_else(|| panic!("no node spans:\n{}", dump()));
    assert_eq!(stopped.last().and_then(|s| s.attr("conveyor.node.outcome")), Some("cancelled"), "{}", dump());
    let task_span = spans
        .iter()
        .find(|s| s.name == "task slow_compute" && s.attr("conveyor.task.id") == Some(cancelled.as_str()))
        .unwrap_or_else(|| panic!("no task span:\n{}", dump()));
    assert_eq!(task_span.attr("conveyor.task.status"), Some("cancelled"));
    // The gateway's cancel settled it, inside the tasks/cancel request's trace of its own: the
    // task span still belongs to the task's trace, under the request that created it.
    let create_request = spans
        .iter()
        .find(|s| {
            s.name == "tools/call slow_compute" && s.attr("conveyor.task.id") == Some(cancelled.as_str())
        })
        .expect("the create request");
    assert_eq!(task_span.parent_span_id, create_request.span_id);
    assert_eq!(task_span.trace_id, create_request.trace_id);
    let cancel_request = spans.iter().find(|s| s.name == "tasks/cancel").expect("the cancel request span");
    assert_eq!(cancel_request.attr("conveyor.task.id"), Some(cancelled.as_str()));
}
