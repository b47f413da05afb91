//! URLs as they may be shown: [`RedactedUrl`], with every form of key
//! masked.

use std::fmt;
use std::sync::Arc;

/// What stands in for a secret wherever a URL or a message is shown.
pub const MASK: &str = "***";

/// A URL as it may be shown: credentials masked. Only made by redacting, so
/// a value of this type cannot carry a key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RedactedUrl(Arc<str>);

impl RedactedUrl {
    /// `url` with its user info, secret-looking path segments, query values
    /// and fragment masked; works on any text, parseable or not.
    pub fn of(url: &str) -> RedactedUrl {
        RedactedUrl(redact(url).into())
    }

    /// The shown form.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RedactedUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A path segment that may be a key: anything but a short word. Provider
/// keys are long mixes of letters and digits; `v3`, `ext`, `bc`, `C`,
/// `rpc`, `mainnet` and the like are shown.
pub(crate) fn secret_like(segment: &str) -> bool {
    let word = segment.len() <= 16
        && segment
            .bytes()
            .all(|b| b.is_ascii_lowercase() || matches!(b, b'-' | b'_' | b'.'));
    segment.len() > 3 && !word
}

fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        // Not a URL: nothing in it can be told apart from a key.
        return if url.is_empty() {
            String::new()
        } else {
            MASK.to_owned()
        };
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let tail = tail.split('#').next().unwrap_or_default();
    let mut out = format!("{scheme}://");
    match authority.rsplit_once('@') {
        Some((_, host)) => {
            out.push_str(MASK);
            out.push('@');
            out.push_str(host);
        }
        None => out.push_str(authority),
    }
    let (path, query) = match tail.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (tail, None),
    };
    let segments: Vec<&str> = path
        .split('/')
        .map(|segment| if secret_like(segment) { MASK } else { segment })
        .collect();
    out.push_str(&segments.join("/"));
    if let Some(query) = query {
        out.push('?');
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) => format!("{name}={MASK}"),
                None if pair.is_empty() => String::new(),
                None => MASK.to_owned(),
            })
            .collect();
        out.push_str(&pairs.join("&"));
    }
    out
}

pub(crate) fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap() * 16 + hex(l).unwrap()) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
