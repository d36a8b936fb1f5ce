//! What the gateway hands a client and must recognise later, on any replica, without keeping it:
//! a 2025-11-25 session id (the protocol version and client capabilities of the session) and a
//! 2026-07-28 MRTR `requestState` (which hidden call a retry continues). Each is a JSON payload
//! and an HMAC-SHA256 over it, keyed by a secret all gateways share: `--signing-key`, or else one
//! made once and kept in Redis. A token of one purpose never passes as the other.
//! [`check_secret`] refuses a configured key that is a placeholder or easy to guess.

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use conveyor_shared::model::random_id;
use hmac::{Hmac, Mac};
use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::Sha256;
use tokio::sync::OnceCell;

use crate::rpc::RpcFailure;

/// What a token is for; part of what is signed.
#[derive(Debug, Clone, Copy)]
pub enum Purpose {
    Session,
    RequestState,
    StreamEvent,
}

impl Purpose {
    fn label(self) -> &'static [u8] {
        match self {
            Self::Session => b"conveyor.session.v1",
            Self::RequestState => b"conveyor.request-state.v1",
            Self::StreamEvent => b"conveyor.stream-event.v1",
        }
    }
}

/// Why a token was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refused {
    #[error("it is not a token this deployment issued (malformed)")]
    Malformed,
    #[error("its signature does not match: it was altered, or issued by another deployment")]
    BadSignature,
}

/// Finds the deployment's secret: from configuration, or else from Redis, once.
pub struct Signer {
    configured: Option<SigningKey>,
    shared: OnceCell<SigningKey>,
}

/// The deployment's secret, cheap to clone, that signs and checks tokens.
#[derive(Clone)]
pub struct SigningKey(Arc<[u8]>);

impl Signer {
    /// A signer with this secret (from configuration); `None` reads the deployment's secret from
    /// Redis on first use.
    pub fn new(secret: Option<Vec<u8>>) -> Self {
        Self {
            configured: secret.filter(|s| !s.is_empty()).map(|s| SigningKey::from_secret(&s)),
            shared: OnceCell::new(),
        }
    }

    /// The key; the first call of a gateway without a configured key reads it from Redis.
    pub async fn key(&self, store: &conveyor_shared::Store) -> Result<SigningKey, RpcFailure> {
        if let Some(key) = self.configured.as_ref().or_else(|| self.shared.get()) {
            return Ok(key.clone());
        }
        // The first request's read, boxed: every request's future would otherwise hold room for it.
        let key = Box::pin(self.shared.get_or_try_init(|| async {
            // 256 random bits, as hex.
            let candidate = format!("{}{}", random_id(), random_id());
            store.signing_secret(&candidate).await.map(|s| SigningKey(s.into_bytes().into()))
        }))
        .await?;
        Ok(key.clone())
    }
}

impl SigningKey {
    pub fn from_secret(secret: &[u8]) -> Self {
        Self(secret.into())
    }

    /// `payload` as a signed token.
    pub fn sign<T: Serialize>(&self, purpose: Purpose, payload: &T) -> String {
        // Serializing plain data to JSON cannot fail; an empty body would only fail its check.
        let body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(payload).unwrap_or_default());
        let tag = URL_SAFE_NO_PAD.encode(mac(&self.0, purpose, body.as_bytes()));
        format!("{body}.{tag}")
    }

    /// The payload of a token this deployment signed for `purpose`.
    pub fn verify<T: DeserializeOwned>(&self, purpose: Purpose, token: &str) -> Result<T, Refused> {
        check(&self.0, purpose, token)
    }
}

/// Words that mark a key someone meant to replace: an example's placeholder, a default.
const PLACEHOLDER_WORDS: &[&str] =
    &["replace", "change", "changeme", "example", "placeholder", "secret", "xxx", "password", "dummy"];

/// Whether `key` may sign for a deployment (`--signing-key`): at least 32 characters, no
/// placeholder word, at least 128 bits by a conservative estimate (its length times the bits per
/// character of the smallest common alphabet that covers it), at least 8 distinct characters,
/// and not one short pattern repeated. Whoever guesses the key can forge session ids and request
/// states, so an example value that was never replaced must stop the gateway, not serve. The
/// error says what is wrong with the key (never the key itself) and how to make a good one.
pub fn check_secret(key: &str) -> Result<(), String> {
    const HOW: &str = "make one with `openssl rand -hex 32`";
    let chars: Vec<char> = key.chars().collect();
    if chars.len() < 32 {
        return Err(format!("must be at least 32 characters (this one has {}); {HOW}", chars.len()));
    }
    let lower = key.to_lowercase();
    if let Some(word) = PLACEHOLDER_WORDS.iter().find(|w| lower.contains(*w)) {
        return Err(format!("contains `{word}`, which marks a placeholder or an example, not a key; {HOW}"));
    }
    let distinct: std::collections::HashSet<char> = chars.iter().copied().collect();
    if distinct.len() < 8 {
        return Err(format!(
            "has only {} distinct characters, which is far too easy to guess; {HOW}",
            distinct.len()
        ));
    }
    if let Some(period) = (1..=chars.len() / 2).find(|&p| chars.iter().zip(&chars[p..]).all(|(a, b)| a == b))
    {
        return Err(format!(
            "repeats a pattern of {period} characters, which is far too easy to guess; {HOW}"
        ));
    }
    let bits = chars.len() as f64 * (alphabet_size(&chars) as f64).log2();
    if bits < 128.0 {
        return Err(format!(
            "holds about {bits:.0} bits of randomness at best ({} characters of a {}-character alphabet), less than the 128 needed; {HOW} (64 hex digits, 256 bits)",
            chars.len(),
            alphabet_size(&chars)
        ));
    }
    Ok(())
}

/// The size of the smallest common alphabet that covers `chars`: decimal digits, hex digits of
/// one case, letters of one case with or without digits, letters of both cases with or without
/// digits, else printable ASCII. A key is credited no more than its alphabet allows, whatever
/// produced it.
fn alphabet_size(chars: &[char]) -> u32 {
    let all = |f: fn(&char) -> bool| chars.iter().all(f);
    let any = |f: fn(&char) -> bool| chars.iter().any(f);
    if !all(char::is_ascii_alphanumeric) {
        return 95;
    }
    if all(char::is_ascii_digit) {
        return 10;
    }
    let hex_lower = |c: &char| c.is_ascii_digit() || ('a'..='f').contains(c);
    let hex_upper = |c: &char| c.is_ascii_digit() || ('A'..='F').contains(c);
    if all(hex_lower) || all(hex_upper) {
        return 16;
    }
    let letters = match (any(char::is_ascii_lowercase), any(char::is_ascii_uppercase)) {
        (true, true) => 52,
        _ => 26,
    };
    if any(char::is_ascii_digit) { letters + 10 } else { letters }
}

fn mac(secret: &[u8], purpose: Purpose, body: &[u8]) -> Vec<u8> {
    #[allow(clippy::expect_used)] // HMAC takes a key of any length
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC accepts any key length");
    mac.update(purpose.label());
    mac.update(b".");
    mac.update(body);
    mac.finalize().into_bytes().to_vec()
}

fn check<T: DeserializeOwned>(secret: &[u8], purpose: Purpose, token: &str) -> Result<T, Refused> {
    let (body, tag) = token.split_once('.').ok_or(Refused::Malformed)?;
    let tag = URL_SAFE_NO_PAD.decode(tag).map_err(|_| Refused::Malformed)?;
    #[allow(clippy::expect_used)] // HMAC takes a key of any length
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC accepts any key length");
    mac.update(purpose.label());
    mac.update(b".");
    mac.update(body.as_bytes());
    // Constant-time comparison, so that the tag cannot be guessed byte by byte.
    mac.verify_slice(&tag).map_err(|_| Refused::BadSignature)?;
    let body = URL_SAFE_NO_PAD.decode(body).map_err(|_| Refused::Malformed)?;
    serde_json::from_slice(&body).map_err(|_| Refused::Malformed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn token(secret: &[u8], purpose: Purpose, payload: &Value) -> String {
        let body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(payload).expect("json"));
        let tag = URL_SAFE_NO_PAD.encode(mac(secret, purpose, body.as_bytes()));
        format!("{body}.{tag}")
    }

    #[test]
    fn a_token_round_trips_and_any_change_is_refused() {
        let payload = json!({"t": "task-1", "p": "alice"});
        let t = token(b"secret", Purpose::RequestState, &payload);
        assert_eq!(check::<Value>(b"secret", Purpose::RequestState, &t), Ok(payload.clone()));
        let (body, tag) = t.split_once('.').expect("two parts");
        let forged_body =
            URL_SAFE_NO_PAD.encode(serde_json::to_vec(&json!({"t": "task-2", "p": "alice"})).expect("json"));
        assert_eq!(
            check::<Value>(b"secret", Purpose::RequestState, &format!("{forged_body}.{tag}")),
            Err(Refused::BadSignature)
        );
        let mut flipped = tag.to_owned().into_bytes();
        flipped[0] = if flipped[0] == b'A' { b'B' } else { b'A' };
        let flipped = format!("{body}.{}", String::from_utf8(flipped).expect("ascii"));
        assert_eq!(check::<Value>(b"secret", Purpose::RequestState, &flipped), Err(Refused::BadSignature));
        assert_eq!(check::<Value>(b"other", Purpose::RequestState, &t), Err(Refused::BadSignature));
        assert_eq!(check::<Value>(b"secret", Purpose::RequestState, "garbage"), Err(Refused::Malformed));
    }

    #[test]
    fn a_token_of_one_purpose_never_passes_as_another() {
        let t = token(b"secret", Purpose::Session, &json!({"v": "2025-11-25"}));
        assert_eq!(check::<Value>(b"secret", Purpose::RequestState, &t), Err(Refused::BadSignature));
    }

    fn hex_key() -> String {
        // As `openssl rand -hex 32` prints: 64 hex digits, 256 random bits.
        format!("{}{}", random_id(), random_id())
    }

    #[test]
    fn random_keys_pass_the_secret_check() {
        for _ in 0..200 {
            let key = hex_key();
            assert_eq!(key.len(), 64);
            assert_eq!(check_secret(&key), Ok(()), "{key}");
            assert_eq!(check_secret(&key.to_uppercase()), Ok(()), "{key}");
        }
        // `openssl rand -base64 32`, and 32 hex digits (`openssl rand -hex 16`, 128 bits).
        assert_eq!(check_secret("q3Jr0v8pYc1nZk6tL2xW9bF4hD7sM5aE0gU3iO8yT1w="), Ok(()));
        assert_eq!(check_secret(&hex_key()[..32]), Ok(()));
        // A long passphrase of printable characters (cli/tests/e2e/deploy.rs starts gateways with it).
        assert_eq!(check_secret("a-shared-signing-key-for-the-topology-test"), Ok(()));
    }

    #[test]
    fn placeholders_short_and_guessable_keys_fail_the_secret_check() {
        let refused = |key: &str, why: &str| {
            let error = check_secret(key).expect_err(key);
            assert!(error.contains(why), "{key}: {error}");
            assert!(error.contains("openssl rand -hex 32"), "says how to make a good key: {error}");
            assert!(!error.contains(key), "the error does not repeat the key: {error}");
        };
        // The example Kubernetes secret's value, in the file and as it is now.
        refused("replace-with-the-output-of-openssl-rand-hex-32", "`replace`");
        let secret_yaml = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/k8s/secret.yaml"),
        )
        .expect("deploy/k8s/secret.yaml");
        let example = secret_yaml
            .lines()
            .find_map(|l| l.trim().strip_prefix("CONVEYOR_SIGNING_KEY:"))
            .expect("the example secret has a signing key")
            .trim()
            .trim_matches('"');
        assert!(check_secret(example).is_err(), "the example secret's signing key must not start a gateway");
        refused("too-short", "at least 32 characters");
        refused(&hex_key()[..31], "at least 32 characters");
        for placeholder in [
            "CHANGEME-0123456789abcdef0123456789",
            "my-Secret-key-for-the-gateway-0123456789",
            "ExAmPlE-7f3a9c2e5b8d1f4a6c9e2b5d8f1a",
            "xxx7f3a9c2e5b8d1f4a6c9e2b5d8f1a4c7e",
            "placeholder7f3a9c2e5b8d1f4a6c9e2b5d8",
        ] {
            refused(placeholder, "placeholder or an example");
        }
        refused(&"a".repeat(64), "distinct characters");
        refused("abababababcdcdcdcdababababcdcdcdcdabab", "distinct characters");
        refused(&"0123456789abcdef".repeat(4), "repeats a pattern of 16");
        refused(&"k7#Qz!p2W9".repeat(4), "repeats a pattern of 10");
        // 38 decimal digits are about 126 bits; 40 lower-case hex digits would be 160.
        refused("31415926535897932384626433832795028841", "less than the 128");
        assert!(check_secret("3141592653589793238462643383279502884197").is_ok(), "40 digits, 133 bits");
        // 32 letters of one case are about 150 bits.
        assert!(check_secret("qwhvkzjmnbxlpcytrgdfsoeuiaqwhvkz").is_ok());
    }
}
