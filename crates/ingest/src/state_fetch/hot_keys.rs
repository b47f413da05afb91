//! The hot keys' file: saved while running and on stop, read back at
//! start, so a restart refreshes them instead of meeting reads with a
//! fetch each.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use neve_state::State;
use tokio::sync::watch;

use super::proof::{address20, hash32, hex};

/// How often the hot keys are written to their file, besides on stop: a
/// neve killed outright comes back with keys at most this old. Default
/// is 30 s.
pub const HOT_KEYS_SAVE_EVERY: Duration = Duration::from_secs(30);

/// Writes the hot keys every [`HOT_KEYS_SAVE_EVERY`] until stopped (the
/// binary writes them once more after serving stopped).
pub(super) async fn save_hot_keys_until_stopped(
    path: PathBuf,
    state: Arc<State>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(HOT_KEYS_SAVE_EVERY) => {}
            _ = stop.changed() => return,
        }
        let (path, state) = (path.clone(), state.clone());
        let saved = tokio::task::spawn_blocking(move || save_hot_keys(&path, &state)).await;
        if let Ok(Err(error)) = saved {
            tracing::warn!(%error, "could not save the hot keys");
        }
    }
}

/// The hot-keys file is read up to this many bytes, the rest ignored: a
/// hint must not cost a start-up an unbounded read and allocation (a
/// damaged or planted file). 16 MiB is ~150,000 keys with slots, past any
/// hot set's capacity. Default is 16 MiB.
pub const MAX_HOT_KEYS_FILE_BYTES: u64 = 16 << 20;

/// The hot keys, one a line (`0xADDRESS` or `0xADDRESS 0xSLOT`), written to
/// a temporary file, made durable, and renamed over `path` (the directory
/// synced after), so a crash or a power loss leaves the old file or the
/// new one. One save at a time in the process: the periodic one and the
/// last one on stop never write the same temporary file together.
pub fn save_hot_keys(path: &std::path::Path, state: &State) -> std::io::Result<()> {
    use std::io::Write;
    static SAVING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = SAVING.lock().unwrap_or_else(|p| p.into_inner());
    let mut text = String::new();
    for key in state.hot_keys() {
        text.push_str(&hex(&key.address));
        if let Some(slot) = key.slot {
            text.push(' ');
            text.push_str(&hex(&slot));
        }
        text.push('\n');
    }
    let partial = path.with_extension("partial");
    let mut file = std::fs::File::create(&partial)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&partial, path)?;
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => std::fs::File::open(dir)?.sync_all(),
        _ => Ok(()),
    }
}

/// Records the keys of a file [`save_hot_keys`] wrote as hot; a line that
/// does not parse is skipped (the file is a hint), and nothing past
/// [`MAX_HOT_KEYS_FILE_BYTES`] is read. Returns how many.
pub(super) fn load_hot_keys(path: &std::path::Path, state: &State) -> usize {
    use std::io::Read;
    let Ok(file) = std::fs::File::open(path) else {
        return 0;
    };
    let mut bytes = Vec::new();
    if file
        .take(MAX_HOT_KEYS_FILE_BYTES)
        .read_to_end(&mut bytes)
        .is_err()
    {
        return 0;
    }
    if bytes.len() as u64 == MAX_HOT_KEYS_FILE_BYTES {
        tracing::warn!(
            path = %path.display(),
            limit = MAX_HOT_KEYS_FILE_BYTES,
            "the hot-keys file is larger than its limit; the rest is ignored"
        );
    }
    let text = String::from_utf8_lossy(&bytes);
    let mut loaded = 0;
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let Some(Ok(address)) = words.next().map(address20) else {
            continue;
        };
        let slot = match words.next().map(hash32) {
            Some(Ok(slot)) => Some(slot),
            Some(Err(_)) => continue,
            None => None,
        };
        state.record_hot(neve_state::HotKey { address, slot });
        loaded += 1;
    }
    loaded
}
