//! The facts a fleet groups nodes by (`nodemedic_irqbalance_info`, `nodemedic_node_info`):
//! one series each, read from the tree the daemon watches, `unknown` where a fact cannot be
//! read, and `/status` saying why.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

mod common;

use common::{sample_lines, start_nodemedic, wait_for_samples, Server};

/// Remediation in dry-run asks systemd over a bus that is not there: its state is unknown,
/// with the bus error on /status.
const CONFIG: &str = "sample_interval = \"200ms\"\n\n[remediation]\nmode = \"dry-run\"\n\n\
[remediation.irqbalance]\ndbus_socket = \"/nonexistent/system_bus_socket\"\n\n\
[probes]\nenabled = false\n\n[tuning]\nnic_limits = \"files\"\n";

fn started(fixture: &str) -> Server {
    let mut server = start_nodemedic(fixture, CONFIG);
    wait_for_samples(&mut server, 2);
    server
}

/// The one series of `family` (its labels and value), failing when there is none or more.
fn only_series(metrics: &str, family: &str) -> String {
    let lines: Vec<&str> = sample_lines(metrics)
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .collect();
    assert_eq!(lines.len(), 1, "{family}: {lines:?}");
    lines[0].to_string()
}

fn status(server: &Server) -> serde_json::Value {
    serde_json::from_str(&server.get("/status").body).unwrap()
}

#[test]
fn a_collapsed_node_with_the_buggy_release() {
    let server = started("96cpu-collapsed");
    let metrics = server.get("/metrics").body;
    assert_eq!(
        only_series(&metrics, "nodemedic_irqbalance_info"),
        r#"nodemedic_irqbalance_info{state="unknown",version="1.8.0-1"} 1"#
    );
    assert_eq!(
        only_series(&metrics, "nodemedic_node_info"),
        r#"nodemedic_node_info{kernel_release="6.1.0-28-amd64",virtual_machine="unknown"} 1"#
    );
    let s = status(&server);
    assert_eq!(s["irqbalance_package"]["state"], "installed", "{s:#}");
    assert_eq!(s["irqbalance_package"]["version"], "1.8.0-1");
    let irqb = &s["remediation"]["irqbalance"];
    assert_eq!(irqb["state"], "unknown", "{irqb}");
    assert!(
        irqb["detail"]
            .as_str()
            .unwrap()
            .contains("no system D-Bus socket"),
        "{irqb}"
    );
    // The version systemd cannot give reaches the remediator, which names the buggy release.
    assert_eq!(irqb["version"], "1.8.0-1", "{irqb}");
}

#[test]
fn a_node_without_a_package_database_says_why() {
    let server = started("8cpu-collapsed");
    let metrics = server.get("/metrics").body;
    assert_eq!(
        only_series(&metrics, "nodemedic_irqbalance_info"),
        r#"nodemedic_irqbalance_info{state="unknown",version="unknown"} 1"#
    );
    let s = status(&server);
    let package = &s["irqbalance_package"];
    assert_eq!(package["state"], "unknown", "{package}");
    let reason = package["reason"].as_str().unwrap();
    assert!(reason.contains("no package database"), "{reason}");
    assert!(reason.contains("var/lib/dpkg/status"), "{reason}");
}

#[test]
fn a_node_without_irqbalance() {
    let server = started("k8s-systemd-v2");
    let metrics = server.get("/metrics").body;
    assert_eq!(
        only_series(&metrics, "nodemedic_irqbalance_info"),
        r#"nodemedic_irqbalance_info{state="not_installed",version="unknown"} 1"#
    );
    assert_eq!(
        status(&server)["irqbalance_package"]["state"],
        "not_installed"
    );
}

/// This machine's own kernel and hypervisor flag, as `uname -r` and cpuinfo give them.
#[test]
fn this_machine() {
    let mut server = common::start_nodemedic_on_this_machine(
        "sample_interval = \"200ms\"\n[remediation]\nmode = \"off\"\n[probes]\nenabled = false\n",
    );
    wait_for_samples(&mut server, 2);
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let vm = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("flags"))
        .map(|l| l.split_whitespace().any(|f| f == "hypervisor"));
    let vm = match vm {
        Some(true) => "true",
        Some(false) => "false",
        None => "unknown",
    };
    assert_eq!(
        only_series(&server.get("/metrics").body, "nodemedic_node_info"),
        format!(
            "nodemedic_node_info{{kernel_release=\"{}\",virtual_machine=\"{vm}\"}} 1",
            release.trim()
        )
    );
}
