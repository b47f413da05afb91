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
use revm::precompile::PrecompileHalt;

/// geth's message for the top-level precompile failure revm reported as
/// `reason`, in a call to `to`; `None` where neve cannot be sure of it.
pub(crate) fn geth_words(reason: &str, to: Option<Address>) -> Option<&'static str> {
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
        5 if is(PrecompileHalt::ModexpEip7823LimitSize) => {
            "one or more of base/exponent/modulus length exceeded 1024 bytes"
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn at(index: u16) -> Option<Address> {
        Some(Address::left_padding_from(&index.to_be_bytes()))
    }

    #[test]
    fn known_failures_get_geths_words_and_the_rest_are_misses() {
        let reason = |halt: PrecompileHalt| halt.to_string();
        assert_eq!(
            geth_words(&reason(PrecompileHalt::ModexpEip7823LimitSize), at(5)),
            Some("one or more of base/exponent/modulus length exceeded 1024 bytes")
        );
        assert_eq!(
            geth_words(&reason(PrecompileHalt::Bls12381PairingInputLength), at(15)),
            Some("invalid input length")
        );
        assert_eq!(
            geth_words(&reason(PrecompileHalt::Bn254AffineGFailedToCreate), at(7)),
            Some("point is not on curve")
        );
        // A pairing's point may be off the curve or outside G2's subgroup:
        // two messages in geth, one reason in revm.
        assert_eq!(
            geth_words(&reason(PrecompileHalt::Bn254AffineGFailedToCreate), at(8)),
            None
        );
        // gnark words a non-canonical field element itself.
        assert_eq!(
            geth_words(&reason(PrecompileHalt::Bn254FieldPointNotAMember), at(6)),
            None
        );
        assert_eq!(geth_words("anything", at(0x100)), None);
        assert_eq!(geth_words("anything", None), None);
    }
}
