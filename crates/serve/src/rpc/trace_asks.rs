//! Which configurations clients trace whole blocks with lately
//! ([`TraceAsks`]): an indexer traces every new block with `callTracer`
//! and again with `prestateTracer`, and the second request finds its
//! answer made by the first one's replay when that replay ran both
//! (`neve_execution::trace::trace_block_along`). A configuration is
//! offered alongside another once it was asked of two stored blocks or
//! more (noted only once the block is found), the last time within
//! [`ASKED_LATELY`]: what clients follow the chain with, not a one-off.
//! The one asked of the most blocks lately is offered first, so a client
//! naming a configuration of its own now and then does not choose what
//! an indexer's replays run.
//!
//! Remembered by the method's byte and the configuration's text as sent
//! (the memo's key holds the text, so only the same text finds the answer
//! made for it); at most [`MAX_ASKED`] configurations of at most
//! [`MAX_CONFIG_TEXT`] bytes. A new one takes the place of the one asked
//! of the fewest blocks lately (of those, the one asked longest ago; one
//! not asked lately counts none): a flood of configurations asked of a
//! block or two does not push out what clients follow the chain with.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Most configurations remembered, of every method together. Default is
/// 64.
const MAX_ASKED: usize = 64;

/// Longest configuration text remembered, in bytes (longer ones are
/// never offered). Default is 256.
const MAX_CONFIG_TEXT: usize = 256;

/// How long after it was last asked a configuration is still offered
/// (and its count of blocks kept). Default is 30 s.
const ASKED_LATELY: Duration = Duration::from_secs(30);

/// Most configurations offered to one replay (each is parsed on the call
/// thread; the replay runs one of each kind at most, and there are two
/// kinds). Default is 2.
const MAX_OFFERED: usize = 2;

/// One configuration, as a method was asked with it.
struct Asked {
    tag: u8,
    config: Box<str>,
    /// The height of the block it was last asked of.
    height: u64,
    /// Blocks it was asked of lately, counting each change of block once.
    blocks: u32,
    /// Whether it runs alongside others (judged once, when first asked).
    joins: bool,
    at: Instant,
}

/// The configurations whole blocks were traced with lately.
#[derive(Default)]
pub(crate) struct TraceAsks {
    asked: Mutex<Vec<Asked>>,
}

impl TraceAsks {
    /// Notes that the method of `tag` was asked of the stored block at
    /// `height` with `config` (as sent); `joins` tells whether such a
    /// configuration runs alongside others.
    pub(crate) fn asked(&self, tag: u8, height: u64, config: &str, joins: fn(&str) -> bool) {
        if config.len() > MAX_CONFIG_TEXT {
            return;
        }
        let now = Instant::now();
        let mut asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = asked
            .iter_mut()
            .find(|a| a.tag == tag && &*a.config == config)
        {
            if now.duration_since(known.at) > ASKED_LATELY {
                known.blocks = 1;
            } else if known.height != height {
                known.blocks = known.blocks.saturating_add(1);
            }
            known.height = height;
            known.at = now;
            return;
        }
        drop(asked);
        // Judged outside the lock (a parse of at most `MAX_CONFIG_TEXT`).
        let joins = joins(config);
        let mut asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
        if asked.iter().any(|a| a.tag == tag && &*a.config == config) {
            return;
        }
        let lately = |a: &Asked| match now.duration_since(a.at) <= ASKED_LATELY {
            true => a.blocks,
            false => 0,
        };
        if asked.len() == MAX_ASKED
            && let Some(oldest) =
                (0..asked.len()).min_by_key(|i| (lately(&asked[*i]), asked[*i].at))
        {
            asked.swap_remove(oldest);
        }
        asked.push(Asked {
            tag,
            config: config.into(),
            height,
            blocks: 1,
            joins,
            at: now,
        });
    }

    /// The configurations to offer alongside `config` in a replay for the
    /// method of `tag`: others that join it was asked with, of two blocks
    /// or more, lately; the one asked of the most blocks first, at most
    /// [`MAX_OFFERED`].
    /// None when `config` itself is known not to join others.
    pub(crate) fn offered(&self, tag: u8, config: &str) -> Vec<Box<str>> {
        let now = Instant::now();
        let asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
        let alone = |a: &Asked| a.tag == tag && &*a.config == config && !a.joins;
        if asked.iter().any(alone) {
            return Vec::new();
        }
        let mut offered: Vec<&Asked> = asked
            .iter()
            .filter(|a| {
                a.tag == tag
                    && a.joins
                    && &*a.config != config
                    && a.blocks >= 2
                    && now.duration_since(a.at) <= ASKED_LATELY
            })
            .collect();
        offered.sort_by_key(|a| std::cmp::Reverse((a.blocks, a.at)));
        offered
            .into_iter()
            .take(MAX_OFFERED)
            .map(|a| a.config.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CALL: &str = r#"{"tracer":"callTracer"}"#;

    /// Anything but the struct logger's `{}` joins others here.
    fn joins(config: &str) -> bool {
        config != "{}"
    }
    const PRESTATE: &str = r#"{"tracer":"prestateTracer"}"#;

    #[test]
    fn a_configuration_asked_of_two_blocks_is_offered_to_the_others() {
        let asks = TraceAsks::default();
        asks.asked(7, 16, PRESTATE, joins);
        asks.asked(7, 16, PRESTATE, joins);
        assert!(asks.offered(7, CALL).is_empty(), "one block is a one-off");
        asks.asked(7, 17, PRESTATE, joins);
        assert_eq!(asks.offered(7, CALL), vec![Box::from(PRESTATE)]);
        assert!(asks.offered(7, PRESTATE).is_empty(), "not to itself");
        assert!(asks.offered(8, CALL).is_empty(), "not to another method");
        asks.asked(7, 16, "{}", joins);
        asks.asked(7, 17, "{}", joins);
        assert_eq!(
            asks.offered(7, CALL),
            vec![Box::from(PRESTATE)],
            "only what joins"
        );
        assert!(asks.offered(7, "{}").is_empty(), "nothing to what does not");
        // What an indexer follows the chain with comes before a newer
        // configuration asked of two blocks.
        asks.asked(7, 18, PRESTATE, joins);
        let diff = r#"{"tracer":"prestateTracer","tracerConfig":{"diffMode":true}}"#;
        asks.asked(7, 1, diff, joins);
        asks.asked(7, 2, diff, joins);
        assert_eq!(asks.offered(7, CALL)[0], Box::from(PRESTATE));
    }

    #[test]
    fn long_texts_are_not_remembered_and_the_oldest_gives_way() {
        let asks = TraceAsks::default();
        let long = format!(
            "{{\"tracer\":\"callTracer\",\"x\":\"{}\"}}",
            "a".repeat(300)
        );
        asks.asked(7, 1, &long, joins);
        asks.asked(7, 2, &long, joins);
        assert!(asks.offered(7, CALL).is_empty());
        for i in 0..=MAX_ASKED {
            let config = format!("{{\"n\":{i}}}");
            asks.asked(7, 1, &config, joins);
            asks.asked(7, 2, &config, joins);
        }
        assert_eq!(asks.asked.lock().unwrap().len(), MAX_ASKED);
        let offered = asks.offered(7, CALL);
        assert_eq!(offered.len(), MAX_OFFERED);
        assert!(offered.contains(&format!("{{\"n\":{MAX_ASKED}}}").into_boxed_str()));
        assert!(
            !offered.contains(&Box::from("{\"n\":0}")),
            "the oldest went"
        );
        // What is asked of the most blocks stays through a flood of
        // configurations asked of two.
        for height in 3..10 {
            asks.asked(7, height, PRESTATE, joins);
        }
        for i in 0..2 * MAX_ASKED {
            let config = format!("{{\"two\":{i}}}");
            asks.asked(7, 1, &config, joins);
            asks.asked(7, 2, &config, joins);
        }
        assert_eq!(asks.offered(7, CALL)[0], Box::from(PRESTATE));
        // One-offs give way first: a flood of them keeps what follows.
        for i in 0..2 * MAX_ASKED {
            asks.asked(7, 3, &format!("{{\"flood\":{i}}}"), joins);
        }
        assert_eq!(asks.offered(7, CALL)[0], Box::from(PRESTATE));
    }
}
