//! Who is calling: static tokens from a file (stored as SHA-256 digests) and JWT access tokens of
//! an OAuth 2.1 authorization server, checked against its JWKS. The gateway is an OAuth resource
//! server in the sense of the MCP authorization specification: a request without a valid token
//! gets 401 with `WWW-Authenticate: Bearer resource_metadata=...`, and the metadata document
//! (RFC 9728) names the authorization server.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::RwLock;

/// A caller the gateway recognised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub principal: String,
    pub groups: Vec<String>,
}

/// Why a request was not authenticated. Each maps to a `WWW-Authenticate` challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthError {
    /// No `Authorization: Bearer` header.
    Missing,
    /// A token that is not valid: unknown, expired, wrong audience or issuer, bad signature.
    Invalid(String),
    /// A valid token without a scope the resource requires.
    InsufficientScope { required: Vec<String> },
}

/// The static tokens of a tokens file, by SHA-256 digest of the token.
#[derive(Debug, Default, Clone)]
pub struct StaticTokens {
    by_digest: HashMap<[u8; 32], Identity>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensFile {
    #[serde(default, rename = "token")]
    tokens: Vec<TokenEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenEntry {
    principal: String,
    #[serde(default)]
    groups: Vec<String>,
    /// Hex SHA-256 of the token (`conveyor token new` prints it).
    sha256: String,
}

/// The hex SHA-256 digest a tokens file stores for `token`.
pub fn token_digest(token: &str) -> String {
    Sha256::digest(token.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

impl StaticTokens {
    /// Reads a tokens file (TOML: `[[token]]` tables of `principal`, `groups`, `sha256`); the
    /// error names the file and the entry that is wrong.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let file: TokensFile = toml::from_str(text).map_err(|e| e.to_string())?;
        let mut by_digest = HashMap::new();
        for (i, entry) in file.tokens.into_iter().enumerate() {
            let n = i + 1;
            if entry.principal.trim().is_empty() || entry.principal.len() > MAX_PRINCIPAL_LEN {
                return Err(format!("token {n}: `principal` must be 1 to {MAX_PRINCIPAL_LEN} characters"));
            }
            if entry.principal.contains('#') {
                // `#` joins a token issuer and subject in a JWT's principal: a static principal
                // holding one could pass for someone an authorization server vouches for.
                return Err(format!(
                    "token {n} ({}): `principal` must not contain `#`, which names JWT principals (issuer#subject)",
                    entry.principal
                ));
            }
            let digest = parse_digest(&entry.sha256)
                .ok_or_else(|| format!("token {n} ({}): `sha256` must be 64 hex digits", entry.principal))?;
            let identity = Identity { principal: entry.principal, groups: entry.groups };
            if by_digest.insert(digest, identity).is_some() {
                return Err(format!("token {n}: the same token is listed twice"));
            }
        }
        Ok(Self { by_digest })
    }

    pub fn is_empty(&self) -> bool {
        self.by_digest.is_empty()
    }

    /// The identity of a token. The lookup is by digest, so that the tokens themselves are never
    /// held, and comparing digests leaks nothing useful about a token through timing.
    pub fn identify(&self, token: &str) -> Option<&Identity> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        self.by_digest.get(&digest)
    }
}

fn parse_digest(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.trim();
    if hex.len() != 64 {
        return None;
    }
    let mut digest = [0u8; 32];
    for (i, byte) in digest.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(digest)
}

/// Where the authorization server's keys come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwksSource {
    File(PathBuf),
    /// An `https://` URL ([`JwksSource::parse`] refuses any other).
    Url(String),
}

impl JwksSource {
    /// A file, or an `https://` URL. Plain `http://` is refused: whoever can change the key set
    /// on its way can mint tokens the gateway accepts.
    pub fn parse(spec: &str) -> Result<Self, String> {
        if spec.trim().is_empty() {
            return Err("give the key set as a file or an https:// URL".to_owned());
        }
        let scheme = spec.split_once("://").map(|(scheme, _)| scheme).filter(|scheme| {
            scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        });
        match scheme {
            None => Ok(Self::File(PathBuf::from(spec))),
            Some(scheme) if scheme.eq_ignore_ascii_case("https") => {
                let url =
                    reqwest::Url::parse(spec).map_err(|e| format!("`{spec}` is not a valid URL: {e}"))?;
                if url.host_str().is_none_or(str::is_empty) {
                    return Err(format!("`{spec}` names no host"));
                }
                Ok(Self::Url(spec.to_owned()))
            }
            Some(scheme) if scheme.eq_ignore_ascii_case("http") => Err(format!(
                "`{spec}` is plain http, which is refused: anyone on the way could swap the key set and mint tokens this gateway would accept. Serve it over https://, or give a file"
            )),
            Some(scheme) => Err(format!(
                "`{spec}`: the key set comes from a file (give its path) or an https:// URL, not a {scheme}:// URL"
            )),
        }
    }
}

/// How JWT access tokens are checked.
#[derive(Debug, Clone)]
pub struct JwtSettings {
    /// The `iss` every token must carry (the authorization server's issuer identifier).
    pub issuer: String,
    /// Accepted `aud` values: this resource's URL, and any others configured.
    pub audiences: Vec<String>,
    pub jwks: JwksSource,
    /// Scopes every token must grant.
    pub required_scopes: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway: Duration,
    /// Claim naming the principal (`sub` by default) and claim listing its groups.
    pub principal_claim: String,
    pub groups_claim: String,
    /// Whether a token's principal is its claim alone (`alice`) rather than `<issuer>#alice`.
    /// Off by default, so that an authorization server cannot name a principal that is also a
    /// static token's and so get its tasks and rights.
    pub bare_principals: bool,
    /// Signature algorithms accepted; `none` and HMAC are never among them.
    pub algorithms: Vec<Algorithm>,
    /// How often the keys are read again.
    pub refresh: Duration,
    /// Shortest time between the end of one read of the keys and the start of the next, whether
    /// the read succeeded or not.
    pub reread_floor: Duration,
}

impl JwtSettings {
    pub fn new(issuer: String, audiences: Vec<String>, jwks: JwksSource) -> Self {
        Self {
            issuer,
            audiences,
            jwks,
            required_scopes: Vec::new(),
            leeway: Duration::from_secs(60),
            principal_claim: "sub".to_owned(),
            groups_claim: "groups".to_owned(),
            bare_principals: false,
            algorithms: vec![
                Algorithm::RS256,
                Algorithm::RS384,
                Algorithm::RS512,
                Algorithm::PS256,
                Algorithm::PS384,
                Algorithm::PS512,
                Algorithm::ES256,
                Algorithm::ES384,
                Algorithm::EdDSA,
            ],
            refresh: Duration::from_secs(300),
            reread_floor: MIN_KEY_REREAD,
        }
    }
}

/// A key set, with when it was read.
struct Keys {
    set: Arc<JwkSet>,
    read_at: Instant,
}

/// The reads of the key set, successful or not.
struct Reads {
    in_flight: bool,
    last_attempt: Instant,
}

/// The one read of the key set allowed now. Dropping it, when the read is done or when the
/// request that made it went away, starts the floor.
struct ReadClaim<'a>(&'a std::sync::Mutex<Reads>);

impl Drop for ReadClaim<'_> {
    fn drop(&mut self) {
        let mut reads = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        reads.in_flight = false;
        reads.last_attempt = Instant::now();
    }
}

/// Checks JWT access tokens against the authorization server's JWKS, read at start, again every
/// `refresh`, and when a token names a key it does not know, so that a key rotation needs no
/// restart. At most one read is in flight, and none starts within `reread_floor` of the last
/// one: tokens naming unknown keys, however many, cost at most one read per floor, and fail at
/// once rather than queue behind it.
pub struct JwtVerifier {
    settings: JwtSettings,
    keys: RwLock<Keys>,
    // A std mutex: it is never held across an await, and a claim must be released on drop.
    reads: std::sync::Mutex<Reads>,
    http: reqwest::Client,
}

/// Shortest time between two reads of the key set, by default.
const MIN_KEY_REREAD: Duration = Duration::from_secs(10);

/// Largest key set read from a URL. Real ones are a few kilobytes; the bound keeps a wrong or
/// hostile URL from filling the gateway's memory.
pub const MAX_JWKS_BYTES: usize = 1024 * 1024;

/// Longest principal, static or from a token.
pub const MAX_PRINCIPAL_LEN: usize = 256;

impl JwtVerifier {
    /// Reads the key set once; a gateway does not start with keys it cannot read.
    pub async fn new(settings: JwtSettings) -> Result<Self, String> {
        Self::build(settings, false).await
    }

    /// As [`JwtVerifier::new`], but a key set URL may be plain `http://`: for tests against a
    /// local server only, which is why no configuration reaches it.
    #[cfg(test)]
    async fn new_allowing_http(settings: JwtSettings) -> Result<Self, String> {
        Self::build(settings, true).await
    }

    async fn build(settings: JwtSettings, allow_http: bool) -> Result<Self, String> {
        if settings.issuer.is_empty() || settings.audiences.is_empty() {
            return Err("JWT verification needs an issuer and at least one audience".to_owned());
        }
        // `<issuer>#` plus at least one character must fit, or no token could ever be accepted.
        if !settings.bare_principals && settings.issuer.len() + 2 > MAX_PRINCIPAL_LEN {
            return Err(format!(
                "the issuer is {} bytes long, so principals `<issuer>#<{}>` would exceed the {MAX_PRINCIPAL_LEN} bytes allowed; use an issuer of at most {} bytes, or --jwt-bare-principals",
                settings.issuer.len(),
                settings.principal_claim,
                MAX_PRINCIPAL_LEN - 2
            ));
        }
        // Also checked here, not only in `JwksSource::parse`, since the variant can be built
        // directly.
        if let JwksSource::Url(url) = &settings.jwks
            && !allow_http
            && !url.get(..8).is_some_and(|s| s.eq_ignore_ascii_case("https://"))
        {
            return Err(format!(
                "the key set URL `{url}` is not https://; serve it over https, or give a file"
            ));
        }
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            // A redirect could lead anywhere, including to plain http; the key set comes from the
            // URL configured or not at all.
            .redirect(reqwest::redirect::Policy::none())
            .https_only(!allow_http)
            .build()
            .map_err(|e| format!("cannot build an HTTP client for the JWKS: {e}"))?;
        let set = read_keys(&settings.jwks, &http).await?;
        let now = Instant::now();
        Ok(Self {
            settings,
            keys: RwLock::new(Keys { set: Arc::new(set), read_at: now }),
            reads: std::sync::Mutex::new(Reads { in_flight: false, last_attempt: now }),
            http,
        })
    }

    pub fn settings(&self) -> &JwtSettings {
        &self.settings
    }

    /// Reads the key set again, unless a read is in flight or the last one ended less than
    /// `reread_floor` ago; a failed read keeps the keys there were. Whether it read them.
    pub async fn refresh(&self) -> bool {
        let Some(_claim) = self.claim_read() else {
            return false;
        };
        match read_keys(&self.settings.jwks, &self.http).await {
            Ok(set) => {
                *self.keys.write().await = Keys { set: Arc::new(set), read_at: Instant::now() };
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the JWKS again; keeping the keys read before");
                false
            }
        }
    }

    fn claim_read(&self) -> Option<ReadClaim<'_>> {
        let mut reads = self.reads.lock().unwrap_or_else(PoisonError::into_inner);
        if reads.in_flight || reads.last_attempt.elapsed() < self.settings.reread_floor {
            return None;
        }
        reads.in_flight = true;
        reads.last_attempt = Instant::now();
        Some(ReadClaim(&self.reads))
    }

    /// Whether the keys are due for their periodic read.
    pub async fn stale(&self) -> bool {
        self.keys.read().await.read_at.elapsed() >= self.settings.refresh
    }

    /// Verifies a token: signature, algorithm, `iss`, `aud`, `exp`/`nbf` with leeway, scopes.
    pub async fn verify(&self, token: &str) -> Result<Identity, AuthError> {
        let invalid = |m: String| AuthError::Invalid(m);
        let header =
            jsonwebtoken::decode_header(token).map_err(|e| invalid(format!("not a valid JWT: {e}")))?;
        if !self.settings.algorithms.contains(&header.alg) {
            return Err(invalid(format!("tokens signed with {:?} are not accepted", header.alg)));
        }
        let key = match self.key_for(header.kid.as_deref()).await {
            Some(key) => key,
            None => {
                // Perhaps the server rotated its keys: read them again if no read is under way or
                // just done. Looked up again either way, since another request's read may have
                // brought the key meanwhile.
                self.refresh().await;
                self.key_for(header.kid.as_deref()).await.ok_or_else(|| {
                    invalid("the token's signing key is not in the authorization server's JWKS".into())
                })?
            }
        };
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.settings.issuer]);
        validation.set_audience(&self.settings.audiences);
        validation.leeway = self.settings.leeway.as_secs();
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        let data = jsonwebtoken::decode::<serde_json::Map<String, Value>>(token, &key, &validation)
            .map_err(|e| invalid(format!("the token is not valid here: {e}")))?;
        let claims = data.claims;
        let granted = scopes_of(&claims);
        let missing: Vec<String> =
            self.settings.required_scopes.iter().filter(|s| !granted.contains(s.as_str())).cloned().collect();
        if !missing.is_empty() {
            return Err(AuthError::InsufficientScope { required: self.settings.required_scopes.clone() });
        }
        let principal = self.principal_of(&claims)?;
        let groups: Vec<&str> = match claims.get(&self.settings.groups_claim) {
            Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
            Some(Value::String(s)) => s.split_whitespace().collect(),
            _ => Vec::new(),
        };
        let groups = groups.into_iter().filter(|g| !g.is_empty()).map(|g| self.group_of(g)).collect();
        Ok(Identity { principal, groups })
    }

    /// `<issuer>#<group>`, as a principal is named, so that no token puts its caller in a static
    /// token's group (`group:ops` in the access file) or another issuer's; the group alone with
    /// `bare_principals`.
    fn group_of(&self, group: &str) -> String {
        if self.settings.bare_principals {
            group.to_owned()
        } else {
            format!("{}#{group}", self.settings.issuer)
        }
    }

    /// `<issuer>#<claim>`, so that no token names the principal of a static token (or of
    /// another issuer); the claim alone with `bare_principals`.
    fn principal_of(&self, claims: &serde_json::Map<String, Value>) -> Result<String, AuthError> {
        let claim = &self.settings.principal_claim;
        let value = claims.get(claim).and_then(Value::as_str).filter(|p| !p.is_empty()).ok_or_else(|| {
            AuthError::Invalid(format!("the token has no `{claim}` claim naming its principal"))
        })?;
        let principal = if self.settings.bare_principals {
            value.to_owned()
        } else {
            format!("{}#{value}", self.settings.issuer)
        };
        if principal.len() > MAX_PRINCIPAL_LEN {
            return Err(AuthError::Invalid(format!(
                "the token's principal{} would be {} bytes long, more than the {MAX_PRINCIPAL_LEN} allowed; its `{claim}` claim is too long",
                if self.settings.bare_principals { "" } else { " (`<issuer>#<claim>`)" },
                principal.len()
            )));
        }
        Ok(principal)
    }

    async fn key_for(&self, kid: Option<&str>) -> Option<DecodingKey> {
        let set = self.keys.read().await.set.clone();
        let jwk = match kid {
            Some(kid) => set.find(kid)?,
            // Without a key id, only an unambiguous key set can verify the token.
            None if set.keys.len() == 1 => &set.keys[0],
            None => return None,
        };
        DecodingKey::from_jwk(jwk).ok()
    }
}

/// The scopes a token grants: `scope` (space-separated, RFC 8693/9068) or `scp` (list or string).
fn scopes_of(claims: &serde_json::Map<String, Value>) -> HashSet<&str> {
    let mut scopes = HashSet::new();
    for claim in ["scope", "scp"] {
        match claims.get(claim) {
            Some(Value::String(s)) => scopes.extend(s.split_whitespace()),
            Some(Value::Array(items)) => scopes.extend(items.iter().filter_map(Value::as_str)),
            _ => {}
        }
    }
    scopes
}

async fn read_keys(source: &JwksSource, http: &reqwest::Client) -> Result<JwkSet, String> {
    let bytes = match source {
        JwksSource::File(path) => {
            let size = tokio::fs::metadata(path)
                .await
                .map_err(|e| format!("cannot read the JWKS {}: {e}", path.display()))?
                .len();
            if size > MAX_JWKS_BYTES as u64 {
                return Err(format!(
                    "the JWKS {} is {size} bytes; a key set may be at most {MAX_JWKS_BYTES}",
                    path.display()
                ));
            }
            tokio::fs::read(path)
                .await
                .map_err(|e| format!("cannot read the JWKS {}: {e}", path.display()))?
        }
        JwksSource::Url(url) => fetch_keys(url, http).await?,
    };
    let set: JwkSet =
        serde_json::from_slice(&bytes).map_err(|e| format!("the JWKS is not a JSON Web Key Set: {e}"))?;
    if set.keys.is_empty() {
        return Err("the JWKS has no keys".to_owned());
    }
    Ok(set)
}

/// The body of the key set at `url`: no redirect followed, at most [`MAX_JWKS_BYTES`] read.
async fn fetch_keys(url: &str, http: &reqwest::Client) -> Result<Vec<u8>, String> {
    let cannot = |e: reqwest::Error| format!("cannot fetch the JWKS {url}: {e}");
    let too_large = || {
        format!(
            "the JWKS at {url} is larger than {} MiB ({MAX_JWKS_BYTES} bytes), which no key set needs; check the URL",
            MAX_JWKS_BYTES / (1024 * 1024)
        )
    };
    let mut response = http.get(url).send().await.map_err(cannot)?;
    let status = response.status();
    if status.is_redirection() {
        let target = response
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("(no Location)");
        return Err(format!(
            "the JWKS URL {url} answered {status}, a redirect to {target}; redirects are not followed: give --jwks the final https:// URL"
        ));
    }
    if !status.is_success() {
        return Err(format!("cannot fetch the JWKS {url}: it answered {status}"));
    }
    if response.content_length().is_some_and(|n| n > MAX_JWKS_BYTES as u64) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(cannot)? {
        if body.len() + chunk.len() > MAX_JWKS_BYTES {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// How a gateway authenticates requests.
pub struct Authenticator {
    /// Off only when configured so, for local use: every caller is `anonymous`.
    pub disabled: bool,
    pub tokens: StaticTokens,
    pub jwt: Option<Arc<JwtVerifier>>,
    /// This resource's URL (`--resource-url`), as its metadata and tokens' audience name it; when
    /// unset, it is made from each request's Host.
    pub resource_url: Option<String>,
    /// Authorization servers named in the resource metadata; the JWT issuer when unset.
    pub authorization_servers: Vec<String>,
}

impl Authenticator {
    /// No authentication: for a gateway on a laptop, and only when asked for.
    pub fn disabled() -> Self {
        Self {
            disabled: true,
            tokens: StaticTokens::default(),
            jwt: None,
            resource_url: None,
            authorization_servers: Vec::new(),
        }
    }

    /// Who sent `authorization` (the header's value, if any).
    pub async fn authenticate(&self, authorization: Option<&str>) -> Result<Identity, AuthError> {
        if self.disabled {
            return Ok(Identity { principal: "anonymous".to_owned(), groups: Vec::new() });
        }
        let token = authorization
            .and_then(|v| {
                let (scheme, rest) = v.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then_some(rest.trim())
            })
            .filter(|t| !t.is_empty())
            .ok_or(AuthError::Missing)?;
        if let Some(identity) = self.tokens.identify(token) {
            return Ok(identity.clone());
        }
        match &self.jwt {
            Some(jwt) if token.split('.').count() == 3 => jwt.verify(token).await,
            _ => Err(AuthError::Invalid("the token is not valid".to_owned())),
        }
    }

    /// Scopes to name in a challenge.
    pub fn required_scopes(&self) -> &[String] {
        self.jwt.as_ref().map(|j| j.settings().required_scopes.as_slice()).unwrap_or(&[])
    }

    /// The resource metadata document (RFC 9728) for a resource at `resource`.
    pub fn metadata(&self, resource: &str) -> Value {
        let servers: Vec<String> = if self.authorization_servers.is_empty() {
            self.jwt.iter().map(|j| j.settings().issuer.clone()).collect()
        } else {
            self.authorization_servers.clone()
        };
        let mut document = serde_json::json!({
            "resource": resource,
            "authorization_servers": servers,
            "bearer_methods_supported": ["header"],
            "resource_name": "Conveyor",
        });
        if !self.required_scopes().is_empty() {
            document["scopes_supported"] = serde_json::json!(self.required_scopes());
        }
        document
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::convert::Infallible;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use axum::Router;
    use axum::body::{Body, Bytes};
    use axum::extract::State;
    use axum::http::{StatusCode, header};
    use axum::response::{IntoResponse, Response};
    use axum::routing::get;
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use jsonwebtoken::jwk::Jwk;
    use jsonwebtoken::{EncodingKey, Header};
    use serde_json::json;

    #[test]
    fn tokens_files_are_read_and_checked() {
        let alice = token_digest("alice-secret-token");
        let text = format!("[[token]]\nprincipal = \"alice\"\ngroups = [\"ops\"]\nsha256 = \"{alice}\"\n");
        let tokens = StaticTokens::parse(&text).expect("valid");
        let found = tokens.identify("alice-secret-token").expect("alice");
        assert_eq!(found.principal, "alice");
        assert_eq!(found.groups, vec!["ops".to_owned()]);
        assert!(tokens.identify("alice-secret-tokem").is_none());
        let bad = StaticTokens::parse("[[token]]\nprincipal = \"bob\"\nsha256 = \"xyz\"\n")
            .expect_err("bad digest");
        assert!(bad.contains("bob") && bad.contains("64 hex"), "{bad}");
        let twice = format!("{text}{text}");
        assert!(StaticTokens::parse(&twice).expect_err("twice").contains("twice"));
        assert!(StaticTokens::parse("[[token]]\nprincipal = \"a\"\nsha256 = \"00\"\nextra = 1\n").is_err());
        let lookalike =
            format!("[[token]]\nprincipal = \"https://idp.example.com#alice\"\nsha256 = \"{alice}\"\n");
        assert!(StaticTokens::parse(&lookalike).expect_err("a JWT principal's shape").contains('#'));
    }

    #[tokio::test]
    async fn a_disabled_authenticator_names_everyone_anonymous_and_an_enabled_one_needs_a_bearer() {
        let open = Authenticator::disabled();
        assert_eq!(open.authenticate(None).await.expect("open").principal, "anonymous");
        let closed = Authenticator { disabled: false, ..Authenticator::disabled() };
        assert_eq!(closed.authenticate(None).await, Err(AuthError::Missing));
        assert_eq!(closed.authenticate(Some("Basic abc")).await, Err(AuthError::Missing));
        assert!(matches!(closed.authenticate(Some("Bearer abc")).await, Err(AuthError::Invalid(_))));
    }

    const ISSUER: &str = "https://idp.example.test";
    const AUDIENCE: &str = "https://conveyor.example.test/mcp";

    fn pem(name: &str) -> Vec<u8> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/jwt");
        std::fs::read(dir.join(format!("{name}-test-key.pem"))).expect("test key")
    }

    fn jwks_of(keys: &[(&str, &str)]) -> String {
        let keys = keys
            .iter()
            .map(|(name, kid)| {
                let key = EncodingKey::from_rsa_pem(&pem(name)).expect("RSA key");
                let mut jwk = Jwk::from_encoding_key(&key, Algorithm::RS256).expect("JWK");
                jwk.common.key_id = Some((*kid).to_owned());
                jwk
            })
            .collect();
        serde_json::to_string(&JwkSet { keys }).expect("JWKS")
    }

    fn claims(subject: &str) -> Value {
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs();
        json!({"iss": ISSUER, "aud": AUDIENCE, "sub": subject, "exp": now + 300, "groups": ["research"]})
    }

    fn sign(claims: &Value, key: &str, kid: &str) -> String {
        let header = Header { kid: Some(kid.to_owned()), ..Header::new(Algorithm::RS256) };
        jsonwebtoken::encode(&header, claims, &EncodingKey::from_rsa_pem(&pem(key)).expect("key"))
            .expect("sign")
    }

    /// A token naming key `kid`. Its signature is junk: a token whose key is unknown is refused
    /// before its signature is looked at, and real RSA signatures are slow in a debug build.
    fn naming_key(kid: &str) -> String {
        let header = URL_SAFE_NO_PAD.encode(json!({"alg": "RS256", "typ": "JWT", "kid": kid}).to_string());
        let claims = URL_SAFE_NO_PAD.encode(claims("mallory").to_string());
        format!("{header}.{claims}.c2lnbmF0dXJl")
    }

    fn settings(jwks: JwksSource) -> JwtSettings {
        JwtSettings::new(ISSUER.to_owned(), vec![AUDIENCE.to_owned()], jwks)
    }

    fn assert_unknown_key(result: Result<Identity, AuthError>) {
        match result {
            Err(AuthError::Invalid(m)) => {
                assert_eq!(m, "the token's signing key is not in the authorization server's JWKS")
            }
            other => panic!("expected an unknown key, got {other:?}"),
        }
    }

    /// An authorization server's key set endpoint on 127.0.0.1 that counts the reads of
    /// `/jwks`, and can hold them, fail them, or change the keys it serves.
    struct KeyServer {
        base: String,
        served: Served,
        open: tokio::sync::watch::Sender<bool>,
    }

    #[derive(Clone)]
    struct Served {
        reads: Arc<AtomicUsize>,
        failing: Arc<AtomicBool>,
        jwks: Arc<std::sync::Mutex<String>>,
        open: tokio::sync::watch::Receiver<bool>,
    }

    async fn serve_jwks(State(served): State<Served>) -> Response {
        served.reads.fetch_add(1, Ordering::SeqCst);
        let mut open = served.open.clone();
        let _ = open.wait_for(|open| *open).await;
        if served.failing.load(Ordering::SeqCst) {
            return StatusCode::SERVICE_UNAVAILABLE.into_response();
        }
        let body = served.jwks.lock().unwrap_or_else(PoisonError::into_inner).clone();
        ([(header::CONTENT_TYPE, "application/json")], body).into_response()
    }

    impl KeyServer {
        async fn start(jwks: String) -> Self {
            let (open, gate) = tokio::sync::watch::channel(true);
            let served = Served {
                reads: Arc::new(AtomicUsize::new(0)),
                failing: Arc::new(AtomicBool::new(false)),
                jwks: Arc::new(std::sync::Mutex::new(jwks)),
                open: gate,
            };
            let endless = || async {
                let chunk = Bytes::from(vec![b' '; 8192]);
                Body::from_stream(futures::stream::repeat(Ok::<_, Infallible>(chunk)))
            };
            let app = Router::new()
                .route("/jwks", get(serve_jwks))
                .route("/moved", get(|| async { (StatusCode::FOUND, [(header::LOCATION, "/jwks")]) }))
                .route("/large", get(|| async { vec![b' '; MAX_JWKS_BYTES + 1] }))
                .route("/endless", get(endless))
                .with_state(served.clone());
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let base = format!("http://{}", listener.local_addr().expect("address"));
            tokio::spawn(async move { axum::serve(listener, app).await });
            Self { base, served, open }
        }

        fn url(&self, path: &str) -> JwksSource {
            JwksSource::Url(format!("{}{path}", self.base))
        }

        fn reads(&self) -> usize {
            self.served.reads.load(Ordering::SeqCst)
        }

        fn hold(&self, held: bool) {
            self.open.send_replace(!held);
        }

        fn fail(&self, failing: bool) {
            self.served.failing.store(failing, Ordering::SeqCst);
        }

        fn serve(&self, jwks: String) {
            *self.served.jwks.lock().unwrap_or_else(PoisonError::into_inner) = jwks;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_thousand_tokens_naming_unknown_keys_cause_at_most_one_read_of_the_key_set() {
        let server = KeyServer::start(jwks_of(&[("issuer", "k1")])).await;
        let mut settings = settings(server.url("/jwks"));
        settings.reread_floor = Duration::from_secs(1);
        let verifier = Arc::new(JwtVerifier::new_allowing_http(settings).await.expect("keys"));
        assert_eq!(server.reads(), 1, "read at start");
        tokio::time::sleep(Duration::from_millis(1200)).await;

        // The one read they cause is held at the server until all the others have answered.
        server.hold(true);
        let (done, mut results) = tokio::sync::mpsc::unbounded_channel();
        for i in 0..1000 {
            let (verifier, done) = (verifier.clone(), done.clone());
            tokio::spawn(async move {
                let _ = done.send(verifier.verify(&naming_key(&format!("unknown-{i}"))).await);
            });
        }
        for _ in 0..999 {
            let result = tokio::time::timeout(Duration::from_secs(10), results.recv())
                .await
                .expect("a token fails at once while the key set is being read, without waiting for it")
                .expect("a result");
            assert_unknown_key(result);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while server.reads() < 2 {
            assert!(Instant::now() < deadline, "the unknown key ids never caused a read");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        server.hold(false);
        let last = tokio::time::timeout(Duration::from_secs(10), results.recv())
            .await
            .expect("the token that caused the read is answered once it is done")
            .expect("a result");
        assert_unknown_key(last);
        assert_eq!(server.reads(), 2, "1,000 tokens naming unknown keys caused one read");

        // Within the floor after that read, more of them cause none.
        for i in 0..100 {
            assert_unknown_key(verifier.verify(&naming_key(&format!("later-{i}"))).await);
        }
        assert_eq!(server.reads(), 2);
    }

    #[tokio::test]
    async fn a_failed_read_of_the_key_set_holds_off_the_next_one_as_a_successful_one_does() {
        let server = KeyServer::start(jwks_of(&[("issuer", "k1")])).await;
        let mut settings = settings(server.url("/jwks"));
        settings.reread_floor = Duration::from_secs(1);
        let verifier = JwtVerifier::new_allowing_http(settings).await.expect("keys");
        tokio::time::sleep(Duration::from_millis(1200)).await;
        server.fail(true);
        assert_unknown_key(verifier.verify(&naming_key("k2")).await);
        assert_eq!(server.reads(), 2, "an unknown key id past the floor causes a read");
        for _ in 0..50 {
            assert_unknown_key(verifier.verify(&naming_key("k2")).await);
        }
        assert_eq!(server.reads(), 2, "a failed read starts the floor too");

        // The server is back with rotated keys: past the floor, the new key is read and accepted.
        server.fail(false);
        server.serve(jwks_of(&[("issuer", "k1"), ("other", "k2")]));
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let identity = verifier.verify(&sign(&claims("carol"), "other", "k2")).await.expect("rotated key");
        assert_eq!(identity.principal, format!("{ISSUER}#carol"));
        assert_eq!(server.reads(), 3);
    }

    #[tokio::test]
    async fn the_periodic_refresh_reads_the_key_set_again_within_the_same_floor() {
        let server = KeyServer::start(jwks_of(&[("issuer", "k1")])).await;
        let mut settings = settings(server.url("/jwks"));
        settings.refresh = Duration::from_secs(1);
        settings.reread_floor = Duration::from_secs(1);
        let verifier = JwtVerifier::new_allowing_http(settings).await.expect("keys");
        assert!(!verifier.stale().await);
        assert!(!verifier.refresh().await, "no read within the floor of the one at start");
        assert_eq!(server.reads(), 1);
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert!(verifier.stale().await);
        server.serve(jwks_of(&[("issuer", "k1"), ("other", "k2")]));
        assert!(verifier.refresh().await);
        assert_eq!(server.reads(), 2);
        assert!(!verifier.stale().await);
        assert!(verifier.key_for(Some("k2")).await.is_some(), "the new key is in use");
    }

    #[tokio::test]
    async fn key_sets_come_from_the_url_given_over_https_and_are_bounded() {
        for spec in ["http://idp.example.test/jwks", "HTTP://idp.example.test/jwks"] {
            let refused = JwksSource::parse(spec).expect_err("plain http");
            assert!(refused.contains("plain http") && refused.contains("https://"), "{refused}");
        }
        for spec in ["ftp://idp.example.test/jwks", "file:///etc/jwks.json", "https://", ""] {
            assert!(JwksSource::parse(spec).is_err(), "{spec}");
        }
        let url = "https://idp.example.test/.well-known/jwks.json";
        assert_eq!(JwksSource::parse(url), Ok(JwksSource::Url(url.to_owned())));
        assert_eq!(
            JwksSource::parse("/etc/jwks.json"),
            Ok(JwksSource::File(PathBuf::from("/etc/jwks.json")))
        );

        let server = KeyServer::start(jwks_of(&[("issuer", "k1")])).await;
        // An http URL that did not come through `parse` is refused all the same.
        let refused = JwtVerifier::new(settings(server.url("/jwks"))).await.err().expect("plain http");
        assert!(refused.contains("https"), "{refused}");
        assert_eq!(server.reads(), 0);

        let refused =
            JwtVerifier::new_allowing_http(settings(server.url("/moved"))).await.err().expect("moved");
        assert!(refused.contains("redirect") && refused.contains("302"), "{refused}");
        assert_eq!(server.reads(), 0, "the redirect is not followed");

        let refused =
            JwtVerifier::new_allowing_http(settings(server.url("/large"))).await.err().expect("large");
        assert!(refused.contains("1 MiB"), "{refused}");
        // Without a Content-Length the body is read only up to the bound, not until the timeout.
        let started = Instant::now();
        let refused =
            JwtVerifier::new_allowing_http(settings(server.url("/endless"))).await.err().expect("endless");
        assert!(refused.contains("1 MiB"), "{refused}");
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    }

    #[tokio::test]
    async fn a_tokens_principal_and_groups_are_namespaced_by_its_issuer_unless_bare_principals_are_asked_for()
    {
        let server = KeyServer::start(jwks_of(&[("issuer", "k1")])).await;
        let namespaced = JwtVerifier::new_allowing_http(settings(server.url("/jwks"))).await.expect("keys");
        let mut bare = settings(server.url("/jwks"));
        bare.bare_principals = true;
        let bare = JwtVerifier::new_allowing_http(bare).await.expect("keys");
        let alice = sign(&claims("alice"), "issuer", "k1");
        let identity = namespaced.verify(&alice).await.expect("valid");
        assert_eq!(identity.principal, "https://idp.example.test#alice");
        // A token's group is no static token's group of the same name (`group:research`).
        assert_eq!(identity.groups, ["https://idp.example.test#research"]);
        let bare_identity = bare.verify(&alice).await.expect("valid");
        assert_eq!(
            (bare_identity.principal.as_str(), bare_identity.groups.as_slice()),
            ("alice", &["research".to_owned()][..])
        );

        // The limit holds on the principal as named: a claim that fits alone may not with its
        // issuer in front.
        let long = "a".repeat(MAX_PRINCIPAL_LEN - 5);
        let token = sign(&claims(&long), "issuer", "k1");
        assert_eq!(bare.verify(&token).await.expect("fits").principal, long);
        match namespaced.verify(&token).await {
            Err(AuthError::Invalid(m)) => assert!(m.contains("256") && m.contains("`sub`"), "{m}"),
            other => panic!("a principal over the limit must be refused: {other:?}"),
        }
        let mut issuer = settings(server.url("/jwks"));
        issuer.issuer = format!("https://{}", "i".repeat(250));
        let refused = JwtVerifier::new_allowing_http(issuer).await.err().expect("no room for a claim");
        assert!(refused.contains("--jwt-bare-principals"), "{refused}");
    }
}
