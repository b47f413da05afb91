//! Learning the chain's rules for calls from the upstream: its answer to
//! `eth_config` (EIP-7910), or coreth's `eth_getChainConfig` on Avalanche's
//! C-chain, read at start and again every
//! [`RULES_REFRESH`] so a scheduled fork is known before it activates.
//! Until an answer names rules neve knows, calls are 421; an upstream of
//! another chain id is never believed.

use std::sync::Arc;
use std::time::Duration;

use neve_execution::{ChainRules, Dialect, RulesCell};
use neve_upstream::RpcClient;

/// How often the rules are asked again once known. Default is 10 min.
pub const RULES_REFRESH: Duration = Duration::from_secs(600);

/// How soon a failed ask is retried. Default is 5 s.
const RETRY: Duration = Duration::from_secs(5);

/// Asks `client` for the chain's rules until `stopped`, keeping `cell`
/// current: `eth_config` on Ethereum's clients, coreth's
/// `eth_getChainConfig` where the state follows coreth's storage keys
/// (`dialect`), so the rules are always of the EVM the state is. Rules of
/// another chain id are never believed.
pub async fn learn(
    client: RpcClient,
    cell: Arc<RulesCell>,
    chain_id: u64,
    dialect: Dialect,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    let (method, parse): (&str, Parse) = match dialect {
        Dialect::Ethereum => ("eth_config", ChainRules::from_eth_config),
        Dialect::Coreth => ("eth_getChainConfig", ChainRules::from_coreth_config),
    };
    let mut told = false;
    loop {
        let answer = ask(&client, method).await;
        let wait = match answer {
            Ok((raw, config)) => match parse(&config) {
                Ok(rules) if rules.chain_id == chain_id => {
                    if cell.get().is_none() {
                        tracing::info!(method, "calls answered: the chain's rules are known");
                    }
                    cell.set_with_config(rules, raw.get());
                    RULES_REFRESH
                }
                Ok(rules) => {
                    tracing::warn!(
                        upstream = rules.chain_id,
                        expected = chain_id,
                        method,
                        "the upstream's rules name another chain; calls stay 421"
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
                        method,
                        error = %neve_upstream::error_chain(&error),
                        "calls stay 421: the upstream does not answer"
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

/// How an answer is read into rules.
type Parse = fn(&serde_json::Value) -> Result<ChainRules, String>;

/// `method`'s answer, raw (passed on to mirrors as sent) and decoded.
async fn ask(
    client: &RpcClient,
    method: &str,
) -> Result<(Box<serde_json::value::RawValue>, serde_json::Value), neve_upstream::RpcError> {
    let raw = client.call_raw(method, [(); 0]).await?;
    let config = serde_json::from_str::<serde_json::Value>(raw.get()).map_err(|e| {
        neve_upstream::RpcError::Malformed {
            reason: format!("{method} does not decode: {e}"),
            snippet: String::new(),
        }
    })?;
    Ok((raw, config))
}
