//! Browsers: which origins' pages may call neve (`--cors-origins`, as
//! geth's `--http.corsdomain`) and open a WebSocket to it (`--ws-origins`,
//! as geth's `--ws.origins`).
//!
//! A preflight (`OPTIONS /`) from an allowed origin gets 204 with the
//! `Access-Control-Allow-*` headers; from another, 403. An answer to an
//! allowed origin's call carries `Access-Control-Allow-Origin`; to
//! another's, nothing, so the browser keeps it from the page. Clients that
//! are not browsers send no `Origin` and are served as before. A
//! WebSocket upgrade with an `Origin` not allowed is 403.

use bytes::Bytes;
use hyper::header::{HeaderMap, HeaderValue, ORIGIN, VARY};
use hyper::{Response, StatusCode};

use crate::body::Chunks;

/// How long a browser may reuse a preflight's answer before asking again:
/// a page polling every block then costs one call, not two. Default is
/// 2 h (Chromium's own cap).
pub const PREFLIGHT_MAX_AGE_SECONDS: u32 = 7200;

/// Methods a page may use: JSON-RPC is POSTed; GET and OPTIONS for
/// completeness of the preflight's answer.
const ALLOWED_METHODS: &str = "POST, GET, OPTIONS";

/// Origins allowed, as configured.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Origins {
    /// None: no CORS headers; a WebSocket from any page is refused.
    #[default]
    None,
    /// `*`: every origin.
    Any,
    /// These, compared without case and without a trailing slash.
    List(Vec<String>),
}

impl Origins {
    /// From the comma-separated list of a flag: empty is [`Origins::None`],
    /// one `*` among them [`Origins::Any`].
    pub fn from_list(items: &[String]) -> Origins {
        let items: Vec<String> = items
            .iter()
            .map(|o| o.trim().trim_end_matches('/').to_ascii_lowercase())
            .filter(|o| !o.is_empty())
            .collect();
        if items.iter().any(|o| o == "*") {
            Origins::Any
        } else if items.is_empty() {
            Origins::None
        } else {
            Origins::List(items)
        }
    }

    /// Whether a page from `origin` is allowed.
    pub fn allows(&self, origin: &[u8]) -> bool {
        match self {
            Origins::None => false,
            Origins::Any => true,
            Origins::List(list) => {
                let origin = origin.strip_suffix(b"/").unwrap_or(origin);
                list.iter()
                    .any(|o| o.as_bytes().eq_ignore_ascii_case(origin))
            }
        }
    }
}

/// The request's `Origin`, if it sent one.
pub(crate) fn origin(headers: &HeaderMap) -> Option<&HeaderValue> {
    headers.get(ORIGIN)
}

/// The answer to a preflight (`OPTIONS`) carrying `origin`.
pub(crate) fn preflight(
    allowed: &Origins,
    origin: Option<&HeaderValue>,
    headers: &HeaderMap,
) -> Response<Chunks> {
    let mut answer = Response::new(Chunks::empty());
    let Some(origin) = origin else {
        // Not a browser's preflight: say what the resource takes.
        *answer.status_mut() = StatusCode::NO_CONTENT;
        answer
            .headers_mut()
            .insert("allow", HeaderValue::from_static(ALLOWED_METHODS));
        return answer;
    };
    if !allowed.allows(origin.as_bytes()) {
        *answer.status_mut() = StatusCode::FORBIDDEN;
        *answer.body_mut() = Chunks::new(vec![Bytes::from_static(b"origin not allowed\n")]);
        return answer;
    }
    *answer.status_mut() = StatusCode::NO_CONTENT;
    let out = answer.headers_mut();
    out.insert("access-control-allow-origin", origin.clone());
    out.insert(
        "access-control-allow-methods",
        HeaderValue::from_static(ALLOWED_METHODS),
    );
    // Whatever headers the page asks to send (content-type, an API key):
    // none of them changes what neve answers.
    let asked = headers
        .get("access-control-request-headers")
        .cloned()
        .unwrap_or_else(|| HeaderValue::from_static("content-type"));
    out.insert("access-control-allow-headers", asked);
    out.insert(
        "access-control-max-age",
        HeaderValue::from(PREFLIGHT_MAX_AGE_SECONDS),
    );
    out.insert(VARY, HeaderValue::from_static("Origin"));
    answer
}

/// Adds `Access-Control-Allow-Origin` to an answer for an allowed origin's
/// call.
pub(crate) fn allow(answer: &mut Response<Chunks>, allowed: &Origins, origin: Option<HeaderValue>) {
    if let Some(origin) = origin
        && allowed.allows(origin.as_bytes())
    {
        let out = answer.headers_mut();
        out.insert("access-control-allow-origin", origin);
        out.insert(VARY, HeaderValue::from_static("Origin"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(items: &[&str]) -> Origins {
        Origins::from_list(&items.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn origins_match_without_case_or_trailing_slash() {
        let allowed = list(&["https://App.example/", "http://127.0.0.1:8080"]);
        assert!(allowed.allows(b"https://app.example"));
        assert!(allowed.allows(b"http://127.0.0.1:8080"));
        assert!(!allowed.allows(b"http://127.0.0.1:8081"));
        assert!(!allowed.allows(b"https://app.example.evil"));
        assert_eq!(list(&[]), Origins::None);
        assert!(!Origins::None.allows(b"https://app.example"));
        assert_eq!(list(&["https://a", "*"]), Origins::Any);
    }

    #[test]
    fn a_preflight_is_answered_only_for_an_allowed_origin() {
        let allowed = list(&["https://app.example"]);
        let mut headers = HeaderMap::new();
        headers.insert(
            "access-control-request-headers",
            HeaderValue::from_static("content-type,x-api-key"),
        );
        let ok = preflight(
            &allowed,
            Some(&HeaderValue::from_static("https://app.example")),
            &headers,
        );
        assert_eq!(ok.status(), StatusCode::NO_CONTENT);
        assert_eq!(
            ok.headers()["access-control-allow-origin"],
            "https://app.example"
        );
        assert_eq!(
            ok.headers()["access-control-allow-headers"],
            "content-type,x-api-key"
        );
        let refused = preflight(
            &allowed,
            Some(&HeaderValue::from_static("https://other.example")),
            &headers,
        );
        assert_eq!(refused.status(), StatusCode::FORBIDDEN);
        assert!(
            refused
                .headers()
                .get("access-control-allow-origin")
                .is_none()
        );
    }
}
