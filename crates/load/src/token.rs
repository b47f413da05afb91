//! A minimal ERC-20-style token, assembled by hand so no compiler is needed.
//!
//! Whatever it is called with, the runtime reads `transfer(address to,
//! uint256 amount)` arguments from calldata, adds `amount` to the balance
//! slot keyed by `to`, emits `Transfer(caller, to, amount)` and returns
//! `true`. It does not check the sender's balance: it exists to produce the
//! storage writes and `Transfer` logs a real token produces, cheaply.

use alloy_primitives::{Address, B256, Bytes, U256, keccak256};

/// `keccak256("Transfer(address,address,uint256)")`: topic 0 of every log.
pub fn transfer_topic() -> B256 {
    keccak256("Transfer(address,address,uint256)")
}

/// The 4-byte selector of `transfer(address,uint256)`.
pub const TRANSFER_SELECTOR: [u8; 4] = [0xa9, 0x05, 0x9c, 0xbb];

/// Bytes before the 32-byte topic in the runtime code.
const RUNTIME_HEAD: [u8; 16] = [
    0x60, 0x24, 0x35, // PUSH1 0x24 CALLDATALOAD        amount
    0x80, // DUP1
    0x60, 0x00, 0x52, // PUSH1 0 MSTORE              mem[0..32] = amount (log data)
    0x60, 0x04, 0x35, // PUSH1 4 CALLDATALOAD        to
    0x80, 0x54, // DUP1 SLOAD                        balance[to]
    0x82, 0x01, // DUP3 ADD                          balance[to] + amount
    0x81, 0x55, // DUP2 SSTORE                       balance[to] = …
];
/// Bytes after the topic: emit the log, return `true`.
const RUNTIME_TAIL: [u8; 15] = [
    0x60, 0x20, 0x60, 0x00, 0xa3, // PUSH1 32 PUSH1 0 LOG3(data, topic, caller, to)
    0x60, 0x01, 0x60, 0x00, 0x52, // PUSH1 1 PUSH1 0 MSTORE
    0x60, 0x20, 0x60, 0x00, 0xf3, // PUSH1 32 PUSH1 0 RETURN
];
/// Length of the runtime: head, CALLER, PUSH32 + topic, tail.
const RUNTIME_LEN: usize = RUNTIME_HEAD.len() + 1 + 33 + RUNTIME_TAIL.len();
/// Length of the constructor that copies the runtime out.
const INIT_LEN: usize = 11;

/// The deployed code.
pub fn runtime_code() -> Vec<u8> {
    let mut code = Vec::with_capacity(RUNTIME_LEN);
    code.extend_from_slice(&RUNTIME_HEAD);
    code.push(0x33); // CALLER (topic 1: from)
    code.push(0x7f); // PUSH32 (topic 0: the event signature)
    code.extend_from_slice(transfer_topic().as_slice());
    code.extend_from_slice(&RUNTIME_TAIL);
    code
}

/// The creation code: a constructor that returns [`runtime_code`].
pub fn init_code() -> Bytes {
    let runtime = runtime_code();
    let len = u8::try_from(runtime.len()).expect("runtime fits PUSH1");
    let mut code = vec![
        0x60,
        len,  // PUSH1 len
        0x80, // DUP1
        0x60,
        INIT_LEN as u8, // PUSH1 offset of runtime
        0x60,
        0x00, // PUSH1 0
        0x39, // CODECOPY(0, offset, len)
        0x60,
        0x00, // PUSH1 0
        0xf3, // RETURN(0, len)
    ];
    code.extend_from_slice(&runtime);
    code.into()
}

/// Calldata for `transfer(to, amount)`.
pub fn transfer_call(to: Address, amount: U256) -> Bytes {
    let mut data = Vec::with_capacity(68);
    data.extend_from_slice(&TRANSFER_SELECTOR);
    data.extend_from_slice(&[0u8; 12]);
    data.extend_from_slice(to.as_slice());
    data.extend_from_slice(&amount.to_be_bytes::<32>());
    data.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructor_points_at_the_runtime_it_carries() {
        let init = init_code();
        assert_eq!(init.len(), INIT_LEN + RUNTIME_LEN);
        assert_eq!(init[1] as usize, RUNTIME_LEN, "PUSH1 len");
        assert_eq!(init[4] as usize, INIT_LEN, "PUSH1 offset");
        assert_eq!(&init[INIT_LEN..], runtime_code().as_slice());
    }

    #[test]
    fn runtime_pushes_the_transfer_topic_after_caller() {
        let code = runtime_code();
        let at = RUNTIME_HEAD.len();
        assert_eq!(code[at], 0x33);
        assert_eq!(code[at + 1], 0x7f);
        assert_eq!(&code[at + 2..at + 34], transfer_topic().as_slice());
    }

    #[test]
    fn transfer_topic_is_the_erc20_event() {
        assert_eq!(
            transfer_topic().to_string(),
            "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"
        );
    }

    #[test]
    fn transfer_calldata_is_abi_encoded() {
        let to = Address::repeat_byte(0x11);
        let data = transfer_call(to, U256::from(5));
        assert_eq!(data.len(), 68);
        assert_eq!(&data[..4], &TRANSFER_SELECTOR);
        assert_eq!(&data[16..36], to.as_slice());
        assert_eq!(data[67], 5);
    }
}
