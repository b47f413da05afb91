//! Whether bytes of a mapping are in memory, asked of the kernel with
//! `mincore`: a read of a page that is not waits for the disk, which an
//! async worker must never do.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
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

/// Room the memory cgroup neve runs in must have left (its limit less its
/// usage, page cache included) for a part read from the disk to go through
/// the page cache: 64 MiB. With less, parts are read with `O_DIRECT`, so a
/// memory-limited neve serving a store larger than its limit does not
/// make the kernel reclaim on every read (measured: 2,929 full blocks a
/// second through the page cache, 16,213 with `O_DIRECT`, in a 160 MiB
/// group). With more (or no limit), a part read from the disk stays in the
/// page cache, so a part evicted once (memory pressure, a host reclaiming
/// an idle guest's cache) is answered on the async workers again from its
/// next read instead of on the I/O threads for good.
pub(crate) const MIN_PAGE_CACHE_ROOM: u64 = 64 << 20;

/// Whether a read of `len` bytes from the disk should go through the page
/// cache (see [`MIN_PAGE_CACHE_ROOM`]). The cgroup is asked at most once
/// every [`FRESH_TICKS`] (two small file reads); what it had room for
/// beyond the minimum is then a budget the reads spend until the next
/// time, so reads at thousands a second cannot fill the group in between
/// and make it reclaim (which stalls every thread that allocates, the
/// async workers included).
pub(crate) fn page_cache_room_for(len: usize) -> bool {
    static CHECKED_AT: AtomicU32 = AtomicU32::new(0);
    static BUDGET: AtomicI64 = AtomicI64::new(0);
    let now = now();
    let at = CHECKED_AT.load(Ordering::Relaxed);
    if at == 0 || now.wrapping_sub(at) >= FRESH_TICKS {
        CHECKED_AT.store(now, Ordering::Relaxed);
        let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let read = |path: &str| std::fs::read_to_string(path).ok();
        let budget = cgroup_room(&cgroups, read).map_or(i64::MAX, |room| {
            i64::try_from(room.saturating_sub(MIN_PAGE_CACHE_ROOM)).unwrap_or(i64::MAX)
        });
        BUDGET.store(budget, Ordering::Relaxed);
    }
    let len = i64::try_from(len).unwrap_or(i64::MAX);
    BUDGET.fetch_sub(len, Ordering::Relaxed) >= len
}

/// The memory cgroup's limit less its usage, from `/proc/self/cgroup`'s
/// text and a reader of its files (v2: `memory.max` and `memory.current`;
/// v1: `memory.limit_in_bytes` and `memory.usage_in_bytes`); `None` when
/// no limit is set (v2 says `max`) or none can be read. The group's own
/// limit only, not its parents'.
fn cgroup_room(cgroups: &str, read: impl Fn(&str) -> Option<String>) -> Option<u64> {
    for line in cgroups.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let (limit, usage) = if controllers.is_empty() {
            (
                format!("/sys/fs/cgroup{path}/memory.max"),
                format!("/sys/fs/cgroup{path}/memory.current"),
            )
        } else if controllers.split(',').any(|c| c == "memory") {
            (
                format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes"),
                format!("/sys/fs/cgroup/memory{path}/memory.usage_in_bytes"),
            )
        } else {
            continue;
        };
        let number = |path: &str| read(path)?.trim().parse::<u64>().ok();
        if let (Some(limit), Some(usage)) = (number(&limit), number(&usage)) {
            return Some(limit.saturating_sub(usage));
        }
    }
    None
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

    #[test]
    fn the_cgroups_room_is_its_limit_less_its_usage_when_it_has_one() {
        let files = |limit: &'static str, usage: &'static str| {
            move |path: &str| {
                Some(
                    if path.ends_with("max") || path.ends_with("limit_in_bytes") {
                        limit.to_owned()
                    } else {
                        usage.to_owned()
                    },
                )
            }
        };
        let v2 = "0::/neve.service\n";
        assert_eq!(
            cgroup_room(v2, files("167772160\n", "100000000\n")),
            Some(67772160)
        );
        assert_eq!(cgroup_room(v2, files("max\n", "100000000\n")), None);
        let v1 = "5:cpu,cpuacct:/x\n4:memory:/bench\n";
        assert_eq!(cgroup_room(v1, files("1000", "1200")), Some(0));
        assert_eq!(cgroup_room("3:cpu:/x\n", files("1000", "10")), None);
        assert_eq!(cgroup_room(v2, |_| None), None);
    }
}
