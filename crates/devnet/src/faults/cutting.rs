//! [`CuttingProxy`]: a TCP proxy that keeps dropping its connections.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A TCP proxy that resets every connection it carries `every` after it
/// opened: a WebSocket (or any connection) that keeps dropping. Counts the
/// connections it cut; stops when dropped.
pub struct CuttingProxy {
    addr: std::net::SocketAddr,
    cuts: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for CuttingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl CuttingProxy {
    /// Listens on a free loopback port and forwards to the host and port of
    /// `upstream` (a `ws://` or `http://` URL).
    pub async fn start(upstream: &str, every: Duration) -> CuttingProxy {
        let target = upstream
            .split("://")
            .nth(1)
            .unwrap_or(upstream)
            .split('/')
            .next()
            .unwrap_or_default()
            .to_string();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let cuts = Arc::new(AtomicU64::new(0));
        let counter = cuts.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    continue;
                };
                let (target, counter) = (target.clone(), counter.clone());
                tokio::spawn(async move {
                    let Ok(mut server) = tokio::net::TcpStream::connect(&target).await else {
                        return;
                    };
                    let copied = tokio::time::timeout(
                        every,
                        tokio::io::copy_bidirectional(&mut client, &mut server),
                    )
                    .await;
                    if copied.is_err() {
                        counter.fetch_add(1, Ordering::Relaxed);
                        // A reset, not a goodbye: nothing more is sent.
                        let _ = client.set_zero_linger();
                        let _ = server.set_zero_linger();
                    }
                });
            }
        });
        CuttingProxy { addr, cuts, task }
    }

    /// The proxy's URL with `scheme` (`ws`, `http`).
    pub fn url(&self, scheme: &str) -> String {
        format!("{scheme}://{}", self.addr)
    }

    /// Connections cut so far.
    pub fn cuts(&self) -> u64 {
        self.cuts.load(Ordering::Relaxed)
    }
}
