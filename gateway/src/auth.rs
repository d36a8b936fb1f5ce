//! Who is calling: static tokens from a file (stored as SHA-256 digests) and JWT access tokens of
//! an OAuth 2.1 authorization server, checked against its JWKS. The gateway is an OAuth resource
//! server in the sense of the MCP authorization specification: a request without a valid token
//! gets 401 with `WWW-Authenticate: Bearer resource_metadata=...`, and the metadata document
//! (RFC 9728) names the authorization server.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::{Mutex, RwLock};

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
            if entry.principal.trim().is_empty() || entry.principal.len() > 256 {
                return Err(format!("token {n}: `principal` must be 1 to 256 characters"));
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
    Url(String),
}

impl JwksSource {
    pub fn parse(spec: &str) -> Self {
        if spec.starts_with("https://") || spec.starts_with("http://") {
            Self::Url(spec.to_owned())
        } else {
            Self::File(PathBuf::from(spec))
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
    /// Signature algorithms accepted; `none` and HMAC are never among them.
    pub algorithms: Vec<Algorithm>,
    /// How often the keys are read again.
    pub refresh: Duration,
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
        }
    }
}

/// A key set, with when it was read.
struct Keys {
    set: Arc<JwkSet>,
    read_at: Instant,
}

/// Checks JWT access tokens against the authorization server's JWKS, read at start, again every
/// `refresh`, and at once (at most every 10 s) when a token names a key it does not know, so that
/// a key rotation needs no restart.
pub struct JwtVerifier {
    settings: JwtSettings,
    keys: RwLock<Keys>,
    reading: Mutex<()>,
    http: reqwest::Client,
}

/// Shortest time between two reads of the key set caused by unknown key ids.
const MIN_KEY_REREAD: Duration = Duration::from_secs(10);

impl JwtVerifier {
    /// Reads the key set once; a gateway does not start with keys it cannot read.
    pub async fn new(settings: JwtSettings) -> Result<Self, String> {
        if settings.issuer.is_empty() || settings.audiences.is_empty() {
            return Err("JWT verification needs an issuer and at least one audience".to_owned());
        }
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("cannot build an HTTP client for the JWKS: {e}"))?;
        let set = read_keys(&settings.jwks, &http).await?;
        Ok(Self {
            settings,
            keys: RwLock::new(Keys { set: Arc::new(set), read_at: Instant::now() }),
            reading: Mutex::new(()),
            http,
        })
    }

    pub fn settings(&self) -> &JwtSettings {
        &self.settings
    }

    /// Reads the key set again; a failed read keeps the keys there were.
    pub async fn refresh(&self) {
        let _one_at_a_time = self.reading.lock().await;
        match read_keys(&self.settings.jwks, &self.http).await {
            Ok(set) => *self.keys.write().await = Keys { set: Arc::new(set), read_at: Instant::now() },
            Err(e) => tracing::warn!(error = %e, "cannot read the JWKS again; keeping the keys read before"),
        }
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
                // Perhaps the server rotated its keys: read them again, not too often.
                let due = self.keys.read().await.read_at.elapsed() >= MIN_KEY_REREAD;
                if due {
                    self.refresh().await;
                }
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
        let principal = claims
            .get(&self.settings.principal_claim)
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty() && p.len() <= 256)
            .ok_or_else(|| {
                invalid(format!(
                    "the token has no `{}` claim naming its principal",
                    self.settings.principal_claim
                ))
            })?
            .to_owned();
        let groups = match claims.get(&self.settings.groups_claim) {
            Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
            Some(Value::String(s)) => s.split_whitespace().map(str::to_owned).collect(),
            _ => Vec::new(),
        };
        Ok(Identity { principal, groups })
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
    let text = match source {
        JwksSource::File(path) => tokio::fs::read_to_string(path)
            .await
            .map_err(|e| format!("cannot read the JWKS {}: {e}", path.display()))?,
        JwksSource::Url(url) => http
            .get(url)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| format!("cannot fetch the JWKS {url}: {e}"))?
            .text()
            .await
            .map_err(|e| format!("cannot fetch the JWKS {url}: {e}"))?,
    };
    let set: JwkSet =
        serde_json::from_str(&text).map_err(|e| format!("the JWKS is not a JSON Web Key Set: {e}"))?;
    if set.keys.is_empty() {
        return Err("the JWKS has no keys".to_owned());
    }
    Ok(set)
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
}
