//! The pressure detector on real fixture trees: Kubernetes nodes with the systemd driver on
//! cgroup v2 and the cgroupfs driver on a hybrid v1 + unified layout, each read twice, 10 s
//! apart (`<tree>` then `<tree>-later`), through the real collectors.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use nodemedic_collect::sources::cgroups::{Cgroups, Qos, Workload};
use nodemedic_collect::sources::pressure::NodePressure;
use nodemedic_collect::sources::{CgroupSelection, CgroupsCollector, PressureCollector};
use nodemedic_collect::{CollectorName, CollectorRun, CollectorSet};
use nodemedic_detect::pressure::{findings, CgroupRates};
use nodemedic_detect::{PressureConfig, PressureDetector, PressureVerdict};
use nodemedic_sample::snapshot::{PodIdentity, Pods};
use nodemedic_sample::Snapshot;
use nodemedic_testkit::fixture_paths;

const HPC: &str = "8f14e45f-ceea-467f-a0e6-4f1a2b3c4d5e";
const WEB: &str = "c9f0f895-fb98-4b91-9a7c-2a3b4c5d6e7f";
const BATCH: &str = "45c48cce-2e2d-4fbd-b1b2-3c4d5e6f7a8b";
const GARBLED: &str = "d3d94468-02a4-4d2f-8a3b-4c5d6e7f8a9b";
const EMPTY_STAT: &str = "6512bd43-d9ca-4ec1-9f5e-5d6e7f8a9b0c";
const NO_MEM_PSI: &str = "c20ad4d7-6fe9-4759-a8c2-6e7f8a9b0c1d";

fn set(selection: CgroupSelection) -> CollectorSet {
    CollectorSet::new(vec![
        Box::new(PressureCollector::default()),
        Box::new(CgroupsCollector::new(selection)),
    ])
}

fn sample(set: &mut CollectorSet, tree: &str, at: u64) -> (Snapshot, Vec<CollectorRun>) {
    let (snap, runs) = set.sample(&fixture_paths(tree), Duration::from_secs(at));
    for r in &runs {
        if let Err(e) = &r.outcome {
            panic!("{tree}: collector {} failed: {e}", r.name);
        }
    }
    (snap, runs)
}

fn warnings(runs: &[CollectorRun], collector: CollectorName) -> Vec<String> {
    runs.iter()
        .find(|r| r.name == collector)
        .and_then(|r| r.outcome.as_ref().ok())
        .map(|c| c.warnings.clone())
        .unwrap_or_default()
}

fn verdict(tree: &str, selection: CgroupSelection, pods: bool) -> (PressureVerdict, Vec<String>) {
    let mut set = set(selection);
    let mut d = PressureDetector::new(PressureConfig {
        raise_after: 1,
        clear_after: 1,
        ..Default::default()
    });
    let names = pods.then(names);
    let (mut first, _) = sample(&mut set, tree, 100);
    if let Some(names) = &names {
        first.put_shared(Arc::clone(names));
    }
    assert!(d.observe(&first).is_none());
    let (mut second, runs) = sample(&mut set, &format!("{tree}-later"), 110);
    if let Some(names) = names {
        second.put_shared(names);
    }
    (
        d.observe(&second).unwrap(),
        warnings(&runs, nodemedic_collect::sources::cgroups::NAME),
    )
}

fn names() -> Arc<Pods> {
    let pod = |ns: &str, name: &str| PodIdentity {
        namespace: ns.into(),
        name: name.into(),
        containers: BTreeMap::new(),
    };
    Arc::new(Pods(
        [
            (HPC.to_string(), pod("hpc", "solver-0")),
            (BATCH.to_string(), pod("batch", "nightly-report")),
        ]
        .into(),
    ))
}

fn by_uid<'a>(v: &'a PressureVerdict, uid: &str) -> &'a CgroupRates {
    v.cgroups
        .iter()
        .find(|c| matches!(&c.workload, Workload::Pod { uid: u, .. } if u == uid))
        .unwrap_or_else(|| panic!("no pod {uid} in {:?}", v.cgroups))
}

fn close(a: Option<f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() < 0.005)
}

/// What both layouts must show: the incident's pod quota-bound, the best-effort pod starved,
/// the web pod healthy, node PSI at the generator's 12% CPU.
fn common(v: &PressureVerdict) {
    assert!((v.interval_seconds - 10.0).abs() < 1e-9);
    assert!(
        close(
            v.node[&nodemedic_collect::sources::pressure::PsiResource::Cpu].some,
            0.12
        ),
        "{:?}",
        v.node
    );
    assert!(!v.node_saturated);

    let hpc = by_uid(v, HPC);
    assert_eq!(hpc.qos, Some(Qos::Guaranteed));
    assert_eq!(hpc.quota_cores, Some(10.0), "cpu.max 1000000 100000");
    assert!(close(hpc.throttled_ratio, 0.8), "{hpc:?}");
    assert!(close(hpc.cpu_usage_cores, 9.9), "{hpc:?}");
    assert!(hpc.quota_bound, "{hpc:?}");
    assert!(
        !hpc.starved,
        "its CPU wait is its own quota's doing: one finding, not two"
    );

    let web = by_uid(v, WEB);
    assert_eq!(web.qos, Some(Qos::Burstable));
    assert_eq!(web.quota_cores, Some(2.0));
    assert!(!web.quota_bound && !web.starved, "{web:?}");

    let batch = by_uid(v, BATCH);
    assert_eq!(batch.qos, Some(Qos::BestEffort));
    assert_eq!(batch.quota_cores, None, "\"max\" is no quota, not a number");
    assert!(!batch.quota_bound);
}

#[test]
fn systemd_driver_on_cgroup_v2() {
    let (v, warnings) = verdict("k8s-systemd-v2", CgroupSelection::default(), true);
    common(&v);
    // Six pods; services are not selected by default in the library (the config turns them on).
    assert_eq!(v.cgroups.len(), 6, "{:?}", v.cgroups);
    let hpc = by_uid(&v, HPC);
    assert!(close(hpc.cpu_some_ratio, 0.45), "{hpc:?}");
    assert_eq!(hpc.name, "hpc/solver-0");
    let batch = by_uid(&v, BATCH);
    assert!(batch.starved, "40% CPU wait, 25% memory wait: {batch:?}");
    assert!(close(batch.memory_some_ratio, 0.25));

    // Damaged files each lose only themselves, named in the warnings.
    let garbled = by_uid(&v, GARBLED);
    assert_eq!(garbled.quota_cores, None);
    assert!(close(garbled.throttled_ratio, 0.1), "cpu.stat still read");
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("podd3d94468_02a4_4d2f_8a3b_4c5d6e7f8a9b.slice/cpu.max")),
        "{warnings:?}"
    );
    let empty = by_uid(&v, EMPTY_STAT);
    assert_eq!(empty.throttled_ratio, None);
    assert_eq!(empty.quota_cores, Some(1.0));
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("6e7f8a9b0c.slice/cpu.stat")
                || w.contains("5d6e7f8a9b0c.slice/cpu.stat")),
        "{warnings:?}"
    );
    let no_mem = by_uid(&v, NO_MEM_PSI);
    assert_eq!(no_mem.memory_some_ratio, None);
    assert!(no_mem.cpu_some_ratio.is_some());
    assert_eq!(
        warnings.len(),
        2,
        "only the two damaged files: {warnings:?}"
    );

    let f = findings(&v);
    let q = f
        .iter()
        .find(|f| f.kind == nodemedic_detect::FindingKind::QuotaBound)
        .unwrap();
    assert_eq!(q.subject, "hpc/solver-0");
    assert!(q.message.contains("10.00 CPUs"), "{}", q.message);
    let s = f
        .iter()
        .find(|f| f.kind == nodemedic_detect::FindingKind::Starved)
        .unwrap();
    assert_eq!(s.subject, "batch/nightly-report");
    assert!(!f.iter().any(|f| f.subject.contains(WEB)));
}

#[test]
fn cgroupfs_driver_on_hybrid_v1_and_unified() {
    let (v, warnings) = verdict("k8s-cgroupfs-hybrid", CgroupSelection::default(), false);
    common(&v);
    assert_eq!(v.cgroups.len(), 6, "{:?}", v.cgroups);
    // Quota and throttling from the v1 cpu hierarchy, pressure from unified/, joined by path.
    let hpc = by_uid(&v, HPC);
    assert!(close(hpc.cpu_some_ratio, 0.45), "{hpc:?}");
    assert_eq!(hpc.name, format!("pod {HPC}"), "no pod names: UID only");
    // A pod the unified tree lacks has quota and throttling but no pressure, and no warning.
    let lone = by_uid(&v, GARBLED);
    assert_eq!(lone.quota_cores, Some(0.5));
    assert_eq!(lone.cpu_some_ratio, None);
    assert!(
        warnings.iter().all(|w| !w.contains(GARBLED)),
        "{warnings:?}"
    );
    assert_eq!(warnings.len(), 1, "the empty cpu.stat only: {warnings:?}");
    assert!(findings(&v)
        .iter()
        .any(|f| f.kind == nodemedic_detect::FindingKind::QuotaBound));
}

#[test]
fn containers_services_and_patterns() {
    let all = CgroupSelection {
        containers: true,
        services: true,
        ..Default::default()
    };
    let (v, _) = verdict("k8s-systemd-v2", all, false);
    let containers: Vec<&CgroupRates> = v
        .cgroups
        .iter()
        .filter(|c| matches!(c.workload, Workload::Container { .. }))
        .collect();
    assert_eq!(containers.len(), 7, "one per container of the six pods");
    assert!(containers.iter().any(|c| matches!(&c.workload,
        Workload::Container { runtime: Some(r), .. } if r == "crio")));
    assert!(
        containers.iter().all(|c| !c.starved),
        "containers share their pod's verdict"
    );
    let units: Vec<&str> = v
        .cgroups
        .iter()
        .filter_map(|c| match &c.workload {
            Workload::Service { unit } => Some(unit.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        units,
        [
            "containerd.service",
            "irqbalance.service",
            "kubelet.service"
        ]
    );

    let only_besteffort = CgroupSelection {
        include: Some(regex::Regex::new("besteffort").unwrap()),
        exclude: Some(regex::Regex::new("scope$").unwrap()),
        containers: true,
        ..Default::default()
    };
    let (v, _) = verdict("k8s-systemd-v2", only_besteffort, false);
    assert_eq!(v.cgroups.len(), 1, "{:?}", v.cgroups);
    assert_eq!(by_uid(&v, BATCH).qos, Some(Qos::BestEffort));
}

#[test]
fn trees_without_cgroups_or_psi_are_unavailable_not_failed() {
    let mut set = set(CgroupSelection::default());
    let (snap, runs) = sample(&mut set, "8cpu-collapsed", 1);
    assert!(snap.get::<NodePressure>().is_none() && snap.get::<Cgroups>().is_none());
    for r in &runs {
        let c = r.outcome.as_ref().unwrap();
        assert!(c.unavailable.is_some(), "{}: {c:?}", r.name);
    }
}
