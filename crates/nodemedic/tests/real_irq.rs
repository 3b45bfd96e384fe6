//! On this machine's real kernel: re-pin the virtio IRQs and watch `nodemedic check` follow.
//! Needs root and a writable /proc/irq/*/smp_affinity (true on the development VM and CI).
//! Restores every affinity it changed, even when an assertion fails.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::process::Command;

use common::{affinity_writable, virtio_queue_irqs, RestoreAffinity};

use serde_json::Value;

fn check_json() -> (Option<i32>, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_nodemedic"))
        .args(["check", "--format", "json", "--interval", "100ms"])
        .output()
        .unwrap();
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code(), v)
}

fn pin_all(irqs: &BTreeMap<String, Vec<u32>>, mask: &str) {
    for irq in irqs.values().flatten() {
        std::fs::write(format!("/proc/irq/{irq}/smp_affinity"), mask)
            .unwrap_or_else(|e| panic!("writing /proc/irq/{irq}/smp_affinity: {e} (needs root)"));
    }
}

#[test]
fn effective_cpus_follow_real_pinning() {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    assert_ne!(online.trim(), "0", "needs at least two CPUs");
    // Kernel-managed IRQs (virtio-blk, nvme queues) refuse affinity writes; only devices whose
    // queue IRQs all accept a write of their own current mask take part.
    let groups: BTreeMap<String, Vec<u32>> = virtio_queue_irqs()
        .into_iter()
        .filter(|(_, irqs)| irqs.iter().all(|irq| affinity_writable(*irq)))
        .collect();
    assert!(
        !groups.is_empty(),
        "no virtio device with re-pinnable IRQs on this machine (needs root)"
    );
    let _restore = RestoreAffinity::save(groups.values().flatten().copied());

    for (mask, cpu) in [("1", 0u32), ("2", 1u32)] {
        pin_all(&groups, mask);
        let (code, r) = check_json();
        for (name, irqs) in &groups {
            let g = r["irq"]["groups"]
                .as_array()
                .unwrap()
                .iter()
                .find(|g| g["name"] == name.as_str())
                .unwrap_or_else(|| panic!("no group {name}"));
            let eff: Vec<u64> = g["effective_cpus"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_u64().unwrap())
                .collect();
            assert_eq!(eff, vec![u64::from(cpu)], "{name} pinned to CPU {cpu}");
            // With the default thresholds, a device with at least 4 queue IRQs all on one of
            // two CPUs is a collapse.
            let expect = irqs.len() >= 4;
            assert_eq!(g["collapsed"], expect, "{name}: {} IRQs", irqs.len());
        }
        let any_collapsed = groups.values().any(|irqs| irqs.len() >= 4);
        assert_eq!(code, Some(if any_collapsed { 1 } else { 0 }));
    }
}
