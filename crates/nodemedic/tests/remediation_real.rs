//! Remediation on this machine's real kernel: pin the virtio IRQs onto one CPU, let
//! `nodemedic run` (native rebalance enabled, thresholds lowered for a 2-CPU node) detect it,
//! rewrite smp_affinity, and verify; in dry-run, nothing is written. Needs root and writable
//! /proc/irq/*/smp_affinity. Restores every affinity it changed.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;

use common::{save_pinnable, start_server, virtio_queue_irqs, Server};
use serde_json::Value;

/// Queue IRQs of virtio devices with at least two of them, all re-pinnable, saved under the
/// machine's real-IRQ guard (which puts them back).
fn pinnable_virtio_groups() -> (nodemedic_testkit::RealIrqs, BTreeMap<String, Vec<u32>>) {
    let mut groups = virtio_queue_irqs();
    groups.retain(|_, irqs| irqs.len() >= 2);
    save_pinnable(groups)
}

fn affinity_list(irq: u32) -> String {
    std::fs::read_to_string(format!("/proc/irq/{irq}/smp_affinity_list"))
        .unwrap()
        .trim()
        .to_string()
}

fn start(mode: &str) -> Server {
    let config = format!(
        r#"sample_interval = "200ms"
[detector.collapse]
min_irqs = 2
raise_after = 2
clear_after = 2
[remediation]
mode = "{mode}"
{remediation}"#,
        remediation = common::FAST_NATIVE_REMEDIATION
    );
    start_server("nodemedic", "/healthz", |port, dir| {
        let cfg = dir.join("nodemedic.toml");
        std::fs::write(&cfg, &config).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_nodemedic"));
        cmd.arg("--config")
            .arg(&cfg)
            .arg("--web.listen-address")
            .arg(format!("127.0.0.1:{port}"))
            .arg("run")
            .env("RUST_LOG", "info");
        cmd
    })
}

fn audit(s: &Server) -> Vec<Value> {
    let v: Value = serde_json::from_str(&s.get("/status").body).unwrap();
    v["remediation"]["audit"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn has(audit: &[Value], action: &str, result: &str) -> bool {
    audit
        .iter()
        .any(|d| d["action"] == action && d["result"] == result)
}

#[test]
fn native_rebalance_spreads_real_irqs_and_dry_run_does_not() {
    let (guard, groups) = pinnable_virtio_groups();
    assert!(
        !groups.is_empty(),
        "no virtio device with several re-pinnable IRQs (needs root)"
    );
    let all: Vec<u32> = groups.values().flatten().copied().collect();
    let pin = || guard.pin(all.iter().copied(), "1");

    // Dry-run: decides and audits, writes nothing.
    pin();
    let mut s = start("dry-run");
    s.poll(
        "a dry-run decision in the audit trail",
        Duration::from_secs(30),
        |s| {
            let a = audit(s);
            if has(&a, "native_rebalance", "dry_run") {
                Ok(())
            } else {
                Err(format!("{a:?}"))
            }
        },
    );
    for irq in &all {
        assert_eq!(affinity_list(*irq), "0", "dry-run must not write IRQ {irq}");
    }
    let a = audit(&s);
    assert!(!a.iter().any(|d| d["result"] == "done"), "{a:?}");
    drop(s);

    // On: detects, writes, verifies.
    pin();
    let mut s = start("on");
    s.poll(
        "a verified native rebalance",
        Duration::from_secs(60),
        |s| {
            let a = audit(s);
            if has(&a, "verify", "verified") {
                Ok(())
            } else {
                Err(format!("{a:?}"))
            }
        },
    );
    let a = audit(&s);
    let actions: Vec<&Value> = a
        .iter()
        .filter(|d| d["action"] == "native_rebalance")
        .collect();
    assert_eq!(
        actions
            .iter()
            .map(|d| d["result"].as_str().unwrap())
            .collect::<Vec<_>>(),
        vec!["pending", "done"],
        "exactly one action: {a:?}"
    );
    let detail = actions[1]["evidence"].as_str().unwrap();
    for (name, irqs) in &groups {
        let cpus: BTreeSet<String> = irqs.iter().map(|i| affinity_list(*i)).collect();
        assert_eq!(
            cpus.len(),
            2,
            "{name}: IRQs {irqs:?} spread over both CPUs, got {cpus:?} ({detail})"
        );
        for irq in irqs {
            assert!(
                detail.contains(&format!("{irq}->")),
                "audit names IRQ {irq}: {detail}"
            );
        }
    }
    let metrics = s.get("/metrics").body;
    assert!(
        metrics.contains(
            "nodemedic_remediation_actions_total{action=\"native_rebalance\",result=\"done\"} 1"
        ),
        "{metrics}"
    );
    let verified = format!(
        "nodemedic_remediation_actions_total{{action=\"verify\",result=\"verified\"}} {}",
        groups.len()
    );
    assert!(
        metrics.contains(&verified),
        "one verification per group: {verified}\n{metrics}"
    );
    assert!(metrics.contains("nodemedic_remediation_last_action_timestamp_seconds "));
    // The cooldown (12 s): a second collapse inside it gets no action, one after it does.
    // Wait for the fixed verdict to clear, then collapse the IRQs again.
    let first_done = actions[1]["timestamp"].as_f64().unwrap();
    let collapsed = |s: &Server| -> usize {
        s.get("/metrics")
            .body
            .lines()
            .filter(|l| l.starts_with("nodemedic_irq_collapsed{") && l.ends_with(" 1"))
            .filter(|l| groups.keys().any(|g| l.contains(&format!("group=\"{g}\""))))
            .count()
    };
    s.poll(
        "the fixed collapse cleared",
        Duration::from_secs(30),
        |s| match collapsed(s) {
            0 => Ok(()),
            n => Err(format!("{n} groups still collapsed")),
        },
    );
    pin();
    s.poll(
        "the second collapse seen",
        Duration::from_secs(30),
        |s| match collapsed(s) {
            0 => Err("not collapsed yet".to_string()),
            _ => Ok(()),
        },
    );
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
    };
    let seen_at = now();
    assert!(
        seen_at - first_done < 10.0,
        "the second collapse came {:.1}s after the action: too late to test the cooldown",
        seen_at - first_done
    );
    // Collapsed, stage fresh, and still no action while the cooldown runs.
    while now() - first_done < 11.0 {
        let dones = audit(&s)
            .iter()
            .filter(|d| d["action"] == "native_rebalance" && d["result"] == "done")
            .count();
        assert_eq!(dones, 1, "a second action inside the cooldown");
        assert!(collapsed(&s) > 0, "the second collapse went away by itself");
        std::thread::sleep(Duration::from_millis(200));
    }
    // After it, the same collapse is acted on: it was the cooldown that held it.
    s.poll(
        "a second action after the cooldown",
        Duration::from_secs(30),
        |s| {
            let a = audit(s);
            let dones: Vec<f64> = a
                .iter()
                .filter(|d| d["action"] == "native_rebalance" && d["result"] == "done")
                .filter_map(|d| d["timestamp"].as_f64())
                .collect();
            if dones.len() >= 2 {
                Ok(dones)
            } else {
                Err(format!("{a:?}"))
            }
        },
    );
    let dones: Vec<f64> = audit(&s)
        .iter()
        .filter(|d| d["action"] == "native_rebalance" && d["result"] == "done")
        .filter_map(|d| d["timestamp"].as_f64())
        .collect();
    eprintln!(
        "cooldown: action at {first_done:.1}, second collapse seen {:.1}s later, second action {:.1}s after the first",
        seen_at - first_done,
        dones[1] - dones[0]
    );
    assert!(
        dones[1] - dones[0] >= 12.0 - 0.5,
        "second action {:.1}s after the first, inside the 12 s cooldown",
        dones[1] - dones[0]
    );
    assert!(
        s.log().contains("remediation decision"),
        "audit lines in the log"
    );
}
