//! The packages `scripts/package.sh` makes, installed and run for real:
//! the release archive holds what it says; the Debian package installs on
//! this machine, creates its user, ships a unit `systemd-analyze verify`
//! passes, runs neve as that user against a geth dev chain, and purges
//! clean; the image (FROM scratch, a non-root user, SIGTERM to stop),
//! exported to a directory, runs neve chrooted there against the same kind
//! of chain.
//!
//! Needs root (`dpkg -i`, `chroot`), as CI runs the suite, and dpkg-deb and
//! podman (scripts/install-deps.sh). Every command is bounded in time; the
//! package is purged and the image and container removed whatever happens.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use neve_devnet::{GethDev, GethDevOptions};
use neve_upstream::RpcClient;
use serde_json::{Value, json};
use support::{answer, http_get};

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

// --- running commands ----------------------------------------------------

/// Runs `command` to its end, killing it after `limit`; panics if it cannot
/// start or runs out of time, with what it printed.
fn output_within(command: &mut Command, limit: Duration) -> Output {
    let described = format!("{command:?}");
    let logs = tempfile::tempdir().unwrap();
    let (out, err) = (logs.path().join("stdout"), logs.path().join("stderr"));
    let mut child = command
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("{described} (scripts/install-deps.sh installs it): {e}"));
    let deadline = Instant::now() + limit;
    let mut wait = || loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let status = match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(wait)
        }
        _ => wait(),
    };
    let stdout = std::fs::read(out).unwrap_or_default();
    let stderr = std::fs::read(err).unwrap_or_default();
    match status {
        Some(status) => Output {
            status,
            stdout,
            stderr,
        },
        None => {
            panic!(
                "{described} did not finish within {limit:?}\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&stdout),
                String::from_utf8_lossy(&stderr)
            )
        }
    }
}

/// What `command` printed, for failure messages.
fn shown(command: &str, output: &Output) -> String {
    format!(
        "{command}: {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Runs `program ARGS…` within `limit`; panics unless it succeeds, with
/// its output. Returns its stdout.
fn run(program: &str, args: &[&str], limit: Duration) -> String {
    let output = output_within(Command::new(program).args(args), limit);
    assert!(
        output.status.success(),
        "{}",
        shown(&format!("{program} {}", args.join(" ")), &output)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

const QUICK: Duration = Duration::from_secs(60);

fn require_root(why: &str) {
    // SAFETY: getuid(2) has no preconditions.
    let uid = unsafe { libc::getuid() };
    assert_eq!(
        uid, 0,
        "this test needs root ({why}), as CI runs the suite: run it as root"
    );
}

// --- the packages, made once for the tests that run together -------------

/// What `scripts/package.sh --image` made in a temporary directory; the
/// image is removed when the last test using it is done.
struct Packages {
    dir: tempfile::TempDir,
    image: String,
}

impl Packages {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    fn archive(&self) -> PathBuf {
        self.path(&format!("neve-{VERSION}-x86_64-linux-gnu.tar.gz"))
    }
    fn deb(&self) -> PathBuf {
        self.path(&format!("neve_{VERSION}_amd64.deb"))
    }
}

impl Drop for Packages {
    fn drop(&mut self) {
        let _ = Command::new("podman")
            .args(["rmi", "--force", &self.image])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// `scripts/package.sh --binary <this build's neve> --image` into a fresh
/// directory, shared by the tests running at the same time.
fn packages() -> Arc<Packages> {
    static SHARED: Mutex<Weak<Packages>> = Mutex::new(Weak::new());
    let mut shared = SHARED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(packages) = shared.upgrade() {
        return packages;
    }
    let packages = Packages {
        dir: tempfile::tempdir().unwrap(),
        image: format!(
            "localhost/neve-package-test-{}:{VERSION}",
            std::process::id()
        ),
    };
    let script = repo().join("scripts/package.sh");
    let out = packages.dir.path().to_str().unwrap();
    run(
        script.to_str().unwrap(),
        &[
            "--binary",
            env!("CARGO_BIN_EXE_neve"),
            "--out",
            out,
            "--image",
            "--tag",
            &packages.image,
        ],
        Duration::from_secs(600),
    );
    let packages = Arc::new(packages);
    *shared = Arc::downgrade(&packages);
    packages
}

// --- a neve process and the chain it follows ------------------------------

/// A `neve serve` started by a command (through setpriv or chroot, which
/// exec it: the pid is neve's), killed on drop; its output goes to a file.
struct Server {
    child: std::process::Child,
    addr: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start(command: &mut Command) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("neve.log");
        let file = std::fs::File::create(&log).unwrap();
        let addr = command
            .get_args()
            .skip_while(|a| *a != "--listen")
            .nth(1)
            .and_then(|a| a.to_str())
            .expect("--listen ADDR")
            .to_owned();
        let described = format!("{command:?}");
        let child = command
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("{described}: {e}"));
        Server {
            child,
            addr,
            log,
            _dir: dir,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until `/health` is 200 and `method` has a result (returned),
    /// for at most a minute; panics with the log if neve exits or never
    /// gets there.
    async fn wait_serving(&mut self, method: &str) -> Value {
        let client = RpcClient::new(&format!("http://{}", self.addr))
            .unwrap()
            .with_timeout(Duration::from_secs(5));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("neve exited with {status}:\n{}", self.log());
            }
            let healthy = http_get(&self.addr, "/health").is_some_and(|(status, _)| status == 200);
            if healthy && let Ok(result) = client.call::<Value>(method, ()).await {
                return result;
            }
            assert!(
                Instant::now() < deadline,
                "neve did not answer /health and {method} within a minute:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The real, effective, saved and file-system uids of the process.
    fn uids(&self) -> Vec<u32> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .expect("Uid: in /proc/PID/status")
            .split_whitespace()
            .map(|u| u.parse().unwrap())
            .collect()
    }

    /// SIGTERM, as `systemctl stop` and `podman stop` send; neve drains
    /// and exits 0 within 30 s.
    fn stop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "neve did not exit within 30 s of SIGTERM:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(status.success(), "SIGTERM: {status}:\n{}", self.log());
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A geth dev chain sealing a block a second, so a follower has blocks to
/// take.
async fn chain() -> GethDev {
    GethDev::start(GethDevOptions {
        period: 1,
        ..Default::default()
    })
    .await
    .expect("geth dev (scripts/install-tools.sh installs it)")
}

fn free_addr() -> String {
    let [port] = neve_devnet::free_ports();
    format!("127.0.0.1:{port}")
}

/// Asserts the JSON-RPC answer has a result and returns it.
async fn result_of(url: &str, method: &str) -> Value {
    let answered = answer(&RpcClient::new(url).unwrap(), method, json!([])).await;
    assert!(
        answered.get("result").is_some(),
        "{method} at {url}: {answered}"
    );
    answered["result"].clone()
}

// --- the release archive ----------------------------------------------------

#[test]
fn the_release_archive_holds_the_binary_the_unit_the_settings_and_the_licences() {
    let packages = packages();
    let archive = packages.archive();
    let listed = run("tar", &["-tzf", archive.to_str().unwrap()], QUICK);
    let mut listed: Vec<&str> = listed.lines().collect();
    listed.sort_unstable();
    let top = format!("neve-{VERSION}/");
    let expected: Vec<String> = [
        "",
        "COPYRIGHT",
        "README.md",
        "neve",
        "neve.example.toml",
        "neve.service",
    ]
    .iter()
    .map(|f| format!("{top}{f}"))
    .collect();
    assert_eq!(listed, expected, "{}", archive.display());

    let unpacked = tempfile::tempdir().unwrap();
    run(
        "tar",
        &[
            "-xzf",
            archive.to_str().unwrap(),
            "-C",
            unpacked.path().to_str().unwrap(),
        ],
        QUICK,
    );
    let at = |f: &str| unpacked.path().join(top.as_str()).join(f);
    let version = run(at("neve").to_str().unwrap(), &["--version"], QUICK);
    assert!(
        version.starts_with(&format!("neve {VERSION}")),
        "the archive's neve --version: {version}"
    );
    let same_as = |f: &str, source: &str| {
        assert_eq!(
            std::fs::read_to_string(at(f)).unwrap(),
            std::fs::read_to_string(repo().join(source)).unwrap(),
            "{f} in the archive is {source}"
        );
    };
    same_as("neve.service", "deploy/systemd/neve.service");
    same_as("neve.example.toml", "deploy/neve.example.toml");
    same_as("COPYRIGHT", "deploy/debian/copyright");
    let readme = std::fs::read_to_string(at("README.md")).unwrap();
    assert!(
        readme.starts_with(&format!("# neve {VERSION}")) && readme.contains("## Configuration"),
        "README.md: {readme}"
    );
    // SHA256SUMS covers the archive and the package.
    let sums = Command::new("sha256sum")
        .args(["--check", "--strict", "SHA256SUMS"])
        .current_dir(packages.dir.path())
        .output()
        .unwrap();
    assert!(
        sums.status.success(),
        "{}",
        shown("sha256sum --check", &sums)
    );
}

// --- the Debian package -------------------------------------------------------

/// `dpkg --purge neve` when dropped, so a failing test leaves nothing
/// installed; [`Installed::purge`] does it (and checks it) on success.
struct Installed {
    purged: bool,
}

impl Installed {
    fn purge(&mut self) {
        self.purged = true;
        run("dpkg", &["--purge", "neve"], QUICK);
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        if self.purged {
            return;
        }
        match Command::new("dpkg").args(["--purge", "neve"]).output() {
            Ok(out) if out.status.success() => {}
            Ok(out) => eprintln!("cleanup: {}", shown("dpkg --purge neve", &out)),
            Err(e) => eprintln!("cleanup: dpkg --purge neve: {e}"),
        }
    }
}

/// dpkg's state of the package `neve` (`not-installed` when it has none).
fn package_state() -> String {
    let out = Command::new("dpkg-query")
        .args(["--show", "--showformat=${db:Status-Status}", "neve"])
        .output()
        .expect("dpkg-query");
    let state = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if state.is_empty() {
        "not-installed".into()
    } else {
        state
    }
}

/// `getent passwd|group NAME`'s id, if it exists.
fn id_of(database: &str, name: &str) -> Option<u32> {
    let out = Command::new("getent")
        .args([database, name])
        .output()
        .expect("getent");
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .split(':')
            .nth(2)
            .and_then(|id| id.parse().ok())
            .expect("getent's third field is the id")
    })
}

fn mode_and_owner(path: &str) -> (u32, u32, u32) {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    (meta.mode() & 0o7777, meta.uid(), meta.gid())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_debian_package_installs_runs_neve_as_its_user_and_purges_clean() {
    require_root("dpkg -i");
    let state = package_state();
    assert_eq!(
        state, "not-installed",
        "a package `neve` is on this machine already ({state}); this test installs and \
         purges its own and will not replace it: `dpkg --purge neve` first"
    );
    assert!(
        id_of("passwd", "neve").is_none() && id_of("group", "neve").is_none(),
        "a user or group `neve` exists already; the package's purge would remove it: \
         remove it first (`userdel neve; groupdel neve`) or run elsewhere"
    );
    let packages = packages();
    let geth = chain().await;

    let mut installed = Installed { purged: false };
    let deb = packages.deb();
    let said = run("dpkg", &["--install", deb.to_str().unwrap()], QUICK);
    assert_eq!(package_state(), "installed", "dpkg --install:\n{said}");

    // Its files, its conffile, its dependencies.
    let files = run("dpkg", &["--listfiles", "neve"], QUICK);
    for file in [
        "/usr/bin/neve",
        "/lib/systemd/system/neve.service",
        "/etc/neve/neve.toml",
        "/usr/share/doc/neve/copyright",
    ] {
        assert!(
            files.lines().any(|l| l == file),
            "dpkg -L neve has no {file}:\n{files}"
        );
        assert!(Path::new(file).is_file(), "{file} is not installed");
    }
    let fields = run(
        "dpkg-query",
        &["--show", "--showformat=${Conffiles}\n${Depends}\n", "neve"],
        QUICK,
    );
    assert!(
        fields.contains("/etc/neve/neve.toml") && fields.contains("libc6"),
        "conffiles and Depends: {fields}"
    );
    assert_eq!(
        std::fs::read_to_string("/etc/neve/neve.toml").unwrap(),
        std::fs::read_to_string(repo().join("deploy/neve.example.toml")).unwrap(),
        "/etc/neve/neve.toml is deploy/neve.example.toml"
    );
    let version = run("/usr/bin/neve", &["--version"], QUICK);
    assert!(version.starts_with(&format!("neve {VERSION}")), "{version}");

    // Its system user and group, and the store's directory.
    let uid = id_of("passwd", "neve").expect("postinst creates the user neve");
    let gid = id_of("group", "neve").expect("postinst creates the group neve");
    assert!(
        (1..1000).contains(&uid),
        "neve is a system user (uid {uid})"
    );
    assert_eq!(
        mode_and_owner("/var/lib/neve"),
        (0o700, uid, gid),
        "/var/lib/neve: mode 0700, owned by neve"
    );

    // The unit: the shipped one's sandboxing, the package's user and paths.
    let unit = std::fs::read_to_string("/lib/systemd/system/neve.service").unwrap();
    for line in [
        "User=neve",
        "Group=neve",
        "StateDirectory=neve",
        "EnvironmentFile=-/etc/neve/neve.env",
        "ExecStart=/usr/bin/neve serve --config /etc/neve/neve.toml --data-dir ${STATE_DIRECTORY}/store",
    ] {
        assert!(unit.lines().any(|l| l == line), "no `{line}` in:\n{unit}");
    }
    assert!(
        !unit.lines().any(|l| l.starts_with("DynamicUser=")),
        "{unit}"
    );
    let shipped = std::fs::read_to_string(repo().join("deploy/systemd/neve.service")).unwrap();
    for line in shipped.lines().filter(|l| {
        l.contains('=')
            && !l.starts_with('#')
            && !l.starts_with("ExecStart=")
            && !l.starts_with("DynamicUser=")
    }) {
        assert!(
            unit.lines().any(|l| l == line),
            "deploy/systemd/neve.service's `{line}` is missing from the package's unit:\n{unit}"
        );
    }
    verify_unit();

    // neve as the package's user, with the package's settings file, a
    // store where the unit puts it.
    let addr = free_addr();
    let mut neve = Server::start(
        Command::new("setpriv")
            .args([
                "--reuid=neve",
                "--regid=neve",
                "--init-groups",
                "/usr/bin/neve",
            ])
            .args(["serve", "--config", "/etc/neve/neve.toml"])
            .args(["--upstream", geth.http_url(), "--ws-url", geth.ws_url()])
            .args(["--data-dir", "/var/lib/neve/store", "--listen", &addr])
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .current_dir("/"),
    );
    neve.wait_serving("eth_blockNumber").await;
    let url = format!("http://{addr}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let head = result_of(&url, "eth_blockNumber").await;
        if head.as_str().is_some_and(|h| h != "0x0") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "neve stayed at block 0 for a minute:\n{}",
            neve.log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(
        neve.uids(),
        vec![uid; 4],
        "neve runs as the user neve (uid {uid})"
    );
    assert_eq!(
        mode_and_owner("/var/lib/neve/store").1,
        uid,
        "the store is neve's"
    );
    neve.stop();
    drop(neve);

    // Purge: the files, the user, the group and the store go.
    installed.purge();
    assert_eq!(package_state(), "not-installed");
    for gone in [
        "/usr/bin/neve",
        "/lib/systemd/system/neve.service",
        "/etc/neve",
        "/var/lib/neve",
    ] {
        assert!(
            !Path::new(gone).exists(),
            "{gone} is left after dpkg --purge"
        );
    }
    assert!(
        id_of("passwd", "neve").is_none(),
        "the user neve is left after purge"
    );
    assert!(
        id_of("group", "neve").is_none(),
        "the group neve is left after purge"
    );
}

/// `systemd-analyze verify` on the installed unit, and `security`: it rates
/// it as sandboxed as the shipped one (at most 2.0). Skipped where
/// systemd-analyze is not installed.
fn verify_unit() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("systemd-analyze is not installed: the unit is not verified");
        return;
    }
    let unit = "/lib/systemd/system/neve.service";
    let verify = output_within(
        Command::new("systemd-analyze").args(["verify", unit]),
        QUICK,
    );
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
    assert!(
        verify.status.success() && said.trim().is_empty(),
        "systemd-analyze verify {unit}:\n{said}"
    );
    let security = output_within(
        Command::new("systemd-analyze").args(["security", "--offline=yes", unit]),
        QUICK,
    );
    let report = String::from_utf8_lossy(&security.stdout);
    let exposure: f64 = report
        .lines()
        .find_map(|l| l.split("neve.service: ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{}", shown("systemd-analyze security", &security)));
    assert!(exposure <= 2.0, "exposure {exposure}:\n{report}");
}

// --- the image ------------------------------------------------------------------

/// A container made with `podman create`, removed on drop.
struct Container(String);

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("podman")
            .args(["rm", "--force", &self.0])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_image_is_scratch_non_root_stops_on_sigterm_and_serves_chrooted() {
    require_root("chroot, and extracting files owned by the image's user");
    let packages = packages();

    // Its configuration.
    let inspected = run("podman", &["image", "inspect", &packages.image], QUICK);
    let inspected: Value = serde_json::from_str(&inspected).unwrap();
    let config = &inspected[0]["Config"];
    assert_eq!(config["User"], "65532:65532", "{config}");
    assert_eq!(config["StopSignal"], "SIGTERM", "{config}");
    assert_eq!(config["Entrypoint"], json!(["/usr/bin/neve"]), "{config}");
    assert_eq!(config["Cmd"], json!(["serve"]), "{config}");
    assert_eq!(config["WorkingDir"], "/var/lib/neve", "{config}");
    assert!(config["ExposedPorts"].get("8645/tcp").is_some(), "{config}");
    assert!(config["Volumes"].get("/var/lib/neve").is_some(), "{config}");
    let env: Vec<String> = config["Env"]
        .as_array()
        .expect("Env")
        .iter()
        .map(|e| e.as_str().unwrap().to_owned())
        .collect();
    for wanted in ["NEVE_DATA_DIR=/var/lib/neve", "NEVE_LISTEN=0.0.0.0:8645"] {
        assert!(env.iter().any(|e| e == wanted), "no {wanted} in {env:?}");
    }

    // Its file system, exported from a container.
    let created = run("podman", &["create", &packages.image], QUICK);
    let container = Container(created.trim().to_owned());
    let dir = tempfile::tempdir().unwrap();
    let tarball = dir.path().join("rootfs.tar");
    run(
        "podman",
        &[
            "export",
            "--output",
            tarball.to_str().unwrap(),
            &container.0,
        ],
        QUICK,
    );
    drop(container);
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    run(
        "tar",
        &[
            "--numeric-owner",
            "-xpf",
            tarball.to_str().unwrap(),
            "-C",
            root.to_str().unwrap(),
        ],
        QUICK,
    );
    let at = |p: &str| root.join(p.trim_start_matches('/'));
    for file in [
        "/usr/bin/neve",
        "/etc/passwd",
        "/etc/group",
        "/etc/ssl/certs/ca-certificates.crt",
        "/usr/share/doc/neve/copyright",
    ] {
        assert!(at(file).is_file(), "no {file} in the image");
    }
    assert!(
        !at("/bin/sh").exists() && !at("/usr/bin/sh").exists(),
        "FROM scratch: no shell in the image"
    );
    assert!(
        std::fs::read_to_string(at("/etc/passwd"))
            .unwrap()
            .lines()
            .any(|l| l.starts_with("neve:x:65532:65532:")),
        "/etc/passwd names the user 65532"
    );
    let data = at("/var/lib/neve");
    assert_eq!(
        mode_and_owner(data.to_str().unwrap()),
        (0o700, 65532, 65532),
        "/var/lib/neve in the image: mode 0700, owned by 65532"
    );

    // The libraries are those `ldd` names for the binary, and it runs on
    // them alone.
    let mut wanted: Vec<PathBuf> = run("ldd", &[env!("CARGO_BIN_EXE_neve")], QUICK)
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = l.split_once("=> ").map_or(l, |(_, p)| p);
            path.starts_with('/')
                .then(|| PathBuf::from(path.split_whitespace().next().unwrap()))
        })
        .collect();
    wanted.sort();
    let mut held = Vec::new();
    for top in ["lib", "lib64", "usr/lib", "usr/lib64"] {
        let mut stack = vec![root.join(top)];
        while let Some(below) = stack.pop() {
            for entry in std::fs::read_dir(below).into_iter().flatten() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else {
                    held.push(Path::new("/").join(path.strip_prefix(&root).unwrap()));
                }
            }
        }
    }
    held.sort();
    assert_eq!(held, wanted, "the image's libraries are what ldd names");
    let root_arg = root.to_str().unwrap();
    let version = run("chroot", &[root_arg, "/usr/bin/neve", "--version"], QUICK);
    assert!(
        version.starts_with(&format!("neve {VERSION}")),
        "neve --version in the image: {version}"
    );
    // The CA bundle is found: an https:// endpoint is refused by the
    // network (nothing listens there), not for want of trusted roots.
    let https = format!("https://{}", free_addr());
    let tried = output_within(
        Command::new("/usr/sbin/chroot")
            .args(["--userspec=65532:65532", root_arg, "/usr/bin/neve", "load"])
            .args(["--rpc", &https, "--seconds", "1"])
            .env_clear(),
        QUICK,
    );
    let said = String::from_utf8_lossy(&tried.stderr);
    assert!(
        !said.contains("no trusted CA") && said.contains("Connection refused"),
        "{}",
        shown("neve load --rpc https://… in the image", &tried)
    );

    // neve serving from it, as the image's user, with the image's
    // environment (the store in NEVE_DATA_DIR), on the host's loopback.
    let geth = chain().await;
    let addr = free_addr();
    let mut command = Command::new("/usr/sbin/chroot");
    command
        .args(["--userspec=65532:65532", root_arg, "/usr/bin/neve", "serve"])
        .args(["--upstream", geth.http_url(), "--ws-url", geth.ws_url()])
        .args(["--listen", &addr])
        .env_clear();
    for var in &env {
        let (key, value) = var.split_once('=').unwrap();
        command.env(key, value);
    }
    let mut neve = Server::start(&mut command);
    let chain_id = neve.wait_serving("eth_chainId").await;
    let url = format!("http://{addr}");
    assert_eq!(
        chain_id,
        result_of(geth.http_url(), "eth_chainId").await,
        "eth_chainId from the image's neve"
    );
    let (status, health) = http_get(&addr, "/health").expect("/health");
    assert_eq!(status, 200, "{health}");
    result_of(&url, "eth_blockNumber").await;
    assert_eq!(
        neve.uids(),
        vec![65532; 4],
        "neve runs as 65532 in the image"
    );
    assert!(
        std::fs::read_dir(data).unwrap().next().is_some(),
        "the store went to NEVE_DATA_DIR (/var/lib/neve):\n{}",
        neve.log()
    );
    neve.stop();
}
