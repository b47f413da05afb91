//! Tracers run alongside the one a block's trace asks for ([`Along`]):
//! indexers trace every block with `callTracer` and with
//! `prestateTracer`, each a request of its own, and a block replayed for
//! one of them is replayed once for both. The replay runs the asked
//! tracer and its companions as one of geth's muxes (revm-inspectors
//! records the frames once for all), and each tracer's part is written
//! apart, as geth writes it alone.
//!
//! A companion never costs the asked trace its answer: it is dropped,
//! not the replay, when it would take the answers past the request's cap,
//! reads state not held, meets what neve does not word as geth does, or
//! is still running past half the time the asked trace had left when the
//! run began (the rest of the block then runs the asked tracer alone:
//! its rounds of fetches before do not count against a run that is
//! quick); a companion with a shorter
//! `timeout` than the asked trace's does not run.

use std::time::Instant;

use alloy_primitives::B256;
use alloy_rpc_types_trace::geth::mux::MuxConfig;
use alloy_rpc_types_trace::geth::{
    GethDebugBuiltInTracerType, GethDebugTracerConfig, GethDebugTracerType, GethDebugTracingOptions,
};

use super::limits::MAX_TRACE_TIME;
use super::options::{TraceOptions, Tracer};

/// A companion's traces: each transaction's hash and trace, as a
/// replay's (`replay::Traces`; this file is below the replay).
type Traces = Vec<(B256, Vec<u8>)>;

/// Most tracers run alongside an asked one: one of each kind neve runs
/// alongside (`callTracer`, `prestateTracer`) but the asked one's.
pub(crate) const MAX_ALONG: usize = 1;

/// The tracers of one replay beyond the asked one, and their traces.
pub(crate) struct Along {
    /// What the replay runs: the asked tracer and its companions, muxed.
    pub(crate) mux: TraceOptions,
    /// The asked tracer's kind (its part of the mux is the answer).
    pub(crate) asked: GethDebugTracerType,
    /// Each companion: its index among those offered, its kind, and its
    /// traces so far (`None` once dropped).
    companions: Vec<(usize, GethDebugTracerType, Option<Traces>)>,
    /// Bytes of the companions' traces held.
    bytes: usize,
    /// Past this, companions are dropped: half the time the asked trace
    /// had left when the run began.
    cutoff: Instant,
}

/// The kind and configuration of a tracer that runs alongside others.
fn muxable(options: &TraceOptions) -> Option<(GethDebugTracerType, GethDebugTracerConfig)> {
    use GethDebugBuiltInTracerType::{CallTracer, PreStateTracer};
    let Tracer::Native(native) = &options.tracer else {
        return None;
    };
    match &native.tracer {
        Some(kind @ GethDebugTracerType::BuiltInTracer(CallTracer | PreStateTracer)) => {
            Some((kind.clone(), native.tracer_config.clone()))
        }
        _ => None,
    }
}

/// Whether a trace of `options` runs alongside others in one replay
/// (`callTracer` and `prestateTracer`, not in a mux of their own).
pub fn joins_others(options: &TraceOptions) -> bool {
    muxable(options).is_some()
}

impl Along {
    /// The replay of `asked` with those of `offered` that can run beside
    /// it (at most [`MAX_ALONG`], each of a kind of its own), from
    /// `since`; `None` when none can.
    pub(crate) fn new(
        asked: &TraceOptions,
        offered: &[TraceOptions],
        since: Instant,
    ) -> Option<Along> {
        let time = |options: &TraceOptions| options.timeout.min(MAX_TRACE_TIME);
        let (asked_kind, asked_config) = muxable(asked)?;
        let mut mux = alloy_primitives::map::HashMap::default();
        mux.insert(asked_kind.clone(), Some(asked_config));
        let mut companions = Vec::new();
        for (index, options) in offered.iter().enumerate() {
            if companions.len() == MAX_ALONG || time(options) < time(asked) {
                continue;
            }
            let Some((kind, config)) = muxable(options) else {
                continue;
            };
            if mux.contains_key(&kind) {
                continue;
            }
            mux.insert(kind.clone(), Some(config));
            companions.push((index, kind, Some(Vec::new())));
        }
        if companions.is_empty() {
            return None;
        }
        let config = serde_json::to_value(MuxConfig(mux)).ok()?;
        Some(Along {
            mux: TraceOptions {
                tracer: Tracer::Native(GethDebugTracingOptions {
                    tracer: Some(GethDebugTracerType::BuiltInTracer(
                        GethDebugBuiltInTracerType::MuxTracer,
                    )),
                    tracer_config: GethDebugTracerConfig(config),
                    ..Default::default()
                }),
                timeout: asked.timeout,
            },
            asked: asked_kind,
            companions,
            bytes: 0,
            cutoff: {
                let now = Instant::now();
                now + (since + time(asked)).saturating_duration_since(now) / 2
            },
        })
    }

    /// What the next transaction runs: the mux while a companion still
    /// runs (and it is not past the cut-off), else `None` (the asked
    /// tracer alone).
    pub(crate) fn runs_now(&mut self) -> Option<&TraceOptions> {
        if Instant::now() >= self.cutoff {
            self.drop_all();
        }
        self.companions
            .iter()
            .any(|(_, _, traces)| traces.is_some())
            .then_some(&self.mux)
    }

    /// Whether a companion of `kind` still runs.
    pub(crate) fn runs(&self, kind: &GethDebugTracerType) -> bool {
        self.companions
            .iter()
            .any(|(_, k, traces)| k == kind && traces.is_some())
    }

    /// Adds a companion's trace of the transaction `hash`.
    pub(crate) fn add(&mut self, kind: &GethDebugTracerType, hash: B256, trace: Vec<u8>) {
        if let Some((_, _, Some(traces))) = self.companions.iter_mut().find(|(_, k, _)| k == kind) {
            self.bytes += trace.len();
            traces.push((hash, trace));
        }
    }

    /// Of `left` bytes, what the companions' next trace may take.
    pub(crate) fn room(&self, left: usize) -> usize {
        left.saturating_sub(self.bytes)
    }

    /// Drops every companion once the asked trace's `answer_bytes` and
    /// theirs pass `cap`.
    pub(crate) fn keep_within(&mut self, answer_bytes: usize, cap: usize) {
        if answer_bytes.saturating_add(self.bytes) > cap {
            self.drop_all();
        }
    }

    /// Drops the companion of `kind` (what it recorded is not geth's).
    pub(crate) fn drop_kind(&mut self, kind: &GethDebugTracerType) {
        for (_, k, traces) in &mut self.companions {
            if k == kind
                && let Some(dropped) = traces.take()
            {
                self.bytes -= dropped.iter().map(|(_, t)| t.len()).sum::<usize>();
            }
        }
    }

    /// Drops every companion (one's trace would not fit).
    pub(crate) fn drop_all(&mut self) {
        for (_, _, traces) in &mut self.companions {
            *traces = None;
        }
        self.bytes = 0;
    }

    /// Each offered tracer's traces (by the offered order): `None` for one
    /// that did not run or was dropped.
    pub(crate) fn into_traces(self, offered: usize) -> Vec<Option<Traces>> {
        let mut out: Vec<Option<Traces>> = (0..offered).map(|_| None).collect();
        for (index, _, traces) in self.companions {
            out[index] = traces;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::TraceConfig;

    fn options(json: &str) -> TraceOptions {
        serde_json::from_str::<TraceConfig>(json)
            .unwrap()
            .options()
            .unwrap()
    }

    #[test]
    fn a_call_tracer_runs_with_a_prestate_tracer_and_no_second_of_a_kind() {
        let asked = options(r#"{"tracer":"callTracer","tracerConfig":{"withLog":true}}"#);
        let offered = [
            options(r#"{"tracer":"callTracer"}"#),
            options(r#"{"tracer":"prestateTracer","tracerConfig":{"diffMode":true}}"#),
            options(r#"{"tracer":"prestateTracer"}"#),
            options(r#"{}"#),
        ];
        let along =
            Along::new(&asked, &offered, Instant::now()).expect("a prestate tracer alongside");
        let prestate =
            GethDebugTracerType::BuiltInTracer(GethDebugBuiltInTracerType::PreStateTracer);
        assert!(along.runs(&prestate));
        let Tracer::Native(mux) = &along.mux.tracer else {
            panic!("a mux");
        };
        let config = mux.tracer_config.clone().into_mux_config().unwrap();
        assert_eq!(config.0.len(), 2);
        let traces = along.into_traces(offered.len());
        assert!(traces[0].is_none() && traces[2].is_none() && traces[3].is_none());
        assert_eq!(traces[1], Some(Vec::new()));
    }

    #[test]
    fn nothing_runs_alongside_a_struct_log_a_flat_trace_or_a_shorter_timeout() {
        let prestate = [options(r#"{"tracer":"prestateTracer"}"#)];
        assert!(Along::new(&options("{}"), &prestate, Instant::now()).is_none());
        assert!(
            Along::new(
                &options(r#"{"tracer":"flatCallTracer"}"#),
                &prestate,
                Instant::now()
            )
            .is_none()
        );
        let call = options(r#"{"tracer":"callTracer"}"#);
        let hasty = [options(r#"{"tracer":"prestateTracer","timeout":"1s"}"#)];
        assert!(Along::new(&call, &hasty, Instant::now()).is_none());
        // Compared as capped: a 10 s trace takes a companion of 5 s.
        let patient = options(r#"{"tracer":"callTracer","timeout":"10s"}"#);
        assert!(Along::new(&patient, &prestate, Instant::now()).is_some());
        assert!(
            Along::new(
                &call,
                &[options(r#"{"tracer":"4byteTracer"}"#)],
                Instant::now()
            )
            .is_none()
        );
    }

    #[test]
    fn companions_give_way_to_the_asked_traces_room() {
        let call = options(r#"{"tracer":"callTracer"}"#);
        let mut along = Along::new(
            &call,
            &[options(r#"{"tracer":"prestateTracer"}"#)],
            Instant::now(),
        )
        .unwrap();
        let prestate =
            GethDebugTracerType::BuiltInTracer(GethDebugBuiltInTracerType::PreStateTracer);
        along.add(&prestate, B256::ZERO, vec![b'x'; 60]);
        assert_eq!(along.room(100), 40);
        along.keep_within(30, 100);
        assert!(along.runs(&prestate));
        along.keep_within(50, 100);
        assert!(!along.runs(&prestate), "the asked trace's bytes come first");
        assert!(along.runs_now().is_none(), "the asked tracer alone");
        assert_eq!(along.into_traces(1), vec![None]);
    }

    #[test]
    fn past_the_cutoff_the_asked_tracer_runs_alone() {
        let call = options(r#"{"tracer":"callTracer"}"#);
        let offered = [options(r#"{"tracer":"prestateTracer"}"#)];
        let mut along = Along::new(&call, &offered, Instant::now()).unwrap();
        assert!(along.runs_now().is_some());
        let long_ago = Instant::now() - MAX_TRACE_TIME;
        let mut late = Along::new(&call, &offered, long_ago).unwrap();
        assert!(late.runs_now().is_none());
        assert_eq!(late.into_traces(1), vec![None]);
    }
}
