//! A revert's message as geth writes it: `execution reverted`, plus `: `
//! and the reason when the data is an `Error(string)` or a
//! `Panic(uint256)` (geth's `abi.UnpackRevert` and its panic table).

use alloy_primitives::U256;

const ERROR_SELECTOR: [u8; 4] = [0x08, 0xc3, 0x79, 0xa0];
const PANIC_SELECTOR: [u8; 4] = [0x4e, 0x48, 0x7b, 0x71];

/// `execution reverted`, with the reason when `data` decodes to one.
pub fn revert_message(data: &[u8]) -> String {
    match reason(data) {
        Some(reason) => format!("execution reverted: {reason}"),
        None => "execution reverted".to_string(),
    }
}

fn reason(data: &[u8]) -> Option<String> {
    if data.len() < 4 {
        return None;
    }
    let (selector, body) = data.split_at(4);
    if selector == ERROR_SELECTOR {
        let word = |at: usize| -> Option<U256> {
            body.get(at..at.checked_add(32)?).map(U256::from_be_slice)
        };
        let offset = word(0)?;
        let offset: usize = offset.try_into().ok()?;
        let len: usize = word(offset)?.try_into().ok()?;
        let start = offset.checked_add(32)?;
        let text = body.get(start..start.checked_add(len)?)?;
        return Some(String::from_utf8_lossy(text).into_owned());
    }
    if selector == PANIC_SELECTOR {
        let code = U256::from_be_slice(body.get(..32)?);
        let known = match code.try_into().unwrap_or(u64::MAX) {
            0x00 => "generic panic",
            0x01 => "assert(false)",
            0x11 => "arithmetic underflow or overflow",
            0x12 => "division or modulo by zero",
            0x21 => "enum overflow",
            0x22 => "invalid encoded storage byte array accessed",
            0x31 => "out-of-bounds array access; popping on an empty array",
            0x32 => "out-of-bounds access of an array or bytesN",
            0x41 => "out of memory",
            0x51 => "uninitialized function",
            _ => return Some(format!("unknown panic code: {code:#x}")),
        };
        return Some(known.to_string());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(text: &str) -> Vec<u8> {
        alloy_primitives::hex::decode(text).unwrap()
    }

    #[test]
    fn reasons_decode_as_geth_decodes_them() {
        // The conformance case's `Error("user error")`.
        let data = hex(
            "08c379a00000000000000000000000000000000000000000000000000000000000000020000000000000000000000000000000000000000000000000000000000000000a75736572206572726f72",
        );
        assert_eq!(revert_message(&data), "execution reverted: user error");
        let panic = |code: &str| hex(&format!("4e487b71{code:0>64}"));
        assert_eq!(
            revert_message(&panic("1")),
            "execution reverted: assert(false)"
        );
        assert_eq!(
            revert_message(&panic("99")),
            "execution reverted: unknown panic code: 0x99"
        );
        assert_eq!(revert_message(&[]), "execution reverted");
        assert_eq!(
            revert_message(&hex("77726f6e672d63616c6c6461746173697a65")),
            "execution reverted"
        );
        // A string longer than the data: no reason.
        assert_eq!(
            revert_message(&data[..data.len() - 1]),
            "execution reverted"
        );
    }
}
