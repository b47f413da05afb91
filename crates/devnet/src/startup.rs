//! Bringing a node up: free ports, waiting until it answers, and starting
//! again on new ports when one was taken.

use std::time::{Duration, Instant};

use neve_upstream::RpcClient;

use crate::error::DevnetError;
use crate::process::NodeProcess;

/// How long a node may take to answer its first RPC before start fails.
/// avalanchego bootstraps its P-, X- and C-chains first; on a loaded 2-core
/// machine that has been seen to take tens of seconds. Default is 120 s.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(120);

/// `N` distinct free TCP ports on 127.0.0.1. The listeners are held until
/// all are chosen so one call never returns the same port twice; another
/// process can still take one before the node binds it, so the nodes'
/// `start` tries again on new ports when that happens.
pub fn free_ports<const N: usize>() -> [u16; N] {
    let listeners: Vec<_> = (0..N)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port"))
        .collect();
    std::array::from_fn(|i| listeners[i].local_addr().expect("local addr").port())
}

/// Polls `eth_blockNumber` until it answers, the process exits, or `timeout`.
pub(crate) async fn wait_ready(
    node: &NodeProcess,
    url: &str,
    timeout: Duration,
) -> Result<(), DevnetError> {
    let client = RpcClient::new(url)
        .map_err(|e| not_ready(node, e.to_string()))?
        .with_timeout(Duration::from_secs(2));
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = node.exit_status() {
            return Err(not_ready(node, format!("exited early with {status}")));
        }
        if client.call::<String>("eth_blockNumber", ()).await.is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(not_ready(
                node,
                format!("no answer at {url} within {timeout:?}"),
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Attempts at starting a node whose port was taken between
/// [`free_ports`] choosing it and the node binding it (an outgoing
/// connection of a busy test can get that ephemeral port). Default is 3.
const PORT_CLASH_ATTEMPTS: u32 = 3;

/// Runs `start` again, on new ports, when the node failed because a port
/// chosen for it was already in use.
pub(crate) async fn with_fresh_ports<T, F, Fut>(mut start: F) -> Result<T, DevnetError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, DevnetError>>,
{
    let mut attempt = 1;
    loop {
        match start().await {
            Err(DevnetError::NotReady { ref log_tail, .. })
                if attempt < PORT_CLASH_ATTEMPTS && log_tail.contains("address already in use") =>
            {
                attempt += 1;
            }
            outcome => return outcome,
        }
    }
}

fn not_ready(node: &NodeProcess, reason: String) -> DevnetError {
    DevnetError::NotReady {
        name: node.name().to_owned(),
        reason,
        log_tail: node.log_tail(40),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression (CI): geth once failed its start because a port chosen
    /// for it was taken first; a start on new ports now follows.
    #[tokio::test]
    async fn a_port_taken_before_the_node_binds_it_means_a_start_on_new_ports() {
        let mut attempts = 0;
        let started = with_fresh_ports(|| {
            attempts += 1;
            let attempt = attempts;
            async move {
                if attempt == 1 {
                    Err(DevnetError::NotReady {
                        name: "geth-dev".into(),
                        reason: "exited early".into(),
                        log_tail: "Fatal: listen tcp 127.0.0.1:40503: bind: address already in use"
                            .into(),
                    })
                } else {
                    Ok(attempt)
                }
            }
        })
        .await;
        assert_eq!(started.unwrap(), 2);
        let other = with_fresh_ports(|| async {
            Err::<(), _>(DevnetError::NotReady {
                name: "geth-dev".into(),
                reason: "exited early".into(),
                log_tail: "Fatal: bad flag".into(),
            })
        })
        .await;
        assert!(other.is_err(), "other failures are not retried");
    }
}
