//! The build's facts for `nodemedic_build_info` and `nodemedic --version`: the source
//! revision, the compiler and the target. Each is one line from a tool the build already has
//! (git, `$RUSTC`, cargo's `TARGET`), so this script does it itself rather than pulling in
//! vergen's or shadow-rs's build-dependency trees, which would then be compiled on every cold
//! build and carried in the SBOM, the licence check and the advisory check.
//!
//! Nothing here depends on the time or the path of the build, so two builds of one commit give
//! the same facts (deploy/reproducible-build.sh checks it). The revision:
//! - `NODEMEDIC_REVISION`, when set: a source tree without `.git` (a tarball, a distribution's
//!   build) says which commit it is;
//! - otherwise `git rev-parse HEAD` in this checkout (a worktree too), rebuilt when HEAD or
//!   the branch it points to moves;
//! - otherwise `unknown`, with a cargo warning.
//!
//! Uncommitted changes are not marked: that would need the script to rerun on every source
//! file's change, and the release artifacts are built from clean checkouts.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=NODEMEDIC_REVISION");
    let revision = match std::env::var("NODEMEDIC_REVISION") {
        Ok(r) if !r.trim().is_empty() => r.trim().to_string(),
        _ => git_revision().unwrap_or_else(|| {
            println!(
                "cargo:warning=no git checkout and NODEMEDIC_REVISION unset: revision=\"unknown\""
            );
            "unknown".to_string()
        }),
    };
    println!("cargo:rustc-env=NODEMEDIC_REVISION={revision}");
    println!("cargo:rustc-env=NODEMEDIC_RUSTC={}", rustc_version());
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".to_string());
    println!("cargo:rustc-env=NODEMEDIC_TARGET={target}");
}

fn git(args: &[&str]) -> Option<String> {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")?;
    let out = Command::new("git")
        .args(args)
        .current_dir(&dir)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    Some(text.trim().to_string()).filter(|t| !t.is_empty())
}

/// HEAD's commit, and the files whose change moves it: HEAD itself, the ref it points to
/// (loose or packed). `--git-path` resolves them in a worktree too, where HEAD is the
/// worktree's and the refs are the main repository's.
fn git_revision() -> Option<String> {
    let revision = git(&["rev-parse", "HEAD"])?;
    let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(branch);
    }
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--git-path", &name]) {
            let path = absolute(Path::new(&path));
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    Some(revision)
}

/// `git rev-parse --git-path` answers relative to the directory it ran in.
fn absolute(path: &Path) -> PathBuf {
    match std::env::var_os("CARGO_MANIFEST_DIR") {
        Some(dir) if path.is_relative() => Path::new(&dir).join(path),
        _ => path.to_path_buf(),
    }
}

/// `rustc 1.91.0 (f8297e351 2025-10-28)` → `1.91.0`: the version, like the Go exporters'
/// `goversion`.
fn rustc_version() -> String {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    Command::new(rustc)
        .arg("-V")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|v| v.split_whitespace().nth(1).map(str::to_string))
        .unwrap_or_else(|| "unknown".to_string())
}
