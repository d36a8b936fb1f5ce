//! The Lua transitions and the store, against a real redis-server: every state change is one
//! script that refuses what would break the status machine.

use std::time::Duration;

use conveyor_shared::Store;
use conveyor_shared::keys;
use conveyor_shared::model::{
    ROOT_NODE, RpcError, TaskMode, TaskStatus, ToolOutcome, WorkItem, now_ms, result,
};
use conveyor_shared::store::{
    AnswerOutcome, CancelOutcome, CompleteOutcome, Created, Limits, NewTask, StartOutcome,
};
use conveyor_tests::RedisServer;
use serde_json::json;

const TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn new_task(id: &str, owner: &str, wire: &str, ttl_ms: u64) -> NewTask {
    NewTask {
        task_id: id.to_owned(),
        owner: owner.to_owned(),
        tool: "slow_compute".to_owned(),
        arguments: json!({"seconds": 1}),
        ttl_ms,
        poll_interval_ms: 500,
        wire: wire.to_owned(),
        progress_token: Some(json!("tok")),
        traceparent: Some(TRACE.to_owned()),
        mode: TaskMode::Task,
        status_message: "Queued".to_owned(),
        created_at_ms: now_ms(),
        graph: None,
        idempotency_key: None,
    }
}

async fn setup() -> (RedisServer, Store) {
    let redis = RedisServer::start().expect("redis");
    let store = Store::new(&redis.url(), Duration::from_secs(2)).expect("store");
    store.ensure_work_group().await.expect("group");
    (redis, store)
}

async fn start(store: &Store, id: &str) -> u32 {
    match store.start_node(id, ROOT_NODE, "w1").await.expect("start") {
        StartOutcome::Run { attempt, .. } => attempt,
        StartOutcome::Skip(reason) => panic!("expected to run, skipped: {reason}"),
    }
}

fn item(id: &str, entry: &str) -> WorkItem {
    WorkItem {
        entry_id: entry.to_owned(),
        task_id: id.to_owned(),
        node_id: ROOT_NODE.to_owned(),
        traceparent: Some(TRACE.to_owned()),
    }
}

#[tokio::test]
async fn a_task_settles_once_and_expires_after_its_ttl() {
    let (redis, store) = setup().await;
    assert_eq!(
        store
            .create_task(&new_task("t1", "alice", "2026-07-28", 400), 60_000, &Limits::default())
            .await
            .expect("create"),
        Created::Created
    );
    let again = store
        .create_task(&new_task("t1", "alice", "2026-07-28", 400), 60_000, &Limits::default())
        .await
        .expect("create");
    assert_eq!(again, Created::IdTaken, "ids are unique");

    // The work entry carries the trace context from the start.
    let mut conn = redis.connection().expect("conn");
    let entries: Vec<(String, Vec<String>)> =
        redis::cmd("XRANGE").arg(keys::WORK_STREAM).arg("-").arg("+").query(&mut conn).expect("xrange");
    assert_eq!(entries.len(), 1);
    assert!(entries[0].1.windows(2).any(|w| w[0] == "traceparent" && w[1] == TRACE), "{entries:?}");

    let attempt = start(&store, "t1").await;
    assert_eq!(attempt, 1);
    assert!(
        store
            .report_progress("t1", ROOT_NODE, attempt, 1.0, Some(2.0), Some("half"))
            .await
            .expect("progress")
    );
    let task = store.get_task("t1").await.expect("get").expect("exists");
    assert_eq!((task.status, task.progress, task.total), (TaskStatus::Working, Some(1.0), Some(2.0)));
    assert_eq!(task.status_message.as_deref(), Some("half"));

    let done = ToolOutcome::Result(result::text("done"));
    assert_eq!(
        store.complete_node("t1", ROOT_NODE, attempt, Some(&done)).await.expect("complete"),
        CompleteOutcome::Settled
    );
    let other = ToolOutcome::Result(result::text("again"));
    assert_eq!(
        store.complete_node("t1", ROOT_NODE, attempt, Some(&other)).await.expect("complete"),
        CompleteOutcome::Stale
    );
    let task = store.get_task("t1").await.expect("get").expect("exists");
    assert_eq!(task.status, TaskStatus::Completed);
    assert_eq!(task.result.expect("result")["content"][0]["text"], "done", "the first completion stands");
    assert!(
        !store.report_progress("t1", ROOT_NODE, attempt, 2.0, None, None).await.expect("progress"),
        "no progress after settling"
    );
    assert_eq!(
        store.cancel_task("t1", "alice", "x").await.expect("cancel"),
        CancelOutcome::AlreadyTerminal("completed".into())
    );

    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(store.get_task("t1").await.expect("get").is_none(), "the task expired after its TTL");
    assert!(store.get_nodes("t1").await.expect("nodes").is_empty(), "its nodes expired with it");
}

#[tokio::test]
async fn cancellation_is_final_and_refuses_late_work() {
    let (_redis, store) = setup().await;
    store
        .create_task(&new_task("t2", "alice", "2025-11-25", 60_000), 60_000, &Limits::default())
        .await
        .expect("create");
    let attempt = start(&store, "t2").await;
    assert_eq!(
        store.cancel_task("t2", "bob", "x").await.expect("cancel"),
        CancelOutcome::Missing,
        "other owners cannot"
    );
    assert_eq!(
        store.cancel_task("t2", "alice", "Cancelled").await.expect("cancel"),
        CancelOutcome::Cancelled
    );
    assert_eq!(
        store.cancel_task("t2", "alice", "again").await.expect("cancel"),
        CancelOutcome::AlreadyTerminal("cancelled".into())
    );
    assert!(!store.report_progress("t2", ROOT_NODE, attempt, 1.0, None, None).await.expect("progress"));
    let late = ToolOutcome::Result(result::text("late"));
    assert_eq!(
        store.complete_node("t2", ROOT_NODE, attempt, Some(&late)).await.expect("complete"),
        CompleteOutcome::TaskAlreadyTerminal
    );
    let task = store.get_task("t2").await.expect("get").expect("exists");
    assert_eq!(task.status, TaskStatus::Cancelled, "cancelled stays cancelled even when the work finishes");
    assert!(task.result.is_none());

    // A queued node of a cancelled task never starts.
    store
        .create_task(&new_task("t3", "alice", "2025-11-25", 60_000), 60_000, &Limits::default())
        .await
        .expect("create");
    store.cancel_task("t3", "alice", "x").await.expect("cancel");
    assert!(matches!(store.start_node("t3", ROOT_NODE, "w1").await.expect("start"), StartOutcome::Skip(_)));
    assert!(matches!(store.start_node("nope", ROOT_NODE, "w1").await.expect("start"), StartOutcome::Skip(_)));
}

#[tokio::test]
async fn a_stale_attempt_cannot_complete_after_the_node_was_handed_back() {
    let (_redis, store) = setup().await;
    store
        .create_task(&new_task("t4", "alice", "2026-07-28", 60_000), 60_000, &Limits::default())
        .await
        .expect("create");
    let first = start(&store, "t4").await;
    assert!(store.release_node(&item("t4", "0-1"), first).await.expect("release"));
    let second = start(&store, "t4").await;
    assert_eq!(second, first + 1);
    let stale = ToolOutcome::Result(result::text("stale"));
    assert_eq!(
        store.complete_node("t4", ROOT_NODE, first, Some(&stale)).await.expect("complete"),
        CompleteOutcome::Stale
    );
    assert!(
        !store.report_progress("t4", ROOT_NODE, first, 1.0, None, None).await.expect("progress"),
        "stale progress refused"
    );
    let fresh = ToolOutcome::Error(RpcError { code: -32603, message: "boom".into(), data: None });
    assert_eq!(
        store.complete_node("t4", ROOT_NODE, second, Some(&fresh)).await.expect("complete"),
        CompleteOutcome::Settled
    );
    let task = store.get_task("t4").await.expect("get").expect("exists");
    assert_eq!(task.status, TaskStatus::Failed);
    assert_eq!(task.error.expect("error").message, "boom");
}

#[tokio::test]
async fn a_tool_error_fails_a_2025_task_and_completes_a_2026_one() {
    let (_redis, store) = setup().await;
    for (id, wire, expected) in
        [("old", "2025-11-25", TaskStatus::Failed), ("new", "2026-07-28", TaskStatus::Completed)]
    {
        store
            .create_task(&new_task(id, "alice", wire, 60_000), 60_000, &Limits::default())
            .await
            .expect("create");
        let attempt = start(&store, id).await;
        let outcome = ToolOutcome::Result(result::error_text("nope"));
        store.complete_node(id, ROOT_NODE, attempt, Some(&outcome)).await.expect("complete");
        let task = store.get_task(id).await.expect("get").expect("exists");
        assert_eq!(task.status, expected, "{wire}");
        assert_eq!(task.result.expect("result")["isError"], true);
    }
}

#[tokio::test]
async fn input_requests_are_answered_key_by_key() {
    let (_redis, store) = setup().await;
    store
        .create_task(&new_task("t5", "alice", "2026-07-28", 60_000), 60_000, &Limits::default())
        .await
        .expect("create");
    let attempt = start(&store, "t5").await;
    let requests = json!({"a": {"method": "elicitation/create"}, "b": {"method": "elicitation/create"}});
    assert!(store.request_input("t5", ROOT_NODE, attempt, &requests, "waiting").await.expect("request"));
    assert_eq!(store.get_task("t5").await.expect("get").expect("exists").status, TaskStatus::InputRequired);

    let answer = |v| json!({"a": {"action": "accept", "content": {"v": v}}, "zzz": {"ignored": true}});
    assert_eq!(store.answer_input("t5", "bob", &answer(1)).await.expect("answer"), AnswerOutcome::Missing);
    assert_eq!(
        store.answer_input("t5", "alice", &answer(1)).await.expect("answer"),
        AnswerOutcome::Answered { remaining: 1 }
    );
    let task = store.get_task("t5").await.expect("get").expect("exists");
    assert_eq!(task.status, TaskStatus::InputRequired);
    assert!(task.input_requests.expect("pending").get("a").is_none(), "answered keys leave the pending set");
    let last = json!({"b": {"action": "accept", "content": {}}});
    assert_eq!(
        store.answer_input("t5", "alice", &last).await.expect("answer"),
        AnswerOutcome::Answered { remaining: 0 }
    );
    assert_eq!(store.get_task("t5").await.expect("get").expect("exists").status, TaskStatus::Working);
    let answers = store.input_responses("t5").await.expect("responses");
    assert_eq!(answers["a"]["content"]["v"], 1);
    assert!(answers.get("b").is_some() && answers.get("zzz").is_none(), "{answers}");
    assert_eq!(
        store.answer_input("t5", "alice", &last).await.expect("answer"),
        AnswerOutcome::NotWaiting("working".into())
    );
}

#[tokio::test]
async fn listing_pages_through_an_owners_tasks_only() {
    let (_redis, store) = setup().await;
    // Many tasks in one millisecond: pages must neither skip nor repeat any of them.
    let created_at = now_ms();
    for i in 0..250 {
        let mut task = new_task(&format!("a{i:03}"), "alice", "2025-11-25", 60_000);
        task.created_at_ms = created_at;
        store.create_task(&task, 60_000, &Limits::default()).await.expect("create");
    }
    store
        .create_task(&new_task("b1", "bob", "2025-11-25", 60_000), 60_000, &Limits::default())
        .await
        .expect("create");
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page =
            store.list_tasks("alice", cursor.as_deref(), 50).await.expect("list").expect("valid cursor");
        assert!(page.tasks.len() <= 50);
        seen.extend(page.tasks.into_iter().map(|t| t.task_id));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let listed = seen.len();
    seen.sort();
    seen.dedup();
    assert_eq!((listed, seen.len()), (250, 250), "every task exactly once, none of bob's");
    assert!(
        store.list_tasks("alice", Some("garbage"), 50).await.expect("list").is_err(),
        "a bad cursor is an error"
    );
}

#[tokio::test]
async fn an_owner_without_tasks_gets_an_empty_page() {
    let (_redis, store) = setup().await;
    let page = store.list_tasks("nobody", None, 50).await.expect("list").expect("no cursor");
    assert!(page.tasks.is_empty() && page.next_cursor.is_none());
}

#[tokio::test]
async fn a_completion_from_an_attempt_that_was_already_retried_is_refused() {
    let (_redis, store) = setup().await;
    let mut task = new_task("t6", "alice", "2026-07-28", 60_000);
    task.graph = Some(
        serde_json::from_value(
            json!({"nodes": [{"id": "f", "tool": "flaky", "retries": 2, "backoffMs": 1}]}),
        )
        .expect("a graph"),
    );
    store.create_task(&task, 60_000, &Limits::default()).await.expect("create");
    let first = match store.start_node("t6", "f", "w1").await.expect("start") {
        StartOutcome::Run { attempt, .. } => attempt,
        other => panic!("{other:?}"),
    };
    let failure = ToolOutcome::Result(result::error_text("boom"));
    assert!(matches!(
        store.complete_node("t6", "f", first, Some(&failure)).await.expect("complete"),
        CompleteOutcome::Retry { .. }
    ));
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(store.promote_retries(10).await.expect("promote"), 1);
    let second = match store.start_node("t6", "f", "w2").await.expect("start") {
        StartOutcome::Run { attempt, .. } => attempt,
        other => panic!("{other:?}"),
    };
    assert_eq!(second, first + 1);
    // The first attempt's worker was slow and reports success late: refused.
    let late = ToolOutcome::Result(result::text("late"));
    assert_eq!(
        store.complete_node("t6", "f", first, Some(&late)).await.expect("complete"),
        CompleteOutcome::Stale
    );
    let fresh = ToolOutcome::Result(result::text("fresh"));
    assert_eq!(
        store.complete_node("t6", "f", second, Some(&fresh)).await.expect("complete"),
        CompleteOutcome::Finalize
    );
    let nodes = store.get_nodes("t6").await.expect("nodes");
    assert_eq!(nodes[0].output.as_ref().expect("output")["content"][0]["text"], "fresh");
}

#[tokio::test]
async fn an_idempotency_key_returns_the_first_task_and_refuses_a_different_call() {
    let (redis, store) = setup().await;
    let mut first = new_task("first", "alice", "2026-07-28", 60_000);
    first.idempotency_key = Some("order-42".to_owned());
    assert_eq!(
        store.create_task(&first, 60_000, &Limits::default()).await.expect("create"),
        Created::Created
    );
    let mut retry = new_task("second", "alice", "2026-07-28", 60_000);
    retry.idempotency_key = Some("order-42".to_owned());
    assert_eq!(
        store.create_task(&retry, 60_000, &Limits::default()).await.expect("create"),
        Created::Duplicate("first".into())
    );
    assert!(store.get_task("second").await.expect("get").is_none(), "nothing written for the retry");
    let mut different = new_task("third", "alice", "2026-07-28", 60_000);
    different.idempotency_key = Some("order-42".to_owned());
    different.arguments = json!({"seconds": 99});
    assert_eq!(
        store.create_task(&different, 60_000, &Limits::default()).await.expect("create"),
        Created::Conflict("first".into())
    );
    // Keys are per owner.
    let mut bobs = new_task("bobs", "bob", "2026-07-28", 60_000);
    bobs.idempotency_key = Some("order-42".to_owned());
    assert_eq!(store.create_task(&bobs, 60_000, &Limits::default()).await.expect("create"), Created::Created);
    let mut conn = redis.connection().expect("conn");
    let queued: usize = redis::cmd("XLEN").arg("cv:work").query(&mut conn).expect("xlen");
    assert_eq!(queued, 2, "only the two real tasks were enqueued");
}

#[tokio::test]
async fn overload_limits_refuse_new_work_and_free_up_as_work_moves() {
    let (redis, store) = setup().await;
    let queued = Limits { max_queued: 2, ..Limits::default() };
    for id in ["q1", "q2"] {
        assert_eq!(
            store
                .create_task(&new_task(id, "alice", "2026-07-28", 60_000), 60_000, &queued)
                .await
                .expect("create"),
            Created::Created
        );
    }
    match store
        .create_task(&new_task("q3", "alice", "2026-07-28", 60_000), 60_000, &queued)
        .await
        .expect("create")
    {
        Created::OverLimit(hit) => {
            assert_eq!((hit.limit.as_str(), hit.current, hit.max), ("queued_nodes", 2, 2))
        }
        other => panic!("expected the queue limit, got {other:?}"),
    }
    assert!(store.get_task("q3").await.expect("get").is_none(), "nothing written over the limit");
    start(&store, "q1").await; // one node leaves the queue
    assert_eq!(
        store
            .create_task(&new_task("q3", "alice", "2026-07-28", 60_000), 60_000, &queued)
            .await
            .expect("create"),
        Created::Created
    );

    let per_tool = Limits { max_queued_per_tool: 2, ..Limits::default() };
    match store
        .create_task(&new_task("q4", "alice", "2026-07-28", 60_000), 60_000, &per_tool)
        .await
        .expect("create")
    {
        Created::OverLimit(hit) => {
            assert_eq!(hit.limit, "queued_nodes_per_tool");
            assert_eq!(hit.tool.as_deref(), Some("slow_compute"));
        }
        other => panic!("expected the per-tool limit, got {other:?}"),
    }

    let live = Limits { max_live_per_principal: 3, ..Limits::default() };
    match store
        .create_task(&new_task("l1", "alice", "2026-07-28", 60_000), 60_000, &live)
        .await
        .expect("create")
    {
        Created::OverLimit(hit) => {
            assert_eq!((hit.limit.as_str(), hit.current), ("live_tasks_per_principal", 3))
        }
        other => panic!("expected the live limit, got {other:?}"),
    }
    assert_eq!(
        store.create_task(&new_task("b1", "bob", "2026-07-28", 60_000), 60_000, &live).await.expect("create"),
        Created::Created,
        "per principal"
    );
    store.cancel_task("q2", "alice", "x").await.expect("cancel");
    let attempt = start(&store, "q3").await;
    store
        .complete_node("q3", ROOT_NODE, attempt, Some(&ToolOutcome::Result(result::text("ok"))))
        .await
        .expect("complete");
    assert_eq!(
        store
            .create_task(&new_task("l1", "alice", "2026-07-28", 60_000), 60_000, &live)
            .await
            .expect("create"),
        Created::Created
    );

    // The counters follow the work: q1 running, l1 and b1 queued, q2's cancelled node still queued
    // until a worker drops it.
    let mut conn = redis.connection().expect("conn");
    let load: std::collections::HashMap<String, i64> =
        redis::cmd("HGETALL").arg("cv:load").query(&mut conn).expect("load");
    assert_eq!(load["queued"], 3, "{load:?}");
    assert_eq!(load["live:alice"], 2, "q1 and l1: {load:?}");
    assert!(matches!(store.start_node("q2", ROOT_NODE, "w").await.expect("start"), StartOutcome::Skip(_)));
    let load: std::collections::HashMap<String, i64> =
        redis::cmd("HGETALL").arg("cv:load").query(&mut conn).expect("load");
    assert_eq!(load["queued"], 2, "the dropped node left the queue: {load:?}");
}

#[tokio::test]
async fn owner_indexes_lose_tasks_when_their_keys_expire() {
    let (redis, store) = setup().await;
    for (id, ttl) in [("short", 200), ("long", 60_000)] {
        store
            .create_task(&new_task(id, "alice", "2026-07-28", ttl), 60_000, &Limits::default())
            .await
            .expect("create");
        let attempt = start(&store, id).await;
        store
            .complete_node(id, ROOT_NODE, attempt, Some(&ToolOutcome::Result(result::text("ok"))))
            .await
            .expect("complete");
    }
    store
        .create_task(&new_task("cancelled", "alice", "2026-07-28", 200), 60_000, &Limits::default())
        .await
        .expect("create");
    store.cancel_task("cancelled", "alice", "x").await.expect("cancel");
    assert_eq!(store.reap_expired(100).await.expect("reap"), 0, "nothing has expired yet");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(store.reap_expired(100).await.expect("reap"), 2);
    let mut conn = redis.connection().expect("conn");
    let left: Vec<String> =
        redis::cmd("ZRANGE").arg("cv:owner:alice:tasks").arg(0).arg(-1).query(&mut conn).expect("zrange");
    assert_eq!(left, vec!["long".to_owned()], "only the task that still exists is indexed");
    let expiring: usize = redis::cmd("ZCARD").arg("cv:expiring").query(&mut conn).expect("zcard");
    assert_eq!(expiring, 1);
}

#[tokio::test]
async fn the_work_stream_keeps_only_entries_not_yet_done() {
    let (redis, store) = setup().await;
    for id in ["w1", "w2", "w3"] {
        store
            .create_task(&new_task(id, "alice", "2026-07-28", 60_000), 60_000, &Limits::default())
            .await
            .expect("create");
    }
    let mut conn = store.blocking_connection().await.expect("conn");
    let read = Store::read_work(&mut conn, "c1", 2, Duration::from_millis(100)).await.expect("read");
    assert_eq!(read.len(), 2);
    store.ack(&read[0].entry_id).await.expect("ack");
    // w1 done, w2 pending, w3 undelivered: only w1 may go.
    assert_eq!(store.trim_work().await.expect("trim"), 1);
    store.ack(&read[1].entry_id).await.expect("ack");
    assert_eq!(store.trim_work().await.expect("trim"), 1, "w2 done now");
    let mut sync = redis.connection().expect("conn");
    let left: usize = redis::cmd("XLEN").arg("cv:work").query(&mut sync).expect("xlen");
    assert_eq!(left, 1, "the undelivered entry stays");
    let rest = Store::read_work(&mut conn, "c1", 5, Duration::from_millis(100)).await.expect("read");
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].task_id, "w3");
}
