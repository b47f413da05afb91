//! Whether bytes of a mapping are in memory, asked of the kernel with
//! `mincore`: a read of a page that is not waits for the disk, which an
//! async worker must never do.

use std::sync::OnceLock;
use std::time::Instant;

/// A tick of [`now`]: 10 ms.
const TICK_MS: u128 = 10;

/// How long a record's head (header and fixed fields) found in memory is
/// taken to be there still: 1 s. A page evicted within it would be faulted
/// in by the worker, which only heavy memory pressure makes happen;
/// checking every read would cost the hot path a system call.
pub(crate) const FRESH_TICKS: u32 = 100;

/// Ticks since the first call, never 0 (0 means "never seen").
pub(crate) fn now() -> u32 {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    (start.elapsed().as_millis() / TICK_MS) as u32 + 1
}

/// The system's page size.
pub(crate) fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    // SAFETY: sysconf has no preconditions.
    *PAGE.get_or_init(|| {
        usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
    })
}

/// Whether every page `bytes` touches is in memory. `bytes` must lie in
/// memory this process maps (a segment, an index, the heap); anything the
/// kernel cannot answer for counts as not in memory.
pub(crate) fn in_memory(bytes: &[u8]) -> bool {
    if bytes.is_empty() {
        return true;
    }
    let page = page_size();
    let start = bytes.as_ptr() as usize & !(page - 1);
    let end = bytes.as_ptr() as usize + bytes.len();
    let pages = (end - start).div_ceil(page);
    let mut small = [0u8; 64];
    let mut large = Vec::new();
    let vector: &mut [u8] = if pages <= small.len() {
        &mut small[..pages]
    } else {
        large.resize(pages, 0);
        &mut large
    };
    // SAFETY: the range covers the pages of `bytes`, which the caller's
    // borrow keeps mapped; mincore writes one byte a page into `vector`,
    // which has room for each.
    let answered =
        unsafe { libc::mincore(start as *mut libc::c_void, end - start, vector.as_mut_ptr()) };
    answered == 0 && vector.iter().all(|v| v & 1 == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heap_bytes_are_in_memory_and_empty_ones_trivially() {
        let bytes = vec![7u8; 3 * page_size() + 17];
        assert!(in_memory(&bytes));
        assert!(in_memory(&bytes[page_size() - 1..page_size() + 1]));
        assert!(in_memory(&[]));
    }
}
