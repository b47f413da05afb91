//! A child node process that cannot outlive its handle.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;

use tempfile::TempDir;

use crate::error::{DevnetError, io_error};

/// A running node: its process, its temporary data directory and its log.
///
/// Dropping the handle kills the process (SIGKILL: the data directory is
/// thrown away, so a graceful shutdown buys nothing) and removes the data
/// directory. The child also gets `PR_SET_PDEATHSIG`, so it dies with the
/// thread that spawned it even if this process is killed before any drop
/// runs; spawn from a thread that lives as long as the node should.
#[derive(Debug)]
pub struct NodeProcess {
    name: String,
    child: Mutex<Child>,
    log: PathBuf,
    data: TempDir,
    binary: PathBuf,
    args: Vec<String>,
}

impl NodeProcess {
    /// Spawns `binary args…` with stdout and stderr going to `<data>/node.log`.
    pub fn spawn(
        name: &str,
        binary: &Path,
        args: &[String],
        data: TempDir,
    ) -> Result<Self, DevnetError> {
        let log = data.path().join("node.log");
        let child = launch(binary, args, &log)?;
        Ok(NodeProcess {
            name: name.to_owned(),
            child: Mutex::new(child),
            log,
            data,
            binary: binary.to_path_buf(),
            args: args.to_vec(),
        })
    }

    /// Kills the process (SIGKILL: what a crash or an OOM kill does) and
    /// starts it again with the same arguments on the same data directory;
    /// the log continues in the same file.
    pub fn kill_and_restart(&self) -> Result<(), DevnetError> {
        let mut child = self.child.lock().expect("child lock");
        let _ = child.kill();
        let _ = child.wait();
        *child = launch(&self.binary, &self.args, &self.log)?;
        Ok(())
    }

    /// A short name for messages ("geth-dev").
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The operating-system process id.
    pub fn pid(&self) -> u32 {
        self.child.lock().expect("child lock").id()
    }

    /// The temporary data directory (removed on drop).
    pub fn data_dir(&self) -> &Path {
        self.data.path()
    }

    /// The node's combined stdout and stderr.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// `Some(status)` once the process has exited.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        self.child
            .lock()
            .expect("child lock")
            .try_wait()
            .ok()
            .flatten()
    }

    /// The last `lines` lines of the node's log, for error messages.
    pub fn log_tail(&self, lines: usize) -> String {
        const WINDOW: u64 = 64 * 1024;
        let Ok(mut file) = File::open(&self.log) else {
            return String::new();
        };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = file.seek(SeekFrom::Start(len.saturating_sub(WINDOW)));
        let mut text = String::new();
        let _ = file.read_to_string(&mut text);
        let tail: Vec<&str> = text.lines().rev().take(lines).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let child = self.child.get_mut().unwrap_or_else(|p| p.into_inner());
        let _ = child.kill();
        let _ = child.wait();
        if std::env::var_os("NEVE_KEEP_NODE_DIRS").is_some() {
            // Debugging aid: keep the data dir and log of a failed test.
            let path = std::mem::replace(&mut self.data, TempDir::new().expect("tempdir")).keep();
            eprintln!("kept {} data dir at {}", self.name, path.display());
        }
    }
}

/// Spawns `binary args…` with stdout and stderr appended to `log`, dying
/// with the spawning thread.
fn launch(binary: &Path, args: &[String], log: &Path) -> Result<Child, DevnetError> {
    let out = File::options()
        .create(true)
        .append(true)
        .open(log)
        .map_err(io_error("opening node log"))?;
    let err = out.try_clone().map_err(io_error("duplicating node log"))?;
    let mut command = Command::new(binary);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    // SAFETY: prctl is async-signal-safe and touches no memory of ours;
    // it runs in the forked child before exec.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command
        .spawn()
        .map_err(io_error(format!("starting {}", binary.display())))
}
