//! TLS for every outbound connection (rustls, no OpenSSL): the system's
//! roots (`SSL_CERT_FILE` and `SSL_CERT_DIR` honoured, as OpenSSL and curl
//! do) plus a CA file the operator names. Hostnames are always verified;
//! there is no switch to turn that off.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// A byte stream a connection runs over: TCP, or TLS over TCP.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// `tcp`, connected to `host`, as TLS when `tls` (the certificate checked
/// against the process's trust and `host`), else as it is. The error is a
/// message with a hint of what to do.
pub async fn wrap(host: &str, tcp: TcpStream, tls: bool) -> Result<Box<dyn Io>, String> {
    if !tls {
        return Ok(Box::new(tcp));
    }
    let config = client_config()?;
    let name = rustls::pki_types::ServerName::try_from(host.to_owned())
        .map_err(|e| format!("{host}: {e}"))?;
    match tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
    {
        Ok(stream) => Ok(Box::new(stream)),
        Err(error) => {
            let reason = crate::error::error_chain(&error);
            Err(match hint(&reason) {
                Some(hint) => format!("{reason}; {hint}"),
                None => reason,
            })
        }
    }
}

static TRUST: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();

/// Why the trust settings could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The CA file could not be read or holds no certificate.
    #[error("CA file {path}: {reason}")]
    CaFile {
        /// The file named.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// [`configure`] was called after a connection had been made.
    #[error("TLS trust was already set up; configure it before the first connection")]
    AlreadySet,
    /// No root at all: neither the system nor a CA file gave one.
    #[error("{0}")]
    NoRoots(String),
}

/// Sets the process's TLS trust: the system's roots plus every certificate
/// in `ca_file`. Called once at start, before any connection; without a
/// call the system's roots alone are trusted.
pub fn configure(ca_file: Option<&Path>) -> Result<(), TlsError> {
    let config = build(ca_file)?;
    TRUST.set(Ok(config)).map_err(|_| TlsError::AlreadySet)
}

/// The client configuration every outbound TLS connection uses.
pub(crate) fn client_config() -> Result<Arc<rustls::ClientConfig>, String> {
    TRUST
        .get_or_init(|| build(None).map_err(|e| e.to_string()))
        .clone()
}

/// A configuration that trusts nothing, for a plain-HTTP client on a
/// machine without roots: it never makes a TLS connection.
pub(crate) fn untrusting() -> Arc<rustls::ClientConfig> {
    trusting(rustls::RootCertStore::empty())
}

/// A client configuration (ring, the default protocol versions) that
/// trusts `roots`.
fn trusting(roots: rustls::RootCertStore) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

fn build(ca_file: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    // Unreadable system certificates are skipped, as curl does; a CA file
    // the operator named must load.
    let native = rustls_native_certs::load_native_certs();
    let (_, _) = roots.add_parsable_certificates(native.certs);
    if let Some(path) = ca_file {
        let ca_error = |reason: String| TlsError::CaFile {
            path: path.to_owned(),
            reason,
        };
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .map_err(|e| ca_error(e.to_string()))?
            .collect::<Result<_, _>>()
            .map_err(|e| ca_error(e.to_string()))?;
        if certs.is_empty() {
            return Err(ca_error("no PEM certificate in it".into()));
        }
        for cert in certs {
            roots.add(cert).map_err(|e| ca_error(e.to_string()))?;
        }
    }
    if roots.is_empty() {
        return Err(TlsError::NoRoots(
            "no trusted CA: the system has none (install ca-certificates) and no --ca-file was given"
                .into(),
        ));
    }
    Ok(trusting(roots))
}

/// What to do about a TLS failure, appended to its message: the usual
/// causes of a refused certificate and the setting that fixes each.
pub(crate) fn hint(reason: &str) -> Option<&'static str> {
    if reason.contains("UnknownIssuer") || reason.contains("unknown issuer") {
        Some(
            "the upstream's certificate is not signed by a trusted CA: name its CA with --ca-file (or SSL_CERT_FILE)",
        )
    } else if reason.contains("NotValidForName") || reason.contains("not valid for name") {
        Some(
            "the upstream's certificate does not name this host: use the host name it was issued for",
        )
    } else if reason.contains("Expired") || reason.contains("expired") {
        Some("the upstream's certificate has expired (or this machine's clock is wrong)")
    } else if reason.contains("InvalidContentType") || reason.contains("CorruptMessage") {
        Some("the upstream did not speak TLS: is it http:// rather than https://?")
    } else {
        None
    }
}
