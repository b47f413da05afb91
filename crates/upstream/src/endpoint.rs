//! An upstream's address with its credentials kept apart from how it is
//! shown. Providers put keys in the path (`/v3/KEY`), the query
//! (`?token=`, `?apikey=`), the user info (`user:pass@`, sent as Basic
//! auth) or a header (`Authorization: Bearer …`); an [`Endpoint`] holds all
//! of them and shows itself only as a [`RedactedUrl`], which is the one kind
//! of URL an error, a log line or a status page can carry.

use std::fmt;
use std::sync::Arc;

use base64::Engine as _;
use hyper::Uri;
use hyper::header::{AUTHORIZATION, HeaderName, HeaderValue};

use crate::error::RpcError;
use crate::redacted::{MASK, RedactedUrl, percent_decode, secret_like};

/// Which credentials an endpoint made by [`Endpoint::with_url`] sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Credentials {
    /// Its own (headers given with it, or user info in its URL).
    Own,
    /// The original endpoint's: the same host over TLS, or told to.
    Inherited,
    /// None, though the original has some: another host, or plain text
    /// where the original is TLS.
    Withheld,
    /// None, and the original has none either.
    None,
}

/// Where an upstream is and how to present oneself to it.
#[derive(Clone)]
pub struct Endpoint {
    uri: Uri,
    shown: RedactedUrl,
    secrets: Arc<[String]>,
    headers: Arc<[(HeaderName, HeaderValue)]>,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &self.shown)
            .field("headers", &self.headers.len())
            .finish()
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.shown.fmt(f)
    }
}

impl Endpoint {
    /// Parses `url` (`http`, `https`, `ws` or `wss`). User info becomes a
    /// Basic `Authorization` header and is left out of the request URI.
    pub fn parse(url: &str) -> Result<Endpoint, RpcError> {
        let invalid = |reason: &str| RpcError::InvalidUrl {
            url: RedactedUrl::of(url),
            reason: reason.to_owned(),
        };
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| invalid("no scheme; use http://, https://, ws:// or wss://"))?;
        if !matches!(scheme, "http" | "https" | "ws" | "wss") {
            return Err(invalid(
                "unsupported scheme; use http://, https://, ws:// or wss://",
            ));
        }
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        let tail = tail.split('#').next().unwrap_or_default();
        let (userinfo, host) = match authority.rsplit_once('@') {
            Some((info, host)) => (Some(info), host),
            None => (None, authority),
        };
        if host.is_empty() {
            return Err(invalid("no host"));
        }
        let mut secrets = Vec::new();
        let mut headers = Vec::new();
        if let Some(info) = userinfo {
            let (user, password) = info.split_once(':').unwrap_or((info, ""));
            let user = percent_decode(user);
            let password = percent_decode(password);
            let token =
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            headers.push((AUTHORIZATION, sensitive(&format!("Basic {token}"))?));
            secrets.extend([user, password, token]);
        }
        let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
        secrets.extend(
            path.split('/')
                .filter(|segment| secret_like(segment))
                .map(str::to_owned),
        );
        secrets.extend(
            query
                .split('&')
                .map(|pair| pair.split_once('=').map_or(pair, |(_, value)| value))
                .filter(|value| !value.is_empty())
                .map(str::to_owned),
        );
        let uri: Uri = format!("{scheme}://{host}{tail}")
            .parse()
            .map_err(|e: hyper::http::uri::InvalidUri| invalid(&e.to_string()))?;
        Ok(Endpoint {
            uri,
            shown: RedactedUrl::of(url),
            secrets: secrets.into_iter().filter(|s| s.len() >= 4).collect(),
            headers: headers.into(),
        })
    }

    /// The same endpoint sending `header` (a `Name: value` line, as curl's
    /// `-H`) with every request; its value counts as a secret.
    pub fn with_header(mut self, header: &str) -> Result<Endpoint, RpcError> {
        let invalid = |reason: String| RpcError::InvalidUrl {
            url: self.shown.clone(),
            reason,
        };
        let (name, value) = header
            .split_once(':')
            .ok_or_else(|| invalid("a header is `Name: value`".into()))?;
        let name: HeaderName = name
            .trim()
            .parse()
            .map_err(|_| invalid(format!("{:?} is not a header name", name.trim())))?;
        let value = value.trim();
        let mut headers = self.headers.to_vec();
        headers.push((name, sensitive(value)?));
        let mut secrets = self.secrets.to_vec();
        secrets.push(value.to_owned());
        // `Bearer KEY`: the key alone may turn up in a message too.
        secrets.extend(
            value
                .split_whitespace()
                .skip(1)
                .filter(|s| s.len() >= 4)
                .map(str::to_owned),
        );
        self.headers = headers.into();
        self.secrets = secrets.into();
        Ok(self)
    }

    /// Another URL of the same provider (the WebSocket that goes with an
    /// RPC URL), and whether it carries this endpoint's credentials (its
    /// headers, when it has none of its own): only to the same host over
    /// TLS (or, for a plain-text upstream, to the same host in plain text,
    /// where they travel already), unless `send_anyway` (the operator said
    /// so). A bearer token never goes in clear to `ws://`, nor to a third
    /// host, by default. Its secrets are scrubbed from the other's
    /// messages either way.
    pub fn with_url(
        &self,
        url: &str,
        send_anyway: bool,
    ) -> Result<(Endpoint, Credentials), RpcError> {
        let mut other = Endpoint::parse(url)?;
        let same_host = other.uri.host() == self.uri.host();
        let safe = same_host && (other.is_tls() || !self.is_tls());
        let credentials = if !other.headers.is_empty() {
            Credentials::Own
        } else if self.headers.is_empty() {
            Credentials::None
        } else if safe || send_anyway {
            other.headers = self.headers.clone();
            Credentials::Inherited
        } else {
            Credentials::Withheld
        };
        let mut secrets = self.secrets.to_vec();
        secrets.extend(other.secrets.iter().cloned());
        other.secrets = secrets.into();
        Ok((other, credentials))
    }

    /// The URI requests go to (user info removed). Never for display.
    pub fn uri(&self) -> &Uri {
        &self.uri
    }

    /// Whether the scheme is `https` or `wss`.
    pub fn is_tls(&self) -> bool {
        matches!(self.uri.scheme_str(), Some("https" | "wss"))
    }

    /// The URL as it may be shown.
    pub fn shown(&self) -> &RedactedUrl {
        &self.shown
    }

    /// The headers every request carries (credentials).
    pub fn headers(&self) -> &[(HeaderName, HeaderValue)] {
        &self.headers
    }

    /// `text` with every secret of this endpoint masked: for messages of
    /// lower layers that might quote a request.
    pub fn scrub(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for secret in self.secrets.iter() {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), MASK);
            }
        }
        out
    }
}

impl Endpoint {
    /// `error` with every text the upstream sent (a body's start, a
    /// JSON-RPC error message, a decoding failure that quotes it, a
    /// transport error) scrubbed of this endpoint's secrets: a gateway
    /// echoing "Cannot POST /v3/KEY" must not put the key into a log, an
    /// error or `/health`. Every error a client returns passes here.
    pub fn scrub_error(&self, error: RpcError) -> RpcError {
        match error {
            RpcError::Http {
                status,
                retry_after,
                url,
                snippet,
            } => RpcError::Http {
                status,
                retry_after,
                url,
                snippet: self.scrub(&snippet),
            },
            RpcError::Malformed { reason, snippet } => RpcError::Malformed {
                reason: self.scrub(&reason),
                snippet: self.scrub(&snippet),
            },
            RpcError::Rpc { code, message } => RpcError::Rpc {
                code,
                message: self.scrub(&message),
            },
            RpcError::Transport { url, reason } => RpcError::Transport {
                url,
                reason: self.scrub(&reason),
            },
            RpcError::InvalidUrl { url, reason } => RpcError::InvalidUrl {
                url,
                reason: self.scrub(&reason),
            },
            other @ (RpcError::Timeout { .. } | RpcError::TooLarge { .. }) => other,
        }
    }
}

fn sensitive(value: &str) -> Result<HeaderValue, RpcError> {
    let mut value = HeaderValue::from_str(value).map_err(|_| RpcError::InvalidUrl {
        url: RedactedUrl::of(""),
        reason: "a header value has characters a header cannot carry".into(),
    })?;
    value.set_sensitive(true);
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_of_key_is_masked_when_shown() {
        for (url, shown) in [
            (
                "https://mainnet.example.io/v3/0123456789abcdef0123456789abcdef",
                "https://mainnet.example.io/v3/***",
            ),
            (
                "https://rpc.example.com/?token=s3cret&chain=1",
                "https://rpc.example.com/?token=***&chain=***",
            ),
            (
                "https://user:pa55word@node.example.com:8545/rpc",
                "https://***@node.example.com:8545/rpc",
            ),
            (
                "http://127.0.0.1:9650/ext/bc/C/rpc",
                "http://127.0.0.1:9650/ext/bc/C/rpc",
            ),
            (
                "wss://name.example.pro/Ab12Cd34Ef56/",
                "wss://name.example.pro/***/",
            ),
            ("http://127.0.0.1:8545", "http://127.0.0.1:8545"),
            ("not a url s3cret", "***"),
        ] {
            assert_eq!(RedactedUrl::of(url).as_str(), shown, "{url}");
        }
    }

    #[test]
    fn user_info_becomes_basic_auth_and_leaves_the_uri() {
        let endpoint = Endpoint::parse("https://alice:open%20sesame@127.0.0.1:1/x").unwrap();
        assert_eq!(endpoint.uri().to_string(), "https://127.0.0.1:1/x");
        let (name, value) = &endpoint.headers()[0];
        assert_eq!(name, AUTHORIZATION);
        assert_eq!(value.to_str().unwrap(), "Basic YWxpY2U6b3BlbiBzZXNhbWU=");
        assert!(value.is_sensitive());
        assert_eq!(
            endpoint.scrub("said open sesame and YWxpY2U6b3BlbiBzZXNhbWU="),
            "said *** and ***"
        );
    }

    /// Issue 32 (7): a bearer token does not go in clear to `ws://`, nor
    /// to another host, unless the operator says so; its secrets are still
    /// scrubbed there.
    #[test]
    fn credentials_follow_only_to_the_same_host_over_tls() {
        let endpoint = Endpoint::parse("https://rpc.example:443/v3/abcdefgh12345678")
            .unwrap()
            .with_header("Authorization: Bearer t0k3n-abc")
            .unwrap();
        for (url, expected) in [
            ("wss://rpc.example/ws", Credentials::Inherited),
            ("ws://rpc.example/ws", Credentials::Withheld),
            ("wss://other.example/ws", Credentials::Withheld),
            ("ws://other.example/ws", Credentials::Withheld),
        ] {
            let (ws, sent) = endpoint.with_url(url, false).unwrap();
            assert_eq!(sent, expected, "{url}");
            assert_eq!(
                ws.headers().is_empty(),
                expected == Credentials::Withheld,
                "{url}"
            );
            assert_eq!(ws.scrub("t0k3n-abc"), "***");
            let (ws, sent) = endpoint.with_url(url, true).unwrap();
            assert_eq!(
                (sent, ws.headers().len()),
                (Credentials::Inherited, 1),
                "{url}"
            );
        }
        // A plain-text upstream's credentials already travel in clear to
        // that host: its plain WebSocket gets them.
        let plain = Endpoint::parse("http://127.0.0.1:8545")
            .unwrap()
            .with_header("Authorization: Bearer t0k3n-abc")
            .unwrap();
        assert_eq!(
            plain.with_url("ws://127.0.0.1:8546", false).unwrap().1,
            Credentials::Inherited
        );
        assert_eq!(
            plain.with_url("ws://10.0.0.9:8546", false).unwrap().1,
            Credentials::Withheld
        );
        let bare = Endpoint::parse("https://rpc.example/").unwrap();
        assert_eq!(
            bare.with_url("wss://x.example/", false).unwrap().1,
            Credentials::None
        );
        let own = endpoint
            .with_url("wss://u:pw-pw-pw@x.example/", false)
            .unwrap()
            .1;
        assert_eq!(own, Credentials::Own);
    }

    #[test]
    fn header_values_are_secrets_and_urls_share_credentials() {
        let endpoint = Endpoint::parse("https://127.0.0.1:1/?apikey=k3y-k3y")
            .unwrap()
            .with_header("Authorization: Bearer t0k3n-abc")
            .unwrap();
        assert_eq!(endpoint.scrub("k3y-k3y then t0k3n-abc"), "*** then ***");
        let (ws, sent) = endpoint.with_url("wss://127.0.0.1:1/ws", false).unwrap();
        assert_eq!(sent, Credentials::Inherited);
        assert!(ws.is_tls());
        assert_eq!(ws.headers().len(), 1);
        assert_eq!(ws.scrub("t0k3n-abc k3y-k3y"), "*** ***");
        assert!(format!("{endpoint:?}").find("t0k3n").is_none());
        assert!(
            Endpoint::parse("http://h/")
                .unwrap()
                .with_header("no colon")
                .is_err()
        );
    }

    #[test]
    fn refusals_name_the_url_redacted() {
        for url in ["ftp://host/?token=s3cret", "://?token=s3cret", "s3cret"] {
            let error = Endpoint::parse(url).unwrap_err().to_string();
            assert!(!error.contains("s3cret"), "{error}");
        }
    }
}
