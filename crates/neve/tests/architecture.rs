//! ARCHITECTURE.md stays true: its crate table lists exactly the workspace
//! members.

use std::collections::BTreeSet;

fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn architecture_lists_exactly_the_workspace_crates() {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let members_line = manifest
        .lines()
        .find(|l| l.starts_with("members"))
        .expect("members line");
    let members: BTreeSet<String> = members_line
        .split('"')
        .filter(|part| part.starts_with("crates/"))
        .map(String::from)
        .collect();
    let architecture = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let documented: BTreeSet<String> = architecture
        .lines()
        .filter(|l| l.starts_with("| `neve"))
        .filter_map(|l| l.split('`').nth(3).map(String::from))
        .collect();
    assert_eq!(
        documented, members,
        "ARCHITECTURE.md's crate table vs Cargo.toml members"
    );
    for member in &members {
        let lib = root().join(member).join("src/lib.rs");
        if lib.exists() {
            let text = std::fs::read_to_string(&lib).unwrap();
            assert!(text.starts_with("//!"), "{member} opens with crate docs");
        }
    }
}
