//! The store and its Lua transitions against a real redis-server: every state change is one script
//! over one shard's keys that refuses what would break the status machine, acknowledges (and
//! deletes) the entries it is done with, and keeps the shard's load counters exact.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use conveyor_shared::Store;
use conveyor_shared::call::CallRecord;
use conveyor_shared::events::{CancelNotice, Delivery};
use conveyor_shared::input::{self, InputRequired};
use conveyor_shared::keys::{self, Shard};
use conveyor_shared::model::{
    ROOT_NODE, RpcError, TaskEvent, TaskMode, TaskStatus, ToolOutcome, WorkItem, new_task_id, now_ms, result,
};
use conveyor_shared::store::dead_letters::RetryOptions;
use conveyor_shared::store::{
    AnswerOutcome, Attempt, CancelOutcome, CompleteOutcome, Created, ExpandOutcome, Limits, MaintainOutcome,
    NewTask, NodeStart, Overdue, ParkOutcome, ReclaimOutcome, SlotShares, StartOutcome, TaskIndex,
    WorkReader, WorkerRecord,
};
use conveyor_shared::store::{Gate, GateKind, ReadOutcome, TaskParts, TaskRead};
use conveyor_tests::RedisServer;
use conveyor_tests::process::{nodes_key, shard_of, task_key};
use redis::Commands;
use redis::streams::{StreamPendingCountReply, StreamRangeReply};
use serde_json::{Value, json};

const TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const QUEUES: [&str; 3] = [keys::BUILTIN_QUEUE, "slow_compute", "flaky"];

/// A private redis-server, a store on it with the default 4 shards, and readers of every queue.
struct Harness {
    redis: RedisServer,
    store: Store,
    readers: Vec<WorkReader>,
    /// Entries read but not started yet: looking for one entry must not lose the others.
    unstarted: Vec<WorkItem>,
}

async fn setup() -> Harness {
    let redis = RedisServer::start().expect("redis");
    let store = Store::new(&redis.url(), Duration::from_secs(2)).expect("store");
    let queues: Vec<String> = QUEUES.iter().map(|q| q.to_string()).collect();
    store.ensure_groups(&queues).await.expect("groups");
    let readers = store.work_readers(&queues).await.expect("readers");
    Harness { redis, store, readers, unstarted: Vec::new() }
}

/// A single call of `slow_compute` by alice in `shard`; tests change what they need.
pub(crate) fn new_task(shard: Shard) -> NewTask {
    NewTask {
        task_id: new_task_id(shard),
        owner: "alice".to_owned(),
        tool: "slow_compute".to_owned(),
        call: CallRecord {
            wire: "2026-07-28".to_owned(),
            arguments: json!({"seconds": 1}),
            poll_interval_ms: 500,
            progress_token: Some(json!("tok")),
            ..CallRecord::default()
        },
        ttl_ms: 60_000,
        traceparent: Some(TRACE.to_owned()),
        mode: TaskMode::Task,
        status_message: "Queued".to_owned(),
        created_at_ms: now_ms(),
        graph: None,
        idempotency_key: None,
        queues: Default::default(),
        waiter: None,
        index_retention_ms: 60_000,
        input_responses: None,
        escalable: false,
        call_key: None,
        max_bytes: 0,
        plan_limits: Default::default(),
        input_rounds: false,
    }
}

/// A DAG task in `shard`.
fn dag_task(shard: Shard, graph: Value) -> NewTask {
    let graph = serde_json::from_value(graph).expect("a graph");
    NewTask { tool: "run_dag".to_owned(), graph: Some(graph), ..new_task(shard) }
}

fn ok(text: &str) -> ToolOutcome {
    ToolOutcome::Result(result::text(text))
}

/// In a DAG a tool error is a failed attempt.
fn tool_error() -> ToolOutcome {
    ToolOutcome::Result(result::error_text("boom"))
}

/// The entries of `holder` in `shard`'s streams that have gone unrenewed for `lease`.
async fn lost_entries(h: &Harness, shard: Shard, holder: &str, lease: Duration) -> Vec<WorkItem> {
    let queues: Vec<String> = QUEUES.iter().map(|q| q.to_string()).collect();
    let found = h.store.idle_entries(shard, &queues, Some(holder), lease, 100).await.expect("idle entries");
    found.entries.into_iter().map(|e| e.item).collect()
}

fn run(outcome: StartOutcome) -> Attempt {
    match outcome {
        StartOutcome::Run(start) => start.attempt,
        other => panic!("expected a run, got {other:?}"),
    }
}

impl Harness {
    async fn create(&self, task: &NewTask) -> String {
        assert_eq!(self.store.create_task(task, &Limits::default()).await.expect("create"), Created::Created);
        task.task_id.clone()
    }

    /// Whatever entries no consumer has seen, now delivered to `consumer`.
    async fn read(&mut self, consumer: &str) -> Vec<WorkItem> {
        let mut items = Vec::new();
        for reader in &mut self.readers {
            let (mut read, own_pending) =
                reader.read(&self.store, consumer, 500, Duration::from_millis(50)).await.expect("read");
            if own_pending {
                // A new connection reads its consumer's pending entries first; then what is new.
                read =
                    reader.read(&self.store, consumer, 500, Duration::from_millis(50)).await.expect("read").0;
            }
            items.extend(read);
        }
        items
    }

    /// The entry of a node, read by `w1` now or kept aside from an earlier read.
    async fn item(&mut self, task_id: &str, node_id: &str) -> WorkItem {
        for _ in 0..40 {
            if let Some(i) = self.unstarted.iter().position(|i| i.task_id == task_id && i.node_id == node_id)
            {
                return self.unstarted.remove(i);
            }
            let read = self.read("w1").await;
            self.unstarted.extend(read);
        }
        panic!("no entry of node {node_id} of task {task_id}")
    }

    async fn start_item(&self, item: &WorkItem) -> StartOutcome {
        let mut outcomes = self
            .store
            .start_batch(item.shard, std::slice::from_ref(item), 1, "w1", &SlotShares::unlimited())
            .await
            .expect("start");
        assert_eq!(outcomes.len(), 1);
        outcomes.remove(0)
    }

    async fn start_node(&mut self, task_id: &str, node_id: &str) -> Attempt {
        let item = self.item(task_id, node_id).await;
        run(self.start_item(&item).await)
    }

    async fn start(&mut self, task_id: &str) -> Attempt {
        self.start_node(task_id, ROOT_NODE).await
    }

    /// The retries and expiries of `shard` that are due, as its maintenance sees them.
    async fn due(&self, shard: Shard) -> (Vec<String>, Vec<String>) {
        let MaintainOutcome { retries, expired, .. } =
            self.store.maintain(shard, 100, Duration::from_secs(5), Duration::ZERO).await.expect("maintain");
        (retries, expired)
    }

    /// Waits out a short backoff and queues the shard's due retries again; returns how many.
    async fn promote_retries(&self, shard: Shard) -> usize {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let (retries, _) = self.due(shard).await;
        for member in &retries {
            assert!(self.store.promote_retry(shard, member).await.expect("promote"), "{member}");
        }
        retries.len()
    }

    fn conn(&self) -> redis::Connection {
        self.redis.connection().expect("connection")
    }

    fn load(&self, shard: Shard) -> HashMap<String, i64> {
        self.conn().hgetall(shard.load()).expect("load")
    }

    /// Every shard's load counters, summed field by field.
    fn total_load(&self) -> HashMap<String, i64> {
        let mut total = HashMap::new();
        for shard in self.store.all_shards() {
            for (field, count) in self.load(shard) {
                *total.entry(field).or_default() += count;
            }
        }
        total
    }

    fn xlen(&self, stream: &str) -> usize {
        self.conn().xlen(stream).expect("xlen")
    }

    /// The pending entries of a stream's group: (entry, consumer).
    fn pending(&self, stream: &str) -> Vec<(String, String)> {
        let reply: StreamPendingCountReply =
            self.conn().xpending_count(stream, keys::WORK_GROUP, "-", "+", 1000).expect("xpending");
        reply.ids.into_iter().map(|p| (p.id, p.consumer)).collect()
    }

    fn node_field(&self, task_id: &str, node_id: &str, field: &str) -> Option<String> {
        self.redis.node_field(task_id, node_id, field)
    }

    fn exists(&self, key: &str) -> bool {
        self.conn().exists(key).expect("exists")
    }
}

#[tokio::test]
async fn a_task_settles_once_and_expires_after_its_ttl() {
    let mut h = setup().await;
    let task = NewTask { ttl_ms: 400, ..new_task(Shard(1)) };
    let id = h.create(&task).await;
    let again = h.store.create_task(&task, &Limits::default()).await.expect("create");
    assert_eq!(again, Created::Created, "a create retried after a lost reply finds the task it wrote");
    let other = NewTask { owner: "bob".to_owned(), ..task.clone() };
    let taken = h.store.create_task(&other, &Limits::default()).await.expect("create");
    assert_eq!(taken, Created::IdTaken, "ids are unique");

    // The work entry carries the trace context from the start.
    let entries: StreamRangeReply = h.conn().xrange_all(Shard(1).queue("slow_compute")).expect("xrange");
    assert_eq!(entries.ids.len(), 1, "one entry, however often the create was sent");
    assert_eq!(entries.ids[0].get::<String>("trace").as_deref(), Some(TRACE));

    let attempt = h.start(&id).await;
    assert_eq!(attempt.number, 1);
    assert!(h.store.report_progress(&attempt, 1.0, Some(2.0), Some("half")).await.expect("progress"));
    let got = h.store.get_task(&id).await.expect("get").expect("exists");
    assert_eq!((got.status, got.progress, got.total), (TaskStatus::Working, Some(1.0), Some(2.0)));
    assert_eq!(got.status_message.as_deref(), Some("half"));
    // Numbers that no JSON can carry never reach Lua: the report is refused, the task unchanged.
    for (progress, total) in [(f64::INFINITY, None), (f64::NAN, None), (1.0, Some(f64::INFINITY))] {
        let refused = h.store.report_progress(&attempt, progress, total, None).await;
        assert!(refused.is_err(), "{progress} of {total:?} must be refused");
    }
    let got = h.store.get_task(&id).await.expect("get").expect("readable");
    assert_eq!((got.progress, got.total), (Some(1.0), Some(2.0)));

    let done = h.store.complete(&attempt, Some(&ok("done")), false, 0).await.expect("complete");
    assert_eq!(done, CompleteOutcome::Settled);
    let twice = h.store.complete(&attempt, Some(&ok("again")), false, 0).await.expect("complete");
    assert_eq!(twice, CompleteOutcome::Stale);
    let got = h.store.get_task(&id).await.expect("get").expect("exists");
    assert_eq!(got.status, TaskStatus::Completed);
    assert_eq!(got.result.expect("result")["content"][0]["text"], "done", "the first completion stands");
    assert!(
        !h.store.report_progress(&attempt, 2.0, None, None).await.expect("progress"),
        "no progress after settling"
    );
    assert_eq!(
        h.store.cancel_task(&id, "alice", "x").await.expect("cancel"),
        CancelOutcome::AlreadyTerminal("completed".into())
    );

    conveyor_tests::eventually(Duration::from_secs(5), "the task to expire after its TTL", async || {
        h.store.get_task(&id).await.expect("get").is_none().then_some(())
    })
    .await;
    assert!(h.store.get_nodes(&id).await.expect("nodes").is_empty(), "its nodes expired with it");
}

#[tokio::test]
async fn cancellation_is_final_and_refuses_late_work() {
    let mut h = setup().await;
    let mut new = new_task(Shard(2));
    new.call.wire = "2025-11-25".to_owned();
    let id = h.create(&new).await;
    let attempt = h.start(&id).await;
    assert_eq!(h.store.cancel_task(&id, "bob", "x").await.expect("cancel"), CancelOutcome::Missing);
    assert_eq!(
        h.store.cancel_task(&id, "alice", "Cancelled").await.expect("cancel"),
        CancelOutcome::Cancelled
    );
    assert_eq!(
        h.store.cancel_task(&id, "alice", "again").await.expect("cancel"),
        CancelOutcome::AlreadyTerminal("cancelled".into())
    );
    assert!(!h.store.report_progress(&attempt, 1.0, None, None).await.expect("progress"));
    let late = h.store.complete(&attempt, Some(&ok("late")), false, 0).await.expect("complete");
    assert_eq!(late, CompleteOutcome::TaskAlreadyTerminal);
    let got = h.store.get_task(&id).await.expect("get").expect("exists");
    assert_eq!(got.status, TaskStatus::Cancelled, "cancelled stays cancelled even when the work finishes");
    assert!(got.result.is_none());

    // A queued node of a cancelled task never starts: its entry goes with the cancel (a lean
    // entry would run from its delivery). Nor does a node of a task that never was.
    let queued = h.create(&new_task(Shard(2))).await;
    let other = h.create(&new_task(Shard(2))).await;
    h.store.cancel_task(&queued, "alice", "x").await.expect("cancel");
    let item = h.item(&other, ROOT_NODE).await;
    assert!(h.unstarted.iter().all(|i| i.task_id != queued), "a cancelled task's entry was read");
    let stale = WorkItem { task_id: queued.clone(), ..item.clone() };
    assert!(matches!(h.start_item(&stale).await, StartOutcome::Skip(_)));
    let nope = WorkItem { task_id: new_task_id(Shard(2)), entry_id: "0-1".to_owned(), ..item };
    assert!(matches!(h.start_item(&nope).await, StartOutcome::Skip(_)));
}

#[tokio::test]
async fn every_cancel_listener_of_a_process_hears_every_cancel() {
    // `conveyor up --workers 2` runs two workers on one store: each must hear the cancels, since
    // either may hold the cancelled task's running node.
    let h = setup().await;
    let hub = h.store.events().await.expect("hub");
    let mut first = hub.cancel_notices();
    let mut second = hub.cancel_notices();
    let id = h.create(&new_task(Shard(1))).await;
    h.store.cancel_task(&id, "alice", "x").await.expect("cancel");
    for listener in [&mut first, &mut second] {
        let notice = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                match listener.recv().await.expect("hub alive") {
                    CancelNotice::Task(task) => return task,
                    CancelNotice::Resync | CancelNotice::Maintain(_) => continue,
                }
            }
        })
        .await
        .expect("every listener hears the cancel");
        assert_eq!(notice, id);
    }
    // A listener whose worker stopped is let go; the others still hear.
    drop(first);
    let again = h.create(&new_task(Shard(1))).await;
    h.store.cancel_task(&again, "alice", "x").await.expect("cancel");
    let heard = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let CancelNotice::Task(task) = second.recv().await.expect("hub alive") {
                return task;
            }
        }
    })
    .await
    .expect("the remaining listener hears");
    assert_eq!(heard, again);
}

#[tokio::test]
async fn a_stale_attempt_cannot_complete_after_the_node_was_handed_back() {
    let mut h = setup().await;
    let id = h.create(&new_task(Shard(3))).await;
    let first = h.start(&id).await;
    assert!(h.store.release(&first).await.expect("release"));
    assert!(!h.store.release(&first).await.expect("release"), "released once");
    let second = h.start(&id).await;
    assert_eq!(second.number, first.number + 1);
    assert_ne!(second.entry_id, first.entry_id, "the node went back under a new entry");
    let stale = h.store.complete(&first, Some(&ok("stale")), false, 0).await.expect("complete");
    assert_eq!(stale, CompleteOutcome::Stale);
    assert!(
        !h.store.report_progress(&first, 1.0, None, None).await.expect("progress"),
        "stale progress refused"
    );
    let boom = ToolOutcome::Error(RpcError { code: -32603, message: "boom".into(), data: None });
    assert_eq!(
        h.store.complete(&second, Some(&boom), false, 0).await.expect("complete"),
        CompleteOutcome::Settled
    );
    let got = h.store.get_task(&id).await.expect("get").expect("exists");
    assert_eq!(got.status, TaskStatus::Failed);
    assert_eq!(got.error.expect("error").message, "boom");
}

#[tokio::test]
async fn a_tool_error_fails_a_2025_task_and_completes_a_2026_one() {
    let mut h = setup().await;
    for (wire, expected) in [("2025-11-25", TaskStatus::Failed), ("2026-07-28", TaskStatus::Completed)] {
        let mut new = new_task(Shard(0));
        new.call.wire = wire.to_owned();
        let id = h.create(&new).await;
        let attempt = h.start(&id).await;
        let error = ToolOutcome::Result(result::error_text("nope"));
        h.store.complete(&attempt, Some(&error), false, 0).await.expect("complete");
        let got = h.store.get_task(&id).await.expect("get").expect("exists");
        assert_eq!(got.status, expected, "{wire}");
        assert_eq!(got.result.expect("result")["isError"], true);
    }
}

fn answers(value: Value) -> serde_json::Map<String, Value> {
    value.as_object().expect("an object").clone()
}

#[tokio::test]
async fn a_call_waiting_in_a_round_its_client_was_told_of_holds_no_live_slot_and_its_rounds_are_bounded() {
    let mut h = setup().await;
    let s = Shard(0);
    // Shard 0's shares: one live task of alice's, two rounds.
    let limits =
        Limits { max_live_per_principal: 4, max_parked_rounds_per_principal: 8, ..Limits::default() };
    let round = || NewTask { mode: TaskMode::Sync, input_rounds: true, ..new_task(s) };
    let ask = InputRequired::new().ask("ok", input::elicit_form("go on?", json!({"type": "object"})));
    let live = |h: &Harness| {
        let load = h.load(s);
        (load.get("live:alice").copied().unwrap_or(0), load.get("rounds:alice").copied().unwrap_or(0))
    };
    let mut calls = Vec::new();
    for asked in 1..=3 {
        // Each call is admitted although alice's share of live tasks is one: the rounds before it
        // wait for answers her client may never send, and hold no live slot.
        let call = round();
        assert_eq!(
            h.store.create_task(&call, &limits).await.expect("create"),
            Created::Created,
            "call {asked}"
        );
        let attempt = h.start(&call.task_id).await;
        assert_eq!(h.store.park(&attempt, &ask).await.expect("park"), ParkOutcome::Parked);
        calls.push(call.task_id);
        assert_eq!(live(&h), (0, asked.min(2)), "after call {asked}");
    }
    // The third round passed the two alice may leave waiting here: the oldest ended.
    let oldest = h.store.get_task(&calls[0]).await.expect("get").expect("exists");
    assert_eq!(oldest.status, TaskStatus::Cancelled);
    assert!(
        oldest.status_message.as_deref().is_some_and(|m| m.contains("max_parked_rounds_per_principal")),
        "{oldest:?}"
    );
    let answer = answers(json!({"ok": {"action": "accept", "content": {}}}));
    assert_eq!(
        h.store.answer_input(&calls[0], "alice", &answer, &Default::default()).await.expect("answer"),
        AnswerOutcome::NotWaiting("cancelled".into())
    );
    // An answered round holds a live slot again; a round that ends otherwise leaves the rounds.
    assert_eq!(
        h.store.answer_input(&calls[1], "alice", &answer, &Default::default()).await.expect("answer"),
        AnswerOutcome::Answered { remaining: 0, resumed: 1 }
    );
    assert_eq!(live(&h), (1, 1));
    h.store.cancel_task(&calls[2], "alice", "Cancelled by the client").await.expect("cancel");
    assert_eq!(live(&h), (1, 0));
    // A task's rounds are the client's to see and answer: it holds its live slot while it waits.
    let task = NewTask { input_rounds: false, ..new_task(Shard(1)) };
    assert_eq!(h.store.create_task(&task, &limits).await.expect("create"), Created::Created);
    let attempt = h.start(&task.task_id).await;
    assert_eq!(h.store.park(&attempt, &ask).await.expect("park"), ParkOutcome::Parked);
    assert_eq!(h.load(Shard(1)).get("live:alice").copied(), Some(1));
}

#[tokio::test]
async fn a_parked_node_frees_its_entry_and_resumes_with_its_answers_once_all_are_in() {
    let mut h = setup().await;
    let s = Shard(1);
    let id = h.create(&new_task(s)).await;
    let attempt = h.start(&id).await;
    // An empty array in a request must reach the client as an array: the scripts never decode it.
    let schema = json!({"type": "object", "properties": {}, "required": []});
    let input = InputRequired::new()
        .ask("a", input::elicit_form("first?", schema.clone()))
        .ask("b", input::elicit_form("second?", schema))
        .with_state(json!({"step": 1}));
    assert_eq!(h.store.park(&attempt, &input).await.expect("park"), ParkOutcome::Parked);
    let got = h.store.get_task(&id).await.expect("get").expect("exists");
    assert_eq!(got.status, TaskStatus::InputRequired);
    let pending = got.input_requests.expect("pending");
    assert_eq!(pending["a"]["params"]["requestedSchema"]["required"], json!([]), "{pending}");
    assert!(h.pending(&s.queue("slow_compute")).is_empty(), "the parked node holds no entry");
    assert_eq!(h.node_field(&id, ROOT_NODE, "status").as_deref(), Some("parked"));
    assert_eq!(h.store.park(&attempt, &input).await.expect("park"), ParkOutcome::Stale, "a park is fenced");

    let first = answers(json!({"a": {"action": "accept", "content": {"v": 1}}, "zzz": {"ignored": true}}));
    assert_eq!(
        h.store.answer_input(&id, "bob", &first, &Default::default()).await.expect("answer"),
        AnswerOutcome::Denied
    );
    assert_eq!(
        h.store.answer_input(&id, "alice", &first, &Default::default()).await.expect("answer"),
        AnswerOutcome::Answered { remaining: 1, resumed: 0 }
    );
    let got = h.store.get_task(&id).await.expect("get").expect("exists");
    assert_eq!(got.status, TaskStatus::InputRequired);
    assert_eq!(got.input_requests.expect("pending").as_object().expect("map").len(), 1, "only b is pending");
    let last = answers(json!({"b": {"action": "decline"}}));
    assert_eq!(
        h.store.answer_input(&id, "alice", &last, &Default::default()).await.expect("answer"),
        AnswerOutcome::Answered { remaining: 0, resumed: 1 }
    );
    assert_eq!(h.store.get_task(&id).await.expect("get").expect("exists").status, TaskStatus::Working);
    assert_eq!(
        h.store.answer_input(&id, "alice", &last, &Default::default()).await.expect("answer"),
        AnswerOutcome::NotWaiting("working".into())
    );

    // The node runs again as a new attempt with both answers by its own keys, and its state.
    let item = h.item(&id, ROOT_NODE).await;
    match h.start_item(&item).await {
        StartOutcome::Run(start) => {
            let NodeStart { attempt, answers, state, .. } = *start;
            assert_eq!(attempt.number, 2);
            assert_eq!(answers["a"]["content"]["v"], 1);
            assert_eq!(answers["b"]["action"], "decline");
            assert!(!answers.contains_key("zzz"), "{answers:?}");
            assert_eq!(state, Some(json!({"step": 1})));
        }
        other => panic!("expected a run, got {other:?}"),
    }
}

#[tokio::test]
async fn listing_pages_through_an_owners_tasks_only() {
    let h = setup().await;
    // Many tasks in one millisecond, across every shard: pages must neither skip nor repeat any.
    let created_at_ms = now_ms();
    let mut created = Vec::new();
    for i in 0..250 {
        created.push(h.create(&NewTask { created_at_ms, ..new_task(Shard(i % 4)) }).await);
    }
    h.create(&NewTask { owner: "bob".to_owned(), ..new_task(Shard(0)) }).await;
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = h
            .store
            .list_tasks(TaskIndex::Owner("alice"), cursor.as_deref(), 50)
            .await
            .expect("list")
            .expect("valid cursor");
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
    created.sort();
    assert_eq!(listed, 250, "every task exactly once");
    assert_eq!(seen, created, "alice's tasks, none of bob's");
    assert!(
        h.store.list_tasks(TaskIndex::Owner("alice"), Some("garbage"), 50).await.expect("list").is_err(),
        "a bad cursor is an error"
    );
}

#[tokio::test]
async fn a_task_with_a_short_retention_does_not_trim_its_owners_index() {
    let h = setup().await;
    let first = h.create(&new_task(Shard(0))).await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    // An operator's retry of a dead letter keeps its own task indexed for a short while only.
    h.create(&NewTask { index_retention_ms: 10, ..new_task(Shard(0)) }).await;
    let page =
        h.store.list_tasks(TaskIndex::Owner("alice"), None, 50).await.expect("list").expect("valid cursor");
    assert!(page.tasks.iter().any(|t| t.task_id == first), "the first task left its owner's index");
    let ttl: i64 = h.conn().pttl(Shard(0).owner_tasks("alice")).expect("pttl");
    assert!(ttl > 30_000, "the index now expires in {ttl} ms");
}

#[tokio::test]
async fn a_call_that_may_become_a_task_stays_indexed_until_it_does() {
    let mut h = setup().await;
    let id = h.create(&NewTask { mode: TaskMode::Sync, escalable: true, ..new_task(Shard(1)) }).await;
    // Listings before it escalates (the web view lists every tick) do not show it, nor forget it.
    for _ in 0..2 {
        let page = h
            .store
            .list_tasks(TaskIndex::Owner("alice"), None, 50)
            .await
            .expect("list")
            .expect("valid cursor");
        assert!(page.tasks.is_empty(), "a synchronous call is not listed: {:?}", page.tasks);
        assert!(h.store.newest_tasks(TaskIndex::Owner("alice"), 10).await.expect("newest").is_empty());
    }
    let attempt = h.start(&id).await;
    assert!(h.store.escalate(&attempt, "Working").await.expect("escalate"));
    let page =
        h.store.list_tasks(TaskIndex::Owner("alice"), None, 50).await.expect("list").expect("valid cursor");
    assert_eq!(page.tasks.iter().map(|t| t.task_id.as_str()).collect::<Vec<_>>(), vec![id.as_str()]);
}

#[tokio::test]
async fn times_are_redis_s_whatever_the_callers_clocks_say() {
    let mut h = setup().await;
    // A gateway whose clock runs ten minutes behind creates a task with a one-minute TTL: it is
    // created now by Redis's clock, so the worker runs it rather than dropping it as expired.
    let behind = now_ms() - 10 * 60_000;
    let mut new = NewTask { created_at_ms: behind, ..new_task(Shard(3)) };
    let created = h.store.create_task_spread(&mut new, &Limits::default(), |_, _| {}).await.expect("create");
    assert_eq!(created, Created::Created);
    let redis_now = {
        let (seconds, micros): (u64, u64) = redis::cmd("TIME").query(&mut h.conn()).expect("TIME");
        seconds * 1000 + micros / 1000
    };
    assert!(
        redis_now.abs_diff(new.created_at_ms) < 5_000,
        "created at {} by Redis's {redis_now}",
        new.created_at_ms
    );
    let task = h.store.get_task(&new.task_id).await.expect("get").expect("the task is live");
    assert_eq!(task.created_at_ms, new.created_at_ms, "the creation time the caller was handed back");
    let attempt = h.start(&new.task_id).await;
    let done = h.store.complete(&attempt, Some(&ok("ran")), false, 0).await.expect("complete");
    assert_eq!(done, CompleteOutcome::Settled);
}

#[tokio::test]
async fn an_owner_without_tasks_gets_an_empty_page() {
    let h = setup().await;
    let page =
        h.store.list_tasks(TaskIndex::Owner("nobody"), None, 50).await.expect("list").expect("no cursor");
    assert!(page.tasks.is_empty() && page.next_cursor.is_none());
}

#[tokio::test]
async fn a_completion_from_an_attempt_that_was_already_retried_is_refused() {
    let mut h = setup().await;
    let graph = json!({"nodes": [{"id": "f", "tool": "flaky", "retries": 2, "backoffMs": 1}]});
    let id = h.create(&dag_task(Shard(2), graph)).await;
    let first = h.start_node(&id, "f").await;
    let failed = h.store.complete(&first, Some(&tool_error()), false, 0).await.expect("complete");
    assert!(matches!(failed, CompleteOutcome::Retry { .. }), "{failed:?}");
    assert_eq!(h.promote_retries(Shard(2)).await, 1);
    let second = h.start_node(&id, "f").await;
    assert_eq!(second.number, first.number + 1);
    // The first attempt's worker was slow and reports success late: refused.
    let late = h.store.complete(&first, Some(&ok("late")), false, 0).await.expect("complete");
    assert_eq!(late, CompleteOutcome::Stale);
    let fresh = h.store.complete(&second, Some(&ok("fresh")), false, 0).await.expect("complete");
    assert_eq!(fresh, CompleteOutcome::Finalize);
    let nodes = h.store.get_nodes(&id).await.expect("nodes");
    assert_eq!(nodes[0].output.as_ref().expect("output")["content"][0]["text"], "fresh");
}

#[tokio::test]
async fn an_idempotency_key_returns_the_first_task_and_refuses_a_different_call() {
    let h = setup().await;
    // A gateway puts an idempotent call in the shard its key names, so that a retry finds it.
    let keyed = |owner: &str| NewTask {
        owner: owner.to_owned(),
        idempotency_key: Some("order-42".to_owned()),
        ..new_task(keys::shard_of_key(owner, "order-42", h.store.shards()))
    };
    let first = h.create(&keyed("alice")).await;
    let retry = keyed("alice");
    assert_eq!(
        h.store.create_task(&retry, &Limits::default()).await.expect("create"),
        Created::Duplicate(first.clone())
    );
    assert!(h.store.get_task(&retry.task_id).await.expect("get").is_none(), "nothing written for the retry");
    let mut different = keyed("alice");
    different.call.arguments = json!({"seconds": 99});
    assert_eq!(
        h.store.create_task(&different, &Limits::default()).await.expect("create"),
        Created::Conflict(first)
    );
    // Keys are per owner.
    h.create(&keyed("bob")).await;
    let queued: usize = h.store.all_shards().map(|s| h.xlen(&s.queue("slow_compute"))).sum();
    assert_eq!(queued, 2, "only the two real tasks were queued");
}

#[tokio::test]
async fn overload_limits_refuse_new_work_and_free_up_as_work_moves() {
    let mut h = setup().await;
    let s = Shard(0);
    let store = h.store.clone();
    let create = move |task: NewTask, limits: Limits| {
        let store = store.clone();
        async move { store.create_task(&task, &limits).await.expect("create") }
    };
    // Each of the 4 shards enforces a quarter of a limit: 8 queued nodes are 2 per shard.
    let queued = Limits { max_queued: 8, ..Limits::default() };
    let q1 = new_task(s);
    let q2 = new_task(s);
    assert_eq!(create(q1.clone(), queued).await, Created::Created);
    assert_eq!(create(q2.clone(), queued).await, Created::Created);
    let q3 = new_task(s);
    match create(q3.clone(), queued).await {
        Created::OverLimit(hit) => {
            assert_eq!((hit.limit.as_str(), hit.current, hit.max), ("queued_nodes", 2, 2))
        }
        other => panic!("expected the queue limit, got {other:?}"),
    }
    assert!(h.store.get_task(&q3.task_id).await.expect("get").is_none(), "nothing written over the limit");
    h.start(&q1.task_id).await; // one node leaves the queue
    assert_eq!(create(q3.clone(), queued).await, Created::Created);

    let per_tool = Limits { max_queued_per_tool: 8, ..Limits::default() };
    match create(new_task(s), per_tool).await {
        Created::OverLimit(hit) => {
            assert_eq!(hit.limit, "queued_nodes_per_tool");
            assert_eq!(hit.tool.as_deref(), Some("slow_compute"));
        }
        other => panic!("expected the per-tool limit, got {other:?}"),
    }

    let live = Limits { max_live_per_principal: 12, ..Limits::default() };
    let l1 = new_task(s);
    match create(l1.clone(), live).await {
        Created::OverLimit(hit) => {
            assert_eq!((hit.limit.as_str(), hit.current, hit.max), ("live_tasks_per_principal", 3, 3))
        }
        other => panic!("expected the live limit, got {other:?}"),
    }
    let b1 = NewTask { owner: "bob".to_owned(), ..new_task(s) };
    assert_eq!(create(b1, live).await, Created::Created, "per principal");
    h.store.cancel_task(&q2.task_id, "alice", "x").await.expect("cancel");
    let attempt = h.start(&q3.task_id).await;
    h.store.complete(&attempt, Some(&ok("ok")), false, 0).await.expect("complete");
    assert_eq!(create(l1, live).await, Created::Created);

    // The counters follow the work: q1 running, l1 and b1 queued; q2's node left the queue
    // counts when it was cancelled, and its entry, dropped when read, changes nothing.
    let load = h.load(s);
    assert_eq!(load["queued"], 2, "{load:?}");
    assert_eq!(load["live:alice"], 2, "q1 and l1: {load:?}");
    let item = h.item(&q2.task_id, ROOT_NODE).await;
    assert!(matches!(h.start_item(&item).await, StartOutcome::Skip(_)));
    let load = h.load(s);
    assert_eq!(load["queued"], 2, "{load:?}");
}

#[tokio::test]
async fn owner_indexes_lose_tasks_when_their_keys_expire() {
    let mut h = setup().await;
    let mut ids = HashMap::new();
    for (name, shard, ttl_ms) in [("short", Shard(0), 200), ("long", Shard(1), 60_000)] {
        let id = h.create(&NewTask { ttl_ms, ..new_task(shard) }).await;
        let attempt = h.start(&id).await;
        h.store.complete(&attempt, Some(&ok("ok")), false, 0).await.expect("complete");
        ids.insert(name, id);
    }
    let cancelled = h.create(&NewTask { ttl_ms: 200, ..new_task(Shard(2)) }).await;
    h.store.cancel_task(&cancelled, "alice", "x").await.expect("cancel");
    let abandoned = h.create(&NewTask { ttl_ms: 200, ..new_task(Shard(3)) }).await;
    for shard in h.store.all_shards() {
        assert!(h.due(shard).await.1.is_empty(), "nothing has expired yet");
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    // Settled tasks left the expiry index when they settled (their keys expire by themselves);
    // only the unsettled one is left for maintenance.
    let mut expired = Vec::new();
    for shard in h.store.all_shards() {
        for id in h.due(shard).await.1 {
            assert!(h.store.expire_task(shard, &id).await.expect("expire"));
            expired.push(id);
        }
    }
    assert_eq!(expired, vec![abandoned]);
    let page =
        h.store.list_tasks(TaskIndex::Owner("alice"), None, 50).await.expect("list").expect("no cursor");
    let listed: Vec<String> = page.tasks.into_iter().map(|t| t.task_id).collect();
    assert_eq!(listed, vec![ids["long"].clone()]);
    let mut conn = h.conn();
    let mut left = Vec::new();
    let mut expiring = 0;
    for shard in h.store.all_shards() {
        let index: Vec<String> = conn.zrange(shard.owner_tasks("alice"), 0, -1).expect("zrange");
        left.extend(index);
        expiring += conn
            .zcount::<_, _, _, usize>(shard.expiring(), "-inf", format!("({}", keys::INDEX_PIN_SCORE))
            .expect("zcount");
    }
    assert_eq!(left, vec![ids["long"].clone()], "only the task that still exists is indexed");
    assert_eq!(expiring, 0, "no unsettled task is left");
}

#[tokio::test]
async fn the_work_stream_keeps_only_entries_not_yet_done() {
    let mut h = setup().await;
    let s = Shard(1);
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(h.create(&new_task(s)).await);
    }
    let stream = s.queue("slow_compute");
    let first = h.start(&ids[0]).await;
    let second = h.start(&ids[1]).await;
    assert_eq!(h.xlen(&stream), 3, "started entries stay until their attempt is done");
    h.store.complete(&first, Some(&ok("ok")), false, 0).await.expect("complete");
    assert_eq!(h.xlen(&stream), 2, "a completion acknowledges and deletes its entry");
    h.store.complete(&second, Some(&ok("ok")), false, 0).await.expect("complete");
    let entries: StreamRangeReply = h.conn().xrange_all(&stream).expect("xrange");
    let left: Vec<String> = entries.ids.iter().filter_map(|e| e.get("task")).collect();
    assert_eq!(left, vec![ids[2].clone()], "the entry not yet done stays");
    let third = h.start(&ids[2]).await;
    h.store.complete(&third, Some(&ok("ok")), false, 0).await.expect("complete");
    assert_eq!(h.xlen(&stream), 0);
    assert!(h.pending(&stream).is_empty());
}

/// `complete_node` calls Redis has run so far.
fn complete_node_calls(h: &Harness) -> u64 {
    let stats: String = redis::cmd("INFO").arg("commandstats").query(&mut h.conn()).expect("info");
    stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn completions_that_come_together_settle_in_one_batch_each_as_if_alone() {
    let mut h = setup().await;
    let s = Shard(1);
    let mut attempts = Vec::new();
    for _ in 0..20 {
        let id = h.create(&new_task(s)).await;
        attempts.push(h.start(&id).await);
    }
    // The first attempt twice: the second of the pair is stale, whatever batch it lands in.
    let repeated = attempts[0].clone();
    let done = ok("done");
    let before = complete_node_calls(&h);
    let outcomes = futures::future::join_all(
        attempts.iter().chain(std::iter::once(&repeated)).map(|a| h.store.complete(a, Some(&done), false, 0)),
    )
    .await;
    let calls = complete_node_calls(&h) - before;
    let outcomes: Vec<CompleteOutcome> = outcomes.into_iter().map(|o| o.expect("complete")).collect();
    assert_eq!(outcomes[..20], vec![CompleteOutcome::Settled; 20][..], "{outcomes:?}");
    assert_eq!(outcomes[20], CompleteOutcome::Stale);
    assert!(calls <= 2, "21 completions took {calls} script calls");
    for a in &attempts {
        let status: Option<String> = h.conn().hget(task_key(&a.task_id), "status").expect("hget");
        assert_eq!(status.as_deref(), Some("completed"));
    }
}

#[tokio::test]
async fn a_graph_node_starts_with_its_own_arguments_and_not_the_whole_graph() {
    let mut h = setup().await;
    let s = Shard(1);
    let graph = json!({"nodes": [
        {"id": "a", "tool": "slow_compute", "arguments": {"seconds": 2}},
        {"id": "b", "tool": "slow_compute", "arguments": {"seconds": 3}, "dependsOn": ["a"]},
    ]});
    let mut task = dag_task(s, graph.clone());
    task.call.arguments = graph;
    let id = h.create(&task).await;
    let item = h.item(&id, "a").await;
    let StartOutcome::Run(start) = h.start_item(&item).await else { panic!("node a did not start") };
    assert_eq!(start.node_arguments, Some(json!({"seconds": 2})));
    // Every node start hands its worker the call record: a record that held the graph would cost
    // each node the whole graph.
    assert_eq!(start.call.arguments, Value::Null, "{:?}", start.call);
    assert_eq!(start.call.wire, "2026-07-28");
    let stored: String = h.conn().hget(task_key(&id), "call").expect("a call record");
    assert!(!stored.contains("slow_compute"), "the stored record holds the graph: {stored}");
}

#[tokio::test]
async fn a_reclaimed_entry_that_is_not_the_nodes_current_one_is_dropped_and_fences_nothing() {
    let mut h = setup().await;
    let s = Shard(3);
    let graph = json!({"nodes": [{"id": "f", "tool": "flaky", "retries": 2, "backoffMs": 1}]});
    let id = h.create(&dag_task(s, graph)).await;
    let old_item = h.item(&id, "f").await;
    let first = run(h.start_item(&old_item).await);
    let failed = h.store.complete(&first, Some(&tool_error()), false, 0).await.expect("complete");
    assert!(matches!(failed, CompleteOutcome::Retry { .. }), "{failed:?}");
    assert_eq!(h.promote_retries(s).await, 1);
    let second = h.start_node(&id, "f").await;
    assert_eq!(second.number, 2);

    // The first entry turns up again (say a reply was lost and maintenance saw it): it is not the
    // node's current entry, so it is dropped and the running attempt is untouched.
    let reclaimed = h.store.reclaim(&old_item, Duration::ZERO).await.expect("reclaim");
    assert!(matches!(reclaimed, ReclaimOutcome::Dropped(_)), "{reclaimed:?}");
    assert_eq!(h.node_field(&id, "f", "status").as_deref(), Some("running"));
    assert_eq!(h.node_field(&id, "f", "attempt").as_deref(), Some("2"));
    assert_eq!(h.node_field(&id, "f", "losses"), None, "no worker was lost");
    let done = h.store.complete(&second, Some(&ok("fine")), false, 0).await.expect("complete");
    assert_eq!(done, CompleteOutcome::Finalize);

    let (flaky, builtin) = (s.queue("flaky"), s.queue(keys::BUILTIN_QUEUE));
    assert!(h.pending(&flaky).is_empty(), "acknowledged inside the scripts: {:?}", h.pending(&flaky));
    assert!(h.pending(&builtin).is_empty());
    assert_eq!((h.xlen(&flaky), h.xlen(&builtin)), (0, 1), "only the finalize entry is left");
}

#[tokio::test]
async fn a_graph_node_that_asks_lets_the_others_run_and_its_rounds_do_not_spend_its_retries() {
    let mut h = setup().await;
    let s = Shard(2);
    let graph = json!({"nodes": [
        {"id": "a", "tool": "slow_compute"},
        {"id": "c", "tool": "flaky", "retries": 1, "backoffMs": 1},
    ]});
    let id = h.create(&dag_task(s, graph)).await;
    let c = h.start_node(&id, "c").await;
    let ask = InputRequired::new().ask("k", input::elicit_form("which?", json!({"type": "object"})));
    assert_eq!(h.store.park(&c, &ask).await.expect("park"), ParkOutcome::Parked);
    let got = h.store.get_task(&id).await.expect("get").expect("exists");
    assert_eq!(got.status, TaskStatus::InputRequired);
    assert!(got.input_requests.expect("pending").get("c/k").is_some(), "a graph's keys name their node");

    // The question is c's: the task's other nodes go on.
    let a = h.start_node(&id, "a").await;
    assert_eq!(a.number, 1);
    let answer = answers(json!({"c/k": {"action": "accept", "content": {}}}));
    assert_eq!(
        h.store.answer_input(&id, "alice", &answer, &Default::default()).await.expect("answer"),
        AnswerOutcome::Answered { remaining: 0, resumed: 1 }
    );
    let again = h.start_node(&id, "c").await;
    assert_eq!(again.number, 2, "the resumed node runs as a new attempt");
    // That attempt fails: the round of input was not a failed try, so its one retry is left.
    let failed = h.store.complete(&again, Some(&tool_error()), false, 0).await.expect("complete");
    assert!(matches!(failed, CompleteOutcome::Retry { .. }), "{failed:?}");
    assert_eq!(h.promote_retries(s).await, 1);
    assert_eq!(h.start_node(&id, "c").await.number, 3);
}

#[tokio::test]
async fn an_unsettled_task_expires_when_its_ttl_from_creation_runs_out_and_gives_back_its_load() {
    let mut h = setup().await;
    let s = Shard(1);
    let queued = h.create(&NewTask { ttl_ms: 300, ..new_task(s) }).await;
    let running = h.create(&NewTask { ttl_ms: 300, ..new_task(s) }).await;
    let attempt = h.start(&running).await;
    let load = h.load(s);
    assert_eq!((load["queued"], load["live:alice"]), (1, 2), "{load:?}");
    tokio::time::sleep(Duration::from_millis(400)).await;

    for id in [&queued, &running] {
        assert!(h.store.get_task(id).await.expect("get").is_none(), "past its TTL a task does not exist");
    }
    let (_, expired) = h.due(s).await;
    assert_eq!(expired.iter().collect::<BTreeSet<_>>(), BTreeSet::from([&queued, &running]));
    for id in &expired {
        assert!(h.store.expire_task(s, id).await.expect("expire"));
        assert!(!h.store.expire_task(s, id).await.expect("expire"), "a task expires once");
    }
    let load = h.load(s);
    let count = |field: &str| load.get(field).copied().unwrap_or(0);
    assert_eq!(
        (count("queued"), count("queued:slow_compute"), count("live:alice")),
        (0, 0, 0),
        "the expired tasks gave back their load: {load:?}"
    );
    let per_owner_or_tool: Vec<&String> = load.keys().filter(|field| field.contains(':')).collect();
    assert!(per_owner_or_tool.is_empty(), "fields of owners and tools without work are kept: {load:?}");
    for id in [&queued, &running] {
        assert!(!h.exists(&task_key(id)) && !h.exists(&nodes_key(id)), "the keys of {id} are gone");
    }
    let leftover = h.item(&queued, ROOT_NODE).await;
    assert!(matches!(h.start_item(&leftover).await, StartOutcome::Skip(_)));
    let late = h.store.complete(&attempt, Some(&ok("late")), false, 0).await.expect("complete");
    assert_eq!(late, CompleteOutcome::Stale, "the running attempt of an expired task has nothing to settle");
    assert_eq!(h.load(s), load, "nothing moved the counters afterwards");
}

#[tokio::test]
async fn load_counters_never_drift() {
    let mut h = setup().await;
    let never_negative = |h: &Harness| {
        for shard in h.store.all_shards() {
            for (field, count) in h.load(shard) {
                assert!(count >= 0, "{field} of shard {shard} went negative: {count}");
            }
        }
    };
    let check = |h: &Harness, queued: i64, live: i64| {
        never_negative(h);
        let load = h.total_load();
        let count = |field: &str| load.get(field).copied().unwrap_or(0);
        assert_eq!((count("queued"), count("queued:slow_compute")), (queued, queued), "{load:?}");
        assert_eq!(count("live:alice"), live, "{load:?}");
    };
    let mut ids = Vec::new();
    for i in 0..8 {
        ids.push(h.create(&new_task(Shard(i % 4))).await);
    }
    check(&h, 8, 8);

    // Cancelled while queued: the counts drop at once.
    for id in &ids[..2] {
        h.store.cancel_task(id, "alice", "x").await.expect("cancel");
    }
    check(&h, 6, 6);
    for id in &ids[2..4] {
        let attempt = h.start(id).await;
        h.store.complete(&attempt, Some(&ok("ok")), false, 0).await.expect("complete");
    }
    check(&h, 4, 4);
    let handed_back = h.start(&ids[4]).await;
    check(&h, 3, 4);
    assert!(h.store.release(&handed_back).await.expect("release"));
    check(&h, 4, 4);

    // Everything left, a batch per shard; the cancelled ones' entries went with their cancels.
    let mut by_shard: HashMap<Shard, Vec<WorkItem>> = HashMap::new();
    for id in &ids[4..] {
        let item = h.item(id, ROOT_NODE).await;
        by_shard.entry(item.shard).or_default().push(item);
    }
    let (mut runs, mut skips) = (0, 0);
    for (shard, items) in &by_shard {
        for outcome in h
            .store
            .start_batch(*shard, items, items.len(), "w1", &SlotShares::unlimited())
            .await
            .expect("start")
        {
            match outcome {
                StartOutcome::Run { .. } => runs += 1,
                StartOutcome::Skip(_) => skips += 1,
                other => panic!("every item had a slot, with no share: {other:?}"),
            }
        }
        never_negative(&h);
    }
    assert_eq!((runs, skips), (4, 0));
    assert!(h.unstarted.iter().all(|i| !ids[..2].contains(&i.task_id)), "a cancelled task's entry was read");
    check(&h, 0, 4);
}

#[tokio::test]
async fn a_worker_whose_node_was_taken_over_learns_it_lost_the_node() {
    let mut h = setup().await;
    let id = h.create(&new_task(Shard(0))).await;
    let attempt = h.start(&id).await;
    let (shard, stream) = (shard_of(&id), Shard(0).queue("slow_compute"));
    assert_eq!(attempt.stream, stream);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let lease = Duration::from_millis(50);
    let claimed = lost_entries(&h, shard, "w1", lease).await;
    assert_eq!(claimed.iter().map(|i| &i.entry_id).collect::<Vec<_>>(), vec![&attempt.entry_id]);
    let reclaimed = h.store.reclaim(&claimed[0], lease).await.expect("reclaim");
    let ReclaimOutcome::Requeued { losses: 1, lost: Some(lost) } = reclaimed else {
        panic!("not requeued after one loss: {reclaimed:?}")
    };
    // What the lost worker was running, for the span the taking-over worker writes for it.
    assert_eq!((lost.tool.as_str(), lost.attempt, lost.worker.as_str()), ("slow_compute", 1, "w1"));
    assert!(lost.started_ms > 0);

    let held = [(stream.clone(), attempt.entry_id.clone())];
    assert_eq!(h.store.renew_leases("w1", &held).await.expect("renew"), held.to_vec());
    let late = h.store.complete(&attempt, Some(&ok("late")), false, 0).await.expect("complete");
    assert_eq!(late, CompleteOutcome::Stale);
    let item = h.item(&id, ROOT_NODE).await;
    match h.start_item(&item).await {
        StartOutcome::Run(start) => assert_eq!((start.attempt.number, start.losses), (2, 1)),
        other => panic!("expected a run, got {other:?}"),
    }
}

#[tokio::test]
async fn a_lost_workers_unrenewed_entries_are_found_among_many_it_renewed() {
    let mut h = setup().await;
    let s = Shard(0);
    for _ in 0..300 {
        h.create(&new_task(s)).await;
    }
    let mut items = Vec::new();
    while items.len() < 300 {
        let read = h.read("w1").await;
        assert!(!read.is_empty(), "{} of 300 entries read", items.len());
        items.extend(read);
    }
    let stream = s.queue("slow_compute");
    assert_eq!(h.pending(&stream).len(), 300);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let live: Vec<(String, String)> =
        items[..290].iter().map(|i| (i.stream.clone(), i.entry_id.clone())).collect();
    assert!(h.store.renew_leases("w1", &live).await.expect("renew").is_empty());

    // A page of 20 finds the 10 entries left unrenewed behind the 290 renewed ones, and says when
    // the renewed ones come due.
    let lease = Duration::from_millis(150);
    let queues = [QUEUES[1].to_owned()];
    let found = h.store.idle_entries(s, &queues, Some("w1"), lease, 20).await.expect("idle entries");
    let claimed: BTreeSet<String> = found.entries.into_iter().map(|e| e.item.entry_id).collect();
    let abandoned: BTreeSet<String> = items[290..].iter().map(|i| i.entry_id.clone()).collect();
    assert_eq!(claimed, abandoned, "exactly the entries whose lease was not renewed");
    let next = found.next.expect("the renewed entries are still pending");
    assert!(next <= lease && next > Duration::from_millis(50), "{next:?}");
    // Nothing of another holder's is found.
    let none = h.store.idle_entries(s, &queues, Some("w2"), lease, 20).await.expect("idle entries");
    assert!(none.entries.is_empty());
    assert_eq!(h.pending(&stream).len(), 300, "a look claims nothing");
}

#[tokio::test]
async fn an_entry_unrenewed_for_a_lease_is_found_whoever_holds_it_and_one_renewed_meanwhile_stays() {
    let mut h = setup().await;
    let s = Shard(1);
    let (left, running) = (h.create(&new_task(s)).await, h.create(&new_task(s)).await);
    // w1 is alive and started both; it runs `running` (renewing its entry) and lost track of `left`
    // (its start's reply was lost, say).
    let left_attempt = h.start(&left).await;
    let running_attempt = h.start(&running).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    let renewed = [(running_attempt.stream.clone(), running_attempt.entry_id.clone())];
    assert!(h.store.renew_leases("w1", &renewed).await.expect("renew").is_empty());

    let lease = Duration::from_millis(100);
    let queues: Vec<String> = QUEUES.iter().map(|q| q.to_string()).collect();
    let found = h.store.idle_entries(s, &queues, None, lease, 100).await.expect("idle entries");
    let entries: Vec<(&str, &str)> =
        found.entries.iter().map(|e| (e.item.entry_id.as_str(), e.holder.as_str())).collect();
    assert_eq!(entries, [(left_attempt.entry_id.as_str(), "w1")], "only the entry nobody renewed");
    let idle = &found.entries[0];
    assert_eq!((idle.item.task_id.as_str(), idle.item.node_id.as_str()), (left.as_str(), ROOT_NODE));
    assert_eq!(idle.item.traceparent.as_deref(), Some(TRACE));
    assert!(idle.idle >= lease, "{:?}", idle.idle);

    // Its attempt turns out to run after all, and renews it before the reclaim: nothing changes.
    let item = idle.item.clone();
    let held = [(item.stream.clone(), item.entry_id.clone())];
    assert!(h.store.renew_leases("w1", &held).await.expect("renew").is_empty());
    assert_eq!(h.store.reclaim(&item, lease).await.expect("reclaim"), ReclaimOutcome::Renewed);
    assert_eq!(h.node_field(&left, ROOT_NODE, "status").as_deref(), Some("running"));
    assert_eq!(h.node_field(&left, ROOT_NODE, "losses"), None);
    assert!(h.pending(&item.stream).iter().any(|(id, _)| *id == item.entry_id), "still w1's");

    // It stops renewing for a lease: the node is queued again, and the attempt is fenced off.
    tokio::time::sleep(Duration::from_millis(150)).await;
    let ReclaimOutcome::Requeued { losses: 1, .. } = h.store.reclaim(&item, lease).await.expect("reclaim")
    else {
        panic!("not requeued")
    };
    assert_eq!(h.store.renew_leases("w1", &held).await.expect("renew"), held.to_vec());
    let late = h.store.complete(&left_attempt, Some(&ok("late")), false, 0).await.expect("complete");
    assert_eq!(late, CompleteOutcome::Stale);
    let again = h.start(&left).await;
    assert_eq!(again.number, 2);
    // The other node ran on untouched.
    let done = h.store.complete(&running_attempt, Some(&ok("fine")), false, 0).await.expect("complete");
    assert_eq!(done, CompleteOutcome::Settled);
}

#[tokio::test]
async fn an_unreadable_record_fails_only_its_own_entry_of_a_batch() {
    let mut h = setup().await;
    let s = Shard(2);
    let (garbled, corrupt, good) =
        (h.create(&new_task(s)).await, h.create(&new_task(s)).await, h.create(&new_task(s)).await);
    // A record the script cannot read (arithmetic on its creation time fails), and a call record
    // the worker cannot read.
    let _: () = h.conn().hset(task_key(&garbled), "createdAt", "soon").expect("hset");
    let _: () = h.conn().hset(task_key(&corrupt), "call", "{not json").expect("hset");
    let mut items = Vec::new();
    for id in [&garbled, &corrupt, &good] {
        items.push(h.item(id, ROOT_NODE).await);
    }
    let outcomes =
        h.store.start_batch(s, &items, items.len(), "w1", &SlotShares::unlimited()).await.expect("start");
    let [first, second, third] = outcomes.try_into().expect("three outcomes");
    // The script's error stopped that item alone, before it changed anything.
    assert!(matches!(&first, StartOutcome::Unreadable { attempt: None, .. }), "{first:?}");
    assert_eq!(h.node_field(&garbled, ROOT_NODE, "status").as_deref(), Some("queued"));
    assert!(h.pending(&items[0].stream).iter().any(|(id, _)| *id == items[0].entry_id), "left pending");
    // The unreadable call record: its attempt started, for the worker to fail.
    let StartOutcome::Unreadable { attempt: Some(attempt), reason } = second else {
        panic!("expected an unreadable start with its attempt, got {second:?}")
    };
    assert!(reason.contains("call record"), "{reason}");
    assert_eq!((attempt.task_id.as_str(), attempt.number), (corrupt.as_str(), 1));
    assert!(attempt.queues.iter().any(|q| q == "slow_compute"), "{:?}", attempt.queues);
    let failed = ToolOutcome::Error(RpcError { code: -32603, message: reason, data: None });
    assert_eq!(
        h.store.complete(&attempt, Some(&failed), true, 0).await.expect("fail"),
        CompleteOutcome::Settled
    );
    assert_eq!(h.store.get_task(&corrupt).await.expect("get").expect("task").status, TaskStatus::Failed);
    // The good one behind them runs.
    let StartOutcome::Run(start) = third else { panic!("the good entry did not start: {third:?}") };
    assert_eq!((start.attempt.task_id.as_str(), start.attempt.number), (good.as_str(), 1));
    let done = h.store.complete(&start.attempt, Some(&ok("fine")), false, 0).await.expect("complete");
    assert_eq!(done, CompleteOutcome::Settled);
}

#[tokio::test]
async fn a_shard_with_live_tasks_is_looked_at_within_the_idle_period_and_a_quiet_one_is_not() {
    let mut h = setup().await;
    let s = Shard(3);
    let idle_every = Duration::from_secs(2);
    // A quiet shard: nothing planned.
    let quiet = h.store.maintain(s, 100, Duration::from_secs(5), idle_every).await.expect("maintain");
    assert!(!quiet.live);
    assert_eq!(quiet.next_due_in, None);
    // The first task created there asks for a look within the period, not at its TTL.
    let mut notices = h.store.events().await.expect("events").cancel_notices();
    let id = h.create(&NewTask { ttl_ms: 3_600_000, ..new_task(s) }).await;
    let wake: u64 = h.conn().hget(s.load(), "wake").expect("wake");
    assert!(wake <= now_ms() + idle_every.as_millis() as u64 + 100, "planned at {wake}");
    let woken = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match notices.recv().await.expect("hub alive") {
                CancelNotice::Maintain(shard) if shard == s => return,
                _ => continue,
            }
        }
    })
    .await;
    assert!(woken.is_ok(), "the maintenance holder was not told");
    let busy = h.store.maintain(s, 100, Duration::from_secs(5), idle_every).await.expect("maintain");
    assert!(busy.live);
    assert!(busy.next_due_in.is_some_and(|d| d <= idle_every), "{busy:?}");
    // Settled, it no longer asks for looks of its own.
    let attempt = h.start(&id).await;
    h.store.complete(&attempt, Some(&ok("done")), false, 0).await.expect("complete");
    let after = h.store.maintain(s, 100, Duration::from_secs(5), idle_every).await.expect("maintain");
    assert!(!after.live);
    assert!(after.next_due_in.is_none_or(|d| d > idle_every), "{after:?}");
}

#[tokio::test]
async fn a_stopping_worker_hands_the_maintenance_lease_over_and_only_its_own() {
    let h = setup().await;
    let record = |name: &str| WorkerRecord {
        name: name.to_owned(),
        queues: vec![],
        tools: vec![],
        concurrency: 1,
        running: vec![],
        heartbeat_ms: 0,
        lease_ms: 1000,
        host: String::new(),
        pid: 0,
    };
    let (lease, hold) = (Duration::from_secs(1), Duration::from_secs(60));
    assert!(h.store.heartbeat(&record("old"), lease, hold).await.expect("heartbeat").maintainer);
    assert!(!h.store.heartbeat(&record("new"), lease, hold).await.expect("heartbeat").maintainer);
    assert!(!h.store.release_maintenance("new").await.expect("release"), "not its lease to give");
    assert!(!h.store.heartbeat(&record("new"), lease, hold).await.expect("heartbeat").maintainer);
    assert!(h.store.release_maintenance("old").await.expect("release"));
    assert!(h.store.heartbeat(&record("new"), lease, hold).await.expect("heartbeat").maintainer, "at once");
    assert!(!h.store.release_maintenance("old").await.expect("release"), "the new holder keeps it");
    assert!(h.store.heartbeat(&record("new"), lease, hold).await.expect("heartbeat").maintainer);
}

#[tokio::test]
async fn a_retried_start_after_a_lost_reply_runs_the_same_attempt() {
    let mut h = setup().await;
    let id = h.create(&new_task(Shard(2))).await;
    let item = h.item(&id, ROOT_NODE).await;
    let first = run(h.start_item(&item).await);
    let again = run(h.start_item(&item).await);
    assert_eq!((first.number, again.number), (1, 1));
    assert_eq!(h.node_field(&id, ROOT_NODE, "attempt").as_deref(), Some("1"));
    let load = h.load(Shard(2));
    assert_eq!(load["queued"], 0, "the node left the queue once: {load:?}");
}

#[tokio::test]
async fn extra_entries_of_a_batch_go_back_to_their_queue() {
    let mut h = setup().await;
    let s = Shard(1);
    let mut items = Vec::new();
    for _ in 0..3 {
        let id = h.create(&new_task(s)).await;
        items.push(h.item(&id, ROOT_NODE).await);
    }
    let outcomes = h.store.start_batch(s, &items, 1, "w1", &SlotShares::unlimited()).await.expect("start");
    assert!(matches!(outcomes[0], StartOutcome::Run { .. }), "{outcomes:?}");
    assert_eq!(outcomes[1..], [StartOutcome::HandedBack, StartOutcome::HandedBack]);
    let stream = s.queue("slow_compute");
    assert_eq!(h.pending(&stream), vec![(items[0].entry_id.clone(), "w1".to_owned())]);

    let again = h.read("w2").await;
    let mut tasks: Vec<&str> = again.iter().map(|i| i.task_id.as_str()).collect();
    tasks.sort();
    let mut expected = vec![items[1].task_id.as_str(), items[2].task_id.as_str()];
    expected.sort();
    assert_eq!(tasks, expected, "the handed-back nodes are read again");
    let outcomes = h.store.start_batch(s, &again, 2, "w2", &SlotShares::unlimited()).await.expect("start");
    assert!(outcomes.iter().all(|o| matches!(o, StartOutcome::Run { .. })), "{outcomes:?}");

    let mut pending = h.pending(&stream);
    pending.sort();
    let mut running: Vec<(String, String)> = std::iter::once(&items[0])
        .map(|i| (i.entry_id.clone(), "w1".to_owned()))
        .chain(again.iter().map(|i| (i.entry_id.clone(), "w2".to_owned())))
        .collect();
    running.sort();
    assert_eq!(pending, running, "only the running nodes' entries are pending");
    assert_eq!(h.xlen(&stream), 3, "the handed-back entries were deleted");
    assert_eq!(h.load(s)["queued"], 0);
    for item in &items {
        assert_eq!(h.node_field(&item.task_id, ROOT_NODE, "status").as_deref(), Some("running"));
    }
}

#[tokio::test]
async fn a_dag_failed_by_one_node_gives_back_the_load_of_its_queued_nodes() {
    let mut h = setup().await;
    let s = Shard(3);
    let graph = json!({"nodes": [{"id": "x", "tool": "flaky"}, {"id": "y", "tool": "slow_compute"}]});
    let id = h.create(&NewTask { ttl_ms: 300, ..dag_task(s, graph) }).await;
    let x = h.start_node(&id, "x").await;
    let failed = h.store.complete(&x, Some(&tool_error()), false, 0).await.expect("complete");
    assert_eq!(failed, CompleteOutcome::Settled, "x's failure fails the task");
    // A failed graph settles with a result that says which node failed (2026-07-28: completed,
    // isError; 2025-11-25: failed).
    let got = h.store.get_task(&id).await.expect("get").expect("exists");
    assert_eq!(got.status, TaskStatus::Completed);
    let result = got.result.expect("a result");
    assert_eq!(
        (result["isError"].as_bool(), result["structuredContent"]["failedNode"].as_str()),
        (Some(true), Some("x"))
    );
    assert_eq!(result["structuredContent"]["nodes"]["y"]["status"], "dropped", "{result}");

    // No worker read y's entry before the failed task's keys expired; one reads it now.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let y = h.item(&id, "y").await;
    assert!(matches!(h.start_item(&y).await, StartOutcome::Skip(_)));
    let load = h.load(s);
    let count = |field: &str| load.get(field).copied().unwrap_or(0);
    assert_eq!(
        (count("queued"), count("queued:slow_compute"), count("live:alice")),
        (0, 0, 0),
        "y will never run, yet it is still counted as queued: {load:?}"
    );
}

#[tokio::test]
async fn a_node_that_ends_cancelled_in_a_live_graph_releases_no_dependent() {
    let mut h = setup().await;
    let s = Shard(2);
    let graph = json!({"nodes": [
        {"id": "x", "tool": "flaky", "retries": 2},
        {"id": "y", "tool": "slow_compute", "dependsOn": ["x"]}
    ]});
    let id = h.create(&dag_task(s, graph)).await;
    let x = h.start_node(&id, "x").await;
    // x's tool stopped without a result while its graph still runs: no output for y to use.
    let outcome = h.store.complete(&x, None, false, 0).await.expect("complete");
    assert_eq!(outcome, CompleteOutcome::Settled, "the graph fails with x");
    assert_eq!(h.node_field(&id, "y", "status").as_deref(), Some("pending"), "y is never queued");
    let got = h.store.get_task(&id).await.expect("get").expect("exists");
    let result = got.result.expect("a result");
    assert_eq!(result["structuredContent"]["failedNode"], "x", "{result}");
    assert_eq!(result["structuredContent"]["nodes"]["x"]["status"], "cancelled", "{result}");
    let retries: u64 = h.conn().zcard(s.retries()).expect("zcard");
    assert_eq!(retries, 0, "a cancelled node is not retried");
}

/// The task's progress as a client last heard it: (progress, total).
async fn progress_of(h: &Harness, id: &str) -> (f64, Option<f64>) {
    let got = h.store.get_task(id).await.expect("get").expect("exists");
    (got.progress.unwrap_or(0.0), got.total)
}

#[tokio::test]
async fn progress_never_goes_back_when_a_plan_expands_or_a_one_node_graph_settles() {
    let mut h = setup().await;
    let s = Shard(1);
    // A planning tool reports how far its planning went, then its plan joins the task.
    let id = h.create(&new_task(s)).await;
    let planner = h.start(&id).await;
    assert!(h.store.report_progress(&planner, 40.0, Some(100.0), None).await.expect("progress"));
    let plan: conveyor_shared::dag::DagSpec = serde_json::from_value(json!({"nodes": [
        {"id": "a", "tool": "slow_compute"}, {"id": "b", "tool": "slow_compute"}
    ]}))
    .expect("plan");
    let queues = HashMap::from([("slow_compute".to_owned(), "slow_compute".to_owned())]);
    h.store.expand_plan(&planner, &plan, &queues).await.expect("expand");
    let (expanded, _) = progress_of(&h, &id).await;
    assert!(expanded >= 40.0, "progress went from 40 back to {expanded}");
    let a = h.start_node(&id, "a").await;
    h.store.complete(&a, Some(&ok("a")), false, 0).await.expect("complete");
    let (after_a, total) = progress_of(&h, &id).await;
    assert!(after_a > expanded, "{after_a} after {expanded}");
    let b = h.start_node(&id, "b").await;
    h.store.complete(&b, Some(&ok("b")), false, 0).await.expect("complete");
    let (after_b, _) = progress_of(&h, &id).await;
    assert!(after_b > after_a && Some(after_b) == total, "{after_b} of {total:?} at the end");

    // A graph of one node: its reports set the message only, so its end is no step back.
    let one = h.create(&dag_task(s, json!({"nodes": [{"id": "x", "tool": "slow_compute"}]}))).await;
    let x = h.start_node(&one, "x").await;
    assert!(h.store.report_progress(&x, 70.0, Some(100.0), None).await.expect("progress"));
    let (during, _) = progress_of(&h, &one).await;
    h.store.complete(&x, Some(&ok("x")), false, 0).await.expect("complete");
    let (end, _) = progress_of(&h, &one).await;
    assert!(end >= during, "progress went from {during} back to {end}");
}

#[tokio::test]
async fn a_node_taken_over_after_its_task_was_cancelled_gives_back_its_load() {
    let mut h = setup().await;
    let s = Shard(0);
    let id = h.create(&NewTask { ttl_ms: 400, ..new_task(s) }).await;
    let attempt = h.start(&id).await;
    // Its worker is lost while running it, and the client cancels the task meanwhile.
    assert_eq!(h.store.cancel_task(&id, "alice", "x").await.expect("cancel"), CancelOutcome::Cancelled);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let lease = Duration::from_millis(50);
    let claimed = lost_entries(&h, s, "w1", lease).await;
    assert_eq!(claimed.iter().map(|i| &i.entry_id).collect::<Vec<_>>(), vec![&attempt.entry_id]);
    // The task is over: the node is not queued again, and its entry is gone.
    assert!(matches!(
        h.store.reclaim(&claimed[0], lease).await.expect("reclaim"),
        ReclaimOutcome::Dropped(_)
    ));
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(h.read("w2").await.is_empty(), "no entry is left to run");
    let load = h.load(s);
    let count = |field: &str| load.get(field).copied().unwrap_or(0);
    assert_eq!(
        (count("queued"), count("queued:slow_compute"), count("live:alice")),
        (0, 0, 0),
        "the node of a cancelled task is still counted as queued: {load:?}"
    );
}

/// A primary and a replica of it, online.
fn primary_with_replica() -> (RedisServer, RedisServer) {
    let primary = RedisServer::start().expect("primary");
    let replica = RedisServer::start_replica_of(&primary).expect("replica");
    (primary, replica)
}

#[tokio::test]
async fn with_wait_replicas_a_completion_is_heard_and_read_only_once_a_replica_has_it() {
    let (primary, replica) = primary_with_replica();
    let options = conveyor_shared::store::StoreOptions {
        timeout: Duration::from_secs(3),
        outage_wait: Duration::from_millis(600),
        wait_replicas: 1,
        wait_timeout: Duration::from_millis(1000),
        ..Default::default()
    };
    let store = Store::open(&primary.url(), options).expect("store");
    let queues: Vec<String> = QUEUES.iter().map(|q| q.to_string()).collect();
    store.ensure_groups(&queues).await.expect("groups");
    let readers = store.work_readers(&queues).await.expect("readers");
    let mut h = Harness { redis: primary, store: store.clone(), readers, unstarted: Vec::new() };
    let hub = store.events().await.expect("events");
    let status = TaskRead { allowance: 1 << 20, ..TaskRead::new("alice", TaskParts::OUTCOME) };

    // With the replica up, the waiter hears of the completion, and a read shows it.
    let heard = h.create(&new_task(Shard(1))).await;
    let attempt = h.start(&heard).await;
    let mut waiter = hub.waiter(&heard);
    store.watch_task(&heard, &hub.inbox(Shard(1)), "alice").await.expect("watch");
    store.complete(&attempt, Some(&ok("done")), false, 0).await.expect("complete");
    let event = tokio::time::timeout(Duration::from_secs(10), waiter.recv()).await.expect("an event");
    assert!(matches!(event, Some(conveyor_shared::events::Delivery::Event(_))), "{event:?}");

    // With the replica stalled, the completion is recorded on the primary, but no waiter hears of
    // it and no read shows it.
    let quiet = h.create(&new_task(Shard(2))).await;
    let attempt = h.start(&quiet).await;
    let mut waiter = hub.waiter(&quiet);
    store.watch_task(&quiet, &hub.inbox(Shard(2)), "alice").await.expect("watch");
    let mut stalled = replica.connection().expect("replica conn");
    let sleeping = std::thread::spawn(move || {
        redis::cmd("DEBUG").arg("SLEEP").arg(8).query::<()>(&mut stalled).expect("debug sleep")
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    store.complete(&attempt, Some(&ok("done")), false, 0).await.expect("complete");
    assert_eq!(h.redis.node_field(&quiet, ROOT_NODE, "status").as_deref(), Some("completed"));
    assert!(
        tokio::time::timeout(Duration::from_millis(500), waiter.recv()).await.is_err(),
        "a waiter heard of a completion no replica had"
    );
    let read = store.read_task(&quiet, &status).await;
    assert!(read.as_ref().is_err_and(|e| e.is_transient()), "a read showed it: {read:?}");
    // Once the replica has it, reads show it.
    sleeping.join().expect("the replica slept");
    let shown =
        conveyor_tests::eventually(Duration::from_secs(10), "a read of the completion", async || match store
            .read_task(&quiet, &status)
            .await
        {
            Ok(ReadOutcome::Read(detail)) => Some(detail.task.status),
            _ => None,
        })
        .await;
    assert_eq!(shown, TaskStatus::Completed);
}

#[tokio::test]
async fn with_wait_replicas_a_create_is_answered_only_once_a_replica_has_it() {
    let (primary, mut replica) = primary_with_replica();
    let options = conveyor_shared::store::StoreOptions {
        timeout: Duration::from_secs(3),
        outage_wait: Duration::from_millis(600),
        wait_replicas: 1,
        // Long enough for a replica on a busy machine to acknowledge; the lonely create below
        // waits it out once.
        wait_timeout: Duration::from_millis(1500),
        ..Default::default()
    };
    let store = Store::open(&primary.url(), options).expect("store");
    let task = new_task(Shard(1));
    assert_eq!(store.create_task(&task, &Limits::default()).await.expect("create"), Created::Created);
    // The replica has the task by the time the create is answered.
    let mut replica_conn = replica.connection().expect("replica conn");
    let status: Option<String> =
        redis::cmd("HGET").arg(task_key(&task.task_id)).arg("status").query(&mut replica_conn).expect("hget");
    assert_eq!(status.as_deref(), Some("working"));
    assert_eq!(
        store.cancel_task(&task.task_id, "alice", "x").await.expect("cancel"),
        CancelOutcome::Cancelled,
        "a cancel waits the same way"
    );

    // Without a replica the create is not confirmed: a retryable error, never a silent success.
    replica.kill();
    let lonely = new_task(Shard(2));
    let error = store.create_task(&lonely, &Limits::default()).await.expect_err("no replica confirms");
    assert!(error.is_transient() && error.to_string().contains("replicas confirmed"), "{error}");
}

/// A spread create of `task` by `owner`, starting in `shard`.
async fn spread(store: &Store, owner: &str, shard: Shard, limits: Limits) -> (Created, NewTask) {
    let mut task = NewTask { owner: owner.to_owned(), ..new_task(shard) };
    let created = store.create_task_spread(&mut task, &limits, |_, _| {}).await.expect("create");
    (created, task)
}

#[tokio::test]
async fn a_per_principal_limit_admits_exactly_that_many_over_every_shard() {
    let h = setup().await;
    // 5 over 4 shards: shares of 2, 1, 1 and 1, tried from whichever shard a call lands in.
    let limits = Limits { max_live_per_principal: 5, ..Limits::default() };
    let mut admitted = Vec::new();
    let mut refusals = Vec::new();
    for i in 0..40u16 {
        match spread(&h.store, "alice", Shard(i % 4), limits).await {
            (Created::Created, task) => admitted.push(task.task_id),
            (Created::OverLimit(hit), _) => refusals.push(hit),
            (other, _) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(admitted.len(), 5, "exactly the limit is admitted: {admitted:?}");
    let hit = &refusals[0];
    assert_eq!(
        (hit.limit.as_str(), hit.current, hit.max),
        ("live_tasks_per_principal", 5, 5),
        "the refusal names the configured figure and the principal's count: {hit:?}"
    );
    let shards: BTreeSet<u16> = admitted.iter().map(|id| shard_of(id).0).collect();
    assert_eq!(shards.len(), 4, "every shard's share was used: {shards:?}");
    assert_eq!(h.total_load()["live:alice"], 5);

    // A slot freed in any shard admits the next call, wherever it lands first.
    let freed = admitted.iter().find(|id| shard_of(id).0 == 3).expect("a task in shard 3").clone();
    h.store.cancel_task(&freed, "alice", "x").await.expect("cancel");
    let (created, task) = spread(&h.store, "alice", Shard(0), limits).await;
    assert_eq!(created, Created::Created);
    assert_eq!(shard_of(&task.task_id), Shard(3), "it moved to the shard with room");
    assert!(matches!(spread(&h.store, "alice", Shard(1), limits).await.0, Created::OverLimit(_)));
    // Another principal has limits of its own.
    assert_eq!(spread(&h.store, "bob", Shard(2), limits).await.0, Created::Created);
}

#[tokio::test]
async fn a_call_pinned_to_a_full_shard_lands_in_another_and_keeps_its_keys() {
    let mut h = setup().await;
    let limits = Limits { max_live_per_principal: 4, ..Limits::default() };
    // Fill shard 0's share (1 of 4).
    assert_eq!(spread(&h.store, "alice", Shard(0), limits).await.0, Created::Created);

    // A call key of shard 0 (a synchronous 2025-11-25 call, found by its request id).
    let call_key = Shard(0).call("session", "7");
    let mut call = NewTask { call_key: Some(call_key.clone()), ..new_task(Shard(0)) };
    assert_eq!(
        h.store.create_task_spread(&mut call, &limits, |_, _| {}).await.expect("create"),
        Created::Created
    );
    assert_ne!(shard_of(&call.task_id), Shard(0));
    assert_eq!(h.store.call_tasks(&call_key).await.expect("get"), [call.task_id.clone()]);
    // A later call under the same request id joins it, in front, whichever shard it lands in.
    let mut again = NewTask { call_key: Some(call_key.clone()), ..new_task(Shard(0)) };
    h.store.create_task_spread(&mut again, &limits, |_, _| {}).await.expect("create");
    assert_eq!(
        h.store.call_tasks(&call_key).await.expect("get"),
        [again.task_id.clone(), call.task_id.clone()]
    );
    let ttl: i64 = h.conn().pttl(&call_key).expect("pttl");
    assert!(ttl > 0 && ttl <= 60_000, "the list lives as long as its calls: {ttl} ms");

    // An idempotent call whose key lives in a full shard: a retry still finds the first task.
    let key = (0..)
        .map(|i| format!("k{i}"))
        .find(|k| keys::shard_of_key("alice", k, 4) == Shard(0))
        .expect("a key");
    let keyed = || NewTask { idempotency_key: Some(key.clone()), ..new_task(Shard(0)) };
    let mut first = keyed();
    assert_eq!(
        h.store.create_task_spread(&mut first, &limits, |_, _| {}).await.expect("create"),
        Created::Created
    );
    let mut retry = keyed();
    assert_eq!(
        h.store.create_task_spread(&mut retry, &limits, |_, _| {}).await.expect("retry"),
        Created::Duplicate(first.task_id.clone())
    );
    let mut other = keyed();
    other.call.arguments = json!({"seconds": 2});
    assert_eq!(
        h.store.create_task_spread(&mut other, &limits, |_, _| {}).await.expect("other"),
        Created::Conflict(first.task_id.clone())
    );
    // The moved tasks run like any other.
    let attempt = h.start(&call.task_id).await;
    assert_eq!(attempt.shard, shard_of(&call.task_id));
}

/// An idempotency key of alice whose call lands in `shard` (of 4).
fn key_in(shard: Shard) -> String {
    (0..).map(|i| format!("k{i}")).find(|k| keys::shard_of_key("alice", k, 4) == shard).expect("a key")
}

#[tokio::test]
async fn concurrent_retries_of_an_idempotent_call_whose_shard_is_full_make_and_run_one_task() {
    let h = setup().await;
    let limits = Limits { max_live_per_principal: 4, ..Limits::default() };
    // Fill shard 0's share (1 of 4): the keyed call must be made in another shard.
    assert_eq!(spread(&h.store, "alice", Shard(0), limits).await.0, Created::Created);
    let key = key_in(Shard(0));
    let retries = (0..8).map(|_| {
        let store = h.store.clone();
        let mut call = NewTask { idempotency_key: Some(key.clone()), ..new_task(Shard(0)) };
        async move {
            let created = store.create_task_spread(&mut call, &limits, |_, _| {}).await.expect("create");
            (created, call.task_id)
        }
    });
    let outcomes = futures::future::join_all(retries).await;
    let made: Vec<&String> =
        outcomes.iter().filter(|(c, _)| *c == Created::Created).map(|(_, id)| id).collect();
    assert_eq!(made.len(), 1, "one of the retries makes the task: {outcomes:?}");
    let task = made[0].clone();
    assert_ne!(shard_of(&task), Shard(0));
    for (created, _) in &outcomes {
        assert!(
            *created == Created::Created || *created == Created::Duplicate(task.clone()),
            "every other retry answers with that task: {outcomes:?}"
        );
    }
    // Nothing else was made, nor queued: the first task and this one, one entry each.
    assert_eq!(h.redis.written(), (2, 2), "{outcomes:?}");
    assert_eq!(h.total_load()["live:alice"], 2);
    // A retry long after still finds it.
    let mut later = NewTask { idempotency_key: Some(key.clone()), ..new_task(Shard(0)) };
    assert_eq!(
        h.store.create_task_spread(&mut later, &limits, |_, _| {}).await.expect("retry"),
        Created::Duplicate(task)
    );
}

#[tokio::test]
async fn a_retry_finishes_an_idempotency_claim_its_first_call_abandoned() {
    let h = setup().await;
    let limits = Limits { max_live_per_principal: 4, ..Limits::default() };
    let key = key_in(Shard(0));
    let fingerprint = |t: &NewTask| format!("{} {}", t.tool, t.call.arguments);
    let idem = Shard(0).idempotency("alice", &key);
    // A first call claimed the key long ago (Redis time 1000 ms) and stopped before it made any
    // task: a retry drops the claim and makes the task.
    let abandoned = new_task(Shard(0));
    let claim = format!("?{}@1000 {}", &abandoned.task_id[4..], fingerprint(&abandoned));
    let _: () = h.conn().set(&idem, &claim).expect("set");
    let mut retry = NewTask { idempotency_key: Some(key.clone()), ..new_task(Shard(0)) };
    assert_eq!(
        h.store.create_task_spread(&mut retry, &limits, |_, _| {}).await.expect("retry"),
        Created::Created
    );
    assert_eq!(shard_of(&retry.task_id), Shard(0));

    // Another first call made its task in shard 2, and stopped before it pointed its claim at it:
    // a retry finds the task by the claim and answers with it.
    let other = key_in(Shard(1));
    let idem = Shard(1).idempotency("alice", &other);
    let made = h.create(&new_task(Shard(2))).await;
    let claim = format!("?{}@1000 {}", &made[4..], fingerprint(&new_task(Shard(2))));
    let _: () = h.conn().set(&idem, &claim).expect("set");
    let mut retry = NewTask { idempotency_key: Some(other.clone()), ..new_task(Shard(1)) };
    assert_eq!(
        h.store.create_task_spread(&mut retry, &limits, |_, _| {}).await.expect("retry"),
        Created::Duplicate(made.clone())
    );
    let value: String = h.conn().get(&idem).expect("get");
    assert!(value.starts_with(&made), "the key names the task now: {value}");
}

#[tokio::test]
async fn nodes_held_by_a_principal_are_bounded_and_given_back_when_its_tasks_end() {
    let mut h = setup().await;
    let s = Shard(1);
    // 12 nodes over 4 shards: 3 per shard.
    let limits = Limits { max_nodes_per_principal: 12, ..Limits::default() };
    let graph = |n: usize| {
        let nodes: Vec<Value> = (0..n).map(|i| json!({"id": format!("n{i}"), "kind": "noop"})).collect();
        json!({"nodes": nodes})
    };
    let mut three = dag_task(s, graph(3));
    assert_eq!(
        h.store.create_task_spread(&mut three, &limits, |_, _| {}).await.expect("create"),
        Created::Created
    );
    assert_eq!(shard_of(&three.task_id), s, "it fits its first shard");
    // A single call holds one node: shard 1 is full, so it lands elsewhere.
    let mut single = new_task(s);
    assert_eq!(
        h.store.create_task_spread(&mut single, &limits, |_, _| {}).await.expect("create"),
        Created::Created
    );
    assert_ne!(shard_of(&single.task_id), s);
    // A graph larger than any shard's share is refused, saying what it needs.
    let mut four = dag_task(s, graph(4));
    match h.store.create_task_spread(&mut four, &limits, |_, _| {}).await.expect("create") {
        Created::OverLimit(hit) => {
            assert_eq!((hit.limit.as_str(), hit.max, hit.needed), ("nodes_per_principal", 12, 4), "{hit:?}");
            assert_eq!(hit.current, 4, "3 graph nodes and 1 call: {hit:?}");
        }
        other => panic!("expected the node limit, got {other:?}"),
    }
    let load = h.load(s);
    assert_eq!((load["live:alice"], load["nodes:alice"]), (1, 2), "{load:?}");
    // The graph settles: its nodes go back.
    for node in ["n0", "n1", "n2"] {
        let attempt = h.start_node(&three.task_id, node).await;
        h.store.complete(&attempt, Some(&ok("ok")), false, 0).await.expect("complete");
    }
    let finalize = h.item(&three.task_id, keys::FINALIZE_NODE).await;
    h.store
        .settle_dag(&finalize, &json!({"content": [], "isError": false}), "done", false)
        .await
        .expect("settle");
    let load = h.load(s);
    let count = |field: &str| load.get(field).copied();
    assert_eq!((count("live:alice"), count("nodes:alice")), (None, None), "counted down and gone: {load:?}");
}

#[tokio::test]
async fn a_graph_stores_no_more_than_its_byte_budget() {
    let mut h = setup().await;
    let s = Shard(2);
    let graph = json!({"nodes": [
        {"id": "a", "tool": "slow_compute"},
        {"id": "b", "tool": "slow_compute", "retries": 3},
        {"id": "c", "kind": "noop", "dependsOn": ["a", "b"]}
    ]});
    let id = h.create(&NewTask { max_bytes: 4_000, ..dag_task(s, graph.clone()) }).await;
    let a = h.start_node(&id, "a").await;
    let fits = ToolOutcome::Result(result::text("x".repeat(1_500)));
    assert_eq!(h.store.complete(&a, Some(&fits), false, 0).await.expect("a"), CompleteOutcome::Released(0));
    let b = h.start_node(&id, "b").await;
    let too_much = ToolOutcome::Result(result::text("y".repeat(3_000)));
    // Over the budget: b fails for good (its retries are not spent on it) and fails the graph.
    assert_eq!(h.store.complete(&b, Some(&too_much), false, 0).await.expect("b"), CompleteOutcome::Settled);
    let task = h.store.get_task(&id).await.expect("get").expect("exists");
    let result = task.result.expect("a result");
    assert_eq!(result["isError"], true, "{result}");
    let error = &result["structuredContent"]["nodes"]["b"]["error"];
    assert_eq!(error["data"]["limit"], "max_task_bytes", "{result}");
    assert!(error["message"].as_str().unwrap_or_default().contains("4000"), "names the budget: {result}");
    assert!(!result.to_string().contains(&"y".repeat(100)), "the oversized output is not stored");
    assert_eq!(h.load(s).get("live:alice").copied().unwrap_or(0), 0);

    // Arguments alone past the budget: refused before anything is written.
    let big = json!({"nodes": [{"id": "a", "tool": "slow_compute", "arguments": {"x": "z".repeat(5_000)}}]});
    let refused =
        h.store.create_task(&NewTask { max_bytes: 4_000, ..dag_task(s, big) }, &Limits::default()).await;
    assert!(matches!(refused.expect("create"), Created::OverBudget { max: 4_000, .. }));
}

#[tokio::test]
async fn an_output_over_the_node_limit_fails_the_node_for_good() {
    let mut h = setup().await;
    let graph = json!({"nodes": [{"id": "a", "tool": "slow_compute", "retries": 5}]});
    let id = h.create(&dag_task(Shard(0), graph)).await;
    let a = h.start_node(&id, "a").await;
    let big = ToolOutcome::Result(result::text("x".repeat(10_000)));
    assert_eq!(
        h.store.complete(&a, Some(&big), false, 4_096).await.expect("complete"),
        CompleteOutcome::Settled
    );
    let error = h.node_field(&id, "a", "error").expect("an error");
    let error: Value = serde_json::from_str(&error).expect("json");
    assert_eq!(error["data"]["limit"], "max_node_output_bytes", "{error}");
    assert_eq!(error["data"]["max"], 4_096, "{error}");
    assert!(h.redis.dead_letters().is_empty(), "nothing an operator could retry");
}

#[tokio::test]
async fn a_principal_over_its_share_is_set_aside_and_the_work_behind_it_starts() {
    let mut h = setup().await;
    let s = Shard(1);
    let stream = s.queue("slow_compute");
    let mut alice = Vec::new();
    for _ in 0..3 {
        alice.push(h.create(&new_task(s)).await);
    }
    let bob = h.create(&NewTask { owner: "bob".to_owned(), ..new_task(s) }).await;
    let mut items = Vec::new();
    for id in alice.iter().chain([&bob]) {
        items.push(h.item(id, ROOT_NODE).await);
    }
    // This worker already runs one of alice's nodes; each principal may take one more slot. At
    // first her extra nodes wait with the worker, unchanged (a short node frees a slot soon);
    // marked to be set aside, they are.
    let set_aside = items.iter().map(|i| (i.stream.clone(), i.entry_id.clone())).collect();
    let shares =
        SlotShares { room: [("alice".to_owned(), 1)].into(), default: Some(1), ..SlotShares::default() };
    let waiting = h
        .store
        .start_batch(
            s,
            &items[1..3],
            2,
            "w1",
            &SlotShares { room: [("alice".to_owned(), 0)].into(), ..shares.clone() },
        )
        .await
        .expect("start");
    assert!(
        waiting.iter().all(|o| matches!(o, StartOutcome::Capped { owner } if owner == "alice")),
        "{waiting:?}"
    );
    assert_eq!(h.pending(&stream).len(), 4, "nothing changed: every entry is still pending");
    let shares = SlotShares { set_aside, ..shares };
    let outcomes = h.store.start_batch(s, &items, items.len(), "w1", &shares).await.expect("start");
    let kinds: Vec<&str> = outcomes
        .iter()
        .map(|o| match o {
            StartOutcome::Run(start) if start.attempt.owner == "alice" => "alice runs",
            StartOutcome::Run(_) => "bob runs",
            StartOutcome::Deferred => "set aside",
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(kinds, ["alice runs", "set aside", "set aside", "bob runs"]);
    assert_eq!(h.load(s)["held"], 2);
    assert_eq!(h.load(s)["queued"], 2, "set-aside nodes are still queued");
    let held: Vec<String> = h.conn().lrange(s.held("slow_compute"), 0, -1).expect("held");
    assert_eq!(held.len(), 2, "{held:?}");
    assert_eq!(h.pending(&stream).len(), 2, "only the running nodes' entries are pending");
    assert_eq!(h.node_field(&alice[1], ROOT_NODE, "entry").as_deref(), Some(""));

    // A node of the queue finishes: one set-aside node goes back on the stream and starts.
    let first = run(outcomes.into_iter().next().expect("one"));
    h.store.complete(&first, Some(&ok("ok")), false, 0).await.expect("complete");
    assert_eq!(h.load(s)["held"], 1);
    let again = h.start(&alice[1]).await;
    assert_eq!(
        h.node_field(&alice[1], ROOT_NODE, "entry").as_deref(),
        Some(again.entry_id.as_str()),
        "bound"
    );

    // The shard's maintenance puts the last one back even when nothing of its queue finishes;
    // read but never started, its entry is taken over like any other and still not lost.
    let MaintainOutcome { set_aside, .. } =
        h.store.maintain(s, 100, Duration::from_secs(5), Duration::ZERO).await.expect("maintain");
    assert_eq!(set_aside, 1);
    assert_eq!(h.load(s)["held"], 1, "nothing held is put back by a node of another queue, or by none");
    assert_eq!(h.store.release_held(s, "slow_compute", 8).await.expect("release"), 1);
    let item = h.item(&alice[2], ROOT_NODE).await;
    tokio::time::sleep(Duration::from_millis(60)).await;
    let lease = Duration::from_millis(50);
    let claimed = lost_entries(&h, s, "w1", lease).await;
    assert!(claimed.iter().any(|c| c.entry_id == item.entry_id && c.stream == stream), "{claimed:?}");
    assert!(matches!(h.store.reclaim(&item, lease).await.expect("reclaim"), ReclaimOutcome::Requeued { .. }));
    let last = h.start(&alice[2]).await;
    for attempt in [again, last] {
        h.store.complete(&attempt, Some(&ok("ok")), false, 0).await.expect("complete");
    }
    assert_eq!(h.load(s).get("held").copied().unwrap_or(0), 0);

    // A set-aside node of a cancelled task leaves the counts, and its item is skipped when read.
    let doomed = h.create(&new_task(s)).await;
    let item = h.item(&doomed, ROOT_NODE).await;
    let full = SlotShares {
        room: [("alice".to_owned(), 0)].into(),
        default: Some(0),
        set_aside: [(item.stream.clone(), item.entry_id.clone())].into(),
    };
    assert_eq!(
        h.store.start_batch(s, &[item], 1, "w1", &full).await.expect("start"),
        vec![StartOutcome::Deferred]
    );
    h.store.cancel_task(&doomed, "alice", "x").await.expect("cancel");
    assert_eq!(h.store.release_held(s, "slow_compute", 8).await.expect("release"), 1);
    let item = h.item(&doomed, ROOT_NODE).await;
    assert!(matches!(h.start_item(&item).await, StartOutcome::Skip(_)));
    let load = h.load(s);
    assert!(load.values().all(|count| *count >= 0), "{load:?}");
    assert_eq!((load["queued"], load["held"], load.get("live:alice")), (0, 0, None), "{load:?}");
}

#[tokio::test]
async fn watching_another_owners_task_reads_it_but_writes_nothing() {
    let h = setup().await;
    let id = h.create(&new_task(Shard(2))).await;
    let waiters = |h: &Harness| -> String { h.conn().hget(task_key(&id), "waiters").expect("waiters") };
    let before = waiters(&h);
    // Mallory's gateway asks to wait on alice's task: it learns whose it is, and joins nothing.
    let seen = h.store.watch_task(&id, "cv:{cv.2}:inbox:mallory", "mallory").await.expect("watch");
    assert_eq!(seen.map(|t| t.owner).as_deref(), Some("alice"));
    assert_eq!(waiters(&h), before, "nothing written to a task of another owner");
    // Its owner (or an operator, with no owner filter) joins.
    h.store.watch_task(&id, "cv:{cv.2}:inbox:alice", "alice").await.expect("watch");
    h.store.watch_task(&id, "cv:{cv.2}:inbox:ops", "").await.expect("watch");
    let joined = waiters(&h);
    assert!(
        joined.contains("inbox:alice") && joined.contains("inbox:ops") && !joined.contains("mallory"),
        "{joined}"
    );
}

/// A store whose round trips give up after 150 ms, on `redis`, and a pause of every client of
/// that server for `pause_ms` starting now: a command sent meanwhile runs when the pause ends,
/// after the store has given up on its reply and sent it again (a reply lost, for real).
async fn losing_replies(redis: &RedisServer, pause_ms: u64) -> Store {
    let store = Store::new(&redis.url(), Duration::from_millis(150)).expect("store");
    store.ping().await.expect("connected before the pause");
    let mut conn = redis.connection().expect("connection");
    let _: () = redis::cmd("CLIENT").arg("PAUSE").arg(pause_ms).arg("ALL").query(&mut conn).expect("pause");
    store
}

#[tokio::test]
async fn a_cancel_sent_again_after_its_reply_was_lost_still_says_cancelled() {
    let h = setup().await;
    let id = h.create(&new_task(Shard(0))).await;
    // Another cancel first, so that the script is loaded and the first try's EVALSHA runs it.
    let other = h.create(&new_task(Shard(0))).await;
    h.store.cancel_task(&other, "alice", "Cancelled by the client").await.expect("cancel");
    let store = losing_replies(&h.redis, 600).await;
    let outcome = store.cancel_task(&id, "alice", "Cancelled by the client").await.expect("cancel");
    assert_eq!(outcome, CancelOutcome::Cancelled, "the repeat of the cancel that worked");
    // Another cancel is another request: the task is terminal for it.
    let again = h.store.cancel_task(&id, "alice", "Cancelled by the client").await.expect("cancel");
    assert!(matches!(again, CancelOutcome::AlreadyTerminal(_)), "{again:?}");
}

#[tokio::test]
async fn a_read_sent_again_after_its_reply_was_lost_is_not_held_by_its_own_poll_gap() {
    let h = setup().await;
    let id = h.create(&new_task(Shard(1))).await;
    let gated = || {
        let mut read = TaskRead::new("alice", TaskParts::STATUS);
        read.gate = Some(Gate { caller: "alice", gap_ms: 60_000, kind: GateKind::Poll });
        read
    };
    // (Another task's read loads the script, so that the lost try below runs it.)
    let other = h.create(&new_task(Shard(1))).await;
    h.store.read_task(&other, &gated()).await.expect("read");
    let store = losing_replies(&h.redis, 600).await;
    let read = store.read_task(&id, &gated()).await.expect("read");
    assert!(matches!(read, ReadOutcome::Read(_)), "{read:?}");
    let soon = h.store.read_task(&id, &gated()).await.expect("read");
    assert!(matches!(soon, ReadOutcome::TooSoon { .. }), "another read within the gap waits: {soon:?}");
}

#[tokio::test]
async fn a_run_recorded_again_after_its_reply_was_lost_is_kept_once() {
    let mut h = setup().await;
    let one = h.create(&new_task(Shard(0))).await;
    let one = h.start(&one).await;
    let two = h.create(&new_task(Shard(1))).await;
    let two = h.start(&two).await;
    // (The first record loads the script, so that the lost try below runs it.)
    let first = json!({"runId": "r1", "atMs": 1});
    h.store.record_run(&one, "deployment_readiness", "prod", &first, 10).await.expect("record");
    let second = json!({"runId": "r2", "atMs": 2});
    let store = losing_replies(&h.redis, 600).await;
    let before = store.record_run(&two, "deployment_readiness", "prod", &second, 10).await.expect("record");
    assert_eq!(before, vec![first.clone()], "the runs before it, as the first try saw them");
    let runs = h.store.runs("deployment_readiness", "prod", 10).await.expect("runs");
    assert_eq!(runs, vec![second, first], "each run once");
}

#[tokio::test]
async fn a_run_recorded_by_an_attempt_that_was_taken_over_stays_out_of_the_history() {
    let mut h = setup().await;
    let id = h.create(&new_task(Shard(0))).await;
    let first = h.start(&id).await;
    let early = json!({"runId": id, "atMs": 1});
    h.store.record_run(&first, "deployment_readiness", "prod", &early, 10).await.expect("record");

    // Another worker takes the node over while the first still runs it.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let lease = Duration::from_millis(50);
    let claimed = lost_entries(&h, Shard(0), "w1", lease).await;
    assert!(matches!(
        h.store.reclaim(&claimed[0], lease).await.expect("reclaim"),
        ReclaimOutcome::Requeued { .. }
    ));
    let second = h.start(&id).await;
    assert_eq!(second.number, first.number + 1);

    // The first attempt records late: refused, and the history keeps what it had.
    let late = json!({"runId": id, "atMs": 2});
    let refused = h.store.record_run(&first, "deployment_readiness", "prod", &late, 10).await;
    assert!(matches!(refused, Err(conveyor_shared::StoreError::Refused(_))), "{refused:?}");
    assert_eq!(runs(&h.store).await, vec![early.clone()]);

    // The attempt that took over records: its run replaces the one its node recorded before, and
    // it does not count that one among the runs before it.
    let newest = json!({"runId": id, "atMs": 3});
    let before =
        h.store.record_run(&second, "deployment_readiness", "prod", &newest, 10).await.expect("record");
    assert_eq!(before, Vec::<Value>::new());
    assert_eq!(runs(&h.store).await, vec![newest.clone()]);
    // Once the node has settled, nothing more of it enters the history.
    h.store.complete(&second, Some(&ok("done")), false, 0).await.expect("complete");
    let after = json!({"runId": id, "atMs": 4});
    assert!(h.store.record_run(&second, "deployment_readiness", "prod", &after, 10).await.is_err());
    assert_eq!(runs(&h.store).await, vec![newest]);
}

#[tokio::test]
async fn a_planned_graph_is_held_to_the_limits_its_call_was_created_under() {
    let mut h = setup().await;
    let s = Shard(0);
    // Shard 0's shares: 4 nodes held by alice's unfinished tasks, 2 queued nodes.
    let limits = Limits { max_nodes_per_principal: 16, max_queued: 8, ..Limits::default() };
    let graph_limits =
        conveyor_shared::dag::DagLimits { max_nodes: 6, max_node_bytes: 100, ..Default::default() };
    let task = NewTask { plan_limits: graph_limits, ..new_task(s) };
    assert_eq!(h.store.create_task(&task, &limits).await.expect("create"), Created::Created);
    let attempt = h.start(&task.task_id).await;
    let plan = |nodes: Value| -> conveyor_shared::dag::DagSpec {
        serde_json::from_value(json!({"nodes": nodes})).expect("a plan")
    };
    let noops = |n: usize, chained: bool| {
        let nodes: Vec<Value> = (0..n)
            .map(|i| match i {
                i if chained && i > 0 => {
                    json!({"id": format!("p{i}"), "kind": "noop", "dependsOn": [format!("p{}", i - 1)]})
                }
                i => json!({"id": format!("p{i}"), "kind": "noop"}),
            })
            .collect();
        plan(Value::Array(nodes))
    };
    let refused = |outcome: ExpandOutcome, limit: &str| match outcome {
        ExpandOutcome::Refused(reason) => assert!(reason.contains(limit), "{limit}: {reason}"),
        other => panic!("expected a refusal naming {limit}, got {other:?}"),
    };
    let queues = HashMap::new();
    refused(h.store.expand_plan(&attempt, &noops(7, true), &queues).await.expect("expand"), "max_dag_nodes");
    let wide = plan(json!([{"id": "p0", "tool": "echo", "arguments": {"text": "x".repeat(200)}}]));
    refused(h.store.expand_plan(&attempt, &wide, &queues).await.expect("expand"), "max_dag_node_bytes");
    // The planner holds one node: four more would make five.
    refused(
        h.store.expand_plan(&attempt, &noops(4, true), &queues).await.expect("expand"),
        "nodes_per_principal",
    );
    // Three more fit what alice may hold, but three at once would pass the queued share.
    refused(h.store.expand_plan(&attempt, &noops(3, false), &queues).await.expect("expand"), "queued_nodes");
    let load = h.load(s);
    let count = |field: &str| load.get(field).copied().unwrap_or(0);
    assert_eq!((count("queued"), count("nodes:alice")), (0, 0), "a refused plan holds nothing: {load:?}");
    assert_eq!(
        h.store.expand_plan(&attempt, &noops(3, true), &queues).await.expect("expand"),
        ExpandOutcome::Expanded(3)
    );
    let load = h.load(s);
    assert_eq!((load["queued"], load["nodes:alice"]), (1, 3), "{load:?}");
}

/// A dead letter's retry as an operator runs it, with no limits.
fn retry_options() -> RetryOptions {
    RetryOptions {
        ttl_ms: 60_000,
        poll_interval_ms: 500,
        limits: Limits::default(),
        max_task_bytes: 0,
        plan_limits: Default::default(),
    }
}

#[tokio::test]
async fn a_dead_letter_retried_again_runs_once_and_is_held_to_its_owners_limits() {
    let mut h = setup().await;
    let id = h.create(&new_task(Shard(1))).await;
    let attempt = h.start(&id).await;
    let error = RpcError { code: -32603, message: "boom".to_owned(), data: None };
    h.store.complete(&attempt, Some(&ToolOutcome::Error(error)), false, 0).await.expect("complete");
    let letter = h.store.dead_letters(10).await.expect("dead letters").remove(0);
    assert_eq!(letter.task_id, id);

    // alice has all the live tasks she may (one per shard): the retry is refused, and the letter stays.
    let limits = Limits { max_live_per_principal: 4, ..Limits::default() };
    let mut live = Vec::new();
    for _ in 0..4 {
        let (created, task) = spread(&h.store, "alice", Shard(0), limits).await;
        assert_eq!(created, Created::Created);
        live.push(task.task_id);
    }
    let held = RetryOptions { limits, ..retry_options() };
    let refused = h.store.retry_dead_letter(&letter, &held).await.expect("retry");
    assert!(refused.as_ref().is_err_and(|why| why.contains("live_tasks_per_principal")), "{refused:?}");
    // So is one larger than a task may store.
    let small = RetryOptions { max_task_bytes: 10, ..retry_options() };
    let refused = h.store.retry_dead_letter(&letter, &small).await.expect("retry");
    assert!(refused.as_ref().is_err_and(|why| why.contains("max_task_bytes")), "{refused:?}");
    assert_eq!(h.store.dead_letters(10).await.expect("dead letters").len(), 1, "the letter stays");
    let tasks = h.redis.task_count();

    // Room again: two operators retry the letter at once, and one of them once more later (a
    // retry whose reply was lost): one task runs the node.
    h.store.cancel_task(&live[0], "alice", "x").await.expect("cancel");
    let (first, second) =
        tokio::join!(h.store.retry_dead_letter(&letter, &held), h.store.retry_dead_letter(&letter, &held));
    let first = first.expect("retry").expect("a task");
    assert_eq!(second.expect("retry").expect("a task"), first);
    let again = h.store.retry_dead_letter(&letter, &held).await.expect("retry").expect("a task");
    assert_eq!(again, first);
    assert_eq!(h.redis.task_count(), tasks + 1, "one task for the letter");
    assert!(h.store.dead_letters(10).await.expect("dead letters").is_empty());
    let attempt = h.start(&first).await;
    assert_eq!(attempt.number, 1);
}

/// The readiness history of profile `prod`, newest first.
async fn runs(store: &Store) -> Vec<Value> {
    store.runs("deployment_readiness", "prod", 10).await.expect("runs")
}

/// What `owner` keeps in every shard, by the load counters (`kept:<owner>`).
fn kept(h: &Harness, owner: &str) -> i64 {
    h.total_load().get(&format!("kept:{owner}")).copied().unwrap_or(0)
}

/// The `bytes` field of a task: what it stores, as its scripts counted it.
fn task_bytes(h: &Harness, task_id: &str) -> i64 {
    h.conn().hget::<_, _, Option<i64>>(task_key(task_id), "bytes").expect("hget").unwrap_or(0)
}

#[tokio::test]
async fn what_a_principal_stores_is_counted_and_given_back_when_its_keys_expire() {
    let mut h = setup().await;
    let s = Shard(1);
    let limits = Limits { max_stored_bytes_per_principal: 4 * 100_000, ..Limits::default() };
    let single = NewTask { ttl_ms: 400, ..new_task(s) };
    assert_eq!(h.store.create_task(&single, &limits).await.expect("create"), Created::Created);
    let call_bytes = task_bytes(&h, &single.task_id);
    assert!(call_bytes > 20, "the call record counts from the start: {call_bytes}");
    assert_eq!(kept(&h, "alice"), call_bytes);

    let attempt = h.start(&single.task_id).await;
    let output = ToolOutcome::Result(result::text("r".repeat(3_000)));
    h.store.complete(&attempt, Some(&output), false, 0).await.expect("complete");
    let stored = task_bytes(&h, &single.task_id);
    assert!(stored > call_bytes + 3_000, "the result counts too: {stored}");
    assert_eq!(kept(&h, "alice"), stored, "the owner keeps exactly what its task stores");

    // A graph: its nodes' arguments, outputs and result; a cancelled task keeps what it stored.
    let graph = json!({"nodes": [
        {"id": "a", "tool": "slow_compute", "arguments": {"pad": "p".repeat(500)}},
        {"id": "b", "tool": "slow_compute", "dependsOn": ["a"]}
    ]});
    let dag = NewTask { ttl_ms: 400, ..dag_task(s, graph) };
    assert_eq!(h.store.create_task(&dag, &limits).await.expect("create"), Created::Created);
    let a = h.start_node(&dag.task_id, "a").await;
    h.store.complete(&a, Some(&ok(&"o".repeat(2_000))), false, 0).await.expect("a");
    let b = h.start_node(&dag.task_id, "b").await;
    h.store.complete(&b, Some(&ok("done")), false, 0).await.expect("b");
    let finalize = h.item(&dag.task_id, keys::FINALIZE_NODE).await;
    h.store
        .settle_dag(&finalize, &json!({"content": [], "isError": false}), "done", false)
        .await
        .expect("settle");
    let cancelled = NewTask { ttl_ms: 400, ..new_task(s) };
    assert_eq!(h.store.create_task(&cancelled, &limits).await.expect("create"), Created::Created);
    h.store.cancel_task(&cancelled.task_id, "alice", "x").await.expect("cancel");
    let all = stored + task_bytes(&h, &dag.task_id) + task_bytes(&h, &cancelled.task_id);
    assert!(task_bytes(&h, &dag.task_id) > 2_500, "the graph's output and result count");
    assert_eq!(kept(&h, "alice"), all, "every task's bytes, exactly");
    assert_eq!(kept(&h, "bob"), 0, "another principal keeps nothing of it");

    // Their TTL runs out: the keys go, and with them what the owner keeps.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let MaintainOutcome { next_due_in, .. } =
        h.store.maintain(s, 100, Duration::from_secs(5), Duration::ZERO).await.expect("maintain");
    assert_eq!(kept(&h, "alice"), 0, "{:?}", h.load(s));
    assert!(!h.load(s).contains_key("kept:alice"), "a spent counter leaves the hash");
    let kept_members: Vec<String> = h.conn().zrange(s.kept(), 0, -1).expect("zrange");
    assert_eq!(kept_members, vec![keys::INDEX_PIN.to_owned()], "only the pin is left");
    assert_eq!(next_due_in, None, "nothing else is due");
}

#[tokio::test]
async fn an_unsettled_task_that_expires_gives_back_its_bytes() {
    let mut h = setup().await;
    let s = Shard(2);
    let limits = Limits { max_stored_bytes_per_principal: 4 * 100_000, ..Limits::default() };
    let task = NewTask { ttl_ms: 300, ..new_task(s) };
    assert_eq!(h.store.create_task(&task, &limits).await.expect("create"), Created::Created);
    let _running = h.start(&task.task_id).await;
    assert!(kept(&h, "alice") > 0);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (_, expired) = h.due(s).await;
    for id in &expired {
        assert!(h.store.expire_task(s, id).await.expect("expire"));
    }
    assert_eq!(kept(&h, "alice"), 0, "{:?}", h.load(s));
}

#[tokio::test]
async fn a_principal_over_its_stored_bytes_is_refused_saying_when_the_oldest_frees() {
    let mut h = setup().await;
    // 4 shards of 5,000 bytes each: four calls of about 4,000 bytes fit, one a shard.
    let limits = Limits { max_stored_bytes_per_principal: 20_000, ..Limits::default() };
    let padded = |owner: &str, shard: Shard| NewTask {
        owner: owner.to_owned(),
        ttl_ms: 30_000,
        call: CallRecord {
            wire: "2026-07-28".to_owned(),
            arguments: json!({"pad": "p".repeat(4_000)}),
            ..CallRecord::default()
        },
        ..new_task(shard)
    };
    let mut admitted = Vec::new();
    let mut refusal = None;
    for i in 0..6u16 {
        let mut task = padded("alice", Shard(i % 4));
        match h.store.create_task_spread(&mut task, &limits, |_, _| {}).await.expect("create") {
            Created::Created => admitted.push(task.task_id),
            Created::OverLimit(hit) => {
                refusal = Some(hit);
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(admitted.len(), 4, "one call a shard fits: {admitted:?}");
    let hit = refusal.expect("the fifth is refused");
    assert_eq!((hit.limit.as_str(), hit.max), ("stored_bytes_per_principal", 20_000), "{hit:?}");
    assert_eq!(hit.current as i64, kept(&h, "alice"), "it names what the principal keeps: {hit:?}");
    let frees = hit.frees_in_ms.expect("when the oldest frees");
    assert!(frees > 20_000 && frees <= 30_000, "{frees}");
    // Another principal is not touched by it.
    let mut bob = padded("bob", Shard(0));
    assert_eq!(
        h.store.create_task_spread(&mut bob, &limits, |_, _| {}).await.expect("bob"),
        Created::Created
    );

    // A node whose result would pass its principal's share fails for good, saying so; nothing of
    // the result is stored.
    let attempt = h.start(&admitted[0]).await;
    let big = ToolOutcome::Result(result::text("x".repeat(3_000)));
    assert_eq!(
        h.store.complete(&attempt, Some(&big), false, 0).await.expect("complete"),
        CompleteOutcome::Settled
    );
    let task = h.store.get_task(&admitted[0]).await.expect("get").expect("exists");
    assert_eq!(task.status, TaskStatus::Failed, "{task:?}");
    let error = task.error.expect("an error");
    assert_eq!(error.data.as_ref().expect("data")["limit"], "stored_bytes_per_principal", "{error:?}");
    assert!(task_bytes(&h, &admitted[0]) < 5_000, "the result was not stored");
    assert_eq!(kept(&h, "alice"), admitted.iter().map(|id| task_bytes(&h, id)).sum::<i64>());
}

#[tokio::test]
async fn a_dead_letter_keeps_no_large_copies_and_its_retry_reads_them_from_the_task() {
    let mut h = setup().await;
    let s = Shard(3);
    let big = NewTask {
        call: CallRecord {
            wire: "2026-07-28".to_owned(),
            arguments: json!({"pad": "p".repeat(100_000)}),
            ..CallRecord::default()
        },
        ..new_task(s)
    };
    let id = h.create(&big).await;
    let attempt = h.start(&id).await;
    let error = RpcError { code: -32603, message: "e".repeat(100_000), data: None };
    h.store.complete(&attempt, Some(&ToolOutcome::Error(error)), false, 0).await.expect("complete");

    let letters = h.store.dead_letters(10).await.expect("dead letters");
    assert_eq!(letters.len(), 1, "{letters:?}");
    let letter = &letters[0];
    assert_eq!(
        (letter.arguments.clone(), letter.arguments_bytes.is_some_and(|n| n > 100_000)),
        (Value::Null, true)
    );
    assert!(letter.error["message"].as_str().is_some_and(|m| m.contains("too large")), "{:?}", letter.error);
    let stream: usize = h.conn().xlen(s.dead_letters()).expect("xlen");
    assert_eq!(stream, 1);
    let entry_bytes: usize = {
        let entries: StreamRangeReply = h.conn().xrange_all(s.dead_letters()).expect("xrange");
        entries.ids[0]
            .map
            .values()
            .map(|v| redis::from_redis_value_ref::<String>(v).map_or(0, |t| t.len()))
            .sum()
    };
    assert!(entry_bytes < 1_000, "the letter holds no copy of either: {entry_bytes} bytes");

    // The retry takes the arguments from the task, which still lives.
    let retried =
        h.store.retry_dead_letter(letter, &retry_options()).await.expect("retry").expect("a new task");
    let task = h.store.get_task(&retried).await.expect("get").expect("exists");
    assert_eq!(task.call.arguments["pad"].as_str().map(str::len), Some(100_000));
}

#[tokio::test]
async fn after_an_output_that_did_not_fit_a_shard_takes_no_call_of_its_owner_until_bytes_come_back() {
    let mut h = setup().await;
    let s = Shard(0);
    // 4 shards of 10,000 bytes.
    let limits = Limits { max_stored_bytes_per_principal: 40_000, ..Limits::default() };
    let task = NewTask { ttl_ms: 300, ..new_task(s) };
    assert_eq!(h.store.create_task(&task, &limits).await.expect("create"), Created::Created);
    let attempt = h.start(&task.task_id).await;
    let big = ToolOutcome::Result(result::text("x".repeat(20_000)));
    h.store.complete(&attempt, Some(&big), false, 0).await.expect("complete");
    assert_eq!(h.store.get_task(&task.task_id).await.expect("get").expect("task").status, TaskStatus::Failed);

    // Shard 0 keeps a few hundred bytes of alice's, far below its share, yet takes no call of hers.
    assert!(kept(&h, "alice") < 1_000);
    match h.store.create_task(&new_task(s), &limits).await.expect("create") {
        Created::OverLimit(hit) => assert_eq!(hit.limit, "stored_bytes_per_principal", "{hit:?}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // Another shard does, and so does shard 0 for bob.
    let (created, moved) = spread(&h.store, "alice", s, limits).await;
    assert_eq!(created, Created::Created);
    assert_ne!(shard_of(&moved.task_id), s);
    assert_eq!(spread(&h.store, "bob", s, limits).await.0, Created::Created);

    // The failed task's TTL runs out and its bytes come back: shard 0 takes her calls again.
    tokio::time::sleep(Duration::from_millis(400)).await;
    h.store.maintain(s, 100, Duration::from_secs(5), Duration::ZERO).await.expect("maintain");
    assert!(!h.load(s).contains_key("full:alice"), "{:?}", h.load(s));
    assert_eq!(h.store.create_task(&new_task(s), &limits).await.expect("create"), Created::Created);
}

#[tokio::test]
async fn a_repeated_escalation_answers_that_the_call_is_escalated() {
    let mut h = setup().await;
    let id = h.create(&NewTask { mode: TaskMode::Sync, escalable: true, ..new_task(Shard(2)) }).await;
    let attempt = h.start(&id).await;
    assert!(h.store.escalate(&attempt, "Working").await.expect("escalate"));
    // The reply was lost, and the tool asks again: the call is a task, and it is told so.
    assert!(h.store.escalate(&attempt, "Working").await.expect("escalate again"), "a repeat says escalated");
    let page =
        h.store.list_tasks(TaskIndex::Owner("alice"), None, 50).await.expect("list").expect("valid cursor");
    assert_eq!(page.tasks.iter().map(|t| t.task_id.as_str()).collect::<Vec<_>>(), vec![id.as_str()]);

    // A call created as a task was never escalated, nor is a synchronous call that may not be.
    let task = h.create(&new_task(Shard(2))).await;
    let attempt = h.start(&task).await;
    assert!(!h.store.escalate(&attempt, "Working").await.expect("escalate a task"));
    let plain = h.create(&NewTask { mode: TaskMode::Sync, ..new_task(Shard(2)) }).await;
    let attempt = h.start(&plain).await;
    assert!(!h.store.escalate(&attempt, "Working").await.expect("escalate a plain call"));
    assert!(!h.store.escalate(&attempt, "Working").await.expect("escalate a plain call again"));
}

/// The first terminal status event the waiter gets within 10 s.
async fn terminal_event(waiter: &mut conveyor_shared::events::Waiter) -> TaskEvent {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let delivery = tokio::time::timeout_at(deadline, waiter.recv()).await.expect("a terminal event");
        match delivery.expect("the hub runs") {
            Delivery::Event(event @ TaskEvent::Status { status, .. }) if status.is_terminal() => {
                return event;
            }
            _ => {}
        }
    }
}

#[tokio::test]
async fn a_task_that_settles_after_its_ttl_stays_readable_for_a_grace() {
    let mut h = setup().await;
    let s = Shard(2);
    let hub = h.store.events().await.expect("events");
    // A synchronous call whose work outlives its TTL (no maintenance runs here to expire it).
    let call = NewTask { ttl_ms: 300, mode: TaskMode::Sync, waiter: Some(hub.inbox(s)), ..new_task(s) };
    let mut waiter = hub.waiter(&call.task_id);
    let id = h.create(&call).await;
    let attempt = h.start(&id).await;
    let task = h.create(&NewTask { ttl_ms: 300, ..new_task(s) }).await;
    let task_attempt = h.start(&task).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let big = ToolOutcome::Result(result::text("r".repeat(100 * 1024)));
    h.store.complete(&attempt, Some(&big), false, 0).await.expect("complete");
    h.store.complete(&task_attempt, Some(&ok("late")), false, 0).await.expect("complete");

    // The waiter hears that its call settled, without the result (too large for the event), and
    // reads the result as a follower does.
    match terminal_event(&mut waiter).await {
        TaskEvent::Status { status, result, .. } => {
            assert_eq!(status, TaskStatus::Completed);
            assert!(result.is_none(), "a result over 64 KiB does not travel with its event");
        }
        other => panic!("{other:?}"),
    }
    let read = TaskRead { hidden: true, allowance: 1 << 20, ..TaskRead::new("alice", TaskParts::OUTCOME) };
    match h.store.read_task(&id, &read).await.expect("read") {
        ReadOutcome::Read(detail) => {
            assert_eq!(detail.task.status, TaskStatus::Completed);
            let text =
                detail.task.result.as_ref().and_then(|r| r["content"][0]["text"].as_str()).unwrap_or("");
            assert_eq!(text.len(), 100 * 1024, "the whole result");
        }
        other => panic!("the waiter could not read the result it was told of: {other:?}"),
    }
    // A task that settled late, with no waiter, is readable too, for a while.
    let got = h.store.get_task(&task).await.expect("get").expect("readable after settling late");
    assert_eq!(got.status, TaskStatus::Completed);
    for id in [&id, &task] {
        let ttl: i64 = h.conn().pttl(task_key(id)).expect("pttl");
        assert!(ttl > 1_000, "task {id} is kept {ttl} ms more");
        assert!(h.store.task_status(id).await.expect("status").is_some());
    }
    // Its maintenance finds nothing to expire: a settled task's keys expire by themselves.
    assert!(h.due(s).await.1.is_empty());
    assert!(h.exists(&task_key(&task)));
}

#[tokio::test]
async fn a_waiter_that_falls_behind_still_gets_the_terminal_status() {
    let h = setup().await;
    let s = Shard(1);
    let hub = h.store.events().await.expect("events");
    let slow = new_task_id(s);
    let marker = new_task_id(s);
    let mut waiter = hub.waiter(&slow);
    let mut marker_waiter = hub.waiter(&marker);
    // A waiter that reads nothing for a while (its SSE client is slow): far more progress than
    // its buffer holds, then the end, then a marker on another task; the inbox keeps their order.
    let mut pipe = redis::pipe();
    for i in 0..1_000 {
        let event = json!({"task": slow, "type": "progress", "progress": i});
        pipe.cmd("SPUBLISH").arg(hub.inbox(s)).arg(event.to_string()).ignore();
    }
    let done = json!({"task": slow, "type": "status", "status": "completed", "message": "done",
        "result": {"content": [{"type": "text", "text": "the end"}]}});
    pipe.cmd("SPUBLISH").arg(hub.inbox(s)).arg(done.to_string()).ignore();
    let mark = json!({"task": marker, "type": "status", "status": "working", "message": "marker"});
    pipe.cmd("SPUBLISH").arg(hub.inbox(s)).arg(mark.to_string()).ignore();
    let () = pipe.query(&mut h.conn()).expect("publish");
    // (A waiter registered as the hub starts may be told to resync first.)
    loop {
        match tokio::time::timeout(Duration::from_secs(10), marker_waiter.recv()).await {
            Ok(Some(Delivery::Event(_))) => break,
            Ok(Some(Delivery::Resync)) => {}
            other => panic!("the marker never arrived: {other:?}"),
        }
    }

    // Everything before the marker has reached the slow waiter or overflowed it: reading now,
    // it gets the terminal status (after what its buffer kept), not only a later recheck.
    let mut progress = 0;
    loop {
        match tokio::time::timeout(Duration::from_secs(5), waiter.recv()).await {
            Ok(Some(Delivery::Event(TaskEvent::Progress { .. }))) => progress += 1,
            Ok(Some(Delivery::Event(TaskEvent::Status { status, result, .. }))) => {
                assert_eq!(status, TaskStatus::Completed);
                assert_eq!(result.expect("the result travelled")["content"][0]["text"], "the end");
                break;
            }
            Ok(Some(Delivery::Resync)) => {}
            other => panic!("the terminal status was lost ({progress} progress events read): {other:?}"),
        }
    }
    assert!(progress < 1_000, "the buffer is bounded: {progress} progress events were kept");
}

#[tokio::test]
async fn a_call_its_gateway_stopped_waiting_for_becomes_the_clients_task() {
    let mut h = setup().await;
    let s = Shard(3);
    let id = h.create(&NewTask { mode: TaskMode::Sync, ..new_task(s) }).await;
    let attempt = h.start(&id).await;
    let read = TaskRead::new("alice", TaskParts::STATUS);
    assert!(matches!(h.store.read_task(&id, &read).await.expect("read"), ReadOutcome::Missing), "hidden");

    assert_eq!(h.store.escalate_overdue(&id, "alice", 60_000).await.expect("escalate"), Overdue::Escalated);
    assert_eq!(h.store.escalate_overdue(&id, "alice", 60_000).await.expect("again"), Overdue::Escalated);
    assert!(matches!(h.store.read_task(&id, &read).await.expect("read"), ReadOutcome::Read(_)), "visible");
    let page =
        h.store.list_tasks(TaskIndex::Owner("alice"), None, 50).await.expect("list").expect("valid cursor");
    assert_eq!(page.tasks.iter().map(|t| t.task_id.as_str()).collect::<Vec<_>>(), vec![id.as_str()]);
    // Its tool, asking to escalate it too, hears that it is a task.
    assert!(h.store.escalate(&attempt, "Working").await.expect("the tool's escalate"));
    h.store.complete(&attempt, Some(&ok("done")), false, 0).await.expect("complete");
    assert_eq!(h.store.escalate_overdue(&id, "alice", 60_000).await.expect("settled"), Overdue::Escalated);

    // A call that settled before its gateway gave up is answered with its outcome.
    let settled = h.create(&NewTask { mode: TaskMode::Sync, ..new_task(s) }).await;
    let attempt = h.start(&settled).await;
    h.store.complete(&attempt, Some(&ok("done")), false, 0).await.expect("complete");
    assert_eq!(h.store.escalate_overdue(&settled, "alice", 60_000).await.expect("late"), Overdue::Settled);
    assert_eq!(
        h.store.escalate_overdue(&new_task_id(s), "alice", 60_000).await.expect("x"),
        Overdue::Missing
    );
}
