//! The pods' and services' cgroups: the parsers of their CPU files and of their paths
//! (`parse.rs`), the collector that walks them, and its series.

mod parse;

pub use parse::*;

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nodemedic_exposition::{Encoder, Kind};
use nodemedic_kernel::lsm::LsmContext;
use nodemedic_kernel::mounts::{cgroup_mounts_under, CgroupMounts};
use nodemedic_sample::verdict::CgroupRates;
use nodemedic_sample::{PressureVerdict, Snapshot};

use super::pressure::{self as psi, what, Psi, PsiResource, EOPNOTSUPP};
use super::RescanCache;
use crate::dir_watch::{DirEvents, DirWatch};
use crate::registry::Render;
use crate::{CollectError, Collected, Collector, Ctx, ReadError, Reader};

/// Per-cgroup CPU quota, throttling and pressure.
pub const NAME: crate::CollectorName = crate::CollectorName::new("cgroups");

/// One of a pod's or container's cgroup files, as the fault injection breaks it: optional
/// (a cgroup without a quota has no `cpu.max` limit, a kernel without PSI no `.pressure`),
/// and a broken one costs only that cgroup's data and series.
const fn per_pod_cgroup(
    name: &'static str,
    pattern: &'static str,
    table: bool,
) -> crate::registry::FileKind {
    crate::registry::FileKind {
        name,
        tree: "k8s-systemd-v2",
        pattern,
        table,
        optional: true,
        empty_ok: false,
        impact: crate::registry::Impact::NoGroup,
        may_change: &[
            "collector/cgroups",
            "cgroup/",
            "count/cgroups",
            "series/cgroups",
        ],
    }
}

crate::register!(crate::registry::Declaration {
    name: NAME,
    order: 90,
    switch: crate::registry::Switch::Collectors,
    optional: false,
    checks: crate::registry::Checks {
        fixtures: crate::registry::Fixtures::Trees(&["k8s-systemd-v2", "k8s-cgroupfs-hybrid"]),
        golden: crate::registry::Golden::Series(&[(
            "k8s-systemd-v2",
            "nodemedic_cgroup_cpu_usage_seconds_total{",
        )]),
        fuzz: crate::registry::Fuzz::Targets(&["cgroup_cpu", "cgroup_path", "mountinfo", "psi"]),
    },
    faults: &[
        per_pod_cgroup(
            "cgroup cpu.max",
            "sys/fs/cgroup/kubepods.slice/*/*/cpu.max",
            false
        ),
        per_pod_cgroup(
            "cgroup cpu.stat",
            "sys/fs/cgroup/kubepods.slice/*/*/cpu.stat",
            true
        ),
        per_pod_cgroup(
            "cgroup cpu.pressure",
            "sys/fs/cgroup/kubepods.slice/*/*/cpu.pressure",
            true
        ),
        per_pod_cgroup(
            "cgroup memory.pressure",
            "sys/fs/cgroup/kubepods.slice/*/*/memory.pressure",
            true
        ),
    ],
    render: Some(render),
    build: crate::registry::Build::Here(|settings| {
        Some(Box::new(CgroupsCollector::with_interval(
            settings.cgroups.clone(),
            settings.cgroups_interval,
        )))
    }),
});

/// Which cgroups are watched. Pods are always watched; containers multiply the series by the
/// containers per pod, so they are opt-in.
#[derive(Debug, Clone, Default)]
pub struct CgroupSelection {
    /// Also one entry per container of each pod.
    pub containers: bool,
    /// systemd services (`system.slice/<unit>.service`), for bare-metal nodes.
    pub services: bool,
    /// Only cgroups whose path (relative to the hierarchy root) matches.
    pub include: Option<regex::Regex>,
    /// No cgroup whose path matches.
    pub exclude: Option<regex::Regex>,
}

impl CgroupSelection {
    /// Pods only, every one: the default, as a constant.
    pub const PODS: Self = Self {
        containers: false,
        services: false,
        include: None,
        exclude: None,
    };

    fn wants(&self, rel: &str, w: &Workload) -> bool {
        let kind = match w {
            Workload::Pod { .. } => true,
            Workload::Container { .. } => self.containers,
            Workload::Service { .. } => self.services,
            Workload::Other => false,
        };
        kind && self.include.as_ref().is_none_or(|r| r.is_match(rel))
            && !self.exclude.as_ref().is_some_and(|r| r.is_match(rel))
    }
}

/// How deep the walk looks for pods and services outside `kubepods`: the root's children and
/// grandchildren (`system.slice/foo.service`, `user.slice/user-0.slice`).
const SEARCH_DEPTH: usize = 2;
/// How deep below the root a pod's containers can be (systemd driver with a QoS slice:
/// `kubepods.slice/kubepods-burstable.slice/…pod….slice/cri-containerd-….scope`, plus a
/// kubelet `--cgroup-root` prefix or two).
const KUBEPODS_DEPTH: usize = 6;

/// Per-cgroup CPU quota (`cpu.max`, or v1 `cpu.cfs_quota_us`/`cpu.cfs_period_us`), throttling
/// (`cpu.stat`) and pressure (`{cpu,memory,io}.pressure`) for Kubernetes pods and, when
/// asked, their containers and systemd services.
///
/// The hierarchies come from `/proc/self/mountinfo` when it shows cgroup mounts under
/// `--path.cgroupfs` (the real node), else from the directory shape there (fixture trees, a
/// host tree mounted without its submounts): a v2 root with `cgroup.controllers`, the hybrid
/// `unified/`, v1 `cpu,cpuacct/` or `cpu/`. On v1 and hybrid nodes the quota and throttling
/// come from the v1 cpu hierarchy and the pressure from the unified one, joined by path.
///
/// Cgroups are walked and read on their own interval (`cgroups.interval`), like cAdvisor's
/// housekeeping: on a node with 500 pods that is 2,000–2,500 kernfs reads (≈ 3 µs each,
/// BENCHMARKS.md), too many for every IRQ sample. Samples in between carry the last reading
/// (the same `Arc`, and its warnings), so the exposition never loses a series and the
/// pressure detector computes rates only between fresh readings. A reading walks the
/// hierarchy again only when a directory the last walk listed changed (inotify), or at a
/// rescan.
#[derive(Default)]
pub struct CgroupsCollector {
    selection: CgroupSelection,
    /// Zero: every sample.
    interval: Duration,
    /// The mounts found under a root, re-read at each rescan (or when the root changes).
    layout: RescanCache<(PathBuf, CgroupMounts, bool)>,
    last: Mutex<Option<Reading>>,
    listing: Mutex<Option<Listing>>,
    /// Walks done (the tests check that an unchanged tree is not walked again).
    walks: AtomicU64,
}

/// The cgroups the last walk found, reused until a directory it listed changes. Every
/// directory the walk lists is watched with inotify: a cgroup made or removed there (`mkdir`
/// and `rmdir` on cgroupfs, as kubelet, the runtime and systemd do) shows as an event, and the
/// next reading walks again. Without a watch on every listed directory (inotify unavailable,
/// out of watches) every reading walks, as does every rescan.
struct Listing {
    root: PathBuf,
    found: Vec<(String, Workload)>,
    warnings: Vec<String>,
    /// `None`: not every listed directory is watched.
    watch: Option<DirWatch>,
}

/// One reading of the cgroups and where and when it was taken.
struct Reading {
    root: PathBuf,
    at: Duration,
    cgroups: Arc<Cgroups>,
    warnings: Vec<String>,
}

impl CgroupsCollector {
    /// A collector that reads the cgroups on every sample.
    pub fn new(selection: CgroupSelection) -> Self {
        Self::with_interval(selection, Duration::ZERO)
    }

    /// A collector that reads the cgroups when `interval` has passed since the last reading.
    pub fn with_interval(selection: CgroupSelection, interval: Duration) -> Self {
        Self {
            selection,
            interval,
            layout: RescanCache::default(),
            last: Mutex::new(None),
            listing: Mutex::new(None),
            walks: AtomicU64::new(0),
        }
    }

    /// The watched cgroups under `walk_root`: the last walk's, when no listed directory
    /// changed since and this is not a rescan, else a new walk's.
    fn list(
        &self,
        reader: &Reader,
        walk_root: &Path,
        rescan: bool,
        warnings: &mut Vec<String>,
    ) -> Result<Vec<(String, Workload)>, ReadError> {
        let mut listing = self.listing.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(l) = listing.as_mut().filter(|l| !rescan && l.root == walk_root) {
            if let Some(w) = l.watch.as_mut() {
                if matches!(w.drain(), DirEvents::None) {
                    warnings.extend(l.warnings.iter().cloned());
                    return Ok(l.found.clone());
                }
            }
        }
        // Watch before listing: a cgroup made after a directory's watch was added is an
        // event, one made before it is in the listing.
        let mut watch = DirWatch::new()
            .map_err(|e| tracing::debug!(error = %e, "inotify unavailable: cgroups are walked at every reading"))
            .ok();
        let mut found = Vec::new();
        let mut walk_warnings = Vec::new();
        let mut on_dir = |dir: &Path| {
            if watch.as_ref().is_some_and(|w| w.add(dir).is_err()) {
                watch = None;
            }
        };
        walk(
            walk_root,
            "",
            &self.selection,
            reader.lsm(),
            &mut found,
            &mut walk_warnings,
            &mut on_dir,
        )
        .map_err(|e| reader.error(walk_root, e))?;
        // In the map's order, so that each reading's map is built without searching it
        // ([`read_all`]). Compared a word at a time: the paths share their first 70 bytes.
        found.sort_unstable_by(|a, b| nodemedic_kernel::bytes::cmp(a.0.as_bytes(), b.0.as_bytes()));
        self.walks.fetch_add(1, Ordering::Relaxed);
        warnings.extend(walk_warnings.iter().cloned());
        *listing = Some(Listing {
            root: walk_root.to_path_buf(),
            found: found.clone(),
            warnings: walk_warnings,
            watch,
        });
        Ok(found)
    }

    /// The last reading, when it is recent enough for this sample. A sample that comes a
    /// little early (timer jitter) still reads: 10% of the interval is slack.
    fn recent(&self, root: &Path, at: Duration) -> Option<(Arc<Cgroups>, Vec<String>)> {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let r = last.as_ref()?;
        let age = at.checked_sub(r.at)?;
        (r.root == root && age + self.interval / 10 < self.interval)
            .then(|| (r.cgroups.clone(), r.warnings.clone()))
    }
}

impl Collector for CgroupsCollector {
    fn name(&self) -> crate::CollectorName {
        NAME
    }

    fn collect(&self, ctx: &Ctx<'_>, snap: &mut Snapshot) -> Result<Collected, CollectError> {
        let root = &ctx.paths.cgroupfs;
        let mut out = Collected::default();
        if let Some((cgroups, warnings)) = self.recent(root, snap.at) {
            snap.put_shared(cgroups);
            out.warnings = warnings;
            return Ok(out);
        }
        if !root.is_dir() {
            out.unavailable = Some(format!(
                "{} does not exist: no cgroup filesystem to read (set --path.cgroupfs)",
                root.display()
            ));
            return Ok(out);
        }
        let moved = self.layout.peek(|(r, _, _)| r != root).unwrap_or(true);
        let ((_, mounts, from_mountinfo), warnings) =
            self.layout.get(ctx.rescan || moved, || {
                let container = ctx.paths.rootfs != Path::new("/");
                let (m, confirmed) = layout(ctx.reader, &ctx.paths.procfs, root, container);
                Ok(((root.clone(), m, confirmed), Vec::new()))
            })?;
        out.warnings.extend(warnings);
        // The hierarchy the workloads are listed from: the one with the cpu controller's
        // files when there is a v1 one, else the unified one.
        let Some(walk_root) = mounts.cpu.clone().or_else(|| mounts.unified.clone()) else {
            let empty = empty_hierarchies(root);
            if !empty.is_empty() {
                // A configuration to fix, not a kernel without cgroups: failed, so that it
                // shows in nodemedic_scrape_collector_success and its alert.
                return Err(CollectError::down(HiddenHierarchies {
                    root: root.clone(),
                    empty,
                }));
            }
            out.unavailable = Some(format!(
                "no cgroup hierarchy found under {} (neither cgroup.controllers, unified/ nor a v1 cpu controller directory)",
                root.display()
            ));
            return Ok(out);
        };
        let found = self.list(ctx.reader, &walk_root, ctx.rescan, &mut out.warnings)?;
        let groups = read_all(ctx.reader, &mounts, found, &mut out.warnings);
        let cpu_usage_us = node_cpu_usage(ctx.reader, &mounts, &mut out.warnings);
        let cgroups = Arc::new(Cgroups {
            mounts,
            from_mountinfo,
            groups,
            cpu_usage_us,
        });
        snap.put_shared(Arc::clone(&cgroups));
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(Reading {
            root: root.clone(),
            at: snap.at,
            cgroups,
            warnings: out.warnings.clone(),
        });
        Ok(out)
    }
}

/// The cgroup mounts under `root`: from mountinfo when it lists any there, else by shape.
/// In a container (`container`: the host's root is mounted under another path), with the
/// host's cgroup mounts it can write.
fn layout(reader: &Reader, procfs: &Path, root: &Path, container: bool) -> (CgroupMounts, bool) {
    let mountinfo = procfs.join("self/mountinfo");
    let parsed = match reader.read_optional(&mountinfo) {
        Ok(Some(text)) => cgroup_mounts_under(&text, root, container).ok(),
        _ => None,
    };
    match parsed {
        Some(m) if m.unified.is_some() || m.cpu.is_some() => (m, true),
        m => (
            CgroupMounts {
                writable: m.map(|m| m.writable).unwrap_or_default(),
                ..discover(root)
            },
            false,
        ),
    }
}

/// The cgroup v1 (or hybrid) layout's mount points under the cgroup root, present but empty:
/// the node's hierarchies are mounted there, but not in this mount namespace. The Helm chart's
/// `cgroupMount: subPath` binds the host's `/sys/fs/cgroup` without the mounts below it, since
/// a plain read-only bind does not make them read-only and a writable one would let the pod
/// rewrite any pod's limits; a v1 node's hierarchies are then named in `cgroupV1Hierarchies`,
/// or the chart's default (`recursiveReadOnly`, containerd 2) mounts them all read-only.
#[derive(Debug, thiserror::Error)]
#[error(
    "{} holds the empty mount points of a cgroup v1 or hybrid node ({}): its hierarchies are not mounted here; mount each one read-only at its place (the Helm chart: cgroupMount: recursiveReadOnly where the runtime can, as containerd 2 does; else list them in cgroupV1Hierarchies)",
    root.display(),
    empty.join(", ")
)]
pub struct HiddenHierarchies {
    pub root: PathBuf,
    pub empty: Vec<String>,
}

/// The names of the v1 (or hybrid) hierarchy directories under `root` that are empty (see
/// [`HiddenHierarchies`]), sorted; empty when there is none.
fn empty_hierarchies(root: &Path) -> Vec<String> {
    let mut out: Vec<String> = V1_CPU_DIRS
        .iter()
        .chain(&["unified"])
        .filter(|d| {
            std::fs::read_dir(root.join(d)).is_ok_and(|mut entries| entries.next().is_none())
        })
        .map(|d| d.to_string())
        .collect();
    out.sort();
    out
}

/// The CPU time of every task on the node, from the root cgroup: v1 `cpuacct.usage`, else
/// v2 `cpu.stat`'s `usage_usec`. `None` (with a warning when a file is unreadable) without.
fn node_cpu_usage(
    reader: &Reader,
    mounts: &CgroupMounts,
    warnings: &mut Vec<String>,
) -> Option<u64> {
    let (path, v1) = match (&mounts.cpuacct, &mounts.unified) {
        (Some(acct), _) => (acct.join("cpuacct.usage"), true),
        (None, Some(unified)) => (unified.join("cpu.stat"), false),
        (None, None) => return None,
    };
    let text = match reader.read_optional(&path) {
        Ok(t) => t?,
        Err(e) => {
            warnings.push(e.to_string());
            return None;
        }
    };
    let usage = if v1 {
        parse_cpuacct_usage(&text).map(Some)
    } else {
        parse_cpu_stat(&text).map(|s| s.usage_us)
    };
    usage.unwrap_or_else(|e| {
        warnings.push(format!("{}: {e}", path.display()));
        None
    })
}

/// Where a v1 node mounts the hierarchies with the cpu and cpuacct controllers, under its
/// cgroup root: together (either order) or apart.
const V1_CPU_DIRS: [&str; 4] = ["cpu,cpuacct", "cpuacct,cpu", "cpu", "cpuacct"];

fn discover(root: &Path) -> CgroupMounts {
    let v2 = |p: PathBuf| p.join("cgroup.controllers").is_file().then_some(p);
    let unified = v2(root.to_path_buf()).or_else(|| v2(root.join("unified")));
    let with = |file: &str| {
        V1_CPU_DIRS
            .iter()
            .map(|d| root.join(d))
            .find(|d| d.join(file).is_file())
    };
    CgroupMounts {
        unified,
        cpu: with("cpu.cfs_period_us"),
        cpuacct: with("cpuacct.usage"),
        writable: Vec::new(),
    }
}

/// Lists the watched cgroups under `dir` (relative path `rel`). Only the root's listing
/// failing is an error; a subtree that vanished or cannot be listed is a warning.
/// `on_dir` is called with every directory before it is listed. A listing refused under
/// `lsm` names the module.
fn walk(
    base: &Path,
    rel: &str,
    selection: &CgroupSelection,
    lsm: &LsmContext,
    found: &mut Vec<(String, Workload)>,
    warnings: &mut Vec<String>,
    on_dir: &mut dyn FnMut(&Path),
) -> io::Result<()> {
    let dir = if rel.is_empty() {
        base.to_path_buf()
    } else {
        base.join(rel)
    };
    on_dir(&dir);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if rel.is_empty() => return Err(e),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            warnings.push(match lsm.denial("listing", e.raw_os_error()) {
                Some(denied) => format!("{}: {denied}", dir.display()),
                None => format!("{}: cannot list: {e}", dir.display()),
            });
            return Ok(());
        }
    };
    let depth = if rel.is_empty() {
        1
    } else {
        rel.matches('/').count() + 2
    };
    let mut children: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    children.sort();
    for name in children {
        let child = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        let workload = classify(&child);
        let descend = match &workload {
            Workload::Pod { .. } => selection.containers,
            Workload::Container { .. } | Workload::Service { .. } => false,
            Workload::Other => {
                depth <= SEARCH_DEPTH || (child.contains("kubepods") && depth < KUBEPODS_DEPTH)
            }
        };
        if selection.wants(&child, &workload) {
            found.push((child.clone(), workload));
        }
        if descend {
            walk(base, &child, selection, lsm, found, warnings, on_dir)?;
        }
    }
    Ok(())
}

/// The files of every listed cgroup. A cgroup removed since it was listed (a pod deleted
/// mid-sample) is a warning for this sample and nothing else.
fn read_all(
    reader: &Reader,
    mounts: &CgroupMounts,
    found: Vec<(String, Workload)>,
    warnings: &mut Vec<String>,
) -> BTreeMap<String, CgroupStats> {
    let mut groups = Vec::with_capacity(found.len());
    // One path and one buffer for every file of every cgroup: 2,500 reads at 500 pods, none
    // allocating.
    let mut scratch = Scratch {
        path: PathBuf::new(),
        buf: String::with_capacity(512),
    };
    for (rel, workload) in found {
        match read_group(reader, mounts, &rel, workload, &mut scratch, warnings) {
            Ok(Some(stats)) => groups.push((rel, stats)),
            Ok(None) => {}
            Err(e) if e.is_missing() => {
                warnings.push(format!("cgroup {rel} vanished during the sample ({e})"))
            }
            Err(e) => warnings.push(e.to_string()),
        }
    }
    // `found` is in path order ([`CgroupsCollector::list`]), so building the map checks the
    // order with one comparison per cgroup. An insert per cgroup searched the tree: about nine
    // comparisons of paths that share their first 70 bytes, 9,600 calls of musl's byte-wise
    // `memcmp` per reading of 500 pods.
    groups.into_iter().collect()
}

/// Reused for every file read: its path and its contents.
struct Scratch {
    path: PathBuf,
    buf: String,
}

/// Points `path` at `base/rel/name` without allocating, and returns it.
fn at<'a>(path: &'a mut PathBuf, base: &Path, rel: &str, name: &str) -> &'a Path {
    path.as_mut_os_string().clear();
    path.push(base);
    path.push(rel);
    path.push(name);
    path
}

/// One cgroup's files. `Ok(None)` when it has none of them (not a cgroup directory after
/// all); a missing cgroup directory is [`ReadError::Missing`]; a damaged file is a warning
/// and loses only that file.
fn read_group(
    reader: &Reader,
    mounts: &CgroupMounts,
    rel: &str,
    workload: Workload,
    scratch: &mut Scratch,
    warnings: &mut Vec<String>,
) -> Result<Option<CgroupStats>, ReadError> {
    let mut stats = CgroupStats {
        workload,
        cpu_max: None,
        cpu_stat: None,
        pressure: CgroupPressure::default(),
    };
    let mut any = false;
    // A file missing from a cgroup that still exists is a file this kernel or controller
    // does not provide; whether the cgroup itself vanished is decided at the end.
    let mut note = |r: Result<bool, ReadError>| match r {
        Ok(found) => any |= found,
        Err(e) if e.is_missing() => {}
        Err(e) => warnings.push(e.to_string()),
    };
    if let Some(cpu) = &mounts.cpu {
        read_v1_cpu(
            reader,
            cpu,
            mounts.cpuacct.as_deref(),
            rel,
            scratch,
            &mut stats,
            &mut note,
        );
    }
    if let Some(unified) = &mounts.unified {
        if mounts.cpu.is_none() {
            read_v2_cpu(reader, unified, rel, scratch, &mut stats, &mut note);
        } else if stats
            .cpu_stat
            .as_ref()
            .is_some_and(|s| s.usage_us.is_none())
        {
            // Hybrid without a v1 cpuacct twin: the unified cpu.stat always has usage_usec,
            // controllers or not.
            read_unified_usage(reader, unified, rel, scratch, &mut stats, &mut note);
        }
        read_pressure(
            reader,
            unified,
            rel,
            scratch,
            &mut stats.pressure,
            &mut note,
        );
    }
    if any {
        return Ok(Some(stats));
    }
    let primary = mounts
        .cpu
        .as_ref()
        .or(mounts.unified.as_ref())
        .map(|m| m.join(rel));
    match primary {
        Some(dir) if !dir.is_dir() => Err(ReadError::Missing(dir)),
        _ => Ok(None),
    }
}

/// A cgroup's quota and `cpu.stat` on the v1 `cpu` hierarchy, and its usage from `cpuacct`
/// when that is mounted. Each file's outcome goes to `note`: `true` when it is one of the
/// cgroup's files that show it exists.
fn read_v1_cpu(
    reader: &Reader,
    cpu: &Path,
    cpuacct: Option<&Path>,
    rel: &str,
    scratch: &mut Scratch,
    stats: &mut CgroupStats,
    note: &mut impl FnMut(Result<bool, ReadError>),
) {
    let Scratch { path, buf } = scratch;
    note((|| {
        let q = reader.read(at(path, cpu, rel, "cpu.cfs_quota_us"))?;
        let period = at(path, cpu, rel, "cpu.cfs_period_us");
        reader.read_into(period, buf)?;
        stats.cpu_max = Some(
            parse_cfs(&q, buf)
                .map_err(|e| ReadError::parse(at(path, cpu, rel, "cpu.cfs_quota_us"), e))?,
        );
        Ok(true)
    })());
    note((|| {
        let stat = at(path, cpu, rel, "cpu.stat");
        reader.read_into(stat, buf)?;
        stats.cpu_stat = Some(parse_cpu_stat(buf).map_err(|e| ReadError::parse(stat, e))?);
        Ok(true)
    })());
    if let Some(acct) = cpuacct {
        note((|| {
            let usage = at(path, acct, rel, "cpuacct.usage");
            if reader.read_optional_into(usage, buf)? {
                let us = parse_cpuacct_usage(buf).map_err(|e| ReadError::parse(usage, e))?;
                if let Some(s) = stats.cpu_stat.as_mut() {
                    s.usage_us = Some(us);
                }
            }
            Ok(false)
        })());
    }
}

/// A cgroup's `cpu.max` and `cpu.stat` on a pure v2 node; outcomes go to `note` as in
/// [`read_v1_cpu`].
fn read_v2_cpu(
    reader: &Reader,
    unified: &Path,
    rel: &str,
    scratch: &mut Scratch,
    stats: &mut CgroupStats,
    note: &mut impl FnMut(Result<bool, ReadError>),
) {
    let Scratch { path, buf } = scratch;
    // Absent when the cpu controller is not enabled for this cgroup.
    note((|| {
        let max = at(path, unified, rel, "cpu.max");
        if reader.read_optional_into(max, buf)? {
            stats.cpu_max = Some(parse_cpu_max(buf).map_err(|e| ReadError::parse(max, e))?);
        }
        Ok(false)
    })());
    note((|| {
        let stat = at(path, unified, rel, "cpu.stat");
        reader.read_into(stat, buf)?;
        stats.cpu_stat = Some(parse_cpu_stat(buf).map_err(|e| ReadError::parse(stat, e))?);
        Ok(true)
    })());
}

/// A hybrid node's usage from the unified `cpu.stat`, into the v1 `cpu.stat` read before.
fn read_unified_usage(
    reader: &Reader,
    unified: &Path,
    rel: &str,
    scratch: &mut Scratch,
    stats: &mut CgroupStats,
    note: &mut impl FnMut(Result<bool, ReadError>),
) {
    let Scratch { path, buf } = scratch;
    note((|| {
        let stat = at(path, unified, rel, "cpu.stat");
        if reader.read_optional_into(stat, buf)? {
            let v2 = parse_cpu_stat(buf).map_err(|e| ReadError::parse(stat, e))?;
            if let Some(s) = stats.cpu_stat.as_mut() {
                s.usage_us = v2.usage_us;
            }
        }
        Ok(false)
    })());
}

/// A cgroup's `{cpu,memory,io}.pressure` on the unified hierarchy, each when there.
fn read_pressure(
    reader: &Reader,
    unified: &Path,
    rel: &str,
    scratch: &mut Scratch,
    pressure: &mut CgroupPressure,
    note: &mut impl FnMut(Result<bool, ReadError>),
) {
    let Scratch { path, buf } = scratch;
    for (file, slot) in [
        ("cpu.pressure", &mut pressure.cpu),
        ("memory.pressure", &mut pressure.memory),
        ("io.pressure", &mut pressure.io),
    ] {
        let path = at(path, unified, rel, file);
        let r = match reader.read_optional_into(path, buf) {
            Ok(true) => match psi::parse(buf) {
                Ok(p) => {
                    *slot = Some(p);
                    Ok(true)
                }
                Err(e) => Err(ReadError::parse(path, e)),
            },
            // The hybrid unified tree may lack a cgroup the v1 tree has: no pressure.
            Ok(false) => Ok(false),
            // PSI switched off: the files exist and reads fail with EOPNOTSUPP.
            Err(ReadError::Io { source, .. }) if source.raw_os_error() == Some(EOPNOTSUPP) => {
                Ok(false)
            }
            Err(e) => Err(e),
        };
        note(r);
    }
}

// ---- its series ----

/// The labels of one cgroup's series, borrowed from the snapshot: nothing is copied per
/// cgroup, nor per series.
pub struct Labels<'s> {
    pairs: Vec<(&'static str, &'s str)>,
}

impl<'s> Labels<'s> {
    pub fn of(snap: &'s Snapshot, path: &'s str, g: &'s CgroupStats) -> Labels<'s> {
        let mut pairs = Vec::with_capacity(6);
        match &g.workload {
            Workload::Pod { uid, qos } | Workload::Container { uid, qos, .. } => {
                if let Some(p) = snap.pod(uid) {
                    pairs.push(("namespace", p.namespace.as_str()));
                    pairs.push(("pod", p.name.as_str()));
                }
                pairs.push(("pod_uid", uid.as_str()));
                pairs.push(("qos", qos.as_str()));
                if let Workload::Container { id, .. } = &g.workload {
                    if let Some(name) = snap.pod(uid).and_then(|p| p.containers.get(id)) {
                        pairs.push(("container", name.as_str()));
                    }
                    pairs.push(("container_id", id.as_str()));
                }
            }
            Workload::Service { unit } => pairs.push(("unit", unit.as_str())),
            Workload::Other => pairs.push(("cgroup", path)),
        }
        Labels { pairs }
    }

    pub fn get(&self) -> &[(&str, &str)] {
        &self.pairs
    }
}

/// Per-cgroup CPU quota, throttling and pressure, with kubelet's label names (`namespace`,
/// `pod`, `container`) plus `pod_uid`, `qos` and `container_id`; systemd services carry
/// `unit`. One set per pod by default (containers are opt-in), and only the resources the
/// kernel reports.
///
/// Then the pressure detector's verdicts, which are about these cgroups and the node.
fn render(e: &mut Encoder, ctx: &mut Render<'_>) {
    series(e, ctx.snapshot);
    verdicts(e, ctx.snapshot, ctx.pressure);
}

fn series(e: &mut Encoder, snap: &Snapshot) {
    let Some(c) = snap.get::<Cgroups>() else {
        return;
    };
    let groups: Vec<(Labels, &CgroupStats)> = c
        .groups
        .iter()
        .map(|(path, g)| (Labels::of(snap, path, g), g))
        .collect();
    e.family(
        "nodemedic_cgroups_watched",
        Kind::Gauge,
        "Cgroups nodemedic reads (pods, and containers and services when enabled).",
    );
    e.sample(&[], groups.len() as f64);
    e.family(
        "nodemedic_cgroup_host_writable_mounts",
        Kind::Gauge,
        "Mounts of the host's cgroup tree that nodemedic's container can write (0 on the node itself and on a safe install): through one a process in the pod could rewrite any pod's limits; mount each hierarchy read-only (the chart's cgroupV1Hierarchies).",
    );
    e.sample(&[], c.mounts.writable.len() as f64);

    cpu_families(e, &groups);
    pressure_families(e, &groups);
}

/// The cgroups' CFS quota, CPU use and throttling.
fn cpu_families(e: &mut Encoder, groups: &[(Labels, &CgroupStats)]) {
    cgroup_family(
        e,
        groups,
        "nodemedic_cgroup_cpu_quota_cores",
        Kind::Gauge,
        "The cgroup's CFS CPU quota in CPUs (cpu.max or cpu.cfs_quota_us / period); absent when unlimited (max).",
        &|g| g.cpu_max.and_then(|m| m.cores()),
    );
    cgroup_family(
        e,
        groups,
        "nodemedic_cgroup_cpu_period_seconds",
        Kind::Gauge,
        "The cgroup's CFS period: the quota is enforced per period.",
        &|g| g.cpu_max.map(|m| m.period_us as f64 / 1e6),
    );
    cgroup_family(
        e,
        groups,
        "nodemedic_cgroup_cpu_usage_seconds",
        Kind::Counter,
        "CPU time used by the cgroup's tasks (cpu.stat usage_usec, or v1 cpuacct.usage).",
        &|g| g.cpu_stat.and_then(|s| s.usage_us).map(|u| u as f64 / 1e6),
    );
    cgroup_family(
        e,
        groups,
        "nodemedic_cgroup_cpu_periods",
        Kind::Counter,
        "CFS enforcement periods in which the cgroup had runnable tasks (cpu.stat nr_periods).",
        &|g| {
            g.cpu_stat
                .filter(|_| g.cpu_max.is_some_and(|m| m.quota_us.is_some()))
                .map(|s| s.nr_periods as f64)
        },
    );
    cgroup_family(
        e,
        groups,
        "nodemedic_cgroup_cpu_throttled_periods",
        Kind::Counter,
        "Periods in which the cgroup used up its quota and was throttled (cpu.stat nr_throttled).",
        &|g| {
            g.cpu_stat
                .filter(|_| g.cpu_max.is_some_and(|m| m.quota_us.is_some()))
                .map(|s| s.nr_throttled as f64)
        },
    );
    cgroup_family(
        e,
        groups,
        "nodemedic_cgroup_cpu_throttled_seconds",
        Kind::Counter,
        "Time the cgroup's tasks were held off the CPU by its quota (cpu.stat throttled_usec / throttled_time).",
        &|g| g.cpu_stat.filter(|_| g.cpu_max.is_some_and(|m| m.quota_us.is_some())).map(|s| s.throttled_us as f64 / 1e6),
    );
    if groups
        .iter()
        .any(|(_, g)| g.cpu_stat.is_some_and(|s| s.nr_bursts.is_some()))
    {
        cgroup_family(
            e,
            groups,
            "nodemedic_cgroup_cpu_bursts",
            Kind::Counter,
            "Periods in which the cgroup used burst capacity beyond its quota (cpu.stat nr_bursts, Linux 5.14+).",
            &|g| g.cpu_stat.and_then(|s| s.nr_bursts).map(|n| n as f64),
        );
        cgroup_family(
            e,
            groups,
            "nodemedic_cgroup_cpu_burst_seconds",
            Kind::Counter,
            "CPU time used beyond the quota from burst capacity (cpu.stat burst_usec).",
            &|g| g.cpu_stat.and_then(|s| s.burst_us).map(|n| n as f64 / 1e6),
        );
    }
}

/// The cgroups' PSI, per resource.
fn pressure_families(e: &mut Encoder, groups: &[(Labels, &CgroupStats)]) {
    for resource in [PsiResource::Cpu, PsiResource::Memory, PsiResource::Io] {
        let psi = |g: &CgroupStats| -> Option<Psi> { g.pressure.get(resource).copied() };
        cgroup_family(
            e,
            groups,
            &format!("nodemedic_cgroup_pressure_{resource}_waiting_seconds"),
            Kind::Counter,
            &format!(
                "Time in which at least one of the cgroup's tasks waited for {} (PSI some).",
                what(resource)
            ),
            &|g| psi(g).and_then(|p| p.some).map(|l| l.total_seconds()),
        );
        cgroup_family(
            e,
            groups,
            &format!("nodemedic_cgroup_pressure_{resource}_stalled_seconds"),
            Kind::Counter,
            &format!("Time in which all of the cgroup's non-idle tasks waited for {} at once (PSI full).", what(resource)),
            &|g| psi(g).and_then(|p| p.full).map(|l| l.total_seconds()),
        );
    }
}

/// A family with a sample for each cgroup that has a `value`; none without any.
fn cgroup_family(
    e: &mut Encoder,
    groups: &[(Labels, &CgroupStats)],
    name: &str,
    kind: Kind,
    help: &str,
    value: &dyn Fn(&CgroupStats) -> Option<f64>,
) {
    let values: Vec<(&Labels, f64)> = groups
        .iter()
        .filter_map(|(l, g)| Some((l, value(g)?)))
        .collect();
    if values.is_empty() {
        return;
    }
    e.family(name, kind, help);
    for (l, v) in values {
        e.sample(l.get(), v);
    }
}

/// The pressure detector's verdicts: the node saturated, and each cgroup quota-bound or
/// starved, labelled as the cgroup's own series.
fn verdicts(e: &mut Encoder, snap: &Snapshot, verdict: Option<&PressureVerdict>) {
    let Some(v) = verdict else {
        return;
    };
    e.family(
        "nodemedic_node_pressure_saturated",
        Kind::Gauge,
        "Whether the node is judged saturated (node PSI above the thresholds, CPU pressure only with busy CPUs, with hysteresis).",
    );
    e.sample(&[], f64::from(u8::from(v.node_saturated)));
    if let Some(busy) = v.node_cpu_busy {
        e.family(
            "nodemedic_node_cpu_busy_ratio",
            Kind::Gauge,
            "Share of the online CPUs' time spent running tasks between the last two cgroup readings (the root cgroup's CPU usage): what CPU saturation needs besides CPU pressure.",
        );
        e.sample(&[], busy);
    }
    let cgroups = snap.get::<Cgroups>();
    let labelled: Vec<(Labels, &CgroupRates)> = v
        .cgroups
        .iter()
        .filter_map(|r| {
            let g = cgroups?.groups.get(&r.path)?;
            Some((Labels::of(snap, &r.path, g), r))
        })
        .collect();
    type Pick = fn(&CgroupRates) -> Option<bool>;
    let families: [(&str, &str, Pick); 2] = [
        (
            "nodemedic_cgroup_quota_bound",
            "Whether the cgroup is judged held back by its CPU quota: throttled in many periods while its tasks wait for CPU (with hysteresis).",
            |r| Some(r.quota_bound),
        ),
        (
            "nodemedic_cgroup_starved",
            "Whether the pod or service is judged starved: its tasks wait for CPU or memory above the thresholds (with hysteresis). Containers share their pod's verdict.",
            |r| (!matches!(r.workload, Workload::Container { .. })).then_some(r.starved),
        ),
    ];
    for (name, help, pick) in families {
        e.family(name, Kind::Gauge, help);
        for (l, r) in &labelled {
            if let Some(v) = pick(r) {
                e.sample(l.get(), f64::from(u8::from(v)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn pod(root: &Path, uid: &str) -> PathBuf {
        let d = root.join(format!("kubepods/burstable/pod{uid}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("cpu.max"), "50000 100000\n").unwrap();
        std::fs::write(
            d.join("cpu.stat"),
            "usage_usec 10\nnr_periods 4\nnr_throttled 1\nthrottled_usec 7\n",
        )
        .unwrap();
        std::fs::write(
            d.join("cpu.pressure"),
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=5\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
        )
        .unwrap();
        d
    }

    /// A cgroup v2 root at `tmp/cg`.
    fn v2_root(tmp: &Path) -> PathBuf {
        let root = tmp.join("cg");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("cgroup.controllers"), "cpu memory io\n").unwrap();
        root
    }

    /// A hybrid node: quota and throttling from the v1 `cpu` hierarchy, usage from
    /// `cpuacct` where it is mounted, else from the unified `cpu.stat`, and pressure from the
    /// unified tree. A damaged file is a warning that loses that file alone.
    #[test]
    fn a_hybrid_cgroup_joins_its_v1_and_unified_files() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let rel = "kubepods/pod1111-aaaa";
        let write = |dir: &str, file: &str, text: &str| {
            let d = root.join(dir).join(rel);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join(file), text).unwrap();
        };
        write("cpu", "cpu.cfs_quota_us", "50000\n");
        write("cpu", "cpu.cfs_period_us", "100000\n");
        write(
            "cpu",
            "cpu.stat",
            "nr_periods 4\nnr_throttled 1\nthrottled_time 7000\n",
        );
        std::fs::write(root.join("cpu/cpu.cfs_period_us"), "100000\n").unwrap();
        std::fs::create_dir_all(root.join("unified")).unwrap();
        std::fs::write(root.join("unified/cgroup.controllers"), "").unwrap();
        write("unified", "cpu.stat", "usage_usec 42\n");
        write(
            "unified",
            "cpu.pressure",
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=5\n",
        );
        write("unified", "io.pressure", "some avg10=garbage\n");
        let mounts = discover(root);
        assert_eq!(mounts.cpu.as_deref(), Some(root.join("cpu").as_path()));
        assert_eq!(mounts.cpuacct, None);
        let reader = Reader::new();
        let mut scratch = Scratch {
            path: PathBuf::new(),
            buf: String::new(),
        };
        let read = |scratch: &mut Scratch, warnings: &mut Vec<String>| {
            read_group(&reader, &mounts, rel, Workload::Other, scratch, warnings)
                .unwrap()
                .unwrap()
        };
        let mut warnings = Vec::new();
        let g = read(&mut scratch, &mut warnings);
        assert_eq!(g.cpu_max.and_then(|m| m.cores()), Some(0.5));
        let stat = g.cpu_stat.unwrap();
        assert_eq!((stat.nr_throttled, stat.throttled_us), (1, 7));
        assert_eq!(stat.usage_us, Some(42));
        assert_eq!(g.pressure.cpu.unwrap().some.map(|l| l.total_us), Some(5));
        assert_eq!(g.pressure.memory, None);
        assert_eq!(g.pressure.io, None);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("io.pressure"), "{warnings:?}");

        // With cpuacct mounted, usage is its (nanoseconds), not the unified tree's.
        write("cpuacct", "cpuacct.usage", "9000\n");
        std::fs::write(root.join("cpuacct/cpuacct.usage"), "0\n").unwrap();
        let mounts = discover(root);
        assert!(mounts.cpuacct.is_some());
        let mut warnings = Vec::new();
        let g = read_group(
            &reader,
            &mounts,
            rel,
            Workload::Other,
            &mut scratch,
            &mut warnings,
        )
        .unwrap()
        .unwrap();
        assert_eq!(g.cpu_stat.unwrap().usage_us, Some(9));
    }

    /// A pod deleted between the listing and the reading of its files: a warning naming it,
    /// and every other pod read as usual.
    #[test]
    fn a_cgroup_vanishing_between_listing_and_reading_loses_only_itself() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::write(root.join("cgroup.controllers"), "cpu memory io\n").unwrap();
        pod(root, "1111-aaaa");
        let gone = pod(root, "2222-bbbb");
        pod(root, "3333-cccc");
        let mounts = discover(root);
        assert_eq!(mounts.unified.as_deref(), Some(root));
        let mut found = Vec::new();
        let mut warnings = Vec::new();
        walk(
            root,
            "",
            &CgroupSelection::default(),
            &LsmContext::default(),
            &mut found,
            &mut warnings,
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(found.len(), 3, "{found:?}");
        std::fs::remove_dir_all(&gone).unwrap();
        let reader = Reader::new();
        let groups = read_all(&reader, &mounts, found, &mut warnings);
        assert_eq!(
            groups.keys().collect::<Vec<_>>(),
            [
                "kubepods/burstable/pod1111-aaaa",
                "kubepods/burstable/pod3333-cccc"
            ]
        );
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("kubepods/burstable/pod2222-bbbb vanished"),
            "{warnings:?}"
        );
        let g = &groups["kubepods/burstable/pod1111-aaaa"];
        assert_eq!(g.cpu_max.and_then(|m| m.cores()), Some(0.5));
        assert_eq!(g.cpu_stat.map(|s| s.nr_throttled), Some(1));
        assert_eq!(g.pressure.cpu.unwrap().some.map(|l| l.total_us), Some(5));
    }

    /// A hybrid node's /sys/fs/cgroup bound without the mounts below it (the chart's
    /// default): the hierarchies' mount points are there, empty. The collector fails and says
    /// what to set; a root with nothing at all stays "unavailable".
    #[test]
    fn empty_hierarchy_mount_points_fail_with_what_to_set() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("cg");
        for d in ["cpu,cpuacct", "memory", "unified"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::os::unix::fs::symlink("cpu,cpuacct", root.join("cpu")).unwrap();
        let mut paths = crate::Paths::under(tmp.path());
        paths.cgroupfs = root.clone();
        let mut set = crate::CollectorSet::new(vec![Box::new(CgroupsCollector::new(
            CgroupSelection::default(),
        ))]);
        let (_, runs) = set.sample(&paths, Duration::from_secs(1));
        let e = runs[0].outcome.as_ref().unwrap_err().to_string();
        assert!(
            e.contains("(cpu, cpu,cpuacct, unified)") && e.contains("cgroupV1Hierarchies"),
            "{e}"
        );
        // Something mounted in one of them: not hidden.
        std::fs::write(root.join("unified/cgroup.controllers"), "cpu\n").unwrap();
        assert_eq!(empty_hierarchies(&root), ["cpu", "cpu,cpuacct"]);
        let mut set = crate::CollectorSet::new(vec![Box::new(CgroupsCollector::new(
            CgroupSelection::default(),
        ))]);
        let (s, runs) = set.sample(&paths, Duration::from_secs(2));
        assert!(runs[0].outcome.is_ok(), "{:?}", runs[0].outcome);
        assert!(s.get::<Cgroups>().is_some());
        // Nothing at all under the root: unavailable, not failed.
        let bare = tmp.path().join("bare");
        std::fs::create_dir_all(&bare).unwrap();
        paths.cgroupfs = bare;
        let (_, runs) = set.sample(&paths, Duration::from_secs(3));
        let c = runs[0].outcome.as_ref().unwrap();
        assert!(c
            .unavailable
            .as_deref()
            .is_some_and(|r| r.contains("no cgroup hierarchy")));
    }

    /// With an interval, samples in between carry the last reading (the same `Arc`, its
    /// warnings too) and read no file; a pod created meanwhile appears at the next reading.
    #[test]
    fn an_interval_reads_cgroups_only_when_due() {
        let tmp = tempfile::tempdir().unwrap();
        let root = v2_root(tmp.path());
        let first = pod(&root, "1111-aaaa");
        std::fs::write(first.join("memory.pressure"), "garbage\n").unwrap();
        let mut paths = crate::Paths::under(tmp.path());
        paths.cgroupfs = root.clone();
        let mut set = crate::CollectorSet::new(vec![Box::new(CgroupsCollector::with_interval(
            CgroupSelection::default(),
            Duration::from_secs(15),
        ))]);
        let secs = Duration::from_secs;
        let (a, runs) = set.sample(&paths, secs(100));
        let a = a.shared::<Cgroups>().unwrap();
        assert_eq!(a.groups.len(), 1);
        let warned = |runs: &[crate::CollectorRun]| match &runs[0].outcome {
            Ok(c) => c.warnings.iter().any(|w| w.contains("memory.pressure")),
            Err(e) => panic!("{e}"),
        };
        assert!(warned(&runs));
        pod(&root, "2222-bbbb");
        for at in [105, 110] {
            let (s, runs) = set.sample(&paths, secs(at));
            let s = s.shared::<Cgroups>().unwrap();
            assert!(Arc::ptr_eq(&s, &a), "sample at {at} s repeats the reading");
            assert!(warned(&runs), "with its warnings");
        }
        // 14 s after: within the 10% slack of a 15 s interval, so a reading.
        let (s, _) = set.sample(&paths, secs(114));
        let s = s.shared::<Cgroups>().unwrap();
        assert!(!Arc::ptr_eq(&s, &a));
        assert_eq!(
            s.groups.len(),
            2,
            "the new pod is read: {:?}",
            s.groups.keys()
        );
    }

    /// An unchanged tree is listed once; a pod made or removed in any directory the walk
    /// listed (a QoS slice, the root) is seen at the next reading without a rescan, and so is
    /// a QoS directory made later and a pod in it.
    #[test]
    fn the_walk_is_redone_only_when_a_listed_directory_changes() {
        let tmp = tempfile::tempdir().unwrap();
        let root = v2_root(tmp.path());
        pod(&root, "1111-aaaa");
        let mut paths = crate::Paths::under(tmp.path());
        paths.cgroupfs = root.clone();
        let collector = Arc::new(CgroupsCollector::new(CgroupSelection::default()));
        struct Shared(Arc<CgroupsCollector>);
        impl Collector for Shared {
            fn name(&self) -> crate::CollectorName {
                NAME
            }
            fn collect(
                &self,
                ctx: &Ctx<'_>,
                snap: &mut Snapshot,
            ) -> Result<Collected, CollectError> {
                self.0.collect(ctx, snap)
            }
        }
        let mut set = crate::CollectorSet::new(vec![Box::new(Shared(collector.clone()))]);
        let mut at = 100;
        let mut read = || {
            at += 1;
            let (s, _) = set.sample(&paths, Duration::from_secs(at));
            let walks = collector.walks.load(Ordering::Relaxed);
            let groups: Vec<String> = s.get::<Cgroups>().unwrap().groups.keys().cloned().collect();
            (groups, walks)
        };
        let one = vec!["kubepods/burstable/pod1111-aaaa".to_string()];
        assert_eq!(read(), (one.clone(), 1));
        assert_eq!(read(), (one.clone(), 1), "unchanged: not walked again");
        // A file rewritten in place is no change to the listing.
        std::fs::write(
            root.join("kubepods/burstable/pod1111-aaaa/cpu.max"),
            "max 100000\n",
        )
        .unwrap();
        assert_eq!(read(), (one.clone(), 1));
        let two = pod(&root, "2222-bbbb");
        let (groups, walks) = read();
        assert_eq!((groups.len(), walks), (2, 2), "{groups:?}");
        std::fs::remove_dir_all(&two).unwrap();
        assert_eq!(read(), (one.clone(), 3), "a removed pod is gone");
        let besteffort = root.join("kubepods/besteffort/pod3333-cccc");
        std::fs::create_dir_all(&besteffort).unwrap();
        for f in ["cpu.stat", "cpu.pressure"] {
            std::fs::copy(
                root.join("kubepods/burstable/pod1111-aaaa").join(f),
                besteffort.join(f),
            )
            .unwrap();
        }
        let (groups, walks) = read();
        assert_eq!(walks, 4);
        assert_eq!(
            groups,
            [
                "kubepods/besteffort/pod3333-cccc",
                "kubepods/burstable/pod1111-aaaa"
            ],
            "a new QoS directory, and the pod in it"
        );
        assert_eq!(read().1, 4);
    }
}
