//! Sets of CPUs a group of threads may run on, written as Linux lists them.

use std::fmt;
use std::str::FromStr;

/// A set of CPUs, written as Linux lists them (`0-3,6`): where a group of
/// threads may run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuSet(Vec<usize>);

/// Highest CPU number a set may name (the kernel's default `cpu_set_t`).
const MAX_CPU: usize = 1023;

impl CpuSet {
    /// How many CPUs it holds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it holds none (never true of a parsed set).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The CPUs the calling thread may run on now.
    pub fn of_current_thread() -> std::io::Result<CpuSet> {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: reads the calling thread's mask into a zeroed set;
            // CPU_ISSET reads inside it for numbers up to MAX_CPU.
            unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(CpuSet(
                    (0..=MAX_CPU)
                        .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
                        .collect(),
                ))
            }
        }
        #[cfg(not(target_os = "linux"))]
        Ok(CpuSet(Vec::new()))
    }

    /// Keeps the calling thread to these CPUs (threads it starts inherit
    /// that), or to those of them that are online and open to this process;
    /// fails when none is. Returns the CPUs it got.
    pub fn pin_current_thread(&self) -> std::io::Result<CpuSet> {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes
            // inside it for numbers below its size, which parsing ensures
            // (MAX_CPU); pid 0 is the calling thread.
            unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                for &cpu in &self.0 {
                    libc::CPU_SET(cpu, &mut set);
                }
                if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
        }
        CpuSet::of_current_thread()
    }
}

impl FromStr for CpuSet {
    type Err = String;

    fn from_str(list: &str) -> Result<CpuSet, String> {
        let number = |text: &str| -> Result<usize, String> {
            let cpu: usize = text
                .trim()
                .parse()
                .map_err(|_| format!("{text:?} is not a CPU number"))?;
            if cpu > MAX_CPU {
                return Err(format!("CPU {cpu} is above {MAX_CPU}"));
            }
            Ok(cpu)
        };
        let mut cpus = Vec::new();
        for part in list.split(',') {
            let (first, last) = match part.split_once('-') {
                Some((first, last)) => (number(first)?, number(last)?),
                None => (number(part)?, number(part)?),
            };
            if first > last {
                return Err(format!("{part:?}: a range runs upwards"));
            }
            cpus.extend(first..=last);
        }
        cpus.sort_unstable();
        cpus.dedup();
        Ok(CpuSet(cpus))
    }
}

impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut at = 0;
        while at < self.0.len() {
            let first = self.0[at];
            let mut last = first;
            while at + 1 < self.0.len() && self.0[at + 1] == last + 1 {
                at += 1;
                last = self.0[at];
            }
            let comma = if first == self.0[0] { "" } else { "," };
            if first == last {
                write!(f, "{comma}{first}")?;
            } else {
                write!(f, "{comma}{first}-{last}")?;
            }
            at += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_as_linux_writes_them() {
        let set: CpuSet = "0-3,6, 8-9,2".parse().unwrap();
        assert_eq!(set, CpuSet(vec![0, 1, 2, 3, 6, 8, 9]));
        assert_eq!(set.to_string(), "0-3,6,8-9");
        assert_eq!("5".parse::<CpuSet>().unwrap().to_string(), "5");
        for bad in ["", "a", "3-1", "0-", "1,,2", "4096", "-1"] {
            assert!(bad.parse::<CpuSet>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_thread_pinned_to_a_set_runs_only_there() {
        let allowed = CpuSet::of_current_thread().unwrap();
        let first = allowed.0[0];
        // With a CPU no machine here has beside it: only the real one is kept.
        let set: CpuSet = format!("{first},{MAX_CPU}").parse().unwrap();
        let (got, now) = std::thread::spawn(move || {
            let got = set.pin_current_thread().unwrap();
            (got, CpuSet::of_current_thread().unwrap())
        })
        .join()
        .unwrap();
        assert_eq!(got, CpuSet(vec![first]));
        assert_eq!(now, got);
        let nowhere: CpuSet = MAX_CPU.to_string().parse().unwrap();
        let refused = std::thread::spawn(move || nowhere.pin_current_thread())
            .join()
            .unwrap();
        assert!(refused.is_err());
    }
}
