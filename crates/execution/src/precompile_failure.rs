//! geth's words for a call made straight to a precompile that refuses its
//! input. revm names why (its `PrecompileHalt`, as text); geth answers the
//! precompile's own error as the call's message (`core/vm/contracts.go`).
//! Where revm's reason is one geth message for that precompile, that
//! message is the answer; where it could be more than one, or geth's text
//! comes from a library of its own (gnark's field decoding, the KZG
//! verifier's detail), the call is a miss and the node answers it.
//! Precompiles reached from contract code never get here: their failure is
//! the calling instruction's, not a message.

use alloy_primitives::Address;
use alloy_primitives::U256;
use revm::precompile::PrecompileHalt;
use revm::primitives::hardfork::SpecId;

/// A top-level call: whom it called, with what, under which rules.
pub(crate) struct TopCall<'a> {
    /// The callee.
    pub(crate) to: Option<Address>,
    /// Its input.
    pub(crate) input: &'a [u8],
    /// Its gas limit.
    pub(crate) gas_limit: u64,
    /// The rules it ran under.
    pub(crate) spec: SpecId,
    /// Whether it carries an access or authorization list (which add to
    /// its intrinsic cost).
    pub(crate) lists: bool,
}

/// geth's message for the top-level precompile failure revm reported as
/// `reason`, in `call`; `None` where neve cannot be sure of it.
pub(crate) fn geth_words(reason: &str, call: &TopCall<'_>) -> Option<&'static str> {
    let (to, spec) = (call.to, call.spec);
    let is = |halt: PrecompileHalt| halt.to_string() == reason;
    let index = to.and_then(|to| {
        let bytes = to.0.0;
        bytes[..18]
            .iter()
            .all(|b| *b == 0)
            .then(|| u16::from_be_bytes([bytes[18], bytes[19]]))
    });
    const INPUT_LENGTH: &str = "invalid input length";
    let bls_input_lengths = [
        PrecompileHalt::Bls12381G1AddInputLength,
        PrecompileHalt::Bls12381G1MsmInputLength,
        PrecompileHalt::Bls12381G2AddInputLength,
        PrecompileHalt::Bls12381G2MsmInputLength,
        PrecompileHalt::Bls12381PairingInputLength,
        PrecompileHalt::Bls12381MapFpToG1InputLength,
        PrecompileHalt::Bls12381MapFp2ToG2InputLength,
    ];
    Some(match index? {
        5 if is(PrecompileHalt::ModexpEip7823LimitSize) => modexp_past_its_lengths(call, spec)?,
        // Only G1 points: off the curve is the one message (bn254's G1 has
        // no other subgroup).
        6 | 7 if is(PrecompileHalt::Bn254AffineGFailedToCreate) => "point is not on curve",
        8 if is(PrecompileHalt::Bn254PairLength) => "bad elliptic curve pairing size",
        9 if is(PrecompileHalt::Blake2WrongLength) => INPUT_LENGTH,
        9 if is(PrecompileHalt::Blake2WrongFinalIndicatorFlag) => "invalid final flag",
        10 if is(PrecompileHalt::BlobInvalidInputLength) => INPUT_LENGTH,
        10 if is(PrecompileHalt::BlobMismatchedVersion) => "mismatched versioned hash",
        11..=17 if bls_input_lengths.into_iter().any(is) => INPUT_LENGTH,
        11..=17 if is(PrecompileHalt::Bls12381FpPaddingInvalid) => {
            "invalid field element top bytes"
        }
        11..=17
            if is(PrecompileHalt::Bls12381G1NotOnCurve)
                || is(PrecompileHalt::Bls12381G2NotOnCurve) =>
        {
            "invalid point: not on curve"
        }
        11..=17 if is(PrecompileHalt::Bls12381G1NotInSubgroup) => {
            "g1 point is not on correct subgroup"
        }
        11..=17 if is(PrecompileHalt::Bls12381G2NotInSubgroup) => {
            "g2 point is not on correct subgroup"
        }
        _ => return None,
    })
}

/// geth's answer to a MODEXP call revm refused for its lengths. Before
/// Osaka that is a length past 64 bits, whose gas geth takes as MaxUint64:
/// out of gas. From Osaka on geth charges EIP-7883's gas first (out of gas
/// when the call cannot pay it, or when it passes 64 bits), then refuses
/// EIP-7823's lengths; where the gas left after the call's intrinsic cost
/// is not known closely enough to tell which (access or authorization
/// lists add to it), `None`.
fn modexp_past_its_lengths(call: &TopCall<'_>, spec: SpecId) -> Option<&'static str> {
    let (input, gas_limit) = (call.input, call.gas_limit);
    const OUT_OF_GAS: &str = "out of gas";
    if !spec.is_enabled_in(SpecId::OSAKA) {
        return Some(OUT_OF_GAS);
    }
    let Some(gas) = osaka_modexp_gas(input) else {
        return Some(OUT_OF_GAS);
    };
    // The intrinsic cost is at most 21,000 and EIP-7623's floor of 40 a
    // byte of input.
    let intrinsic_at_most = 21_000 + 40 * input.len() as u64;
    if gas > gas_limit {
        Some(OUT_OF_GAS)
    } else if !call.lists && gas.saturating_add(intrinsic_at_most) <= gas_limit {
        Some("one or more of base/exponent/modulus length exceeded 1024 bytes")
    } else {
        None
    }
}

/// MODEXP's gas from Osaka on (EIP-7883, as geth computes it); `None`
/// past 64 bits.
fn osaka_modexp_gas(input: &[u8]) -> Option<u64> {
    let word = |at: usize| {
        let mut bytes = [0u8; 32];
        if let Some(part) = input.get(at..) {
            let n = part.len().min(32);
            bytes[..n].copy_from_slice(&part[..n]);
        }
        U256::from_be_bytes(bytes)
    };
    let (base_len, exp_len, mod_len) = (word(0), word(32), word(64));
    let longest = base_len.max(mod_len);
    let complexity: u64 = if longest <= U256::from(32) {
        16
    } else {
        let words = u64::try_from(longest.checked_add(U256::from(7))? / U256::from(8)).ok()?;
        words.checked_mul(words)?.checked_mul(2)?
    };
    // The exponent's first 32 bytes (fewer if it is shorter), after the
    // base.
    let head_len = exp_len.min(U256::from(32)).to::<usize>();
    let head = match usize::try_from(base_len)
        .ok()
        .and_then(|b| b.checked_add(96))
    {
        Some(at) => {
            let mut bytes = [0u8; 32];
            if let Some(part) = input.get(at..) {
                let n = part.len().min(head_len);
                bytes[32 - head_len..32 - head_len + n].copy_from_slice(&part[..n]);
            }
            U256::from_be_bytes(bytes)
        }
        None => U256::ZERO,
    };
    let head_bits = head.bit_len() as u64;
    let iterations: u64 = if exp_len <= U256::from(32) {
        head_bits.saturating_sub(1)
    } else {
        let extra = u64::try_from(exp_len - U256::from(32)).ok()?;
        extra
            .checked_mul(16)?
            .checked_add(head_bits.saturating_sub(1))?
    };
    Some(complexity.checked_mul(iterations.max(1))?.max(500))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(to: Option<Address>, spec: SpecId) -> TopCall<'static> {
        TopCall {
            to,
            input: &[],
            gas_limit: 50_000_000,
            spec,
            lists: false,
        }
    }

    fn at(index: u16) -> Option<Address> {
        Some(Address::left_padding_from(&index.to_be_bytes()))
    }

    #[test]
    fn known_failures_get_geths_words_and_the_rest_are_misses() {
        let reason = |halt: PrecompileHalt| halt.to_string();
        assert_eq!(
            geth_words(
                &reason(PrecompileHalt::ModexpEip7823LimitSize),
                &call(at(5), SpecId::OSAKA)
            ),
            Some("one or more of base/exponent/modulus length exceeded 1024 bytes")
        );
        assert_eq!(
            geth_words(
                &reason(PrecompileHalt::Bls12381PairingInputLength),
                &call(at(15), SpecId::OSAKA)
            ),
            Some("invalid input length")
        );
        assert_eq!(
            geth_words(
                &reason(PrecompileHalt::Bn254AffineGFailedToCreate),
                &call(at(7), SpecId::OSAKA)
            ),
            Some("point is not on curve")
        );
        // A pairing's point may be off the curve or outside G2's subgroup:
        // two messages in geth, one reason in revm.
        assert_eq!(
            geth_words(
                &reason(PrecompileHalt::Bn254AffineGFailedToCreate),
                &call(at(8), SpecId::OSAKA)
            ),
            None
        );
        // gnark words a non-canonical field element itself.
        assert_eq!(
            geth_words(
                &reason(PrecompileHalt::Bn254FieldPointNotAMember),
                &call(at(6), SpecId::OSAKA)
            ),
            None
        );
        assert_eq!(
            geth_words("anything", &call(at(0x100), SpecId::OSAKA)),
            None
        );
        assert_eq!(geth_words("anything", &call(None, SpecId::OSAKA)), None);
    }

    /// Issue 42.11: before Osaka, MODEXP lengths past 64 bits are out of
    /// gas in geth, not EIP-7823's limit.
    #[test]
    fn modexp_lengths_past_64_bits_are_out_of_gas_before_osaka() {
        let limit = PrecompileHalt::ModexpEip7823LimitSize.to_string();
        assert_eq!(
            geth_words(&limit, &call(at(5), SpecId::PRAGUE)),
            Some("out of gas")
        );
        // From Osaka on: gas first (a 2^64-byte base cannot pay), then
        // EIP-7823's lengths (a 1,025-byte base, exponent 0, can).
        let lengths = |base: U256, exp: U256, modulus: U256| -> Vec<u8> {
            [base, exp, modulus]
                .iter()
                .flat_map(|v| v.to_be_bytes::<32>())
                .collect()
        };
        let osaka = |input: &[u8]| {
            geth_words(
                &limit,
                &TopCall {
                    to: at(5),
                    input,
                    gas_limit: 50_000_000,
                    spec: SpecId::OSAKA,
                    lists: false,
                },
            )
        };
        let huge = lengths(U256::from(1) << 64, U256::ZERO, U256::from(1));
        assert_eq!(osaka(&huge), Some("out of gas"));
        let long = lengths(U256::from(1025), U256::ZERO, U256::ZERO);
        assert_eq!(
            osaka(&long),
            Some("one or more of base/exponent/modulus length exceeded 1024 bytes")
        );
    }
}
