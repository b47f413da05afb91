//! CPU and memory of a target process on this machine, read from /proc.
//!
//! A target is found by pid, or by the TCP port it listens on: the socket's
//! inode from `/proc/net/tcp{,6}`, then the process holding that inode among
//! its file descriptors. Everything here is Linux-only and optional: on
//! failure a measurement is simply absent.

use std::fs;

/// A process's CPU time and memory at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// User + system CPU time, in clock ticks.
    pub cpu_ticks: u64,
    /// Resident set size, bytes (anonymous + file-backed + shared).
    pub rss_bytes: u64,
    /// Anonymous resident memory, bytes (the heap; excludes page-cache pages
    /// of mapped files, which the kernel can reclaim).
    pub rss_anon_bytes: u64,
    /// File-backed resident memory, bytes: mapped files' pages in the page
    /// cache (a mapped store's records, the binary).
    pub rss_file_bytes: u64,
}

impl Sample {
    fn add(&mut self, other: &Sample) {
        self.cpu_ticks += other.cpu_ticks;
        self.rss_bytes += other.rss_bytes;
        self.rss_anon_bytes += other.rss_anon_bytes;
        self.rss_file_bytes += other.rss_file_bytes;
    }
}

/// Reads `pid`'s counters now.
pub fn sample(pid: u32) -> Option<Sample> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some(Sample {
        cpu_ticks: cpu_ticks_from_stat(&stat)?,
        rss_bytes: kib_field(&status, "VmRSS:")? * 1024,
        rss_anon_bytes: kib_field(&status, "RssAnon:").unwrap_or(0) * 1024,
        rss_file_bytes: kib_field(&status, "RssFile:").unwrap_or(0) * 1024,
    })
}

/// Sums `pid` and all its descendants: nginx's workers, avalanchego's
/// plugin processes. (Shared pages count once per process, so the RSS of a
/// tree overstates what it holds.)
pub fn sample_tree(pid: u32) -> Option<Sample> {
    let mut total = sample(pid)?;
    for child in descendants(pid) {
        if let Some(s) = sample(child) {
            total.add(&s);
        }
    }
    Some(total)
}

/// Sums [`sample_tree`] over several processes; `None` when there are none
/// or one cannot be read.
pub fn sample_all(pids: &[u32]) -> Option<Sample> {
    let mut samples = pids.iter().map(|pid| sample_tree(*pid));
    let mut total = samples.next()??;
    for sample in samples {
        total.add(&sample?);
    }
    Some(total)
}

fn descendants(root: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = fs::read_to_string(entry.path().join("stat")).ok()?;
            let ppid = fields_after_name(&stat)?.get(1)?.parse().ok()?;
            Some((pid, ppid))
        })
        .collect();
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(
            parents
                .iter()
                .filter(|(_, p)| *p == parent)
                .map(|(c, _)| *c),
        );
        i += 1;
    }
    found.remove(0);
    found
}

/// Cores' worth of CPU used between two samples `seconds` apart
/// (1.0 = one core busy throughout).
pub fn cores_used(before: &Sample, after: &Sample, seconds: f64) -> f64 {
    let ticks = after.cpu_ticks.saturating_sub(before.cpu_ticks) as f64;
    ticks / clock_ticks_per_second() / seconds.max(1e-9)
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf only reads a configuration value.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as f64 } else { 100.0 }
}

/// The fields of `/proc/PID/stat` after the command name: state(0)
/// ppid(1) … utime(11) stime(12). The name in parentheses may itself hold
/// spaces and parentheses, so fields count from the last `)`.
fn fields_after_name(stat: &str) -> Option<Vec<&str>> {
    Some(stat[stat.rfind(')')? + 1..].split_whitespace().collect())
}

/// utime + stime from `/proc/PID/stat`.
fn cpu_ticks_from_stat(stat: &str) -> Option<u64> {
    let fields = fields_after_name(stat)?;
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn kib_field(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(key))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// The processes listening on TCP `port` on this machine, as far as they
/// can be seen: every holder of a listening socket, since servers such as
/// nginx with `reuseport` run one process per core, each with a socket of
/// its own (counting one of them would halve their CPU). A process whose
/// ancestor also listens is left out: [`sample_tree`] counts it there.
pub fn pids_listening_on(port: u16) -> Vec<u32> {
    let inodes: Vec<u64> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|path| fs::read_to_string(path).ok())
        .flat_map(|table| listening_inodes(&table, port))
        .collect();
    if inodes.is_empty() {
        return Vec::new();
    }
    let wanted: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    let mut listening = Vec::new();
    for entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            fs::read_link(fd.path())
                .is_ok_and(|link| wanted.iter().any(|w| link.as_os_str() == w.as_str()))
        });
        if holds {
            listening.push(pid);
        }
    }
    let below_others: Vec<u32> = listening.iter().flat_map(|pid| descendants(*pid)).collect();
    listening.retain(|pid| !below_others.contains(pid));
    listening
}

/// Inodes of sockets in LISTEN state (0A) on `port` in a `/proc/net/tcp` table.
fn listening_inodes(table: &str, port: u16) -> Vec<u64> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local_port = fields.get(1)?.rsplit(':').next()?;
            let listening = *fields.get(3)? == "0A";
            let inode = fields.get(9)?.parse().ok()?;
            (listening && u16::from_str_radix(local_port, 16).ok()? == port).then_some(inode)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_count_from_the_last_parenthesis() {
        let stat = "4242 (tokio (rt) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 150 25 0 0 20 0 8 0";
        assert_eq!(cpu_ticks_from_stat(stat), Some(175));
        assert_eq!(cpu_ticks_from_stat("garbage"), None);
    }

    #[test]
    fn status_fields_are_read_in_kib() {
        let status = "Name:\tneve\nVmRSS:\t  845120 kB\nRssAnon:\t   57344 kB\n";
        assert_eq!(kib_field(status, "VmRSS:"), Some(845_120));
        assert_eq!(kib_field(status, "RssAnon:"), Some(57_344));
        assert_eq!(kib_field(status, "VmSwap:"), None);
    }

    #[test]
    fn listening_sockets_are_found_by_port() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:2161 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 123456 1 0 100 0 0 10 0\n\
   1: 0100007F:2161 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 999 1 0 100 0 0 10 0\n";
        assert_eq!(listening_inodes(table, 0x2161), vec![123456]);
        assert!(listening_inodes(table, 80).is_empty());
    }

    #[test]
    fn this_process_can_be_sampled_and_found_by_its_port() {
        let me = std::process::id();
        let before = sample(me).expect("own /proc entry");
        assert!(before.rss_bytes > 0);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert_eq!(pids_listening_on(port), vec![me]);
        let mut spin = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed().as_millis() < 60 {
            spin = spin.wrapping_add(1);
        }
        let after = sample(me).unwrap();
        assert!(cores_used(&before, &after, 0.06) >= 0.0, "{spin}");
    }

    /// Regression (logs against the static ceiling): nginx with
    /// `reuseport`, one process per core, was charged one process's CPU.
    #[test]
    fn every_process_sharing_a_port_is_found() {
        let listen = "import socket, sys, time\n\
            s = socket.socket()\n\
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)\n\
            s.bind(('127.0.0.1', int(sys.argv[1])))\n\
            s.listen()\n\
            print('ready', flush=True)\n\
            time.sleep(30)\n";
        let port = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap().port()
        };
        let mut children: Vec<_> = (0..2)
            .map(|_| {
                std::process::Command::new("python3")
                    .args(["-c", listen, &port.to_string()])
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .expect("python3")
            })
            .collect();
        for child in &mut children {
            let mut line = String::new();
            std::io::BufRead::read_line(
                &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
                &mut line,
            )
            .unwrap();
            assert_eq!(line.trim(), "ready");
        }
        let mut found = pids_listening_on(port);
        found.sort();
        let mut expected: Vec<u32> = children.iter().map(|c| c.id()).collect();
        expected.sort();
        for child in &mut children {
            child.kill().unwrap();
            child.wait().unwrap();
        }
        assert_eq!(found, expected);
    }

    #[test]
    fn a_tree_includes_children() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let me = std::process::id();
        assert!(descendants(me).contains(&child.id()));
        let alone = sample(me).unwrap();
        let tree = sample_tree(me).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(tree.rss_bytes > alone.rss_bytes);
    }
}
