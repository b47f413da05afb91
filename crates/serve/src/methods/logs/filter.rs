//! A log filter: its addresses and topics parsed as geth parses them, the
//! bloom bits that let a block be skipped unread, and the matching of an
//! emitter run or one log against it. Shared by `eth_getLogs` and the
//! `logs` subscription; it reads no block itself.

use alloy_primitives::{Bloom, keccak256};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::params;

/// One-or-many, as the filter's `address` and topic positions allow.
#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany<'a> {
    One(#[serde(borrow)] &'a str),
    Many(#[serde(borrow)] Vec<Option<&'a str>>),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct FilterShape<'a> {
    #[serde(borrow)]
    pub(super) from_block: Option<&'a str>,
    #[serde(borrow)]
    pub(super) to_block: Option<&'a str>,
    #[serde(borrow)]
    pub(super) block_hash: Option<&'a str>,
    #[serde(borrow)]
    address: Option<OneOrMany<'a>>,
    #[serde(borrow)]
    topics: Option<Vec<Option<OneOrMany<'a>>>>,
}

/// Most addresses a filter may name, and most alternatives in one topic
/// position: geth's default (`--rpc.logquerylimit`), so both refuse the
/// same filters, and a bound on what a filter holds (a WebSocket session
/// keeps up to 64) and on the work of matching one log.
pub const MAX_FILTER_ALTERNATIVES: usize = 1000;

/// A parsed filter: alternatives per position (sorted), empty meaning "any".
pub(crate) struct Filter {
    addresses: Vec<[u8; 20]>,
    topics: Vec<Vec<[u8; 32]>>,
    address_blooms: Vec<BloomBits>,
    topic_blooms: Vec<Vec<BloomBits>>,
}

/// The three bits one value sets in a 2048-bit logs bloom (the yellow
/// paper's M3:2048), as (byte, mask) pairs: 6 bytes where a whole bloom of
/// the value would take 256.
#[derive(Clone, Copy)]
struct BloomBits([(u16, u8); 3]);

impl BloomBits {
    fn of(bytes: &[u8]) -> BloomBits {
        let hash = keccak256(bytes);
        BloomBits([0, 2, 4].map(|i| {
            let bit = ((hash[i] as usize) << 8 | hash[i + 1] as usize) & 2047;
            ((255 - bit / 8) as u16, 1u8 << (bit % 8))
        }))
    }

    fn in_bloom(&self, bloom: &Bloom) -> bool {
        self.0
            .iter()
            .all(|&(byte, mask)| bloom.0[byte as usize] & mask != 0)
    }
}

fn sorted<T: Ord>(mut values: Vec<T>) -> Vec<T> {
    values.sort_unstable();
    values.dedup();
    values
}

fn within_limit<T>(values: &[T]) -> Result<(), String> {
    if values.len() > MAX_FILTER_ALTERNATIVES {
        return Err(format!(
            "exceed max addresses or topics per search position (at most {MAX_FILTER_ALTERNATIVES})"
        ));
    }
    Ok(())
}

impl Filter {
    pub(super) fn parse(shape: &FilterShape<'_>) -> Result<Filter, String> {
        if let Some(OneOrMany::Many(list)) = &shape.address {
            within_limit(list)?;
        }
        for position in shape.topics.iter().flatten() {
            if let Some(OneOrMany::Many(list)) = position {
                within_limit(list)?;
            }
        }
        let addresses = match &shape.address {
            None => Vec::new(),
            Some(OneOrMany::One(a)) => vec![params::address(a)?],
            Some(OneOrMany::Many(list)) => list
                .iter()
                .map(|a| {
                    a.ok_or_else(|| "null is not an address".to_string())
                        .and_then(params::address)
                })
                .collect::<Result<_, _>>()?,
        };
        let mut topics = Vec::new();
        for position in shape.topics.iter().flatten() {
            topics.push(match position {
                None => Vec::new(),
                Some(OneOrMany::One(t)) => vec![params::hash(t)?],
                // As geth: a null alternative makes the position match anything.
                Some(OneOrMany::Many(list)) if list.iter().any(Option::is_none) => Vec::new(),
                Some(OneOrMany::Many(list)) => list
                    .iter()
                    .flatten()
                    .map(|t| params::hash(t))
                    .collect::<Result<_, _>>()?,
            });
        }
        if topics.len() > 4 {
            return Err("too many topics, at most 4".into());
        }
        let addresses = sorted(addresses);
        let topics: Vec<Vec<[u8; 32]>> = topics.into_iter().map(sorted).collect();
        Ok(Filter {
            address_blooms: addresses.iter().map(|a| BloomBits::of(a)).collect(),
            topic_blooms: topics
                .iter()
                .map(|alts| alts.iter().map(|t| BloomBits::of(t)).collect())
                .collect(),
            addresses,
            topics,
        })
    }

    /// The address and topic part of a `logs` subscription's filter.
    pub(crate) fn for_subscription(raw: &RawValue) -> Result<Filter, String> {
        let shape: FilterShape<'_> =
            serde_json::from_str(raw.get()).map_err(|e| format!("invalid argument 1: {e}"))?;
        Filter::parse(&shape).map_err(|e| format!("invalid argument 1: {e}"))
    }

    /// The logs of `block` that match (none when its logs are damaged:
    /// counted and logged by the store).
    pub(crate) fn block_logs(&self, block: &neve_store::Block) -> Vec<neve_store::Log> {
        if block.log_count() == 0 || !self.may_match(&Bloom::from_slice(block.logs_bloom())) {
            return Vec::new();
        }
        let mut logs = block.logs().unwrap_or_default();
        logs.retain(|log| self.matches(&log.address, log.topics()));
        logs
    }

    /// Whether a block with this bloom may hold a matching log.
    pub(super) fn may_match(&self, block_bloom: &Bloom) -> bool {
        let any =
            |bits: &[BloomBits]| bits.is_empty() || bits.iter().any(|b| b.in_bloom(block_bloom));
        any(&self.address_blooms) && self.topic_blooms.iter().all(|alts| any(alts))
    }

    /// How a run of logs sharing an address and first topic fares: decided
    /// whole from its run-table entry where the filter constrains no
    /// position past the first (the usual address-and-event query), else
    /// log by log.
    pub(super) fn match_run(&self, run: &neve_store::EmitterRun<'_>) -> RunMatch {
        if !self.addresses.is_empty() && self.addresses.binary_search(run.address).is_err() {
            return RunMatch::None;
        }
        let Some(first_position) = self.topics.first() else {
            return RunMatch::All;
        };
        // Its logs have no topics, and a filter position needs one.
        let Some(topic0) = run.topic0 else {
            return RunMatch::None;
        };
        if !first_position.is_empty() && first_position.binary_search(topic0).is_err() {
            return RunMatch::None;
        }
        // As in `matches`: a log with fewer topics than the filter has
        // positions never matches, so a whole run matches only when its
        // shortest log is long enough.
        let wildcards_after_first = self.topics[1..].iter().all(Vec::is_empty);
        if wildcards_after_first && self.topics.len() <= run.fewest_topics as usize {
            RunMatch::All
        } else {
            RunMatch::Each
        }
    }

    pub(super) fn matches(&self, address: &[u8; 20], topics: &[[u8; 32]]) -> bool {
        if !self.addresses.is_empty() && self.addresses.binary_search(address).is_err() {
            return false;
        }
        // As geth: more filter positions than log topics never match.
        if self.topics.len() > topics.len() {
            return false;
        }
        self.topics
            .iter()
            .zip(topics)
            .all(|(alts, topic)| alts.is_empty() || alts.binary_search(topic).is_ok())
    }
}

/// What a filter says of an emitter run.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum RunMatch {
    /// No log of it matches.
    None,
    /// Every log of it matches.
    All,
    /// Its logs must be matched one by one.
    Each,
}

#[cfg(test)]
mod tests {
    use alloy_primitives::BloomInput;

    use super::*;

    #[test]
    fn a_values_bits_are_the_bits_it_sets_in_a_bloom() {
        for n in 0u32..2000 {
            let value = keccak256(n.to_le_bytes());
            let bits = BloomBits::of(&value[..(n % 33) as usize]);
            let mut alone = Bloom::default();
            alone.accrue(BloomInput::Raw(&value[..(n % 33) as usize]));
            assert!(bits.in_bloom(&alone));
            let mut others = Bloom::default();
            others.accrue(BloomInput::Raw(&value[..]));
            assert_eq!(bits.in_bloom(&others), others.contains(&alone), "{n}");
        }
    }

    fn filter(json: &str) -> Result<Filter, String> {
        Filter::parse(&serde_json::from_str(json).unwrap())
    }

    #[test]
    fn filters_hold_at_most_a_thousand_alternatives_a_position() {
        let list = |n: usize, width: usize| {
            (0..n)
                .map(|i| format!("\"0x{i:0width$x}\""))
                .collect::<Vec<_>>()
                .join(",")
        };
        assert!(filter(&format!("{{\"address\":[{}]}}", list(1000, 40))).is_ok());
        let error = filter(&format!("{{\"address\":[{}]}}", list(1001, 40)))
            .err()
            .unwrap();
        assert!(error.contains("exceed max addresses or topics"), "{error}");
        assert!(filter(&format!("{{\"topics\":[null,[{}]]}}", list(1000, 64))).is_ok());
        assert!(filter(&format!("{{\"topics\":[null,[{}]]}}", list(1001, 64))).is_err());
    }

    #[test]
    fn matching_reads_sorted_alternatives() {
        let f = filter(
            r#"{"address":["0x0000000000000000000000000000000000000009","0x0000000000000000000000000000000000000001","0x0000000000000000000000000000000000000009"],
                "topics":[["0x0000000000000000000000000000000000000000000000000000000000000002","0x0000000000000000000000000000000000000000000000000000000000000001"]]}"#,
        )
        .unwrap();
        assert_eq!(f.addresses.len(), 2, "duplicates dropped");
        let address = |b: u8| {
            let mut a = [0u8; 20];
            a[19] = b;
            a
        };
        let topic = |b: u8| {
            let mut t = [0u8; 32];
            t[31] = b;
            t
        };
        assert!(f.matches(&address(9), &[topic(1)]));
        assert!(f.matches(&address(1), &[topic(2), topic(7)]));
        assert!(!f.matches(&address(2), &[topic(1)]));
        assert!(!f.matches(&address(9), &[topic(3)]));
        assert!(!f.matches(&address(9), &[]));
    }
}
