//! Serving's view of the upstream ([`ChainView`]) over ingest's
//! ([`IngestView`]): the one seam between the two crates. It lives here
//! because neither crate may depend on the other, and a trait of one crate
//! is implemented for a type of the other only by a type of a third. Each
//! method hands on what ingest's view says; the one metric of its own is
//! the build's `neve_build_info`.

use std::sync::Arc;
use std::time::Duration;

use neve_ingest::IngestView;
use neve_serve::{ChainView, UpstreamHealth};
use prometheus::core::Collector;
use prometheus::proto::MetricFamily;
use prometheus::{Gauge, Opts};

/// Ingest, as serving sees it.
pub struct IngestChain(pub IngestView);

impl ChainView for IngestChain {
    fn upstream_head(&self) -> Option<u64> {
        self.0.upstream_head()
    }
    fn safe(&self) -> Option<u64> {
        self.0.safe()
    }
    fn finalized(&self) -> Option<u64> {
        self.0.finalized()
    }
    fn upstream_health(&self) -> UpstreamHealth {
        UpstreamHealth {
            url: self.0.url().clone(),
            connected: self.0.upstream_connected(),
            last_contact_age_seconds: self.0.last_contact_age_seconds(),
            last_block_age_seconds: self.0.last_block_age_seconds(),
            last_error: self.0.last_error(),
            raw_data: self.0.raw_data(),
            waiting: self.0.waiting(),
        }
    }
    fn changes(&self) -> Option<Arc<tokio::sync::Notify>> {
        Some(self.0.changes())
    }
    fn upstream_state_window(&self) -> Option<neve_upstream::StateWindow> {
        self.0.upstream_state_window()
    }
    fn following(&self) -> bool {
        self.0.following()
    }
    fn follower_restarts(&self) -> u64 {
        self.0.follower_restarts()
    }
    fn store_write_error(&self) -> Option<String> {
        self.0.store_write_error()
    }
    fn upstream_head_age(&self) -> Option<Duration> {
        self.0.upstream_head_age()
    }
    fn upstream_connected(&self) -> bool {
        self.0.upstream_connected()
    }
    fn metric_families(&self) -> Vec<MetricFamily> {
        let mut families = build_info();
        families.extend(self.0.metric_families());
        families
    }
}

/// `neve_build_info`: 1, labelled with the running build's version,
/// commit and build date.
fn build_info() -> Vec<MetricFamily> {
    let opts = Opts::new(
        "neve_build_info",
        "The running build: version, commit and build date.",
    )
    .const_label("version", crate::version::VERSION)
    .const_label("commit", crate::version::COMMIT)
    .const_label("built", crate::version::DATE);
    let gauge = Gauge::with_opts(opts).expect("the build's labels are valid");
    gauge.set(1.0);
    gauge.collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_info_is_one_gauge_labelled_with_the_build() {
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&build_info())
            .unwrap();
        assert_eq!(
            text,
            format!(
                "# HELP neve_build_info The running build: version, commit and build date.\n\
                 # TYPE neve_build_info gauge\n\
                 neve_build_info{{built=\"{}\",commit=\"{}\",version=\"{}\"}} 1\n",
                crate::version::DATE,
                crate::version::COMMIT,
                crate::version::VERSION
            )
        );
    }
}
