//! What the `tuning` collector adds to a 256-CPU sample, side by side in one process: the
//! `256cpu-healthy` fixture tree, copied and given the tuning files a 256-CPU host has (256
//! cpufreq policies, its vulnerabilities, IOMMU groups, 3 NICs × 64 queues with RPS/XPS masks
//! and statistics, cpuidle states, `net.core` sysctls, THP), sampled alternately by every
//! collector without and with the tuning collector. Channels and rings come from files here
//! (the fixture's NICs are not this machine's); on a real node they are two netlink requests
//! per NIC, on rescans only.
//!
//! Rescans are measured apart from ordinary samples: the settings are read on rescans only.
//!
//! ```sh
//! cargo bench -p nodemedic-collect --bench tuning_cost      # NODEMEDIC_BENCH_ROUNDS=400
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use nodemedic_collect::registry::{NicLimitsFrom, Settings};
use nodemedic_collect::sources::{cgroups, tuning, NicLimitsFiles, TuningCollector};
use nodemedic_collect::{process_cpu_seconds, CollectorSet, Paths};

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// The tuning files of a 256-CPU, 4-node host with the tree's three NICs.
fn add_tuning_files(root: &Path) {
    write(
        root,
        "proc/cmdline",
        "BOOT_IMAGE=/vmlinuz ro quiet iommu.strict=1\n",
    );
    let mut cpuinfo = String::new();
    for c in 0..256 {
        let _ = write!(
            cpuinfo,
            "processor\t: {c}\nvendor_id\t: GenuineIntel\nflags\t\t: fpu vme de pse tsc msr pae \
             mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht\n\n"
        );
    }
    write(root, "proc/cpuinfo", &cpuinfo);
    for (f, v) in [
        ("netdev_budget", "300"),
        ("netdev_budget_usecs", "8000"),
        ("netdev_max_backlog", "1000"),
    ] {
        write(root, &format!("proc/sys/net/core/{f}"), &format!("{v}\n"));
    }
    for v in [
        "gather_data_sampling",
        "itlb_multihit",
        "l1tf",
        "mds",
        "meltdown",
        "mmio_stale_data",
        "retbleed",
        "spec_rstack_overflow",
        "spec_store_bypass",
        "spectre_v1",
        "spectre_v2",
        "srbds",
        "tsx_async_abort",
    ] {
        write(
            root,
            &format!("sys/devices/system/cpu/vulnerabilities/{v}"),
            "Mitigation: Clear CPU buffers; SMT vulnerable\n",
        );
    }
    let devices: Vec<String> = std::fs::read_dir(root.join("sys/bus/pci/devices"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    for (g, d) in devices.iter().enumerate() {
        write(root, &format!("sys/kernel/iommu_groups/{g}/type"), "DMA\n");
        write(
            root,
            &format!("sys/kernel/iommu_groups/{g}/devices/{d}"),
            "",
        );
    }
    for c in 0..256 {
        let p = format!("sys/devices/system/cpu/cpufreq/policy{c}/");
        for (f, v) in [
            ("affected_cpus", c.to_string()),
            ("related_cpus", c.to_string()),
            ("scaling_driver", "intel_pstate".into()),
            ("scaling_governor", "powersave".into()),
            (
                "energy_performance_preference",
                "balance_performance".into(),
            ),
            ("scaling_cur_freq", "1200000".into()),
            ("cpuinfo_max_freq", "3500000".into()),
        ] {
            write(root, &format!("{p}{f}"), &format!("{v}\n"));
        }
    }
    write(
        root,
        "sys/devices/system/cpu/cpuidle/current_driver",
        "intel_idle\n",
    );
    write(
        root,
        "sys/devices/system/cpu/cpuidle/current_governor",
        "menu\n",
    );
    for (i, (name, lat)) in [("POLL", 0), ("C1", 2), ("C1E", 10), ("C6", 133)]
        .iter()
        .enumerate()
    {
        let d = format!("sys/devices/system/cpu/cpu0/cpuidle/state{i}/");
        write(root, &format!("{d}name"), &format!("{name}\n"));
        write(root, &format!("{d}latency"), &format!("{lat}\n"));
        write(root, &format!("{d}disable"), "0\n");
    }
    write(
        root,
        "sys/kernel/mm/transparent_hugepage/enabled",
        "always [madvise] never\n",
    );
    let nics: Vec<String> = std::fs::read_dir(root.join("sys/class/net"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "lo")
        .collect();
    for nic in &nics {
        for q in 0..64 {
            write(
                root,
                &format!("sys/class/net/{nic}/queues/rx-{q}/rps_cpus"),
                "00000000,00000000,00000000,00000000,00000000,00000000,00000000,00000000\n",
            );
            write(
                root,
                &format!("sys/class/net/{nic}/queues/tx-{q}/xps_cpus"),
                "00000000,00000000,00000000,00000000,00000000,00000000,00000000,00000001\n",
            );
        }
        for s in ["rx_missed_errors", "rx_fifo_errors", "rx_dropped"] {
            write(root, &format!("sys/class/net/{nic}/statistics/{s}"), "12\n");
        }
        write(
            root,
            &format!("ethtool/{nic}"),
            "channels rx=0/0 tx=0/0 other=1/1 combined=64/64\nrings rx=1024/8192 tx=1024/8192\n",
        );
    }
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

struct Side {
    set: CollectorSet,
    walls: Vec<Duration>,
    cpu: f64,
}

impl Side {
    fn sample(&mut self, paths: &Paths, at: Duration) {
        let cpu0 = process_cpu_seconds();
        let t = Instant::now();
        let (snap, runs) = self.set.sample(paths, at);
        self.walls.push(t.elapsed());
        self.cpu += process_cpu_seconds() - cpu0;
        assert!(runs.iter().all(|r| r.outcome.is_ok()));
        std::hint::black_box(snap);
    }

    fn report(&mut self, name: &str) -> f64 {
        self.walls.sort();
        let n = self.walls.len();
        let median = self.walls[n / 2].as_secs_f64() * 1e6;
        println!(
            "  {name:<24} median {median:>9.1} µs wall, p90 {:>9.1} µs; CPU {:>9.1} µs per sample",
            self.walls[n * 9 / 10].as_secs_f64() * 1e6,
            self.cpu * 1e6 / n as f64
        );
        self.walls.clear();
        self.cpu = 0.0;
        median
    }
}

fn main() {
    let copy = nodemedic_testkit::copy_fixture("256cpu-healthy");
    let root = copy.path();
    add_tuning_files(root);
    let paths = Paths::under(root);
    let rounds: usize = env_or("NODEMEDIC_BENCH_ROUNDS", 400);
    let interval = Duration::from_secs(60);
    let settings = Settings {
        paths: &paths,
        nic_limits: NicLimitsFrom::Files,
        ..Settings::defaults()
    };
    // The IRQ side and node-wide pressure: every collector but the cgroups and tuning.
    let irq_side = || {
        CollectorSet::registered(&settings, |n| n != cgroups::NAME && n != tuning::NAME)
            .with_rescan_interval(interval)
    };
    let mut without = Side {
        set: irq_side(),
        walls: Vec::new(),
        cpu: 0.0,
    };
    let mut with = Side {
        set: irq_side().with(Box::new(TuningCollector::new(Box::new(NicLimitsFiles {
            dir: root.join("ethtool"),
        })))),
        walls: Vec::new(),
        cpu: 0.0,
    };
    println!("256cpu-healthy with a 256-CPU host's tuning files, {rounds} samples per side");
    let mut medians = Vec::new();
    for (label, rescan_every) in [("ordinary samples", None), ("rescans", Some(()))] {
        for i in 0..rounds + 5 {
            // Every sample a rescan (61 s apart), or none after the first (1 s apart).
            let at = match rescan_every {
                Some(()) => Duration::from_secs(1000 + 61 * i as u64),
                None => Duration::from_secs(100_000 + i as u64),
            };
            // Alternate which side goes first, so neither always finds the caches warm.
            if i % 2 == 0 {
                without.sample(&paths, at);
                with.sample(&paths, at);
            } else {
                with.sample(&paths, at);
                without.sample(&paths, at);
            }
            // The first samples open files and fill caches.
            if i < 5 {
                without.walls.clear();
                with.walls.clear();
                without.cpu = 0.0;
                with.cpu = 0.0;
            }
        }
        println!("{label}:");
        let a = without.report("every collector");
        let b = with.report("every collector + tuning");
        println!("  tuning adds {:+.1}% (median wall)", (b - a) / a * 100.0);
        medians.push((a, b));
    }
    // Per sample, with the daemon's defaults: a sample every 5 s, a rescan every 60 s, and
    // the settings read at every rescan or (with_settings_interval) every 300 s.
    let (ord, resc) = (medians[0], medians[1]);
    let per_rescan = 60.0 / 5.0;
    let base = (ord.0 * (per_rescan - 1.0) + resc.0) / per_rescan;
    for settings_every in [60.0, 300.0] {
        let readings = settings_every / 5.0;
        let added = (ord.1 - ord.0) + (resc.1 - resc.0 - (ord.1 - ord.0)) / readings;
        println!(
            "amortized, 5 s samples, 60 s rescans, settings every {settings_every:.0} s: \
             {added:+.1} µs per sample on {base:.1} µs ({:+.1}%)",
            added / base * 100.0
        );
    }
}
