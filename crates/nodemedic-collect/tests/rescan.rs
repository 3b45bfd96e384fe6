//! Rarely-changing data is re-read on the rescan interval, not every sample, and every
//! snapshot is still complete. Runs on a copy of a fixture tree that the test edits.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use nodemedic_collect::sources::interrupts::Interrupts;
use nodemedic_collect::sources::irq_affinity::IrqAffinities;
use nodemedic_collect::sources::irqbalance::IrqbalanceConfig;
use nodemedic_collect::sources::pci::{Netdevs, PciDevices};
use nodemedic_collect::sources::topology::Topology;
use nodemedic_collect::{CollectorSet, Paths};
use nodemedic_kernel::CpuSet;
use nodemedic_sample::Snapshot;
use nodemedic_testkit::copy_fixture;

/// A copy of `fixture` for the test to edit (removed when dropped), its paths, and every
/// collector with a rescan every 60 s.
fn editable(fixture: &str) -> (tempfile::TempDir, Paths, CollectorSet) {
    let copy = copy_fixture(fixture);
    let paths = Paths::under(copy.path());
    let set = CollectorSet::all().with_rescan_interval(Duration::from_secs(60));
    (copy, paths, set)
}

fn sample(set: &mut CollectorSet, paths: &Paths, secs: u64) -> Snapshot {
    let (snap, runs) = set.sample(paths, Duration::from_secs(secs));
    for r in &runs {
        assert!(r.outcome.is_ok(), "{}: {:?}", r.name, r.outcome);
    }
    snap
}

#[test]
fn rarely_changing_sources_follow_the_rescan_interval() {
    let (copy, paths, mut set) = editable("8cpu-balanced");
    let root = copy.path();
    let cpu = root.join("sys/devices/system/cpu");
    let pci = root.join("sys/bus/pci/devices/0000:00:03.0/numa_node");

    let first = sample(&mut set, &paths, 100);
    let topo = first.get::<Topology>().unwrap().clone();
    assert_eq!(topo.online, CpuSet::parse_list("0-7").unwrap());
    assert!(topo.isolated.is_empty());
    let node_before = first.get::<PciDevices>().unwrap()["0000:00:03.0"].numa_node;
    assert_ne!(node_before, Some(1));
    let irqs_before: Vec<u32> = first
        .get::<IrqAffinities>()
        .unwrap()
        .keys()
        .copied()
        .collect();

    std::fs::write(cpu.join("isolated"), "2-3\n").unwrap();
    std::fs::write(&pci, "1\n").unwrap();
    let between = sample(&mut set, &paths, 101);
    assert!(
        between.get::<Topology>().unwrap().isolated.is_empty(),
        "isolated is cached until the next rescan"
    );
    assert_eq!(
        between.get::<PciDevices>().unwrap()["0000:00:03.0"].numa_node,
        node_before
    );
    // The snapshot is complete between rescans.
    assert_eq!(
        between.get::<PciDevices>().unwrap().len(),
        first.get::<PciDevices>().unwrap().len()
    );
    assert_eq!(
        between.get::<Netdevs>().unwrap(),
        first.get::<Netdevs>().unwrap()
    );
    assert_eq!(
        between
            .get::<IrqAffinities>()
            .unwrap()
            .keys()
            .copied()
            .collect::<Vec<_>>(),
        irqs_before
    );
    assert!(between.get::<IrqbalanceConfig>().is_some());

    let rescanned = sample(&mut set, &paths, 160);
    assert_eq!(
        rescanned.get::<Topology>().unwrap().isolated,
        CpuSet::parse_list("2-3").unwrap()
    );
    assert_eq!(
        rescanned.get::<PciDevices>().unwrap()["0000:00:03.0"].numa_node,
        Some(1)
    );

    // CPU hotplug shows at once, with the rest of the topology re-read.
    std::fs::write(cpu.join("online"), "0-6\n").unwrap();
    std::fs::write(cpu.join("isolated"), "4\n").unwrap();
    let hotplug = sample(&mut set, &paths, 161);
    let t = hotplug.get::<Topology>().unwrap();
    assert_eq!(t.online, CpuSet::parse_list("0-6").unwrap());
    assert_eq!(t.isolated, CpuSet::parse_list("4").unwrap());
}

#[test]
fn irqs_appearing_or_vanishing_between_rescans_are_followed() {
    let (copy, paths, mut set) = editable("8cpu-balanced");
    let root = copy.path();
    let first = sample(&mut set, &paths, 100);
    assert!(first.get::<IrqAffinities>().unwrap().contains_key(&8));
    assert!(!first.get::<IrqAffinities>().unwrap().contains_key(&99));

    // IRQ 99 is allocated (new directory, new line) and IRQ 8 freed, before the next rescan.
    let ints_path = root.join("proc/interrupts");
    let ints = std::fs::read_to_string(&ints_path).unwrap();
    let line8 = ints
        .lines()
        .find(|l| l.trim_start().starts_with("8:"))
        .unwrap()
        .to_string();
    let line99 = line8.replacen("  8:", " 99:", 1);
    let edited: String = ints
        .lines()
        .map(|l| {
            if l == line8 {
                line99.clone()
            } else {
                l.to_string()
            }
        })
        .map(|l| l + "\n")
        .collect();
    std::fs::write(&ints_path, edited).unwrap();
    let irq = root.join("proc/irq");
    std::fs::create_dir(irq.join("99")).unwrap();
    std::fs::write(irq.join("99/smp_affinity"), "04\n").unwrap();
    std::fs::write(irq.join("99/effective_affinity"), "04\n").unwrap();
    std::fs::remove_dir_all(irq.join("8")).unwrap();

    let next = sample(&mut set, &paths, 101);
    assert!(
        !next.get::<IrqAffinities>().unwrap().contains_key(&8),
        "freed IRQ 8 is gone"
    );
    let a99 = &next.get::<IrqAffinities>().unwrap()[&99];
    assert_eq!(a99.smp, Some(CpuSet::parse_list("2").unwrap()));
}

/// irqbalance's package version comes from dpkg's database under the root filesystem and
/// follows an upgrade at the next rescan; a node without irqbalance, and one without a
/// database, say so with the reason (never a collector failure).
#[test]
fn irqbalance_package_version_follows_the_database() {
    use nodemedic_collect::sources::irqbalance::IrqbalancePackage;
    let (copy, paths, mut set) = editable("96cpu-collapsed");
    let root = copy.path();
    let package = |snap: Snapshot| {
        snap.get::<IrqbalanceConfig>()
            .expect("irqbalance config")
            .package
            .clone()
    };
    let first = package(sample(&mut set, &paths, 100));
    assert_eq!(first.version(), Some("1.8.0-1"), "{first:?}");

    let status = root.join("var/lib/dpkg/status");
    let text = std::fs::read_to_string(&status).unwrap();
    std::fs::write(&status, text.replace("1.8.0-1", "1.9.2-2")).unwrap();
    assert_eq!(
        package(sample(&mut set, &paths, 130)).version(),
        Some("1.8.0-1"),
        "between rescans the version is not re-read"
    );
    assert_eq!(
        package(sample(&mut set, &paths, 160)).version(),
        Some("1.9.2-2")
    );

    std::fs::write(
        &status,
        "Package: irqbalance\nStatus: deinstall ok config-files\nVersion: 1.9.2-2\n",
    )
    .unwrap();
    let removed = package(sample(&mut set, &paths, 220));
    assert!(
        matches!(&removed, IrqbalancePackage::NotInstalled { database } if database.ends_with("var/lib/dpkg/status")),
        "{removed:?}"
    );

    std::fs::remove_file(&status).unwrap();
    let gone = package(sample(&mut set, &paths, 280));
    let IrqbalancePackage::Unknown { reason } = &gone else {
        panic!("{gone:?}");
    };
    assert!(reason.contains("no package database"), "{reason}");
    assert!(reason.contains("var/lib/dpkg/status"), "{reason}");
    assert!(reason.contains("not a dpkg-based node"), "{reason}");

    std::fs::create_dir_all(root.join("var/lib/rpm")).unwrap();
    let rpm = package(sample(&mut set, &paths, 340));
    let IrqbalancePackage::Unknown { reason } = &rpm else {
        panic!("{rpm:?}");
    };
    assert!(reason.contains("RPM's database"), "{reason}");
}

/// A device that starts interrupting between rescans (a driver bound since) is read at the
/// next sample; samples whose rows read as before keep it; and a rescan without
/// `/proc/interrupts` does not leave the next sample, whose rows read as before it, without
/// the devices they name.
#[test]
fn devices_follow_the_interrupt_rows_between_rescans() {
    let (copy, paths, mut set) = editable("8cpu-balanced");
    let root = copy.path();
    let new = "0000:00:09.0";
    let first = sample(&mut set, &paths, 100);
    assert!(first
        .get::<PciDevices>()
        .unwrap()
        .contains_key("0000:00:02.0"));
    assert!(!first.get::<PciDevices>().unwrap().contains_key(new));

    let dev = root.join("sys/bus/pci/devices").join(new);
    std::fs::create_dir_all(&dev).unwrap();
    std::fs::write(dev.join("numa_node"), "0\n").unwrap();
    std::fs::write(dev.join("local_cpulist"), "0-3\n").unwrap();
    let irq = root.join("proc/irq/99");
    std::fs::create_dir(&irq).unwrap();
    std::fs::write(irq.join("smp_affinity"), "01\n").unwrap();
    std::fs::write(irq.join("effective_affinity"), "01\n").unwrap();
    let ints_path = root.join("proc/interrupts");
    let mut ints = std::fs::read_to_string(&ints_path).unwrap();
    let line24 = ints
        .lines()
        .find(|l| l.trim_start().starts_with("24:"))
        .unwrap()
        .to_string();
    ints.push_str(
        &line24
            .replacen(" 24:", " 99:", 1)
            .replace("0000:00:02.0", new)
            .replace("virtio1-config", "nvme9q0"),
    );
    ints.push('\n');
    std::fs::write(&ints_path, &ints).unwrap();
    let local = Some(CpuSet::parse_list("0-3").unwrap());

    let bound = sample(&mut set, &paths, 101);
    assert_eq!(
        bound.get::<PciDevices>().unwrap()[new].local_cpus,
        local,
        "read at the next sample"
    );
    let same = sample(&mut set, &paths, 102);
    assert_eq!(
        same.get::<PciDevices>().unwrap()[new].local_cpus,
        local,
        "kept while rows read the same"
    );

    // The rescan finds no /proc/interrupts; the sample after it finds the same rows again.
    std::fs::remove_file(&ints_path).unwrap();
    let (missing, _) = set.sample(&paths, Duration::from_secs(170));
    assert!(missing.get::<Interrupts>().is_none());
    std::fs::write(&ints_path, &ints).unwrap();
    let back = sample(&mut set, &paths, 171);
    assert!(back.get::<Interrupts>().is_some());
    assert_eq!(
        back.get::<PciDevices>().unwrap()[new].local_cpus,
        local,
        "read again after the gap"
    );
}

/// Rewrites IRQ `irq`'s row of `/proc/interrupts` (8 CPUs) with `counts`, keeping its
/// description.
fn set_counts(root: &std::path::Path, irq: u32, counts: [u64; 8]) {
    let path = root.join("proc/interrupts");
    let text = std::fs::read_to_string(&path).unwrap();
    let label = format!("{irq}:");
    let rows: Vec<String> = text
        .lines()
        .map(|line| {
            if line.trim_start().starts_with(&label) {
                // `%3d:` and eight `" %10u"` cells: the description starts at byte 92.
                let cells: String = counts.iter().map(|c| format!(" {c:>10}")).collect();
                format!("{irq:>3}:{cells}{}", &line[92..])
            } else {
                line.to_string()
            }
        })
        .collect();
    std::fs::write(&path, rows.join("\n") + "\n").unwrap();
}

fn set_affinity(root: &std::path::Path, irq: u32, mask: &str) {
    for name in ["smp_affinity", "effective_affinity"] {
        std::fs::write(
            root.join(format!("proc/irq/{irq}/{name}")),
            format!("{mask}\n"),
        )
        .unwrap();
    }
}

/// IRQ `irq` is delivered to `cpu` alone, as the snapshot read it.
fn assert_on(snap: &Snapshot, irq: u32, cpu: u32, why: &str) {
    let delivered = snap.get::<IrqAffinities>().unwrap()[&irq]
        .delivery_cpus()
        .unwrap();
    assert_eq!(delivered, &CpuSet::from_cpus([cpu]), "IRQ {irq}: {why}");
}

/// An IRQ's affinity files are read when `/proc/interrupts` shows it fired on a CPU it was
/// not delivered to, or vanished; a quiet IRQ, or one firing where it was, is read in its turn,
/// within the refresh (10 s), not every sample.
#[test]
fn irq_affinities_are_read_when_the_counts_say_they_moved_and_in_turn() {
    let (copy, paths, mut set) = editable("8cpu-balanced");
    let root = copy.path();
    let first = sample(&mut set, &paths, 100);
    assert_on(&first, 40, 4, "first read");
    assert_on(&first, 41, 5, "first read");
    assert_on(&first, 42, 6, "first read");

    // 41 moved to CPU 0 and fired there; 40 moved while quiet; 42 moved but the count that
    // rose is on the CPU it was read on (a mask rewritten before its next interrupt).
    set_affinity(root, 41, "01");
    set_counts(root, 41, [12, 0, 0, 0, 0, 4575942, 0, 0]);
    set_affinity(root, 40, "02");
    set_affinity(root, 42, "04");
    set_counts(root, 42, [0, 0, 0, 0, 0, 0, 3903999, 0]);
    let next = sample(&mut set, &paths, 101);
    assert_on(&next, 41, 0, "read: it fired elsewhere");
    // The 26 IRQs take their turns 3 a sample (26 × 1 s / 10 s), in order; 40 and 42 are the
    // 23rd and 25th.
    assert_on(&next, 40, 4, "not its turn yet");
    assert_on(&next, 42, 6, "not its turn yet");
    let mut last = next;
    for secs in 102..=110 {
        last = sample(&mut set, &paths, secs);
    }
    assert_on(&last, 40, 1, "read within 10 s");
    assert_on(&last, 42, 2, "read within 10 s");

    // A freed IRQ loses its row and its directory: gone from the next sample.
    let text = std::fs::read_to_string(root.join("proc/interrupts")).unwrap();
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("43:"))
        .collect();
    std::fs::write(root.join("proc/interrupts"), kept.join("\n") + "\n").unwrap();
    std::fs::remove_dir_all(root.join("proc/irq/43")).unwrap();
    let freed = sample(&mut set, &paths, 111);
    assert!(
        !freed.get::<IrqAffinities>().unwrap().contains_key(&43),
        "{:?}",
        freed.get::<IrqAffinities>().unwrap().keys()
    );
    assert!(freed.get::<IrqAffinities>().unwrap().contains_key(&42));
}

/// The table a sample hands over is its only holder: the engine widens its counts in place
/// (`Snapshot::get_mut`), which would copy the whole table if a collector kept a share of it.
#[test]
fn no_collector_keeps_a_share_of_the_interrupts_table() {
    let (_copy, paths, mut set) = editable("8cpu-balanced");
    for secs in [100, 101, 102] {
        let snap = sample(&mut set, &paths, secs);
        let table = snap.shared::<Interrupts>().unwrap();
        // This test's share and the snapshot's.
        assert_eq!(
            std::sync::Arc::strong_count(&table),
            2,
            "sample at {secs} s"
        );
    }
}
