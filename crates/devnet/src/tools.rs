//! Finding the pinned node binaries that `scripts/install-tools.sh` installs.

use std::path::{Path, PathBuf};

/// A pinned binary is missing.
#[derive(Debug, thiserror::Error)]
#[error(
    "{name} is not installed in {dir}: run `scripts/install-tools.sh` \
     (or point NEVE_TOOLS_DIR at a directory holding it)"
)]
pub struct ToolError {
    name: String,
    dir: String,
}

/// The workspace root this crate was built in (holds `scripts/`, and has
/// `../shared` beside it).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/devnet sits two levels below the workspace root")
        .to_path_buf()
}

/// Where the pinned nodes live: `$NEVE_TOOLS_DIR`, else `<workspace>/.tools`.
pub fn tools_dir() -> PathBuf {
    match std::env::var_os("NEVE_TOOLS_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => workspace_root().join(".tools"),
    }
}

/// The path of an installed tool (`geth`, `avalanchego`).
pub fn tool_path(name: &str) -> Result<PathBuf, ToolError> {
    let dir = tools_dir();
    let path = dir.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(ToolError {
            name: name.to_owned(),
            dir: dir.display().to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_tools_name_the_install_script() {
        let error = tool_path("no-such-node").unwrap_err();
        assert!(error.to_string().contains("scripts/install-tools.sh"));
    }

    #[test]
    fn workspace_root_holds_the_install_script() {
        assert!(workspace_root().join("scripts/install-tools.sh").is_file());
    }
}
