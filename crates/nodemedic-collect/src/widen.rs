//! The exported `_total` counters of `/proc/interrupts` and `/proc/softirqs` as 64-bit
//! counts nodemedic accumulates, from the kernel's 32-bit readings ([`nodemedic_kernel::counter`]
//! says why they wrap).

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;

use nodemedic_kernel::counter::delta;

use crate::sources::interrupts::Interrupts;
use crate::sources::softirqs::Softirqs;

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
    /// The storage of the counts the last table was read with, kept to write the next
    /// table's widened counts into: a widened count can be non-zero where the reading is
    /// zero (a counter reset to zero keeps its total), so they are written beside the
    /// reading rather than over it. A table's non-zero counts, a few KiB.
    spare: (Vec<u32>, Vec<u64>),
}

impl Widener {
    pub fn widen_interrupts(&mut self, ints: &mut Interrupts) {
        // The previous header, needed only to place the cells of IRQs that went away when
        // it differs from this one.
        let old_cpus = (self.irqs.cpus != ints.cpus).then(|| self.irqs.cpus.clone());
        let (cols, counts) = &mut self.spare;
        cols.clear();
        counts.clear();
        let gone = self.irqs.widen_sparse(ints, cols, counts);
        ints.swap_cells(cols, counts);
        let cpus = &ints.cpus;
        let old_cpus = old_cpus.as_deref().unwrap_or(cpus);
        for cells in gone {
            for (col, cell) in cells {
                if let Some(cpu) = old_cpus.get(col as usize) {
                    let r = self.retired.entry(*cpu).or_default();
                    *r = r.saturating_add(cell.total);
                }
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
            cpus,
            ints.arch
                .iter_mut()
                .map(|l| (l.name.as_str(), &mut l.counts)),
        );
    }

    pub fn widen_softirqs(&mut self, s: &mut Softirqs) {
        let _gone = self.softirqs.widen(
            &s.cpus,
            s.rows.iter_mut().map(|r| (r.name.as_str(), &mut r.counts)),
        );
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cell {
    raw: u64,
    total: u64,
}

/// One row's cells that have ever been non-zero, by column, sorted. A cell that is absent
/// reads as zero and has accumulated zero, which is every cell of an IRQ the kernel never
/// delivered on that CPU: on a 1024-CPU node over 98% of them, so a dense row would spend
/// 16 bytes on each of 600,000 zeros (BENCHMARKS.md, "Scale").
#[derive(Debug, Default)]
struct Row {
    cells: Vec<(u32, Cell)>,
    /// The last call that saw this row.
    seen: u64,
}

/// The increase from `cell`, with a reset adding nothing.
fn advance(cell: &mut Cell, count: u64) -> u64 {
    cell.total = cell
        .total
        .saturating_add(delta(cell.raw, count).unwrap_or(0));
    cell.raw = count;
    cell.total
}

/// Where widened cells go: the columns and counts of the table being written, non-zero only.
struct Out<'o> {
    cols: &'o mut Vec<u32>,
    counts: &'o mut Vec<u64>,
}

impl Out<'_> {
    fn push(&mut self, col: u32, total: u64) {
        if total != 0 {
            self.cols.push(col);
            self.counts.push(total);
        }
    }
}

impl Row {
    /// Widens `counts` in place, column for column with this row's cells.
    fn widen_aligned(&mut self, counts: &mut [u64]) {
        // Cells of columns a shorter row (no kernel writes one) no longer has are dropped.
        let keep = self
            .cells
            .partition_point(|(c, _)| (*c as usize) < counts.len());
        self.cells.truncate(keep);
        // First the non-zero readings of cells not stored yet (from zero, the count is the
        // increase): a tight pass, since almost every count of a wide table is zero.
        let mut added = Vec::new();
        let mut k = 0;
        for (chunk_no, chunk) in counts.chunks(8).enumerate() {
            // Eight zeros at a time: one OR of the chunk, which the compiler vectorises.
            if chunk.iter().fold(0, |any, &c| any | c) == 0 {
                continue;
            }
            for (i, &count) in chunk.iter().enumerate() {
                let col = chunk_no * 8 + i;
                if count == 0 {
                    continue;
                }
                while self.cells.get(k).is_some_and(|(c, _)| (*c as usize) < col) {
                    k += 1;
                }
                if self.cells.get(k).is_none_or(|(c, _)| *c as usize != col) {
                    added.push((
                        col as u32,
                        Cell {
                            raw: count,
                            total: count,
                        },
                    ));
                }
            }
        }
        // Then the stored cells, which are few.
        for (col, cell) in &mut self.cells {
            if let Some(count) = counts.get_mut(*col as usize) {
                *count = advance(cell, *count);
            }
        }
        self.add(added);
    }

    /// Cells new to the row, in order.
    fn add(&mut self, added: Vec<(u32, Cell)>) {
        if !added.is_empty() {
            self.cells.extend(added);
            self.cells.sort_unstable_by_key(|(c, _)| *c);
        }
    }

    /// Widens a sparse row of `width` columns, read non-zero at `cols` (ascending) with
    /// `counts`, into `out`. Only the columns read non-zero now or stored are visited: on a
    /// 1024-CPU node a few per IRQ.
    fn widen_sparse(&mut self, width: usize, cols: &[u32], counts: &[u64], out: &mut Out<'_>) {
        let keep = self.cells.partition_point(|(c, _)| (*c as usize) < width);
        self.cells.truncate(keep);
        let mut added = Vec::new();
        let (mut i, mut j) = (0, 0);
        // The union of the two ascending lists; a stored column not read is read as zero.
        loop {
            let stored = self.cells.get_mut(i);
            let read = cols.get(j).zip(counts.get(j));
            match (stored, read) {
                (None, None) => break,
                (Some((c, cell)), Some((&r, &count))) if *c == r => {
                    out.push(r, advance(cell, count));
                    i += 1;
                    j += 1;
                }
                (Some((c, cell)), read) if read.is_none_or(|(&r, _)| *c < r) => {
                    out.push(*c, advance(cell, 0));
                    i += 1;
                }
                (_, Some((&r, &count))) => {
                    // From zero, the count is the increase.
                    added.push((
                        r,
                        Cell {
                            raw: count,
                            total: count,
                        },
                    ));
                    out.push(r, count);
                    j += 1;
                }
                // Unreachable: a stored cell with no reading took the arm above.
                (Some(_), None) => break,
            }
        }
        self.add(added);
    }

    /// Widens `counts` under a new header: each column finds its CPU's cell by id (`col_of`
    /// maps a new column to the old one); a CPU new to the header starts from zero.
    fn widen_remapped(&mut self, counts: &mut [u64], col_of: impl Fn(usize) -> Option<usize>) {
        let old = std::mem::take(&mut self.cells);
        for (col, count) in counts.iter_mut().enumerate() {
            if let Some(total) = self.remap_cell(&old, col, *count, &col_of) {
                *count = total;
            }
        }
    }

    /// [`Row::widen_remapped`] for a sparse row of `width` columns (see
    /// [`Row::widen_sparse`]). Every column is visited: a header changes when a CPU goes
    /// offline or comes back, not from one sample to the next.
    fn widen_remapped_sparse(
        &mut self,
        width: usize,
        cols: &[u32],
        counts: &[u64],
        col_of: impl Fn(usize) -> Option<usize>,
        out: &mut Out<'_>,
    ) {
        let old = std::mem::take(&mut self.cells);
        let mut read = cols.iter().zip(counts).peekable();
        for col in 0..width {
            let count = match read.peek() {
                Some((&c, &count)) if c as usize == col => {
                    read.next();
                    count
                }
                _ => 0,
            };
            if let Some(total) = self.remap_cell(&old, col, count, &col_of) {
                out.push(col as u32, total);
            }
        }
    }

    /// Column `col` of a row under a new header, read as `count`: its CPU's old cell
    /// (`col_of` finds its old column in `old`) advanced and stored, and the widened count;
    /// `None` for a cell that never counted (nothing is stored for it).
    fn remap_cell(
        &mut self,
        old: &[(u32, Cell)],
        col: usize,
        count: u64,
        col_of: impl Fn(usize) -> Option<usize>,
    ) -> Option<u64> {
        let mut cell = col_of(col)
            .and_then(|c| {
                old.binary_search_by_key(&(c as u32), |(c, _)| *c)
                    .ok()
                    .map(|i| old[i].1)
            })
            .unwrap_or(Cell { raw: 0, total: 0 });
        if cell.total == 0 && count == 0 && cell.raw == 0 {
            return None;
        }
        let total = advance(&mut cell, count);
        self.cells.push((col as u32, cell));
        Some(total)
    }
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
    /// Widens `rows` in place; returns the (column, cell) pairs of the rows that are gone
    /// since the previous call (columns of the previous header). Rows are looked up by a
    /// borrowed key (`&str` for a `String` key): one is made only for a row new to the table.
    fn widen<'a, Q>(
        &mut self,
        cpus: &[u32],
        rows: impl Iterator<Item = (&'a Q, &'a mut Vec<u64>)>,
    ) -> Vec<Vec<(u32, Cell)>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized + 'a,
    {
        let (call, old_col) = self.begin(cpus);
        for (key, counts) in rows {
            match self.rows.get_mut(key) {
                Some(row) if row.seen != call => {
                    row.seen = call;
                    match &old_col {
                        None => row.widen_aligned(counts),
                        Some(map) => {
                            row.widen_remapped(counts, |col| map.get(col).copied().flatten())
                        }
                    }
                }
                // New (or the same key twice in one file, which no kernel writes): as read.
                _ => {
                    let cells = counts
                        .iter()
                        .enumerate()
                        .filter(|(_, c)| **c != 0)
                        .map(|(col, c)| (col as u32, Cell { raw: *c, total: *c }))
                        .collect();
                    self.rows.insert(key.to_owned(), Row { cells, seen: call });
                }
            }
        }
        self.end(call, cpus)
    }

    /// Starts a call: its number, and unless the header is the same as the last call's, per
    /// column of `cpus` the column its CPU had then. Columns are CPU ids (the header names
    /// only online CPUs): when the header changed, each new column finds its CPU's old
    /// column by id.
    fn begin(&mut self, cpus: &[u32]) -> (u64, Option<Vec<Option<usize>>>) {
        self.calls += 1;
        let old_col = (self.cpus != cpus).then(|| {
            cpus.iter()
                .map(|c| self.cpus.iter().position(|x| x == c))
                .collect()
        });
        (self.calls, old_col)
    }

    /// Ends call `call`: forgets the rows it did not see and returns their cells.
    fn end(&mut self, call: u64, cpus: &[u32]) -> Vec<Vec<(u32, Cell)>> {
        let mut gone = Vec::new();
        self.rows.retain(|_, row| {
            if row.seen == call {
                true
            } else {
                gone.push(std::mem::take(&mut row.cells));
                false
            }
        });
        if self.cpus != cpus {
            self.cpus = cpus.to_vec();
        }
        gone
    }
}

impl Table<u32> {
    /// [`Table::widen`] for the numbered rows of `/proc/interrupts`, which keep their
    /// non-zero counts only: the widened counts are written into `cols` and `counts`
    /// (empty), and the rows are pointed at them there.
    fn widen_sparse(
        &mut self,
        ints: &mut Interrupts,
        cols: &mut Vec<u32>,
        counts: &mut Vec<u64>,
    ) -> Vec<Vec<(u32, Cell)>> {
        let (call, old_col) = self.begin(&ints.cpus);
        let (rows, read_cols, read_counts) = ints.rows_and_cells();
        cols.reserve(read_cols.len());
        counts.reserve(read_counts.len());
        let mut out = Out { cols, counts };
        for line in rows {
            let (read_cols, read_counts) = {
                let (s, e) = line.cells();
                (
                    read_cols.get(s..e).unwrap_or_default(),
                    read_counts.get(s..e).unwrap_or_default(),
                )
            };
            let start = out.cols.len();
            let width = line.width();
            match self.rows.get_mut(&line.irq) {
                Some(row) if row.seen != call => {
                    row.seen = call;
                    match &old_col {
                        None => row.widen_sparse(width, read_cols, read_counts, &mut out),
                        Some(map) => row.widen_remapped_sparse(
                            width,
                            read_cols,
                            read_counts,
                            |col| map.get(col).copied().flatten(),
                            &mut out,
                        ),
                    }
                }
                // New (or the same IRQ twice in one file, which no kernel writes): as read.
                _ => {
                    let cells = read_cols
                        .iter()
                        .zip(read_counts)
                        .map(|(&col, &c)| (col, Cell { raw: c, total: c }))
                        .collect();
                    self.rows.insert(line.irq, Row { cells, seen: call });
                    for (&col, &c) in read_cols.iter().zip(read_counts) {
                        out.push(col, c);
                    }
                }
            }
            line.set_cells(start, out.cols.len());
        }
        self.end(call, &ints.cpus)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOP: u64 = u32::MAX as u64;

    fn ints(cpus: &[u32], rows: &[(u32, &[u64])]) -> Interrupts {
        let mut t = Interrupts::with_cpus(cpus.to_vec());
        for (irq, counts) in rows {
            t.push_irq(*irq, Default::default(), counts);
        }
        t
    }

    /// Row `row`'s counts, zeros included.
    fn counts(t: &Interrupts, row: usize) -> Vec<u64> {
        t.counts(&t.irqs[row]).to_vec()
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
        assert_eq!(counts(&a, 0), vec![TOP - 5, 7]);
        assert!(a.retired.is_empty());
        // IRQ 30 wraps on CPU 0; IRQ 31 is reused by another device (reset).
        let b = widened(&mut w, ints(&[0, 1], &[(30, &[4, 9]), (31, &[2, 1])]));
        assert_eq!(counts(&b, 0), vec![TOP + 5, 9]);
        assert_eq!(counts(&b, 1), vec![100, 1]);
        // CPU 0 goes offline: CPU 1's column moves, its count continues; IRQ 31 is freed.
        let c = widened(&mut w, ints(&[1], &[(30, &[19])]));
        assert_eq!(counts(&c, 0), vec![19]);
        assert_eq!(c.retired, vec![1], "IRQ 31's 1 interrupt on CPU 1 is kept");
        // CPU 0 back: its counts start again from the kernel's value.
        let d = widened(&mut w, ints(&[0, 1], &[(30, &[6, 20])]));
        assert_eq!(counts(&d, 0), vec![6, 20]);
        assert_eq!(d.retired, vec![0, 1]);
    }

    /// The sparse rows against the plainest reading of the rules (a map of every
    /// (IRQ, CPU) cell ever seen), over tables with zeros, wraps, resets, IRQs that come and
    /// go, and CPUs going offline and online, driven by `choices` (proptest shrinks them).
    fn sparse_rows_agree_with_a_plain_map_of_every_cell(choices: &[u64], steps: usize) {
        let mut at = 0usize;
        let mut next = move |n: u64| {
            let c = choices[at % choices.len()];
            at += 1;
            c % n
        };
        let mut w = Widener::default();
        // (irq, cpu) -> (raw, total); per-CPU retired totals.
        let mut plain: HashMap<(u32, u32), (u64, u64)> = HashMap::new();
        let mut plain_retired: HashMap<u32, u64> = HashMap::new();
        let mut raws: HashMap<(u32, u32), u64> = HashMap::new();
        for step in 0..steps {
            let cpus: Vec<u32> = (0..6u32).filter(|c| *c == 0 || next(8) != 0).collect();
            let irqs: Vec<u32> = (0..8u32).filter(|_| next(10) != 0).collect();
            let mut rows = Vec::new();
            for &irq in &irqs {
                let counts: Vec<u64> = cpus
                    .iter()
                    .map(|&cpu| {
                        let raw = raws.entry((irq, cpu)).or_insert(0);
                        *raw = match next(20) {
                            0 => next(50),                           // reset
                            1 => (*raw + (1 << 31) / 2) % (TOP + 1), // big step, may wrap
                            2..=11 => *raw,                          // idle (often zero)
                            _ => (*raw + next(1000)) % (TOP + 1),
                        };
                        *raw
                    })
                    .collect();
                rows.push((irq, counts));
            }
            let table = ints(
                &cpus,
                &rows
                    .iter()
                    .map(|(i, c)| (*i, c.as_slice()))
                    .collect::<Vec<_>>(),
            );
            let got = widened(&mut w, table);
            // The widened rows keep only non-zero counts, in ascending columns.
            for line in &got.irqs {
                let (cols, counts) = got.counts(line).parts();
                assert!(counts.iter().all(|c| *c != 0), "step {step}");
                assert!(cols.windows(2).all(|w| w[0] < w[1]), "step {step}");
            }
            // The plain rules: an unseen cell starts from its reading (from zero, that is the
            // increase); gone rows retire their totals; offline CPUs' cells are dropped.
            let mut next_plain = HashMap::new();
            for (irq, counts) in &rows {
                for (cpu, &raw) in cpus.iter().zip(counts) {
                    let total = match plain.get(&(*irq, *cpu)) {
                        Some(&(r, t)) => t.saturating_add(delta(r, raw).unwrap_or(0)),
                        None => raw,
                    };
                    next_plain.insert((*irq, *cpu), (raw, total));
                }
            }
            for ((irq, cpu), (_, total)) in &plain {
                if !irqs.contains(irq) {
                    *plain_retired.entry(*cpu).or_default() += total;
                }
            }
            plain_retired.retain(|cpu, _| cpus.contains(cpu));
            plain = next_plain;
            for (i, (irq, _)) in rows.iter().enumerate() {
                let want: Vec<u64> = cpus.iter().map(|c| plain[&(*irq, *c)].1).collect();
                assert_eq!(counts(&got, i), want, "step {step}, IRQ {irq}");
            }
            let want_retired: Vec<u64> = cpus
                .iter()
                .map(|c| plain_retired.get(c).copied().unwrap_or(0))
                .collect();
            // Nothing retired is an empty list or zeros (IRQs that went away with no
            // interrupts counted retire nothing).
            if got.retired.is_empty() {
                assert!(
                    want_retired.iter().all(|t| *t == 0),
                    "step {step}: {want_retired:?}"
                );
            } else {
                assert_eq!(got.retired, want_retired, "step {step}");
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(64))]

        #[test]
        fn widener_agrees_with_its_model(
            choices in proptest::collection::vec(proptest::prelude::any::<u64>(), 1..4000),
        ) {
            sparse_rows_agree_with_a_plain_map_of_every_cell(&choices, 150);
        }
    }
}
