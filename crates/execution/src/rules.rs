//! Which EVM rules hold at a block: the fork (revm's spec), the blob base
//! fee's update fraction and the chain's dialect, by timestamp. Learnt
//! from the upstream: on Ethereum's clients its answer to `eth_config`
//! (EIP-7910: its `current`, `next` and `last` forks, each with its
//! activation time, precompiles and blob schedule); on Avalanche's C-chain,
//! which has no `eth_config`, coreth's `eth_getChainConfig` (its network
//! upgrades by time). A block the rules do not cover (older than the
//! oldest fork known, or at or after a fork neve cannot name) has no rules
//! here, and a call at it is a miss (421), never an answer under guessed
//! rules.

use revm::primitives::hardfork::SpecId;
use serde::Deserialize;

/// Whose EVM a chain runs: Ethereum's, or coreth's (Avalanche's C-chain:
/// Ethereum's rules up to Cancun plus its own precompiles, `PREVRANDAO`
/// from the header's difficulty, no gas refunds, and its storage key rule;
/// see `coreth.rs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Dialect {
    /// geth's.
    #[default]
    Ethereum,
    /// coreth's, as avalanchego runs it.
    Coreth,
}

/// One fork's rules, from its activation time until the next's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fork {
    /// Whose EVM.
    pub dialect: Dialect,
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
    /// When a fork neve cannot name activates, if one is scheduled: from
    /// then on nothing is known.
    until: Option<u64>,
    /// The method the rules were read with (`eth_config` or
    /// `eth_getChainConfig`): the one a mirror of this neve is answered.
    pub source: &'static str,
    /// The latest block time the answer they were read from speaks for
    /// (see [`ChainRules::covering_until`]); none: no bound.
    covers_until: Option<u64>,
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

/// coreth's time-keyed upgrades up to Granite, whose rules `coreth.rs`
/// covers (Helicon, scheduled after it, is not among them: a chain where
/// it is in force is one neve does not know).
const CORETH_FORKS_KNOWN: [&str; 16] = [
    "apricotPhase1BlockTimestamp",
    "apricotPhase2BlockTimestamp",
    "apricotPhase3BlockTimestamp",
    "apricotPhase4BlockTimestamp",
    "apricotPhase5BlockTimestamp",
    "apricotPhasePre6BlockTimestamp",
    "apricotPhase6BlockTimestamp",
    "apricotPhasePost6BlockTimestamp",
    "banffBlockTimestamp",
    "cortinaBlockTimestamp",
    "durangoBlockTimestamp",
    "etnaTimestamp",
    "fortunaTimestamp",
    "graniteTimestamp",
    "shanghaiTime",
    "cancunTime",
];

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
        let mut until = None;
        for fork in std::iter::once(config.current)
            .chain(config.next)
            .chain(config.last)
        {
            let Some(spec) = spec_of(&fork.precompiles, &fork.system_contracts) else {
                // A fork neve cannot name ends what it knows: later
                // blocks would run under wrong rules.
                until = Some(fork.activation_time);
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
                dialect: Dialect::Ethereum,
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
        Ok(ChainRules {
            chain_id,
            forks,
            until,
            source: "eth_config",
            covers_until: None,
        })
    }

    /// Rules from coreth's `eth_getChainConfig` result (Avalanche's
    /// C-chain): calls are answered from Granite on, the upgrade whose
    /// EVM `coreth.rs` follows (Cancun's rules, P256VERIFY, the native
    /// asset contracts deprecated); any later upgrade, or a fork key neve
    /// does not know, ends what is known at its time. Blocks before
    /// Granite have no rules here (older upgrades had other precompiles
    /// and gas rules).
    pub fn from_coreth_config(result: &serde_json::Value) -> Result<ChainRules, String> {
        let config = result
            .as_object()
            .ok_or("eth_getChainConfig: not an object")?;
        let time = |key: &str| config.get(key).and_then(serde_json::Value::as_u64);
        let chain_id = time("chainId").ok_or("eth_getChainConfig: no chainId")?;
        let granite = time("graniteTimestamp")
            .ok_or("eth_getChainConfig: no Granite upgrade (not coreth's)")?;
        // Granite's EVM is Cancun's (Etna) plus Shanghai's (Durango): both
        // must be in force by then, or the chain is not one neve knows.
        for key in [
            "shanghaiTime",
            "cancunTime",
            "durangoBlockTimestamp",
            "etnaTimestamp",
        ] {
            if time(key).is_none_or(|at| at > granite) {
                return Err(format!("eth_getChainConfig: {key} is not before Granite"));
            }
        }
        let until = config
            .iter()
            .filter(|(key, _)| key.ends_with("Timestamp") || key.ends_with("Time"))
            .filter(|(key, _)| !CORETH_FORKS_KNOWN.contains(&key.as_str()))
            .map(|(_, at)| at.as_u64().unwrap_or(0))
            .min();
        if until.is_some_and(|until| until <= granite) {
            return Err("eth_getChainConfig: an upgrade neve does not know is in force".into());
        }
        Ok(ChainRules {
            chain_id,
            forks: vec![Fork {
                dialect: Dialect::Coreth,
                activation_time: granite,
                spec: SpecId::CANCUN,
                // Cancun's schedule; coreth's headers hold no blob gas, so
                // the blob base fee is the minimum, 1.
                blob_base_fee_update_fraction: Some(3_338_477),
                blob_target: 3,
                blob_max: 6,
            }],
            until,
            source: "eth_getChainConfig",
            covers_until: None,
        })
    }

    /// These rules, confirmed until `time` (seconds since the epoch): an
    /// answer asked at some moment says nothing of a fork scheduled after
    /// it. Until `time` they are the node's own, for any block time (a
    /// block override's included); after it (refreshes failing, naming
    /// another chain, or not parsing) they still speak for blocks made up
    /// to `time`, and later blocks have no rules: calls at them are 421
    /// rather than run under rules that may have changed.
    pub fn covering_until(mut self, time: u64) -> ChainRules {
        self.covers_until = Some(time);
        self
    }

    /// When the next fork neve knows of activates after `now` (seconds
    /// since the epoch), if one is scheduled: the moment to ask again, so
    /// what a mirror is told (`eth_config`'s `current`) follows the fork.
    pub fn next_activation(&self, now: u64) -> Option<u64> {
        self.forks
            .iter()
            .map(|fork| fork.activation_time)
            .chain(self.until)
            .filter(|at| *at > now)
            .min()
    }

    /// Whether the answer these rules came from names as `current` a fork
    /// older than one it lists as active by `now`: the node answers from
    /// its head's time, and its first block past a fork comes a few
    /// seconds after the fork's time, so it is asked again until its
    /// `current` follows.
    pub fn current_lags(&self, now: u64) -> bool {
        self.forks
            .iter()
            .skip(1)
            .any(|fork| fork.activation_time <= now)
    }

    /// The fork in force at `timestamp`, if neve knows it.
    pub fn at(&self, timestamp: u64) -> Option<Fork> {
        if self.until.is_some_and(|until| timestamp >= until)
            || self
                .covers_until
                .is_some_and(|covers| timestamp > covers && unix_now() > covers)
        {
            return None;
        }
        self.forks
            .iter()
            .rev()
            .find(|fork| fork.activation_time <= timestamp)
            .copied()
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The chain's rules once known, shared by whoever learns them (at start,
/// from the upstream) and every call (which answers 421 until then).
#[derive(Debug, Default)]
pub struct RulesCell(std::sync::RwLock<Option<Learnt>>);

#[derive(Debug)]
struct Learnt {
    rules: std::sync::Arc<ChainRules>,
    /// The answer they were read from (to [`ChainRules::source`]): what a
    /// mirror of this neve learns its rules from.
    config: std::sync::Arc<str>,
}

impl RulesCell {
    /// Sets (or replaces) the rules, read from `config`, the answer to
    /// `rules.source`.
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

    /// The answer to `method` the rules were read from, once known.
    pub fn config(&self, method: &str) -> Option<std::sync::Arc<str>> {
        let learnt = self.0.read().unwrap_or_else(|e| e.into_inner());
        learnt
            .as_ref()
            .filter(|l| l.rules.source == method)
            .map(|l| l.config.clone())
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
        // Scheduled after a known one: known until it activates.
        let config = serde_json::json!({
            "current": fork(100, "P256VERIFY", 5_007_716),
            "next": fork(200, "SOMETHING_NEW", 1),
            "last": fork(200, "SOMETHING_NEW", 1),
        });
        let rules = ChainRules::from_eth_config(&config).unwrap();
        assert_eq!(rules.at(199).unwrap().spec, SpecId::OSAKA);
        assert_eq!(rules.at(200), None);
    }

    /// What avalanchego v1.14.2's local network answers.
    fn coreth_local() -> serde_json::Value {
        let at = 1_607_144_400u64;
        let mut config = serde_json::json!({"chainId": 43112, "berlinBlock": 0, "londonBlock": 0,
            "daoForkSupport": true, "heliconTimestamp": 253_399_622_400u64});
        for key in CORETH_FORKS_KNOWN {
            config[key] = at.into();
        }
        config
    }

    #[test]
    fn coreths_rules_hold_from_granite_until_an_upgrade_neve_does_not_know() {
        let rules = ChainRules::from_coreth_config(&coreth_local()).unwrap();
        assert_eq!(rules.chain_id, 43112);
        assert_eq!(rules.source, "eth_getChainConfig");
        let fork = rules.at(1_607_144_400).unwrap();
        assert_eq!((fork.spec, fork.dialect), (SpecId::CANCUN, Dialect::Coreth));
        assert_eq!(rules.at(1_607_144_399), None, "before Granite");
        assert_eq!(rules.at(253_399_622_400), None, "Helicon");
        let mut later = coreth_local();
        later["somethingNewTimestamp"] = 1_700_000_000u64.into();
        let rules = ChainRules::from_coreth_config(&later).unwrap();
        assert!(rules.at(1_699_999_999).is_some());
        assert_eq!(rules.at(1_700_000_000), None);
        let mut not_coreth = coreth_local();
        not_coreth
            .as_object_mut()
            .unwrap()
            .remove("graniteTimestamp");
        assert!(ChainRules::from_coreth_config(&not_coreth).is_err());
        let mut in_force = coreth_local();
        in_force["heliconTimestamp"] = 0.into();
        assert!(ChainRules::from_coreth_config(&in_force).is_err());
    }

    /// Issue 42.6: rules speak for the blocks their answer covered; past
    /// that (refreshes failing) a block has none, and the next fork is
    /// when to ask again (42.14).
    #[test]
    fn rules_cover_blocks_up_to_their_answer_and_name_when_to_ask_again() {
        let config = serde_json::json!({
            "current": fork(100, "BLS12_G1ADD", 5_007_716),
            "next": fork(300, "P256VERIFY", 5_007_716),
            "last": fork(300, "P256VERIFY", 5_007_716),
        });
        // Confirmed long ago (time 250): blocks made since have no rules.
        let rules = ChainRules::from_eth_config(&config)
            .unwrap()
            .covering_until(250);
        assert_eq!(rules.at(250).unwrap().spec, SpecId::PRAGUE);
        assert_eq!(rules.at(251), None, "past what the answer covered");
        // Confirmed until a minute from now: any time, an override's too.
        let fresh = ChainRules::from_eth_config(&config)
            .unwrap()
            .covering_until(unix_now() + 60);
        assert_eq!(fresh.at(u64::MAX / 2).unwrap().spec, SpecId::OSAKA);
        assert_eq!(rules.next_activation(200), Some(300));
        assert_eq!(rules.next_activation(300), None);
        assert!(!rules.current_lags(299));
        assert!(
            rules.current_lags(300),
            "Osaka's time passed, current still Prague"
        );
    }

    #[test]
    fn a_mirror_is_answered_the_method_the_rules_came_from() {
        let cell = RulesCell::default();
        let rules = ChainRules::from_coreth_config(&coreth_local()).unwrap();
        cell.set_with_config(rules, "{}");
        assert!(cell.config("eth_config").is_none());
        assert_eq!(cell.config("eth_getChainConfig").as_deref(), Some("{}"));
    }
}
