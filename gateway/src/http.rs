//! Streamable HTTP at `/mcp`, plus `/healthz`, `/readyz` and the web view's routes
//! ([`crate::ui`]). This module owns everything that is about HTTP: Host and Origin checks,
//! authentication and its challenge (the web view's API goes through the same), the resource
//! metadata, content negotiation, body limits and deadlines, measuring a body before it is parsed,
//! the MCP request headers, and turning a handler's reply into a JSON body or an SSE stream.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use std::net::SocketAddr;

use axum::Extension;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use conveyor_shared::input;
use conveyor_shared::json_limits::{self, JsonCost, JsonLimits, JsonRefusal};
use futures::StreamExt;
use rmcp::model::ErrorCode;
use serde_json::{Value, json};
use tracing::Instrument;

use crate::access::Caller;
use crate::admission::{Admitted, AllowedOrigin, MCP_PATH, authenticate, origin_of, rate_limit};
use crate::methods::{self, Reply, RequestCtx, StreamItem, resume};
use crate::rpc::{self, RpcFailure};
use crate::signing::Purpose;
use crate::state::{AppState, ReplyBudget};
use crate::wire::{self, Wire};

/// The router of a gateway. Built by a plain function so tests can drive it without a socket.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route(MCP_PATH, get(get_mcp).post(post_mcp).delete(delete_mcp))
        .route("/healthz", get(crate::probes::healthz))
        .route("/readyz", get(crate::probes::readyz))
        .route("/.well-known/oauth-protected-resource", get(resource_metadata))
        .route("/.well-known/oauth-protected-resource/mcp", get(resource_metadata))
        .merge(crate::ui::routes())
        .with_state(state)
}

/// `GET /mcp` opens no standalone stream (every message belongs to a request); with
/// `Last-Event-ID` it resumes a request's reply stream that closed before its response
/// ([`methods::resume`]), on any gateway.
async fn get_mcp(
    State(state): State<Arc<AppState>>,
    _: AllowedOrigin,
    connection: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
) -> Response {
    let Some(last) = headers.get("last-event-id").and_then(|v| v.to_str().ok()).map(str::trim) else {
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, "POST")],
            "Conveyor's gateway is stateless: POST JSON-RPC requests to /mcp; server messages arrive on each request's \
             own stream. GET resumes such a stream with Last-Event-ID.",
        )
            .into_response();
    };
    // Not [`Admitted`]: a GET without Last-Event-ID is told how the gateway works without a token,
    // and a resumed stream's rate limit answers an SSE client with a status, not a JSON-RPC body.
    let remote = connection.map(|Extension(ConnectInfo(addr))| addr);
    let caller = match authenticate(&state, &headers, remote).await {
        Ok(caller) => caller,
        Err(r) => return r,
    };
    // A resumed stream is a request like any other: it counts against the principal's rate. An
    // SSE client reads the status, not a JSON-RPC body: 429 with Retry-After.
    if let Err(failure) = rate_limit(&state, &caller).await {
        let retry_s = failure.error.data.as_ref().and_then(|d| d["retryAfterMs"].as_u64()).unwrap_or(1000);
        let mut response = failure_response(&Value::Null, failure.with_status(StatusCode::TOO_MANY_REQUESTS));
        if let Ok(value) = header::HeaderValue::from_str(&retry_s.div_ceil(1000).to_string()) {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        return response;
    }
    if !Accepts::from(&headers).sse {
        return failure_response(
            &Value::Null,
            RpcFailure::invalid_request("Resuming a stream needs Accept: text/event-stream")
                .with_status(StatusCode::NOT_ACCEPTABLE),
        );
    }
    let key = match state.signer.key(&state.store).await {
        Ok(key) => key,
        Err(failure) => return failure_response(&Value::Null, failure),
    };
    let (point, seq) = match resume::parse_event_id(&key, last) {
        Ok(parsed) => parsed,
        Err(why) => {
            return failure_response(
                &Value::Null,
                RpcFailure::invalid_request(format!(
                    "Last-Event-ID names no stream of this deployment: {why}"
                ))
                .with_status(StatusCode::NOT_FOUND),
            );
        }
    };
    let id = point.request_id.clone();
    let held = match methods::hold_stream(&state, &caller) {
        Ok(held) => held,
        Err(failure) => return failure_response(&id, failure.with_status(StatusCode::TOO_MANY_REQUESTS)),
    };
    let reply_budget = ReplyBudget::default();
    match resume::resume(state.clone(), caller, point, reply_budget.clone()).await {
        Ok(stream) => {
            let stream = stream
                .map(move |item| {
                    let _held = &held;
                    item
                })
                .boxed();
            holding_body(sse_response(id, stream, Some(key), seq), reply_budget)
        }
        Err(failure) => failure_response(&id, failure.with_status(StatusCode::NOT_FOUND)),
    }
}

async fn delete_mcp(_: AllowedOrigin) -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        [(header::ALLOW, "POST")],
        "Conveyor's gateway keeps no sessions to delete.",
    )
        .into_response()
}

/// A JSON-RPC message as the client sent it, checked for shape but not yet for meaning.
#[derive(Debug)]
pub enum Decoded {
    /// A request: it gets a response.
    Request { id: Value, method: String, params: Value },
    /// A notification: accepted, nothing to answer.
    Notification { method: String, params: Value },
    /// The client's answer to a request of the server: its `result`, or `{"error": ...}` when it
    /// answered with an error.
    Response { id: Value, answer: Value },
}

/// Decodes one JSON-RPC message from a body, measuring it first so that no parse costs more than
/// `limits` allow. Pure and bounded: the fuzz target `jsonrpc_message` drives it with any bytes.
pub fn decode_message(body: &[u8], limits: &JsonLimits) -> Result<(Decoded, JsonCost), RpcFailure> {
    let cost = json_limits::measure(body, limits).map_err(|refusal| match refusal {
        JsonRefusal::Syntax(e) => RpcFailure::parse_error(format!("Parse error: {e}")),
        refused => RpcFailure::invalid_request(format!("Invalid Request: {refused}"))
            .with_data(json!({"limit": limit_name(&refused)}))
            .with_status(StatusCode::PAYLOAD_TOO_LARGE),
    })?;
    let message: Value =
        serde_json::from_slice(body).map_err(|e| RpcFailure::parse_error(format!("Parse error: {e}")))?;
    let Value::Object(mut object) = message else {
        let what = if message.is_array() {
            "batches are not supported; send one message per request"
        } else {
            "a JSON-RPC message must be an object"
        };
        return Err(RpcFailure::invalid_request(format!("Invalid Request: {what}")));
    };
    let id = object.remove("id");
    let invalid = |id: Option<Value>, message: &str| {
        let failure = RpcFailure::invalid_request(format!("Invalid Request: {message}"));
        // The id travels back only when it is one a client could match.
        failure.with_data(json!({"id": id.filter(|id| id.is_string() || id.is_i64() || id.is_u64())}))
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid(id, "`jsonrpc` must be \"2.0\""));
    }
    let method = match object.remove("method") {
        Some(Value::String(method)) => method,
        None if id.is_some() && (object.contains_key("result") || object.contains_key("error")) => {
            let answer = match object.remove("result") {
                Some(result) => result,
                None => json!({"error": object.remove("error")}),
            };
            return Ok((Decoded::Response { id: id.unwrap_or(Value::Null), answer }, cost));
        }
        _ => return Err(invalid(id, "`method` must be a string")),
    };
    let params = object.remove("params").unwrap_or(Value::Null);
    if !(params.is_null() || params.is_object()) {
        return Err(invalid(id, "`params` must be an object"));
    }
    let Some(id) = id else {
        return Ok((Decoded::Notification { method, params }, cost));
    };
    if !(id.is_string() || id.is_i64() || id.is_u64()) {
        return Err(invalid(None, "`id` must be a string or an integer"));
    }
    Ok((Decoded::Request { id, method, params }, cost))
}

fn limit_name(refusal: &JsonRefusal) -> &'static str {
    match refusal {
        JsonRefusal::TooDeep { .. } => "max_json_depth",
        JsonRefusal::TooCostly { .. } => "max_parsed_bytes",
        JsonRefusal::Syntax(_) => "syntax",
    }
}

/// The JSON-RPC id a refusal of [`decode_message`] carries, if any.
fn refused_id(failure: &mut RpcFailure) -> Value {
    let id = failure.error.data.as_mut().and_then(|d| d.as_object_mut()).and_then(|d| d.remove("id"));
    if failure.error.data.as_ref().is_some_and(|d| d.as_object().is_some_and(|o| o.is_empty())) {
        failure.error.data = None;
    }
    id.unwrap_or(Value::Null)
}

async fn post_mcp(
    State(state): State<Arc<AppState>>,
    Admitted(caller): Admitted,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if !content_type_is_json(&headers) {
        return failure_response(
            &Value::Null,
            RpcFailure::invalid_request("Content-Type must be application/json")
                .with_status(StatusCode::UNSUPPORTED_MEDIA_TYPE),
        );
    }
    let accepts = Accepts::from(&headers);
    if !accepts.json && !accepts.sse {
        return failure_response(
            &Value::Null,
            RpcFailure::invalid_request("Accept must include application/json and text/event-stream")
                .with_status(StatusCode::NOT_ACCEPTABLE),
        );
    }
    let (body, mut budget) = match read_body(&state, &caller, &headers, body).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    let (decoded, cost) = match decode_message(&body, &state.config.json_limits) {
        Ok(decoded) => decoded,
        Err(mut failure) => {
            let id = refused_id(&mut failure);
            return failure_response(&id, failure);
        }
    };
    // The parsed message is held as long as the body was; count it against the same budget.
    match state.budget.reserve(&caller.principal, cost.parsed_bytes).await {
        Ok(permit) => budget.merge(permit),
        Err(failure) => return failure_response(&Value::Null, failure),
    }
    drop(body);
    let session = session_of(&state, &headers, &caller).await;
    let (id, method, params) = match decoded {
        Decoded::Request { id, method, params } => (id, method, params),
        // Neither needs an answer: a response reaches the task whose node asked, a notification
        // is acted on (a cancelled call) or ignored.
        Decoded::Notification { method, params } => {
            methods::notification(&state, &caller, session.as_ref().map(|s| &s.nonce), &method, &params)
                .await;
            return StatusCode::ACCEPTED.into_response();
        }
        Decoded::Response { id, answer } => {
            methods::client_response(&state, &caller, &id, answer).await;
            return StatusCode::ACCEPTED.into_response();
        }
    };
    let wire = Wire::detect(&method, &params, &headers);
    if wire == Wire::V2026
        && let Err(failure) = wire::check_2026(&method, &params, &headers)
    {
        crate::metrics::refused(&method);
        return failure_response(&id, failure);
    }
    let span = crate::telemetry::request_span(&headers, &params, &method, &id, wire);
    let client_capabilities = match (wire, &session) {
        (Wire::V2026, _) => {
            input::kept_capabilities(params.get("_meta").and_then(|m| m.get(wire::META_CLIENT_CAPABILITIES)))
        }
        (Wire::V2025, Some(session)) => session.capabilities.clone(),
        (Wire::V2025, None) => json!({}),
    };
    let new_session = (wire == Wire::V2025 && method == "initialize")
        .then(|| Session::new(input::kept_capabilities(params.get("capabilities")), &caller.principal));
    let reply_budget = ReplyBudget::default();
    let ctx = RequestCtx {
        id: id.clone(),
        method,
        params,
        wire,
        accepts_sse: accepts.sse,
        caller,
        budget: Some(budget),
        reply_budget: reply_budget.clone(),
        client_capabilities,
        session: session.map(|s| s.nonce),
        param_headers: if wire == Wire::V2026 { wire::param_headers(&headers) } else { Vec::new() },
    };
    let signer = state.clone();
    let handled = methods::handle(state, ctx).instrument(span.clone()).await;
    if let Err(failure) = &handled {
        crate::telemetry::record_error(&span, failure.error.code.0, &failure.error.message);
    }
    let response = match handled {
        Ok(Reply::Result(result)) if new_session.is_some() => {
            // A 2025-11-25 session id carries what the gateway must remember of the session (its
            // client's capabilities), signed, so that every gateway reads it and none stores it.
            // None is ever terminated, and DELETE answers 405.
            let mut response = json_response(StatusCode::OK, rpc::response(&id, result));
            let token = match (new_session, signer.signer.key(&signer.store).await) {
                (Some(session), Ok(key)) => key.sign(Purpose::Session, &session),
                // Redis is away: a session without remembered capabilities still works.
                _ => conveyor_shared::model::random_id(),
            };
            if let Ok(session) = header::HeaderValue::from_str(&token) {
                response.headers_mut().insert("mcp-session-id", session);
            }
            response
        }
        Ok(Reply::Result(result)) => {
            // The answer's text is built while the read it came from is still held; one built of
            // a read (it can be megabytes) off the threads that serve every request.
            let text = if reply_budget.holds() {
                let request = id.clone();
                match tokio::task::spawn_blocking(move || rpc::response(&request, result).to_string()).await {
                    Ok(text) => text,
                    Err(e) => {
                        return failure_response(
                            &id,
                            RpcFailure::internal(format!("building the answer: {e}")),
                        );
                    }
                }
            } else {
                rpc::response(&id, result).to_string()
            };
            return reply_budget.json(StatusCode::OK, text);
        }
        Ok(Reply::Stream(stream)) => {
            let key = signer.signer.key(&signer.store).await.ok();
            // A stream may read a result at its end (a task that settled with a large one).
            return holding_body(sse_response(id, stream, key, 0), reply_budget);
        }
        Err(failure) => failure_response(&id, with_wire_status(wire, failure)),
    };
    if reply_budget.holds() { holding_body(response, reply_budget) } else { response }
}

/// A response whose body keeps `held` until the body ends (every part handed to the connection,
/// or the client gone): a stream, which may hold a read it makes at its end.
fn holding_body(response: Response, held: ReplyBudget) -> Response {
    let (parts, body) = response.into_parts();
    let stream = body.into_data_stream().map(move |part| {
        let _held = &held;
        part
    });
    Response::from_parts(parts, Body::from_stream(stream))
}

/// What a 2025-11-25 session id says, signed: the client's input capabilities, a nonce that
/// tells sessions apart (request ids repeat from one session to the next), and the principal that
/// opened it, so that nobody else can act in it (its log level, its calls' cancel keys).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Session {
    #[serde(rename = "c")]
    pub capabilities: Value,
    #[serde(rename = "n")]
    pub nonce: String,
    #[serde(rename = "p", default)]
    pub principal: String,
}

impl Session {
    fn new(capabilities: Value, principal: &str) -> Self {
        Self { capabilities, nonce: conveyor_shared::model::random_id(), principal: principal.to_owned() }
    }
}

/// The session a request names, when its id is one this deployment signed for this caller. An id
/// that is not (a forged one, or another principal's) is no session: the request is served, and
/// its tools cannot ask the client anything; another principal's is in the audit log.
async fn session_of(state: &AppState, headers: &HeaderMap, caller: &Caller) -> Option<Session> {
    let token = headers.get("mcp-session-id")?.to_str().ok()?;
    let key = state.signer.key(&state.store).await.ok()?;
    let session: Session = key.verify(Purpose::Session, token).ok()?;
    if session.principal != caller.principal {
        crate::methods::audit_denied(caller, "session", &session.nonce, "a session id of another principal");
        return None;
    }
    Some(session)
}

/// Reads the body within the body deadline, holding budget for it as it comes: the whole
/// Content-Length first when the client sends one (refused at once when over the limit), else as
/// the bytes arrive, so that a body that trickles in holds only what has arrived.
async fn read_body(
    state: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    body: Body,
) -> Result<(Bytes, crate::state::BudgetPermit), Response> {
    use http_body_util::BodyExt as _;
    let limit = state.config.max_body_bytes;
    let too_large = || {
        failure_response(
            &Value::Null,
            RpcFailure::invalid_request(format!(
                "request body exceeds the limit of {limit} bytes (CONVEYOR_MAX_BODY_BYTES)"
            ))
            .with_data(json!({"limit": "max_body_bytes", "max": limit}))
            .with_status(StatusCode::PAYLOAD_TOO_LARGE),
        )
    };
    let refused = |failure: RpcFailure| failure_response(&Value::Null, failure);
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let budget = &state.budget;
    let mut held = budget.reserve(&caller.principal, declared.unwrap_or(0)).await.map_err(refused)?;
    let mut reserved = declared.unwrap_or(0);
    let timeout = state.config.body_timeout;
    let read = async {
        let mut body = body;
        let mut bytes = Vec::with_capacity(declared.unwrap_or(0));
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| {
                refused(RpcFailure::invalid_request(format!("cannot read the request body: {e}")))
            })?;
            let Ok(data) = frame.into_data() else { continue };
            let size = bytes.len() + data.len();
            if size > limit {
                return Err(too_large());
            }
            if size > reserved {
                // Grow by at least 64 KiB at a time, so that a body of small chunks costs few waits.
                let more = (size - reserved).max(64 * 1024).min(limit - reserved);
                held.merge(budget.reserve(&caller.principal, more).await.map_err(refused)?);
                reserved += more;
            }
            bytes.extend_from_slice(&data);
        }
        Ok(Bytes::from(bytes))
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(Ok(bytes)) => Ok((bytes, held)),
        Ok(Err(response)) => Err(response),
        Err(_) => {
            let mut response = failure_response(
                &Value::Null,
                RpcFailure::invalid_request(format!(
                    "the request body did not arrive within {} ms (CONVEYOR_BODY_TIMEOUT_MS)",
                    timeout.as_millis()
                ))
                .with_data(json!({"limit": "body_timeout_ms", "max": timeout.as_millis() as u64}))
                .with_status(StatusCode::REQUEST_TIMEOUT),
            );
            response.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
            Err(response)
        }
    }
}

/// On 2026-07-28 an error's HTTP status follows its code: unknown and removed methods are 404,
/// refused requests 400. On 2025-11-25 JSON-RPC errors travel with 200.
fn with_wire_status(wire: Wire, failure: RpcFailure) -> RpcFailure {
    if wire != Wire::V2026 || failure.http_status != StatusCode::OK {
        return failure;
    }
    let status = match failure.error.code {
        ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
        ErrorCode::INVALID_PARAMS
        | ErrorCode::HEADER_MISMATCH
        | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
        | ErrorCode::UNSUPPORTED_PROTOCOL_VERSION => StatusCode::BAD_REQUEST,
        _ => StatusCode::OK,
    };
    failure.with_status(status)
}

fn json_response(status: StatusCode, body: Value) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

fn failure_response(id: &Value, failure: RpcFailure) -> Response {
    failure.into_response_for(id)
}

/// A reply stream as SSE. A resumable one (it starts with [`StreamItem::Resumable`]) opens with a
/// priming event (an id, a `retry`, no data), gives every event an id from which it can be
/// resumed, and may close without a response when its tool lets it go; `first_seq` is where the
/// ids of a resumed stream continue.
fn sse_response(
    id: Value,
    stream: methods::ReplyStream,
    key: Option<crate::signing::SigningKey>,
    first_seq: u64,
) -> Response {
    struct Position {
        point: Option<methods::ResumePoint>,
        seq: u64,
        released: bool,
    }
    let events = stream.scan(Position { point: None, seq: first_seq, released: false }, move |at, item| {
        if at.released {
            return std::future::ready(None);
        }
        let next_id = |at: &mut Position| {
            at.seq += 1;
            match (&at.point, &key) {
                (Some(point), Some(key)) => Some(resume::event_id(key, point, at.seq)),
                _ => None,
            }
        };
        let with_id = |event: Event, id: Option<String>| match id {
            Some(id) => event.id(id),
            None => event,
        };
        let event = match item {
            StreamItem::Resumable(point) => {
                at.point = Some(point);
                let id = next_id(at);
                // The priming event: an id to resume from, and no message. Its data is blank
                // rather than absent (an event without data is never delivered), and its type is
                // not `message`, so that clients do not try to read it as JSON-RPC.
                with_id(Event::default().event("ready").retry(resume::RESUME_AFTER).data(" "), id)
            }
            StreamItem::Release { retry_ms } => {
                at.released = true;
                let id = next_id(at);
                with_id(
                    Event::default()
                        .retry(Duration::from_millis(retry_ms))
                        .comment("the stream closes here; resume it with Last-Event-ID"),
                    id,
                )
            }
            item => {
                let message = match item {
                    StreamItem::Done(Ok(result)) => rpc::response(&id, result),
                    StreamItem::Done(Err(failure)) => rpc::error_response(&id, &failure.error),
                    StreamItem::Message(m) => m,
                    StreamItem::Resumable(_) | StreamItem::Release { .. } => Value::Null,
                };
                let id = next_id(at);
                with_id(Event::default().event("message").data(message.to_string()), id)
            }
        };
        std::future::ready(Some(Ok::<_, Infallible>(event)))
    });
    Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))).into_response()
}

struct Accepts {
    json: bool,
    sse: bool,
}

impl From<&HeaderMap> for Accepts {
    fn from(headers: &HeaderMap) -> Self {
        let mut accepts = Accepts { json: false, sse: false };
        let values = headers.get_all(header::ACCEPT);
        if values.iter().next().is_none() {
            // No Accept header means anything goes.
            return Accepts { json: true, sse: true };
        }
        for value in values.iter().filter_map(|v| v.to_str().ok()) {
            for item in value.split(',') {
                let mime = item.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
                match mime.as_str() {
                    "application/json" | "application/*" => accepts.json = true,
                    "text/event-stream" | "text/*" => accepts.sse = true,
                    "*/*" => {
                        accepts.json = true;
                        accepts.sse = true;
                    }
                    _ => {}
                }
            }
        }
        accepts
    }
}

fn content_type_is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case("application/json"))
        .unwrap_or(false)
}

/// RFC 9728 protected resource metadata: which authorization server issues tokens for `/mcp`.
async fn resource_metadata(
    State(state): State<Arc<AppState>>,
    _: AllowedOrigin,
    headers: HeaderMap,
) -> Response {
    let resource = state
        .auth
        .resource_url
        .clone()
        .unwrap_or_else(|| format!("{}{MCP_PATH}", origin_of(&state, &headers)));
    json_response(StatusCode::OK, state.auth.metadata(&resource))
}
