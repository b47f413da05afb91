//! The tree deserializer against serde_json's own: the same requests on
//! the same text give the same values or both fail, for serde's shapes and
//! for the alloy types verification builds from a real block.

use super::*;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// `T` read from the tree of `text` and by serde_json from the text:
/// both fail, or both give the same.
fn same<T>(text: &str)
where
    T: for<'de> Deserialize<'de> + PartialEq + std::fmt::Debug,
{
    let tree = Json::parse(text.as_bytes()).expect("parses");
    let ours = T::deserialize(&tree);
    let theirs = serde_json::from_str::<T>(text);
    match (&ours, &theirs) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "{text}"),
        (Err(_), Err(_)) => {}
        _ => panic!("{text}: tree {ours:?}, serde_json {theirs:?}"),
    }
}

#[derive(Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Shape {
    name: String,
    count: u64,
    #[serde(default)]
    maybe: Option<i32>,
    tags: Vec<String>,
}

#[derive(Debug, PartialEq, Deserialize)]
enum Choice {
    Unit,
    New(u8),
    Pair(u8, u8),
    Named { a: bool },
}

#[derive(Debug, PartialEq, Deserialize)]
#[serde(tag = "type")]
enum Tagged {
    A { x: u64 },
    B { y: String },
}

#[derive(Debug, PartialEq, Deserialize)]
#[serde(untagged)]
enum Either {
    Number(u64),
    Text(String),
}

#[derive(Debug, PartialEq, Deserialize)]
struct Borrowing<'a> {
    #[serde(borrow)]
    text: &'a str,
}

#[test]
fn typed_values_read_from_the_tree_as_from_the_text() {
    for text in [
        r#"{"name":"a","count":1,"tags":["x"],"extra":{"deep":[1,2]}}"#,
        r#"{"name":"a\u0062","count":1,"maybe":null,"tags":[]}"#,
        r#"{"name":"a","count":-1,"tags":[]}"#,
        r#"{"name":"a","count":"1","tags":[]}"#,
        r#"{"name":"a","count":1.5,"tags":[]}"#,
        r#"{"name":"a","tags":[]}"#,
        r#"["a",1,null,["t"]]"#,
        r#"["a",1,null,["t"],"more"]"#,
        r#""a""#,
    ] {
        same::<Shape>(text);
    }
    for text in [
        r#""Unit""#,
        r#"{"New":7}"#,
        r#"{"New":700}"#,
        r#"{"Pair":[1,2]}"#,
        r#"{"Pair":[1,2,3]}"#,
        r#"{"Named":{"a":true}}"#,
        r#"{"Unit":null}"#,
        r#"{"New":1,"Unit":null}"#,
        r#""Other""#,
        "5",
    ] {
        same::<Choice>(text);
    }
    for text in [
        r#"{"type":"A","x":1}"#,
        r#"{"y":"z","type":"B"}"#,
        r#"{"type":"C"}"#,
    ] {
        same::<Tagged>(text);
    }
    for text in ["1", r#""one""#, "-1", "true"] {
        same::<Either>(text);
    }
    for text in [
        r#"{"1":"a","-2":"b"}"#,
        r#"{"x":"a"}"#,
        r#"{" 1":"a"}"#,
        r#"{"1 ":"a"}"#,
    ] {
        same::<BTreeMap<i64, String>>(text);
    }
    same::<BTreeMap<bool, u8>>(r#"{"true":1,"false":0}"#);
    same::<Value>(r#"{"a":[1,-1,1.5,"s",true,null,{}],"b":"\n"}"#);
    same::<(u8, String)>(r#"[1,"a"]"#);
    same::<(u8, String)>(r#"[1,"a",2]"#);
    same::<Vec<u8>>("[1,2,256]");
    same::<char>(r#""c""#);
    same::<()>("null");
    same::<f64>("1e3");
    same::<u128>("18446744073709551615");

    let tree = Json::parse(br#"{"text":"plain"}"#).unwrap();
    assert_eq!(Borrowing::deserialize(&tree).unwrap().text, "plain");
    let escaped = Json::parse(br#"{"text":"\u0041"}"#).unwrap();
    assert!(
        Borrowing::deserialize(&escaped).is_err(),
        "as serde_json, an escaped string is not borrowed"
    );
}

/// What verification builds from a block and its receipts is the same
/// built from the tree as from the text, on a real block (transactions of
/// several types, logs).
#[test]
fn a_real_blocks_typed_values_read_the_same_from_the_tree() {
    use alloy_consensus::{Header, ReceiptEnvelope, TxEnvelope};
    use alloy_eips::eip4895::Withdrawal;
    use alloy_primitives::{Address, Log};
    use neve_devnet::conformance::fixture_result as fixture;

    let full = fixture("eth_getBlockByNumber/get-latest.io");
    let receipts = fixture("eth_getBlockReceipts/get-block-receipts-latest.io");
    let block = Json::parse(full.as_bytes()).unwrap();
    let value: Value = serde_json::from_str(&full).unwrap();
    assert_eq!(Value::deserialize(&block).unwrap(), value);
    assert_eq!(
        Header::deserialize(&block).unwrap(),
        serde_json::from_str::<Header>(&full).unwrap()
    );
    assert_eq!(
        Vec::<Withdrawal>::deserialize(block.get("withdrawals").unwrap()).unwrap(),
        serde_json::from_value::<Vec<Withdrawal>>(value["withdrawals"].clone()).unwrap()
    );
    let txs = block.get("transactions").and_then(Json::as_array).unwrap();
    assert!(txs.len() > 1);
    for tx in txs {
        let span = tx.span();
        let text = &full[span.offset as usize..(span.offset + span.len) as usize];
        assert_eq!(
            TxEnvelope::deserialize(tx).unwrap(),
            serde_json::from_str::<TxEnvelope>(text).unwrap()
        );
        assert_eq!(
            Address::deserialize(tx.get("from").unwrap()).unwrap(),
            serde_json::from_str::<Value>(text).unwrap()["from"]
                .as_str()
                .unwrap()
                .parse::<Address>()
                .unwrap()
        );
    }
    let tree = Json::parse(receipts.as_bytes()).unwrap();
    let ours = Vec::<ReceiptEnvelope<Log>>::deserialize(&tree).unwrap();
    assert!(ours.iter().any(|r| !r.logs().is_empty()));
    assert_eq!(
        ours,
        serde_json::from_str::<Vec<ReceiptEnvelope<Log>>>(&receipts).unwrap()
    );
}
