//! A TCP proxy in front of Redis that can stall what a process sends while Redis's replies still
//! reach it: a process whose commands hang (a stalled network path, a congested link) while it
//! still hears what was already on its way. A stall can be set off by a reply: the first reply
//! that contains a given text (a stream's name in a delivery) holds every connection's commands
//! from the moment just before that reply is handed on.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// A proxy on a free local port, forwarding to one upstream address. Dropping it closes every
/// connection through it.
pub struct StallProxy {
    port: u16,
    shared: Arc<Shared>,
}

struct Shared {
    upstream: SocketAddr,
    state: Mutex<State>,
    changed: Condvar,
    stop: AtomicBool,
    sockets: Mutex<Vec<TcpStream>>,
}

#[derive(Default)]
struct State {
    /// Client-to-server data waits until then.
    paused_until: Option<Instant>,
    /// The text whose first appearance in a reply sets off a stall of this length.
    armed: Option<(Vec<u8>, Duration)>,
    /// When the stall set off by a reply began and ends.
    stalled: Option<(Instant, Instant)>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // Each change is one assignment: a poisoned lock holds nothing half-done.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Blocks while client-to-server traffic is paused.
    fn wait_while_paused(&self) {
        let mut state = self.state();
        while let Some(until) = state.paused_until {
            let now = Instant::now();
            if now >= until || self.stop.load(Ordering::SeqCst) {
                state.paused_until = None;
                break;
            }
            state = self.changed.wait_timeout(state, until - now).unwrap_or_else(PoisonError::into_inner).0;
        }
    }
}

impl StallProxy {
    /// A proxy to `127.0.0.1:upstream_port`.
    pub fn start(upstream_port: u16) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        listener.set_nonblocking(true)?;
        let shared = Arc::new(Shared {
            upstream: SocketAddr::from(([127, 0, 0, 1], upstream_port)),
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            sockets: Mutex::new(Vec::new()),
        });
        let accepting = shared.clone();
        std::thread::spawn(move || accept(listener, accepting));
        Ok(Self { port, shared })
    }

    /// `redis://` URL of the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The first reply from now on that contains `text` stalls every connection's commands for
    /// `stall`, from just before that reply is handed on; replies keep flowing.
    pub fn stall_after_reply_containing(&self, text: &str, stall: Duration) {
        let mut state = self.shared.state();
        state.armed = Some((text.as_bytes().to_vec(), stall));
        state.stalled = None;
    }

    /// When the stall set off by a reply began and when it ends, once it has begun.
    pub fn stalled(&self) -> Option<(Instant, Instant)> {
        self.shared.state().stalled
    }
}

impl Drop for StallProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.changed.notify_all();
        for socket in self.shared.sockets.lock().unwrap_or_else(PoisonError::into_inner).drain(..) {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

fn accept(listener: TcpListener, shared: Arc<Shared>) {
    while !shared.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) => {
                let _ = client.set_nonblocking(false);
                let Ok(server) = TcpStream::connect(shared.upstream) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                let (Ok(client_in), Ok(server_out), Ok(server_in), Ok(client_out)) =
                    (client.try_clone(), server.try_clone(), server.try_clone(), client.try_clone())
                else {
                    continue;
                };
                shared.sockets.lock().unwrap_or_else(PoisonError::into_inner).extend([client, server]);
                let upstream = shared.clone();
                std::thread::spawn(move || commands(client_in, server_out, upstream));
                let downstream = shared.clone();
                std::thread::spawn(move || replies(server_in, client_out, downstream));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(_) => return,
        }
    }
}

/// Client to server: each chunk waits out a stall before it goes on.
fn commands(mut from: TcpStream, mut to: TcpStream, shared: Arc<Shared>) {
    let mut buffer = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        shared.wait_while_paused();
        if to.write_all(&buffer[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// Server to client: never held; a reply with the armed text sets off the stall before it goes on.
fn replies(mut from: TcpStream, mut to: TcpStream, shared: Arc<Shared>) {
    let mut buffer = [0u8; 16 * 1024];
    // The end of the previous chunk, so that a text cut across two chunks is still seen.
    let mut tail: Vec<u8> = Vec::new();
    loop {
        let n = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        {
            let mut state = shared.state();
            if let Some((text, stall)) = state.armed.clone() {
                let mut seen = std::mem::take(&mut tail);
                seen.extend_from_slice(&buffer[..n]);
                if seen.windows(text.len().max(1)).any(|w| w == text.as_slice()) {
                    let now = Instant::now();
                    state.armed = None;
                    state.paused_until = Some(now + stall);
                    state.stalled = Some((now, now + stall));
                } else {
                    tail = seen[seen.len().saturating_sub(text.len())..].to_vec();
                }
            }
        }
        if to.write_all(&buffer[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
