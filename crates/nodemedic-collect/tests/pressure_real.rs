//! The pressure and cgroups collectors on this machine's real kernel files.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use nodemedic_collect::sources::cgroups::Cgroups;
use nodemedic_collect::sources::pressure::{NodePressure, Psi, PsiResource};
use nodemedic_collect::sources::{CgroupSelection, CgroupsCollector, PressureCollector};
use nodemedic_collect::{CollectorSet, Paths};

/// Node PSI from the real `/proc/pressure`: every resource the kernel has, with totals that
/// only grow, read through the kept-open read layer.
#[test]
fn node_psi_from_this_kernel() {
    if !std::path::Path::new("/proc/pressure").is_dir() {
        panic!("this test needs a kernel with PSI (/proc/pressure); the CI machine has it");
    }
    let mut set = CollectorSet::new(vec![Box::new(PressureCollector::default())]);
    let (first, runs) = set.sample(&Paths::default(), Duration::from_secs(1));
    let c = runs[0].outcome.as_ref().unwrap();
    assert!(c.unavailable.is_none() && c.warnings.is_empty(), "{c:?}");
    let p1 = first.get::<NodePressure>().expect("node PSI");
    for r in [PsiResource::Cpu, PsiResource::Memory, PsiResource::Io] {
        let kernel = std::fs::read_to_string(format!("/proc/pressure/{r}")).unwrap();
        assert!(kernel.starts_with("some "), "{kernel}");
        assert!(p1[&r].some.is_some(), "{r}: {:?}", p1[&r]);
    }
    assert_eq!(
        p1.contains_key(&PsiResource::Irq),
        std::path::Path::new("/proc/pressure/irq").exists()
    );
    // Burn a little CPU on both cores so CPU pressure moves, then read again.
    let burn = || {
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(300) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        x
    };
    let handles: Vec<_> = (0..4).map(|_| std::thread::spawn(burn)).collect();
    for h in handles {
        h.join().unwrap();
    }
    let (second, _) = set.sample(&Paths::default(), Duration::from_secs(2));
    let p2 = second.get::<NodePressure>().unwrap();
    let total = |p: &std::collections::BTreeMap<PsiResource, Psi>| {
        p[&PsiResource::Cpu].some.unwrap().total_us
    };
    assert!(
        total(p2) > total(p1),
        "four busy threads on {} CPUs must make CPU pressure grow: {} -> {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        total(p1),
        total(p2)
    );
}

/// The real cgroup mounts come from mountinfo, not from guessing.
#[test]
fn cgroup_layout_from_this_machines_mountinfo() {
    let mut set = CollectorSet::new(vec![Box::new(CgroupsCollector::new(CgroupSelection {
        services: true,
        ..Default::default()
    }))]);
    let (snap, runs) = set.sample(&Paths::default(), Duration::from_secs(1));
    let c = runs[0].outcome.as_ref().unwrap();
    assert!(c.unavailable.is_none(), "{c:?}");
    let cg = snap.shared::<Cgroups>().expect("cgroups");
    assert!(cg.from_mountinfo, "{cg:?}");
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    for (mount, fs) in [(&cg.mounts.unified, "cgroup2"), (&cg.mounts.cpu, "cgroup")] {
        if let Some(m) = mount {
            let needle = format!(" {} ", m.display());
            assert!(
                mountinfo
                    .lines()
                    .any(|l| l.contains(&needle) && l.contains(&format!(" - {fs} "))),
                "{} is not a {fs} mount point in mountinfo",
                m.display()
            );
        }
    }
    assert!(cg.mounts.unified.is_some() || cg.mounts.cpu.is_some());
}

/// Removes the cgroups it made, also when an assertion fails.
struct Made(Vec<std::path::PathBuf>);
impl Drop for Made {
    fn drop(&mut self) {
        for d in self.0.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// The cgroups collector walks only when a directory it listed changed (inotify), so a
/// service cgroup made and removed with `mkdir`/`rmdir` on the real cgroupfs (kernfs, as
/// systemd and kubelet do it) must show at the next reading, without a rescan.
#[test]
fn real_cgroups_made_and_removed_are_seen_at_the_next_reading() {
    let mut set = CollectorSet::new(vec![Box::new(CgroupsCollector::new(CgroupSelection {
        services: true,
        ..Default::default()
    }))]);
    let mut at = 100;
    let mut read = || {
        at += 1;
        let (snap, runs) = set.sample(&Paths::default(), Duration::from_secs(at));
        let c = runs[0].outcome.as_ref().unwrap();
        assert!(c.unavailable.is_none(), "{c:?}");
        snap.shared::<Cgroups>().expect("cgroups")
    };
    let first = read();
    // The hierarchy the services are listed from: v1 cpu on a hybrid node, else unified.
    let listed = first
        .mounts
        .cpu
        .clone()
        .or(first.mounts.unified.clone())
        .unwrap();
    let unit = format!("nodemedic-listing-{}.service", std::process::id());
    let rel = format!("system.slice/{unit}");
    assert!(!first.groups.contains_key(&rel));
    let mut made = Made(Vec::new());
    let slice = listed.join("system.slice");
    if !slice.exists() {
        std::fs::create_dir(&slice).expect("mkdir system.slice (the test needs root)");
        made.0.push(slice.clone());
        // The slice itself appears under the root: the next reading walks into it.
        assert!(!read().groups.contains_key(&rel));
    }
    let dir = slice.join(&unit);
    std::fs::create_dir(&dir).expect("mkdir the service cgroup");
    made.0.push(dir.clone());
    assert!(
        read().groups.contains_key(&rel),
        "a cgroup made since the last reading is read"
    );
    assert!(read().groups.contains_key(&rel), "and stays");
    std::fs::remove_dir(&dir).unwrap();
    made.0.pop();
    assert!(
        !read().groups.contains_key(&rel),
        "a cgroup removed since the last reading is gone"
    );
}
