//! Kernel counters are narrower than they look: `/proc/interrupts` and `/proc/softirqs` print
//! each per-CPU count with `%10u` (an `unsigned int`), and `softnet_stat` with `%08x`, so they
//! wrap at 2^32. At a million interrupts a second a queue wraps about every 71 minutes.
//!
//! [`delta`] is the one place nodemedic turns two readings into an increase: the collapse
//! detector and `check` both use it. [`Widener`] turns the narrow readings of every sample into
//! 64-bit counts that nodemedic accumulates itself, so the exported `_total` counters never go
//! backwards while the daemon runs (node_exporter exports the kernel's narrow values as they
//! are, and a wrap there looks like a counter reset to Prometheus).

use std::collections::HashMap;
use std::hash::Hash;

use crate::interrupts::Interrupts;
use crate::softirqs::Softirqs;

/// Half of the 32-bit range: a backwards step shorter than this is a wrap, a longer one a reset.
/// A wrap is only mistaken for a reset if a counter moved by more than 2^31 between two samples
/// (over 35 minutes at a million a second); a reset is only mistaken for a wrap if the old count
/// was within 2^31 of the top.
const HALF_U32: u64 = 1 << 31;

/// The increase of a counter from `before` to `now`, or `None` when it was reset.
///
/// Values that both fit in 32 bits are taken to come from a 32-bit kernel counter (the
/// kernel's `%u` fields): a step backwards by less than half the range is a wrap. A value
/// beyond 32 bits comes from a 64-bit counter, where a step backwards is a reset.
pub fn delta(before: u64, now: u64) -> Option<u64> {
    if now >= before {
        return Some(now - before);
    }
    if before > u64::from(u32::MAX) {
        return None;
    }
    let wrapped = (1u64 << 32) - before + now;
    (wrapped <= HALF_U32).then_some(wrapped)
}

/// Turns the kernel's 32-bit counts into 64-bit counts nodemedic accumulates, in place.
///
/// The first reading of a counter is taken as it is; each later one adds the [`delta`] from the
/// previous reading. A reset (an IRQ number reused by another device) adds nothing, so the
/// accumulated count stays put and resumes from there. Counters that disappear (an IRQ freed,
/// a CPU offlined) are forgotten, so the state is bounded by what the kernel shows now.
#[derive(Debug, Default)]
pub struct Widener {
    irqs: Table<u32>,
    arch: Table<String>,
    softirqs: Table<String>,
    /// Per CPU id, the accumulated counts of IRQs that went away (see [`Interrupts::retired`]).
    retired: HashMap<u32, u64>,
}

impl Widener {
    pub fn widen_interrupts(&mut self, ints: &mut Interrupts) {
        let cpus = ints.cpus.clone();
        let old_cpus = self.irqs.cpus.clone();
        let gone = self
            .irqs
            .widen(&cpus, ints.irqs.iter_mut().map(|l| (l.irq, &mut l.counts)));
        for cells in gone {
            for (cpu, cell) in old_cpus.iter().zip(cells) {
                let r = self.retired.entry(*cpu).or_default();
                *r = r.saturating_add(cell.total);
            }
        }
        self.retired.retain(|cpu, _| cpus.contains(cpu));
        ints.retired = if self.retired.is_empty() {
            Vec::new()
        } else {
            cpus.iter()
                .map(|c| self.retired.get(c).copied().unwrap_or(0))
                .collect()
        };
        let _gone = self.arch.widen(
            &cpus,
            ints.arch
                .iter_mut()
                .map(|l| (l.name.clone(), &mut l.counts)),
        );
    }

    pub fn widen_softirqs(&mut self, s: &mut Softirqs) {
        let cpus = s.cpus.clone();
        let _gone = self.softirqs.widen(
            &cpus,
            s.rows.iter_mut().map(|r| (r.name.clone(), &mut r.counts)),
        );
    }
}

#[derive(Debug, Clone, Copy)]
struct Cell {
    raw: u64,
    total: u64,
}

#[derive(Debug)]
struct Row {
    cells: Vec<Cell>,
    /// The last call that saw this row.
    seen: u64,
}

/// Accumulated counts of one kernel table, rows by key, cells by CPU id. Updated in place:
/// on a 256-CPU node this is 100,000 cells every sample.
#[derive(Debug)]
struct Table<K> {
    cpus: Vec<u32>,
    rows: HashMap<K, Row>,
    calls: u64,
}

impl<K> Default for Table<K> {
    fn default() -> Self {
        Self {
            cpus: Vec::new(),
            rows: HashMap::new(),
            calls: 0,
        }
    }
}

impl<K: Hash + Eq> Table<K> {
    /// Widens `rows` in place; returns the cells of the rows that are gone since the
    /// previous call (aligned with the previous header).
    fn widen<'a>(
        &mut self,
        cpus: &[u32],
        rows: impl Iterator<Item = (K, &'a mut Vec<u64>)>,
    ) -> Vec<Vec<Cell>> {
        self.calls += 1;
        let call = self.calls;
        // Columns are CPU ids (the header names only online CPUs): when the header changed,
        // each new column finds its CPU's old column by id.
        let same = self.cpus == cpus;
        let old_col: Vec<Option<usize>> = if same {
            Vec::new()
        } else {
            cpus.iter()
                .map(|c| self.cpus.iter().position(|x| x == c))
                .collect()
        };
        let col_of = |col: usize| -> Option<usize> {
            if same {
                Some(col)
            } else {
                old_col.get(col).copied().flatten()
            }
        };
        for (key, counts) in rows {
            match self.rows.get_mut(&key) {
                Some(row) if row.seen != call => {
                    row.seen = call;
                    if same && row.cells.len() == counts.len() {
                        for (cell, count) in row.cells.iter_mut().zip(counts.iter_mut()) {
                            let d = delta(cell.raw, *count).unwrap_or(0);
                            cell.total = cell.total.saturating_add(d);
                            cell.raw = *count;
                            *count = cell.total;
                        }
                    } else {
                        let old = std::mem::take(&mut row.cells);
                        row.cells = counts
                            .iter_mut()
                            .enumerate()
                            .map(|(col, count)| {
                                let total = match col_of(col).and_then(|c| old.get(c)) {
                                    Some(p) => {
                                        p.total.saturating_add(delta(p.raw, *count).unwrap_or(0))
                                    }
                                    None => *count,
                                };
                                let cell = Cell { raw: *count, total };
                                *count = total;
                                cell
                            })
                            .collect();
                    }
                }
                // New (or the same key twice in one file, which no kernel writes): as read.
                _ => {
                    let cells = counts.iter().map(|c| Cell { raw: *c, total: *c }).collect();
                    self.rows.insert(key, Row { cells, seen: call });
                }
            }
        }
        let mut gone = Vec::new();
        self.rows.retain(|_, row| {
            if row.seen == call {
                true
            } else {
                gone.push(std::mem::take(&mut row.cells));
                false
            }
        });
        if !same {
            self.cpus = cpus.to_vec();
        }
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOP: u64 = u32::MAX as u64;

    #[test]
    fn delta_across_a_32_bit_wrap_is_the_distance_travelled() {
        assert_eq!(delta(TOP - 9, 20), Some(30));
        assert_eq!(delta(TOP, 0), Some(1));
        assert_eq!(delta(5, 5), Some(0));
        assert_eq!(delta(5, 12), Some(7));
    }

    fn ints(cpus: &[u32], rows: &[(u32, &[u64])]) -> Interrupts {
        Interrupts {
            cpus: cpus.to_vec(),
            irqs: rows
                .iter()
                .map(|(irq, counts)| crate::interrupts::IrqLine {
                    irq: *irq,
                    counts: counts.to_vec(),
                    chip: String::new(),
                    hwirq: None,
                    trigger: None,
                    actions: Vec::new(),
                })
                .collect(),
            ..Default::default()
        }
    }

    fn widened(w: &mut Widener, mut i: Interrupts) -> Interrupts {
        w.widen_interrupts(&mut i);
        i
    }

    #[test]
    fn widened_counts_keep_climbing_through_wraps_resets_and_hotplug() {
        let mut w = Widener::default();
        let a = widened(
            &mut w,
            ints(&[0, 1], &[(30, &[TOP - 5, 7]), (31, &[100, 0])]),
        );
        assert_eq!(a.irqs[0].counts, vec![TOP - 5, 7]);
        assert!(a.retired.is_empty());
        // IRQ 30 wraps on CPU 0; IRQ 31 is reused by another device (reset).
        let b = widened(&mut w, ints(&[0, 1], &[(30, &[4, 9]), (31, &[2, 1])]));
        assert_eq!(b.irqs[0].counts, vec![TOP + 5, 9]);
        assert_eq!(b.irqs[1].counts, vec![100, 1]);
        // CPU 0 goes offline: CPU 1's column moves, its count continues; IRQ 31 is freed.
        let c = widened(&mut w, ints(&[1], &[(30, &[19])]));
        assert_eq!(c.irqs[0].counts, vec![19]);
        assert_eq!(c.retired, vec![1], "IRQ 31's 1 interrupt on CPU 1 is kept");
        // CPU 0 back: its counts start again from the kernel's value.
        let d = widened(&mut w, ints(&[0, 1], &[(30, &[6, 20])]));
        assert_eq!(d.irqs[0].counts, vec![6, 20]);
        assert_eq!(d.retired, vec![0, 1]);
    }

    #[test]
    fn a_long_step_backwards_is_a_reset_not_a_wrap() {
        // An IRQ number reused by a new device starts again from a small count.
        assert_eq!(delta(1_000_000, 3), None);
        // 64-bit counters do not wrap in practice: backwards is a reset.
        assert_eq!(delta(TOP + 10, 5), None);
        assert_eq!(delta(TOP + 10, TOP + 9), None);
    }
}
