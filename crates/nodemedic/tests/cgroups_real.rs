//! Per-cgroup quota, throttling and pressure on this machine's real kernel: a cgroup with a
//! CPU quota of 0.2 CPUs and two busy loops in it. On this machine the cpu controller is on
//! cgroup v1 (`/sys/fs/cgroup/cpu`) and PSI on the unified v2 hierarchy
//! (`/sys/fs/cgroup/unified`), so the test creates the same-named cgroup in both, as systemd
//! does on a hybrid node, and nodemedic joins them by path. On a pure v2 machine it uses
//! `cpu.max` in the one hierarchy. The layout comes from the real `/proc/self/mountinfo`.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nodemedic_testkit::ChildGuard;
use serde_json::Value;

const ROOT: &str = "/sys/fs/cgroup";

/// A service cgroup `system.slice/<unit>` in every hierarchy that matters, with busy loops
/// in it. Dropping it kills the loops and removes what it created.
struct Burners {
    unit: String,
    dirs: Vec<PathBuf>,
    created_slices: Vec<PathBuf>,
    children: Vec<ChildGuard>,
}

impl Burners {
    fn start(quota_us: u64, loops: usize) -> Burners {
        let unit = format!("nodemedic-test-{}.service", std::process::id());
        let root = Path::new(ROOT);
        let (v1_cpu, unified) = if root.join("cgroup.controllers").is_file() {
            (None, root.to_path_buf())
        } else {
            let cpu = ["cpu,cpuacct", "cpu"]
                .iter()
                .map(|d| root.join(d))
                .find(|d| d.join("cpu.cfs_quota_us").is_file())
                .expect("no cgroup v2 root and no v1 cpu controller under /sys/fs/cgroup");
            (Some(cpu), root.join("unified"))
        };
        let mut b = Burners {
            unit: unit.clone(),
            dirs: Vec::new(),
            created_slices: Vec::new(),
            children: Vec::new(),
        };
        for base in v1_cpu.iter().chain([&unified]) {
            let slice = base.join("system.slice");
            if !slice.exists() {
                std::fs::create_dir(&slice).unwrap_or_else(|e| {
                    panic!("mkdir {}: {e} (the test needs root)", slice.display())
                });
                b.created_slices.push(slice.clone());
            }
            let dir = slice.join(&unit);
            std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
            b.dirs.push(dir);
        }
        match &v1_cpu {
            Some(_) => {
                std::fs::write(b.dirs[0].join("cpu.cfs_period_us"), "100000").unwrap();
                std::fs::write(b.dirs[0].join("cpu.cfs_quota_us"), quota_us.to_string()).unwrap();
            }
            None => {
                // The cpu controller must be enabled for the slice's children.
                let _ = std::fs::write(root.join("cgroup.subtree_control"), "+cpu");
                let _ = std::fs::write(root.join("system.slice/cgroup.subtree_control"), "+cpu");
                std::fs::write(b.dirs[0].join("cpu.max"), format!("{quota_us} 100000")).unwrap();
            }
        }
        for _ in 0..loops {
            let child = ChildGuard::new(
                Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .stdin(Stdio::null())
                    .spawn()
                    .expect("spawn a busy loop"),
            );
            for dir in &b.dirs {
                std::fs::write(dir.join("cgroup.procs"), child.id().to_string()).unwrap_or_else(
                    |e| panic!("moving {} into {}: {e}", child.id(), dir.display()),
                );
            }
            b.children.push(child);
        }
        b
    }
}

impl Drop for Burners {
    fn drop(&mut self) {
        // Killed and reaped first: a cgroup is removable once its last task has exited.
        self.children.clear();
        for d in self.dirs.iter().chain(self.created_slices.iter()) {
            for _ in 0..50 {
                if std::fs::remove_dir(d).is_ok() || !d.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
}

#[test]
fn a_real_quota_bound_service_is_found_measured_and_named() {
    let burners = Burners::start(20_000, 2);
    let cfg = std::env::temp_dir().join(format!("nodemedic-cgroups-{}.toml", std::process::id()));
    std::fs::write(&cfg, "[probes]\nenabled = false\n").unwrap();
    let out = Command::new(common::nodemedic_bin())
        .args(["--config", cfg.to_str().unwrap()])
        .args(["check", "--format", "json", "--interval", "2s"])
        .output()
        .expect("run nodemedic check");
    let _ = std::fs::remove_file(&cfg);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let cgroups = report["pressure"]["cgroups"]
        .as_array()
        .expect("pressure.cgroups");
    let ours = cgroups
        .iter()
        .find(|c| c["name"] == burners.unit.as_str())
        .unwrap_or_else(|| panic!("{} not among {cgroups:#?}", burners.unit));
    assert_eq!(ours["path"], format!("system.slice/{}", burners.unit));
    assert!(
        (ours["quota_cores"].as_f64().unwrap() - 0.2).abs() < 1e-9,
        "{ours}"
    );
    // Two loops against 0.2 CPUs: throttled in (nearly) every period of the interval, using
    // about the quota.
    let throttled = ours["throttled_ratio"].as_f64().unwrap();
    assert!(throttled > 0.8, "throttled_ratio {throttled}: {ours}");
    let used = ours["cpu_usage_cores"].as_f64().unwrap();
    assert!(used > 0.1 && used < 0.3, "cpu_usage_cores {used}: {ours}");
    // Pressure comes from the unified hierarchy, joined by path.
    let waiting = ours["cpu_some_ratio"]
        .as_f64()
        .expect("cgroup PSI from unified/");
    assert!(waiting > 0.5, "cpu_some_ratio {waiting}: {ours}");
    assert_eq!(ours["quota_bound"], true, "{ours}");
    let finding = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "quota_bound")
        .unwrap_or_else(|| panic!("no quota_bound finding: {:#}", report["findings"]));
    assert_eq!(finding["subject"], burners.unit.as_str());
    assert_eq!(
        out.status.code(),
        Some(1),
        "a quota-bound workload is a finding"
    );
    // The hierarchies come from this machine's mountinfo, not from guessing.
    assert_eq!(
        report["pressure"]["cgroup_mounts_from_mountinfo"], true,
        "{:#}",
        report["pressure"]
    );
    // Node PSI from /proc/pressure on this kernel.
    assert!(
        report["pressure"]["node"]["cpu"]["some"].as_f64().is_some(),
        "{:#}",
        report["pressure"]["node"]
    );
    drop(burners);
}
