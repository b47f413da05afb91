//! Identical traces in flight share one replay: ten indexers asking for a
//! new block's trace at once are one run on the call threads, the first
//! asker's; the others wait for it ([`FLIGHT_WAIT`] at most) and take its
//! answer from the traces' memo. Keyed by the memo's key, so only what the
//! memo would answer alike is shared. At most one entry per trace queued
//! on the call threads ([`super::execute::MAX_QUEUED_CALLS`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

/// How long a trace waits for an identical one in flight before it runs
/// itself: a replay's fetches and runs together (`--state-fetch-timeout`,
/// 1 s by default, and the trace time bound, 5 s). Default is 6 s.
pub(crate) const FLIGHT_WAIT: Duration = Duration::from_secs(6);

/// The traces in flight, by their memo key.
#[derive(Default)]
pub(super) struct Flights(Mutex<HashMap<Vec<u8>, watch::Receiver<bool>>>);

/// Whether a trace leads (runs) or follows (waits for the leader).
pub(super) enum Flight {
    /// It runs; the others are let go when this is dropped.
    Lead(Leader),
    /// An identical trace runs: wait for it.
    Follow(watch::Receiver<bool>),
}

/// A trace in flight, ended when dropped.
pub(super) struct Leader {
    flights: Arc<Flights>,
    key: Vec<u8>,
    done: watch::Sender<bool>,
}

impl Flights {
    /// Joins the flight of `key`, or starts it.
    pub(super) fn join(self: &Arc<Self>, key: Vec<u8>) -> Flight {
        let mut flights = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(done) = flights.get(&key) {
            return Flight::Follow(done.clone());
        }
        let (done, waiting) = watch::channel(false);
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
        self.0.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        self.flights
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.key);
        let _ = self.done.send(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn followers_wait_for_the_leader_and_the_flight_ends_with_it() {
        let flights = Arc::new(Flights::default());
        let Flight::Lead(leader) = flights.join(b"trace".to_vec()) else {
            panic!("the first leads");
        };
        let Flight::Follow(mut done) = flights.join(b"trace".to_vec()) else {
            panic!("the second follows");
        };
        assert!(matches!(flights.join(b"another".to_vec()), Flight::Lead(_)));
        assert_eq!(flights.len(), 1, "a leader dropped ends its flight");
        drop(leader);
        done.wait_for(|d| *d).await.unwrap();
        assert_eq!(flights.len(), 0);
        assert!(matches!(flights.join(b"trace".to_vec()), Flight::Lead(_)));
    }
}
