//! Where coreth's EVM (Avalanche's C-chain, from Granite on) departs from
//! Ethereum's Cancun, as far as a call can see, and how neve follows it
//! or refuses (a miss, 421) where it cannot:
//!
//! - **Precompiles** ([`ChainPrecompiles`]). Beside Cancun's: P256VERIFY at
//!   `0x…0100` at Osaka's price; the native-asset contracts at
//!   `0x0100…0000`, `…0001` and `…0002`, deprecated, which revert with
//!   empty data and use no gas of their own, and revert with all gas used
//!   when reached by `DELEGATECALL` or `CALLCODE`; and warp at
//!   `0x0200…0005`, whose answers come from the validators' signatures in
//!   the block's header that neve does not hold: a run that reaches it is
//!   not answered. Warp is not warm (coreth leaves it out of the access
//!   list's precompiles).
//! - **Storage keys** ([`KeyedDb`]). coreth clears the low bit of a slot
//!   key's first byte before each read and write, so keys `K` and
//!   `K ^ 1 << 248` are one cell. Reads through the verified state already
//!   follow the rule; within a run revm keeps written slots by the key as
//!   given, so a run that touches both keys of one cell is not answered.
//! - **Multicoin accounts.** coreth counts an account with the multicoin
//!   flag as not empty even with no nonce, balance or code; a run that
//!   reads such an account is not answered (none can exist since Banff).
//! - The rest is in `run.rs` by [`Dialect`](crate::rules::Dialect): `PREVRANDAO`
//!   from the header's difficulty, no gas refunds, no chain id check.
//!
//! Sources: coreth v1.14.2 `params/hooks_libevm.go` (precompile sets),
//! `nativeasset/contract.go`, `precompile/contracts/warp/module.go`,
//! `core/extstate/statedb.go` (key rule), libevm's `core/vm/contracts.go`.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::OnceLock;

use alloy_primitives::{Address, B256, U256, address};
use revm::Database;
use revm::bytecode::Bytecode;
use revm::context::ContextTr;
use revm::handler::{EthPrecompiles, PrecompileProvider, precompile_output_to_interpreter_result};
use revm::interpreter::{CallInputs, CallScheme, Gas, InstructionResult, InterpreterResult};
use revm::precompile::{Precompiles, secp256r1};
use revm::primitives::AddressSet;
use revm::primitives::hardfork::SpecId;
use revm::state::AccountInfo;

use crate::rules::Dialect;

/// coreth's warp messaging precompile.
pub(crate) const WARP: Address = address!("0x0200000000000000000000000000000000000005");

/// The native-asset contracts (the first also the blackhole every block's
/// coinbase is), deprecated since Banff.
pub(crate) const NATIVE_ASSET: [Address; 3] = [
    address!("0x0100000000000000000000000000000000000000"),
    address!("0x0100000000000000000000000000000000000001"),
    address!("0x0100000000000000000000000000000000000002"),
];

/// coreth's Granite precompiles: Cancun's and P256VERIFY, and the warm
/// set (those and the native-asset contracts; not warp).
fn coreth_set() -> &'static (Precompiles, AddressSet) {
    static SET: OnceLock<(Precompiles, AddressSet)> = OnceLock::new();
    SET.get_or_init(|| {
        let mut precompiles = Precompiles::cancun().clone();
        precompiles.extend([secp256r1::P256VERIFY_OSAKA]);
        let mut warm = precompiles.addresses_set().clone();
        warm.extend(NATIVE_ASSET);
        (precompiles, warm)
    })
}

/// The precompiles of a chain's dialect: Ethereum's for its spec, or
/// coreth's (see the module's doc).
pub(crate) struct ChainPrecompiles {
    ethereum: EthPrecompiles,
    coreth: bool,
    /// A run reached warp: its result is not an answer.
    pub(crate) reached_warp: bool,
}

impl ChainPrecompiles {
    pub(crate) fn new(dialect: Dialect, spec: SpecId) -> Self {
        ChainPrecompiles {
            ethereum: EthPrecompiles::new(spec),
            coreth: dialect == Dialect::Coreth,
            reached_warp: false,
        }
    }
}

impl<CTX: ContextTr> PrecompileProvider<CTX> for ChainPrecompiles {
    type Output = InterpreterResult;

    fn set_spec(&mut self, spec: <CTX::Cfg as revm::context::Cfg>::Spec) -> bool {
        <EthPrecompiles as PrecompileProvider<CTX>>::set_spec(&mut self.ethereum, spec)
    }

    fn run(
        &mut self,
        context: &mut CTX,
        inputs: &CallInputs,
    ) -> Result<Option<InterpreterResult>, String> {
        if !self.coreth {
            return self.ethereum.run(context, inputs);
        }
        let at = inputs.bytecode_address;
        let reverted =
            |gas: Gas| InterpreterResult::new(InstructionResult::Revert, Default::default(), gas);
        if at == WARP {
            self.reached_warp = true;
            return Ok(Some(reverted(Gas::new(inputs.gas_limit))));
        }
        if NATIVE_ASSET.contains(&at) {
            let mut gas = Gas::new(inputs.gas_limit);
            // From Granite, reached by another account's context, a
            // stateful precompile reverts with all gas used.
            if matches!(
                inputs.scheme,
                CallScheme::DelegateCall | CallScheme::CallCode
            ) {
                gas.spend_all();
            }
            return Ok(Some(reverted(gas)));
        }
        let Some(precompile) = coreth_set().0.get(&at) else {
            return Ok(None);
        };
        let output = precompile
            .execute(
                &inputs.input.as_bytes(context),
                inputs.gas_limit,
                inputs.reservoir,
            )
            .map_err(|e| e.to_string())?;
        Ok(Some(precompile_output_to_interpreter_result(
            output,
            inputs.gas_limit,
        )))
    }

    fn warm_addresses(&self) -> &AddressSet {
        if self.coreth {
            &coreth_set().1
        } else {
            self.ethereum.warm_addresses()
        }
    }

    fn contains(&self, address: &Address) -> bool {
        if self.coreth {
            coreth_set().1.contains(address) || *address == WARP
        } else {
            self.ethereum.contains(address)
        }
    }
}

/// A database with coreth's storage key rule applied to every slot a run
/// asks for (overrides included, as coreth applies it: `state` as given,
/// `stateDiff` by the rule), noting a run that asked for both keys of one
/// cell. Under Ethereum's rule it passes every read through.
pub struct KeyedDb<'a, DB> {
    inner: DB,
    coreth: bool,
    /// Each cell's key as the run first asked it.
    asked: HashMap<(Address, U256), U256>,
    /// Set when the run asked for one cell by both its keys.
    aliased: &'a Cell<bool>,
}

impl<'a, DB> KeyedDb<'a, DB> {
    /// `inner` under `dialect`'s rule; `aliased` is set if a run asks for
    /// one cell by both its keys.
    pub(crate) fn new(inner: DB, dialect: Dialect, aliased: &'a Cell<bool>) -> Self {
        KeyedDb {
            inner,
            coreth: dialect == Dialect::Coreth,
            asked: HashMap::new(),
            aliased,
        }
    }

    /// The database below.
    pub(crate) fn inner(&self) -> &DB {
        &self.inner
    }
}

/// The cell coreth keeps `slot` in.
pub(crate) fn cell(slot: U256) -> U256 {
    slot & !(U256::from(1u8) << 248usize)
}

impl<DB: Database> Database for KeyedDb<'_, DB> {
    type Error = DB::Error;

    fn basic(&mut self, address: Address) -> Result<Option<AccountInfo>, Self::Error> {
        self.inner.basic(address)
    }

    fn code_by_hash(&mut self, code_hash: B256) -> Result<Bytecode, Self::Error> {
        self.inner.code_by_hash(code_hash)
    }

    fn storage(&mut self, address: Address, index: U256) -> Result<U256, Self::Error> {
        if !self.coreth {
            return self.inner.storage(address, index);
        }
        let key = cell(index);
        let first = *self.asked.entry((address, key)).or_insert(index);
        if first != index {
            self.aliased.set(true);
        }
        self.inner.storage(address, key)
    }

    fn block_hash(&mut self, number: u64) -> Result<B256, Self::Error> {
        self.inner.block_hash(number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use revm::database::{CacheDB, EmptyDB};

    #[test]
    fn both_keys_of_one_cell_are_noted_and_read_as_one() {
        let token = Address::repeat_byte(7);
        let mut cache = CacheDB::new(EmptyDB::default());
        cache
            .insert_account_storage(token, U256::from(2), U256::from(42))
            .unwrap();
        let aliased = Cell::new(false);
        let mut db = KeyedDb::new(cache, Dialect::Coreth, &aliased);
        let odd = U256::from(2) | U256::from(1u8) << 248usize;
        assert_eq!(db.storage(token, odd).unwrap(), U256::from(42));
        assert!(!aliased.get());
        assert_eq!(db.storage(token, U256::from(2)).unwrap(), U256::from(42));
        assert!(aliased.get());
        let mut plain = KeyedDb::new(
            CacheDB::new(EmptyDB::default()),
            Dialect::Ethereum,
            &aliased,
        );
        assert_eq!(plain.storage(token, odd).unwrap(), U256::ZERO);
    }

    #[test]
    fn coreths_warm_set_has_the_native_asset_contracts_and_p256_not_warp() {
        let (precompiles, warm) = coreth_set();
        assert!(warm.contains(&NATIVE_ASSET[0]) && warm.contains(&NATIVE_ASSET[2]));
        assert!(precompiles.contains(&address!("0x0000000000000000000000000000000000000100")));
        assert!(precompiles.contains(&address!("0x000000000000000000000000000000000000000a")));
        assert!(!warm.contains(&WARP));
        assert!(!precompiles.contains(&address!("0x000000000000000000000000000000000000000b")));
    }
}
