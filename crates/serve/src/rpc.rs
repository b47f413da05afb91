//! One JSON-RPC call: parse the small request, look up, answer with stored
//! bytes. The 421 decision is made here, where the miss is known.

use std::sync::Arc;

use bytes::Bytes;
use neve_store::{Block, Cold, Reader, Unread};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::ErrorCode;
use crate::params::{BlockRef, BlockTag, ParamError, Params};
use crate::state::{STATE_METHODS, touched_keys};
use crate::{ChainView, ServeConfig, logs};

/// How a call ended, for the HTTP status and the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Answered from the store.
    Ok,
    /// Not answerable with authority: HTTP 421.
    Miss,
    /// A JSON-RPC error (bad request or parameters).
    Error,
}

/// The answer to one call, before the envelope.
pub(crate) enum Reply {
    /// A result, as chunks of JSON.
    Result(Vec<Bytes>),
    /// Cannot answer with authority.
    Miss,
    /// A method neve does not serve: 421 with -32601.
    Unsupported,
    /// A JSON-RPC error.
    Error(ErrorCode, String),
    /// A state read that needs nodes neve does not hold: fetch these, then
    /// read again (a miss if that cannot be done in time).
    Fetch(Vec<neve_state::FetchRequest>),
    /// Answering needs stored pages that are not in memory: answer again
    /// where waiting for the disk is allowed ([`Reads::FromDisk`]).
    Cold,
}

/// Whether a call may wait for the disk: never on an async worker, which
/// answers [`Reply::Cold`] instead and hands the call to the I/O threads;
/// there records are read into memory of their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reads {
    InMemory,
    FromDisk,
}

/// Why dispatching stopped short of a reply.
pub(crate) enum Stop {
    Param(ParamError),
    Cold,
    /// A stored part failed its check (counted and logged by the store).
    Damaged,
}

impl From<Unread> for Stop {
    fn from(unread: Unread) -> Self {
        match unread {
            Unread::Cold => Stop::Cold,
            Unread::Damaged => Stop::Damaged,
        }
    }
}

impl From<ParamError> for Stop {
    fn from(error: ParamError) -> Self {
        Stop::Param(error)
    }
}

impl From<Cold> for Stop {
    fn from(_: Cold) -> Self {
        Stop::Cold
    }
}

impl Reply {
    pub(crate) fn json(text: impl Into<String>) -> Reply {
        Reply::Result(vec![Bytes::from(text.into())])
    }

    fn bytes(bytes: Bytes) -> Reply {
        Reply::Result(vec![bytes])
    }

    pub(crate) fn outcome(&self) -> Outcome {
        match self {
            Reply::Result(_) => Outcome::Ok,
            Reply::Miss | Reply::Unsupported | Reply::Fetch(_) | Reply::Cold => Outcome::Miss,
            Reply::Error(..) => Outcome::Error,
        }
    }
}

impl From<ParamError> for Reply {
    fn from(error: ParamError) -> Self {
        Reply::Error(ErrorCode::InvalidParams, error.0)
    }
}

/// What a call needs: the store, the upstream's view, the limits.
pub(crate) struct Context {
    pub(crate) reader: Reader,
    pub(crate) chain: Arc<dyn ChainView>,
    /// Verified state, when the state layer is on; state methods are
    /// unsupported (421, -32601) without it.
    pub(crate) state: Option<Arc<neve_state::State>>,
    /// State reads are answered (fetched through when not held), not 421.
    pub(crate) state_answers: bool,
    pub(crate) config: ServeConfig,
    pub(crate) chain_id: Bytes,
    pub(crate) net_version: Bytes,
    /// `web3_clientVersion`'s answer, as JSON.
    pub(crate) client_version: Bytes,
    /// Hex digits of the genesis hash, for `/health`.
    pub(crate) genesis_hash: String,
}

/// A request object, borrowed from the body. What makes it a valid
/// request is checked by [`Call::validate`], not by its shape, so a bad one
/// still gets its id back.
#[derive(Deserialize)]
pub(crate) struct Call<'a> {
    #[serde(borrow, default)]
    jsonrpc: Option<&'a RawValue>,
    /// `Some("null")` for `"id":null` (a call), `None` when absent (a
    /// notification).
    #[serde(borrow, default, deserialize_with = "present")]
    pub(crate) id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) method: std::borrow::Cow<'a, str>,
    #[serde(borrow, default)]
    pub(crate) params: Option<&'a RawValue>,
}

/// A member that is present, null included.
fn present<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(deserializer).map(Some)
}

/// What a request object is, judged as geth judges it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Validity {
    /// A call to answer.
    Call,
    /// A valid request without an id: nothing is answered.
    Notification,
    /// Not a request (-32600); answered with the id, or null when the id
    /// itself is the problem.
    Invalid { echo_id: bool },
}

/// A call's method and parameters, owned, to answer on another thread.
pub(crate) type OwnedCall = (String, Option<Box<RawValue>>);

impl Call<'_> {
    /// Its method and parameters, owned, to answer on another thread.
    pub(crate) fn to_owned_call(&self) -> OwnedCall {
        (self.method.to_string(), self.params.map(RawValue::to_owned))
    }

    /// JSON-RPC 2.0's rules as geth applies them: `jsonrpc` is exactly
    /// "2.0", a method is named, and an id, if any, is not an object or
    /// an array.
    pub(crate) fn validate(&self) -> Validity {
        let id_ok = self
            .id
            .is_none_or(|id| !matches!(id.get().as_bytes().first(), Some(b'{' | b'[')));
        if !id_ok {
            return Validity::Invalid { echo_id: false };
        }
        if self.jsonrpc.map(RawValue::get) != Some("\"2.0\"") || self.method.is_empty() {
            return Validity::Invalid { echo_id: true };
        }
        match self.id {
            None => Validity::Notification,
            Some(_) => Validity::Call,
        }
    }
}

/// How many positional parameters a served method takes: (required, most),
/// as geth declares them. Checked before anything is looked up.
pub(crate) fn arity(method: &str) -> Option<(usize, usize)> {
    Some(match method {
        "eth_chainId" | "net_version" | "net_listening" | "net_peerCount"
        | "web3_clientVersion" | "eth_syncing" | "eth_blockNumber" | "eth_capabilities" => (0, 0),
        "eth_getBlockByNumber"
        | "eth_getBlockByHash"
        | "eth_getTransactionByBlockNumberAndIndex"
        | "eth_getTransactionByBlockHashAndIndex"
        | "eth_getUncleByBlockNumberAndIndex"
        | "eth_getUncleByBlockHashAndIndex" => (2, 2),
        "eth_getBlockTransactionCountByNumber"
        | "eth_getBlockTransactionCountByHash"
        | "eth_getUncleCountByBlockNumber"
        | "eth_getUncleCountByBlockHash"
        | "eth_getTransactionByHash"
        | "eth_getTransactionReceipt"
        | "eth_getBlockReceipts"
        | "eth_getLogs"
        | "debug_getRawBlock"
        | "debug_getRawHeader"
        | "debug_getRawReceipts"
        | "debug_getRawTransaction"
        | "neve_getTouchedKeys" => (1, 1),
        // The block is optional for state reads: `latest` when absent.
        "eth_getBalance" | "eth_getTransactionCount" | "eth_getCode" | "eth_getStorageValues" => {
            (1, 2)
        }
        "eth_getStorageAt" | "eth_getProof" => (2, 3),
        _ => return None,
    })
}

/// The block-tail methods.
pub(crate) const BLOCK_TAIL: &[&str] = &[
    "eth_chainId",
    "net_version",
    "net_listening",
    "net_peerCount",
    "web3_clientVersion",
    "eth_syncing",
    "eth_blockNumber",
    "eth_capabilities",
    "eth_getBlockByNumber",
    "eth_getBlockByHash",
    "eth_getBlockTransactionCountByNumber",
    "eth_getBlockTransactionCountByHash",
    "eth_getTransactionByBlockNumberAndIndex",
    "eth_getTransactionByBlockHashAndIndex",
    "eth_getTransactionByHash",
    "eth_getTransactionReceipt",
    "eth_getBlockReceipts",
    "eth_getLogs",
    "eth_getUncleCountByBlockNumber",
    "eth_getUncleCountByBlockHash",
    "eth_getUncleByBlockNumberAndIndex",
    "eth_getUncleByBlockHashAndIndex",
    "debug_getRawBlock",
    "debug_getRawHeader",
    "debug_getRawReceipts",
    "debug_getRawTransaction",
    "neve_getTouchedKeys",
];

/// How many methods are counted by name in the metrics.
pub(crate) const SERVED_COUNT: usize = BLOCK_TAIL.len() + STATE_METHODS.len();

/// Every method counted by name in the metrics: the block tail, then
/// state. Anything else is "other", at index [`SERVED_COUNT`].
pub(crate) fn served() -> impl Iterator<Item = &'static str> {
    BLOCK_TAIL.iter().chain(STATE_METHODS).copied()
}

/// `method`'s index in [`served`], or [`SERVED_COUNT`] for any other.
pub(crate) fn method_index(method: &str) -> usize {
    served().position(|m| m == method).unwrap_or(SERVED_COUNT)
}

/// Whether the method at `index` (of [`method_index`]) is a state read.
pub(crate) fn is_state_method(index: usize) -> bool {
    (BLOCK_TAIL.len()..SERVED_COUNT).contains(&index)
}

fn hex_quantity(value: u64) -> String {
    format!("\"0x{value:x}\"")
}

impl Context {
    /// The height a tag stands for, if neve can answer for it.
    pub(crate) fn resolve(&self, tag: BlockTag) -> Option<u64> {
        let stats = self.reader.stats();
        let (min, max) = (stats.min_height?, stats.max_contiguous_height?);
        let height = match tag {
            BlockTag::Number(n) => n,
            // `latest` is ours only while we hold the upstream's head, or
            // the block before it for the grace after the upstream
            // announced it (what a pool of full nodes behind a balancer
            // differs by for longer).
            BlockTag::Latest => {
                // Unknown until ingest has read it: then `latest` is not ours to say.
                let head = self.chain.upstream_head()?;
                if !self.chain.following() {
                    return None;
                }
                let lag = self.config.latest_lag;
                let in_grace = head == max + lag + 1
                    && self
                        .chain
                        .upstream_head_age()
                        .is_some_and(|age| age < self.config.latest_grace);
                if head > max + lag && !in_grace {
                    return None;
                }
                max
            }
            BlockTag::Earliest => 0,
            BlockTag::Safe => self.chain.safe()?,
            BlockTag::Finalized => self.chain.finalized()?,
            BlockTag::Pending => return None,
        };
        (min..=max).contains(&height).then_some(height)
    }

    pub(crate) fn block(&self, reference: BlockRef, reads: Reads) -> Result<Option<Block>, Cold> {
        let memory = self.reader.in_memory();
        match (reference, reads) {
            (BlockRef::Tag(tag), reads) => match (self.resolve(tag), reads) {
                (None, _) => Ok(None),
                (Some(height), Reads::InMemory) => memory.block(height),
                (Some(height), Reads::FromDisk) => Ok(self.reader.from_disk().block(height)),
            },
            (BlockRef::Hash(hash), Reads::InMemory) => memory.block_by_hash(&hash),
            (BlockRef::Hash(hash), Reads::FromDisk) => {
                Ok(self.reader.from_disk().block_by_hash(&hash))
            }
        }
    }

    fn transaction(&self, hash: &[u8; 32], reads: Reads) -> Result<Option<(Block, u32)>, Cold> {
        match reads {
            Reads::InMemory => self.reader.in_memory().transaction(hash),
            Reads::FromDisk => Ok(self.reader.from_disk().transaction(hash)),
        }
    }

    /// A fresh `eth_getLogs` budget for one request.
    pub(crate) fn logs_budget(&self) -> logs::Budget {
        logs::Budget::new(
            self.config.logs_budget_blocks,
            self.config.logs_budget_bytes,
        )
    }

    /// The first half of `eth_getLogs`: parameters checked as for any call,
    /// the query resolved and its range checked, nothing scanned yet.
    pub(crate) fn logs_plan(
        &self,
        params: Option<&RawValue>,
        reads: Reads,
    ) -> Result<logs::Plan, Reply> {
        let params = Params::new(params)?;
        params.arity(1, 1)?;
        logs::plan(self, params.object(0)?, reads)
    }

    /// Answers one call; with [`Reads::InMemory`], [`Reply::Cold`] when
    /// that needs a page that is not in memory.
    pub(crate) fn call(&self, method: &str, params: Option<&RawValue>, reads: Reads) -> Reply {
        let params = match Params::new(params) {
            Ok(params) => params,
            Err(error) => return error.into(),
        };
        // A method neve does not serve is the node's to judge (421).
        if let Some((required, max)) = arity(method)
            && (self.state.is_some() || !crate::state::STATE_METHODS.contains(&method))
            && let Err(error) = params.arity(required, max)
        {
            return error.into();
        }
        match self.dispatch(method, &params, reads) {
            Ok(reply) => reply,
            Err(Stop::Param(error)) => error.into(),
            Err(Stop::Cold) => Reply::Cold,
            Err(Stop::Damaged) => Reply::Miss,
        }
    }

    fn dispatch(&self, method: &str, p: &Params<'_>, reads: Reads) -> Result<Reply, Stop> {
        let block = |reference: BlockRef| self.block(reference, reads);
        let transaction = |hash: [u8; 32]| self.transaction(&hash, reads);
        Ok(match method {
            "eth_chainId" => Reply::bytes(self.chain_id.clone()),
            "net_version" => Reply::bytes(self.net_version.clone()),
            "web3_clientVersion" => Reply::bytes(self.client_version.clone()),
            // Proxies (dshackle, proxyd) probe these to keep a backend in
            // their pool. A mirror's one peer is its upstream: 1 while
            // neve follows it and the last exchange succeeded.
            "net_listening" => Reply::bytes(Bytes::from_static(b"true")),
            "net_peerCount" => Reply::bytes(Bytes::from_static(
                if self.chain.following() && self.chain.upstream_connected() {
                    b"\"0x1\""
                } else {
                    b"\"0x0\""
                },
            )),
            "eth_syncing" => self.syncing(),
            "eth_capabilities" => self.capabilities(),
            "eth_blockNumber" => match self.resolve(BlockTag::Latest) {
                Some(height) => Reply::json(hex_quantity(height)),
                None => Reply::Miss,
            },
            "eth_getBlockByNumber" => {
                let full = p.bool_or(1, false)?;
                self.block_reply(block(BlockRef::Tag(p.block_tag(0)?))?, full)?
            }
            "eth_getBlockByHash" => {
                let full = p.bool_or(1, false)?;
                self.block_reply(block(BlockRef::Hash(p.hash(0)?))?, full)?
            }
            "eth_getBlockTransactionCountByNumber" => {
                count(block(BlockRef::Tag(p.block_tag(0)?))?, Block::tx_count)
            }
            "eth_getBlockTransactionCountByHash" => {
                count(block(BlockRef::Hash(p.hash(0)?))?, Block::tx_count)
            }
            "eth_getUncleCountByBlockNumber" => {
                count(uncle_free(block(BlockRef::Tag(p.block_tag(0)?))?)?, |_| 0)
            }
            "eth_getUncleCountByBlockHash" => {
                count(uncle_free(block(BlockRef::Hash(p.hash(0)?))?)?, |_| 0)
            }
            "eth_getUncleByBlockNumberAndIndex" => {
                let block = uncle_free(block(BlockRef::Tag(p.block_tag(0)?))?)?;
                p.quantity(1)?;
                block.map_or(Reply::Miss, |_| Reply::json("null"))
            }
            "eth_getUncleByBlockHashAndIndex" => {
                let block = uncle_free(block(BlockRef::Hash(p.hash(0)?))?)?;
                p.quantity(1)?;
                block.map_or(Reply::Miss, |_| Reply::json("null"))
            }
            "eth_getTransactionByBlockNumberAndIndex" => {
                let block = block(BlockRef::Tag(p.block_tag(0)?))?;
                by_index(block, p.quantity(1)?, Block::transaction)?
            }
            "eth_getTransactionByBlockHashAndIndex" => {
                let block = block(BlockRef::Hash(p.hash(0)?))?;
                by_index(block, p.quantity(1)?, Block::transaction)?
            }
            "eth_getTransactionByHash" => match transaction(p.hash(0)?)? {
                Some((block, index)) => block.transaction(index)?.map_or(Reply::Miss, Reply::bytes),
                None => Reply::Miss,
            },
            "eth_getTransactionReceipt" => match transaction(p.hash(0)?)? {
                Some((block, index)) => block.receipt(index)?.map_or(Reply::Miss, Reply::bytes),
                None => Reply::Miss,
            },
            "eth_getBlockReceipts" => match block(p.block_ref(0)?)? {
                Some(block) => Reply::bytes(block.receipts()?),
                None => Reply::Miss,
            },
            "eth_getLogs" => match logs::plan(self, p.object(0)?, reads) {
                Ok(plan) => logs::scan(self, &plan, &mut self.logs_budget()),
                Err(reply) => reply,
            },
            "debug_getRawHeader" => raw(block(p.block_ref(0)?)?, Block::raw_header)?,
            "debug_getRawBlock" => raw(block(p.block_ref(0)?)?, Block::raw_block)?,
            "debug_getRawReceipts" => raw(block(p.block_ref(0)?)?, Block::raw_receipts)?,
            "debug_getRawTransaction" => match transaction(p.hash(0)?)? {
                Some((block, index)) => match block.raw_transaction(index)? {
                    Some(hex) if !hex.is_empty() => Reply::Result(vec![
                        Bytes::from_static(b"\"0x"),
                        hex,
                        Bytes::from_static(b"\""),
                    ]),
                    _ => Reply::Miss,
                },
                None => Reply::Miss,
            },
            "neve_getTouchedKeys" => match &self.state {
                Some(state) => touched_keys(state, &p.hash(0)?),
                None => Reply::Unsupported,
            },
            _ => match &self.state {
                Some(state) => match self.state_call(state, method, p, reads) {
                    Some(reply) => reply?,
                    None => Reply::Unsupported,
                },
                None => Reply::Unsupported,
            },
        })
    }

    fn block_reply(&self, block: Option<Block>, full: bool) -> Result<Reply, Unread> {
        Ok(match block {
            Some(block) if full => Reply::bytes(block.full()?),
            Some(block) => Reply::bytes(block.hashes_only()?),
            None => Reply::Miss,
        })
    }

    fn syncing(&self) -> Reply {
        let stats = self.reader.stats();
        match (self.chain.upstream_head(), stats.max_contiguous_height) {
            (Some(head), Some(max))
                if head > max + self.config.latest_lag
                    && self.resolve(BlockTag::Latest).is_none() =>
            {
                Reply::json(format!(
                    "{{\"startingBlock\":{},\"currentBlock\":{},\"highestBlock\":{}}}",
                    hex_quantity(stats.min_height.unwrap_or(max)),
                    hex_quantity(max),
                    hex_quantity(head)
                ))
            }
            (_, Some(_)) => Reply::json("false"),
            // Nothing stored yet: still syncing from the start.
            (head, None) => Reply::json(format!(
                "{{\"startingBlock\":\"0x0\",\"currentBlock\":\"0x0\",\"highestBlock\":{}}}",
                hex_quantity(head.unwrap_or(0))
            )),
        }
    }
}

fn count(block: Option<Block>, f: impl Fn(&Block) -> u32) -> Reply {
    block.map_or(Reply::Miss, |b| Reply::json(hex_quantity(f(&b) as u64)))
}

/// A transaction or receipt by index: the block is ours, so an index past
/// its end is an authoritative `null`.
fn by_index(
    block: Option<Block>,
    index: u64,
    f: impl Fn(&Block, u32) -> Result<Option<Bytes>, Unread>,
) -> Result<Reply, Unread> {
    let Some(block) = block else {
        return Ok(Reply::Miss);
    };
    let found = match u32::try_from(index) {
        Ok(index) => f(&block, index)?,
        Err(_) => None,
    };
    Ok(found.map_or_else(|| Reply::json("null"), Reply::bytes))
}

/// Raw data as the upstream sent it; a block stored without it is a miss.
fn raw(block: Option<Block>, f: impl Fn(&Block) -> Result<Bytes, Unread>) -> Result<Reply, Unread> {
    Ok(match block.map(|b| f(&b)).transpose()? {
        Some(bytes) if !bytes.is_empty() => Reply::bytes(bytes),
        _ => Reply::Miss,
    })
}

/// The block, if it has no uncles. neve stores no uncle headers, so uncle
/// answers are authoritative only for blocks whose `sha3Uncles` is the hash
/// of the empty list (every block since the merge); others are misses.
fn uncle_free(block: Option<Block>) -> Result<Option<Block>, Unread> {
    const EMPTY: &[u8] =
        b"\"sha3Uncles\":\"0x1dcc4de8dec75d7aab85b567b6ccd41ad312451b948a7413f0a142fd40d49347\"";
    let Some(block) = block else {
        return Ok(None);
    };
    let header = block.hashes_only()?;
    Ok(header
        .windows(EMPTY.len())
        .any(|w| w == EMPTY)
        .then_some(block))
}
