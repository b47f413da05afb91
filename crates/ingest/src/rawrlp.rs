//! Finding each transaction's EIP-2718 encoding inside a raw RLP block, so
//! `debug_getRawTransaction` can be served as a slice of the stored block,
//! and the block's items (header, transactions, uncles, …) for checking it
//! against the verified block.

use alloy_rlp::Header;
use neve_store::Span;

fn offset(outer: &[u8], inner: &[u8]) -> usize {
    inner.as_ptr() as usize - outer.as_ptr() as usize
}

/// The header item (list header included) of an RLP block `[header, …]`.
pub fn header_item(block: &[u8]) -> Result<&[u8], String> {
    let items = list_items(block)?;
    match items.first() {
        Some(header) if is_list(header) => Ok(header),
        _ => Err("first item is not a header list".into()),
    }
}

fn is_list(item: &[u8]) -> bool {
    Header::decode(&mut &item[..]).is_ok_and(|h| h.list)
}

/// `payload` wrapped as an RLP list.
pub fn rlp_list(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 9);
    Header {
        list: true,
        payload_length: payload.len(),
    }
    .encode(&mut out);
    out.extend_from_slice(payload);
    out
}

/// The items of an RLP list, each whole (its own RLP header included).
/// Nothing may follow the list.
pub fn list_items(list: &[u8]) -> Result<Vec<&[u8]>, String> {
    let rlp_error = |e: alloy_rlp::Error| e.to_string();
    let mut rest = list;
    let outer = Header::decode(&mut rest).map_err(rlp_error)?;
    if !outer.list || outer.payload_length != rest.len() {
        return Err("not one RLP list".into());
    }
    let mut items = Vec::new();
    while !rest.is_empty() {
        let start = offset(list, rest);
        let item = Header::decode(&mut rest).map_err(rlp_error)?;
        if item.payload_length > rest.len() {
            return Err("an item runs past the list".into());
        }
        rest = &rest[item.payload_length..];
        items.push(&list[start..offset(list, rest)]);
    }
    Ok(items)
}

/// Spans of the transactions of an RLP block `[header, [txs…], …]`: a legacy
/// transaction is its whole RLP list; a typed one is the payload of the RLP
/// string that wraps it (type byte and payload: its EIP-2718 encoding).
pub fn transaction_spans(block: &[u8]) -> Result<Vec<Span>, String> {
    let rlp_error = |e: alloy_rlp::Error| e.to_string();
    let items = list_items(block)?;
    let (Some(header), Some(txs)) = (items.first(), items.get(1)) else {
        return Err("not a block: no header or transaction list".into());
    };
    if !is_list(header) {
        return Err("first item is not a header list".into());
    }
    if !is_list(txs) {
        return Err("second item is not a transaction list".into());
    }
    list_items(txs)?
        .into_iter()
        .map(|item| {
            let mut payload = item;
            let header = Header::decode(&mut payload).map_err(rlp_error)?;
            let tx = if header.list { item } else { payload };
            Ok(Span::new(offset(block, tx) as u32, tx.len() as u32))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_rlp::Encodable;

    #[test]
    fn legacy_items_are_whole_lists_and_typed_items_are_string_payloads() {
        // header: [0x01], txs: [ [0x05], "\x02\xaa" ], uncles: []
        let legacy = vec![0xc1, 0x05];
        let typed: &[u8] = &[0x02, 0xaa];
        let mut txs_payload = legacy.clone();
        typed.encode(&mut txs_payload);
        let mut txs = Vec::new();
        Header {
            list: true,
            payload_length: txs_payload.len(),
        }
        .encode(&mut txs);
        txs.extend_from_slice(&txs_payload);
        let mut payload = vec![0xc1, 0x01];
        payload.extend_from_slice(&txs);
        payload.push(0xc0);
        let mut block = Vec::new();
        Header {
            list: true,
            payload_length: payload.len(),
        }
        .encode(&mut block);
        block.extend_from_slice(&payload);

        let spans = transaction_spans(&block).unwrap();
        let bytes = |s: Span| &block[s.offset as usize..(s.offset + s.len) as usize];
        assert_eq!(bytes(spans[0]), &legacy[..]);
        assert_eq!(bytes(spans[1]), typed);
    }

    #[test]
    fn list_items_are_whole_and_nothing_may_follow() {
        // [ [0x01], "\x02\xaa", 0x05 ]
        let list = [0xc6, 0xc1, 0x01, 0x82, 0x02, 0xaa, 0x05];
        let items = list_items(&list).unwrap();
        assert_eq!(items, vec![&[0xc1, 0x01][..], &[0x82, 0x02, 0xaa], &[0x05]]);
        assert!(list_items(&[0xc6, 0xc1, 0x01, 0x82, 0x02, 0xaa, 0x05, 0x00]).is_err());
        assert!(list_items(&[0xc2, 0x82, 0x02]).is_err());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(list_items(&[]).is_err());
        assert!(transaction_spans(&[]).is_err());
        assert!(transaction_spans(&[0xc5, 0x01]).is_err());
        assert!(transaction_spans(&[0x82, 0x01, 0x02]).is_err());
    }
}
