//! Learning the chain's rules for calls from the upstream: its answer to
//! `eth_config` (EIP-7910), read at start and again every
//! [`RULES_REFRESH`] so a scheduled fork is known before it activates.
//! Until an answer names rules neve knows, calls are 421; an upstream of
//! another chain id is never believed.

use std::sync::Arc;
use std::time::Duration;

use neve_execution::{ChainRules, RulesCell};
use neve_upstream::RpcClient;

/// How often the rules are asked again once known. Default is 10 min.
pub const RULES_REFRESH: Duration = Duration::from_secs(600);

/// How soon a failed ask is retried. Default is 5 s.
const RETRY: Duration = Duration::from_secs(5);

/// Asks `client` for the chain's rules until `stopped`, keeping `cell`
/// current.
pub async fn learn(
    client: RpcClient,
    cell: Arc<RulesCell>,
    chain_id: u64,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    let mut told = false;
    loop {
        let answer = client
            .call_raw("eth_config", [(); 0])
            .await
            .and_then(|raw| {
                let config = serde_json::from_str::<serde_json::Value>(raw.get()).map_err(|e| {
                    neve_upstream::RpcError::Malformed {
                        reason: format!("eth_config does not decode: {e}"),
                        snippet: String::new(),
                    }
                })?;
                Ok((raw, config))
            });
        let wait = match answer {
            Ok((raw, config)) => match ChainRules::from_eth_config(&config) {
                Ok(rules) if rules.chain_id == chain_id => {
                    if cell.get().is_none() {
                        tracing::info!("calls answered: the chain's rules are known");
                    }
                    cell.set_with_config(rules, raw.get());
                    RULES_REFRESH
                }
                Ok(rules) => {
                    tracing::warn!(
                        upstream = rules.chain_id,
                        expected = chain_id,
                        "eth_config names another chain; calls stay 421"
                    );
                    RULES_REFRESH
                }
                Err(reason) => {
                    if !told {
                        tracing::info!(%reason, "calls stay 421: the chain's rules are not known");
                        told = true;
                    }
                    RULES_REFRESH
                }
            },
            Err(error) if error.is_transient() => RETRY,
            Err(error) => {
                if !told {
                    tracing::info!(
                        error = %neve_upstream::error_chain(&error),
                        "calls stay 421: the upstream does not answer eth_config"
                    );
                    told = true;
                }
                RULES_REFRESH
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stopped.changed() => return,
        }
        if *stopped.borrow() {
            return;
        }
    }
}
