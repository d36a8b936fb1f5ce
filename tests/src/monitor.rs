//! A Redis `MONITOR` tap that counts the commands clients send, apart from the commands Lua scripts
//! run inside the server, for benchmarks that compare how much a client asks of Redis.
//!
//! `INFO commandstats` counts an `EVALSHA` and every command its script runs alike; `MONITOR` tells
//! them apart: a client's command is printed as `1700000000.123456 [0 127.0.0.1:5555] "EVALSHA" ...`
//! and a command run by a script as `1700000000.123457 [0 lua] "HSET" ...`.
//!
//! It also tells apart the commands that wait rather than work: blocking reads (`XREADGROUP` or
//! `XREAD` with `BLOCK`, and the blocking pops) and the subscription commands and `PING`s of
//! pub/sub connections (a connection counts as one when it subscribes during the run, or when
//! `CLIENT LIST` shows it subscribed as the monitor starts), for the idle command rate of a
//! deployment.
//!
//! [`Monitor::stop`] is exact: it sends `ECHO <marker>` on a connection of its own and reads the
//! feed up to that line, so every command Redis executed before `stop` was called is counted. The
//! monitor's and the marker's own connections are left out. `MONITOR` slows Redis down a lot, so
//! count commands in a run of their own rather than in a timed one.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};

/// How long [`Monitor::stop`] waits for the feed to move before it gives up on the marker.
const STALL: Duration = Duration::from_secs(10);

/// Commands seen between [`Monitor::start`] and [`Monitor::stop`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MonitorCounts {
    /// Commands that clients sent (an `EVALSHA` counts once, whatever its script runs).
    pub client_commands: u64,
    /// [`MonitorCounts::client_commands`] per command name, uppercased.
    pub by_command: BTreeMap<String, u64>,
    /// Commands that Lua scripts (and functions) ran inside the server.
    pub script_commands: u64,
    /// [`MonitorCounts::script_commands`] per command name, uppercased.
    pub script_by_command: BTreeMap<String, u64>,
    /// Feed lines that did not parse as a command (none are expected).
    pub unparsed_lines: u64,
    /// Client commands that wait for data (also in [`MonitorCounts::client_commands`]):
    /// `XREADGROUP` and `XREAD` with `BLOCK`, `BLPOP`, `BRPOP`, `BLMOVE`, `BRPOPLPUSH`, `BLMPOP`,
    /// `BZPOPMIN`, `BZPOPMAX` and `BZMPOP`.
    pub blocking_reads: u64,
    /// [`MonitorCounts::blocking_reads`] per command name, uppercased.
    pub blocking_by_command: BTreeMap<String, u64>,
    /// Commands of pub/sub connections (also in [`MonitorCounts::client_commands`]): `SUBSCRIBE`,
    /// `SSUBSCRIBE`, `PSUBSCRIBE` and their unsubscribes, and `PING` from a connection that is
    /// subscribed.
    pub pubsub_commands: u64,
    /// [`MonitorCounts::pubsub_commands`] per command name, uppercased.
    pub pubsub_by_command: BTreeMap<String, u64>,
    /// Client `EVALSHA`s per script SHA1 (lowercase hex), to tell which scripts ran.
    pub evalsha_by_script: BTreeMap<String, u64>,
}

impl MonitorCounts {
    /// How many times clients sent `command` (any case).
    pub fn client(&self, command: &str) -> u64 {
        self.by_command.get(&command.to_ascii_uppercase()).copied().unwrap_or(0)
    }

    /// How many times clients ran the script whose SHA1 is `sha` (`EVALSHA`).
    pub fn evalsha(&self, sha: &str) -> u64 {
        self.evalsha_by_script.get(&sha.to_ascii_lowercase()).copied().unwrap_or(0)
    }

    /// How many times scripts ran `command` (any case).
    pub fn script(&self, command: &str) -> u64 {
        self.script_by_command.get(&command.to_ascii_uppercase()).copied().unwrap_or(0)
    }
}

/// A running `MONITOR` connection, counted by a background thread until [`Monitor::stop`].
pub struct Monitor {
    address: String,
    /// The monitor connection, kept to shut it down if the monitor is dropped unstopped.
    stream: TcpStream,
    stopping: Arc<AtomicBool>,
    thread: Option<JoinHandle<anyhow::Result<MonitorCounts>>>,
    marker: String,
}

impl Monitor {
    /// Connects to `redis_url` (`redis://host[:port][/db]`, no credentials), notes the
    /// connections subscribed to channels (`CLIENT LIST`), sends `MONITOR`, waits for its `OK`
    /// and counts from then on.
    pub fn start(redis_url: &str) -> anyhow::Result<Self> {
        let address = address(redis_url)?;
        let mut stream =
            TcpStream::connect(&address).with_context(|| format!("cannot connect to Redis at {address}"))?;
        stream.set_nodelay(true)?;
        let own = stream.local_addr()?.to_string();
        let mut reader = BufReader::with_capacity(1 << 20, stream.try_clone()?);
        reader.get_mut().set_read_timeout(Some(Duration::from_secs(5)))?;
        stream.write_all(&command(&["CLIENT", "LIST"]))?;
        let subscribers = subscribed_clients(&read_bulk(&mut reader, &address)?);
        stream.write_all(&command(&["MONITOR"]))?;
        let mut reply = String::new();
        reader.read_line(&mut reply).with_context(|| format!("no reply to MONITOR from {address}"))?;
        anyhow::ensure!(reply.trim_end() == "+OK", "MONITOR on {address} answered {:?}", reply.trim_end());
        // Short reads let the thread notice a stop even while Redis is quiet.
        reader.get_mut().set_read_timeout(Some(Duration::from_millis(100)))?;

        let stopping = Arc::new(AtomicBool::new(false));
        let marker = unique_marker();
        let thread = {
            let (stopping, marker) = (stopping.clone(), marker.clone());
            std::thread::Builder::new()
                .name("redis-monitor".to_owned())
                .spawn(move || count(reader, &own, subscribers, &stopping, &marker))?
        };
        Ok(Self { address, stream, stopping, thread: Some(thread), marker })
    }

    /// Stops counting: everything Redis executed before this call is in the counts.
    pub fn stop(mut self) -> anyhow::Result<MonitorCounts> {
        let thread = self.thread.take().context("the monitor was already stopped")?;
        let result = self.send_marker();
        self.stopping.store(true, Ordering::SeqCst);
        if let Err(err) = result {
            let _ = self.stream.shutdown(Shutdown::Both);
            let _ = thread.join();
            return Err(err);
        }
        let counts = thread.join().map_err(|_| anyhow::anyhow!("the monitor thread panicked"))??;
        let _ = self.stream.shutdown(Shutdown::Both);
        Ok(counts)
    }

    /// Sends `ECHO <marker>` on a new connection and waits for its reply.
    fn send_marker(&self) -> anyhow::Result<()> {
        let mut echo = TcpStream::connect(&self.address)
            .with_context(|| format!("cannot connect to Redis at {} to stop the monitor", self.address))?;
        echo.set_read_timeout(Some(STALL))?;
        echo.write_all(&command(&["ECHO", &self.marker]))?;
        // `$<len>\r\n<marker>\r\n`
        let expected = format!("${}\r\n{}\r\n", self.marker.len(), self.marker);
        let mut reply = vec![0; expected.len()];
        echo.read_exact(&mut reply).context("no reply to the monitor's ECHO marker")?;
        anyhow::ensure!(reply == expected.as_bytes(), "ECHO answered {:?}", String::from_utf8_lossy(&reply));
        Ok(())
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.stopping.store(true, Ordering::SeqCst);
            let _ = self.stream.shutdown(Shutdown::Both);
        }
    }
}

/// The monitor thread: counts feed lines until the marker's line, or fails when the connection ends
/// or the feed stalls after a stop.
fn count(
    mut reader: BufReader<TcpStream>,
    own: &str,
    mut subscribers: HashSet<String>,
    stopping: &AtomicBool,
    marker: &str,
) -> anyhow::Result<MonitorCounts> {
    let mut client: HashMap<String, u64> = HashMap::new();
    let mut script: HashMap<String, u64> = HashMap::new();
    let mut blocking: HashMap<String, u64> = HashMap::new();
    let mut pubsub: HashMap<String, u64> = HashMap::new();
    let mut evalsha: HashMap<String, u64> = HashMap::new();
    let mut counts = MonitorCounts::default();
    let mut line = Vec::with_capacity(1024);
    let mut last_data = Instant::now();
    loop {
        match reader.read_until(b'\n', &mut line) {
            Ok(0) => bail!("Redis closed the MONITOR connection before the monitor was stopped"),
            Ok(_) if line.ends_with(b"\n") => {}
            Ok(_) => continue,
            Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                // `line` keeps what was read so far; the next read completes it.
                if stopping.load(Ordering::SeqCst) && last_data.elapsed() > STALL {
                    bail!("the MONITOR feed stalled before the stop marker arrived");
                }
                continue;
            }
            Err(err) if err.kind() == ErrorKind::Interrupted => continue,
            Err(err) => return Err(err).context("reading the MONITOR feed"),
        }
        last_data = Instant::now();
        let text = String::from_utf8_lossy(&line);
        match parse_line(text.trim_end()) {
            // The marker's connection sends nothing but its `ECHO`, and the marker is unique.
            Some(Line { command, .. }) if command.eq_ignore_ascii_case("ECHO") && text.contains(marker) => {
                break;
            }
            Some(Line { client: source, command, args }) => {
                if source == "lua" {
                    counts.script_commands += 1;
                    bump(&mut script, command);
                } else if source != own {
                    counts.client_commands += 1;
                    bump(&mut client, command);
                    if command.eq_ignore_ascii_case("EVALSHA")
                        && let Some(sha) = args.split('"').nth(1)
                    {
                        *evalsha.entry(sha.to_ascii_lowercase()).or_default() += 1;
                    }
                    if is_blocking_read(command, args) {
                        counts.blocking_reads += 1;
                        bump(&mut blocking, command);
                    } else if is_subscription(command) {
                        subscribers.insert(source.to_owned());
                        counts.pubsub_commands += 1;
                        bump(&mut pubsub, command);
                    } else if command.eq_ignore_ascii_case("PING") && subscribers.contains(source) {
                        counts.pubsub_commands += 1;
                        bump(&mut pubsub, command);
                    }
                }
            }
            None => counts.unparsed_lines += 1,
        }
        line.clear();
    }
    counts.by_command = client.into_iter().collect();
    counts.script_by_command = script.into_iter().collect();
    counts.blocking_by_command = blocking.into_iter().collect();
    counts.pubsub_by_command = pubsub.into_iter().collect();
    counts.evalsha_by_script = evalsha.into_iter().collect();
    Ok(counts)
}

/// Whether a client's command waits for data: a blocking pop, or `XREAD`/`XREADGROUP` with a
/// `BLOCK` option (before `STREAMS`; `args` is the rest of the feed line, quoted words).
fn is_blocking_read(command: &str, args: &str) -> bool {
    const POPS: [&str; 8] =
        ["BLPOP", "BRPOP", "BLMOVE", "BRPOPLPUSH", "BLMPOP", "BZPOPMIN", "BZPOPMAX", "BZMPOP"];
    if POPS.iter().any(|p| command.eq_ignore_ascii_case(p)) {
        return true;
    }
    if !(command.eq_ignore_ascii_case("XREADGROUP") || command.eq_ignore_ascii_case("XREAD")) {
        return false;
    }
    // `"GROUP" "g" "c" "COUNT" "1" "BLOCK" "5000" "STREAMS" ...`: every other piece is a word.
    for word in args.split('"').skip(1).step_by(2) {
        if word.eq_ignore_ascii_case("STREAMS") {
            return false;
        }
        if word.eq_ignore_ascii_case("BLOCK") {
            return true;
        }
    }
    false
}

/// Whether a command subscribes to, or unsubscribes from, channels.
fn is_subscription(command: &str) -> bool {
    ["SUBSCRIBE", "SSUBSCRIBE", "PSUBSCRIBE", "UNSUBSCRIBE", "SUNSUBSCRIBE", "PUNSUBSCRIBE"]
        .iter()
        .any(|c| command.eq_ignore_ascii_case(c))
}

/// Reads a bulk string reply (`$<len>\r\n<bytes>\r\n`); an error reply reads as nothing (a server
/// that refuses `CLIENT LIST` leaves the pub/sub connections to be recognised by what they send).
fn read_bulk(reader: &mut BufReader<TcpStream>, address: &str) -> anyhow::Result<String> {
    let mut header = String::new();
    reader.read_line(&mut header).with_context(|| format!("no reply to CLIENT LIST from {address}"))?;
    if header.starts_with('-') {
        return Ok(String::new());
    }
    let len: usize = header
        .trim_end()
        .strip_prefix('$')
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("CLIENT LIST on {address} answered {:?}", header.trim_end()))?;
    let mut body = vec![0; len + 2];
    reader.read_exact(&mut body)?;
    body.truncate(len);
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// The addresses of the connections `CLIENT LIST` shows subscribed to channels, patterns or shard
/// channels.
fn subscribed_clients(list: &str) -> HashSet<String> {
    list.lines()
        .filter_map(|line| {
            let field = |name: &str| {
                line.split(' ').find_map(|kv| kv.strip_prefix(name).and_then(|v| v.strip_prefix('=')))
            };
            let subscribed = ["sub", "psub", "ssub"]
                .iter()
                .any(|name| field(name).and_then(|n| n.parse::<u64>().ok()).is_some_and(|n| n > 0));
            subscribed.then(|| field("addr").map(str::to_owned)).flatten()
        })
        .collect()
}

/// Counts one `command`, uppercased (without allocating for a name already counted that way).
fn bump(counts: &mut HashMap<String, u64>, command: &str) {
    if let Some(n) = counts.get_mut(command) {
        *n += 1;
    } else {
        *counts.entry(command.to_ascii_uppercase()).or_insert(0) += 1;
    }
}

/// One command of the feed: who ran it (`lua` or the client's `ip:port`), its name as printed,
/// and the rest of the line (its arguments, quoted).
#[derive(Debug, PartialEq, Eq)]
struct Line<'a> {
    client: &'a str,
    command: &'a str,
    args: &'a str,
}

/// Parses `+1700000000.123456 [0 127.0.0.1:5555] "SET" "k" "v"` (the `+` is optional). The client
/// may be `lua`, `unix:/path` or `[::1]:5555`; the name is the first quoted word after it.
fn parse_line(line: &str) -> Option<Line<'_>> {
    let line = line.strip_prefix('+').unwrap_or(line);
    let (timestamp, rest) = line.split_once(' ')?;
    timestamp.parse::<f64>().ok()?;
    let rest = rest.strip_prefix('[')?;
    let (_db, rest) = rest.split_once(' ')?;
    let (client, rest) = rest.split_once("] \"")?;
    // A command name has no quotes or escapes in it; anything else is not a command line.
    let (command, args) = rest.split_once('"')?;
    if command.is_empty() || command.contains('\\') {
        return None;
    }
    Some(Line { client, command, args })
}

/// `host:port` from `redis://host[:port][/db]`.
fn address(redis_url: &str) -> anyhow::Result<String> {
    let rest = redis_url
        .strip_prefix("redis://")
        .with_context(|| format!("{redis_url} is not a redis:// URL (TLS and sockets are not supported)"))?;
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    anyhow::ensure!(!authority.contains('@'), "{redis_url}: the monitor does not support credentials");
    anyhow::ensure!(!authority.is_empty(), "{redis_url} names no host");
    // A port follows the last colon, unless that colon is inside an IPv6 literal.
    let has_port =
        authority.rsplit_once(':').is_some_and(|(host, _)| !host.is_empty() && !authority.ends_with(']'))
            && (authority.starts_with('[') || authority.matches(':').count() == 1);
    Ok(if has_port { authority.to_owned() } else { format!("{authority}:6379") })
}

/// A RESP array of bulk strings.
fn command(words: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", words.len()).into_bytes();
    for word in words {
        out.extend_from_slice(format!("${}\r\n{word}\r\n", word.len()).as_bytes());
    }
    out
}

fn unique_marker() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or_default();
    format!("conveyor-monitor-stop-{}-{nanos}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::RedisServer;

    #[test]
    fn lines_parse() {
        let line = |client, command, args| Some(Line { client, command, args });
        assert_eq!(
            parse_line(r#"+1700000000.123456 [0 127.0.0.1:5555] "EVALSHA" "abc" "1" "k""#),
            line("127.0.0.1:5555", "EVALSHA", r#" "abc" "1" "k""#)
        );
        assert_eq!(
            parse_line(r#"1700000000.123456 [3 lua] "hset" "k" "f" "v""#),
            line("lua", "hset", r#" "k" "f" "v""#)
        );
        assert_eq!(
            parse_line(r#"1700000000.1 [0 [::1]:6000] "get" "a\"] \"b""#),
            line("[::1]:6000", "get", r#" "a\"] \"b""#)
        );
        assert_eq!(
            parse_line(r#"1700000000.1 [0 unix:/tmp/r.sock] "PING""#),
            line("unix:/tmp/r.sock", "PING", "")
        );
        assert_eq!(parse_line("+OK"), None);
        assert_eq!(parse_line("-ERR something"), None);
    }

    #[test]
    fn addresses_come_from_urls() -> anyhow::Result<()> {
        assert_eq!(address("redis://127.0.0.1:6380")?, "127.0.0.1:6380");
        assert_eq!(address("redis://localhost/2")?, "localhost:6379");
        assert_eq!(address("redis://[::1]:7000/0")?, "[::1]:7000");
        assert_eq!(address("redis://[::1]")?, "[::1]:6379");
        assert!(address("redis://:secret@127.0.0.1:6379").is_err());
        assert!(address("rediss://127.0.0.1:6379").is_err());
        Ok(())
    }

    #[test]
    fn counts_client_commands_apart_from_script_commands() -> anyhow::Result<()> {
        let server = RedisServer::start()?;
        // Connected first, so that the client's own handshake is not in the counts.
        let mut conn = server.connection()?;
        let monitor = Monitor::start(&server.url())?;
        redis::cmd("SET").arg("a").arg("1").query::<()>(&mut conn)?;
        let _: Option<String> = redis::cmd("get").arg("a").query(&mut conn)?;
        let _: i64 = redis::cmd("INCR").arg("n").query(&mut conn)?;
        let script = "redis.call('SET', KEYS[1], ARGV[1]) return redis.call('GET', KEYS[1])";
        let value: String = redis::cmd("EVAL").arg(script).arg(1).arg("k").arg("v").query(&mut conn)?;
        assert_eq!(value, "v");
        let sha: String = redis::cmd("SCRIPT").arg("LOAD").arg(script).query(&mut conn)?;
        let _: String = redis::cmd("EVALSHA").arg(&sha).arg(1).arg("k").arg("w").query(&mut conn)?;
        let counts = monitor.stop()?;

        assert_eq!(counts.client_commands, 6, "{counts:?}");
        assert_eq!(
            counts.by_command,
            BTreeMap::from([
                ("EVAL".into(), 1),
                ("EVALSHA".into(), 1),
                ("GET".into(), 1),
                ("INCR".into(), 1),
                ("SCRIPT".into(), 1),
                ("SET".into(), 1)
            ])
        );
        assert_eq!(counts.script_commands, 4, "{counts:?}");
        assert_eq!((counts.script("set"), counts.script("get")), (2, 2));
        assert_eq!(counts.evalsha(&sha.to_ascii_uppercase()), 1, "{counts:?}");
        assert_eq!(counts.evalsha_by_script.len(), 1, "{counts:?}");
        assert_eq!(counts.unparsed_lines, 0);
        Ok(())
    }

    #[test]
    fn stop_counts_everything_sent_before_it() -> anyhow::Result<()> {
        let server = RedisServer::start()?;
        let mut conn = server.connection()?;
        let monitor = Monitor::start(&server.url())?;
        let mut pipe = redis::pipe();
        for _ in 0..5000 {
            pipe.cmd("INCR").arg("n").ignore();
        }
        pipe.query::<()>(&mut conn)?;
        let counts = monitor.stop()?;
        assert_eq!(counts.client_commands, 5000);
        assert_eq!(counts.client("INCR"), 5000);
        assert_eq!(counts.script_commands, 0);

        // A second monitor on the same server starts from nothing.
        let again = Monitor::start(&server.url())?;
        let _: i64 = redis::cmd("INCR").arg("n").query(&mut conn)?;
        assert_eq!(again.stop()?.by_command, BTreeMap::from([("INCR".into(), 1)]));
        Ok(())
    }

    /// Sends one command on a raw connection and reads until `until` shows up in the replies.
    fn raw(stream: &mut TcpStream, words: &[&str], until: &str) -> anyhow::Result<()> {
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        stream.write_all(&command(words))?;
        let mut seen = Vec::new();
        let mut buf = [0u8; 512];
        while !String::from_utf8_lossy(&seen).contains(until) {
            let n = stream.read(&mut buf)?;
            anyhow::ensure!(n > 0, "the connection closed");
            seen.extend_from_slice(&buf[..n]);
        }
        Ok(())
    }

    #[test]
    fn blocking_reads_and_pubsub_connections_are_told_apart() -> anyhow::Result<()> {
        let server = RedisServer::start()?;
        let mut conn = server.connection()?;
        // Subscribed before the monitor starts: known from CLIENT LIST.
        let mut early = TcpStream::connect(address(&server.url())?)?;
        raw(&mut early, &["SUBSCRIBE", "a"], "subscribe")?;
        let monitor = Monitor::start(&server.url())?;
        raw(&mut early, &["PING"], "pong")?;
        // Subscribed while it runs.
        let mut late = TcpStream::connect(address(&server.url())?)?;
        raw(&mut late, &["SSUBSCRIBE", "b"], "ssubscribe")?;
        raw(&mut late, &["PING"], "pong")?;
        let _: () = redis::cmd("XADD").arg("s").arg("*").arg("f").arg("v").query(&mut conn)?;
        let _: redis::Value =
            redis::cmd("XREAD").arg("BLOCK").arg(10).arg("STREAMS").arg("s").arg("$").query(&mut conn)?;
        let _: redis::Value =
            redis::cmd("XREAD").arg("COUNT").arg(1).arg("STREAMS").arg("s").arg("0").query(&mut conn)?;
        let _: redis::Value = redis::cmd("BLPOP").arg("list").arg(0.01).query(&mut conn)?;
        let _: String = redis::cmd("PING").query(&mut conn)?;
        let counts = monitor.stop()?;

        assert_eq!(counts.blocking_reads, 2, "{counts:?}");
        assert_eq!(counts.blocking_by_command, BTreeMap::from([("BLPOP".into(), 1), ("XREAD".into(), 1)]));
        assert_eq!(counts.pubsub_commands, 3, "{counts:?}");
        assert_eq!(counts.pubsub_by_command, BTreeMap::from([("PING".into(), 2), ("SSUBSCRIBE".into(), 1)]));
        assert_eq!((counts.client("XREAD"), counts.client("PING"), counts.client_commands), (2, 3, 8));
        Ok(())
    }
}
