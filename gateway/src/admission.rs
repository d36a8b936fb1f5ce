//! Admission: what every request to `/mcp` and to the web view's API passes before anything else.
//! The Host and Origin are checked (DNS-rebinding protection), the bearer token authenticated
//! (the principal; 401 with a challenge naming the resource metadata, or 403), and the principal's
//! request rate counted in Redis, shared by every gateway. [`Admitted`] runs all three as an axum
//! extractor, [`Authenticated`] the first two, [`AllowedOrigin`] the first.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::access::Caller;
use crate::auth::AuthError;
use crate::rpc::RpcFailure;
use crate::state::AppState;

/// The caller of a request that passed admission. A refusal is the ready response `/mcp` gives:
/// 403 for a Host or Origin, 401 or 403 with a challenge for the token, and the overload error of
/// the rate limit.
pub struct Admitted(pub Caller);

impl FromRequestParts<Arc<AppState>> for Admitted {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<AppState>) -> Result<Self, Response> {
        let Authenticated(caller) = Authenticated::from_request_parts(parts, state).await?;
        rate_limit(state, &caller).await.map_err(IntoResponse::into_response)?;
        Ok(Admitted(caller))
    }
}

/// The caller of a request whose origin is allowed and whose token is valid, before its rate is
/// counted: for a route that renders the rate limit's refusal its own way (the web view's API).
pub struct Authenticated(pub Caller);

impl FromRequestParts<Arc<AppState>> for Authenticated {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<AppState>) -> Result<Self, Response> {
        AllowedOrigin::from_request_parts(parts, state).await?;
        let remote = parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|ConnectInfo(addr)| *addr);
        Ok(Authenticated(authenticate(state, &parts.headers, remote).await?))
    }
}

/// A request whose Host and Origin this gateway serves ([`check_origin`]): what every route but
/// the probes passes first, also those that need no caller.
pub struct AllowedOrigin;

impl FromRequestParts<Arc<AppState>> for AllowedOrigin {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<AppState>) -> Result<Self, Response> {
        check_origin(state, &parts.headers).map(|()| AllowedOrigin)
    }
}

/// DNS-rebinding protection: the Host must be one this gateway serves, and a browser's Origin
/// must point at such a host too.
#[allow(clippy::result_large_err)] // the error is a ready response; this runs once per request
fn check_origin(state: &AppState, headers: &HeaderMap) -> Result<(), Response> {
    let allowed = &state.http.allowed_hosts;
    if allowed.iter().any(|h| h == "*") {
        return Ok(());
    }
    let host_allowed = |authority: &str| {
        let host = strip_port(authority);
        allowed.iter().any(|a| a.eq_ignore_ascii_case(host))
    };
    if let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok())
        && !host_allowed(host)
    {
        return Err(forbidden(&format!(
            "Host `{host}` is not served here; set CONVEYOR_ALLOWED_HOSTS to allow it"
        )));
    }
    if let Some(origin) = headers.get(header::ORIGIN).and_then(|h| h.to_str().ok()) {
        let authority = origin.split_once("://").map(|(_, rest)| rest).unwrap_or(origin);
        let authority = authority.split('/').next().unwrap_or("");
        if origin == "null" || !host_allowed(authority) {
            return Err(forbidden(&format!(
                "Origin `{origin}` is not allowed; set CONVEYOR_ALLOWED_HOSTS to allow it"
            )));
        }
    }
    Ok(())
}

fn forbidden(message: &str) -> Response {
    RpcFailure::invalid_request(message).with_status(StatusCode::FORBIDDEN).into_response()
}

/// `host:port`, `[v6]:port` or a bare host, without the port.
fn strip_port(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host,
        _ => authority,
    }
}

/// Who is asking. Tasks are bound to it: other principals (but operators) get "not found".
/// Without a valid token the answer is 401 with a challenge that names the resource metadata.
#[allow(clippy::result_large_err)] // the error is a ready response; this runs once per request
pub(crate) async fn authenticate(
    state: &AppState,
    headers: &HeaderMap,
    remote: Option<SocketAddr>,
) -> Result<Caller, Response> {
    let authorization = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    let failure = match state.auth.authenticate(authorization).await {
        Ok(identity) => return Ok(state.access.caller(identity)),
        Err(failure) => failure,
    };
    let metadata = format!("{}/.well-known/oauth-protected-resource{}", origin_of(state, headers), MCP_PATH);
    let scopes = state.auth.required_scopes().join(" ");
    let scope = if scopes.is_empty() { String::new() } else { format!(", scope=\"{scopes}\"") };
    let (status, message, challenge) = match &failure {
        AuthError::Missing => (
            StatusCode::UNAUTHORIZED,
            "Unauthorized: send `Authorization: Bearer <token>`".to_owned(),
            format!("Bearer resource_metadata=\"{metadata}\"{scope}"),
        ),
        AuthError::Invalid(why) => (
            StatusCode::UNAUTHORIZED,
            format!("Unauthorized: {why}"),
            format!(
                "Bearer resource_metadata=\"{metadata}\", error=\"invalid_token\", error_description=\"{}\"{scope}",
                why.replace(['"', '\\'], "'")
            ),
        ),
        AuthError::InsufficientScope { required } => (
            StatusCode::FORBIDDEN,
            format!("Forbidden: the token lacks a required scope ({})", required.join(" ")),
            format!("Bearer resource_metadata=\"{metadata}\", error=\"insufficient_scope\"{scope}"),
        ),
    };
    tracing::info!(target: "conveyor::audit", event = "denied", reason = %message, remote = ?remote, "request refused: not authenticated");
    let mut response = RpcFailure::invalid_request(message).with_status(status).into_response();
    if let Ok(value) = header::HeaderValue::from_str(&challenge) {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, value);
    }
    Err(response)
}

/// Counts the request against its principal's rate, shared by every gateway through Redis.
pub(crate) async fn rate_limit(state: &AppState, caller: &Caller) -> Result<(), RpcFailure> {
    let limits = &state.shared_limits;
    if limits.requests_per_second <= 0.0 {
        return Ok(());
    }
    let wait = state.store.rate_limit(&caller.principal, limits.requests_per_second, limits.burst).await?;
    let Some(retry_after_ms) = wait else { return Ok(()) };
    tracing::info!(target: "conveyor::audit", event = "denied", principal = %caller.principal, reason = "rate limit", "request refused: over the rate limit");
    Err(RpcFailure::new(
        crate::rpc::codes::OVERLOADED,
        format!(
            "Too many requests: principal `{}` may send {} requests per second (limit requests_per_second); nothing was done. Retry in {retry_after_ms} ms.",
            caller.principal, limits.requests_per_second
        ),
        Some(
            json!({"limit": "requests_per_second", "max": limits.requests_per_second, "retryAfterMs": retry_after_ms}),
        ),
    ))
}

/// The MCP endpoint's path, which the resource URL ends with.
pub const MCP_PATH: &str = "/mcp";

/// `scheme://host[:port]` of this resource: from `--resource-url`, else from the request.
pub(crate) fn origin_of(state: &AppState, headers: &HeaderMap) -> String {
    if let Some(url) = &state.auth.resource_url {
        return url.strip_suffix(MCP_PATH).unwrap_or(url).trim_end_matches('/').to_owned();
    }
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("localhost");
    let scheme = headers
        .get("x-forwarded-proto")
        .and_then(|h| h.to_str().ok())
        .filter(|p| *p == "https")
        .unwrap_or("http");
    format!("{scheme}://{host}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_stripped_from_hosts() {
        assert_eq!(strip_port("localhost:8080"), "localhost");
        assert_eq!(strip_port("[::1]:8080"), "::1");
        assert_eq!(strip_port("127.0.0.1"), "127.0.0.1");
    }
}
