//! This checkout's git history, for the tests that read an earlier commit (series_upgrade.rs,
//! recorded_runs.rs), and whether the run is CI's, where such a test may not skip.

use std::process::Command;

use nodemedic_testkit::workspace_root;

/// `git ARGS` in the workspace: its stdout, or `None` when git failed or is missing.
pub fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(workspace_root())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8(out.stdout).unwrap())
}

pub fn has_commit(commit: &str) -> bool {
    git(&["cat-file", "-e", &format!("{commit}^{{commit}}")]).is_some()
}

/// Fetches more history from this checkout's remote (`origin`, else the first): all of it
/// when the clone is shallow, else the remote's branches. Why it could not, when it could not.
pub fn fetch_history() -> Result<(), String> {
    let shallow = git(&["rev-parse", "--is-shallow-repository"])
        .ok_or("not a git checkout (a source tarball?)")?;
    let remotes = git(&["remote"]).unwrap_or_default();
    let remote = remotes
        .lines()
        .find(|r| *r == "origin")
        .or_else(|| remotes.lines().next())
        .ok_or("the checkout has no remote to fetch from")?;
    let mut args = vec!["fetch", "--quiet", "--no-tags"];
    if shallow.trim() == "true" {
        args.push("--unshallow");
    }
    args.push(remote);
    let out = Command::new("git")
        .args(&args)
        .current_dir(workspace_root())
        .output()
        .map_err(|e| format!("git: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stderr: Vec<&str> = stderr
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        Err(format!(
            "`git {}` failed: {}",
            args.join(" "),
            stderr.join(" ")
        ))
    }
}

/// `CI` is set (to anything but empty, `0` or `false`), as CI services and `.ci/run` set it.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.as_str(), "" | "0" | "false"))
}
