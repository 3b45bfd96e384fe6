//! Interrupt rates from two samples: the one place where the collapse detector and
//! `nodemedic check` turn two `/proc/interrupts` tables into per-CPU growth.
//!
//! Columns are CPUs through the header, which names only online CPUs: when it changed between
//! the samples (hotplug), each column finds its CPU's earlier column by id. Growth is
//! wrap-aware ([`counter::delta`]); an IRQ whose count went backwards (its number reused by
//! another device) adds nothing, and an IRQ that appeared between the samples adds nothing
//! either, since its whole history is not one interval's work.

use std::collections::HashMap;

use nodemedic_kernel::counter;
use nodemedic_kernel::interrupts::{Interrupts, IrqLine};

/// One IRQ's counts, and the columns where they are not zero when that is known (the parser
/// and the widener keep it, see [`IrqLine::nonzero`]).
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    pub counts: &'a [u64],
    pub nonzero: Option<&'a [u32]>,
}

impl<'a> From<&'a IrqLine> for Row<'a> {
    fn from(l: &'a IrqLine) -> Self {
        Row {
            counts: &l.counts,
            nonzero: l.nonzero.as_deref(),
        }
    }
}

impl<'a> Row<'a> {
    /// Counts only (every column is visited).
    pub fn dense(counts: &'a [u64]) -> Self {
        Row {
            counts,
            nonzero: None,
        }
    }

    /// Adds the counts since boot into `sums`, per column.
    pub fn add_to(&self, sums: &mut [u64]) {
        if let Some(cols) = self.nonzero {
            for &c in cols {
                if let (Some(sum), Some(&v)) =
                    (sums.get_mut(c as usize), self.counts.get(c as usize))
                {
                    *sum = sum.saturating_add(v);
                }
            }
            return;
        }
        for (sums, counts) in sums.chunks_mut(8).zip(self.counts.chunks(8)) {
            // Mostly zeros on a wide node (see `add_growth`).
            if counts.iter().fold(0, |any, &c| any | c) == 0 {
                continue;
            }
            for (sum, &count) in sums.iter_mut().zip(counts) {
                *sum = sum.saturating_add(count);
            }
        }
    }
}

/// How the columns of `now`'s header map to `before`'s: `None` when the headers are the same
/// (columns line up), else per column the earlier column of the same CPU, if it had one.
pub fn column_map(before: &[u32], now: &[u32]) -> Option<Vec<Option<usize>>> {
    (before != now).then(|| {
        now.iter()
            .map(|c| before.iter().position(|x| x == c))
            .collect()
    })
}

/// Adds one IRQ's growth from `before` to `now` into `sums`, per column of `now`, and returns
/// that IRQ's growth over all columns.
pub fn add_growth(
    sums: &mut [u64],
    now: Row<'_>,
    before: Row<'_>,
    map: Option<&[Option<usize>]>,
) -> u64 {
    let mut total = 0u64;
    // Columns line up and both rows say where they are not zero: only those columns can
    // have grown (or wrapped), so only they are visited: on a 1024-CPU node a few per IRQ.
    if let (None, Some(a), Some(b)) = (map, now.nonzero, before.nonzero) {
        let cells = sums.len().min(now.counts.len()).min(before.counts.len());
        let mut add = |c: u32| {
            let c = c as usize;
            if c < cells {
                let d = counter::delta(before.counts[c], now.counts[c]).unwrap_or(0);
                sums[c] = sums[c].saturating_add(d);
                total = total.saturating_add(d);
            }
        };
        // The union of two ascending lists.
        let (mut i, mut j) = (0, 0);
        while i < a.len() || j < b.len() {
            match (a.get(i), b.get(j)) {
                (Some(&x), Some(&y)) if x == y => {
                    add(x);
                    i += 1;
                    j += 1;
                }
                (Some(&x), Some(&y)) if x < y => {
                    add(x);
                    i += 1;
                }
                (Some(_), Some(&y)) => {
                    add(y);
                    j += 1;
                }
                (Some(&x), None) => {
                    add(x);
                    i += 1;
                }
                (None, Some(&y)) => {
                    add(y);
                    j += 1;
                }
                (None, None) => break,
            }
        }
        return total;
    }
    let (now, before) = (now.counts, before.counts);
    match map {
        // Column for column: on 1024 CPUs this loop is most of the collapse detector's time.
        // An IRQ counts on the few CPUs it has been routed to, so most of a wide row is zero
        // in both tables: eight columns at a time are skipped when all sixteen counts are
        // zero (one OR, vectorised), and the rest go cell by cell.
        None => {
            const LANES: usize = 8;
            let cells = sums.len().min(now.len()).min(before.len());
            let (sums, now, before) = (&mut sums[..cells], &now[..cells], &before[..cells]);
            let chunks = sums
                .chunks_mut(LANES)
                .zip(now.chunks(LANES))
                .zip(before.chunks(LANES));
            for ((sums, now), before) in chunks {
                let any = now.iter().chain(before).fold(0, |any, &c| any | c);
                if any == 0 {
                    continue;
                }
                for ((sum, &n), &o) in sums.iter_mut().zip(now).zip(before) {
                    // Widened counts only grow: the branch that calls `delta` is the rare one.
                    let d = if n >= o {
                        n - o
                    } else {
                        counter::delta(o, n).unwrap_or(0)
                    };
                    *sum = sum.saturating_add(d);
                    total = total.saturating_add(d);
                }
            }
        }
        Some(map) => {
            for ((sum, &n), col) in sums.iter_mut().zip(now).zip(map) {
                if let Some(d) = col
                    .and_then(|c| before.get(c))
                    .and_then(|&o| counter::delta(o, n))
                {
                    *sum = sum.saturating_add(d);
                    total = total.saturating_add(d);
                }
            }
        }
    }
    total
}

/// Per column of `now`, the growth of every IRQ present in both tables.
pub fn per_cpu_growth(before: &Interrupts, now: &Interrupts) -> Vec<u64> {
    let map = column_map(&before.cpus, &now.cpus);
    let rows: HashMap<u32, Row<'_>> = before.irqs.iter().map(|l| (l.irq, l.into())).collect();
    let mut sums = vec![0u64; now.cpus.len()];
    for line in &now.irqs {
        if let Some(b) = rows.get(&line.irq) {
            add_growth(&mut sums, line.into(), *b, map.as_deref());
        }
    }
    sums
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodemedic_kernel::interrupts::IrqLine;

    fn table(cpus: &[u32], rows: &[(u32, &[u64])]) -> Interrupts {
        Interrupts {
            cpus: cpus.to_vec(),
            irqs: rows
                .iter()
                .map(|(irq, c)| IrqLine::with_counts(*irq, c.to_vec()))
                .collect(),
            ..Default::default()
        }
    }

    /// The vectorised pass against the plain per-cell rule (`delta`, nothing on a reset),
    /// over rows that grow, wrap, reset, sit near the top of u64 and differ in length.
    #[test]
    fn growth_matches_the_per_cell_rule_on_random_rows() {
        let mut rng = nodemedic_testkit::XorShift64::new(0x9e37_79b9_7f4a_7c15);
        let mut next = move || rng.next_u64();
        for round in 0..2_000 {
            let len = (next() % 40) as usize;
            let before: Vec<u64> = (0..len)
                .map(|_| match next() % 4 {
                    0 => 0,
                    1 => next() % 1_000,
                    2 => u64::from(u32::MAX) - next() % 1_000,
                    _ => u64::MAX - next() % 3,
                })
                .collect();
            let now: Vec<u64> = before
                .iter()
                .map(|&b| match next() % 8 {
                    // A reset or a 32-bit wrap in some rounds, growth otherwise.
                    0 if round % 3 == 0 => next() % 2_000,
                    1 => b,
                    _ => b.saturating_add(next() % 5_000),
                })
                .take(if round % 10 == 0 { len / 2 } else { len })
                .collect();
            let start: Vec<u64> = (0..len).map(|_| next() % 3 * (u64::MAX / 2)).collect();
            let mut expect = start.clone();
            let mut expect_total = 0u64;
            for ((sum, &n), &o) in expect.iter_mut().zip(&now).zip(&before) {
                let d = counter::delta(o, n).unwrap_or(0);
                *sum = sum.saturating_add(d);
                expect_total = expect_total.saturating_add(d);
            }
            let mut got = start.clone();
            let total = add_growth(&mut got, Row::dense(&now), Row::dense(&before), None);
            assert_eq!(got, expect, "dense: before {before:?} now {now:?}");
            assert_eq!(
                total, expect_total,
                "dense total: before {before:?} now {now:?}"
            );
            // With the lists of non-zero columns, as the parser and the widener give them.
            let nz = |v: &[u64]| -> Vec<u32> {
                (0..v.len() as u32)
                    .filter(|c| v[*c as usize] != 0)
                    .collect()
            };
            let (nz_now, nz_before) = (nz(&now), nz(&before));
            let mut got = start;
            let total = add_growth(
                &mut got,
                Row {
                    counts: &now,
                    nonzero: Some(&nz_now),
                },
                Row {
                    counts: &before,
                    nonzero: Some(&nz_before),
                },
                None,
            );
            assert_eq!(got, expect, "sparse: before {before:?} now {now:?}");
            assert_eq!(
                total, expect_total,
                "sparse total: before {before:?} now {now:?}"
            );
        }
    }

    #[test]
    fn growth_follows_cpus_through_hotplug_and_skips_resets_and_newcomers() {
        let top = u64::from(u32::MAX);
        let before = table(
            &[0, 1, 2],
            &[(10, &[5, 100, top - 1]), (11, &[1_000_000, 0, 0])],
        );
        // CPU 1 went offline; IRQ 10 wrapped on CPU 2; IRQ 11 was reused (reset); 12 is new.
        let now = table(&[0, 2], &[(10, &[8, 3]), (11, &[2, 0]), (12, &[50, 50])]);
        assert_eq!(
            column_map(&before.cpus, &now.cpus),
            Some(vec![Some(0), Some(2)])
        );
        assert_eq!(per_cpu_growth(&before, &now), vec![3, 5]);
        let same = table(&[0, 1, 2], &[(10, &[6, 100, top - 1])]);
        assert_eq!(column_map(&before.cpus, &same.cpus), None);
        assert_eq!(per_cpu_growth(&before, &same), vec![1, 0, 0]);
    }
}
