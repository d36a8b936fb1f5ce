//! What the gateway hands a client and must recognise later, on any replica, without keeping it:
//! a 2025-11-25 session id (the protocol version and client capabilities of the session) and a
//! 2026-07-28 MRTR `requestState` (which hidden call a retry continues). Each is a JSON payload
//! and an HMAC-SHA256 over it, keyed by a secret all gateways share: `--signing-key`, or else one
//! made once and kept in Redis. A token of one purpose never passes as the other.

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
        if let Some(key) = &self.configured {
            return Ok(key.clone());
        }
        let key = self
            .shared
            .get_or_try_init(|| async {
                // 256 random bits, as hex.
                let candidate = format!("{}{}", random_id(), random_id());
                store.signing_secret(&candidate).await.map(|s| SigningKey(s.into_bytes().into()))
            })
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
}
