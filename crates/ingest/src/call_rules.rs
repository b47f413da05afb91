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
/// current: `eth_config` first, coreth's `eth_getChainConfig` where that is
/// not answered. Rules of another chain id, or of another dialect than the
/// state's storage keys follow (`dialect`), are never believed.
pub async fn learn(
    client: RpcClient,
    cell: Arc<RulesCell>,
    chain_id: u64,
    dialect: Dialect,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    let mut told = false;
    loop {
        let mut transient = false;
        let mut why = Vec::new();
        let mut learnt = None;
        for (method, parse) in SOURCES {
            match ask(&client, method).await {
                Ok((raw, config)) => match parse(&config) {
                    Ok(rules) => {
                        learnt = Some((rules, raw));
                        break;
                    }
                    Err(reason) => why.push(reason),
                },
                Err(error) => {
                    transient |= error.is_transient();
                    why.push(format!("{method}: {}", neve_upstream::error_chain(&error)));
                }
            }
        }
        let wait = match learnt {
            Some((rules, _)) if rules.chain_id != chain_id => {
                tracing::warn!(
                    upstream = rules.chain_id,
                    expected = chain_id,
                    "the upstream's rules name another chain; calls stay 421"
                );
                RULES_REFRESH
            }
            Some((rules, _)) if rules.dialect() != dialect => {
                tracing::warn!(
                    source = rules.source,
                    "the upstream's rules are another EVM's than its state's; calls stay 421"
                );
                RULES_REFRESH
            }
            Some((rules, raw)) => {
                if cell.get().is_none() {
                    tracing::info!(
                        source = rules.source,
                        "calls answered: the chain's rules are known"
                    );
                }
                cell.set_with_config(rules, raw.get());
                RULES_REFRESH
            }
            None if transient => RETRY,
            None => {
                if !told {
                    tracing::info!(reason = %why.join("; "), "calls stay 421: the chain's rules are not known");
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

/// Where rules are read from, in the order asked.
type Parse = fn(&serde_json::Value) -> Result<ChainRules, String>;
const SOURCES: [(&str, Parse); 2] = [
    ("eth_config", ChainRules::from_eth_config),
    ("eth_getChainConfig", ChainRules::from_coreth_config),
];

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
