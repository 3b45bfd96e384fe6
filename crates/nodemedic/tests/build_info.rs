//! `nodemedic_build_info{version,revision,rustc,target}` and `nodemedic --version` name this
//! build: the crate's version, the checkout's commit (`git rev-parse HEAD`, or
//! NODEMEDIC_REVISION where the build was told it), the compiler cargo runs (`rustc -vV`) and
//! the host target the tests are built for. Each expected value is read here from the tool
//! that knows it, not from the constants the daemon prints.

// Test helpers outside #[test] fns are meant to panic on failure.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::process::Command;

use common::*;

/// `rustc -vV`'s `key: value` lines (release, host, …), from the compiler on PATH: the one
/// cargo ran to build these tests unless RUSTC says otherwise.
fn rustc_facts() -> BTreeMap<String, String> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(rustc).arg("-vV").output().expect("rustc -vV");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn expected_revision() -> String {
    if let Ok(r) = std::env::var("NODEMEDIC_REVISION") {
        if !r.trim().is_empty() {
            return r.trim().to_string();
        }
    }
    let out = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(workspace_root())
        .output()
        .expect("git rev-parse HEAD");
    assert!(
        out.status.success(),
        "not a git checkout and NODEMEDIC_REVISION unset"
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The labels of the one `nodemedic_build_info` line, in their order.
fn build_info_labels(body: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = sample_lines(body)
        .filter(|l| metric_name(l) == "nodemedic_build_info")
        .collect();
    assert_eq!(lines.len(), 1, "nodemedic_build_info lines: {lines:?}");
    let line = lines[0];
    assert!(line.ends_with("} 1"), "`{line}` is not 1");
    let labels = line
        .split_once('{')
        .and_then(|(_, rest)| rest.rsplit_once('}'))
        .map(|(labels, _)| labels)
        .unwrap();
    labels
        .split(',')
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap();
            (k.to_string(), v.trim_matches('"').to_string())
        })
        .collect()
}

#[test]
fn build_info_and_version_name_this_checkout_and_compiler() {
    let rustc = rustc_facts();
    let release = rustc.get("release").expect("rustc -vV release").clone();
    let host = rustc.get("host").expect("rustc -vV host").clone();
    let revision = expected_revision();
    assert_eq!(revision.len(), 40, "revision {revision:?}");
    let want = vec![
        ("version".to_string(), env!("CARGO_PKG_VERSION").to_string()),
        ("revision".to_string(), revision.clone()),
        ("rustc".to_string(), release.clone()),
        ("target".to_string(), host.clone()),
    ];

    let mut server = start_nodemedic("8cpu-collapsed", FAST_CONFIG);
    wait_for_samples(&mut server, 1);
    let r = server.get("/metrics");
    assert_eq!(r.status, 200);
    assert_eq!(build_info_labels(&r.body), want, "nodemedic_build_info");

    // The same facts on the OpenMetrics exposition, where the family is an info metric.
    let om = server.get_with("/metrics", &[("accept", "application/openmetrics-text")]);
    assert!(
        om.body.contains("# TYPE nodemedic_build info\n"),
        "OpenMetrics: no info family"
    );
    assert_eq!(build_info_labels(&om.body), want, "OpenMetrics build_info");

    for flag in ["--version", "-V"] {
        let out = Command::new(nodemedic_bin()).arg(flag).output().unwrap();
        assert!(out.status.success(), "{flag} exited {}", out.status);
        let text = String::from_utf8(out.stdout).unwrap();
        assert_eq!(
            text.trim_end(),
            format!(
                "nodemedic {} (revision {revision}, rustc {release}, target {host})",
                env!("CARGO_PKG_VERSION")
            ),
            "{flag}"
        );
    }
}
