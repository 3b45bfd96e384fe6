use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

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
#[derive(Default)]
pub struct IrqAffinityCollector {
    nodes: Mutex<HashMap<u32, Option<i32>>>,
    /// IRQ numbers listed at the last rescan (sorted).
    listed: Mutex<Vec<u32>>,
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
        let mut gone = Vec::new();
        // One path buffer for every file: `…/irq/N/name` is pushed and popped around each
        // read, with nothing in between that can return early.
        let mut irq_dir = dir.clone();
        for irq in irqs {
            irq_dir.push(itoa(*irq, &mut num));
            let known_node = nodes.get(irq).copied();
            let read = read_irq(ctx.reader, &mut irq_dir, &mut buf, known_node, &mut errors);
            irq_dir.pop();
            match read {
                IrqRead::Read(aff, node_known) => {
                    // A node that could not be read is retried (and named) next sample.
                    if node_known {
                        nodes.insert(*irq, aff.node);
                    }
                    snap.affinity.insert(*irq, aff);
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
    /// The masks, and whether the node is known (read, or absent on this kernel).
    Read(IrqAffinity, bool),
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
) -> IrqRead {
    let errors_before = errors.len();
    let mut mask = |dir: &mut PathBuf, name: &str| -> Result<Option<CpuSet>, ReadError> {
        in_dir(dir, name, |path| match reader.read_into(path, buf) {
            Ok(()) => CpuSet::parse_mask(complete(path, buf)?)
                .map(Some)
                .map_err(|e| ReadError::parse(path, e)),
            Err(e) if e.is_missing() => Ok(None),
            Err(e) => Err(e),
        })
    };
    let smp = mask(dir, "smp_affinity").unwrap_or_else(|e| {
        errors.push(e);
        None
    });
    let effective = mask(dir, "effective_affinity").unwrap_or_else(|e| {
        errors.push(e);
        None
    });
    if smp.is_none() && effective.is_none() {
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
    let node = match known_node {
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
    let node_known = errors.len() == before_node;
    IrqRead::Read(
        IrqAffinity {
            smp,
            effective,
            node,
        },
        node_known,
    )
}
