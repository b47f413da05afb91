//! The results as Markdown: tables, verdict and flags.

use std::fmt::Write as _;

use super::{Results, TargetRun};

impl Results {
    /// The tables, verdict and flags as Markdown.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Some(version) = &self.neve_version {
            let _ = writeln!(out, "neve {version}\n");
        }
        if let Some(line) = &self.command_line {
            let _ = writeln!(out, "command line: `{line}`\n");
        }
        let _ = writeln!(
            out,
            "machine: {} cores, {}, kernel {}; common range {}..={}; {} s warm-up + {} s per cell\n",
            self.machine.cores,
            self.machine.cpu,
            self.machine.kernel,
            self.common_range.0,
            self.common_range.1,
            self.warmup_seconds,
            self.duration_seconds
        );
        for workload in &self.workloads {
            for run in &workload.targets {
                let _ = writeln!(
                    out,
                    "### {} — {} ({}{})\n",
                    workload.workload,
                    run.target.name,
                    neve_upstream::RedactedUrl::of(&run.target.url),
                    run.client_version
                        .as_deref()
                        .map_or(String::new(), |v| format!(", {v}"))
                );
                out.push_str(&render_sweep(run));
                let _ = writeln!(
                    out,
                    "\npeak {:.0} req/s; knee (95 % of peak) at {}\n",
                    run.peak(),
                    run.knee().map_or("-".to_owned(), |k| format!("c{k}"))
                );
            }
        }
        if !self.verdicts.is_empty() {
            out.push_str("### Side by side\n\n");
            out.push_str("| workload | target vs baseline | peak req/s ratio | req/s per CPU core ratio | c1 p50 latency ratio | anonymous memory ratio | RSS ratio |\n");
            out.push_str("|---|---|---|---|---|---|---|\n");
            for v in &self.verdicts {
                let x = |r: Option<f64>| r.map_or("-".to_owned(), |r| format!("{r:.2}×"));
                let _ = writeln!(
                    out,
                    "| {} | {} vs {}{} | {} | {} | {} | {} | {} |",
                    v.workload,
                    v.target,
                    v.baseline,
                    if v.flagged { " (FLAGGED)" } else { "" },
                    x(v.peak_ratio),
                    x(v.per_core_ratio),
                    x(v.c1_latency_ratio),
                    x(v.anon_rss_ratio),
                    x(v.rss_ratio)
                );
            }
            out.push_str(
                "\npeak ratio > 1: the target serves more; per-core ratio > 1: each answer costs the target less CPU; latency and memory ratios > 1: the target is that many times faster / smaller. Anonymous memory is the heap, which the kernel cannot reclaim; RSS (VmRSS) also counts mapped files' pages in the page cache, for neve the part of its store in memory, which the kernel reclaims under pressure.\n",
            );
        }
        let flags = self.flags();
        if flags.is_empty() {
            out.push_str(
                "\nevery answer was a real result (HTTP 2xx, non-null result, no JSON-RPC error)\n",
            );
        } else {
            out.push_str("\n!!! FLAGGED — these cells did not measure the target (the reject path: answers that were not the work asked for; or client-bound):\n");
            for flag in flags {
                let _ = writeln!(out, "!!!   {flag}");
            }
        }
        out
    }
}

fn render_sweep(run: &TargetRun) -> String {
    let mut out = String::new();
    let open = run.points.iter().any(|p| p.rate.is_some());
    out.push_str(if open {
        "| rate | conns | req/s | p50 ms | p99 ms | p90 ms | p99.9 ms | max ms | target CPU | client CPU | RSS MiB (anon + file) | rejects |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    } else {
        "| conns | req/s | p50 ms | p99 ms | p90 ms | p99.9 ms | max ms | Little's law | target CPU | client CPU | RSS MiB (anon + file) | rejects |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    });
    for p in &run.points {
        let l = &p.latency;
        let percent =
            |cores: Option<f64>| cores.map_or("-".into(), |c| format!("{:.0} %", c * 100.0));
        let (cpu, client) = (percent(p.target_cpu_cores), percent(p.client_cpu_cores));
        let rss = match (p.target_rss_anon_bytes, p.target_rss_file_bytes) {
            (Some(anon), Some(file)) => format!("{} + {}", anon >> 20, file >> 20),
            _ => p
                .target_rss_bytes
                .map_or("-".into(), |b| format!("{}", b >> 20)),
        };
        let rejects = match p.outcomes.rejected() {
            0 => "0".to_owned(),
            n => format!("**{n}**"),
        };
        let lead = match p.rate {
            Some(rate) => format!("{rate:.0} | {}", p.conns),
            None => p.conns.to_string(),
        };
        let little = if open {
            String::new()
        } else {
            format!(
                " {} |",
                p.littles_law_deviation
                    .map_or("-".into(), |d| format!("{:+.0} %", d * 100.0))
            )
        };
        let _ = writeln!(
            out,
            "| {lead} | {:.0} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |{little} {cpu} | {client} | {rss} | {rejects} |",
            p.requests_per_second, l.p50_ms, l.p99_ms, l.p90_ms, l.p999_ms, l.max_ms
        );
    }
    out
}
