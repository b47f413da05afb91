//! A work budget per client address (`--client-rate`). Where neve faces
//! its clients directly, one address sending heavy or bad requests as fast
//! as it can would otherwise take the CPU every other client is answered
//! with. Each request costs units after it is answered ([`Spent`]); an
//! address in debt gets HTTP 429 with -32005 and `Retry-After`, answered
//! from its headers alone, its body never read, after a hold of up to
//! [`REFUSAL_HOLD`].
//!
//! Off by default: behind a front end every request comes from the front
//! end's address, and the front end is the place to limit (nginx's
//! `limit_req`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Units a client may spend per second; 0 turns the budget off. Default is 0.
pub const DEFAULT_CLIENT_RATE: u64 = 0;

/// Request and answer bytes that cost one unit, like one call does: a
/// 100 KB body or a 1 MB answer costs what 25 or 250 small calls do.
pub const BYTES_PER_UNIT: usize = 4096;

/// A client that has been quiet may spend this many seconds of its rate at
/// once, so bursts of a well-behaved client pass.
const BURST_SECONDS: f64 = 1.0;

/// Debt is capped at this many seconds of the rate: one huge answer shuts
/// a client out for a while, not for good.
const MAX_DEBT_SECONDS: f64 = 10.0;

/// How long a refusal is held before it is sent, at most (less if the
/// debt is paid sooner): a client sending one request at a time is slowed
/// to its budget instead of looping on quick refusals, and the hold costs
/// no CPU, only the connection's slot under `--max-connections`.
pub const REFUSAL_HOLD: Duration = Duration::from_secs(1);

/// Most addresses tracked at once, over all shards (about 48 bytes each).
/// When a shard is full, addresses with a full bucket (quiet ones) are
/// forgotten; if none is, a new address goes untracked until one is.
pub const MAX_TRACKED_CLIENTS: usize = 65_536;

const SHARDS: usize = 16;

/// Units an error answer costs on top of its call: the work went to
/// nothing served, and a client that keeps being refused is broken or
/// abusing, so it is slowed to a tenth of what a working client may do.
pub const ERROR_UNITS: f64 = 10.0;

/// Units the first request on a connection costs on top: accepting,
/// setting up and closing a connection costs neve several small calls'
/// worth of CPU, which keep-alive clients do not make it spend.
pub const NEW_CONNECTION_UNITS: f64 = 4.0;

/// Gas of executed calls that costs one unit, like one small call does: a
/// token transfer simulated (~30,000 gas, tens of microseconds of revm)
/// costs what a handful of block reads cost, and a call at the 50 M gas
/// cap (most of a second of a core) costs 10,000 units, so `--client-rate`
/// charges calls by the work they did, not by their count.
pub const GAS_PER_UNIT: u64 = 5_000;

/// What an answered request made neve spend, for its client's budget.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Spent {
    /// A batch's elements; 0 or 1 for a single call.
    pub(crate) calls: usize,
    /// Elements answered with an error (or the whole request refused).
    pub(crate) errors: usize,
    /// Request and answer bytes.
    pub(crate) bytes: u64,
    /// The connection's first request.
    pub(crate) new_connection: bool,
}

impl Spent {
    /// One unit per call and per [`BYTES_PER_UNIT`] moved, plus
    /// [`ERROR_UNITS`] per error and [`NEW_CONNECTION_UNITS`] for a new
    /// connection.
    pub(crate) fn units(&self) -> f64 {
        self.calls.max(1) as f64
            + self.bytes as f64 / BYTES_PER_UNIT as f64
            + self.errors as f64 * ERROR_UNITS
            + if self.new_connection {
                NEW_CONNECTION_UNITS
            } else {
                0.0
            }
    }
}

/// Marks an answer with how many of its elements are errors, for
/// [`Spent::errors`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Errors(pub(crate) usize);

#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Token buckets by client address (an IPv6 client by its /64, which one
/// host typically holds whole).
pub(crate) struct ClientBudget {
    rate: f64,
    burst: f64,
    shards: Vec<Mutex<Shard>>,
}

#[derive(Default)]
struct Shard {
    buckets: HashMap<IpAddr, Bucket>,
    /// When a sweep of a full shard last found nothing to forget: the next
    /// waits [`SWEEP_PAUSE`], so newcomers to a shard full of spending
    /// clients cost a lookup each, not a scan each.
    fruitless_sweep: Option<Instant>,
}

/// See [`Shard::fruitless_sweep`].
const SWEEP_PAUSE: Duration = Duration::from_secs(1);

impl ClientBudget {
    /// A budget of `rate` units per second per client; `None` when 0.
    pub(crate) fn new(rate: u64) -> Option<ClientBudget> {
        (rate > 0).then(|| ClientBudget {
            rate: rate as f64,
            burst: rate as f64 * BURST_SECONDS,
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
        })
    }

    fn shard(&self, client: IpAddr) -> &Mutex<Shard> {
        let mix = |h: usize, b: &u8| h.wrapping_mul(31).wrapping_add(*b as usize);
        let index = match client {
            IpAddr::V4(v4) => v4.octets().iter().fold(0, mix),
            IpAddr::V6(v6) => v6.octets().iter().fold(0, mix),
        };
        &self.shards[index % SHARDS]
    }

    fn refill(&self, bucket: &mut Bucket, now: Instant) {
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * self.rate).min(self.burst);
        bucket.at = now;
    }

    /// `Ok` if `client` may be answered now; otherwise how long until it
    /// is out of debt.
    pub(crate) fn admit(&self, client: IpAddr, now: Instant) -> Result<(), Duration> {
        let client = key(client);
        let mut shard = self.shard(client).lock().expect("never poisoned");
        let Some(bucket) = shard.buckets.get_mut(&client) else {
            return Ok(());
        };
        self.refill(bucket, now);
        if bucket.tokens >= 0.0 {
            Ok(())
        } else {
            Err(Duration::from_secs_f64(-bucket.tokens / self.rate))
        }
    }

    /// Charges `client` for `gas` of executed calls ([`GAS_PER_UNIT`]),
    /// as it is spent: on the call threads, whether or not the client is
    /// still there to take the answer.
    pub(crate) fn charge_gas(&self, client: IpAddr, gas: u64, now: Instant) {
        if gas > 0 {
            self.charge(client, gas as f64 / GAS_PER_UNIT as f64, now);
        }
    }

    /// Books `units` spent by `client`.
    pub(crate) fn charge(&self, client: IpAddr, units: f64, now: Instant) {
        let client = key(client);
        let mut shard = self.shard(client).lock().expect("never poisoned");
        let full = |shard: &Shard| shard.buckets.len() >= MAX_TRACKED_CLIENTS / SHARDS;
        if !shard.buckets.contains_key(&client) && full(&shard) {
            if shard
                .fruitless_sweep
                .is_some_and(|at| now.saturating_duration_since(at) < SWEEP_PAUSE)
            {
                return;
            }
            let (rate, burst) = (self.rate, self.burst);
            shard.buckets.retain(|_, b| {
                let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
                b.tokens + elapsed * rate < burst
            });
            if full(&shard) {
                shard.fruitless_sweep = Some(now);
                return;
            }
            shard.fruitless_sweep = None;
        }
        let bucket = shard.buckets.entry(client).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        self.refill(bucket, now);
        bucket.tokens = (bucket.tokens - units).max(-self.rate * MAX_DEBT_SECONDS);
    }
}

/// The address a budget is kept for: IPv4 as is, IPv6 by its /64.
fn key(client: IpAddr) -> IpAddr {
    match client {
        IpAddr::V4(_) => client,
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return IpAddr::V4(v4);
            }
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(bits.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn a_client_in_debt_waits_and_others_do_not() {
        let budget = ClientBudget::new(100).unwrap();
        let now = Instant::now();
        let (heavy, light) = (ip("192.0.2.1"), ip("192.0.2.2"));
        assert!(budget.admit(heavy, now).is_ok(), "unknown clients pass");
        budget.charge(heavy, 100.0, now);
        assert!(
            budget.admit(heavy, now).is_ok(),
            "the burst is spent, not overspent"
        );
        budget.charge(heavy, 50.0, now);
        let wait = budget.admit(heavy, now).unwrap_err();
        assert_eq!(wait, Duration::from_millis(500));
        assert!(budget.admit(light, now).is_ok());
        let later = now + Duration::from_millis(500);
        assert!(budget.admit(heavy, later).is_ok(), "the debt is paid off");
    }

    #[test]
    fn debt_is_capped_and_quiet_clients_refill_to_the_burst_only() {
        let budget = ClientBudget::new(10).unwrap();
        let now = Instant::now();
        let client = ip("192.0.2.9");
        budget.charge(client, 1e9, now);
        let wait = budget.admit(client, now).unwrap_err();
        assert_eq!(wait, Duration::from_secs_f64(MAX_DEBT_SECONDS));
        let much_later = now + Duration::from_secs(3600);
        budget.charge(client, 15.0, much_later);
        assert!(
            budget.admit(client, much_later).is_err(),
            "the burst is 10 units"
        );
    }

    #[test]
    fn ipv6_clients_share_their_64_and_mapped_v4_is_v4() {
        let budget = ClientBudget::new(10).unwrap();
        let now = Instant::now();
        budget.charge(ip("2001:db8:1:2::1"), 20.0, now);
        assert!(budget.admit(ip("2001:db8:1:2:ffff::7"), now).is_err());
        assert!(budget.admit(ip("2001:db8:1:3::1"), now).is_ok());
        budget.charge(ip("::ffff:192.0.2.5"), 20.0, now);
        assert!(budget.admit(ip("192.0.2.5"), now).is_err());
    }

    #[test]
    fn the_table_is_bounded_and_forgets_quiet_clients_first() {
        let budget = ClientBudget::new(10).unwrap();
        let now = Instant::now();
        let per_shard = MAX_TRACKED_CLIENTS / SHARDS;
        for i in 0..(MAX_TRACKED_CLIENTS * 2) as u32 {
            budget.charge(IpAddr::V4(i.into()), 20.0, now);
        }
        for shard in &budget.shards {
            assert!(shard.lock().unwrap().buckets.len() <= per_shard);
        }
        // Once they are quiet (full again), newcomers replace them.
        let later = now + Duration::from_secs(60);
        let newcomer = ip("198.51.100.1");
        budget.charge(newcomer, 20.0, later);
        assert!(budget.admit(newcomer, later).is_err(), "tracked");
    }

    #[test]
    fn spending_counts_calls_bytes_errors_and_connections() {
        let call = Spent {
            calls: 0,
            bytes: 1000,
            ..Spent::default()
        };
        assert_eq!(call.units(), 1.0 + 1000.0 / 4096.0);
        let refused_batch = Spent {
            calls: 1000,
            errors: 1,
            bytes: 4096 * 3,
            new_connection: true,
        };
        assert_eq!(refused_batch.units(), 1000.0 + 3.0 + 10.0 + 4.0);
        // A call is charged by the gas it used, as it is used: one at the
        // cap costs thousands of small calls.
        let budget = ClientBudget::new(100).unwrap();
        let client: IpAddr = [127, 0, 0, 9].into();
        let now = Instant::now();
        budget.charge_gas(client, 50_000_000, now);
        let wait = budget.admit(client, now).unwrap_err();
        // 10,000 units at 100 a second: in debt to the cap of ten seconds.
        assert_eq!(wait, Duration::from_secs_f64(MAX_DEBT_SECONDS), "{wait:?}");
    }
}
