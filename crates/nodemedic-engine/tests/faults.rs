//! Fault injection over the fixture trees: every file kind nodemedic reads, every fault
//! (missing, empty, garbage, truncated mid-number, no final newline, EACCES, vanished after
//! listing), at the first, a middle and the last entry, through the real collectors, the real
//! read layer and the real detectors.
//!
//! For each case three things must hold:
//! 1. nothing outside what depends on the broken file changes (group verdicts, counts, other
//!    collectors' state);
//! 2. a collector names the file (and why) in its warnings or its failure, as `/status` shows
//!    them — except where the fault is a normal kernel state (an optional file missing, a CPU
//!    list that is legitimately empty), which is "no data";
//! 3. the fixture's collapse is still reported when the broken file is not one it depends on.
//!
//! EACCES cannot be made with `chmod 000` as root (root bypasses it): those cases run the
//! engine in a child process (this test binary again) as uid/gid 65534, which the kernel then
//! denies for real.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nodemedic_collect::registry::{self, FileKind as Kind, Impact};
use nodemedic_collect::sources::cgroups::Cgroups;
use nodemedic_collect::sources::interrupts::Interrupts;
use nodemedic_collect::sources::irq_affinity::IrqAffinities;
use nodemedic_collect::sources::irqbalance::IrqbalanceConfig;
use nodemedic_collect::sources::pci::PciDevices;
use nodemedic_collect::sources::pressure::NodePressure;
use nodemedic_collect::sources::softirqs::Softirqs;
use nodemedic_collect::sources::softnet::Softnet;
use nodemedic_collect::sources::topology::Topology;
use nodemedic_collect::sources::DEFAULT_AFFINITY_REFRESH;
use nodemedic_collect::{CollectorState, Paths};
use nodemedic_engine::{Engine, EngineConfig};
use nodemedic_kernel::lsm::{LsmContext, LsmFiles};
use nodemedic_sample::host::HostAccess;
use nodemedic_sample::Sample;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Missing,
    Empty,
    Garbage,
    Truncated,
    NoNewline,
    Eacces,
    /// Gone after the collectors listed (or opened) it: removed between two samples, the
    /// first of which listed it.
    Vanish,
}

const FAULTS: [Fault; 7] = [
    Fault::Missing,
    Fault::Empty,
    Fault::Garbage,
    Fault::Truncated,
    Fault::NoNewline,
    Fault::Eacces,
    Fault::Vanish,
];

const IRQ_SIDE: &str = "8cpu-collapsed";
const PRESSURE_SIDE: &str = "k8s-systemd-v2";

/// Every registered collector's file kinds (`nodemedic_collect::registry::FileKind`).
fn kinds() -> Vec<&'static Kind> {
    registry::declarations()
        .iter()
        .flat_map(|d| d.faults.iter())
        .collect()
}

/// The file kind named `name`: tests pick kinds by name, so that a kind added anywhere in
/// the registry changes no other test.
fn kind(name: &str) -> &'static Kind {
    kinds()
        .into_iter()
        .find(|k| k.name == name)
        .unwrap_or_else(|| panic!("no file kind {name:?} registered"))
}

#[test]
fn file_kinds_have_unique_names() {
    let names: BTreeSet<&str> = kinds().iter().map(|k| k.name).collect();
    assert_eq!(names.len(), kinds().len(), "a kind name used twice");
}

// ---------------------------------------------------------------------------------------------
// Trees

fn copy_fixture(name: &str) -> tempfile::TempDir {
    let dir = nodemedic_testkit::copy_fixture(name);
    // The tree must be readable by the unprivileged child of the EACCES cases.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    if name == IRQ_SIDE {
        // The fixture has no irqbalance config; give it one with a banned CPU that matters.
        let etc = dir.path().join("etc/default");
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(
            etc.join("irqbalance"),
            "# irqbalance\nIRQBALANCE_ONESHOT=0\nIRQBALANCE_BANNED_CPULIST=6-7\nIRQBALANCE_ARGS=\"\"\n",
        )
        .unwrap();
    }
    dir
}

/// Sorts `17` after `4`.
fn natural(a: &str) -> (u64, String) {
    (a.parse().unwrap_or(u64::MAX), a.to_string())
}

fn expand(root: &Path, pattern: &str) -> Vec<PathBuf> {
    let mut found = vec![PathBuf::new()];
    for part in pattern.split('/') {
        let mut next = Vec::new();
        for rel in &found {
            if part == "*" {
                let Ok(entries) = std::fs::read_dir(root.join(rel)) else {
                    continue;
                };
                let mut names: Vec<String> = entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir() || t.is_file()))
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect();
                names.sort_by_key(|n| natural(n));
                next.extend(names.into_iter().map(|n| rel.join(n)));
            } else if root.join(rel).join(part).exists() {
                next.push(rel.join(part));
            }
        }
        found = next;
    }
    found.retain(|p| root.join(p).is_file());
    found
}

/// First, middle and last of a list, without repeats.
fn positions<T: Clone>(all: &[T]) -> Vec<(&'static str, T)> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for (name, i) in [
        ("first", 0),
        ("middle", all.len() / 2),
        ("last", all.len().saturating_sub(1)),
    ] {
        if i < all.len() && seen.insert(i) {
            out.push((name, all[i].clone()));
        }
    }
    out
}

/// Cuts `text` in the middle of the first number of line `line` (0-based, among all lines):
/// lines before it are kept, the rest is lost, as a short read would lose it.
fn truncate_at(text: &str, line: usize) -> String {
    let mut out = String::new();
    for (i, l) in text.split_inclusive('\n').enumerate() {
        if i < line {
            out.push_str(l);
            continue;
        }
        let bytes = l.as_bytes();
        // The first run of at least two digits (or hex digits), cut after its first half.
        let mut start = None;
        for (j, b) in bytes.iter().enumerate() {
            match (start, b.is_ascii_hexdigit()) {
                (None, true) => start = Some(j),
                (Some(s), false) if j - s >= 2 => {
                    out.push_str(&l[..s + (j - s) / 2]);
                    return out;
                }
                (Some(_), false) => start = None,
                _ => {}
            }
        }
        match start {
            Some(s) if l.trim_end().len() - s >= 2 => {
                out.push_str(&l[..s + (l.trim_end().len() - s) / 2]);
            }
            _ => out.push_str(l.trim_end()),
        }
        return out;
    }
    out
}

/// The data lines of a table (after a header row when the file has one).
fn data_lines(kind: &Kind, text: &str) -> Vec<usize> {
    let header = matches!(kind.name, "interrupts" | "softirqs");
    text.lines()
        .enumerate()
        .filter(|(i, l)| {
            let blank = l.trim().is_empty() || l.starts_with('#');
            let is_header = header && *i == 0;
            !blank && !is_header
        })
        .map(|(i, _)| i)
        .collect()
}

/// One injected fault, undone on drop.
struct Injected {
    path: PathBuf,
    saved: Option<(Vec<u8>, u32)>,
    moved: Option<(PathBuf, PathBuf)>,
}

impl Drop for Injected {
    fn drop(&mut self) {
        if let Some((from, to)) = &self.moved {
            std::fs::rename(to, from).unwrap();
        }
        if let Some((bytes, mode)) = &self.saved {
            std::fs::write(&self.path, bytes).unwrap();
            std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(*mode)).unwrap();
        }
    }
}

/// The entry that vanishes: the IRQ's, device's, node's or cgroup's directory for files in
/// one; the file itself for top-level files.
fn vanishing_unit(kind: &Kind, rel: &Path) -> PathBuf {
    if kind.pattern.contains('*') && !kind.pattern.ends_with('*') {
        rel.parent().unwrap().to_path_buf()
    } else {
        rel.to_path_buf()
    }
}

fn inject(
    root: &Path,
    stash: &Path,
    kind: &Kind,
    rel: &Path,
    fault: Fault,
    pos: usize,
) -> Injected {
    let path = root.join(rel);
    let bytes = std::fs::read(&path).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let mut inj = Injected {
        path: path.clone(),
        saved: Some((bytes, mode)),
        moved: None,
    };
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let target_line = if kind.table {
        let data = data_lines(kind, &text);
        positions(&data)
            .get(pos)
            .map(|(_, l)| *l)
            .unwrap_or(lines.len().saturating_sub(1))
    } else {
        0
    };
    match fault {
        Fault::Missing => std::fs::remove_file(&path).unwrap(),
        Fault::Empty => std::fs::write(&path, "").unwrap(),
        Fault::Garbage => {
            let mut out = String::new();
            for (i, l) in lines.iter().enumerate() {
                out.push_str(if i == target_line {
                    "zz,qq \u{fffd}\u{1}!\n"
                } else {
                    l
                });
            }
            std::fs::write(&path, out).unwrap();
        }
        Fault::Truncated => std::fs::write(&path, truncate_at(&text, target_line)).unwrap(),
        Fault::NoNewline => std::fs::write(&path, text.trim_end_matches('\n')).unwrap(),
        Fault::Eacces => {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).unwrap()
        }
        Fault::Vanish => {
            // Unlinked, as the kernel removes an entry: a rename would leave the read layer's
            // kept fds reading a file that still exists elsewhere.
            let unit = vanishing_unit(kind, rel);
            if unit == rel {
                std::fs::remove_file(&path).unwrap();
            } else {
                let to = stash.join(unit.to_string_lossy().replace('/', "_"));
                let ok = std::process::Command::new("cp")
                    .arg("-a")
                    .arg(root.join(&unit))
                    .arg(&to)
                    .status()
                    .unwrap()
                    .success();
                assert!(ok);
                std::fs::remove_dir_all(root.join(&unit)).unwrap();
                inj.moved = Some((root.join(&unit), to));
                inj.saved = None;
            }
        }
    }
    inj
}

// ---------------------------------------------------------------------------------------------
// Running and summarizing

/// An engine on `root`, rescanning every `rescan`, every IRQ's affinity re-read within
/// `affinity_refresh` (or when its counts say it moved).
fn engine(root: &Path, rescan: Duration, affinity_refresh: Duration) -> Engine {
    engine_under(root, rescan, affinity_refresh, LsmContext::default())
}

/// [`engine`] for a process whose LSM labels are `lsm`.
fn engine_under(
    root: &Path,
    rescan: Duration,
    affinity_refresh: Duration,
    lsm: LsmContext,
) -> Engine {
    let mut config = EngineConfig {
        paths: Paths::under(root.to_path_buf()),
        rescan_interval: rescan,
        affinity_refresh,
        host: std::sync::Arc::new(HostAccess {
            lsm,
            ..Default::default()
        }),
        ..Default::default()
    };
    config.collapse.raise_after = 1;
    config.collapse.clear_after = 1;
    config.hurting.raise_after = 1;
    config.hurting.clear_after = 1;
    config.cgroups.containers = true;
    config.cgroups.services = true;
    Engine::new(config)
}

type Summary = BTreeMap<String, String>;

fn summarize(s: &Sample) -> Summary {
    let mut m = Summary::new();
    for v in &s.verdicts {
        m.insert(
            format!("group/{}", v.group.name),
            format!(
                "collapsed={} hurting={} effective={} eligible={} irqs={:?} other={:?} pci={:?}",
                v.collapsed,
                v.hurting,
                v.group.effective_cpus,
                v.group.eligible_cpus,
                v.group.irqs,
                v.group.other_irqs,
                v.group.pci
            ),
        );
    }
    for c in &s.collectors {
        let (state, reason) = match &c.state {
            CollectorState::Active => ("ok", String::new()),
            CollectorState::Disabled { reason } => ("disabled", reason.clone()),
            CollectorState::Unavailable { reason } => ("unavailable", reason.clone()),
            CollectorState::Failed { reason } => ("failed", reason.clone()),
        };
        m.insert(format!("collector/{}/state", c.name), state.into());
        let mut said = c.warnings.clone();
        said.push(reason);
        m.insert(format!("collector/{}/said", c.name), said.join("\n"));
    }
    let snap = &s.snapshot;
    if let Some(i) = snap.get::<Interrupts>() {
        m.insert(
            "count/irqs".into(),
            format!("{} {}", i.irqs.len(), i.arch.len()),
        );
    }
    m.insert(
        "count/affinity".into(),
        format!(
            "{:?}",
            snap.get::<IrqAffinities>()
                .into_iter()
                .flat_map(|a| a.iter())
                .collect::<Vec<_>>()
        ),
    );
    m.insert(
        "count/pci".into(),
        format!(
            "{:?}",
            snap.get::<PciDevices>()
                .map(|p| &p.0)
                .unwrap_or(&BTreeMap::new())
        ),
    );
    if let Some(t) = snap.get::<Topology>() {
        m.insert("count/topology".into(), format!("{t:?}"));
    }
    if let Some(s) = snap.get::<Softirqs>() {
        m.insert("count/softirqs".into(), s.rows.len().to_string());
    }
    if let Some(s) = snap.get::<Softnet>() {
        m.insert("count/softnet".into(), format!("{:?}", s.0));
    }
    if let Some(b) = snap.get::<IrqbalanceConfig>() {
        m.insert("count/banned".into(), format!("{b:?}"));
    }
    for (res, p) in snap
        .get::<NodePressure>()
        .into_iter()
        .flat_map(|p| p.iter())
    {
        m.insert(format!("pressure/{res}"), format!("{p:?}"));
    }
    if let Some(c) = snap.get::<Cgroups>() {
        m.insert("count/cgroups".into(), c.groups.len().to_string());
        for (path, stats) in &c.groups {
            m.insert(format!("cgroup/{path}"), format!("{stats:?}"));
        }
    }
    // What each collector that renders its own series renders: a collector's data, whatever
    // its type in the snapshot, without a line here per collector.
    let options = registry::MetricsOptions::default();
    let mut scratch = registry::Scratch::default();
    let mut ctx = registry::Render {
        snapshot: snap,
        options: &options,
        groups: &[],
        pressure: None,
        scratch: &mut scratch,
    };
    for d in registry::declarations() {
        if let Some(render) = d.render {
            let mut e = nodemedic_export::Encoder::new(nodemedic_export::Format::Text);
            render(&mut e, &mut ctx);
            m.insert(format!("series/{}", d.name), e.finish());
        }
    }
    m
}

/// Two samples; `between` runs after the first. Returns the second's summary.
fn run(root: &Path, rescan: Duration, between: impl FnOnce()) -> Summary {
    run_refreshing(root, rescan, DEFAULT_AFFINITY_REFRESH, between)
}

/// [`run`] with every IRQ's affinity re-read within `affinity_refresh`.
fn run_refreshing(
    root: &Path,
    rescan: Duration,
    affinity_refresh: Duration,
    between: impl FnOnce(),
) -> Summary {
    let mut e = engine(root, rescan, affinity_refresh);
    e.sample();
    between();
    summarize(&e.sample())
}

/// The same as [`run`] with nothing between the samples, in a child process as uid 65534.
fn run_unprivileged(root: &Path) -> Summary {
    run_unprivileged_under(root, LsmFiles::default())
}

/// The LSM attribute files a child is given, in its environment.
const CHILD_LSM_FILES: [&str; 3] = [
    "NODEMEDIC_FAULT_CHILD_APPARMOR_CURRENT",
    "NODEMEDIC_FAULT_CHILD_ATTR_CURRENT",
    "NODEMEDIC_FAULT_CHILD_SELINUX_ENFORCE",
];

/// [`run_unprivileged`] in a child whose LSM context is made of `lsm` (this machine has no
/// LSM: the context is injected, the refusal is the kernel's).
fn run_unprivileged_under(root: &Path, lsm: LsmFiles<'_>) -> Summary {
    let mut child = std::process::Command::new(std::env::current_exe().unwrap());
    for (name, value) in
        CHILD_LSM_FILES
            .iter()
            .zip([lsm.apparmor_current, lsm.current, lsm.selinux_enforce])
    {
        if let Some(v) = value {
            child.env(name, v);
        }
    }
    let out = child
        .args(["--ignored", "--exact", "unprivileged_child", "--nocapture"])
        .env("NODEMEDIC_FAULT_CHILD_ROOT", root)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap_or_else(|e| {
            panic!("the EACCES cases run a child as uid 65534, which needs root: {e}")
        });
    let stdout = String::from_utf8_lossy(&out.stdout);
    let body = stdout
        .split_once("<<<SUMMARY\n")
        .and_then(|(_, rest)| rest.split_once("SUMMARY>>>"))
        .map(|(b, _)| b)
        .unwrap_or_else(|| {
            panic!(
                "child failed: {}\n{stdout}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    serde_json::from_str(body).unwrap()
}

/// Not a test: the body of [`run_unprivileged`]'s child process.
#[test]
#[ignore = "run by the fault harness as an unprivileged child"]
fn unprivileged_child() {
    let root = std::env::var("NODEMEDIC_FAULT_CHILD_ROOT").expect("run by the harness");
    let [apparmor_current, current, selinux_enforce] =
        CHILD_LSM_FILES.map(|name| std::env::var(name).ok());
    let lsm = LsmContext::from_files(&LsmFiles {
        apparmor_current: apparmor_current.as_deref(),
        current: current.as_deref(),
        lsm: None,
        selinux_enforce: selinux_enforce.as_deref(),
    });
    let mut e = engine_under(
        Path::new(&root),
        Duration::ZERO,
        DEFAULT_AFFINITY_REFRESH,
        lsm,
    );
    e.sample();
    let summary = summarize(&e.sample());
    println!(
        "<<<SUMMARY\n{}SUMMARY>>>",
        serde_json::to_string(&summary).unwrap()
    );
}

/// A refused read names the security module confining the process, with its profile or
/// label, and changes nothing else (issue 52, point 5): the EACCES is the kernel's (a child
/// as uid 65534 over files it cannot read), the LSM context is injected (this machine has
/// none). A collector that fails (softirqs) and one that warns (irq_affinity) say it in full;
/// every verdict, count and state is the plain EACCES run's.
#[test]
fn a_refused_read_names_the_lsm_confining_the_process() {
    let dir = copy_fixture(IRQ_SIDE);
    let root = dir.path();
    let softirqs = root.join("proc/softirqs");
    let irq = expand(root, "proc/irq/*/smp_affinity")
        .into_iter()
        .next()
        .map(|rel| root.join(rel))
        .unwrap();
    for p in [&softirqs, &irq] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o000)).unwrap();
    }
    let plain = run_unprivileged(root);
    let said = |s: &Summary, c: &str| s[&format!("collector/{c}/said")].clone();
    let line = |p: &Path, words: &str| format!("{}: {words}", p.display());
    let unconfined = "permission denied (nodemedic needs root or CAP_SYS_ADMIN to read it)";
    assert!(
        said(&plain, "softirqs").contains(&line(&softirqs, unconfined)),
        "{plain:?}"
    );
    assert!(
        said(&plain, "irq_affinity").contains(&line(&irq, unconfined)),
        "{plain:?}"
    );
    assert_eq!(plain["collector/softirqs/state"], "failed");
    let apparmor = "read denied by AppArmor (profile cri-containerd.apparmor.d, enforce mode)";
    let selinux = "read denied by SELinux (label system_u:system_r:container_t:s0:c12,c34)";
    for (files, words) in [
        (
            LsmFiles {
                apparmor_current: Some("cri-containerd.apparmor.d (enforce)\n"),
                ..Default::default()
            },
            apparmor,
        ),
        (
            LsmFiles {
                // Without SELinux's final NUL, which an environment cannot carry (the
                // kernel crate's tests read it with one).
                current: Some("system_u:system_r:container_t:s0:c12,c34"),
                selinux_enforce: Some("1\n"),
                ..Default::default()
            },
            selinux,
        ),
    ] {
        let got = run_unprivileged_under(root, files);
        assert_eq!(said(&got, "softirqs"), line(&softirqs, words), "{got:?}");
        assert!(
            said(&got, "irq_affinity").contains(&line(&irq, words)),
            "{got:?}"
        );
        for (key, want) in &plain {
            let have = &got[key];
            if key.ends_with("/said") {
                assert_eq!(&have.replace(words, unconfined), want, "{key}");
            } else {
                assert_eq!(have, want, "{key} changed under {words}");
            }
        }
        assert_eq!(got.len(), plain.len());
    }
    // Complain mode and unconfined name nothing.
    for text in ["cri-containerd.apparmor.d (complain)\n", "unconfined\n"] {
        let got = run_unprivileged_under(
            root,
            LsmFiles {
                apparmor_current: Some(text),
                ..Default::default()
            },
        );
        assert_eq!(got, plain, "{text:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Judging

fn allowed(kind: &Kind, key: &str, groups_hit: &BTreeSet<String>) -> bool {
    if kind.may_change.iter().any(|p| key.starts_with(p)) {
        return true;
    }
    if let Some(g) = key.strip_prefix("group/") {
        return match kind.impact {
            Impact::AllGroups => true,
            Impact::NoGroup => false,
            Impact::Irq | Impact::Pci => groups_hit.contains(g),
        };
    }
    false
}

/// Groups that hold the IRQ or PCI device named by `rel`.
fn groups_hit(kind: &Kind, rel: &Path, base: &Summary) -> BTreeSet<String> {
    let comps: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let mut hit = BTreeSet::new();
    match kind.impact {
        Impact::Irq => {
            let irq: u32 = comps[2].parse().unwrap();
            for (k, v) in base {
                if let Some(g) = k.strip_prefix("group/") {
                    let holds = |field: &str| {
                        v.split(field)
                            .nth(1)
                            .and_then(|s| s.split(']').next())
                            .is_some_and(|list| {
                                list.trim_start_matches('[')
                                    .split(", ")
                                    .any(|n| n.parse() == Ok(irq))
                            })
                    };
                    if holds("irqs=") || holds("other=") {
                        hit.insert(g.to_string());
                    }
                }
            }
        }
        Impact::Pci => {
            let addr = format!("pci=Some({:?})", comps[4]);
            for (k, v) in base {
                if let Some(g) = k.strip_prefix("group/") {
                    if v.contains(&addr) {
                        hit.insert(g.to_string());
                    }
                }
            }
        }
        _ => {}
    }
    hit
}

fn expects_named(kind: &Kind, fault: Fault) -> bool {
    match fault {
        Fault::Missing => !kind.optional,
        Fault::Empty => !kind.empty_ok,
        // A configuration file an administrator edits may lack its final newline.
        Fault::NoNewline => !kind.pattern.starts_with("etc/"),
        // A directory that vanished with its IRQ/device/cgroup is "no data" unless the
        // collector listed it first (the IRQ directories are listed at rescans).
        Fault::Vanish => kind.pattern.starts_with("proc/irq/") || !kind.optional,
        _ => true,
    }
}

#[test]
fn every_file_kind_every_fault_every_position() {
    let mut failures = Vec::new();
    let mut cases = 0;
    // Every tree a kind names, not a list of our own: a kind on another tree runs too.
    let trees: BTreeSet<&str> = kinds().iter().map(|k| k.tree).collect();
    for tree in trees {
        let dir = copy_fixture(tree);
        let root = dir.path();
        let stash = tempfile::tempdir().unwrap();
        let base = run(root, Duration::from_secs(3600), || {});
        let base_unpriv = run_unprivileged(root);
        if tree == IRQ_SIDE {
            assert!(
                base.iter()
                    .any(|(k, v)| k.starts_with("group/") && v.starts_with("collapsed=true")),
                "the fixture shows a collapse"
            );
        }
        for kind in kinds().into_iter().filter(|k| k.tree == tree) {
            let files = expand(root, kind.pattern);
            assert!(
                !files.is_empty(),
                "{}: no file matches {}",
                kind.name,
                kind.pattern
            );
            let single = files.len() == 1;
            let by_file = positions(&files);
            for fault in FAULTS {
                // Position: which entry for per-entry kinds; which line for a single table.
                let targets: Vec<(&str, PathBuf, usize)> = if single && kind.table {
                    let text = std::fs::read_to_string(root.join(&files[0])).unwrap();
                    positions(&data_lines(kind, &text))
                        .into_iter()
                        .enumerate()
                        .map(|(i, (name, _))| (name, files[0].clone(), i))
                        .collect()
                } else {
                    by_file.iter().map(|(n, f)| (*n, f.clone(), 2)).collect()
                };
                for (pos_name, rel, pos) in targets {
                    cases += 1;
                    let label = format!(
                        "{} {:?} at {pos_name} ({})",
                        kind.name,
                        fault,
                        rel.display()
                    );
                    let (got, reference) = match fault {
                        Fault::Eacces => {
                            let _inj = inject(root, stash.path(), kind, &rel, fault, pos);
                            (run_unprivileged(root), &base_unpriv)
                        }
                        Fault::Vanish => {
                            let mut inj = None;
                            // An IRQ's directory vanishes here while its row and counts
                            // in /proc/interrupts stay, which a kernel never shows (freeing
                            // an IRQ removes both, and the vanished row has its directory
                            // read: tests/rescan.rs). So this reads every IRQ every sample.
                            let refresh = if kind.pattern.starts_with("proc/irq/") {
                                Duration::ZERO
                            } else {
                                DEFAULT_AFFINITY_REFRESH
                            };
                            let got =
                                run_refreshing(root, Duration::from_secs(3600), refresh, || {
                                    inj = Some(inject(root, stash.path(), kind, &rel, fault, pos));
                                });
                            drop(inj);
                            (got, &base)
                        }
                        _ => {
                            let _inj = inject(root, stash.path(), kind, &rel, fault, pos);
                            (run(root, Duration::from_secs(3600), || {}), &base)
                        }
                    };
                    judge(kind, fault, &rel, reference, &got, &label, &mut failures);
                }
            }
        }
    }
    eprintln!("{cases} fault cases");
    assert!(
        failures.is_empty(),
        "{} of {cases} fault cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn judge(
    kind: &Kind,
    fault: Fault,
    rel: &Path,
    base: &Summary,
    got: &Summary,
    label: &str,
    failures: &mut Vec<String>,
) {
    let hit = groups_hit(kind, rel, base);
    // 1. Nothing outside the broken file changes.
    let keys: BTreeSet<&String> = base.keys().chain(got.keys()).collect();
    for key in keys {
        if key.ends_with("/said") {
            continue;
        }
        let (a, b) = (base.get(key), got.get(key));
        if a != b && !allowed(kind, key, &hit) {
            failures.push(format!(
                "{label}: {key} changed:\n    before: {a:?}\n    after:  {b:?}"
            ));
        }
    }
    // 2. The file (or for a vanished directory, the directory) is named with a reason.
    if expects_named(kind, fault) {
        let unit = if fault == Fault::Vanish {
            vanishing_unit(kind, rel)
        } else {
            rel.to_path_buf()
        };
        let needle = unit.to_string_lossy().into_owned();
        let said: Vec<&String> = got
            .iter()
            .filter(|(k, _)| k.ends_with("/said"))
            .map(|(_, v)| v)
            .collect();
        let named = said.iter().flat_map(|s| s.lines()).any(|l| {
            l.contains(&needle)
                && l.len() > needle.len() + 8
                && (fault != Fault::Eacces || l.contains("permission denied"))
        });
        if !named {
            failures.push(format!(
                "{label}: no collector names {needle}; they said: {:?}",
                said.iter().filter(|s| !s.is_empty()).collect::<Vec<_>>()
            ));
        }
    }
    // 3. A collapse that does not depend on the broken file is still reported.
    for (key, v) in base {
        if key.starts_with("group/")
            && v.starts_with("collapsed=true")
            && !allowed(kind, key, &hit)
            && !got
                .get(key)
                .is_some_and(|g| g.starts_with("collapsed=true"))
        {
            failures.push(format!(
                "{label}: the collapse of {key} is no longer reported"
            ));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Real races: an entry removed and recreated while the collectors walk

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), &dst).unwrap();
        }
    }
}

/// A thread removes and recreates `unit` (a directory) as fast as it can while the engine
/// samples, rescanning every sample so that listing and reading race for real. Whatever the
/// interleaving, no collector may fail, and nothing outside the entry may change.
fn race(tree: &str, unit: &str, depends: impl Fn(&str) -> bool) {
    let dir = copy_fixture(tree);
    let root = dir.path().to_path_buf();
    let base = run(&root, Duration::ZERO, || {});
    let saved = tempfile::tempdir().unwrap();
    let src = saved.path().join("unit");
    copy_tree(&root.join(unit), &src);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let racer = {
        let (stop, target) = (stop.clone(), root.join(unit));
        std::thread::spawn(move || {
            let mut flips = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::fs::remove_dir_all(&target).unwrap();
                std::thread::sleep(Duration::from_micros(300));
                copy_tree(&src, &target);
                std::thread::sleep(Duration::from_micros(300));
                flips += 1;
            }
            flips
        })
    };
    let mut e = engine(&root, Duration::ZERO, DEFAULT_AFFINITY_REFRESH);
    let mut problems = Vec::new();
    for _ in 0..300 {
        let got = summarize(&e.sample());
        for (key, want) in &base {
            if key.ends_with("/said") || depends(key) {
                continue;
            }
            if got.get(key) != Some(want) {
                problems.push(format!("{key}: {want:?} -> {:?}", got.get(key)));
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let flips = racer.join().unwrap();
    problems.dedup();
    assert!(
        problems.is_empty(),
        "{unit} racing ({flips} removals): {}",
        problems.join("\n")
    );
    assert!(flips > 10, "the racer ran ({flips} removals)");
}

#[test]
fn an_irq_directory_racing_the_walk_costs_only_its_irq() {
    // The collapsed group's middle queue IRQ: only that group may change.
    let dir = copy_fixture(IRQ_SIDE);
    let base = run(dir.path(), Duration::ZERO, || {});
    let (_, collapsed) = base
        .iter()
        .find(|(k, v)| k.starts_with("group/") && v.starts_with("collapsed=true"))
        .unwrap();
    let irqs: Vec<u32> = collapsed
        .split("irqs=[")
        .nth(1)
        .and_then(|s| s.split(']').next())
        .unwrap()
        .split(", ")
        .map(|n| n.parse().unwrap())
        .collect();
    let irq = irqs[irqs.len() / 2];
    let unit = format!("proc/irq/{irq}");
    let hit = groups_hit(
        kind("smp_affinity"),
        &Path::new(&unit).join("smp_affinity"),
        &base,
    );
    assert!(!hit.is_empty());
    race(IRQ_SIDE, &unit, |key| {
        key.starts_with("collector/irq_affinity")
            || key == "count/affinity"
            // Its series; every other IRQ's affinity is checked unchanged in count/affinity.
            || key == "series/interrupts"
            || key.strip_prefix("group/").is_some_and(|g| hit.contains(g))
    });
}

#[test]
fn a_cgroup_racing_the_walk_costs_only_that_cgroup() {
    let pod = "sys/fs/cgroup/kubepods.slice/kubepods-pod8f14e45f_ceea_467f_a0e6_4f1a2b3c4d5e.slice";
    race(PRESSURE_SIDE, pod, |key| {
        key.starts_with("collector/cgroups")
            || key == "count/cgroups"
            // Its series; every other cgroup's data is checked unchanged under `cgroup/`.
            || key == "series/cgroups"
            || key.starts_with("cgroup/kubepods.slice/kubepods-pod8f14e45f")
    });
}
