//! Serving's view of the upstream ([`ChainView`]) over ingest's
//! ([`IngestView`]): the one seam between the two crates. It lives here
//! because neither crate may depend on the other, and a trait of one crate
//! is implemented for a type of the other only by a type of a third. Each
//! method hands on what ingest's view says; the one line of its own is the
//! build's `neve_build_info`.

use std::sync::Arc;
use std::time::Duration;

use neve_ingest::IngestView;
use neve_serve::{ChainView, UpstreamHealth};

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
    fn render_metrics(&self, out: &mut String) {
        out.push_str(&format!(
            "# HELP neve_build_info The running build: version, commit and build date.\n\
             # TYPE neve_build_info gauge\n\
             neve_build_info{{version=\"{}\",commit=\"{}\",built=\"{}\"}} 1\n",
            crate::version::VERSION,
            crate::version::COMMIT,
            crate::version::DATE
        ));
        self.0.render_metrics(out);
    }
}
