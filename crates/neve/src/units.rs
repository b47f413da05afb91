//! Durations and sizes as operators write them: `500ms`, `30s`, `2m`;
//! `24MiB`, `1.5GB`. A bare number keeps the unit the flag's name says
//! (`--poll-ms 100`, `--idle-timeout 60`, `--max-body-bytes 1048576`), so
//! settings written before units were accepted mean what they meant.
//!
//! Parsing is humantime's and bytesize's; shown values (help, `neve
//! config`) are written back with units.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A duration whose bare number is `BARE_MS` milliseconds: [`Millis`] for
/// flags named `…-ms`, [`Secs`] for the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span<const BARE_MS: u64>(pub Duration);

/// A duration whose bare number is milliseconds.
pub type Millis = Span<1>;
/// A duration whose bare number is seconds.
pub type Secs = Span<1000>;

impl<const BARE_MS: u64> FromStr for Span<BARE_MS> {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if let Ok(n) = text.parse::<u64>() {
            return Ok(Span(Duration::from_millis(n.saturating_mul(BARE_MS))));
        }
        humantime::parse_duration(text)
            .map(Span)
            .map_err(|e| format!("{e}: write a duration such as 500ms, 30s or 2m"))
    }
}

impl<const BARE_MS: u64> fmt::Display for Span<BARE_MS> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = humantime::format_duration(self.0).to_string();
        write!(f, "{}", shown.replace(' ', ""))
    }
}

/// A size in bytes: a bare number, or with a unit (`KiB`, `MiB`, `GiB`,
/// `TiB` are powers of 1,024; `KB`, `MB`, `GB`, `TB` of 1,000).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bytes(pub u64);

impl Bytes {
    /// As a `usize`, for in-memory budgets (saturating on 32-bit hosts).
    pub fn usize(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }
}

impl FromStr for Bytes {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if let Ok(n) = text.parse::<u64>() {
            return Ok(Bytes(n));
        }
        text.parse::<bytesize::ByteSize>()
            .map(|size| Bytes(size.as_u64()))
            .map_err(|e| format!("{e}: write a size such as 1048576, 512KiB, 24MiB or 2GB"))
    }
}

impl fmt::Display for Bytes {
    /// The largest binary unit that divides it exactly, else bytes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
            if self.0 != 0 && self.0.is_multiple_of(1u64 << shift) {
                return write!(f, "{}{unit}", self.0 >> shift);
            }
        }
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_number_keeps_the_unit_the_flag_names() {
        assert_eq!(
            "250".parse::<Millis>().unwrap().0,
            Duration::from_millis(250)
        );
        assert_eq!("60".parse::<Secs>().unwrap().0, Duration::from_secs(60));
        assert_eq!("1048576".parse::<Bytes>().unwrap().0, 1 << 20);
    }

    #[test]
    fn units_are_accepted_and_shown_back() {
        assert_eq!("30s".parse::<Millis>().unwrap().0, Duration::from_secs(30));
        assert_eq!("1m 30s".parse::<Secs>().unwrap().0, Duration::from_secs(90));
        assert_eq!(
            "500ms".parse::<Secs>().unwrap().0,
            Duration::from_millis(500)
        );
        assert_eq!("24MiB".parse::<Bytes>().unwrap().0, 24 << 20);
        assert_eq!("24 MiB".parse::<Bytes>().unwrap().0, 24 << 20);
        assert_eq!("2GB".parse::<Bytes>().unwrap().0, 2_000_000_000);
        assert_eq!(Secs::from_str("90").unwrap().to_string(), "1m30s");
        assert_eq!(Millis::from_str("1500").unwrap().to_string(), "1s500ms");
        assert_eq!(Bytes(256 << 20).to_string(), "256MiB");
        assert_eq!(Bytes(25_000_000).to_string(), "25000000");
        // What is shown parses back to the same value.
        for shown in ["1m30s", "1s500ms", "256MiB", "25000000"] {
            assert!(shown.parse::<Secs>().is_ok() || shown.parse::<Bytes>().is_ok());
        }
    }

    #[test]
    fn nonsense_is_refused_with_an_example() {
        let error = "thirty".parse::<Secs>().unwrap_err();
        assert!(error.contains("30s"), "{error}");
        let error = "24 parsecs".parse::<Bytes>().unwrap_err();
        assert!(error.contains("24MiB"), "{error}");
    }
}
