//! Identical traces in flight share one replay: ten indexers asking for a
//! new block's trace at once are one run on the call threads, the first
//! asker's; the others wait for it ([`FLIGHT_WAIT`] at most) and take its
//! answer. Keyed by the traces' memo key (the replayed block's hash and
//! the request), so only what the memo would answer alike is shared. At
//! most [`MAX_FLIGHTS`] at once; past it a trace runs alone.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::rpc::Reply;

/// How long a request's traces wait for identical ones in flight, all
/// together, before they run themselves ([`FlightWaits`]): a replay's
/// fetches and runs (its fetches, within `WITNESS_WAIT` (5 s) of its
/// request's first and the state fetch timeout past it, and the trace
/// time bound, 5 s, counted from its first run). Default is 12 s.
pub(crate) const FLIGHT_WAIT: Duration = Duration::from_secs(12);

/// Most traces in flight shared at once (their keys are the requests'
/// parameters, up to a request's size each). Default is 1,024.
pub(crate) const MAX_FLIGHTS: usize = 1024;

/// What a flight came to: `None` while it runs; then its answer, or
/// `Some(None)` when its leader went without one.
pub(super) type Outcome = Option<Option<Reply>>;

/// What one request may still wait for flights: [`FLIGHT_WAIT`] of
/// waiting in all, however many of its traces follow one. A batch whose
/// traces each follow a flight that ends late (each leader begun just as
/// the batch reaches it, on a node that stalls) waits no longer than one
/// trace would. Only the waits are charged, not the request's own runs
/// between them: a batch one step behind another asking the same traces
/// takes each answer for the time one run takes, not for a share of its
/// whole time.
pub(super) struct FlightWaits {
    left: Duration,
}

impl FlightWaits {
    pub(super) fn new() -> FlightWaits {
        FlightWaits::within(FLIGHT_WAIT)
    }

    fn within(budget: Duration) -> FlightWaits {
        FlightWaits { left: budget }
    }

    /// The flight's outcome once it has one, or what it is when the
    /// request's wait is spent; the time waited is charged.
    pub(super) async fn outcome(&mut self, done: &mut watch::Receiver<Outcome>) -> Outcome {
        let waited = tokio::time::Instant::now();
        let _ = tokio::time::timeout(self.left, done.wait_for(Option::is_some)).await;
        self.left = self.left.saturating_sub(waited.elapsed());
        done.borrow().clone()
    }
}

/// The traces in flight, by their memo key, and what came of those that
/// waited.
#[derive(Default)]
pub(super) struct Flights {
    flying: Mutex<HashMap<Vec<u8>, watch::Receiver<Outcome>>>,
    /// Traces answered with an identical one's answer, without a run.
    pub(super) shared: AtomicU64,
    /// Traces that waited for an identical one and got no answer from it
    /// (their request's [`FLIGHT_WAIT`] was spent, or the leader's request
    /// went): the memo's, or a run of their own.
    pub(super) waited_out: AtomicU64,
}

/// Whether a trace leads (runs), follows (waits for the leader), or runs
/// alone.
pub(super) enum Flight {
    /// It runs; the others get its answer ([`Leader::finish`]).
    Lead(Leader),
    /// An identical trace runs: wait for its outcome.
    Follow(watch::Receiver<Outcome>),
    /// Not shared: its request may not wait, or too many are in flight.
    Alone,
}

/// A trace in flight, ended when finished or dropped.
pub(super) struct Leader {
    flights: Arc<Flights>,
    key: Vec<u8>,
    done: watch::Sender<Outcome>,
}

impl Flights {
    /// Joins the flight of `key` (when `may_wait`), or starts it.
    pub(super) fn join(self: &Arc<Self>, key: Vec<u8>, may_wait: bool) -> Flight {
        let mut flights = self.flying.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(done) = flights.get(&key) {
            return match may_wait {
                true => Flight::Follow(done.clone()),
                false => Flight::Alone,
            };
        }
        if flights.len() >= MAX_FLIGHTS {
            return Flight::Alone;
        }
        let (done, waiting) = watch::channel(None);
        flights.insert(key.clone(), waiting);
        Flight::Lead(Leader {
            flights: self.clone(),
            key,
            done,
        })
    }

    /// Traces in flight.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.flying.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl Leader {
    /// Ends the flight with its answer, for the ones waiting.
    pub(super) fn finish(self, reply: &Reply) {
        let _ = self.done.send(Some(Some(reply.clone())));
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        self.flights
            .flying
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.key);
        self.done.send_if_modified(|outcome| {
            let unset = outcome.is_none();
            if unset {
                *outcome = Some(None);
            }
            unset
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn followers_take_the_leaders_answer_and_the_flight_ends_with_it() {
        let flights = Arc::new(Flights::default());
        let Flight::Lead(leader) = flights.join(b"trace".to_vec(), true) else {
            panic!("the first leads");
        };
        let Flight::Follow(mut done) = flights.join(b"trace".to_vec(), true) else {
            panic!("the second follows");
        };
        assert!(matches!(
            flights.join(b"trace".to_vec(), false),
            Flight::Alone
        ));
        assert!(matches!(
            flights.join(b"another".to_vec(), true),
            Flight::Lead(_)
        ));
        assert_eq!(flights.len(), 1, "a leader dropped ends its flight");
        leader.finish(&Reply::json("[]"));
        done.wait_for(Option::is_some).await.unwrap();
        assert!(matches!(&*done.borrow(), Some(Some(Reply::Result(_)))));
        assert_eq!(flights.len(), 0);
        // A leader gone without an answer lets its followers go empty.
        let Flight::Lead(leader) = flights.join(b"trace".to_vec(), true) else {
            panic!("a new flight");
        };
        let Flight::Follow(mut done) = flights.join(b"trace".to_vec(), true) else {
            panic!("follows");
        };
        drop(leader);
        done.wait_for(Option::is_some).await.unwrap();
        assert!(matches!(&*done.borrow(), Some(None)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_waits_for_flights_its_bound_in_all_not_a_trace_each() {
        let flights = Arc::new(Flights::default());
        let budget = Duration::from_secs(12);
        let mut waits = FlightWaits::within(budget);
        // A wait that gets its answer after 1 s is charged 1 s; the
        // request's own work after it (20 s here) nothing.
        let Flight::Lead(leader) = flights.join(b"answered".to_vec(), true) else {
            panic!("leads");
        };
        let Flight::Follow(mut done) = flights.join(b"answered".to_vec(), true) else {
            panic!("follows");
        };
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            leader.finish(&Reply::json("[]"));
        });
        assert!(matches!(
            waits.outcome(&mut done).await,
            Some(Some(Reply::Result(_)))
        ));
        tokio::time::sleep(Duration::from_secs(20)).await;
        // Three flights whose leaders never finish while followed: the
        // 11 s left, once.
        let leaders: Vec<_> = (0..3u8).map(|i| flights.join(vec![i], true)).collect();
        let followed = tokio::time::Instant::now();
        for i in 0..3u8 {
            let Flight::Follow(mut done) = flights.join(vec![i], true) else {
                panic!("follows");
            };
            assert!(waits.outcome(&mut done).await.is_none(), "flight {i}");
        }
        let spent = tokio::time::Instant::now();
        assert_eq!(spent - followed, budget - Duration::from_secs(1));
        // Spent, it still takes an answer already made.
        let Flight::Lead(leader) = flights.join(b"made".to_vec(), true) else {
            panic!("leads");
        };
        let Flight::Follow(mut done) = flights.join(b"made".to_vec(), true) else {
            panic!("follows");
        };
        leader.finish(&Reply::json("[]"));
        assert!(matches!(
            waits.outcome(&mut done).await,
            Some(Some(Reply::Result(_)))
        ));
        assert_eq!(spent.elapsed(), Duration::ZERO);
        drop(leaders);
    }

    #[test]
    fn past_the_bound_traces_run_alone() {
        let flights = Arc::new(Flights::default());
        let leaders: Vec<_> = (0..MAX_FLIGHTS)
            .map(|i| flights.join(i.to_be_bytes().to_vec(), true))
            .collect();
        assert!(leaders.iter().all(|f| matches!(f, Flight::Lead(_))));
        assert!(matches!(
            flights.join(b"one more".to_vec(), true),
            Flight::Alone
        ));
    }
}
