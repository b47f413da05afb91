//! What to run: [`BenchConfig`], its defaults, and the checks made before
//! any request.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::BenchError;
use crate::target::Target;

/// The highest open-loop rate accepted (a schedule slot every 100 ns).
pub const MAX_RATE: f64 = 10_000_000.0;

/// The default connection sweep.
pub const DEFAULT_CONNS: [usize; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];

/// What to run.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// JSON-RPC targets; the first is the reference the workloads (and the
    /// ceiling's files) are built from.
    pub targets: Vec<Target>,
    /// Static-file ceilings serving `ceiling_dir`.
    pub ceilings: Vec<Target>,
    /// Where the ceilings' files are written (the directory they serve).
    pub ceiling_dir: Option<PathBuf>,
    /// Workload names (see [`crate::workload::build`]).
    pub workloads: Vec<String>,
    /// The closed-loop sweep; empty for none.
    pub conns: Vec<usize>,
    /// Open-loop rates (req/s); empty for none.
    pub rates: Vec<f64>,
    /// Connections an open loop spreads its schedule over.
    pub open_conns: usize,
    /// Unmeasured time before each cell.
    pub warmup: Duration,
    /// Measured time per cell.
    pub duration: Duration,
    /// Distinct requests per workload.
    pub pool: usize,
    /// Seed for sampling and request order.
    pub seed: u64,
    /// `(target, baseline)` pairs for the verdict; empty: the first target
    /// against each other one.
    pub compare: Vec<(String, String)>,
    /// Where results go (tables, JSON, plots).
    pub out: Option<PathBuf>,
    /// Also write a wrk Lua script sending the first workload's pool.
    pub wrk_script: Option<PathBuf>,
    /// The neve running the benchmark, recorded in the results (the
    /// binary's version line: this crate does not know it).
    pub neve_version: Option<String>,
    /// The command line it runs with, URLs redacted
    /// ([`crate::report::command_line`]), recorded in the results.
    pub command_line: Option<String>,
}

impl BenchConfig {
    /// Defaults for everything but the targets.
    pub fn new(targets: Vec<Target>) -> BenchConfig {
        BenchConfig {
            targets,
            ceilings: Vec::new(),
            ceiling_dir: None,
            workloads: vec!["randblock".into()],
            conns: DEFAULT_CONNS.to_vec(),
            rates: Vec::new(),
            open_conns: 64,
            warmup: Duration::from_secs(1),
            duration: Duration::from_secs(5),
            pool: 1000,
            seed: 7,
            compare: Vec::new(),
            out: None,
            wrk_script: None,
            neve_version: None,
            command_line: None,
        }
    }

    /// The reference target, once the configuration is known to hang
    /// together (targets, ceilings, rates, names and comparisons).
    pub(crate) fn check(&self) -> Result<&Target, BenchError> {
        let reference = self
            .targets
            .first()
            .ok_or_else(|| BenchError::Usage("at least one JSON-RPC --target is needed".into()))?;
        if !self.ceilings.is_empty() && self.ceiling_dir.is_none() {
            return Err(BenchError::Usage(
                "a --ceiling needs --ceiling-dir, the directory it serves".into(),
            ));
        }
        if self.conns.is_empty() && self.rates.is_empty() {
            return Err(BenchError::Usage(
                "nothing to run: give --conns or --rates".into(),
            ));
        }
        if self
            .rates
            .iter()
            .any(|r| !r.is_finite() || *r <= 0.0 || *r > MAX_RATE)
        {
            return Err(BenchError::Usage(format!(
                "rates must be between 0 and {MAX_RATE} req/s"
            )));
        }
        if !self.rates.is_empty() && self.open_conns == 0 {
            return Err(BenchError::Usage(
                "an open loop needs --open-conns of at least 1".into(),
            ));
        }
        let mut names: Vec<&str> = self
            .targets
            .iter()
            .chain(&self.ceilings)
            .map(|t| t.name.as_str())
            .collect();
        names.sort_unstable();
        if let Some(twice) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(BenchError::Usage(format!(
                "two targets are named {}",
                twice[0]
            )));
        }
        for (target, baseline) in &self.compare {
            for name in [target, baseline] {
                if !names.contains(&name.as_str()) {
                    return Err(BenchError::Usage(format!(
                        "--compare names {name}, which is not a target"
                    )));
                }
            }
        }
        Ok(reference)
    }
}
