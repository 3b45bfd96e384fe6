//! The IRQs' affinities (`/proc/irq/N/smp_affinity`, `effective_affinity`, `node`), read
//! again only when the IRQs change or the refresh interval has passed.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nodemedic_kernel::{bytes, CpuSet};
use nodemedic_sample::Snapshot;
use serde::Serialize;

use super::complete;
use crate::sources::interrupts::Interrupts;
use crate::{CollectError, Collected, Collector, Ctx, ReadError, Reader};

/// One IRQ's affinity files under `/proc/irq/N/`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct IrqAffinity {
    /// `smp_affinity`: where the IRQ may be delivered.
    pub smp: Option<CpuSet>,
    /// `effective_affinity`: where the kernel actually delivers it (absent before 4.15 and on
    /// some interrupt chips).
    pub effective: Option<CpuSet>,
    /// `node`: the NUMA node the IRQ descriptor was allocated on.
    pub node: Option<i32>,
}

impl IrqAffinity {
    /// The CPUs the IRQ is delivered to: the effective affinity when the kernel reports a
    /// non-empty one inside the permitted set, else the permitted set.
    ///
    /// An effective affinity outside `smp_affinity` means a move is pending: x86 without
    /// interrupt remapping migrates an IRQ when it next fires, so a quiet IRQ that was just
    /// re-pinned still shows its old CPU. Its future delivery lies in `smp_affinity`.
    pub fn delivery_cpus(&self) -> Option<&CpuSet> {
        match (&self.effective, &self.smp) {
            (Some(eff), Some(smp)) if !eff.is_empty() && eff.is_subset(smp) => Some(eff),
            (Some(eff), None) if !eff.is_empty() => Some(eff),
            (_, Some(smp)) => Some(smp),
            (_, None) => None,
        }
    }

    /// Whether the kernel still has to move the IRQ to its new `smp_affinity`.
    pub fn move_pending(&self) -> bool {
        matches!((&self.effective, &self.smp), (Some(eff), Some(smp)) if !eff.is_empty() && !eff.is_subset(smp))
    }
}

/// The IRQs' affinities from `/proc/irq/N/`, by IRQ number.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IrqAffinities(pub BTreeMap<u32, IrqAffinity>);

nodemedic_sample::deref! { IrqAffinities => BTreeMap<u32, IrqAffinity> }

/// /proc/irq/N/: each IRQ's affinity; after interrupts, whose IRQs it reads.
pub const NAME: crate::CollectorName = crate::CollectorName::new("irq_affinity");

/// One of an IRQ's affinity files, as the fault injection breaks it: optional (per-CPU
/// interrupts, the timer and IPIs on some arches, have none), and a broken one costs only the
/// groups of its IRQ.
const fn per_irq(name: &'static str, pattern: &'static str) -> crate::registry::FileKind {
    crate::registry::FileKind {
        name,
        tree: "8cpu-collapsed",
        pattern,
        table: false,
        optional: true,
        empty_ok: false,
        impact: crate::registry::Impact::Irq,
        may_change: &[
            "collector/irq_affinity",
            "count/affinity",
            "series/interrupts",
        ],
    }
}

crate::register!(crate::registry::Declaration {
    name: NAME,
    order: 30,
    switch: crate::registry::Switch::Collectors,
    optional: false,
    checks: crate::registry::Checks {
        fixtures: crate::registry::Fixtures::Trees(&[
            "8cpu-collapsed",
            "96cpu-collapsed",
            "aarch64"
        ]),
        golden: crate::registry::Golden::Series(&[(
            "8cpu-collapsed",
            "nodemedic_irq_effective_cpu{"
        )]),
        fuzz: crate::registry::Fuzz::Targets(&["cpuset"]),
    },
    faults: &[
        per_irq("smp_affinity", "proc/irq/*/smp_affinity"),
        per_irq("effective_affinity", "proc/irq/*/effective_affinity"),
        per_irq("irq node", "proc/irq/*/node"),
    ],
    render: None,
    build: crate::registry::Build::Here(|settings| {
        Some(Box::new(IrqAffinityCollector::with_refresh(
            settings.affinity_refresh,
        )))
    }),
});

/// `/proc/irq/N/{smp_affinity,effective_affinity,node}`.
///
/// An IRQ descriptor's NUMA node is fixed when it is allocated, so `node` is read once per
/// IRQ and remembered while the IRQ exists: a third fewer file reads every sample.
///
/// The list of IRQ directories is read on rescans; in between, the IRQs that were listed
/// plus any new one that `/proc/interrupts` shows are read, and an IRQ whose directory
/// vanished is forgotten.
///
/// Each file stands alone: a corrupt or unreadable `effective_affinity` loses that IRQ's
/// effective mask (its delivery falls back to `smp_affinity`) and nothing else.
///
/// Masks are parsed into sets kept from one sample to the next and compared with the last
/// sample's: while none changed, the snapshot shares the last sample's map and nothing is
/// allocated for it (BENCHMARKS.md, "Allocations per sample and per render").
///
/// **Which IRQs are read.** Two files per IRQ were 40% of a sample's CPU on a 256-CPU tree and
/// a third on a 1024-CPU one (BENCHMARKS.md, "Fewer files, fewer calls, faster zeros"). An
/// IRQ's files are read in a sample when
/// - the sample is a rescan, or the IRQ was never read (or its last read failed);
/// - `/proc/interrupts` says its delivery may have changed (`moved`): a count changed on a
///   CPU outside the CPUs it was delivered to, or it is delivered to more than one CPU and a
///   count changed, or its row appeared or vanished, or the CPU columns changed;
/// - its turn came: the IRQs are re-read in turn, all of them within `refresh` (10 s by
///   default; the daemon uses at most half of the remediation's `verify_after`), so that an IRQ whose affinity
///   changed while it was quiet, or a mask that was rewritten while the kernel kept the same
///   effective CPU, is seen within that time.
///
/// An IRQ that fires keeps showing where the kernel delivers it, so a move (irqbalance, an
/// operator, nodemedic's own spread) is read in the sample that sees its first interrupt on
/// the new CPU. `refresh` of zero reads every IRQ every sample.
pub struct IrqAffinityCollector {
    refresh: Duration,
    nodes: Mutex<HashMap<u32, Option<i32>>>,
    /// IRQ numbers listed at the last rescan (sorted).
    listed: Mutex<Vec<u32>>,
    last: Mutex<Last>,
}

/// How long an IRQ's affinity may go unread while its counts say nothing moved.
pub const DEFAULT_AFFINITY_REFRESH: Duration = Duration::from_secs(10);

impl Default for IrqAffinityCollector {
    fn default() -> Self {
        Self::with_refresh(DEFAULT_AFFINITY_REFRESH)
    }
}

impl IrqAffinityCollector {
    /// Every IRQ re-read at least every `refresh` (zero: every sample).
    pub fn with_refresh(refresh: Duration) -> Self {
        Self {
            refresh,
            nodes: Mutex::default(),
            listed: Mutex::default(),
            last: Mutex::default(),
        }
    }
}

#[derive(Default)]
struct Last {
    /// The map the last sample's snapshot got.
    map: Arc<IrqAffinities>,
    /// This sample's IRQs that were read, in order, each with its affinity when it differs
    /// from `map`'s (`None`: the same).
    read: Vec<(u32, Option<IrqAffinity>)>,
    /// One IRQ's files as read, into sets that keep their storage.
    reading: Reading,
    /// The last sample's counts and time, for [`moved`] and the turns.
    counts: LastCounts,
    at: Option<Duration>,
    /// Where the next turn starts in the listed IRQs.
    turn: usize,
    /// This sample's IRQs that [`moved`] names (ascending).
    moved: Vec<u32>,
    /// The IRQs whose last read named a problem (ascending): read every sample, so that
    /// `/status` names a bad file for as long as it stays bad.
    troubled: Vec<u32>,
}

impl Last {
    /// How many listed IRQs (of `n`) take their turn in a sample at `at`: enough that every one
    /// has had one within `refresh`.
    fn turns(&self, n: usize, at: Duration, refresh: Duration) -> usize {
        match self.at {
            Some(prev) if at > prev && !refresh.is_zero() => {
                let share = (n as u128 * (at - prev).as_nanos()).div_ceil(refresh.as_nanos());
                usize::try_from(share).unwrap_or(n).min(n)
            }
            _ => n,
        }
    }
}

/// One IRQ's masks and node as read.
#[derive(Default)]
struct Reading {
    smp: CpuSet,
    has_smp: bool,
    effective: CpuSet,
    has_effective: bool,
    node: Option<i32>,
}

impl Reading {
    fn reads_as(&self, a: &IrqAffinity) -> bool {
        a.smp.as_ref() == self.has_smp.then_some(&self.smp)
            && a.effective.as_ref() == self.has_effective.then_some(&self.effective)
            && a.node == self.node
    }

    fn to_affinity(&self) -> IrqAffinity {
        IrqAffinity {
            smp: self.has_smp.then(|| self.smp.clone()),
            effective: self.has_effective.then(|| self.effective.clone()),
            node: self.node,
        }
    }
}

impl Collector for IrqAffinityCollector {
    fn name(&self) -> crate::CollectorName {
        NAME
    }

    fn collect(&self, ctx: &Ctx<'_>, snap: &mut Snapshot) -> Result<Collected, CollectError> {
        let dir = ctx.paths.procfs.join("irq");
        let mut listed = self.listed.lock().unwrap_or_else(|p| p.into_inner());
        if ctx.rescan || listed.is_empty() {
            *listed = ctx
                .reader
                .read_dir(&dir)?
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect();
            listed.sort_unstable();
        } else if let Some(ints) = snap.get::<Interrupts>() {
            let before = listed.len();
            for line in &ints.irqs {
                if listed.binary_search(&line.irq).is_err() {
                    listed.push(line.irq);
                }
            }
            if listed.len() > before {
                listed.sort_unstable();
            }
        }
        let irqs: &[u32] = &listed;
        let mut out = Collected::default();
        let mut buf = String::with_capacity(128);
        let mut num = String::with_capacity(10);
        let mut vanished = 0usize;
        let mut errors = Vec::new();
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        nodes.retain(|irq, _| irqs.binary_search(irq).is_ok());
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let last = &mut *last;
        last.read.clear();
        // Every IRQ is read at a rescan, with no refresh, or when the counts cannot say which
        // moved; only otherwise are the tables compared.
        let every = ctx.rescan
            || self.refresh.is_zero()
            || !snap
                .get::<Interrupts>()
                .is_some_and(|now| moved(&last.counts, now, &last.map, &mut last.moved));
        let n = irqs.len();
        let turns = if every {
            n
        } else {
            last.turns(n, snap.at, self.refresh)
        };
        let first_turn = if n == 0 { 0 } else { last.turn % n };
        last.turn = first_turn + turns;
        last.at = Some(snap.at);
        last.counts.keep(snap.get::<Interrupts>());
        let mut changed = false;
        let mut gone = Vec::new();
        let mut troubled = Vec::new();
        // One path buffer for every file: `…/irq/N/name` is pushed and popped around each
        // read, with nothing in between that can return early.
        let mut irq_dir = dir.clone();
        for (at, irq) in irqs.iter().enumerate() {
            let due = every
                || (at + n - first_turn) % n < turns
                || !last.map.contains_key(irq)
                || last.moved.binary_search(irq).is_ok()
                || last.troubled.binary_search(irq).is_ok();
            if !due {
                // Read as last time: the last map's entry stands.
                last.read.push((*irq, None));
                continue;
            }
            irq_dir.push(itoa(*irq, &mut num));
            let errors_before = errors.len();
            let known_node = nodes.get(irq).copied();
            let r = &mut last.reading;
            let read = read_irq(
                ctx.reader,
                &mut irq_dir,
                &mut buf,
                known_node,
                &mut errors,
                r,
            );
            irq_dir.pop();
            if errors.len() > errors_before {
                troubled.push(*irq);
            }
            match read {
                IrqRead::Read(node_known) => {
                    // A node that could not be read is retried (and named) next sample.
                    if node_known {
                        nodes.insert(*irq, r.node);
                    }
                    let same = last.map.get(irq).is_some_and(|a| r.reads_as(a));
                    changed |= !same;
                    last.read.push((*irq, (!same).then(|| r.to_affinity())));
                }
                IrqRead::Unusable => {}
                // The IRQ was freed between listing the directory and reading it.
                IrqRead::Vanished => {
                    vanished += 1;
                    gone.push(*irq);
                }
            }
        }
        listed.retain(|irq| !gone.contains(irq));
        last.troubled = troubled;
        // Every IRQ read as last time, and no other: the last map is this sample's too.
        if changed || last.read.len() != last.map.len() {
            let map: BTreeMap<u32, IrqAffinity> = last
                .read
                .drain(..)
                .filter_map(|(irq, new)| match new {
                    Some(a) => Some((irq, a)),
                    None => Some((irq, last.map.get(&irq)?.clone())),
                })
                .collect();
            last.map = Arc::new(IrqAffinities(map));
        }
        snap.put_shared(Arc::clone(&last.map));
        if vanished > 0 {
            // Named (a few of them): a warning must say which file it is about.
            const NAMED: usize = 5;
            for irq in gone.iter().take(NAMED) {
                out.warnings.push(format!(
                    "{}: IRQ vanished between listing {} and reading it",
                    dir.join(irq.to_string()).display(),
                    dir.display()
                ));
            }
            if vanished > NAMED {
                out.warnings.push(format!(
                    "{} more IRQ(s) vanished between listing {} and reading them",
                    vanished - NAMED,
                    dir.display()
                ));
            }
        }
        // Nothing readable at all (permission denied everywhere, say) is a failure; a few
        // bad files among many are warnings.
        if last.map.is_empty() && !errors.is_empty() {
            return Err(errors.swap_remove(0).into());
        }
        out.warnings.extend(errors.iter().map(ToString::to_string));
        Ok(out)
    }
}

/// The numbered rows' counts of the last sample's `/proc/interrupts`, as the kernel wrote them
/// (before widening), copied into storage kept from one sample to the next: holding the table
/// itself would share it, and the engine then copies all of it to widen its counts.
#[derive(Debug, Default)]
struct LastCounts {
    /// False when the last sample had no table.
    some: bool,
    cpus: Vec<u32>,
    /// IRQ, and where its non-zero counts are in `cols` and `counts`.
    rows: Vec<(u32, usize, usize)>,
    cols: Vec<u32>,
    counts: Vec<u64>,
}

impl LastCounts {
    fn keep(&mut self, table: Option<&Interrupts>) {
        self.cpus.clear();
        self.rows.clear();
        self.cols.clear();
        self.counts.clear();
        self.some = table.is_some();
        let Some(t) = table else { return };
        self.cpus.extend_from_slice(&t.cpus);
        for line in &t.irqs {
            let (cols, counts) = t.counts(line).parts();
            let start = self.cols.len();
            self.cols.extend_from_slice(cols);
            self.counts.extend_from_slice(counts);
            self.rows.push((line.irq, start, self.cols.len()));
        }
    }

    fn cells(&self, start: usize, end: usize) -> (&[u32], &[u64]) {
        (
            self.cols.get(start..end).unwrap_or_default(),
            self.counts.get(start..end).unwrap_or_default(),
        )
    }
}

/// Fills `out` (ascending) with the IRQs whose delivery `now`'s counts say may differ from
/// `known`, the affinities last read, since `before`, the last sample's counts:
/// - a count changed on a CPU outside the IRQ's delivery CPUs (irqbalance or an operator moved
///   it, or a CPU went offline and the kernel moved it);
/// - a count changed and the IRQ is delivered to several CPUs, or a move is pending: counts
///   inside the set cannot show that the set shrank;
/// - its row is new, or it vanished (the IRQ was freed: its directory is read to find out).
///
/// False when the tables cannot be compared: the CPU columns differ (hotplug), so every IRQ
/// must be read.
fn moved(
    before: &LastCounts,
    now: &Interrupts,
    known: &BTreeMap<u32, IrqAffinity>,
    out: &mut Vec<u32>,
) -> bool {
    out.clear();
    if !before.some || before.cpus != now.cpus {
        return false;
    }
    // Rows are in ascending IRQ order, as the kernel prints them; a row out of order is only
    // read (found neither in step nor as vanished), never missed.
    let mut old = before.rows.iter().peekable();
    for line in &now.irqs {
        while let Some(gone) = old.next_if(|r| r.0 < line.irq) {
            out.push(gone.0);
        }
        let Some(&(_, start, end)) = old.next_if(|r| r.0 == line.irq) else {
            out.push(line.irq);
            continue;
        };
        let (cols, counts) = now.counts(line).parts();
        let (cols_was, counts_was) = before.cells(start, end);
        if bytes::eq_items(cols, cols_was) && bytes::eq_items(counts, counts_was) {
            continue;
        }
        let cpus = known
            .get(&line.irq)
            .filter(|a| !a.move_pending())
            .and_then(IrqAffinity::delivery_cpus);
        let inside = |col: u32| {
            now.cpus
                .get(col as usize)
                .is_some_and(|cpu| cpus.is_some_and(|s| s.contains(*cpu)))
        };
        if cpus.is_none_or(|s| s.len() > 1)
            || changed_cols(cols_was, counts_was, cols, counts).any(|col| !inside(col))
        {
            out.push(line.irq);
        }
    }
    out.extend(old.map(|r| r.0));
    out.sort_unstable();
    true
}

/// The columns whose count differs between two rows' non-zero counts (columns ascending).
fn changed_cols<'a>(
    cols_a: &'a [u32],
    counts_a: &'a [u64],
    cols_b: &'a [u32],
    counts_b: &'a [u64],
) -> impl Iterator<Item = u32> + 'a {
    let (mut i, mut j) = (0, 0);
    std::iter::from_fn(move || loop {
        match (cols_a.get(i), cols_b.get(j)) {
            (None, None) => return None,
            (Some(&a), Some(&b)) if a == b => {
                let same = counts_a.get(i) == counts_b.get(j);
                i += 1;
                j += 1;
                if !same {
                    return Some(a);
                }
            }
            (Some(&a), Some(&b)) if a < b => {
                i += 1;
                return Some(a);
            }
            (Some(&a), None) => {
                i += 1;
                return Some(a);
            }
            (_, Some(&b)) => {
                j += 1;
                return Some(b);
            }
        }
    })
}

enum IrqRead {
    /// The masks are in the [`Reading`]; whether the node is known (read, or absent on this
    /// kernel).
    Read(bool),
    /// The directory exists but neither mask could be read; the reasons are in `errors`.
    Unusable,
    Vanished,
}

/// `n` in decimal, in `out` (no allocation per IRQ).
fn itoa(n: u32, out: &mut String) -> &str {
    use std::fmt::Write;
    out.clear();
    let _ = write!(out, "{n}");
    out
}

/// `f` of `dir/name`; `dir` is as it was afterwards.
fn in_dir<T>(dir: &mut PathBuf, name: &str, f: impl FnOnce(&Path) -> T) -> T {
    dir.push(name);
    let r = f(dir);
    dir.pop();
    r
}

fn read_irq(
    reader: &Reader,
    dir: &mut PathBuf,
    buf: &mut String,
    known_node: Option<Option<i32>>,
    errors: &mut Vec<ReadError>,
    r: &mut Reading,
) -> IrqRead {
    let errors_before = errors.len();
    let mut mask = |dir: &mut PathBuf, name: &str, set: &mut CpuSet| -> Result<bool, ReadError> {
        in_dir(dir, name, |path| match reader.read_into(path, buf) {
            Ok(()) => set
                .parse_mask_into(complete(path, buf)?)
                .map(|()| true)
                .map_err(|e| ReadError::parse(path, e)),
            Err(e) if e.is_missing() => Ok(false),
            Err(e) => Err(e),
        })
    };
    r.has_smp = mask(dir, "smp_affinity", &mut r.smp).unwrap_or_else(|e| {
        errors.push(e);
        false
    });
    r.has_effective = mask(dir, "effective_affinity", &mut r.effective).unwrap_or_else(|e| {
        errors.push(e);
        false
    });
    if !r.has_smp && !r.has_effective {
        // No masks: the IRQ vanished, both files were unreadable, or the files are absent for
        // this IRQ (per-CPU interrupts have none). Tell them apart by the directory.
        if !dir.exists() {
            return IrqRead::Vanished;
        }
        if errors.len() > errors_before {
            return IrqRead::Unusable;
        }
    }
    // A missing `node` is an old kernel (no data); any other problem is named.
    let before_node = errors.len();
    r.node = match known_node {
        Some(node) => node,
        None => {
            let node = in_dir(dir, "node", |path| {
                reader.read_into(path, buf).and_then(|()| {
                    complete(path, buf)?
                        .trim()
                        .parse::<i32>()
                        .map_err(|e| ReadError::parse(path, format!("not a NUMA node: {e}")))
                })
            });
            match node {
                Ok(n) => Some(n),
                Err(e) if e.is_missing() => None,
                Err(e) => {
                    errors.push(e);
                    None
                }
            }
        }
    };
    IrqRead::Read(errors.len() == before_node)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::interrupts::IrqDescription;

    fn aff(smp: &str, eff: Option<&str>) -> IrqAffinity {
        IrqAffinity {
            smp: Some(CpuSet::parse_list(smp).unwrap()),
            effective: eff.map(|e| CpuSet::parse_list(e).unwrap()),
            node: None,
        }
    }

    #[test]
    fn delivery_prefers_effective_inside_smp() {
        assert_eq!(
            aff("0-7", Some("4"))
                .delivery_cpus()
                .unwrap()
                .to_list_string(),
            "4"
        );
        assert_eq!(
            aff("0-7", None).delivery_cpus().unwrap().to_list_string(),
            "0-7"
        );
        assert_eq!(
            aff("0-7", Some(""))
                .delivery_cpus()
                .unwrap()
                .to_list_string(),
            "0-7"
        );
        let pending = aff("1", Some("0"));
        assert!(pending.move_pending());
        assert_eq!(pending.delivery_cpus().unwrap().to_list_string(), "1");
        assert_eq!(IrqAffinity::default().delivery_cpus(), None);
    }

    /// A 4-CPU table (CPUs 0-3) of `rows`: (IRQ, counts).
    fn table(rows: &[(u32, [u64; 4])]) -> Interrupts {
        let mut t = Interrupts::with_cpus(vec![0, 1, 2, 3]);
        for (irq, counts) in rows {
            t.push_irq(*irq, Arc::new(IrqDescription::default()), counts);
        }
        t
    }

    fn on(smp: &[u32], effective: &[u32]) -> IrqAffinity {
        IrqAffinity {
            smp: Some(CpuSet::from_cpus(smp.iter().copied())),
            effective: Some(CpuSet::from_cpus(effective.iter().copied())),
            node: None,
        }
    }

    fn moved_irqs(
        before: &Interrupts,
        now: &Interrupts,
        known: &[(u32, IrqAffinity)],
    ) -> Option<Vec<u32>> {
        let known: BTreeMap<u32, IrqAffinity> = known.iter().cloned().collect();
        let mut last = LastCounts::default();
        // Storage from an earlier, different table: `keep` must start afresh.
        last.keep(Some(&table(&[(7, [1, 2, 3, 4])])));
        last.keep(Some(before));
        let mut out = vec![99];
        moved(&last, now, &known, &mut out).then_some(out)
    }

    #[test]
    fn counts_inside_a_single_delivery_cpu_say_nothing_moved() {
        let before = table(&[(30, [0, 5, 0, 0]), (31, [0, 0, 0, 0])]);
        let now = table(&[(30, [0, 9, 0, 0]), (31, [0, 0, 0, 0])]);
        let known = [(30, on(&[0, 1, 2, 3], &[1])), (31, on(&[2], &[2]))];
        assert_eq!(moved_irqs(&before, &now, &known), Some(vec![]));
    }

    #[test]
    fn a_count_outside_the_delivery_cpus_is_a_move() {
        let before = table(&[(30, [0, 5, 0, 0]), (31, [1, 0, 0, 0])]);
        // 30 fired on CPU 3 for the first time; 31's count on CPU 0 is gone (a wrapped or
        // reset counter counts as a change too).
        let now = table(&[(30, [0, 5, 0, 1]), (31, [0, 0, 0, 0])]);
        let known = [(30, on(&[0, 1, 2, 3], &[1])), (31, on(&[2], &[2]))];
        assert_eq!(moved_irqs(&before, &now, &known), Some(vec![30, 31]));
    }

    #[test]
    fn firing_on_several_delivery_cpus_or_with_a_move_pending_is_read() {
        let before = table(&[(30, [5, 5, 0, 0]), (31, [0, 5, 0, 0]), (32, [0, 0, 0, 0])]);
        let now = table(&[(30, [6, 5, 0, 0]), (31, [0, 6, 0, 0]), (32, [0, 0, 0, 0])]);
        let known = [
            // Counts inside two CPUs cannot show that the set shrank to one.
            (30, on(&[0, 1], &[0, 1])),
            // Effective CPU 1 outside smp_affinity 3: the move happens at the next interrupt.
            (31, on(&[3], &[1])),
            // Quiet, on several CPUs: nothing to read.
            (32, on(&[0, 1, 2, 3], &[0, 1, 2, 3])),
        ];
        assert_eq!(moved_irqs(&before, &now, &known), Some(vec![30, 31]));
    }

    #[test]
    fn rows_that_appear_or_vanish_and_unknown_irqs_are_read() {
        let before = table(&[(30, [1, 0, 0, 0]), (31, [1, 0, 0, 0]), (40, [1, 0, 0, 0])]);
        let now = table(&[(29, [0, 0, 0, 0]), (31, [2, 0, 0, 0]), (35, [0, 0, 0, 0])]);
        // 31 fired with no affinity known (its last read failed).
        assert_eq!(
            moved_irqs(&before, &now, &[]),
            Some(vec![29, 30, 31, 35, 40])
        );
    }

    #[test]
    fn no_table_last_time_cannot_be_compared() {
        let mut last = LastCounts::default();
        last.keep(None);
        let now = table(&[(30, [1, 0, 0, 0])]);
        assert!(!moved(&last, &now, &BTreeMap::new(), &mut Vec::new()));
    }

    #[test]
    fn other_cpu_columns_cannot_be_compared() {
        let before = table(&[(30, [1, 0, 0, 0])]);
        let mut now = Interrupts::with_cpus(vec![0, 1, 2]);
        now.push_irq(30, Arc::new(IrqDescription::default()), &[1, 0, 0]);
        assert_eq!(moved_irqs(&before, &now, &[(30, on(&[0], &[0]))]), None);
    }

    #[test]
    fn changed_columns_are_every_column_whose_count_differs() {
        let cols: Vec<u32> =
            changed_cols(&[1, 3, 5], &[10, 30, 50], &[0, 3, 5, 7], &[1, 31, 50, 7]).collect();
        assert_eq!(cols, vec![0, 1, 3, 7]);
        assert_eq!(changed_cols(&[2], &[4], &[2], &[4]).count(), 0);
    }

    #[test]
    fn turns_cover_every_irq_within_the_refresh() {
        let refresh = Duration::from_secs(10);
        let mut last = Last::default();
        assert_eq!(
            last.turns(26, Duration::from_secs(100), refresh),
            26,
            "first sample"
        );
        last.at = Some(Duration::from_secs(100));
        assert_eq!(last.turns(26, Duration::from_secs(101), refresh), 3);
        assert_eq!(last.turns(26, Duration::from_secs(105), refresh), 13);
        assert_eq!(last.turns(26, Duration::from_secs(130), refresh), 26);
        assert_eq!(
            last.turns(26, Duration::from_secs(99), refresh),
            26,
            "time went back"
        );
        assert_eq!(last.turns(26, Duration::from_secs(101), Duration::ZERO), 26);
    }
}
