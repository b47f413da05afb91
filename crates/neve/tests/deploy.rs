//! The deploy files are valid for the programs that read them: the
//! Prometheus alerts pass `promtool check rules` and their unit tests
//! (`promtool test rules`). (That every metric they read is one neve
//! exports is checked against a live neve in `serve_input.rs`.)

use std::path::{Path, PathBuf};
use std::process::Command;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

fn run(program: &str, args: &[&str], dir: &Path) {
    let output = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{program} (installed by scripts/install-deps.sh): {e}"));
    assert!(
        output.status.success(),
        "{program} {args:?}:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_alerts_are_valid_rules_and_pass_their_unit_tests() {
    let dir = deploy_dir().join("prometheus");
    run("promtool", &["check", "rules", "alerts.yml"], &dir);
    run("promtool", &["test", "rules", "alerts.test.yml"], &dir);
}

/// `systemd-analyze verify` and `security` on the shipped unit, in a root
/// holding the host's own units, the binary where the unit expects it and an
/// empty environment file. Skipped where systemd-analyze is not installed.
#[test]
fn the_systemd_unit_verifies_and_is_sandboxed() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("systemd-analyze is not installed: skipped");
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let at = |path: &str| root.path().join(path);
    for dir in [
        "usr/local/bin",
        "etc/neve",
        "etc/systemd/system",
        "usr/lib/systemd",
    ] {
        std::fs::create_dir_all(at(dir)).unwrap();
    }
    // The binary itself (a symlink would point outside the root).
    let binary = at("usr/local/bin/neve");
    if std::fs::hard_link(env!("CARGO_BIN_EXE_neve"), &binary).is_err() {
        std::fs::copy(env!("CARGO_BIN_EXE_neve"), &binary).unwrap();
    }
    std::fs::write(
        at("etc/neve/neve.env"),
        "NEVE_UPSTREAM=http://127.0.0.1:8545\n",
    )
    .unwrap();
    std::os::unix::fs::symlink(
        deploy_dir()
            .join("systemd/neve.service")
            .canonicalize()
            .unwrap(),
        at("etc/systemd/system/neve.service"),
    )
    .unwrap();
    run(
        "cp",
        &[
            "-a",
            "/usr/lib/systemd/system",
            at("usr/lib/systemd").to_str().unwrap(),
        ],
        root.path(),
    );
    let root_arg = format!("--root={}", root.path().display());
    let verify = Command::new("systemd-analyze")
        .args(["verify", &root_arg, "neve.service"])
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
    assert!(verify.status.success() && said.trim().is_empty(), "{said}");
    let security = Command::new("systemd-analyze")
        .args(["security", "--offline=yes", &root_arg, "neve.service"])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&security.stdout);
    let exposure: f64 = report
        .lines()
        .find_map(|l| l.split("neve.service: ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in:\n{report}"));
    assert!(exposure <= 2.0, "exposure {exposure}:\n{report}");
}

/// `neve config ARGS…` with only `env` in its environment.
fn neve_config(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_neve"))
        .arg("config")
        .args(args)
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn setting<'a>(printed: &'a str, key: &str) -> &'a str {
    printed
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key} = ")))
        .unwrap_or_else(|| panic!("no {key} in:\n{printed}"))
}

#[test]
fn the_example_settings_file_lists_every_key_with_its_default() {
    let out = neve_config(&["--upstream", "http://127.0.0.1:8545"], &[]);
    assert!(out.status.success());
    let example = std::fs::read_to_string(deploy_dir().join("neve.example.toml")).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        example,
        "deploy/neve.example.toml is `neve config --upstream http://127.0.0.1:8545`"
    );
    let example_path = deploy_dir().join("neve.example.toml");
    let loaded = neve_config(&["--config", example_path.to_str().unwrap()], &[]);
    assert!(loaded.status.success(), "{loaded:?}");
}

#[test]
fn flags_win_over_the_environment_which_wins_over_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("neve.toml");
    std::fs::write(
        &file,
        "upstream = \"http://operator:hunter2@127.0.0.1:8545/?token=t0p\"\n\
         retain-blocks = 10\nmax-batch = 7\nlisten = \"127.0.0.1:9\"\n",
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let env = [("NEVE_RETAIN_BLOCKS", "20"), ("NEVE_MAX_BATCH", "8")];
    let out = neve_config(&["--config", file, "--max-batch", "9"], &env);
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(setting(&printed, "max-batch"), "9  # flag");
    assert_eq!(setting(&printed, "retain-blocks"), "20  # environment");
    assert_eq!(setting(&printed, "listen"), "\"127.0.0.1:9\"  # file");
    assert_eq!(setting(&printed, "idle-timeout"), "\"1m\"  # default");
    assert!(
        !printed.contains("hunter2") && !printed.contains("t0p"),
        "{printed}"
    );
    // The file named by the environment instead of a flag.
    let out = neve_config(&[], &[("NEVE_CONFIG", file)]);
    assert_eq!(
        setting(&String::from_utf8_lossy(&out.stdout), "retain-blocks"),
        "10  # file"
    );
    // A value clap refuses is refused whatever its source.
    let out = neve_config(&["--config", file], &[("NEVE_MAX_BATCH", "many")]);
    assert!(!out.status.success());
}

#[test]
fn an_unknown_key_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("neve.toml");
    std::fs::write(
        &file,
        "upstream = \"http://127.0.0.1:8545\"\nretain_blocks = 5\n",
    )
    .unwrap();
    let out = neve_config(&["--config", file.to_str().unwrap()], &[]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        said.contains("unknown key `retain_blocks`")
            && said.contains("did you mean `retain-blocks`"),
        "{said}"
    );
}

#[test]
fn a_repeatable_setting_takes_an_array_and_credentials_are_masked() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("neve.toml");
    std::fs::write(
        &file,
        "upstream = \"https://u:pw-0123456789@rpc.example/v3/0123456789abcdef?apikey=k3y-k3y\"\n\
         upstream-header = [\"Authorization: Bearer t0k3n-t0k3n\", \"X-Team: blue-team-key\"]\n",
    )
    .unwrap();
    let out = neve_config(&["--config", file.to_str().unwrap()], &[]);
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        setting(&printed, "upstream"),
        "\"https://***@rpc.example/v3/***?apikey=***\"  # file"
    );
    assert_eq!(
        setting(&printed, "upstream-header"),
        "[\"Authorization: ***\", \"X-Team: ***\"]  # file"
    );
    for secret in [
        "pw-0123456789",
        "0123456789abcdef",
        "k3y-k3y",
        "t0k3n",
        "blue-team",
    ] {
        assert!(!printed.contains(secret), "{printed}");
    }
}
