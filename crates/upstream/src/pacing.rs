//! Good manners toward a shared endpoint: one request budget for every
//! exchange with the upstream (backfill, live fetches, state fetch-through
//! and prefetch all draw from it), a pause when the endpoint says
//! `Retry-After` (429 or 503), a spacing learnt from refusals so an
//! endpoint's unstated cap is met after a few of them rather than hit
//! again after every pause, and counters an operator can read.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

/// Longest pause a `Retry-After` can impose: an endpoint asking for an hour
/// is asked again after this. Default is 5 minutes.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// A refusal without `Retry-After` pauses every exchange this long, then
/// doubles up to [`MAX_BACKOFF`] while refusals go on.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(250);

/// Longest pause after a refusal that gave no `Retry-After`. Default is 30 s.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The spacing a first refusal imposes (20 requests a second), doubled by
/// each later refusal that comes after the pause of the one before.
pub const FIRST_LEARNT_SPACING: Duration = Duration::from_millis(50);

/// The widest learnt spacing: one request every 2 s.
pub const MAX_LEARNT_SPACING: Duration = Duration::from_secs(2);

/// Each answered request narrows the learnt spacing by this factor, so the
/// rate creeps back up while the endpoint accepts it (about 30 answers
/// halve the spacing).
const LEARNT_DECAY: f64 = 0.977;

/// The budget and pause shared by every client of one upstream.
#[derive(Debug, Default)]
pub struct Pacing {
    /// Seconds between two requests (0: no budget).
    interval: Duration,
    /// The budget as given, for display.
    per_second: f64,
    schedule: Mutex<Schedule>,
    refusals: AtomicU64,
    waited_micros: AtomicU64,
    requests: AtomicU64,
}

#[derive(Debug, Default)]
struct Schedule {
    /// When the next request may leave (the budget).
    next_slot: Option<Instant>,
    /// No request leaves before this (a refusal's pause).
    paused_until: Option<Instant>,
    /// The pause the next refusal without `Retry-After` imposes.
    backoff: Duration,
    /// Spacing learnt from refusals (zero until the first).
    learnt: Duration,
}

enum Wait {
    Pause(Instant),
    Slot(Instant),
}

/// A request could not start before its deadline ([`Pacing::admit_by`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooLate;

/// What [`Pacing`] has counted, for `/metrics` and `/health`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PacingStats {
    /// Requests sent to the upstream.
    pub requests: u64,
    /// 429 and 503 answers received.
    pub refusals: u64,
    /// Seconds requests spent waiting for the budget or a pause, summed.
    pub waited_seconds: f64,
    /// Seconds until the current pause ends, if one is in force.
    pub paused_for_seconds: Option<f64>,
    /// The budget in requests per second (0: none).
    pub budget_per_second: f64,
    /// The spacing learnt from refusals, in seconds (0: none).
    pub learnt_spacing_seconds: f64,
}

impl Pacing {
    /// At most `per_second` requests a second (0 or less: no budget, as for a
    /// private node).
    pub fn new(per_second: f64) -> Pacing {
        Pacing {
            interval: if per_second > 0.0 {
                Duration::from_secs_f64(1.0 / per_second)
            } else {
                Duration::ZERO
            },
            per_second: per_second.max(0.0),
            ..Pacing::default()
        }
    }

    /// Waits until a request may be sent, and books it.
    pub async fn admit(&self) {
        let far = Instant::now() + Duration::from_secs(365 * 24 * 3600);
        let _ = self.admit_by(far).await;
    }

    /// [`Pacing::admit`] for a request that must start by `deadline` (its
    /// timeout): `Err` at once, nothing booked, when a pause or the next
    /// slot lies past it. A `Retry-After` of minutes then costs a caller
    /// its miss now, not a held connection.
    pub async fn admit_by(&self, deadline: Instant) -> Result<(), TooLate> {
        let started = Instant::now();
        loop {
            let wait = {
                let mut schedule = self.schedule.lock().expect("pacing lock");
                let now = Instant::now();
                match schedule.paused_until {
                    Some(until) if until > deadline => return Err(TooLate),
                    Some(until) if until > now => Wait::Pause(until),
                    _ => {
                        let slot = schedule.next_slot.map_or(now, |slot| slot.max(now));
                        if slot > deadline {
                            return Err(TooLate);
                        }
                        let spacing = self.interval.max(schedule.learnt);
                        if !spacing.is_zero() {
                            schedule.next_slot = Some(slot + spacing);
                        }
                        Wait::Slot(slot)
                    }
                }
            };
            match wait {
                // A pause may be lengthened while we sleep: look again.
                Wait::Pause(until) => tokio::time::sleep_until(until).await,
                // Booked: go at the slot.
                Wait::Slot(slot) => {
                    if slot > Instant::now() {
                        tokio::time::sleep_until(slot).await;
                    }
                    break;
                }
            }
        }
        let waited = started.elapsed();
        if !waited.is_zero() {
            self.waited_micros
                .fetch_add(waited.as_micros() as u64, Ordering::Relaxed);
        }
        self.requests.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The endpoint refused a request (429, 503): no request leaves for
    /// `retry_after` when it said so, else for a backoff that doubles while
    /// refusals go on, with jitter so mirrors restarted together do not ask
    /// again in step.
    pub fn refused(&self, retry_after: Option<Duration>) {
        self.refusals.fetch_add(1, Ordering::Relaxed);
        let mut schedule = self.schedule.lock().expect("pacing lock");
        let now = Instant::now();
        // Requests already in flight when the first was refused are refused
        // together: one lesson per pause.
        if schedule.paused_until.is_none_or(|until| until <= now) {
            schedule.learnt = (schedule.learnt * 2)
                .max(FIRST_LEARNT_SPACING)
                .min(MAX_LEARNT_SPACING);
            // The slot schedule restarts after the pause.
            schedule.next_slot = None;
        }
        let pause = match retry_after {
            Some(asked) => asked.min(MAX_RETRY_AFTER) + jitter(Duration::from_millis(100)),
            None => {
                let base = schedule.backoff.max(FIRST_BACKOFF);
                schedule.backoff = (base * 2).min(MAX_BACKOFF);
                base / 2 + jitter(base / 2)
            }
        };
        let until = now + pause;
        if schedule.paused_until.is_none_or(|current| current < until) {
            schedule.paused_until = Some(until);
        }
    }

    /// Books a probe: one request that goes at once even while a refusal's
    /// pause holds every other (`RpcClient::probe`). It takes no
    /// slot of the budget: a prober sends one a few seconds at most, well
    /// under any budget, and the pause it looks past is the endpoint's own.
    pub fn admit_probe(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether a refusal's pause holds every request now.
    pub fn is_paused(&self) -> bool {
        self.paused_for().is_some()
    }

    /// How long the refusal's pause in force still holds, if one does.
    pub fn paused_for(&self) -> Option<Duration> {
        let schedule = self.schedule.lock().expect("pacing lock");
        let now = Instant::now();
        schedule
            .paused_until
            .filter(|until| *until > now)
            .map(|until| until - now)
    }

    /// A probe was answered as asked while a refusal's pause held: the
    /// endpoint serves again, so the pause ends for every request now, not
    /// when its `Retry-After` (a daily quota's day, clamped to
    /// `MAX_RETRY_AFTER`) runs out. A refusal after this is a new lesson
    /// (the learnt spacing doubles), so an endpoint that answers the cheap
    /// probe but still refuses heavier calls teaches a slower rate.
    pub fn resume(&self) {
        let mut schedule = self.schedule.lock().expect("pacing lock");
        schedule.paused_until = None;
    }

    /// An exchange succeeded: the next refusal starts from the first
    /// backoff, and the learnt spacing narrows a little.
    pub fn answered(&self) {
        let mut schedule = self.schedule.lock().expect("pacing lock");
        schedule.backoff = Duration::ZERO;
        if !schedule.learnt.is_zero() {
            schedule.learnt = schedule.learnt.mul_f64(LEARNT_DECAY);
            if schedule.learnt < Duration::from_millis(1) {
                schedule.learnt = Duration::ZERO;
            }
        }
    }

    /// What has been counted so far.
    pub fn stats(&self) -> PacingStats {
        let learnt = self.schedule.lock().expect("pacing lock").learnt;
        PacingStats {
            learnt_spacing_seconds: learnt.as_secs_f64(),
            requests: self.requests.load(Ordering::Relaxed),
            refusals: self.refusals.load(Ordering::Relaxed),
            waited_seconds: self.waited_micros.load(Ordering::Relaxed) as f64 / 1e6,
            paused_for_seconds: self.paused_for().map(|left| left.as_secs_f64()),
            budget_per_second: self.per_second,
        }
    }
}

/// A random duration in `[0, max)`: the process's hasher keys are random,
/// which is all the randomness jitter needs.
pub fn jitter(max: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    if max.is_zero() {
        return Duration::ZERO;
    }
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(Instant::now().elapsed().as_nanos());
    let nanos = hasher.finish() % max.as_nanos().min(u64::MAX as u128) as u64;
    Duration::from_nanos(nanos)
}

/// The `Retry-After` of an answer's headers, if it has a readable one.
pub fn retry_after_of(headers: &hyper::HeaderMap) -> Option<std::time::Duration> {
    headers
        .get(hyper::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_retry_after)
}

/// A `Retry-After` value: seconds, or an HTTP date (RFC 9110), clamped to
/// `MAX_RETRY_AFTER` here, where it is read: every pause taken from it
/// (pacing, the follower, the head watcher, start-up), and the error that
/// carries it, sees the clamped value, so a daily quota's `86400` or a
/// `u64::MAX` never parks ingest for longer.
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    let asked = match value.parse::<u64>() {
        Ok(seconds) => Duration::from_secs(seconds),
        Err(_) => httpdate::parse_http_date(value)
            .ok()?
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    };
    Some(asked.min(MAX_RETRY_AFTER))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 32 (2): a request that cannot start within its timeout does
    /// not wait for the pause; one that can, does.
    #[tokio::test]
    async fn a_pause_past_the_deadline_is_too_late_at_once() {
        let pacing = Pacing::new(0.0);
        pacing.refused(Some(Duration::from_secs(300)));
        let started = Instant::now();
        let deadline = started + Duration::from_secs(10);
        assert_eq!(pacing.admit_by(deadline).await, Err(TooLate));
        assert!(started.elapsed() < Duration::from_secs(1));
        let pacing = Pacing::new(0.0);
        pacing.refused(Some(Duration::from_millis(50)));
        assert_eq!(
            pacing
                .admit_by(Instant::now() + Duration::from_secs(10))
                .await,
            Ok(())
        );
    }

    /// Issue 32 (1): a day, or forever, is the cap, wherever it is read.
    #[test]
    fn a_retry_after_past_the_cap_is_the_cap() {
        assert_eq!(parse_retry_after("86400"), Some(MAX_RETRY_AFTER));
        assert_eq!(
            parse_retry_after("18446744073709551615"),
            Some(MAX_RETRY_AFTER)
        );
        assert_eq!(
            parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT"),
            Some(MAX_RETRY_AFTER)
        );
        assert_eq!(parse_retry_after("7"), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after("soon"), None);
    }

    /// Issue 42 (5): a day's `Retry-After` holds every request for the
    /// clamp, but a probe is booked at once, and once one is answered the
    /// pause is over for everyone; a refusal after it is a new lesson.
    #[tokio::test(start_paused = true)]
    async fn a_probe_looks_past_a_pause_and_an_answer_to_it_ends_the_pause() {
        let pacing = Pacing::new(0.0);
        pacing.refused(parse_retry_after("86400"));
        assert!(pacing.is_paused());
        assert!(pacing.paused_for().unwrap() > Duration::from_secs(299));
        let deadline = Instant::now() + Duration::from_secs(30);
        assert_eq!(pacing.admit_by(deadline).await, Err(TooLate));
        pacing.admit_probe();
        assert_eq!(pacing.stats().requests, 1);
        assert!(pacing.is_paused(), "sending a probe ends nothing");
        pacing.resume();
        assert!(!pacing.is_paused());
        assert_eq!(pacing.stats().paused_for_seconds, None);
        let start = Instant::now();
        assert_eq!(pacing.admit_by(deadline).await, Ok(()));
        assert_eq!(start.elapsed(), Duration::ZERO);
        pacing.refused(None);
        assert_eq!(pacing.stats().learnt_spacing_seconds, 0.1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_budget_spaces_requests_evenly() {
        let pacing = Pacing::new(10.0);
        let start = Instant::now();
        for _ in 0..21 {
            pacing.admit().await;
        }
        // The first leaves at once, the next twenty 100 ms apart.
        assert_eq!(start.elapsed(), Duration::from_secs(2));
        assert_eq!(pacing.stats().requests, 21);
    }

    #[tokio::test(start_paused = true)]
    async fn no_budget_never_waits() {
        let pacing = Pacing::new(0.0);
        let start = Instant::now();
        for _ in 0..1000 {
            pacing.admit().await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_pauses_every_request_and_is_counted() {
        let pacing = Pacing::new(0.0);
        pacing.refused(Some(Duration::from_secs(2)));
        assert!(pacing.stats().paused_for_seconds.is_some());
        let start = Instant::now();
        pacing.admit().await;
        let waited = start.elapsed();
        // The pause is 2 s plus up to 100 ms of jitter, and tokio's timer
        // rounds a deadline up to its next millisecond.
        assert!(waited >= Duration::from_secs(2) && waited <= Duration::from_millis(2101));
        let stats = pacing.stats();
        assert_eq!(stats.refusals, 1);
        assert!(stats.waited_seconds >= 2.0);
    }

    #[tokio::test(start_paused = true)]
    async fn refusals_without_retry_after_back_off_with_jitter_and_reset() {
        let pacing = Pacing::new(0.0);
        let mut pauses = Vec::new();
        for _ in 0..4 {
            pacing.refused(None);
            let start = Instant::now();
            pacing.admit().await;
            pauses.push(start.elapsed());
        }
        // Each pause lies in [base/2, base) with base 250 ms, doubling.
        for (pause, base) in pauses.iter().zip([250u64, 500, 1000, 2000]) {
            let base = Duration::from_millis(base);
            assert!(
                *pause >= base / 2 && *pause <= base,
                "{pause:?} vs {base:?}"
            );
        }
        pacing.answered();
        pacing.refused(None);
        let start = Instant::now();
        pacing.admit().await;
        assert!(start.elapsed() <= Duration::from_millis(250));
    }

    #[tokio::test(start_paused = true)]
    async fn refusals_teach_a_spacing_that_answers_relax() {
        let pacing = Pacing::new(0.0);
        // Three requests refused together: one lesson.
        for _ in 0..3 {
            pacing.refused(Some(Duration::ZERO));
        }
        assert_eq!(pacing.stats().learnt_spacing_seconds, 0.05);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let start = Instant::now();
        for _ in 0..11 {
            pacing.admit().await;
        }
        assert_eq!(start.elapsed(), Duration::from_millis(500));
        // A refusal after the pause: the spacing doubles.
        pacing.refused(Some(Duration::ZERO));
        assert_eq!(pacing.stats().learnt_spacing_seconds, 0.1);
        for _ in 0..200 {
            pacing.answered();
        }
        assert_eq!(pacing.stats().learnt_spacing_seconds, 0.0);
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        assert_eq!(parse_retry_after(" 7 "), Some(Duration::from_secs(7)));
        let later = SystemTime::now() + Duration::from_secs(30);
        let parsed = parse_retry_after(&httpdate::fmt_http_date(later)).unwrap();
        assert!(parsed > Duration::from_secs(28) && parsed <= Duration::from_secs(30));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon"), None);
    }

    #[test]
    fn jitter_stays_below_its_bound_and_varies() {
        let max = Duration::from_millis(100);
        let draws: Vec<_> = (0..64).map(|_| jitter(max)).collect();
        assert!(draws.iter().all(|d| *d < max));
        assert!(draws.iter().any(|d| *d != draws[0]));
    }
}
