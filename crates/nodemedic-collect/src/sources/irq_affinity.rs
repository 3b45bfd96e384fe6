use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use nodemedic_kernel::CpuSet;
use nodemedic_sample::snapshot::IrqAffinity;
use nodemedic_sample::Snapshot;

use super::complete;
use crate::fsread::read_dir;
use crate::{CollectError, Collected, Collector, Ctx, ReadError, Reader};

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
#[derive(Default)]
pub struct IrqAffinityCollector {
    nodes: Mutex<HashMap<u32, Option<i32>>>,
    /// IRQ numbers listed at the last rescan (sorted).
    listed: Mutex<Vec<u32>>,
    last: Mutex<Last>,
}

#[derive(Default)]
struct Last {
    /// The map the last sample's snapshot got.
    map: Arc<BTreeMap<u32, IrqAffinity>>,
    /// This sample's IRQs that were read, in order, each with its affinity when it differs
    /// from `map`'s (`None`: the same).
    read: Vec<(u32, Option<IrqAffinity>)>,
    /// One IRQ's files as read, into sets that keep their storage.
    reading: Reading,
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
        crate::CollectorName::IrqAffinity
    }

    fn collect(&self, ctx: &Ctx<'_>, snap: &mut Snapshot) -> Result<Collected, CollectError> {
        let dir = ctx.paths.procfs.join("irq");
        let mut listed = self.listed.lock().unwrap_or_else(|p| p.into_inner());
        if ctx.rescan || listed.is_empty() {
            *listed = read_dir(&dir)?
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect();
            listed.sort_unstable();
        } else if let Some(ints) = &snap.interrupts {
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
        let mut changed = false;
        let mut gone = Vec::new();
        // One path buffer for every file: `…/irq/N/name` is pushed and popped around each
        // read, with nothing in between that can return early.
        let mut irq_dir = dir.clone();
        for irq in irqs {
            irq_dir.push(itoa(*irq, &mut num));
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
            last.map = Arc::new(map);
        }
        snap.affinity = Arc::clone(&last.map);
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
        if snap.affinity.is_empty() && !errors.is_empty() {
            return Err(errors.swap_remove(0).into());
        }
        out.warnings.extend(errors.iter().map(ToString::to_string));
        Ok(out)
    }
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
