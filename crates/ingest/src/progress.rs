//! Catch-up progress people can see: while the follower is far behind (a
//! backfill from a node, or a mirror's bootstrap from another neve), a bar
//! when stderr is a terminal, otherwise a log line at an interval with the
//! stored height, the head, the rate and the ETA; quiet once caught up.
//! It only reads: the follower's counters and the store's heights.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::status::IngestStatus;

/// Catch-up progress (a backfill from a node, or a `mirror`'s bootstrap):
/// a bar on a terminal, a log line every `every` otherwise; quiet once
/// caught up. Runs until `stop` changes.
pub async fn report_progress(
    mirror: bool,
    status: Arc<IngestStatus>,
    reader: neve_store::Reader,
    every: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    // A mirror catches up from its source's `/blocks` export.
    let phase = if mirror {
        "bootstrapping"
    } else {
        "backfilling"
    };
    /// Behind by more than this, the follower is backfilling.
    const BACKFILLING: u64 = 100;
    let bar = std::io::IsTerminal::is_terminal(&std::io::stderr()).then(|| {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{msg} [{bar:40}] {pos}/{len} blocks, {per_sec}, eta {eta}",
            )
            .expect("valid template")
            .progress_chars("=> "),
        );
        bar.set_message(phase);
        bar
    });
    let mut shown = false;
    let mut last_log = std::time::Instant::now();
    // The rate is averaged from the first height seen: appends come in
    // batches, so the height moves in steps between log lines.
    let mut first_seen: Option<(std::time::Instant, u64)> = None;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            _ = stop.changed() => break,
        }
        let head = status.upstream_head.load(Ordering::Relaxed);
        let stats = reader.stats();
        let (Some(min), Some(max)) = (stats.min_height, stats.max_contiguous_height) else {
            continue;
        };
        let behind = head.saturating_sub(max);
        match &bar {
            Some(bar) if behind > BACKFILLING || shown => {
                shown = behind > 0;
                bar.set_length(head.saturating_sub(min) + 1);
                bar.set_position(max - min + 1);
                if !shown {
                    bar.finish_with_message("caught up");
                }
            }
            None if behind > BACKFILLING && last_log.elapsed() >= every => {
                let (since, from) = *first_seen.get_or_insert((std::time::Instant::now(), max));
                let rate = Some(max.saturating_sub(from) as f64 / since.elapsed().as_secs_f64());
                match rate.filter(|r| *r > 0.0) {
                    Some(rate) => tracing::info!(
                        stored = max,
                        head,
                        behind,
                        blocks_per_second = rate.round(),
                        eta_seconds = (behind as f64 / rate).round(),
                        "{phase}"
                    ),
                    None => tracing::info!(stored = max, head, behind, "{phase}"),
                }
                last_log = std::time::Instant::now();
            }
            _ => {}
        }
    }
}
