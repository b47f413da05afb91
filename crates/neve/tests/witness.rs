//! geth's execution witnesses against neve's verifier: for every block of
//! a chain of `neve load` traffic, `debug_executionWitness` answered by a
//! live geth is walked from the parent's `stateRoot` (`neve_state::
//! verify_witness`), and every node and code geth sends is reached (none
//! is stray), what the block's replay reads among them. The witness's size
//! is reported beside the block's. neve, mirroring that geth, serves
//! each block's witness (fetched through, verified, kept) as geth's bytes.

mod support;

use neve_upstream::{RpcClient, quantity};
use serde_json::{Value, json};

fn bytes_of(hex: &Value) -> alloy_primitives::bytes::Bytes {
    alloy_primitives::hex::decode(hex.as_str().unwrap())
        .unwrap()
        .into()
}

#[tokio::test(flavor = "multi_thread")]
async fn gets_witnesses_are_reached_whole_from_the_parents_root() {
    let (node, head) = support::chain_with_logs().await;
    let geth = RpcClient::new(node.http_url()).unwrap();
    let neve = support::Neve::start(node.http_url(), &["--floor", "0"], head).await;
    let client = RpcClient::new(&neve.url).unwrap();
    let (mut blocks, mut witness_bytes, mut block_bytes) = (0, 0, 0);
    for number in 1..=head {
        let block: Value = geth
            .call("eth_getBlockByNumber", json!([quantity(number), false]))
            .await
            .unwrap();
        if block["transactions"].as_array().unwrap().is_empty() {
            continue;
        }
        let parent: Value = geth
            .call("eth_getBlockByNumber", json!([quantity(number - 1), false]))
            .await
            .unwrap();
        let root: [u8; 32] = alloy_primitives::hex::decode(parent["stateRoot"].as_str().unwrap())
            .unwrap()
            .try_into()
            .unwrap();
        let witness: Value = geth
            .call("debug_executionWitness", json!([quantity(number)]))
            .await
            .unwrap();
        let nodes: Vec<alloy_primitives::bytes::Bytes> = witness["state"]
            .as_array()
            .unwrap()
            .iter()
            .map(bytes_of)
            .collect();
        let codes: Vec<alloy_primitives::bytes::Bytes> = witness["codes"]
            .as_array()
            .unwrap()
            .iter()
            .map(bytes_of)
            .collect();
        let witnessed = neve_state::verify_witness(&root, &nodes, &codes).unwrap();
        assert_eq!(
            witnessed.dropped,
            0,
            "block {number}: {} of {} nodes and {} codes reached",
            witnessed.nodes,
            nodes.len(),
            codes.len()
        );
        assert!(witnessed.nodes > 0, "block {number}");
        // neve's, by number (fetched through) and by hash (kept): geth's
        // bytes.
        for at in [json!(quantity(number)), block["hash"].clone()] {
            support::calls::same_bytes(&client, &geth, "debug_executionWitness", &json!([at]))
                .await;
        }
        blocks += 1;
        witness_bytes += witnessed.bytes;
        let size = neve_upstream::parse_quantity(block["size"].as_str().unwrap()).unwrap();
        block_bytes += size as usize;
    }
    assert!(blocks > 0);
    let fetched = support::calls::metric(&neve, "neve_state_witnesses_fetched_total");
    assert_eq!(fetched, blocks, "one upstream witness a block");
    let held = support::calls::metric(&neve, "neve_state_witness_bytes");
    eprintln!("neve holds {held} bytes of witnesses as served");
    eprintln!(
        "{blocks} blocks: witnesses {witness_bytes} bytes of nodes and codes, blocks {block_bytes} bytes ({:.1}x)",
        witness_bytes as f64 / block_bytes.max(1) as f64
    );
}
