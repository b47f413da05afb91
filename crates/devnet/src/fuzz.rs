//! Fuzzing on stable Rust: a small mutation engine that feeds a target
//! inputs derived from real seeds (bit flips, byte edits, deleted, repeated
//! and spliced ranges, dictionary tokens, huge numbers, deep nesting), and
//! fails on the first panic or hang with the input that caused it.
//!
//! Each target is a test next to the code it fuzzes; the suite runs a short
//! campaign (`NEVE_FUZZ_INPUTS`, default 20,000 inputs), and a documented
//! campaign runs the same tests with millions (HARDENING.md).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Inputs a target gets when `NEVE_FUZZ_INPUTS` is not set: a short run
/// that fits in the test suite. Default is 20,000.
pub const DEFAULT_INPUTS: u64 = 20_000;

/// An input that runs this long is a hang: the campaign stops and prints
/// it. Default is 10 s.
pub const HANG: Duration = Duration::from_secs(10);

/// What a campaign did.
#[derive(Debug)]
pub struct Report {
    /// Inputs run.
    pub inputs: u64,
    /// Wall time.
    pub elapsed: Duration,
    /// The slowest input's time.
    pub slowest: Duration,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} inputs in {:.1} s ({:.0}/s), slowest {:.2} ms, no panic, no hang",
            self.inputs,
            self.elapsed.as_secs_f64(),
            self.inputs as f64 / self.elapsed.as_secs_f64().max(1e-9),
            self.slowest.as_secs_f64() * 1e3
        )
    }
}

/// A xorshift generator: deterministic per seed, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// Runs `target` on `NEVE_FUZZ_INPUTS` inputs mutated from `seeds` (the
/// seeds themselves first), inserting `dictionary` tokens among other
/// mutations; inputs stay under `max_len` bytes. Panics, naming the input,
/// on the first panic; aborts the process, naming the input, on a hang.
pub fn run(
    name: &str,
    seeds: &[Vec<u8>],
    dictionary: &[&[u8]],
    max_len: usize,
    target: impl FnMut(&[u8]),
) -> Report {
    run_defaulting_to(DEFAULT_INPUTS, name, seeds, dictionary, max_len, target)
}

/// [`run`] for a target whose inputs are slow (file system work): without
/// `NEVE_FUZZ_INPUTS` it gets `inputs` rather than [`DEFAULT_INPUTS`].
pub fn run_defaulting_to(
    inputs: u64,
    name: &str,
    seeds: &[Vec<u8>],
    dictionary: &[&[u8]],
    max_len: usize,
    mut target: impl FnMut(&[u8]),
) -> Report {
    assert!(!seeds.is_empty(), "{name}: no seeds");
    let inputs = std::env::var("NEVE_FUZZ_INPUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(inputs);
    let seed = std::env::var("NEVE_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed_f00d);
    let mut rng = Rng(seed | 1);
    // The watchdog: the input being run and since when.
    let started_at = Arc::new(AtomicU64::new(u64::MAX));
    let current: Arc<std::sync::Mutex<Vec<u8>>> = Arc::default();
    let clock = Instant::now();
    let watchdog = {
        let (started_at, current, name) = (started_at.clone(), current.clone(), name.to_string());
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(Duration::from_millis(200));
                let since = started_at.load(Ordering::Relaxed);
                if since == u64::MAX - 1 {
                    return;
                }
                let now = clock.elapsed().as_millis() as u64;
                if since != u64::MAX && now.saturating_sub(since) > HANG.as_millis() as u64 {
                    let input = current.lock().map(|c| c.clone()).unwrap_or_default();
                    eprintln!("{name}: hang over {HANG:?} on {}", show(&input));
                    std::process::abort();
                }
            }
        })
    };
    let began = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut input = Vec::new();
    for i in 0..inputs {
        input.clear();
        if (i as usize) < seeds.len() {
            input.extend_from_slice(&seeds[i as usize]);
        } else {
            input.extend_from_slice(&seeds[rng.below(seeds.len())]);
            for _ in 0..1 + rng.below(4) {
                mutate(&mut rng, &mut input, seeds, dictionary, max_len);
            }
        }
        if let Ok(mut c) = current.lock() {
            c.clone_from(&input);
        }
        started_at.store(clock.elapsed().as_millis() as u64, Ordering::Relaxed);
        let one = Instant::now();
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| target(&input)));
        slowest = slowest.max(one.elapsed());
        started_at.store(u64::MAX, Ordering::Relaxed);
        if let Err(panic) = outcome {
            started_at.store(u64::MAX - 1, Ordering::Relaxed);
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!("{name}: input {i} panicked ({message}): {}", show(&input));
        }
    }
    started_at.store(u64::MAX - 1, Ordering::Relaxed);
    let _ = watchdog.join();
    Report {
        inputs,
        elapsed: began.elapsed(),
        slowest,
    }
}

/// An input, printable: as text if it is UTF-8, else hex; long ones cut.
fn show(input: &[u8]) -> String {
    let cut = &input[..input.len().min(2000)];
    match std::str::from_utf8(cut) {
        Ok(text) => format!("{text:?} ({} bytes)", input.len()),
        Err(_) => format!(
            "hex {} ({} bytes)",
            cut.iter().map(|b| format!("{b:02x}")).collect::<String>(),
            input.len()
        ),
    }
}

fn mutate(
    rng: &mut Rng,
    input: &mut Vec<u8>,
    seeds: &[Vec<u8>],
    dictionary: &[&[u8]],
    max_len: usize,
) {
    let len = input.len();
    match rng.below(11) {
        0 if len > 0 => {
            let at = rng.below(len);
            input[at] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let at = rng.below(len);
            input[at] = rng.next() as u8;
        }
        2 => {
            let at = rng.below(len + 1);
            input.insert(at, rng.next() as u8);
        }
        3 if len > 0 => {
            let from = rng.below(len);
            let to = (from + 1 + rng.below(16)).min(len);
            input.drain(from..to);
        }
        4 if len > 0 => {
            // Repeat a range: deep nesting, long runs.
            let from = rng.below(len);
            let to = (from + 1 + rng.below(8)).min(len);
            let piece = input[from..to].to_vec();
            let times = 1 + rng.below(64);
            for _ in 0..times {
                input.splice(from..from, piece.iter().copied());
            }
        }
        5 | 6 if !dictionary.is_empty() => {
            let token = dictionary[rng.below(dictionary.len())];
            let at = rng.below(len + 1);
            input.splice(at..at, token.iter().copied());
        }
        7 => {
            // Splice with another seed.
            let other = &seeds[rng.below(seeds.len())];
            if !other.is_empty() {
                let from = rng.below(other.len());
                let to = (from + 1 + rng.below(64)).min(other.len());
                let at = rng.below(len + 1);
                input.splice(at..at, other[from..to].iter().copied());
            }
        }
        8 if len > 0 => input.truncate(rng.below(len)),
        9 => {
            // A huge number or hex string.
            let digits = b"0123456789abcdef";
            let at = rng.below(len + 1);
            let run: Vec<u8> = (0..1 + rng.below(300))
                .map(|_| digits[rng.below(16)])
                .collect();
            input.splice(at..at, run);
        }
        _ if len > 1 => {
            // Swap two bytes: reordered structure.
            let (a, b) = (rng.below(len), rng.below(len));
            input.swap(a, b);
        }
        _ => input.push(rng.next() as u8),
    }
    input.truncate(max_len);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn campaigns_run_their_seeds_first_and_catch_panics() {
        let mut seen = Vec::new();
        let report = run("collect", &[b"seed".to_vec()], &[b"{"], 64, |input| {
            if seen.len() < 3 {
                seen.push(input.to_vec());
            }
        });
        assert_eq!(seen[0], b"seed");
        assert!(report.inputs >= 1);
        let caught = std::panic::catch_unwind(|| {
            run("boom", &[b"x".to_vec()], &[], 8, |input| {
                assert!(input != b"x", "found it");
            })
        });
        let message = caught.unwrap_err();
        let message = message.downcast_ref::<String>().unwrap();
        assert!(message.contains("boom: input 0 panicked"), "{message}");
    }
}
