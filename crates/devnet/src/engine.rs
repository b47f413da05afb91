//! The few engine-API steps the conformance chain needs: a JWT secret and a
//! `forkchoiceUpdated` call so geth resolves `safe` and `finalized`.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use neve_upstream::RpcClient;
use sha2::Sha256;

use crate::error::{DevnetError, io_error};

/// The engine port's shared secret and the file geth reads it from.
pub(crate) struct JwtSecret {
    pub(crate) path: PathBuf,
    key: [u8; 32],
}

/// Writes a fresh 32-byte secret as hex into `dir/jwt.hex`.
pub(crate) fn write_jwt_secret(dir: &Path) -> Result<JwtSecret, DevnetError> {
    let mut key = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut key))
        .map_err(io_error("reading /dev/urandom"))?;
    let path = dir.join("jwt.hex");
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(&path, hex).map_err(io_error("writing JWT secret"))?;
    Ok(JwtSecret { path, key })
}

/// An HS256 JWT with an `iat` claim, as the engine API requires.
fn token(secret: &JwtSecret, issued_at: u64) -> String {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    let claims = URL_SAFE_NO_PAD.encode(format!(r#"{{"iat":{issued_at}}}"#));
    let signing_input = format!("{header}.{claims}");
    let mut mac = Hmac::<Sha256>::new_from_slice(&secret.key).expect("HMAC takes any key length");
    mac.update(signing_input.as_bytes());
    let signature = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
    format!("{signing_input}.{signature}")
}

/// Posts the prepared `engine_forkchoiceUpdated` request and checks that
/// geth accepted the head as VALID.
pub(crate) async fn send_forkchoice(
    engine_url: &str,
    secret: &JwtSecret,
    request: Vec<u8>,
) -> Result<(), DevnetError> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs();
    let setup = |detail: String| DevnetError::Setup {
        step: "engine_forkchoiceUpdated".into(),
        detail,
    };
    let client = RpcClient::new(engine_url)
        .map_err(|e| setup(e.to_string()))?
        .with_bearer_token(&token(secret, now));
    // geth opens its engine port just after the HTTP one: a refused
    // connection in between is retried for a while.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let request = bytes::Bytes::from(request);
    let (status, body) = loop {
        match client.post(request.clone()).await {
            Ok(answer) => break answer,
            Err(e) if std::time::Instant::now() < deadline && e.is_transient() => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(e) => return Err(setup(e.to_string())),
        }
    };
    let text = String::from_utf8_lossy(&body);
    let answer: serde_json::Value =
        serde_json::from_slice(&body).map_err(|e| setup(format!("HTTP {status}: {e}: {text}")))?;
    match answer
        .pointer("/result/payloadStatus/status")
        .and_then(|s| s.as_str())
    {
        Some("VALID") => Ok(()),
        _ => Err(setup(format!("HTTP {status}: {text}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_is_three_base64url_parts_with_an_iat_claim() {
        let secret = JwtSecret {
            path: PathBuf::new(),
            key: [7; 32],
        };
        let token = token(&secret, 1_700_000_000);
        let parts: Vec<_> = token.split('.').collect();
        assert_eq!(parts.len(), 3);
        let claims = URL_SAFE_NO_PAD.decode(parts[1]).unwrap();
        assert_eq!(claims, br#"{"iat":1700000000}"#);
        // Independent check of the signature with the same primitive.
        let mut mac = Hmac::<Sha256>::new_from_slice(&[7; 32]).unwrap();
        mac.update(format!("{}.{}", parts[0], parts[1]).as_bytes());
        mac.verify_slice(&URL_SAFE_NO_PAD.decode(parts[2]).unwrap())
            .expect("signature verifies");
    }
}
