//! On this machine's real kernel: re-pin the virtio IRQs and watch `nodemedic check` follow.
//! Needs root and a writable /proc/irq/*/smp_affinity (true on the development VM and CI).
//! Restores every affinity it changed, even when an assertion fails, and even when the test
//! process is killed (the next test to move real IRQs puts them back: tested here).

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::sync::Mutex;

use common::{save_pinnable, virtio_queue_irqs};
use nodemedic_testkit::RealIrqs;

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

/// The two tests here must not move the same IRQs at once (the machine-wide guard serializes
/// them too, but the killed-test check reads masks between two guards).
static SERIAL: Mutex<()> = Mutex::new(());

#[test]
fn effective_cpus_follow_real_pinning() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    assert_ne!(online.trim(), "0", "needs at least two CPUs");
    // Kernel-managed IRQs (virtio-blk, nvme queues) refuse affinity writes; only devices whose
    // queue IRQs all accept a write of their own current mask take part.
    let (guard, groups) = save_pinnable(virtio_queue_irqs());
    assert!(
        !groups.is_empty(),
        "no virtio device with re-pinnable IRQs on this machine (needs root)"
    );

    for (mask, cpu) in [("1", 0u32), ("2", 1u32)] {
        guard.pin(groups.values().flatten().copied(), mask);
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

/// Run only by `masks_moved_by_a_killed_test_are_put_back`, in a child process: moves the IRQs
/// named in NODEMEDIC_TEST_PIN ("IRQ,IRQ=MASK") under the guard, then dies without unwinding.
#[test]
#[ignore = "a child of masks_moved_by_a_killed_test_are_put_back"]
fn pin_then_die() {
    let spec = std::env::var("NODEMEDIC_TEST_PIN").expect("NODEMEDIC_TEST_PIN");
    let (irqs, mask) = spec.split_once('=').unwrap();
    let irqs: Vec<u32> = irqs.split(',').map(|i| i.parse().unwrap()).collect();
    let mut guard = RealIrqs::lock();
    guard.save(irqs.iter().copied());
    guard.pin(irqs.iter().copied(), mask);
    std::process::abort();
}

#[test]
fn masks_moved_by_a_killed_test_are_put_back() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (guard, groups) = save_pinnable(virtio_queue_irqs());
    let irqs: Vec<u32> = groups.values().flatten().copied().collect();
    assert!(
        !irqs.is_empty(),
        "no virtio device with re-pinnable IRQs on this machine (needs root)"
    );
    let before: BTreeMap<u32, String> = irqs.iter().map(|i| (*i, RealIrqs::mask(*i))).collect();
    drop(guard);
    // A mask that differs from every IRQ's current one, so the child's write is seen.
    let pin = if before.values().any(|m| m.trim_start_matches('0') == "1") {
        "2"
    } else {
        "1"
    };
    let list: Vec<String> = irqs.iter().map(u32::to_string).collect();
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "pin_then_die", "--ignored", "--nocapture"])
        .env("NODEMEDIC_TEST_PIN", format!("{}={pin}", list.join(",")))
        .status()
        .unwrap();
    assert_eq!(
        status.signal(),
        Some(6),
        "the child must die by SIGABRT: {status}"
    );
    let left: BTreeMap<u32, String> = irqs.iter().map(|i| (*i, RealIrqs::mask(*i))).collect();
    assert!(
        left.values().all(|m| m.trim_start_matches('0') == pin),
        "the child died with the IRQs on mask {pin}: {left:?}"
    );
    assert!(
        std::path::Path::new(nodemedic_testkit::REAL_IRQS_JOURNAL).exists(),
        "the child's journal is left behind"
    );
    // The next guard puts them back before anything else.
    let guard = RealIrqs::lock();
    let after: BTreeMap<u32, String> = irqs.iter().map(|i| (*i, RealIrqs::mask(*i))).collect();
    assert_eq!(after, before, "masks after the next guard");
    assert!(!std::path::Path::new(nodemedic_testkit::REAL_IRQS_JOURNAL).exists());
    drop(guard);
}
