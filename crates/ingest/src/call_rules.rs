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

/// How far past the moment it was given an answer speaks for the chain's
/// blocks: the refresh interval and a minute of slack, so rules that keep
/// being confirmed never lapse, and rules whose refreshes fail lapse for
/// blocks made a refresh and a minute after the last good answer.
/// Default is 11 min.
pub const RULES_COVER: Duration = Duration::from_secs(660);

/// How soon a failed ask is retried. Default is 5 s.
const RETRY: Duration = Duration::from_secs(5);

/// Asks `client` for the chain's rules until `stopped`, keeping `cell`
/// current: `eth_config` on Ethereum's clients, coreth's
/// `eth_getChainConfig` where the state follows coreth's storage keys
/// (`dialect`), so the rules are always of the EVM the state is. Rules of
/// another chain id are never believed. Each good answer covers blocks
/// up to [`RULES_COVER`] past the moment it came; the rules are asked
/// again every [`RULES_REFRESH`], at the next fork's activation and every
/// `RETRY` after it until the answer's `current` is that fork (so
/// `eth_config`'s `current` follows it), and every `RETRY` while asking
/// fails once rules are known (so they lapse only while the upstream
/// cannot confirm them).
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
        let now = unix_now();
        // After a failure: soon once rules are known (they lapse while
        // unconfirmed), else at the usual pace.
        let failed = if cell.get().is_some() {
            RETRY
        } else {
            RULES_REFRESH
        };
        let wait = match answer {
            Ok((raw, config)) => match parse(&config) {
                Ok(rules) if rules.chain_id == chain_id => {
                    if cell.get().is_none() {
                        tracing::info!(method, "calls answered: the chain's rules are known");
                    }
                    // Asked again soon while the node's `current` is behind
                    // a fork whose time has passed (its head not past it
                    // yet), else at the next fork or the refresh.
                    let lags = rules.current_lags(now);
                    let next = rules.next_activation(now);
                    cell.set_with_config(
                        rules.covering_until(now + RULES_COVER.as_secs()),
                        raw.get(),
                    );
                    told = false;
                    if lags {
                        RETRY
                    } else {
                        until_next_ask(now, next)
                    }
                }
                Ok(rules) => {
                    tracing::warn!(
                        upstream = rules.chain_id,
                        expected = chain_id,
                        method,
                        "the upstream's rules name another chain; calls at blocks they no longer cover are 421"
                    );
                    failed
                }
                Err(reason) => {
                    if !told {
                        tracing::info!(
                            %reason,
                            "the chain's rules are not known: calls at blocks no good answer covers are 421"
                        );
                        told = true;
                    }
                    failed
                }
            },
            Err(error) if error.is_transient() => RETRY,
            Err(error) => {
                if !told {
                    tracing::info!(
                        method,
                        error = %neve_upstream::error_chain(&error),
                        "the upstream does not answer: calls at blocks no good answer covers are 421"
                    );
                    told = true;
                }
                failed
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

/// The wait before asking again after a good answer at `now`: the refresh
/// interval, or until a second after the next fork activates if sooner.
fn until_next_ask(now: u64, next_fork: Option<u64>) -> Duration {
    match next_fork {
        Some(at) => RULES_REFRESH.min(Duration::from_secs(at - now + 1)),
        None => RULES_REFRESH,
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 42.14: a fork due before the next refresh is asked about a
    /// second after it activates.
    #[test]
    fn the_rules_are_asked_again_when_the_next_fork_activates() {
        assert_eq!(until_next_ask(1_000, Some(1_030)), Duration::from_secs(31));
        assert_eq!(until_next_ask(1_000, Some(10_000)), RULES_REFRESH);
        assert_eq!(until_next_ask(1_000, None), RULES_REFRESH);
    }
}
