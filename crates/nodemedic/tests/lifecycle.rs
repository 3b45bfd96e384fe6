//! The daemon's lifecycle: a task that dies makes `nodemedic run` exit non-zero (so systemd or
//! the kubelet restarts it) instead of serving stale answers, and SIGTERM stops it within
//! its bound.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use nodemedic_testkit::{fixture, poll_until, ChildGuard};

fn spawn(extra: &[&str], dir: &std::path::Path) -> (ChildGuard, u16) {
    let cfg = dir.join("nodemedic.toml");
    std::fs::write(&cfg, FAST_CONFIG).unwrap();
    let port = free_port();
    let child = nodemedic_cmd(
        &[],
        &cfg,
        &fixture("8cpu-collapsed"),
        &["--web.listen-address".into(), format!("127.0.0.1:{port}")],
        &extra.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
    )
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(dir.join("stderr")).unwrap())
    .spawn()
    .unwrap();
    (ChildGuard::new(child), port)
}

#[test]
fn a_task_that_dies_makes_the_daemon_exit_non_zero() {
    for task in ["sampler", "remediator", "kubernetes"] {
        let dir = tempfile::tempdir().unwrap();
        let (mut child, _) = spawn(&["--fault.panic-task", task], dir.path());
        let status = child
            .wait_exit(DEADLINE)
            .unwrap_or_else(|| panic!("{task}: the daemon kept running without its task"));
        let stderr = std::fs::read_to_string(dir.path().join("stderr")).unwrap();
        assert!(!status.success(), "{task}: exit {status}\n{stderr}");
        assert!(
            stderr.contains(&format!("the {task} task panicked")),
            "{task}: the reason is not in the log:\n{stderr}"
        );
    }
}

#[test]
fn sigterm_stops_the_daemon_cleanly_within_its_bound() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, port) = spawn(&[], dir.path());
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    poll_until(
        Instant::now() + DEADLINE,
        "the daemon to answer /healthz",
        || match http_get(addr, "/healthz", &[]) {
            Ok(r) if r.status == 200 => Ok(()),
            Ok(r) => Err(format!("HTTP {}", r.status)),
            Err(e) => Err(e),
        },
    );
    let ok = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok);
    // STOP_GRACE (15 s) is the most a step in flight may take; with none, it is immediate.
    let status = child
        .wait_exit(Duration::from_secs(20))
        .expect("SIGTERM did not stop the daemon within its bound");
    let stderr = std::fs::read_to_string(dir.path().join("stderr")).unwrap();
    assert!(status.success(), "exit {status}\n{stderr}");
    assert!(stderr.contains("nodemedic stopped"), "{stderr}");
}
