//! A simulated block's precompiles: the fork's, with the block's state
//! overrides' moves (`movePrecompileToAddress`) and removals (an
//! overridden precompile is an account like any other), as geth's
//! `StateOverride.Apply` rearranges them. Warm addresses stay the fork's:
//! geth warms `ActivePrecompiles(rules)`, not the moved set.

use std::collections::{HashMap, HashSet};

use alloy_primitives::Address;
use revm::context::ContextTr;
use revm::handler::{EthPrecompiles, PrecompileProvider};
use revm::interpreter::{CallInputs, InterpreterResult};
use revm::primitives::AddressSet;
use revm::primitives::hardfork::SpecId;

pub(crate) struct SimPrecompiles {
    ethereum: EthPrecompiles,
    /// Where a precompile now runs: destination → the precompile's own
    /// address.
    moved: HashMap<Address, Address>,
    /// Precompile addresses that are accounts now.
    removed: HashSet<Address>,
}

impl SimPrecompiles {
    pub(crate) fn new(spec: SpecId) -> Self {
        SimPrecompiles {
            ethereum: EthPrecompiles::new(spec),
            moved: HashMap::new(),
            removed: HashSet::new(),
        }
    }

    /// Whether `address` runs a precompile now.
    pub(crate) fn contains(&self, address: &Address) -> bool {
        self.moved.contains_key(address)
            || (!self.removed.contains(address) && self.ethereum.precompiles.contains(address))
    }

    /// The precompile now at `from` runs at `to` as well.
    pub(crate) fn move_to(&mut self, from: Address, to: Address) {
        let original = self.moved.get(&from).copied().unwrap_or(from);
        self.moved.insert(to, original);
    }

    /// `address` is no longer a precompile.
    pub(crate) fn remove(&mut self, address: &Address) {
        self.moved.remove(address);
        self.removed.insert(*address);
    }
}

impl<CTX: ContextTr> PrecompileProvider<CTX> for SimPrecompiles {
    type Output = InterpreterResult;

    fn set_spec(&mut self, spec: <CTX::Cfg as revm::context::Cfg>::Spec) -> bool {
        <EthPrecompiles as PrecompileProvider<CTX>>::set_spec(&mut self.ethereum, spec)
    }

    fn run(
        &mut self,
        context: &mut CTX,
        inputs: &CallInputs,
    ) -> Result<Option<InterpreterResult>, String> {
        let at = inputs.bytecode_address;
        if let Some(original) = self.moved.get(&at) {
            let mut moved = inputs.clone();
            moved.bytecode_address = *original;
            return self.ethereum.run(context, &moved);
        }
        if self.removed.contains(&at) {
            return Ok(None);
        }
        self.ethereum.run(context, inputs)
    }

    fn warm_addresses(&self) -> &AddressSet {
        self.ethereum.warm_addresses()
    }

    fn contains(&self, address: &Address) -> bool {
        SimPrecompiles::contains(self, address)
    }
}
