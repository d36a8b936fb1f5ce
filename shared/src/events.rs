//! [`EventHub`]: one Redis pub/sub connection per process, shared by every subscriber in it.
//!
//! Waiting requests (a synchronous `tools/call`, a 2025-11-25 `tasks/result`), tools waiting for
//! input, and a worker's cancel listener all subscribe here, so a gateway holding a thousand waits
//! holds one pub/sub connection, and a new wait costs one SUBSCRIBE, not a new connection.
//!
//! One actor task owns the connection and applies subscribe and release commands in order, so an
//! UNSUBSCRIBE for a channel's last departing subscriber can never overtake the SUBSCRIBE of the
//! next one. When the connection drops, every subscription ends (`recv` returns `None`); callers
//! subscribe again and re-read the state they wait on, which is how they also cover messages
//! that pub/sub dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use redis::aio::PubSubSink;
use tokio::sync::{mpsc, oneshot};

use crate::error::StoreError;

/// Messages buffered per subscriber; a subscriber that falls further behind loses messages and
/// relies on re-reading the state, as with any pub/sub loss.
const SUBSCRIBER_BUFFER: usize = 256;

type Senders = HashMap<String, HashMap<u64, mpsc::Sender<String>>>;

enum Command {
    Subscribe(String, oneshot::Sender<Result<(), StoreError>>),
    Release(String),
    Disconnected(u64),
}

struct Shared {
    senders: Mutex<Senders>,
    commands: mpsc::UnboundedSender<Command>,
    next_id: std::sync::atomic::AtomicU64,
}

impl Shared {
    fn senders(&self) -> std::sync::MutexGuard<'_, Senders> {
        // Every critical section is a single map operation, so a poisoned lock is still whole.
        self.senders.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// What the actor needs, held until the first subscription starts it.
struct Pending {
    commands: mpsc::UnboundedReceiver<Command>,
    client: redis::Client,
    timeout: Duration,
}

/// The process's shared subscriber. Cheap to clone.
#[derive(Clone)]
pub struct EventHub {
    shared: Arc<Shared>,
    pending: Arc<Mutex<Option<Pending>>>,
}

/// One subscriber's messages on one channel; dropping it releases the channel.
pub struct Subscription {
    receiver: mpsc::Receiver<String>,
    channel: String,
    id: u64,
    shared: Arc<Shared>,
}

impl Subscription {
    /// The next message, or `None` once the connection dropped (subscribe again and re-read).
    pub async fn recv(&mut self) -> Option<String> {
        self.receiver.recv().await
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut senders = self.shared.senders();
        if let Some(channel) = senders.get_mut(&self.channel) {
            channel.remove(&self.id);
            if channel.is_empty() {
                senders.remove(&self.channel);
            }
        }
        drop(senders);
        let _ = self.shared.commands.send(Command::Release(self.channel.clone()));
    }
}

impl EventHub {
    /// A hub for `client`; its connection is made on the first subscription.
    pub fn new(client: redis::Client, timeout: Duration) -> Self {
        let (commands, receiver) = mpsc::unbounded_channel();
        Self {
            shared: Arc::new(Shared { senders: Mutex::default(), commands, next_id: Default::default() }),
            pending: Arc::new(Mutex::new(Some(Pending { commands: receiver, client, timeout }))),
        }
    }

    /// Subscribes to `channel`. When this returns, Redis has confirmed the subscription, so state
    /// read afterwards cannot miss a message published after that read.
    pub async fn subscribe(&self, channel: &str) -> Result<Subscription, StoreError> {
        self.start_actor();
        let (sender, receiver) = mpsc::channel(SUBSCRIBER_BUFFER);
        let id = self.shared.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.shared.senders().entry(channel.to_owned()).or_default().insert(id, sender);
        let subscription =
            Subscription { receiver, channel: channel.to_owned(), id, shared: self.shared.clone() };
        let (reply, confirmed) = oneshot::channel();
        self.shared
            .commands
            .send(Command::Subscribe(channel.to_owned(), reply))
            .map_err(|_| StoreError::Unavailable("the event hub has stopped".to_owned()))?;
        confirmed.await.map_err(|_| StoreError::Unavailable("the event hub has stopped".to_owned()))??;
        Ok(subscription)
    }

    fn start_actor(&self) {
        let pending = self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        if let Some(Pending { commands, client, timeout }) = pending {
            tokio::spawn(run(self.shared.clone(), commands, client, timeout));
        }
    }
}

/// The actor: owns the connection, applies commands in order.
async fn run(
    shared: Arc<Shared>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    client: redis::Client,
    timeout: Duration,
) {
    let mut sink: Option<PubSubSink> = None;
    let mut generation = 0u64;
    while let Some(command) = commands.recv().await {
        match command {
            Command::Subscribe(channel, reply) => {
                if sink.is_none() {
                    match tokio::time::timeout(timeout, client.get_async_pubsub()).await {
                        Ok(Ok(pubsub)) => {
                            generation += 1;
                            let (new_sink, stream) = pubsub.split();
                            tokio::spawn(forward(shared.clone(), stream, generation));
                            sink = Some(new_sink);
                        }
                        Ok(Err(e)) => {
                            let _ = reply.send(Err(e.into()));
                            continue;
                        }
                        Err(_) => {
                            let _ = reply.send(Err(StoreError::Timeout(timeout)));
                            continue;
                        }
                    }
                }
                let Some(active) = sink.as_mut() else { continue };
                let outcome = match tokio::time::timeout(timeout, active.subscribe(&channel)).await {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(StoreError::from(e)),
                    Err(_) => Err(StoreError::Timeout(timeout)),
                };
                if outcome.is_err() {
                    // The connection is unusable: the next subscription makes a new one.
                    sink = None;
                }
                let _ = reply.send(outcome);
            }
            Command::Release(channel) => {
                let still_wanted = shared.senders().contains_key(&channel);
                if !still_wanted && let Some(active) = sink.as_mut() {
                    let _ = tokio::time::timeout(timeout, active.unsubscribe(&channel)).await;
                }
            }
            Command::Disconnected(lost) => {
                if lost == generation {
                    sink = None;
                    // Ending every subscription tells each waiter to subscribe again and re-read.
                    shared.senders().clear();
                }
            }
        }
    }
}

/// Hands each message to the subscribers of its channel until the connection drops.
async fn forward(shared: Arc<Shared>, mut stream: redis::aio::PubSubStream, generation: u64) {
    while let Some(message) = stream.next().await {
        let Ok(payload) = message.get_payload::<String>() else { continue };
        let channel = message.get_channel_name().to_owned();
        let targets: Vec<mpsc::Sender<String>> =
            shared.senders().get(&channel).map(|s| s.values().cloned().collect()).unwrap_or_default();
        for target in targets {
            let _ = target.try_send(payload.clone());
        }
    }
    let _ = shared.commands.send(Command::Disconnected(generation));
}
