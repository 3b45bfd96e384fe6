//! Interrupt rates from two samples: the one place where the collapse detector and
//! `nodemedic check` turn two `/proc/interrupts` tables into per-CPU growth.
//!
//! Columns are CPUs through the header, which names only online CPUs: when it changed between
//! the samples (hotplug), each column finds its CPU's earlier column by id. Growth is
//! wrap-aware ([`counter::delta`]); an IRQ whose count went backwards (its number reused by
//! another device) adds nothing, and an IRQ that appeared between the samples adds nothing
//! either, since its whole history is not one interval's work.

use std::collections::HashMap;

use nodemedic_collect::sources::interrupts::{Counts, Interrupts};
use nodemedic_kernel::counter;

/// Adds a row's counts since boot into `sums`, per column.
pub fn add_counts(sums: &mut [u64], row: Counts<'_>) {
    // Only the non-zero counts are stored: on a wide node a few per IRQ.
    for (col, count) in row.nonzero() {
        if let Some(sum) = sums.get_mut(col) {
            *sum = sum.saturating_add(count);
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
    now: Counts<'_>,
    before: Counts<'_>,
    map: Option<&[Option<usize>]>,
) -> u64 {
    let mut total = 0u64;
    let Some(map) = map else {
        // Columns line up: only those non-zero in either table can have grown (or wrapped),
        // so only they are visited: on a 1024-CPU node a few per IRQ.
        let cells = sums.len().min(now.len()).min(before.len());
        let (mut a, mut b) = (now.nonzero().peekable(), before.nonzero().peekable());
        loop {
            // The union of two ascending lists; a column missing from one reads zero there.
            let (c, n, o) = match (a.peek().copied(), b.peek().copied()) {
                (Some((x, n)), Some((y, o))) if x == y => {
                    a.next();
                    b.next();
                    (x, n, o)
                }
                (Some((x, n)), Some((y, _))) if x < y => {
                    a.next();
                    (x, n, 0)
                }
                (Some((x, n)), None) => {
                    a.next();
                    (x, n, 0)
                }
                (_, Some((y, o))) => {
                    b.next();
                    (y, 0, o)
                }
                (None, None) => break,
            };
            if c < cells {
                let d = counter::delta(o, n).unwrap_or(0);
                sums[c] = sums[c].saturating_add(d);
                total = total.saturating_add(d);
            }
        }
        return total;
    };
    // The header changed (hotplug): each column finds its CPU's earlier count. Every column
    // is visited, since a count gone to zero may have wrapped; this is a rare sample.
    for ((sum, n), col) in sums.iter_mut().zip(now.dense()).zip(map) {
        if let Some(d) = col
            .and_then(|c| before.get(c))
            .and_then(|o| counter::delta(o, n))
        {
            *sum = sum.saturating_add(d);
            total = total.saturating_add(d);
        }
    }
    total
}

/// Per column of `now`, the growth of every IRQ present in both tables.
pub fn per_cpu_growth(before: &Interrupts, now: &Interrupts) -> Vec<u64> {
    let map = column_map(&before.cpus, &now.cpus);
    let rows: HashMap<u32, Counts<'_>> = before
        .irqs
        .iter()
        .map(|l| (l.irq, before.counts(l)))
        .collect();
    let mut sums = vec![0u64; now.cpus.len()];
    for line in &now.irqs {
        if let Some(b) = rows.get(&line.irq) {
            add_growth(&mut sums, now.counts(line), *b, map.as_deref());
        }
    }
    sums
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(cpus: &[u32], rows: &[(u32, &[u64])]) -> Interrupts {
        let mut t = Interrupts::with_cpus(cpus.to_vec());
        for (irq, counts) in rows {
            t.push_irq(*irq, Default::default(), counts);
        }
        t
    }

    /// The pass over non-zero columns against the plain per-cell rule (`delta`, nothing on a
    /// reset) over dense rows, which differ in length and grow, wrap, reset or sit near the
    /// top of u64.
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
            let t = table(&[], &[(1, &now), (1, &before)]);
            let (n, b) = (t.counts(&t.irqs[0]), t.counts(&t.irqs[1]));
            let mut got = start.clone();
            let total = add_growth(&mut got, n, b, None);
            assert_eq!(got, expect, "before {before:?} now {now:?}");
            assert_eq!(total, expect_total, "total: before {before:?} now {now:?}");
            // The same through an identity map, the hotplug pass.
            let identity: Vec<Option<usize>> = (0..len).map(Some).collect();
            let mut got = start;
            let total = add_growth(&mut got, n, b, Some(&identity));
            assert_eq!(got, expect, "mapped: before {before:?} now {now:?}");
            assert_eq!(total, expect_total, "mapped: before {before:?} now {now:?}");
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
