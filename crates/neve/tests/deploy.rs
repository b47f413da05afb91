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
