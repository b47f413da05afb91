//! The META file: the identity and segment sizes a store was created with.

use std::path::Path;

use crate::config::StoreConfig;
use crate::directory::list_segments;
use crate::error::{StoreError, io_error};
use crate::format::{self, FORMAT_VERSION};
use crate::segment;
use crate::types::{Identity, Meta};

const META_FILE: &str = "META";

/// The identity of the store in `dir`, if one is there and its META reads:
/// lets a store be opened while the upstream that would name the chain
/// cannot be reached.
pub fn stored_identity(dir: &Path) -> Option<Identity> {
    match format::decode_meta(&std::fs::read(dir.join(META_FILE)).ok()?) {
        format::MetaRead::Ok(meta) => Some(meta.identity),
        _ => None,
    }
}

fn write_meta(dir: &Path, meta: &Meta, config: &StoreConfig) -> Result<(), StoreError> {
    segment::write_atomically(
        dir,
        META_FILE,
        &format::encode_meta(meta),
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
        Ok(bytes) => match format::decode_meta(&bytes) {
            format::MetaRead::Ok(meta) if meta.identity == identity => Ok(meta),
            format::MetaRead::Ok(meta) => Err(StoreError::WrongChain {
                dir: dir.to_path_buf(),
                stored: meta.identity.chain_id,
                stored_genesis: hex(&meta.identity.genesis_hash),
                wanted: identity.chain_id,
                wanted_genesis: hex(&identity.genesis_hash),
            }),
            format::MetaRead::Version(found) => Err(StoreError::FormatVersion {
                dir: dir.to_path_buf(),
                found,
                expected: FORMAT_VERSION,
            }),
            format::MetaRead::Corrupt => Err(StoreError::Corrupt(format!(
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
