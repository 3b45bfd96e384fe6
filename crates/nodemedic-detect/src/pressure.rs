//! Pressure: where work waits, from PSI and CFS throttling, node-wide and per cgroup.
//!
//! CPU usage against requests says little on a shared node; PSI says how long runnable work
//! actually waited. Three verdicts, each with hysteresis:
//! - *quota-bound*: a cgroup with a CPU quota throttled in many of its periods while its
//!   tasks wait for CPU: the limit, not the node, is what holds it back;
//! - *starved*: a pod (or service) whose tasks wait for CPU or memory a large share of the
//!   time;
//! - *node saturated*: the node as a whole waits for CPU, memory or I/O.
//!
//! Rates are computed here, once, from two consecutive snapshots, and reused by the
//! exposition and by `nodemedic check`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use nodemedic_collect::sources::cgroups::{CgroupStats, Cgroups, Workload};
use nodemedic_collect::sources::pressure::{NodePressure, Psi, PsiLine, PsiResource};
use nodemedic_collect::sources::topology::Topology;
use nodemedic_sample::snapshot::Pods;
use nodemedic_sample::Snapshot;
use serde::{Deserialize, Serialize};

use crate::finding::{Finding, Severity};
use crate::hysteresis::{ratio as check_ratio, ConfigError, Hysteresis, Latch};

/// The verdict this detector produces (types of the sample, shared with the outputs).
pub use nodemedic_sample::verdict::{
    CgroupRates, Change, PressureVerdict, PressureVerdictKind, PsiRatios, Scope,
};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PressureConfig {
    /// Node saturated when CPU `some` pressure (share of wall time in which at least one
    /// runnable task waited for a CPU) reaches this while the CPUs are busy (below)…
    pub node_cpu_some: f64,
    /// …busy meaning that tasks ran this share of the online CPUs' time (the root cgroup's
    /// CPU usage between two cgroup readings). CPU pressure alone is not saturation: tasks
    /// throttled by their own quota wait too, on an idle node (a pod throttled in every
    /// period drove node CPU `some` to 95% on a 91% idle node).
    pub node_cpu_busy: f64,
    /// …or memory `some` pressure (reclaim, refaults, swap-in) reaches this…
    pub node_memory_some: f64,
    /// …or I/O `full` pressure (all non-idle tasks waited for I/O at once) reaches this.
    pub node_io_full: f64,
    /// A pod or service is starved when its CPU `some` pressure reaches this…
    pub starved_cpu_some: f64,
    /// …or its memory `some` pressure reaches this.
    pub starved_memory_some: f64,
    /// Quota-bound: share of CFS periods in which the cgroup was throttled…
    pub quota_throttled_ratio: f64,
    /// …while its CPU `some` pressure is at least this (on v1 nodes without cgroup PSI,
    /// throttling alone decides).
    pub quota_cpu_some: f64,
    pub raise_after: u32,
    pub clear_after: u32,
}

impl Default for PressureConfig {
    fn default() -> Self {
        Self {
            node_cpu_some: 0.5,
            node_cpu_busy: 0.8,
            node_memory_some: 0.2,
            node_io_full: 0.3,
            starved_cpu_some: 0.3,
            starved_memory_some: 0.2,
            quota_throttled_ratio: 0.25,
            quota_cpu_some: 0.1,
            raise_after: 3,
            clear_after: 3,
        }
    }
}

impl PressureConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (field, value) in [
            ("node_cpu_some", self.node_cpu_some),
            ("node_cpu_busy", self.node_cpu_busy),
            ("node_memory_some", self.node_memory_some),
            ("node_io_full", self.node_io_full),
            ("starved_cpu_some", self.starved_cpu_some),
            ("starved_memory_some", self.starved_memory_some),
            ("quota_throttled_ratio", self.quota_throttled_ratio),
            ("quota_cpu_some", self.quota_cpu_some),
        ] {
            check_ratio(field, value)?;
        }
        self.hysteresis().validate()
    }

    fn hysteresis(&self) -> Hysteresis {
        Hysteresis {
            raise_after: self.raise_after,
            clear_after: self.clear_after,
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Previous {
    at: Duration,
    node: Option<Arc<NodePressure>>,
}

#[derive(Debug, Default)]
pub struct PressureDetector {
    config: PressureConfig,
    previous: Option<Previous>,
    /// The last fresh cgroup reading and when it was first seen. Cgroups are read on their
    /// own interval: a sample that carries the same reading (the same `Arc`) adds no rates.
    cgroups_seen: Option<(Duration, Arc<Cgroups>)>,
    /// The rates and verdicts of the last fresh reading, repeated until the next one, and
    /// the pod list their names came from (names change when it does, not the rates).
    cgroup_rates: Arc<Vec<CgroupRates>>,
    named_from: Option<Arc<Pods>>,
    node: Latch,
    /// See [`PressureVerdict::node_cpu_busy`].
    node_cpu_busy: Option<f64>,
    /// The verdicts of the cgroups of the last fresh reading, sorted by path like the
    /// reading itself, so that a reading is matched to them in one pass.
    latches: Vec<(String, CgroupLatches)>,
}

/// One cgroup's verdicts.
#[derive(Debug, Default)]
struct CgroupLatches {
    quota: Latch,
    starved: Latch,
}

/// Advances `it`, sorted by key, to `key`: the entry with that key, or `None` when there is
/// none (the entries before it are skipped, the ones after it stay).
fn seek<K: AsRef<str>, V>(
    it: &mut std::iter::Peekable<impl Iterator<Item = (K, V)>>,
    key: &str,
) -> Option<(K, V)> {
    while let Some((k, _)) = it.peek() {
        match k.as_ref().cmp(key) {
            std::cmp::Ordering::Less => {
                it.next();
            }
            std::cmp::Ordering::Equal => return it.next(),
            std::cmp::Ordering::Greater => return None,
        }
    }
    None
}

impl PressureDetector {
    pub fn new(config: PressureConfig) -> Self {
        Self {
            config,
            ..Default::default()
        }
    }

    pub fn config(&self) -> &PressureConfig {
        &self.config
    }

    /// Feeds one snapshot. `None` on the first sample with pressure or cgroup data (rates need
    /// two) and while neither source gives data.
    pub fn observe(&mut self, snap: &Snapshot) -> Option<PressureVerdict> {
        if snap.get::<NodePressure>().is_none() && snap.get::<Cgroups>().is_none() {
            self.previous = None;
            self.cgroups_seen = None;
            self.cgroup_rates = Arc::default();
            return None;
        }
        let current = Previous {
            at: snap.at,
            node: snap.shared::<NodePressure>(),
        };
        let previous = self.previous.replace(current);
        let cgroups = self.observe_cgroups(snap);
        let prev = previous?;
        let dt = snap.at.checked_sub(prev.at)?.as_secs_f64();
        if dt <= 0.0 {
            return None;
        }
        let h = self.config.hysteresis();
        let (cgroups, mut changes) = cgroups;

        let node: BTreeMap<PsiResource, PsiRatios> = match (&prev.node, snap.get::<NodePressure>())
        {
            (Some(before), Some(now)) => now
                .iter()
                .filter_map(|(r, p)| Some((*r, ratios(before.get(r)?, p, dt))))
                .collect(),
            _ => BTreeMap::new(),
        };
        let at = |r: PsiResource, f: fn(&PsiRatios) -> Option<f64>| node.get(&r).and_then(f);
        let mut node_over = Vec::new();
        let c = &self.config;
        let busy = self.node_cpu_busy.is_some_and(|b| b >= c.node_cpu_busy);
        for (resource, kind, value, threshold) in [
            (
                PsiResource::Cpu,
                "some",
                at(PsiResource::Cpu, |p| p.some).filter(|_| busy),
                c.node_cpu_some,
            ),
            (
                PsiResource::Memory,
                "some",
                at(PsiResource::Memory, |p| p.some),
                c.node_memory_some,
            ),
            (
                PsiResource::Io,
                "full",
                at(PsiResource::Io, |p| p.full),
                c.node_io_full,
            ),
        ] {
            if value.is_some_and(|v| v >= threshold) {
                node_over.push(format!("{resource} {kind}"));
            }
        }
        if !node.is_empty() && self.node.update(!node_over.is_empty(), &h, snap.timestamp) {
            changes.push(Change {
                scope: Scope::Node,
                verdict: PressureVerdictKind::NodeSaturated,
                active: self.node.active,
            });
        }

        Some(PressureVerdict {
            interval_seconds: dt,
            node,
            node_saturated: self.node.active,
            node_over,
            node_cpu_busy: self.node_cpu_busy,
            cgroups,
            changes,
        })
    }

    /// Rates and verdicts of every watched cgroup, from a fresh reading; the last ones again
    /// when this sample repeats the previous reading.
    fn observe_cgroups(&mut self, snap: &Snapshot) -> (Arc<Vec<CgroupRates>>, Vec<Change>) {
        let Some(now_all) = &snap.shared::<Cgroups>() else {
            self.cgroups_seen = None;
            self.cgroup_rates = Arc::default();
            self.latches.clear();
            self.node_cpu_busy = None;
            return (Arc::default(), Vec::new());
        };
        let fresh = self
            .cgroups_seen
            .as_ref()
            .is_none_or(|(_, seen)| !Arc::ptr_eq(seen, now_all));
        if !fresh {
            // The same reading, but the pod list may have arrived or changed since.
            let same_pods = match (&self.named_from, snap.shared::<Pods>()) {
                (None, None) => true,
                (Some(a), Some(b)) => Arc::ptr_eq(a, &b),
                _ => false,
            };
            if !same_pods {
                let mut rates = (*self.cgroup_rates).clone();
                for r in &mut rates {
                    (r.name, r.namespace, r.pod, r.container) = names(snap, &r.workload);
                }
                self.cgroup_rates = Arc::new(rates);
                self.named_from = snap.shared::<Pods>();
            }
            return (self.cgroup_rates.clone(), Vec::new());
        }
        let before = self.cgroups_seen.replace((snap.at, now_all.clone()));
        let Some((before_at, before_all)) = before else {
            return (Arc::default(), Vec::new());
        };
        let dt = match snap.at.checked_sub(before_at) {
            Some(d) if !d.is_zero() => d.as_secs_f64(),
            _ => return (Arc::default(), Vec::new()),
        };
        let cpus = snap.get::<Topology>().map_or(0, |t| t.online.len());
        self.node_cpu_busy = match (before_all.cpu_usage_us, now_all.cpu_usage_us) {
            (Some(a), Some(b)) if cpus > 0 => b
                .checked_sub(a)
                .map(|us| (us as f64 / 1e6 / dt / cpus as f64).min(1.0)),
            _ => None,
        };
        let h = self.config.hysteresis();
        let mut changes = Vec::new();
        let mut cgroups = Vec::with_capacity(now_all.groups.len());
        // Both readings and the verdicts are sorted by path: one merge instead of a lookup
        // by a long path in each (500 pods share 70-byte prefixes).
        let mut befores = before_all.groups.iter().peekable();
        let mut old = std::mem::take(&mut self.latches).into_iter().peekable();
        let mut latches = Vec::with_capacity(now_all.groups.len());
        for (path, now) in &now_all.groups {
            let Some((_, before)) = seek(&mut befores, path) else {
                continue;
            };
            // A cgroup in both readings keeps its verdicts; one that is gone takes them along.
            let (key, mut l) =
                seek(&mut old, path).unwrap_or_else(|| (path.clone(), CgroupLatches::default()));
            let mut r = cgroup_rates(snap, path, before, now, dt);
            let c = &self.config;
            let throttled = r
                .throttled_ratio
                .is_some_and(|t| t >= c.quota_throttled_ratio);
            // Without cgroup PSI (v1-only nodes) throttling alone decides.
            let waiting = r.cpu_some_ratio.is_none_or(|s| s >= c.quota_cpu_some);
            let quota_bound = r.quota_cores.is_some() && throttled && waiting;
            // CPU wait in a quota-bound cgroup is its own limit's doing: that is the
            // quota-bound finding, not a second one.
            let starved = (r.cpu_some_ratio.is_some_and(|s| s >= c.starved_cpu_some)
                && !quota_bound)
                || r.memory_some_ratio
                    .is_some_and(|s| s >= c.starved_memory_some);
            if l.quota.update(quota_bound, &h, snap.timestamp) {
                changes.push(Change {
                    scope: Scope::Cgroup(path.clone()),
                    verdict: PressureVerdictKind::QuotaBound,
                    active: l.quota.active,
                });
            }
            r.quota_bound = l.quota.active;
            // Containers share their pod's verdict; only pods and services are judged.
            if !matches!(r.workload, Workload::Container { .. }) {
                if l.starved.update(starved, &h, snap.timestamp) {
                    changes.push(Change {
                        scope: Scope::Cgroup(path.clone()),
                        verdict: PressureVerdictKind::Starved,
                        active: l.starved.active,
                    });
                }
                r.starved = l.starved.active;
            }
            cgroups.push(r);
            latches.push((key, l));
        }
        self.latches = latches;
        self.cgroup_rates = Arc::new(cgroups);
        self.named_from = snap.shared::<Pods>();
        (self.cgroup_rates.clone(), changes)
    }
}

/// Stall share of the interval; `None` when a counter went backwards (a cgroup recreated
/// under the same path).
fn ratio(before: u64, now: u64, dt: f64) -> Option<f64> {
    let d = now.checked_sub(before)?;
    Some((d as f64 / 1e6 / dt).min(1.0))
}

fn ratios(before: &Psi, now: &Psi, dt: f64) -> PsiRatios {
    let pick = |b: Option<PsiLine>, n: Option<PsiLine>| ratio(b?.total_us, n?.total_us, dt);
    PsiRatios {
        some: pick(before.some, now.some),
        full: pick(before.full, now.full),
    }
}

fn cgroup_rates(
    snap: &Snapshot,
    path: &str,
    before: &CgroupStats,
    now: &CgroupStats,
    dt: f64,
) -> CgroupRates {
    let psi = |resource: PsiResource| {
        let r = ratios(
            before.pressure.get(resource)?,
            now.pressure.get(resource)?,
            dt,
        );
        r.some
    };
    let (b, n) = (before.cpu_stat, now.cpu_stat);
    let throttled_ratio = b.zip(n).and_then(|(b, n)| {
        let periods = n.nr_periods.checked_sub(b.nr_periods)?;
        let throttled = n.nr_throttled.checked_sub(b.nr_throttled)?;
        (periods > 0).then(|| (throttled as f64 / periods as f64).min(1.0))
    });
    let cpu_usage_cores = b.zip(n).and_then(|(b, n)| {
        let d = n.usage_us?.checked_sub(b.usage_us?)?;
        Some(d as f64 / 1e6 / dt)
    });
    let (name, namespace, pod, container) = names(snap, &now.workload);
    let (pod_uid, qos) = match &now.workload {
        Workload::Pod { uid, qos } | Workload::Container { uid, qos, .. } => {
            (Some(uid.clone()), Some(*qos))
        }
        Workload::Service { .. } | Workload::Other => (None, None),
    };
    CgroupRates {
        path: path.to_string(),
        workload: now.workload.clone(),
        pod_uid,
        qos,
        name,
        namespace,
        pod,
        container,
        quota_cores: now.cpu_max.and_then(|m| m.cores()),
        cpu_usage_cores,
        throttled_ratio,
        cpu_some_ratio: psi(PsiResource::Cpu),
        memory_some_ratio: psi(PsiResource::Memory),
        io_some_ratio: psi(PsiResource::Io),
        quota_bound: false,
        starved: false,
    }
}

type Names = (String, Option<String>, Option<String>, Option<String>);

/// How a finding names the workload, and the Kubernetes names when known.
pub fn names(snap: &Snapshot, w: &Workload) -> Names {
    match w {
        Workload::Pod { uid, .. } => match snap.pod(uid) {
            Some(p) => (
                format!("{}/{}", p.namespace, p.name),
                Some(p.namespace.clone()),
                Some(p.name.clone()),
                None,
            ),
            None => (format!("pod {uid}"), None, None, None),
        },
        Workload::Container { uid, id, .. } => match snap.pod(uid) {
            Some(p) => {
                let c = p.containers.get(id).cloned();
                let short = &id[..id.len().min(12)];
                let label = c.clone().unwrap_or_else(|| short.to_string());
                (
                    format!("{}/{}/{label}", p.namespace, p.name),
                    Some(p.namespace.clone()),
                    Some(p.name.clone()),
                    c,
                )
            }
            None => (
                format!("pod {uid} container {}", &id[..id.len().min(12)]),
                None,
                None,
                None,
            ),
        },
        Workload::Service { unit } => (unit.clone(), None, None, None),
        Workload::Other => (String::new(), None, None, None),
    }
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".into(), |v| format!("{:.0}%", v * 100.0))
}

/// Findings for every active verdict, each naming the workload and saying what to do.
pub fn findings(v: &PressureVerdict) -> Vec<Finding> {
    let mut out = Vec::new();
    if v.node_saturated {
        let at = |r: PsiResource| v.node.get(&r).copied().unwrap_or_default();
        out.push(Finding {
            kind: crate::FindingKind::NodeSaturated,
            severity: Severity::Warning,
            subject: "node".into(),
            message: format!(
                "the node is saturated: work waited for CPU {} (some, with the CPUs {} busy), memory {} (some), I/O {} (full) of the last {:.0} s; \
                 it holds more than it can run: move workloads off it, lower overcommit (requests closer to use), \
                 and see the most-pressured cgroups in `nodemedic check`",
                pct(at(PsiResource::Cpu).some),
                pct(v.node_cpu_busy),
                pct(at(PsiResource::Memory).some),
                pct(at(PsiResource::Io).full),
                v.interval_seconds
            ),
        });
    }
    out.extend(v.cgroups.iter().flat_map(cgroup_findings));
    out
}

/// A cgroup's findings: quota-bound and starved, each naming it and saying what to do.
pub fn cgroup_findings(c: &CgroupRates) -> Vec<Finding> {
    let mut out = Vec::new();
    if c.quota_bound {
        let cores = c
            .quota_cores
            .map_or_else(|| "?".into(), |q| format!("{q:.2}"));
        out.push(Finding {
            kind: crate::FindingKind::QuotaBound,
            severity: Severity::Warning,
            subject: c.name.clone(),
            message: format!(
                "{} is held back by its CPU limit: throttled in {} of its CFS periods with a quota of {cores} CPUs \
                 (using {}), and its tasks waited for CPU {} of the time; raise or remove the CPU limit \
                 (cpu.max, resources.limits.cpu), or spread the work over more replicas",
                c.name,
                pct(c.throttled_ratio),
                c.cpu_usage_cores
                    .map_or_else(|| "n/a".into(), |u| format!("{u:.2} CPUs")),
                pct(c.cpu_some_ratio),
            ),
        });
    }
    if c.starved {
        out.push(Finding {
            kind: crate::FindingKind::Starved,
            severity: Severity::Warning,
            subject: c.name.clone(),
            message: format!(
                "{} is starved: its tasks waited for CPU {} and for memory {} of the time; \
                 raise its requests (CPU) or memory limit, or move it away from the neighbours that compete with it",
                c.name,
                pct(c.cpu_some_ratio),
                pct(c.memory_some_ratio),
            ),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use nodemedic_collect::sources::cgroups::{CgroupPressure, CpuMax, CpuStat, Qos};
    use nodemedic_collect::sources::pressure::PsiLine;

    use super::*;

    fn line(total_us: u64) -> Option<PsiLine> {
        Some(PsiLine {
            total_us,
            ..Default::default()
        })
    }

    fn pod(throttled: u64, periods: u64, cpu_wait_us: u64) -> CgroupStats {
        CgroupStats {
            workload: Workload::Pod {
                uid: "1a2b".into(),
                qos: Qos::Burstable,
            },
            cpu_max: Some(CpuMax {
                quota_us: Some(50_000),
                period_us: 100_000,
            }),
            cpu_stat: Some(CpuStat {
                usage_us: Some(periods * 50_000),
                nr_periods: periods,
                nr_throttled: throttled,
                throttled_us: throttled * 10_000,
                ..Default::default()
            }),
            pressure: CgroupPressure {
                cpu: Some(Psi {
                    some: line(cpu_wait_us),
                    full: line(0),
                }),
                ..Default::default()
            },
        }
    }

    /// `/status` and `check --format json` show a cgroup's workload as the kind they always
    /// did.
    #[test]
    fn a_cgroup_shows_its_workload_as_its_kind() {
        let (uid, qos) = ("1a2b".to_string(), Qos::Burstable);
        for (workload, kind) in [
            (
                Workload::Pod {
                    uid: uid.clone(),
                    qos,
                },
                "pod",
            ),
            (
                Workload::Container {
                    uid,
                    qos,
                    runtime: None,
                    id: "abc".into(),
                },
                "container",
            ),
            (
                Workload::Service {
                    unit: "kubelet.service".into(),
                },
                "service",
            ),
            (Workload::Other, "other"),
        ] {
            assert_eq!(workload.kind(), kind);
            let g = CgroupStats {
                workload,
                ..pod(0, 1, 0)
            };
            let r = cgroup_rates(&Snapshot::default(), "x", &g, &g, 1.0);
            let text = toml::to_string(&r).unwrap();
            assert!(text.contains(&format!("\nkind = \"{kind}\"\n")), "{text}");
        }
    }

    /// A change is logged with the subject and verdict names the log always had.
    #[test]
    fn changes_are_named_as_before() {
        assert_eq!(Scope::Node.to_string(), "node");
        assert_eq!(
            Scope::Cgroup("kubepods/pod1".into()).to_string(),
            "kubepods/pod1"
        );
        let names = [
            PressureVerdictKind::NodeSaturated,
            PressureVerdictKind::QuotaBound,
            PressureVerdictKind::Starved,
        ]
        .map(PressureVerdictKind::as_str);
        assert_eq!(names, ["node_saturated", "quota_bound", "starved"]);
    }

    /// A detector that raises after two agreeing readings and clears after two.
    fn two_to_raise_two_to_clear() -> PressureDetector {
        PressureDetector::new(PressureConfig {
            raise_after: 2,
            clear_after: 2,
            ..Default::default()
        })
    }

    fn snap(secs: u64, node_cpu_us: u64, g: CgroupStats) -> Snapshot {
        let mut snap = Snapshot {
            at: Duration::from_secs(secs),
            timestamp: secs as f64,
            ..Default::default()
        };
        snap.put(NodePressure(
            [(
                PsiResource::Cpu,
                Psi {
                    some: line(node_cpu_us),
                    full: None,
                },
            )]
            .into(),
        ));
        snap.put(nodemedic_collect::sources::cgroups::Cgroups {
            groups: [("kubepods/burstable/pod1a2b".to_string(), g)].into(),
            ..Default::default()
        });
        snap
    }

    /// `snap` on a node of `cpus` CPUs whose tasks have used `usage_us` of CPU time in all.
    fn busy_snap(secs: u64, node_cpu_us: u64, cpus: u32, usage_us: u64) -> Snapshot {
        let mut s = snap(secs, node_cpu_us, pod(0, 0, 0));
        s.put(nodemedic_collect::sources::topology::Topology {
            online: nodemedic_kernel::CpuSet::from_cpus(0..cpus),
            ..Default::default()
        });
        s.get_mut::<Cgroups>().unwrap().cpu_usage_us = Some(usage_us);
        s
    }

    /// CPU pressure alone is not saturation: tasks throttled by their own quota wait too, on
    /// idle CPUs (a real node: 95% CPU `some` at 91% idle). With the CPUs busy it is.
    #[test]
    fn cpu_saturation_needs_busy_cpus_besides_cpu_pressure() {
        let mut d = PressureDetector::new(PressureConfig::default());
        // 4 CPUs, 10 s apart: 95% CPU wait throughout.
        let (mut wait, mut used) = (0u64, 0u64);
        d.observe(&busy_snap(0, 0, 4, 0));
        for i in 1..=10u64 {
            wait += 9_500_000;
            used += 4 * 900_000; // 9% busy
            let v = d.observe(&busy_snap(i * 10, wait, 4, used)).unwrap();
            assert!((v.node_cpu_busy.unwrap() - 0.09).abs() < 1e-9);
            assert!(!v.node_saturated, "idle CPUs, sample {i}");
            assert!(v.node_over.is_empty());
        }
        let mut saturated = Vec::new();
        for i in 11..=14u64 {
            wait += 9_500_000;
            used += 4 * 9_500_000; // 95% busy
            let v = d.observe(&busy_snap(i * 10, wait, 4, used)).unwrap();
            assert_eq!(v.node_over, ["cpu some"]);
            saturated.push(v.node_saturated);
            if v.node_saturated {
                let f = findings(&v);
                assert!(
                    f[0].message.contains("with the CPUs 95% busy"),
                    "{}",
                    f[0].message
                );
            }
        }
        assert_eq!(saturated, [false, false, true, true], "raise_after 3");
    }

    /// Cgroups are read on their own interval: samples in between carry the same reading.
    /// They repeat its rates and verdicts, and do not count towards hysteresis; the next
    /// fresh reading's rates span the time since the last fresh one.
    #[test]
    fn a_repeated_cgroup_reading_adds_no_rates_and_no_hysteresis() {
        let mut d = two_to_raise_two_to_clear();
        assert!(d.observe(&snap(0, 0, pod(0, 0, 0))).is_none());
        let fresh = snap(15, 3_000_000, pod(60, 100, 5_250_000));
        let v = d.observe(&fresh).unwrap();
        assert_eq!(v.cgroups[0].throttled_ratio, Some(0.6));
        assert_eq!(v.cgroups[0].cpu_some_ratio, Some(0.35), "5.25 s of 15");
        assert!(!v.cgroups[0].quota_bound, "one reading of two");
        // Two samples 5 s apart that carry the same reading (same Arc), node PSI moving on.
        for at in [20, 25] {
            let mut repeat = snap(at, 4_000_000, pod(0, 0, 0));
            repeat.put_shared(fresh.shared::<Cgroups>().unwrap());
            let v = d.observe(&repeat).unwrap();
            assert_eq!(v.cgroups.len(), 1);
            assert_eq!(
                v.cgroups[0].throttled_ratio,
                Some(0.6),
                "repeated, not zero"
            );
            assert!(
                !v.cgroups[0].quota_bound,
                "a repeat is not a second reading"
            );
            assert!(
                v.changes.iter().all(|c| c.scope == Scope::Node),
                "{:?}",
                v.changes
            );
        }
        // The next fresh reading, 15 s after the last: its rates span those 15 s.
        let v = d
            .observe(&snap(30, 5_000_000, pod(120, 200, 10_500_000)))
            .unwrap();
        assert_eq!(v.cgroups[0].cpu_some_ratio, Some(0.35));
        assert!(
            v.cgroups[0].quota_bound,
            "the second fresh reading raises it"
        );
    }

    /// Samples between two readings share the last rates (the same `Arc`, no copy) while the
    /// pod list is the same; when names arrive in between, the rates are named anew.
    #[test]
    fn repeated_rates_are_shared_and_renamed_when_the_pod_list_changes() {
        let mut d = PressureDetector::default();
        d.observe(&snap(0, 0, pod(0, 0, 0)));
        let fresh = snap(15, 3_000_000, pod(60, 100, 5_250_000));
        let first = d.observe(&fresh).unwrap().cgroups;
        assert_eq!(first[0].name, "pod 1a2b");
        let mut repeat = snap(20, 4_000_000, pod(0, 0, 0));
        repeat.put_shared(fresh.shared::<Cgroups>().unwrap());
        let again = d.observe(&repeat).unwrap().cgroups;
        assert!(Arc::ptr_eq(&first, &again), "no copy while nothing changed");
        repeat.put(Pods(BTreeMap::from([(
            "1a2b".to_string(),
            nodemedic_sample::snapshot::PodIdentity {
                namespace: "hpc".into(),
                name: "solver-0".into(),
                containers: BTreeMap::new(),
            },
        )])));
        repeat.at = Duration::from_secs(25);
        let named = d.observe(&repeat).unwrap().cgroups;
        assert!(!Arc::ptr_eq(&first, &named));
        assert_eq!(named[0].name, "hpc/solver-0");
        assert_eq!(named[0].throttled_ratio, Some(0.6), "the same rates");
        repeat.at = Duration::from_secs(30);
        let kept = d.observe(&repeat).unwrap().cgroups;
        assert!(Arc::ptr_eq(&named, &kept));
    }

    #[test]
    fn quota_bound_needs_throttling_and_waiting_for_raise_after_samples() {
        let mut d = two_to_raise_two_to_clear();
        assert!(
            d.observe(&snap(0, 0, pod(0, 0, 0))).is_none(),
            "needs two samples"
        );
        // 10 s: 100 periods, 60 throttled; waited 3.5 s of 10 (35%); node CPU some 20%.
        let v = d
            .observe(&snap(10, 2_000_000, pod(60, 100, 3_500_000)))
            .unwrap();
        let c = &v.cgroups[0];
        assert_eq!(c.throttled_ratio, Some(0.6));
        assert!((c.cpu_some_ratio.unwrap() - 0.35).abs() < 1e-9);
        assert_eq!(c.quota_cores, Some(0.5));
        assert!((c.cpu_usage_cores.unwrap() - 0.5).abs() < 1e-9);
        assert!(!c.quota_bound, "hysteresis: one sample is not enough");
        assert!((v.node[&PsiResource::Cpu].some.unwrap() - 0.2).abs() < 1e-9);
        let v = d
            .observe(&snap(20, 4_000_000, pod(120, 200, 7_000_000)))
            .unwrap();
        assert!(v.cgroups[0].quota_bound);
        assert!(!v.cgroups[0].starved, "its CPU wait is its quota's doing");
        assert!(!v.node_saturated);
        let f = findings(&v);
        let q = f
            .iter()
            .find(|f| f.kind == crate::FindingKind::QuotaBound)
            .unwrap();
        assert_eq!(q.subject, "pod 1a2b");
        assert!(q.message.contains("throttled in 60%"), "{}", q.message);
        assert!(q.message.contains("0.50 CPUs"), "{}", q.message);
        // Throttled but nobody waits: the quota is not what holds it back.
        let v = d
            .observe(&snap(30, 4_000_000, pod(180, 300, 7_000_000)))
            .unwrap();
        assert!(v.cgroups[0].quota_bound, "clear_after 2");
        let v = d
            .observe(&snap(40, 4_000_000, pod(240, 400, 7_000_000)))
            .unwrap();
        assert!(!v.cgroups[0].quota_bound);
    }

    #[test]
    fn a_counter_going_backwards_gives_no_rate_and_a_vanished_cgroup_no_state() {
        let mut d = PressureDetector::new(PressureConfig::default());
        d.observe(&snap(0, 5_000_000, pod(100, 100, 9_000_000)));
        let v = d.observe(&snap(10, 1_000, pod(1, 2, 1_000))).unwrap();
        assert_eq!(v.node[&PsiResource::Cpu].some, None);
        assert_eq!(v.cgroups[0].throttled_ratio, None);
        assert_eq!(v.cgroups[0].cpu_some_ratio, None);
        let mut empty = snap(20, 2_000, pod(1, 2, 1_000));
        empty.put(Cgroups::default());
        let v = d.observe(&empty).unwrap();
        assert!(v.cgroups.is_empty());
        assert!(d.latches.is_empty());
    }

    /// Verdicts follow their cgroup by path while others appear before and after it and
    /// vanish (the readings are matched in one sorted pass, not looked up).
    #[test]
    fn verdicts_follow_their_cgroup_while_others_come_and_go() {
        let mut d = two_to_raise_two_to_clear();
        fn reading(d: &mut PressureDetector, secs: u64, paths: &[&str]) -> PressureVerdict {
            let n = secs / 10;
            let mut s = snap(secs, 0, pod(0, 0, 0));
            s.put(nodemedic_collect::sources::cgroups::Cgroups {
                groups: paths
                    .iter()
                    // Throttled in 60% of periods, waiting 35% of the time: quota-bound.
                    .map(|p| (p.to_string(), pod(60 * n, 100 * n, 3_500_000 * n)))
                    .collect(),
                ..Default::default()
            });
            d.observe(&s).unwrap_or_else(|| PressureVerdict {
                interval_seconds: 0.0,
                node: BTreeMap::new(),
                node_saturated: false,
                node_over: Vec::new(),
                node_cpu_busy: None,
                cgroups: Arc::default(),
                changes: Vec::new(),
            })
        }
        let bound = |v: &PressureVerdict| -> Vec<(String, bool)> {
            v.cgroups
                .iter()
                .map(|c| (c.path.clone(), c.quota_bound))
                .collect()
        };
        let owned = |v: &[(&str, bool)]| -> Vec<(String, bool)> {
            v.iter().map(|(p, b)| (p.to_string(), *b)).collect()
        };
        reading(&mut d, 0, &["a", "c"]);
        let v = reading(&mut d, 10, &["a", "c"]);
        assert_eq!(bound(&v), owned(&[("a", false), ("c", false)]));
        // a vanishes, b and d appear around c: c's second throttled reading raises it.
        let v = reading(&mut d, 20, &["b", "c", "d"]);
        assert_eq!(
            bound(&v),
            owned(&[("c", true)]),
            "b and d have no rates yet"
        );
        let v = reading(&mut d, 30, &["a", "b", "c", "d"]);
        assert_eq!(
            bound(&v),
            owned(&[("b", false), ("c", true), ("d", false)]),
            "a came back without its old streak, and without rates"
        );
        let v = reading(&mut d, 40, &["a", "b", "c", "d"]);
        assert_eq!(
            bound(&v),
            owned(&[("a", false), ("b", true), ("c", true), ("d", true)])
        );
        assert_eq!(
            d.latches
                .iter()
                .map(|(p, _)| p.as_str())
                .collect::<Vec<_>>(),
            ["a", "b", "c", "d"]
        );
    }

    #[test]
    fn node_saturation_flaps_never() {
        let mut d = PressureDetector::new(PressureConfig::default());
        let mut total = 0;
        d.observe(&busy_snap(0, total, 2, 0));
        let mut over = 0;
        for i in 1..200u64 {
            // 90% and 10% CPU wait, alternating, on busy CPUs.
            total += if i % 2 == 0 { 9_000_000 } else { 1_000_000 };
            let v = d
                .observe(&busy_snap(i * 10, total, 2, i * 2 * 9_500_000))
                .unwrap();
            over += v.node_over.len();
            assert!(!v.node_saturated);
        }
        assert_eq!(over, 99, "every other sample is over the threshold");
    }

    #[test]
    fn config_rejects_nonsense() {
        assert!(PressureConfig::default().validate().is_ok());
        let bad = PressureConfig {
            node_cpu_some: 1.5,
            ..Default::default()
        };
        assert!(matches!(
            bad.validate(),
            Err(ConfigError::Ratio {
                field: "node_cpu_some",
                ..
            })
        ));
    }
}
