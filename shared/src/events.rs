//! [`EventHub`]: a process's one subscription connection, to its inbox in every shard (and, for a
//! worker, to every shard's cancel channel), with sharded pub/sub (`SSUBSCRIBE`, Redis 7), which
//! works the same on one server and on a cluster.
//!
//! A request that waits on a task never subscribes to anything: it registers a local waiter here
//! (a channel keyed by task id) and its process's inbox channel in the task. The scripts that move
//! the task publish to the inboxes of its waiters, and the hub hands each message to the local
//! waiters of its task. When the connection drops or is re-established (a Redis restart, a
//! failover), messages may have been lost, so every waiter is told to read its task again
//! ([`Delivery::Resync`]), and cancel listeners to look at their running tasks again. A waiter
//! whose buffer is full (its client reads slowly) is told the same once it has read what its
//! buffer holds, and the event that ended its task is kept for it apart from the buffer: a slow
//! reader gets its task's end as soon as it reads, not at its next recheck.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::{PushInfo, PushKind};
use tokio::sync::{mpsc, watch};

use crate::conn::Backend;
use crate::keys::Shard;
use crate::model::{InboxMessage, TaskEvent};

/// Messages buffered per waiter; one that falls further behind is told to read its task again,
/// and what ended its task is kept for it beside the buffer ([`Overflow`]).
const WAITER_BUFFER: usize = 256;
/// How often the single-server subscriber checks that its connection still answers.
const KEEPALIVE: Duration = Duration::from_secs(20);

/// What a waiter receives.
#[derive(Debug, Clone, PartialEq)]
pub enum Delivery {
    Event(TaskEvent),
    /// Events may have been lost: read the task again.
    Resync,
}

/// What a cancel listener receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelNotice {
    /// This task was cancelled (or failed, or expired): stop its running nodes.
    Task(String),
    /// Notices may have been lost: check every running task's status (and the maintenance
    /// holder looks at every shard).
    Resync,
    /// Something in this shard falls due sooner than its maintenance planned to look.
    Maintain(Shard),
}

/// The message on a shard's cancel channel that wakes its maintenance (see `prelude.lua`); a task
/// id never takes this form.
pub const MAINTAIN_NOTICE: &str = "$maintain";

type Waiters = HashMap<String, HashMap<u64, WaiterSender>>;

/// What a waiter missed because its buffer was full (its client reads slowly): a resync, and the
/// terminal status of its task, kept apart from the buffer so that neither is ever dropped. A
/// waiter reads it once its buffer is empty, so it comes after everything that came before it.
#[derive(Default)]
struct Overflow {
    missed: Mutex<Missed>,
    /// Wakes a waiter that waits on an empty buffer.
    filled: tokio::sync::Notify,
}

#[derive(Default)]
struct Missed {
    resync: bool,
    /// The event that ended the task (a terminal status, or its expiry): after it the task never
    /// changes, so it is all a waiter needs of what it missed.
    last: Option<TaskEvent>,
}

impl Overflow {
    fn missed(&self) -> std::sync::MutexGuard<'_, Missed> {
        // Each critical section sets or takes a field, so a poisoned lock is still whole.
        self.missed.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What was missed, the end of the task first (a resync would only find it again).
    fn take(&self) -> Option<Delivery> {
        let mut missed = self.missed();
        let resync = std::mem::take(&mut missed.resync);
        match missed.last.take() {
            Some(last) => Some(Delivery::Event(last)),
            None => resync.then_some(Delivery::Resync),
        }
    }
}

/// The hub's end of one waiter.
#[derive(Clone)]
struct WaiterSender {
    sender: mpsc::Sender<Delivery>,
    overflow: Arc<Overflow>,
}

impl WaiterSender {
    /// Hands `delivery` over without waiting: into the buffer, or, when it is full, into the
    /// overflow, where the end of a task is kept and anything else becomes a resync.
    fn send(&self, delivery: Delivery) {
        let Err(mpsc::error::TrySendError::Full(delivery)) = self.sender.try_send(delivery) else {
            // Sent, or the waiter is gone.
            return;
        };
        {
            let mut missed = self.overflow.missed();
            match delivery {
                Delivery::Event(event) if ends_task(&event) => missed.last = Some(event),
                Delivery::Event(_) | Delivery::Resync => missed.resync = true,
            }
        }
        self.overflow.filled.notify_one();
    }
}

/// Whether `event` ends its task: nothing comes after it.
fn ends_task(event: &TaskEvent) -> bool {
    match event {
        TaskEvent::Status { status, .. } => status.is_terminal(),
        TaskEvent::Expired => true,
        TaskEvent::Progress { .. } | TaskEvent::Log { .. } | TaskEvent::Reconnect { .. } => false,
    }
}

struct Shared {
    waiters: Mutex<Waiters>,
    next_id: std::sync::atomic::AtomicU64,
    /// Every cancel listener of the process: one per worker, and `conveyor up --workers N` runs N.
    cancels: Mutex<Vec<mpsc::UnboundedSender<CancelNotice>>>,
    inboxes: Vec<String>,
    /// Each shard's cancel channel, by name.
    cancel_channels: HashMap<String, Shard>,
}

impl Shared {
    fn waiters(&self) -> std::sync::MutexGuard<'_, Waiters> {
        // Every critical section is a single map operation, so a poisoned lock is still whole.
        self.waiters.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn deliver(&self, message: InboxMessage) {
        let targets: Vec<WaiterSender> =
            self.waiters().get(&message.task_id).map(|w| w.values().cloned().collect()).unwrap_or_default();
        for target in targets {
            target.send(Delivery::Event(message.event.clone()));
        }
    }

    fn resync(&self) {
        let targets: Vec<WaiterSender> = self.waiters().values().flat_map(|w| w.values().cloned()).collect();
        for target in targets {
            target.send(Delivery::Resync);
        }
        self.cancel(CancelNotice::Resync);
    }

    fn cancel(&self, notice: CancelNotice) {
        let mut cancels = self.cancels.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // A listener whose receiver is gone (its worker stopped) is dropped here.
        cancels.retain(|listener| listener.send(notice.clone()).is_ok());
    }

    fn handle(&self, push: PushInfo, settled: bool) -> Handled {
        match push.kind {
            PushKind::SMessage | PushKind::Message => {
                let (Some(channel), Some(payload)) = (push.data.first(), push.data.get(1)) else {
                    return Handled::Ignored;
                };
                let (Ok(channel), Ok(payload)) = (
                    redis::from_redis_value_ref::<String>(channel),
                    redis::from_redis_value_ref::<String>(payload),
                ) else {
                    return Handled::Ignored;
                };
                if self.inboxes.contains(&channel) {
                    // A lean batch's completions for one inbox travel as one array (ADR-0028).
                    for message in InboxMessage::parse_all(&payload) {
                        match message {
                            Ok(message) => self.deliver(message),
                            Err(e) => tracing::warn!(error = %e, "ignoring a malformed inbox message"),
                        }
                    }
                } else if payload == MAINTAIN_NOTICE {
                    if let Some(shard) = self.cancel_channels.get(&channel) {
                        self.cancel(CancelNotice::Maintain(*shard));
                    }
                } else {
                    self.cancel(CancelNotice::Task(payload));
                }
                Handled::Ignored
            }
            PushKind::Disconnection => Handled::Disconnected,
            // A confirmation after the first subscription is a resubscription after a reconnect
            // or a failover: what was published meanwhile is lost.
            PushKind::SSubscribe | PushKind::SUnsubscribe if settled => {
                self.resync();
                Handled::Ignored
            }
            _ => Handled::Ignored,
        }
    }
}

enum Handled {
    Ignored,
    Disconnected,
}

/// The process's subscriber. Cheap to clone.
#[derive(Clone)]
pub struct EventHub {
    shared: Arc<Shared>,
    process: Arc<str>,
    ready: watch::Receiver<bool>,
    start: Arc<Mutex<Option<Starter>>>,
}

struct Starter {
    backend: Backend,
    channels: Vec<String>,
    ready: watch::Sender<bool>,
}

/// One waiter's deliveries for one task; dropping it unregisters the waiter.
pub struct Waiter {
    receiver: mpsc::Receiver<Delivery>,
    overflow: Arc<Overflow>,
    task_id: String,
    id: u64,
    shared: Arc<Shared>,
}

impl Waiter {
    /// The next delivery: what the buffer holds, then what overflowed it. `None` only when the
    /// hub is gone.
    pub async fn recv(&mut self) -> Option<Delivery> {
        loop {
            match self.receiver.try_recv() {
                Ok(delivery) => return Some(delivery),
                Err(mpsc::error::TryRecvError::Disconnected) => return self.overflow.take(),
                Err(mpsc::error::TryRecvError::Empty) => {}
            }
            if let Some(missed) = self.overflow.take() {
                return Some(missed);
            }
            tokio::select! {
                biased;
                delivery = self.receiver.recv() => match delivery {
                    Some(delivery) => return Some(delivery),
                    None => return self.overflow.take(),
                },
                // Something overflowed while the buffer was empty (it filled and drained between
                // the looks above): look again.
                () = self.overflow.filled.notified() => {}
            }
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut waiters = self.shared.waiters();
        if let Some(task) = waiters.get_mut(&self.task_id) {
            task.remove(&self.id);
            if task.is_empty() {
                waiters.remove(&self.task_id);
            }
        }
    }
}

impl EventHub {
    /// A hub for process `process` over `shards` shards: its inbox and the cancel channel of
    /// every shard. Nothing connects until [`EventHub::start`].
    pub fn new(backend: Backend, shards: u16, process: &str) -> Self {
        let inboxes: Vec<String> = (0..shards).map(|s| Shard(s).inbox(process)).collect();
        let mut channels = inboxes.clone();
        channels.extend((0..shards).map(|s| Shard(s).cancel_channel()));
        let (ready_tx, ready) = watch::channel(false);
        Self {
            shared: Arc::new(Shared {
                waiters: Mutex::default(),
                next_id: Default::default(),
                cancels: Mutex::default(),
                inboxes,
                cancel_channels: (0..shards).map(|s| (Shard(s).cancel_channel(), Shard(s))).collect(),
            }),
            process: process.into(),
            ready,
            start: Arc::new(Mutex::new(Some(Starter { backend, channels, ready: ready_tx }))),
        }
    }

    /// The inbox channel of this process in `shard`, as waiters register it in tasks.
    pub fn inbox(&self, shard: Shard) -> String {
        shard.inbox(&self.process)
    }

    /// Starts the subscriber (once) and waits up to `timeout` until its subscriptions are live.
    /// Waiters registered while it is not live are told to resync when it is.
    pub async fn start(&self, timeout: Duration) -> bool {
        if self.is_live() {
            return true;
        }
        let starter = self.start.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        if let Some(starter) = starter {
            tokio::spawn(run(self.shared.clone(), starter));
        }
        let mut ready = self.ready.clone();
        let live = tokio::time::timeout(timeout, ready.wait_for(|live| *live)).await;
        matches!(live, Ok(Ok(_)))
    }

    /// Whether the subscriber runs and is subscribed now.
    pub fn is_live(&self) -> bool {
        *self.ready.borrow()
    }

    /// Cancellations of any shard's tasks from now on. Every listener hears every notice, so the
    /// workers that share a process each hear the cancels of their own nodes.
    pub fn cancel_notices(&self) -> mpsc::UnboundedReceiver<CancelNotice> {
        let (sender, receiver) = mpsc::unbounded_channel();
        self.shared.cancels.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(sender);
        receiver
    }

    /// Registers a local waiter for `task_id`'s events. Register before the Redis step that makes
    /// the task publish to this process (creating it, watching it), so that nothing is missed.
    pub fn waiter(&self, task_id: &str) -> Waiter {
        let (sender, receiver) = mpsc::channel(WAITER_BUFFER);
        let overflow = Arc::new(Overflow::default());
        let id = self.shared.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let sender = WaiterSender { sender, overflow: overflow.clone() };
        self.shared.waiters().entry(task_id.to_owned()).or_default().insert(id, sender);
        Waiter { receiver, overflow, task_id: task_id.to_owned(), id, shared: self.shared.clone() }
    }
}

/// The subscriber: connects, subscribes to every channel, hands out messages, and starts again
/// (telling everyone to resync) whenever the connection is lost.
async fn run(shared: Arc<Shared>, starter: Starter) {
    let Starter { backend, channels, ready } = starter;
    let mut failures = 0u32;
    loop {
        let (push_tx, mut pushes) = mpsc::unbounded_channel::<PushInfo>();
        let subscribed = if backend.cluster {
            subscribe_cluster(&backend, &channels, push_tx).await.map(Connection::Cluster)
        } else {
            subscribe_single(&backend, &channels, push_tx).await.map(Connection::Single)
        };
        let mut connection = match subscribed {
            Ok(c) => c,
            Err(e) => {
                failures += 1;
                if failures == 1 || failures.is_multiple_of(20) {
                    tracing::warn!(error = %e, "cannot subscribe to events; retrying");
                }
                tokio::time::sleep(Duration::from_millis(100u64 << failures.min(4))).await;
                continue;
            }
        };
        failures = 0;
        let _ = ready.send(true);
        // Whatever was published while no subscription was live is lost: everyone reads again.
        shared.resync();
        let mut keepalive = tokio::time::interval(KEEPALIVE);
        keepalive.tick().await;
        loop {
            tokio::select! {
                push = pushes.recv() => match push {
                    // A lost node (a restart, a failover): subscribe again from scratch, on the
                    // nodes that serve the channels' slots now, rather than wait for the client
                    // to find its way back to a node that may never return.
                    Some(push) => {
                        if let Handled::Disconnected = shared.handle(push, true) {
                            break;
                        }
                    }
                    None => break,
                },
                _ = keepalive.tick() => {
                    if !still_subscribed(&mut connection, &channels).await {
                        break;
                    }
                }
            }
        }
        let _ = ready.send(false);
        tracing::info!("event subscription lost; subscribing again");
    }
}

enum Connection {
    Single(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

/// Whether every channel still has a subscriber where its slot is served (ours among them): asks
/// `PUBSUB SHARDNUMSUB` of the node that serves each channel now. A failover or a resharding that
/// left a subscription behind on a node that no longer serves its slot shows as a zero.
async fn still_subscribed(connection: &mut Connection, channels: &[String]) -> bool {
    use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
    let counts = |value: redis::Value| -> Option<Vec<u64>> {
        let pairs: Vec<(String, u64)> = redis::from_redis_value(value).ok()?;
        Some(pairs.into_iter().map(|(_, n)| n).collect())
    };
    match connection {
        Connection::Single(c) => {
            let mut cmd = redis::cmd("PUBSUB");
            cmd.arg("SHARDNUMSUB").arg(channels);
            match c.send_packed_command(&cmd).await.ok().and_then(counts) {
                Some(n) => n.len() == channels.len() && n.iter().all(|&n| n > 0),
                None => false,
            }
        }
        Connection::Cluster(c) => {
            for channel in channels {
                let mut cmd = redis::cmd("PUBSUB");
                cmd.arg("SHARDNUMSUB").arg(channel);
                let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::with_key(
                    channel,
                    SlotAddr::Master,
                )));
                match c.route_command(cmd, route).await.ok().and_then(counts) {
                    Some(n) if n.first().is_some_and(|&n| n > 0) => {}
                    _ => return false,
                }
            }
            true
        }
    }
}

/// On one server: a RESP3 connection whose pushes reach `push`. `SSUBSCRIBE` is sent without
/// waiting for a reply (its confirmations arrive as pushes), then a `PING`, whose reply comes after
/// those confirmations: once it is back, every subscription is live.
async fn subscribe_single(
    backend: &Backend,
    channels: &[String],
    push: mpsc::UnboundedSender<PushInfo>,
) -> Result<redis::aio::MultiplexedConnection, crate::StoreError> {
    let mut conn = backend.single_push_connection(push).await?;
    for channel in channels {
        let mut cmd = redis::cmd("SSUBSCRIBE");
        cmd.arg(channel).set_no_response(true);
        conn.send_packed_command(&cmd).await?;
    }
    redis::cmd("PING").query_async::<()>(&mut conn).await?;
    Ok(conn)
}

async fn subscribe_cluster(
    backend: &Backend,
    channels: &[String],
    push: mpsc::UnboundedSender<PushInfo>,
) -> Result<redis::cluster_async::ClusterConnection, crate::StoreError> {
    let mut conn = backend.cluster_connection(Some(backend.timeout()), Some(push)).await?;
    for channel in channels {
        conn.ssubscribe(channel).await?;
    }
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TaskStatus;

    fn shared() -> Arc<Shared> {
        Arc::new(Shared {
            waiters: Mutex::default(),
            next_id: Default::default(),
            cancels: Mutex::default(),
            inboxes: Vec::new(),
            cancel_channels: HashMap::new(),
        })
    }

    fn waiter(shared: &Arc<Shared>, task_id: &str) -> Waiter {
        let (sender, receiver) = mpsc::channel(WAITER_BUFFER);
        let overflow = Arc::new(Overflow::default());
        shared
            .waiters()
            .entry(task_id.to_owned())
            .or_default()
            .insert(0, WaiterSender { sender, overflow: overflow.clone() });
        Waiter { receiver, overflow, task_id: task_id.to_owned(), id: 0, shared: shared.clone() }
    }

    fn event(event: TaskEvent) -> InboxMessage {
        InboxMessage { task_id: "t".to_owned(), event }
    }

    fn progress(progress: f64) -> TaskEvent {
        TaskEvent::Progress { progress, total: None, message: None }
    }

    fn status(status: TaskStatus) -> TaskEvent {
        TaskEvent::Status {
            status,
            message: None,
            result: None,
            error: None,
            input_requests: None,
            input_rounds: Box::default(),
            escalated: false,
        }
    }

    #[tokio::test]
    async fn a_full_buffer_keeps_the_end_of_the_task_after_what_it_holds() {
        let shared = shared();
        let mut waiter = waiter(&shared, "t");
        for i in 0..WAITER_BUFFER + 10 {
            shared.deliver(event(progress(i as f64)));
        }
        shared.deliver(event(status(TaskStatus::Completed)));
        shared.resync();
        for i in 0..WAITER_BUFFER {
            assert_eq!(waiter.recv().await, Some(Delivery::Event(progress(i as f64))));
        }
        // What overflowed: the end, which a resync would only find again.
        assert_eq!(waiter.recv().await, Some(Delivery::Event(status(TaskStatus::Completed))));
        assert!(waiter.overflow.take().is_none(), "told once");
    }

    #[tokio::test]
    async fn a_full_buffer_without_an_end_asks_for_a_resync_once_it_is_read() {
        let shared = shared();
        let mut waiter = waiter(&shared, "t");
        for i in 0..WAITER_BUFFER + 1 {
            shared.deliver(event(progress(i as f64)));
        }
        for _ in 0..WAITER_BUFFER {
            assert!(matches!(waiter.recv().await, Some(Delivery::Event(TaskEvent::Progress { .. }))));
        }
        assert_eq!(waiter.recv().await, Some(Delivery::Resync));
        // An event that finds room again goes through the buffer, as ever.
        shared.deliver(event(status(TaskStatus::Failed)));
        assert_eq!(waiter.recv().await, Some(Delivery::Event(status(TaskStatus::Failed))));
    }
}
