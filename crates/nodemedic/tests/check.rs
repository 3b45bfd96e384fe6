//! `nodemedic check` end to end: the real binary on fixture trees and on this machine.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

use nodemedic_kernel::CpuSet;
use nodemedic_testkit::{copy_fixture, fixture};
use serde_json::Value;

fn check(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nodemedic"))
        .arg("check")
        .args(args)
        .output()
        .expect("run nodemedic")
}

/// A config with the eBPF probes off: they read the running kernel, not the fixture, and
/// would add this machine's perf-event state to a fixture's diagnosis.
fn no_probes_config() -> PathBuf {
    static PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let p = std::env::temp_dir().join(format!("nodemedic-check-{}.toml", std::process::id()));
        std::fs::write(&p, "[probes]\nenabled = false\n").expect("writing the test config");
        p
    })
    .clone()
}

fn check_fixture(name: &str, extra: &[&str]) -> Output {
    let root = fixture(name);
    let mut args = vec![
        "--config".to_string(),
        no_probes_config().display().to_string(),
        "--host-root".to_string(),
        root.display().to_string(),
        "--interval".into(),
        "50ms".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    check(&refs)
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): stdout={} stderr={}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The names of the groups a `check --format json` report calls collapsed, in its order.
fn collapsed_names(r: &Value) -> Vec<&str> {
    r["irq"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["collapsed"] == true)
        .map(|g| g["name"].as_str().unwrap())
        .collect()
}

fn group<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["irq"]["groups"]
        .as_array()
        .expect("irq.groups")
        .iter()
        .find(|g| g["name"] == name)
        .unwrap_or_else(|| panic!("no group {name} in {}", report["irq"]["groups"]))
}

fn u32s(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("number") as u32)
        .collect()
}

#[test]
fn incident_fixture_json() {
    let out = check_fixture("8cpu-collapsed", &["--format", "json"]);
    assert_eq!(out.status.code(), Some(1), "findings → exit 1");
    let r = json(&out);
    assert_eq!(r["status"], "findings");
    let nic = group(&r, "virtio2");
    assert_eq!(u32s(&nic["irqs"]), (27..=34).collect::<Vec<_>>());
    assert_eq!(u32s(&nic["effective_cpus"]), vec![4, 5]);
    assert_eq!(nic["eligible_cpus"], 8);
    assert_eq!(nic["collapsed"], true);
    assert_eq!(
        nic["hurting"], false,
        "counts do not move between two reads of a fixture"
    );
    assert_eq!(nic["netdev"], "eth0");
    let nvme = group(&r, "nvme0");
    assert_eq!(nvme["collapsed"], false);
    assert_eq!(u32s(&nvme["effective_cpus"]), (0..8).collect::<Vec<_>>());
    let all = r["findings"].as_array().unwrap();
    // The tuning audit's notes on this VM tree (no cpufreq, no IOMMU groups: the
    // hypervisor's) are info; the collapse is the one warning.
    let info: Vec<&str> = all
        .iter()
        .filter(|f| f["severity"] == "info")
        .filter_map(|f| f["kind"].as_str())
        .collect();
    assert_eq!(
        info,
        ["tuning_cpufreq_absent", "tuning_iommu_absent"],
        "{all:?}"
    );
    let findings: Vec<&serde_json::Value> =
        all.iter().filter(|f| f["severity"] != "info").collect();
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert_eq!(findings[0]["kind"], "irq_collapsed");
    assert_eq!(findings[0]["severity"], "warning");
    assert_eq!(findings[0]["subject"], "virtio2");
    assert!(findings[0]["message"].as_str().unwrap().contains("4-5"));
    let per_cpu = r["irq"]["per_cpu"].as_array().unwrap();
    assert_eq!(per_cpu.len(), 8);
    let cpu4 = per_cpu[4]["device_interrupts"].as_u64().unwrap();
    let cpu0 = per_cpu[0]["device_interrupts"].as_u64().unwrap();
    assert!(
        cpu4 > 100_000_000 && cpu4 > 50 * cpu0,
        "cpu4={cpu4} cpu0={cpu0}"
    );
}

#[test]
fn healthy_fixtures_exit_zero() {
    for name in [
        "8cpu-balanced",
        "96cpu-healthy",
        "256cpu-healthy",
        "8cpu-offline",
        "aarch64-128cpu",
        // 32 ACPI:Ged event lines, never fired, all on CPU 0: no collapse.
        "aarch64-graviton",
    ] {
        let out = check_fixture(name, &["--format", "json"]);
        let r = json(&out);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", r["findings"]);
        assert_eq!(r["status"], "healthy");
        for g in r["irq"]["groups"].as_array().unwrap() {
            assert_eq!(g["collapsed"], false, "{name}: {}", g["name"]);
        }
    }
}

#[test]
fn collapsed_large_nodes() {
    let out = check_fixture("256cpu-collapsed", &["--format", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let r = json(&out);
    let collapsed = collapsed_names(&r);
    assert_eq!(
        collapsed,
        vec!["mlx5_core 0000:17:00.0", "mlx5_core 0000:17:00.1"]
    );
    let g = group(&r, "mlx5_core 0000:17:00.0");
    assert_eq!(u32s(&g["effective_cpus"]), vec![4, 5]);
    assert_eq!(g["eligible_cpus"], 64);
    assert_eq!(g["irqs"].as_array().unwrap().len(), 64);
}

/// The same node with its ENA queues pinned to CPU 0: `eth0` is the one collapse, though its
/// event lines share that CPU.
#[test]
fn graviton_collapse_names_the_nic_only() {
    let out = check_fixture("aarch64-graviton-collapsed", &["--format", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let r = json(&out);
    let collapsed = collapsed_names(&r);
    assert_eq!(collapsed, vec!["eth0"]);
    let g = group(&r, "eth0");
    assert_eq!(u32s(&g["effective_cpus"]), vec![0]);
    assert_eq!(g["irqs"].as_array().unwrap().len(), 8);
}

#[test]
fn text_report_shows_bars_groups_and_advice() {
    let out = check_fixture("8cpu-collapsed", &[]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    let cpu4 = text
        .lines()
        .find(|l| l.trim_start().starts_with("CPU4 "))
        .expect("CPU4 row");
    assert_eq!(
        cpu4.matches('█').count(),
        40,
        "hottest CPU has the full bar: {cpu4}"
    );
    let cpu0 = text
        .lines()
        .find(|l| l.trim_start().starts_with("CPU0 "))
        .expect("CPU0 row");
    assert_eq!(cpu0.matches('█').count(), 0, "{cpu0}");
    assert!(
        text.contains("virtio2 [eth0, virtio-pci, 0000:00:03.0]  COLLAPSED"),
        "{text}"
    );
    assert!(text.contains("systemctl try-restart irqbalance"), "{text}");
}

#[test]
fn could_not_run_is_exit_two_with_a_reason() {
    let out = check_fixture("missing", &["--format", "json"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("proc/interrupts: not found"), "{err}");
    let out = check_fixture("empty", &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("file is empty"));
    let out = check(&["--format", "yaml"]);
    assert_eq!(out.status.code(), Some(2), "usage error");
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(&cfg, "[detector.collapse]\nmax_cpus = 0\n").unwrap();
    let out = check(&["--config", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("max_cpus"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn damaged_tree_still_reports() {
    let out = check_fixture("truncated", &["--format", "json"]);
    let r = json(&out);
    // Only IRQs 27-30 of the NIC survive the cut: 4 IRQs on 2 of 8 CPUs is below the
    // collapse threshold (at most 1 CPU for 4 IRQs), so the report is partial but healthy.
    assert_eq!(out.status.code(), Some(0), "{}", r["findings"]);
    let nic = group(&r, "virtio2");
    assert_eq!(u32s(&nic["irqs"]), vec![27, 28, 29, 30]);
    assert_eq!(u32s(&nic["effective_cpus"]), vec![4, 5]);
    assert_eq!(nic["collapsed"], false);
    let interrupts = r["collectors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "interrupts")
        .unwrap();
    assert_eq!(interrupts["state"], "active");
    assert!(!interrupts["warnings"].as_array().unwrap().is_empty());
}

#[test]
fn this_machine() {
    let out = check(&["--format", "json", "--interval", "200ms"]);
    let r = json(&out);
    assert!(out.status.code() == Some(0) || out.status.code() == Some(1));
    // Every collector runs on this kernel, except the eBPF probes where the kernel has no
    // kprobes/fentry: those are failed with a reason (and do not fail the check).
    for c in r["collectors"].as_array().unwrap() {
        if c["name"] == "perf_probes" && c["state"] == "failed" {
            assert!(
                c["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("probes down")),
                "{c}"
            );
            assert!(r["perf"]["down_reason"].is_string(), "{}", r["perf"]);
            continue;
        }
        assert_eq!(c["state"], "active", "{c}");
    }
    // Cross-check every group against the kernel's own files, on any machine: its IRQs are
    // numbered IRQs of /proc/interrupts, and the CPUs it may use are online, not isolated
    // and not nohz_full.
    let cpus = |name: &str| -> CpuSet {
        std::fs::read_to_string(format!("/sys/devices/system/cpu/{name}"))
            .ok()
            .and_then(|t| CpuSet::parse_list(&t).ok())
            .unwrap_or_default()
    };
    let online = cpus("online");
    assert!(!online.is_empty(), "this machine has online CPUs");
    let unusable: Vec<u32> = cpus("isolated")
        .iter()
        .chain(cpus("nohz_full").iter())
        .collect();
    let kernel_irqs: std::collections::BTreeSet<u32> = std::fs::read_to_string("/proc/interrupts")
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(':')?.0.trim().parse().ok())
        .collect();
    let groups = r["irq"]["groups"].as_array().expect("irq.groups");
    for g in groups {
        let name = g["name"].as_str().unwrap();
        for irq in u32s(&g["irqs"]) {
            assert!(
                kernel_irqs.contains(&irq),
                "{name}: IRQ {irq} not in /proc/interrupts"
            );
        }
        let eligible = CpuSet::parse_list(g["eligible_cpu_list"].as_str().unwrap()).unwrap();
        for cpu in eligible.iter() {
            assert!(
                online.contains(cpu),
                "{name}: eligible CPU {cpu} is not online"
            );
            assert!(
                !unusable.contains(&cpu),
                "{name}: eligible CPU {cpu} is isolated/nohz_full"
            );
        }
    }
    // Where the machine has virtio devices (this VM does), their queue IRQs are grouped
    // exactly as the kernel names them.
    for (name, irqs) in &common::virtio_queue_irqs() {
        let g = group(&r, name);
        assert_eq!(&u32s(&g["irqs"]), irqs, "{name}");
        assert!(g["pci"].as_str().unwrap().starts_with("0000:"), "{name}");
    }
}

/// The pressure section on a Kubernetes fixture: node PSI, every watched cgroup with the
/// fields scripts use, the layout found by the tree's shape (a fixture has no mountinfo).
#[test]
fn pressure_section_on_a_kubernetes_node() {
    let out = check_fixture("k8s-systemd-v2", &["--format", "json"]);
    let r = json(&out);
    // The tree's nohz_full reads "(null)", as on Debian's kernel: topology does not warn (the
    // tree's damaged cgroup files are the cgroups collector's warnings, asserted elsewhere).
    let topology = r["collectors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "topology")
        .unwrap();
    assert_eq!(topology["state"], "active", "{topology:#}");
    assert_eq!(
        topology["warnings"].as_array().map_or(0, Vec::len),
        0,
        "{topology:#}"
    );
    let p = &r["pressure"];
    assert!(p["node"]["cpu"]["some"].is_number(), "{p:#}");
    assert_eq!(p["cgroup_mounts_from_mountinfo"], false);
    let cgroups = p["cgroups"].as_array().unwrap();
    assert_eq!(cgroups.len(), 9, "6 pods + 3 services: {cgroups:#?}");
    for c in cgroups {
        for key in [
            "path",
            "pod_uid",
            "qos",
            "quota_cores",
            "throttled_ratio",
            "cpu_some_ratio",
            "memory_some_ratio",
        ] {
            assert!(c.get(key).is_some(), "{key} missing in {c}");
        }
    }
    let hpc = cgroups
        .iter()
        .find(|c| c["pod_uid"] == "8f14e45f-ceea-467f-a0e6-4f1a2b3c4d5e")
        .unwrap();
    assert_eq!(hpc["qos"], "guaranteed");
    assert_eq!(hpc["quota_cores"], 10.0);
    let text = check_fixture("k8s-systemd-v2", &[]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("Pressure (share of the interval"), "{text}");
    assert!(text.contains("most pressured cgroups"), "{text}");
}

/// A failed collector's reason is said once in all that check prints (stdout and stderr),
/// not in a log line, a section and the findings.
#[test]
fn a_failure_reason_is_printed_once() {
    // The balanced fixture with softnet_stat a directory: that collector fails, alone.
    let copy = copy_fixture("8cpu-balanced");
    let tree = copy.path();
    let softnet = tree.join("proc/net/softnet_stat");
    std::fs::remove_file(&softnet).unwrap();
    std::fs::create_dir(&softnet).unwrap();
    let config = no_probes_config();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "--config",
            config.to_str().unwrap(),
            "--host-root",
            tree.to_str().unwrap(),
            "--interval",
            "50ms",
        ];
        args.extend_from_slice(extra);
        check(&args)
    };
    let out = run(&[]);
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json(&run(&["--format", "json"]));
    let reasons: Vec<&str> = report["collectors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["state"] == "failed")
        .filter_map(|c| c["reason"].as_str())
        .collect();
    assert_eq!(reasons.len(), 1, "{report:#}");
    for r in reasons {
        assert_eq!(all.matches(r).count(), 1, "{r:?} in:\n{all}");
    }
}

/// Issue 19 on this machine's real files: the tuning section reports what the kernel shows,
/// read here independently, and warns about nothing on an idle node. Where the source is
/// absent (no cpufreq, no IOMMU groups) it says whose setting it is.
#[test]
fn tuning_on_this_machine() {
    let out = check(&["--format", "json", "--interval", "200ms"]);
    let r = json(&out);
    let t = &r["tuning"];
    assert!(t["unavailable"].is_null(), "{t}");
    let warnings: Vec<&Value> = t["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] != "info")
        .collect();
    assert!(
        warnings.is_empty(),
        "a false warning on an idle node: {warnings:?}"
    );
    let s = &t["settings"];
    // Every NIC with a device, as the kernel lists its queues.
    for (name, nic) in s["nics"].as_object().unwrap() {
        let queues: Vec<String> = std::fs::read_dir(format!("/sys/class/net/{name}/queues"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        let rx = queues.iter().filter(|q| q.starts_with("rx-")).count();
        assert_eq!(nic["rx_queues"], rx, "{name}: {nic}");
    }
    if let Ok(srso) =
        std::fs::read_to_string("/sys/devices/system/cpu/vulnerabilities/spec_rstack_overflow")
    {
        assert_eq!(
            s["vulnerabilities"]["spec_rstack_overflow"],
            srso.trim_end(),
            "{s}"
        );
    }
    let kinds: Vec<&str> = t["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["rule"].as_str())
        .collect();
    // What the collector read of cpufreq and the IOMMU is checked against the real files by
    // nodemedic-collect's tests/tuning_real.rs; here, that the notes follow it.
    assert_eq!(
        kinds.contains(&"cpufreq_absent"),
        s["cpufreq_present"] == false,
        "{kinds:?}"
    );
    assert_eq!(
        kinds.contains(&"iommu_absent"),
        s["iommu_groups_present"] == false,
        "{kinds:?}"
    );
    let hypervisor = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("flags") && l.split_whitespace().any(|f| f == "hypervisor"));
    for f in t["findings"].as_array().unwrap() {
        if f["rule"] == "cpufreq_absent" || f["rule"] == "iommu_absent" {
            assert_eq!(
                f["evidence"].as_str().unwrap().contains("hypervisor"),
                hypervisor,
                "{f}"
            );
        }
    }
    // The text report has the section, each finding once in full.
    let text = check(&["--interval", "200ms"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("\nTuning ("), "{text}");
    for f in t["findings"].as_array().unwrap() {
        let evidence = f["evidence"].as_str().unwrap();
        assert_eq!(text.matches(evidence).count(), 1, "{evidence}\n{text}");
    }
}

/// A copy of a healthy fixture read as a container reads the host (`--host-root`), whose
/// `proc/self/mountinfo` has a read-only `sys`, and below it a writable `sys/kernel/security`
/// and `proc/irq` (issue 52, point 6).
fn tree_with_writable_mounts() -> tempfile::TempDir {
    let tree = copy_fixture("8cpu-balanced");
    let root = tree.path();
    let line = |id: u32, point: &str, opts: &str, fs: &str| {
        format!(
            "{id} 1 0:{id} / {}/{point} {opts},relatime - {fs} {fs} rw\n",
            root.display()
        )
    };
    std::fs::create_dir_all(root.join("proc/self")).unwrap();
    std::fs::write(
        root.join("proc/self/mountinfo"),
        line(10, "sys", "ro", "sysfs")
            + &line(11, "sys/kernel/security", "rw", "securityfs")
            + &line(12, "proc/irq", "rw", "proc"),
    )
    .unwrap();
    tree
}

/// The host mounts a container can write are a warning finding naming them, `check` (exit
/// 1, JSON and text) and `run` (`/status`, `nodemedic_host_writable_mounts`) say so, and a
/// mount meant to be writable (native rebalancing's `/proc/irq`) is left out.
#[test]
fn writable_host_mounts_are_named() {
    let tree = tree_with_writable_mounts();
    let root = tree.path();
    let config = root.join("nodemedic.toml");
    let run_check = |native: bool, format: &str| {
        std::fs::write(
            &config,
            format!("[probes]\nenabled = false\n[remediation.native]\nenabled = {native}\n"),
        )
        .unwrap();
        let args = [
            "--config",
            config.to_str().unwrap(),
            "--host-root",
            root.to_str().unwrap(),
            "--interval",
            "50ms",
            "--format",
            format,
        ];
        check(&args)
    };
    let security = root.join("sys/kernel/security").display().to_string();
    let out = run_check(true, "json");
    let r = json(&out);
    assert_eq!(out.status.code(), Some(1), "{}", r["findings"]);
    let found: Vec<&Value> = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "host_mount_writable")
        .collect();
    assert_eq!(found.len(), 1, "{}", r["findings"]);
    assert_eq!(found[0]["severity"], "warning");
    assert_eq!(
        found[0]["message"].as_str().unwrap(),
        format!(
            "host mount {security} (securityfs) is writable from nodemedic's container: the \
             runtime did not make the mount read-only all the way down (recursive read-only \
             mounts need Linux 5.12 and a runtime that makes them, such as containerd 2 or \
             CRI-O 1.30); mount it read-only on its own, or leave it out of the pod"
        )
    );
    // Nothing else is a warning: the fixture is healthy (the tuning audit's info remains).
    let warnings = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] != "info")
        .count();
    assert_eq!(warnings, 1, "{}", r["findings"]);
    let w = &r["host_access"]["writable_mounts"];
    assert_eq!(
        w,
        &serde_json::json!([{"mount_point": security, "fs_type": "securityfs"}])
    );
    assert_eq!(r["host_access"]["read_only"], serde_json::json!([root]));
    let text = String::from_utf8_lossy(&run_check(true, "text").stdout).into_owned();
    assert!(
        text.contains(&format!(
            "Host access:\n  runs under: no LSM label\n  host mounts: 1 WRITABLE under {}",
            root.display()
        )),
        "{text}"
    );
    // Without native rebalancing /proc/irq is one of them.
    let r = json(&run_check(false, "json"));
    assert_eq!(
        r["host_access"]["writable_mounts"]
            .as_array()
            .unwrap()
            .len(),
        2,
        "{}",
        r["host_access"]
    );
    // The fixture as it is (no mountinfo): not checked, with why, and healthy.
    let out = check_fixture("8cpu-balanced", &["--format", "json"]);
    let r = json(&out);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        r["host_access"]["mounts_unchecked"]
            .as_str()
            .unwrap()
            .contains("self/mountinfo"),
        "{}",
        r["host_access"]
    );

    // `run`: /status names them, the gauge counts them.
    let mut server = common::start_server("nodemedic", "/healthz", |port, dir| {
        let cfg = dir.join("nodemedic.toml");
        std::fs::write(&cfg, "[probes]\nenabled = false\n").unwrap();
        let mut cmd = Command::new(common::nodemedic_bin());
        cmd.arg("--config")
            .arg(&cfg)
            .arg("--host-root")
            .arg(root)
            .arg("--web.listen-address")
            .arg(format!("127.0.0.1:{port}"))
            .arg("run")
            .env_remove("NODEMEDIC_CONFIG")
            .env("NO_COLOR", "1");
        cmd
    });
    common::wait_for_samples(&mut server, 1);
    let status: Value = serde_json::from_str(
        &common::http_get(server.addr(), "/status", &[])
            .unwrap()
            .body,
    )
    .unwrap();
    assert_eq!(
        status["host_access"]["writable_mounts"]
            .as_array()
            .unwrap()
            .len(),
        2,
        "{}",
        status["host_access"]
    );
    assert!(
        status["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["kind"] == "host_mount_writable"),
        "{}",
        status["findings"]
    );
    let metrics = common::http_get(server.addr(), "/metrics", &[])
        .unwrap()
        .body;
    assert!(
        metrics
            .lines()
            .any(|l| l == "nodemedic_host_writable_mounts 2"),
        "{metrics}"
    );
    assert!(
        server.log().contains("host mounts"),
        "the start logs it: {}",
        server.log()
    );
}

/// A pod without `hostNetwork`, made on this machine: a network namespace of its own (lo
/// only) and a mount namespace where `/sys` is that namespace's sysfs, the host's `/sys`
/// bound elsewhere as the chart binds it at `/host/sys`. `/proc/net` and `/proc/sys/net`
/// then describe the new namespace. The tuning collector leaves the `net.core` sysctls out
/// with the reason (they exist in the host's namespace only); softnet, listed in every
/// namespace with the node's per-CPU counters, stays active. The same command in this
/// process's namespace reads them.
#[test]
fn another_network_namespace_is_named_not_reported_as_the_node() {
    let dir = tempfile::tempdir().unwrap();
    let host_sys = dir.path().join("sys");
    std::fs::create_dir(&host_sys).unwrap();
    let config = dir.path().join("nodemedic.toml");
    std::fs::write(
        &config,
        format!(
            "[paths]\nprocfs = \"/proc\"\nsysfs = \"{s}\"\ncgroupfs = \"{s}/fs/cgroup\"\n\
             [probes]\nenabled = false\n",
            s = host_sys.display()
        ),
    )
    .unwrap();
    let bin = env!("CARGO_BIN_EXE_nodemedic");
    let run = |netns: bool| {
        let mounts = format!(
            "mount --make-rprivate / && mount --rbind /sys {s} && {own}exec {bin} check \
             --config {c} --format json --interval 200ms",
            s = host_sys.display(),
            own = if netns {
                "mount -t sysfs sysfs /sys && "
            } else {
                ""
            },
            c = config.display()
        );
        let mut args = vec!["--mount"];
        if netns {
            args.push("--net");
        }
        let out = Command::new("unshare")
            .args(&args)
            .args(["sh", "-c", &mounts])
            .output()
            .expect("unshare (util-linux; this test runs as root, as CI does)");
        assert!(
            out.status.code() == Some(0) || out.status.code() == Some(1),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        json(&out)
    };
    let collector = |r: &Value, name: &str| {
        r["collectors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} collector in {r:#}"))
    };
    let netns_warning = |c: &Value| {
        c["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .find(|w| w.contains("another network namespace"))
            .map(str::to_owned)
    };

    let pod = run(true);
    let tuning = collector(&pod, "tuning");
    assert_eq!(tuning["state"], "active", "{tuning}");
    let why = netns_warning(&tuning).unwrap_or_else(|| panic!("no reason in {tuning}"));
    assert!(
        why.starts_with(
            "net.core.netdev_budget, netdev_budget_usecs and netdev_max_backlog not read"
        ) && why.contains("(its namespace has lo; ")
            && why.contains("hostNetwork: true"),
        "{why}"
    );
    let net_core = &pod["tuning"]["settings"]["net_core"];
    assert!(net_core["netdev_budget"].is_null(), "{net_core}");
    let softnet = collector(&pod, "softnet");
    assert_eq!(softnet["state"], "active", "{softnet}");

    let host = run(false);
    let tuning = collector(&host, "tuning");
    assert_eq!(netns_warning(&tuning), None, "{tuning}");
    let budget = std::fs::read_to_string("/proc/sys/net/core/netdev_budget").unwrap();
    assert_eq!(
        host["tuning"]["settings"]["net_core"]["netdev_budget"].as_u64(),
        budget.trim().parse::<u64>().ok(),
        "{}",
        host["tuning"]["settings"]
    );
}
