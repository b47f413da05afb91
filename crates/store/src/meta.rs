//! The META file: the identity and segment sizes a store was created with.

use std::path::Path;

use crate::config::StoreConfig;
use crate::directory::{self, list_segments};
use crate::error::{StoreError, io_error};
use crate::format::{FORMAT_VERSION, META_LEN, META_MAGIC, hash_at, readable, u32_at, u64_at};
use crate::types::{Identity, Meta};

const META_FILE: &str = "META";

/// The identity of the store in `dir`, if one is there and its META reads:
/// lets a store be opened while the upstream that would name the chain
/// cannot be reached.
pub fn stored_identity(dir: &Path) -> Option<Identity> {
    match decode_meta(&std::fs::read(dir.join(META_FILE)).ok()?) {
        MetaRead::Ok(meta) => Some(meta.identity),
        _ => None,
    }
}

fn write_meta(dir: &Path, meta: &Meta, config: &StoreConfig) -> Result<(), StoreError> {
    directory::write_atomically(
        dir,
        META_FILE,
        &encode_meta(meta),
        config.crash_hook.as_deref(),
    )
}

pub(crate) fn open_meta(
    dir: &Path,
    identity: Identity,
    config: &StoreConfig,
) -> Result<Meta, StoreError> {
    let path = dir.join(META_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => match decode_meta(&bytes) {
            MetaRead::Ok(meta) if meta.identity == identity => Ok(meta),
            MetaRead::Ok(meta) => Err(StoreError::WrongChain {
                dir: dir.to_path_buf(),
                stored: meta.identity.chain_id,
                stored_genesis: hex(&meta.identity.genesis_hash),
                wanted: identity.chain_id,
                wanted_genesis: hex(&identity.genesis_hash),
            }),
            MetaRead::Version(found) => Err(StoreError::FormatVersion {
                dir: dir.to_path_buf(),
                found,
                expected: FORMAT_VERSION,
            }),
            MetaRead::Corrupt => Err(StoreError::Corrupt(format!(
                "{} is damaged",
                path.display()
            ))),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if !list_segments(dir)?.is_empty() {
                return Err(StoreError::Corrupt(format!(
                    "{} holds segments but no META",
                    dir.display()
                )));
            }
            if config.segment_blocks == 0 || config.segment_bytes < 4096 {
                return Err(StoreError::Corrupt("segment size too small".into()));
            }
            let meta = Meta {
                identity,
                segment_blocks: config.segment_blocks,
                segment_bytes: config.segment_bytes,
            };
            write_meta(dir, &meta, config)?;
            Ok(meta)
        }
        Err(e) => Err(io_error(&path, "reading")(e)),
    }
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::from("0x");
    for b in bytes {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Encodes the META file.
pub(crate) fn encode_meta(meta: &Meta) -> [u8; META_LEN] {
    let mut out = [0u8; META_LEN];
    out[0..8].copy_from_slice(&META_MAGIC);
    out[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    out[12..16].copy_from_slice(&meta.segment_blocks.to_le_bytes());
    out[16..24].copy_from_slice(&meta.identity.chain_id.to_le_bytes());
    out[24..56].copy_from_slice(&meta.identity.genesis_hash);
    out[56..64].copy_from_slice(&meta.segment_bytes.to_le_bytes());
    let crc = crc32c::crc32c(&out[..68]);
    out[68..72].copy_from_slice(&crc.to_le_bytes());
    out
}

/// What a META file says, or why it says nothing usable.
pub(crate) enum MetaRead {
    Ok(Meta),
    Corrupt,
    Version(u32),
}

/// Reads a META file.
pub(crate) fn decode_meta(bytes: &[u8]) -> MetaRead {
    if bytes.len() != META_LEN || bytes[0..8] != META_MAGIC {
        return MetaRead::Corrupt;
    }
    if u32_at(bytes, 68) != crc32c::crc32c(&bytes[..68]) {
        return MetaRead::Corrupt;
    }
    let version = u32_at(bytes, 8);
    if !readable(version) {
        return MetaRead::Version(version);
    }
    MetaRead::Ok(Meta {
        segment_blocks: u32_at(bytes, 12),
        identity: Identity {
            chain_id: u64_at(bytes, 16),
            genesis_hash: hash_at(bytes, 24),
        },
        segment_bytes: u64_at(bytes, 56),
    })
}
