//! Which EVM rules hold at a block: the fork (revm's spec) and the blob
//! base fee's update fraction, by timestamp. Learnt from what the upstream
//! answers to `eth_config` (EIP-7910): its `current`, `next` and `last`
//! forks, each with its activation time, precompiles and blob schedule.
//! A block the rules do not cover (older than the oldest fork listed, or a
//! fork whose precompiles name no spec neve knows) has no rules here, and
//! a call at it is a miss (421), never an answer under guessed rules.

use revm::primitives::hardfork::SpecId;
use serde::Deserialize;

/// One fork's rules, from its activation time until the next's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fork {
    /// Seconds since the epoch at which it activates.
    pub activation_time: u64,
    /// The EVM's rules.
    pub spec: SpecId,
    /// The blob base fee's update fraction (none: no blobs).
    pub blob_base_fee_update_fraction: Option<u64>,
    /// Blobs a block targets and may hold at most (0 without blobs).
    pub blob_target: u64,
    /// See [`Fork::blob_target`].
    pub blob_max: u64,
}

/// A chain's rules by time, as far as neve knows them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainRules {
    /// The chain id a call runs under (`CHAINID`).
    pub chain_id: u64,
    /// Known forks, oldest first.
    forks: Vec<Fork>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ForkConfig {
    activation_time: u64,
    #[serde(default)]
    blob_schedule: Option<BlobSchedule>,
    chain_id: String,
    precompiles: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    system_contracts: std::collections::BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlobSchedule {
    base_fee_update_fraction: u64,
    #[serde(default)]
    target: u64,
    #[serde(default)]
    max: u64,
}

#[derive(Deserialize)]
struct EthConfig {
    current: ForkConfig,
    next: Option<ForkConfig>,
    last: Option<ForkConfig>,
}

/// The system contracts of the forks neve knows, Cancun to Osaka; a fork
/// that adds another is one neve does not know.
const KNOWN_SYSTEM_CONTRACTS: [&str; 5] = [
    "BEACON_ROOTS_ADDRESS",
    "HISTORY_STORAGE_ADDRESS",
    "WITHDRAWAL_REQUEST_PREDEPLOY_ADDRESS",
    "CONSOLIDATION_REQUEST_PREDEPLOY_ADDRESS",
    "DEPOSIT_CONTRACT_ADDRESS",
];

/// The newest spec a fork's precompiles show: each of these forks added
/// some (Osaka P256VERIFY, Prague the BLS12-381 ones, Cancun the KZG
/// point evaluation), so the set names the fork. A fork with a system
/// contract those forks do not have (Amsterdam's builder contracts) is one
/// neve does not know: revm's rules for forks still being specified are
/// not geth's (measured: intrinsic gas and cold storage costs differ).
fn spec_of(
    precompiles: &std::collections::BTreeMap<String, String>,
    system_contracts: &std::collections::BTreeMap<String, String>,
) -> Option<SpecId> {
    if system_contracts
        .keys()
        .any(|name| !KNOWN_SYSTEM_CONTRACTS.contains(&name.as_str()))
    {
        return None;
    }
    if precompiles.contains_key("P256VERIFY") {
        Some(SpecId::OSAKA)
    } else if precompiles.contains_key("BLS12_G1ADD") {
        Some(SpecId::PRAGUE)
    } else if precompiles.contains_key("KZG_POINT_EVALUATION") {
        Some(SpecId::CANCUN)
    } else {
        None
    }
}

impl ChainRules {
    /// Rules from an `eth_config` result; an error says why they are not
    /// usable.
    pub fn from_eth_config(result: &serde_json::Value) -> Result<ChainRules, String> {
        let config: EthConfig =
            serde_json::from_value(result.clone()).map_err(|e| format!("eth_config: {e}"))?;
        let chain_id = config.current.chain_id.clone();
        let chain_id = chain_id
            .strip_prefix("0x")
            .and_then(|digits| u64::from_str_radix(digits, 16).ok())
            .ok_or_else(|| format!("eth_config: chainId {chain_id:?} is not a quantity"))?;
        let mut forks = Vec::new();
        for fork in std::iter::once(config.current)
            .chain(config.next)
            .chain(config.last)
        {
            let Some(spec) = spec_of(&fork.precompiles, &fork.system_contracts) else {
                // A fork neve cannot name ends what it knows: later
                // blocks would run under wrong rules.
                break;
            };
            if forks
                .last()
                .is_some_and(|f: &Fork| f.activation_time >= fork.activation_time)
            {
                continue; // `last` repeats `next` when only one is scheduled
            }
            let schedule = fork.blob_schedule;
            forks.push(Fork {
                activation_time: fork.activation_time,
                spec,
                blob_base_fee_update_fraction: schedule
                    .as_ref()
                    .map(|schedule| schedule.base_fee_update_fraction),
                blob_target: schedule.as_ref().map_or(0, |s| s.target),
                blob_max: schedule.as_ref().map_or(0, |s| s.max),
            });
        }
        if forks.is_empty() {
            return Err("eth_config: the current fork's rules are not known to neve".into());
        }
        Ok(ChainRules { chain_id, forks })
    }

    /// The fork in force at `timestamp`, if neve knows it.
    pub fn at(&self, timestamp: u64) -> Option<Fork> {
        self.forks
            .iter()
            .rev()
            .find(|fork| fork.activation_time <= timestamp)
            .copied()
    }
}

/// The chain's rules once known, shared by whoever learns them (at start,
/// from the upstream) and every call (which answers 421 until then).
#[derive(Debug, Default)]
pub struct RulesCell(std::sync::RwLock<Option<Learnt>>);

#[derive(Debug)]
struct Learnt {
    rules: std::sync::Arc<ChainRules>,
    /// The `eth_config` answer they were read from: what a mirror of this
    /// neve learns its rules from.
    config: std::sync::Arc<str>,
}

impl RulesCell {
    /// Sets (or replaces) the rules, read from `config`, an `eth_config`
    /// answer.
    pub fn set_with_config(&self, rules: ChainRules, config: &str) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Some(Learnt {
            rules: std::sync::Arc::new(rules),
            config: config.into(),
        });
    }

    /// The rules, if known.
    pub fn get(&self) -> Option<std::sync::Arc<ChainRules>> {
        let learnt = self.0.read().unwrap_or_else(|e| e.into_inner());
        learnt.as_ref().map(|l| l.rules.clone())
    }

    /// The `eth_config` answer the rules were read from, once known.
    pub fn config(&self) -> Option<std::sync::Arc<str>> {
        let learnt = self.0.read().unwrap_or_else(|e| e.into_inner());
        learnt.as_ref().map(|l| l.config.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fork(time: u64, precompile: &str, fraction: u64) -> serde_json::Value {
        serde_json::json!({
            "activationTime": time,
            "blobSchedule": {"target": 6, "max": 9, "baseFeeUpdateFraction": fraction},
            "chainId": "0x539",
            "forkId": "0x00000000",
            "precompiles": {"ECREC": "0x01", precompile: "0x100"},
            "systemContracts": {}
        })
    }

    #[test]
    fn forks_are_named_by_their_precompiles_and_found_by_time() {
        let config = serde_json::json!({
            "current": fork(100, "KZG_POINT_EVALUATION", 3_338_477),
            "next": fork(200, "BLS12_G1ADD", 5_007_716),
            "last": fork(300, "P256VERIFY", 5_007_716),
        });
        let rules = ChainRules::from_eth_config(&config).unwrap();
        assert_eq!(rules.chain_id, 0x539);
        assert_eq!(rules.at(99), None, "older than what the upstream listed");
        assert_eq!(rules.at(100).unwrap().spec, SpecId::CANCUN);
        assert_eq!(
            rules.at(250).unwrap().blob_base_fee_update_fraction,
            Some(5_007_716)
        );
        assert_eq!(rules.at(u64::MAX).unwrap().spec, SpecId::OSAKA);
    }

    #[test]
    fn a_fork_neve_cannot_name_is_no_rules() {
        let config =
            serde_json::json!({"current": fork(0, "SOMETHING_NEW", 1), "next": null, "last": null});
        assert!(ChainRules::from_eth_config(&config).is_err());
        assert!(ChainRules::from_eth_config(&serde_json::json!({"current": 1})).is_err());
    }
}
