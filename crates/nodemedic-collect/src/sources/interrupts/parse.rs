//! `/proc/interrupts`.
//!
//! The layout varies more than it looks: the header names only online CPUs (so columns are
//! mapped by the `CPUn` header, never by position), aarch64 labels such as `IPI0:` can run
//! straight into the first count on wide machines, some rows (`ERR`, `MIS`) carry a single
//! count, and the chip/hwirq/trigger columns differ between x86 (`IR-PCI-MSIX-0000:3b:00.0
//! 5-edge`), older x86 (`IO-APIC-edge`) and GIC (`GICv3  27 Level`).

use std::sync::Arc;

use nodemedic_kernel::{
    leading_counts_into, parse_cpu_header_into, scan_counts, SkipReason, SkippedLine, TableError,
};
use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};

pub type InterruptsError = TableError;

/// One parse of `/proc/interrupts`.
///
/// The numbered rows keep only their non-zero counts, all rows' in one place (`cols` and
/// `counts`, row after row, each row's columns ascending): an IRQ counts on the few CPUs it
/// has been routed to, so on a 1024-CPU node 99% of the cells are zero. A dense `Vec<u64>` per
/// row was 8 KiB and an allocation for each of 600 rows every sample; the table now makes two
/// vectors for all of them, and 12 bytes per non-zero count (BENCHMARKS.md, "Sparse IRQ
/// counts"). [`Interrupts::counts`] reads a row; every cell not stored is a zero.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interrupts {
    /// CPU ids in header order; column `i` of every row belongs to `cpus[i]`.
    pub cpus: Vec<u32>,
    /// Numbered (device) interrupts.
    pub irqs: Vec<IrqLine>,
    /// Architecture rows (`NMI`, `LOC`, `IPI0`, `ERR`, …).
    pub arch: Vec<ArchLine>,
    pub skipped: Vec<SkippedLine>,
    /// Per CPU (aligned with `cpus`), the interrupts of IRQs that disappeared while nodemedic
    /// watched, so that per-CPU sums stay monotonic. Filled by [`crate::widen::Widener`];
    /// empty from the parser.
    pub retired: Vec<u64>,
    /// The column of every non-zero count of `irqs`, row after row (see [`IrqLine`]).
    cols: Vec<u32>,
    /// Those counts, aligned with `cols`; none is zero.
    counts: Vec<u64>,
}

/// A numbered row. Its counts are in its table: [`Interrupts::counts`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IrqLine {
    pub irq: u32,
    /// What follows the counts. Shared with the previous table's row when it reads the same
    /// (see [`Parser::reusing`]).
    pub desc: Arc<IrqDescription>,
    /// How many count columns the row has: at most the header's CPUs (a kernel prints them
    /// all; a row cut short has fewer).
    width: u32,
    /// Where the row's non-zero counts are in the table's `cols` and `counts`.
    start: usize,
    end: usize,
}

/// One row's counts, read from its table: `len` columns, of which `cols` (ascending) hold the
/// non-zero `values`, and every other column a zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts<'a> {
    len: usize,
    cols: &'a [u32],
    values: &'a [u64],
}

impl<'a> Counts<'a> {
    /// How many columns the row has, zeros included.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The count of column `col`; `None` past the row's end.
    pub fn get(&self, col: usize) -> Option<u64> {
        if col >= self.len {
            return None;
        }
        let at = self.cols.binary_search(&u32::try_from(col).ok()?);
        Some(at.map_or(0, |i| self.values[i]))
    }

    /// The non-zero counts with their columns, ascending.
    pub fn nonzero(&self) -> impl Iterator<Item = (usize, u64)> + 'a {
        self.cols
            .iter()
            .map(|c| *c as usize)
            .zip(self.values.iter().copied())
    }

    /// The columns of the non-zero counts, ascending, and those counts.
    pub fn parts(&self) -> (&'a [u32], &'a [u64]) {
        (self.cols, self.values)
    }

    /// Every column's count, zeros included, in order.
    pub fn dense(&self) -> impl Iterator<Item = u64> + 'a {
        let mut cells = self.nonzero().peekable();
        (0..self.len).map(move |col| match cells.peek() {
            Some(&(c, v)) if c == col => {
                cells.next();
                v
            }
            _ => 0,
        })
    }

    pub fn to_vec(&self) -> Vec<u64> {
        self.dense().collect()
    }

    /// The sum over columns (saturating).
    pub fn total(&self) -> u64 {
        self.values.iter().fold(0u64, |a, c| a.saturating_add(*c))
    }
}

impl Serialize for Counts<'_> {
    /// As the dense list it stands for.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.dense())
    }
}

impl IrqLine {
    /// A row of IRQ `irq` with no counts (rows for what reads only the descriptions).
    pub fn new(irq: u32, desc: Arc<IrqDescription>) -> Self {
        IrqLine {
            irq,
            desc,
            width: 0,
            start: 0,
            end: 0,
        }
    }

    /// Whether any CPU shown has taken this IRQ (a count is not zero).
    pub fn has_fired(&self) -> bool {
        self.end > self.start
    }

    /// Where the row's non-zero counts are in its table.
    pub(crate) fn cells(&self) -> (usize, usize) {
        (self.start, self.end)
    }

    pub(crate) fn set_cells(&mut self, start: usize, end: usize) {
        self.start = start;
        self.end = end;
    }

    /// How many columns the row has, zeros included.
    pub(crate) fn width(&self) -> usize {
        self.width as usize
    }
}

impl Interrupts {
    /// Empties the table, keeping the storage of its lists. The architecture rows stay, as
    /// storage the next parse writes its rows into ([`Parser::arch_rows`]).
    fn clear(&mut self) {
        let Interrupts {
            cpus,
            irqs,
            arch: _,
            skipped,
            retired,
            cols,
            counts,
        } = self;
        cpus.clear();
        irqs.clear();
        skipped.clear();
        retired.clear();
        cols.clear();
        counts.clear();
    }

    /// A table of `cpus` with no rows yet (see [`Interrupts::push_irq`]).
    pub fn with_cpus(cpus: Vec<u32>) -> Self {
        Interrupts {
            cpus,
            ..Default::default()
        }
    }

    /// A row's counts. `line` must be a row of this table (another table's reads as
    /// whatever this one holds there, or as zeros).
    pub fn counts(&self, line: &IrqLine) -> Counts<'_> {
        let range = line.start..line.end;
        let (cols, values) = match (self.cols.get(range.clone()), self.counts.get(range)) {
            (Some(c), Some(v)) => (c, v),
            _ => (&[][..], &[][..]),
        };
        Counts {
            len: line.width as usize,
            cols,
            values,
        }
    }

    /// Appends a numbered row of `counts` (one per column): tables built by tests and tools.
    pub fn push_irq(&mut self, irq: u32, desc: Arc<IrqDescription>, counts: &[u64]) {
        let start = self.cols.len();
        for (col, count) in counts.iter().enumerate().filter(|(_, c)| **c != 0) {
            self.cols.push(col as u32);
            self.counts.push(*count);
        }
        self.irqs.push(IrqLine {
            width: u32::try_from(counts.len()).unwrap_or(u32::MAX),
            start,
            end: self.cols.len(),
            ..IrqLine::new(irq, desc)
        });
    }

    /// Sets the count of row `row`, column `col` (tests and tools; a parse or a widening
    /// writes whole tables). Nothing happens past the row's columns.
    pub fn set_count(&mut self, row: usize, col: usize, count: u64) {
        let Some(line) = self.irqs.get(row) else {
            return;
        };
        let (Ok(c), true) = (u32::try_from(col), col < line.width as usize) else {
            return;
        };
        let (start, end) = (line.start, line.end);
        match self.cols[start..end].binary_search(&c) {
            Ok(i) if count != 0 => self.counts[start + i] = count,
            Ok(i) => {
                self.cols.remove(start + i);
                self.counts.remove(start + i);
                self.shift_after(row, -1);
            }
            Err(_) if count == 0 => {}
            Err(i) => {
                self.cols.insert(start + i, c);
                self.counts.insert(start + i, count);
                self.shift_after(row, 1);
            }
        }
    }

    /// Moves the end of row `row` and the rows after it by one cell.
    fn shift_after(&mut self, row: usize, by: isize) {
        for (i, line) in self.irqs.iter_mut().enumerate().skip(row) {
            if i > row {
                line.start = line.start.saturating_add_signed(by);
            }
            line.end = line.end.saturating_add_signed(by);
        }
    }

    /// Each row's IRQ and description, in order, into `out` (cleared first): what
    /// [`Parser::reusing`] takes to share them with the next table.
    pub fn descriptions(&self, out: &mut Vec<(u32, Arc<IrqDescription>)>) {
        out.clear();
        out.extend(self.irqs.iter().map(|l| (l.irq, Arc::clone(&l.desc))));
    }

    /// `(cpu, count)` of every column of a row, zeros included, mapped through the header.
    pub fn per_cpu<'a>(&'a self, line: &IrqLine) -> impl Iterator<Item = (u32, u64)> + 'a {
        self.cpus.iter().copied().zip(self.counts(line).dense())
    }

    /// How many non-zero counts the numbered rows hold.
    pub fn cells(&self) -> usize {
        self.cols.len()
    }

    /// The widener's access to the rows and their counts at once (it writes a new set of
    /// counts beside the old and swaps them in, see [`crate::widen::Widener`]).
    pub(crate) fn rows_and_cells(&mut self) -> (&mut [IrqLine], &[u32], &[u64]) {
        (&mut self.irqs, &self.cols, &self.counts)
    }

    /// Puts `cols` and `counts` in as the rows' counts and hands the old ones back (as
    /// spare storage) in their place. The rows' offsets must already point into the new ones.
    pub(crate) fn swap_cells(&mut self, cols: &mut Vec<u32>, counts: &mut Vec<u64>) {
        std::mem::swap(&mut self.cols, cols);
        std::mem::swap(&mut self.counts, counts);
    }
}

/// Serialized as it always was: each row with its dense counts and its description.
impl Serialize for Interrupts {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Row<'a> {
            irq: u32,
            counts: Counts<'a>,
            #[serde(flatten)]
            desc: &'a IrqDescription,
        }
        struct Rows<'a>(&'a Interrupts);
        impl Serialize for Rows<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_seq(self.0.irqs.iter().map(|l| Row {
                    irq: l.irq,
                    counts: self.0.counts(l),
                    desc: &l.desc,
                }))
            }
        }
        let fields = if self.retired.is_empty() { 4 } else { 5 };
        let mut st = s.serialize_struct("Interrupts", fields)?;
        st.serialize_field("cpus", &self.cpus)?;
        st.serialize_field("irqs", &Rows(self))?;
        st.serialize_field("arch", &self.arch)?;
        st.serialize_field("skipped", &self.skipped)?;
        if self.retired.is_empty() {
            st.skip_field("retired")?;
        } else {
            st.serialize_field("retired", &self.retired)?;
        }
        st.end()
    }
}

/// What `/proc/interrupts` prints after an IRQ's counts: the chip, the hardware IRQ and
/// trigger, the handlers. It changes when a driver binds or unbinds, not from one sample to
/// the next, so a table parsed with the previous one's descriptions at hand shares them:
/// on a 256-CPU node that is 2,000 strings fewer to allocate every sample.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct IrqDescription {
    pub chip: String,
    pub hwirq: Option<String>,
    pub trigger: Option<String>,
    /// Handler names (`virtio2-input.0`, `mlx5_comp3@pci:0000:3b:00.0`), in kernel order.
    pub actions: Vec<String>,
}

/// An [`IrqDescription`] as it reads in the text, before anything is allocated for it.
struct DescriptionText<'a> {
    chip: &'a str,
    hwirq: Option<&'a str>,
    trigger: Option<&'a str>,
    /// The handlers, comma-separated (see [`DescriptionText::actions`]).
    actions: &'a str,
}

impl<'a> DescriptionText<'a> {
    fn actions(&self) -> impl Iterator<Item = &'a str> {
        self.actions
            .trim()
            // An array of chars, not a `char`: a `char` pattern compares each comma it finds
            // through `bcmp` (nodemedic_kernel::bytes).
            .split([','])
            .map(str::trim)
            .filter(|a| !a.is_empty())
    }

    /// Whether `known` says the same.
    fn reads_as(&self, known: &IrqDescription) -> bool {
        use nodemedic_kernel::bytes::eq_str;
        let same = |k: Option<&str>, t: Option<&str>| match (k, t) {
            (Some(k), Some(t)) => eq_str(k, t),
            (None, None) => true,
            _ => false,
        };
        eq_str(&known.chip, self.chip)
            && same(known.hwirq.as_deref(), self.hwirq)
            && same(known.trigger.as_deref(), self.trigger)
            && {
                let (mut known, mut read) = (known.actions.iter(), self.actions());
                loop {
                    match (known.next(), read.next()) {
                        (Some(k), Some(r)) if eq_str(k, r) => {}
                        (None, None) => break true,
                        _ => break false,
                    }
                }
            }
    }

    fn to_description(&self) -> IrqDescription {
        IrqDescription {
            chip: self.chip.to_string(),
            hwirq: self.hwirq.map(str::to_string),
            trigger: self.trigger.map(str::to_string),
            actions: self.actions().map(str::to_string).collect(),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ArchLine {
    pub name: String,
    pub counts: Vec<u64>,
    pub description: String,
}

impl ArchLine {
    /// The row `name: rest` of a table of `ncpus` CPUs, written into this row's storage.
    fn fill(&mut self, name: &str, rest: &str, ncpus: usize) {
        self.name.clear();
        self.name.push_str(name);
        let used = leading_counts_into(rest, ncpus, &mut self.counts);
        self.description.clear();
        self.description.push_str(rest[used..].trim());
    }
}

pub fn parse(text: &str) -> Result<Interrupts, InterruptsError> {
    Parser::default().parse(text)
}

/// [`parse`] a line at a time, for a reader that streams the file (a 1024-CPU table is
/// 7 MB). `parse` is this parser fed from a string, so the two cannot disagree.
#[derive(Debug, Default)]
pub struct Parser<'k> {
    line_no: usize,
    header: Option<Result<(), InterruptsError>>,
    out: Interrupts,
    /// Descriptions to share, by IRQ, in the order of the table they come from, and where
    /// the next row is expected among them.
    known: &'k [(u32, Arc<IrqDescription>)],
    next_known: usize,
    /// How many of `out.arch` this parse has written: the rows past it are a past table's,
    /// whose name, counts and description are filled again (x86 prints about 25 such rows,
    /// three allocations each when new), and are dropped at the end.
    arch_rows: usize,
}

impl<'k> Parser<'k> {
    /// A parser that gives a row the description of `known` for its IRQ, shared, when the
    /// row reads the same, and allocates one only for a row that is new or changed. The
    /// table is equal to [`parse`]'s. `known` is the previous table's rows, in its order
    /// (see [`Interrupts::descriptions`]).
    ///
    /// The rows are expected to be as many as `known`'s, so the table's list of rows is
    /// allocated once for them rather than grown by doubling (see also
    /// [`Parser::reserve_cells`]).
    pub fn reusing(known: &'k [(u32, Arc<IrqDescription>)]) -> Self {
        Self::reusing_in(known, Interrupts::default())
    }

    /// [`Parser::reusing`], writing the table into `spare`'s storage: a past table that
    /// nothing holds any more, emptied first. Its lists (rows, columns, counts; on a big node
    /// tens of KiB each) are filled again rather than allocated. The table is the same.
    pub fn reusing_in(known: &'k [(u32, Arc<IrqDescription>)], mut spare: Interrupts) -> Self {
        spare.clear();
        let mut p = Parser {
            known,
            out: spare,
            ..Default::default()
        };
        p.out.irqs.reserve_exact(known.len());
        p
    }

    /// Reserves room for `cells` non-zero counts, as many as the previous table held
    /// ([`Interrupts::cells`]): their storage is then allocated once, not grown from empty
    /// by doubling (a dozen reallocations a sample on 256 CPUs). The table is the same.
    pub fn reserve_cells(&mut self, cells: usize) {
        self.out.cols.reserve_exact(cells);
        self.out.counts.reserve_exact(cells);
    }

    /// The description `text` for IRQ `irq`: a known one if it reads the same.
    fn description(&mut self, irq: u32, text: &DescriptionText<'_>) -> Arc<IrqDescription> {
        // The rows come in the previous table's order: the next one is looked at first, and
        // an IRQ that moved is looked up once; after it, the order picks up from there.
        let at = match self.known.get(self.next_known) {
            Some((i, _)) if *i == irq => Some(self.next_known),
            _ => self.known.iter().position(|(i, _)| *i == irq),
        };
        if let Some(at) = at {
            self.next_known = at + 1;
            let known = &self.known[at].1;
            if text.reads_as(known) {
                return Arc::clone(known);
            }
        }
        Arc::new(text.to_description())
    }

    /// One line without its newline; `complete` is false for a last line the file did not
    /// end with a newline (a truncated read: a count cut mid-number still parses as one, so
    /// the line is skipped, not trusted).
    pub fn line(&mut self, line: &str, complete: bool) {
        self.line_no += 1;
        let n = self.line_no;
        if !complete {
            self.out.skipped.push(SkippedLine {
                line: n,
                reason: SkipReason::CutShort,
            });
            return;
        }
        if line.trim().is_empty() {
            return;
        }
        match &self.header {
            None => {
                self.header = Some(
                    parse_cpu_header_into(line, &mut self.out.cpus).map_err(TableError::BadHeader),
                );
            }
            Some(Ok(())) => match parse_row(line, &mut self.out) {
                Ok(Row::Irq {
                    irq,
                    width,
                    start,
                    desc,
                }) => {
                    let desc = self.description(irq, &desc);
                    let end = self.out.cols.len();
                    self.out.irqs.push(IrqLine {
                        irq,
                        desc,
                        width,
                        start,
                        end,
                    });
                }
                Ok(Row::Arch { name, rest }) => {
                    let ncpus = self.out.cpus.len();
                    match self.out.arch.get_mut(self.arch_rows) {
                        Some(row) => row.fill(name, rest, ncpus),
                        None => {
                            let mut row = ArchLine::default();
                            row.fill(name, rest, ncpus);
                            self.out.arch.push(row);
                        }
                    }
                    self.arch_rows += 1;
                }
                Err(reason) => self.out.skipped.push(SkippedLine { line: n, reason }),
            },
            Some(Err(_)) => {}
        }
    }

    /// Every line of `text`, then [`Parser::finish`]: [`parse`] with this parser.
    pub fn parse(mut self, text: &str) -> Result<Interrupts, InterruptsError> {
        for line in text.split_inclusive('\n') {
            match line.strip_suffix('\n') {
                Some(l) => self.line(l.strip_suffix('\r').unwrap_or(l), true),
                None => self.line(line.strip_suffix('\r').unwrap_or(line), false),
            }
        }
        self.finish()
    }

    pub fn finish(mut self) -> Result<Interrupts, InterruptsError> {
        self.out.arch.truncate(self.arch_rows);
        match self.header {
            None => Err(TableError::Empty),
            Some(Err(e)) => Err(e),
            Some(Ok(())) => Ok(self.out),
        }
    }
}

enum Row<'a> {
    /// A numbered row, whose non-zero counts are in the table from `start` on.
    Irq {
        irq: u32,
        width: u32,
        start: usize,
        desc: DescriptionText<'a>,
    },
    /// An architecture row (`NMI`, `LOC`, `IPI0`…): its label and the text after the colon.
    Arch { name: &'a str, rest: &'a str },
}

/// One row of `line`; a numbered row's non-zero counts are appended to `table`'s.
fn parse_row<'a>(line: &'a str, table: &mut Interrupts) -> Result<Row<'a>, SkipReason> {
    let ncpus = table.cpus.len();
    let (label, rest) =
        nodemedic_kernel::bytes::split_once(line, b':').ok_or(SkipReason::NoColon)?;
    let label = label.trim();
    if label.is_empty() {
        return Err(SkipReason::EmptyLabel);
    }
    if label.bytes().all(|b| b.is_ascii_digit()) {
        let irq = label
            .parse::<u32>()
            .map_err(|_| SkipReason::IrqOutOfRange(label.to_string()))?;
        let start = table.cols.len();
        let (cols, counts) = (&mut table.cols, &mut table.counts);
        let (width, used) = scan_counts(rest, ncpus, |col, count| {
            cols.push(col as u32);
            counts.push(count);
        });
        if width == 0 {
            return Err(SkipReason::NoCounts(irq));
        }
        Ok(Row::Irq {
            irq,
            // At most the header's CPUs, which `parse_cpu_header_into` bounds.
            width: u32::try_from(width).unwrap_or(u32::MAX),
            start,
            desc: parse_irq_description(rest[used..].trim()),
        })
    } else {
        if label.chars().any(char::is_whitespace) {
            return Err(SkipReason::LabelWithSpaces(label.to_string()));
        }
        Ok(Row::Arch { name: label, rest })
    }
}

fn parse_irq_description(desc: &str) -> DescriptionText<'_> {
    let (chip, after_chip) = take_token(desc);
    let (tok, after_tok) = take_token(after_chip);
    let (hwirq, trigger, rest) = if let Some((hw, trig)) = split_hwirq_trigger(tok) {
        ((!hw.is_empty()).then_some(hw), Some(trig), after_tok)
    } else if !tok.is_empty() && tok.bytes().all(|b| b.is_ascii_hexdigit()) {
        // GIC style: `27 Level` / `524288 Edge`.
        let (t, after_t) = take_token(after_tok);
        if is_trigger_word(t) {
            (Some(tok), Some(t), after_t)
        } else {
            (Some(tok), None, after_tok)
        }
    } else {
        (None, None, after_chip)
    };
    DescriptionText {
        chip,
        hwirq,
        trigger,
        actions: rest,
    }
}

/// The first whitespace-separated token of `s` and what follows it.
fn take_token(s: &str) -> (&str, &str) {
    let s = s.trim_start();
    let end = s.find(char::is_whitespace).unwrap_or(s.len());
    s.split_at(end)
}

/// `5-edge`, `1572864-edge`, `-ioapic-level` (Xen), `0-fasteoi`.
fn split_hwirq_trigger(tok: &str) -> Option<(&str, &str)> {
    let (hw, trig) = nodemedic_kernel::bytes::split_once(tok, b'-')?;
    let hw_ok = hw.bytes().all(|b| b.is_ascii_hexdigit());
    let trig_ok = !trig.is_empty() && trig.bytes().all(|b| b.is_ascii_alphabetic() || b == b'-');
    (hw_ok && trig_ok).then_some((hw, trig))
}

fn is_trigger_word(t: &str) -> bool {
    ["edge", "level", "fasteoi", "simple", "percpu"]
        .iter()
        .any(|w| t.eq_ignore_ascii_case(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    const X86: &str = "           CPU0       CPU1       \n  0:         52          0   IO-APIC   2-edge      timer\n 28:          0          7 PCI-MSIX-0000:00:01.0   0-edge      virtio0-config\n 41:       1423          0 PCI-MSIX-0000:00:04.0   1-edge      virtio3-rx\n  8:          0          0   IO-APIC   8-edge      rtc0, i8042\nNMI:          0          0   Non-maskable interrupts\nLOC:       7590      10292   Local timer interrupts\nERR:          0\n";

    #[test]
    fn x86_rows() {
        let p = parse(X86).unwrap();
        assert_eq!(p.cpus, vec![0, 1]);
        assert_eq!(p.irqs.len(), 4);
        let virtio = &p.irqs[1];
        assert_eq!(virtio.irq, 28);
        assert_eq!(p.counts(virtio).to_vec(), vec![0, 7]);
        assert_eq!(virtio.desc.chip, "PCI-MSIX-0000:00:01.0");
        assert_eq!(virtio.desc.hwirq.as_deref(), Some("0"));
        assert_eq!(virtio.desc.trigger.as_deref(), Some("edge"));
        assert_eq!(virtio.desc.actions, vec!["virtio0-config"]);
        assert_eq!(p.irqs[3].desc.actions, vec!["rtc0", "i8042"]);
        assert_eq!(p.arch.len(), 3);
        assert_eq!(p.arch[1].name, "LOC");
        assert_eq!(p.arch[1].counts, vec![7590, 10292]);
        assert_eq!(p.arch[1].description, "Local timer interrupts");
        assert_eq!(p.arch[2].counts, vec![0]);
        assert!(p.skipped.is_empty());
    }

    /// A parser given the previous table's descriptions gives the table `parse` gives,
    /// sharing the descriptions of the rows that read the same, and only those.
    #[test]
    fn reusing_shares_the_descriptions_that_read_the_same() {
        let before = parse(X86).unwrap();
        let mut known = Vec::new();
        before.descriptions(&mut known);
        // IRQ 0 moved after 28, IRQ 41's handler renamed, IRQ 8 gone, IRQ 9 new.
        let text = "           CPU0       CPU1
                     28:          0          9 PCI-MSIX-0000:00:01.0   0-edge      virtio0-config
                      0:         60          0   IO-APIC   2-edge      timer
                     41:       1500          0 PCI-MSIX-0000:00:04.0   1-edge      virtio3-tx
                      9:          1          0   IO-APIC   9-fasteoi   acpi
";
        let mut p = Parser::reusing(&known);
        for line in text.lines() {
            p.line(line, true);
        }
        let after = p.finish().unwrap();
        assert_eq!(after, parse(text).unwrap());
        let shared: Vec<bool> = after
            .irqs
            .iter()
            .map(|l| before.irqs.iter().any(|b| Arc::ptr_eq(&b.desc, &l.desc)))
            .collect();
        assert_eq!(shared, [true, true, false, false]);
    }

    #[test]
    fn offline_cpus_map_by_header() {
        let text = "           CPU0       CPU1       CPU3       CPU6\n 30:  1  2  3  4   IR-PCI-MSIX-0000:3b:00.0    5-edge      mlx5_comp4@pci:0000:3b:00.0\n";
        let p = parse(text).unwrap();
        assert_eq!(p.cpus, vec![0, 1, 3, 6]);
        let pairs: Vec<_> = p.per_cpu(&p.irqs[0]).collect();
        assert_eq!(pairs, vec![(0, 1), (1, 2), (3, 3), (6, 4)]);
        assert_eq!(p.irqs[0].desc.chip, "IR-PCI-MSIX-0000:3b:00.0");
        assert_eq!(p.irqs[0].desc.actions, vec!["mlx5_comp4@pci:0000:3b:00.0"]);
    }

    #[test]
    fn aarch64_rows() {
        let text = "           CPU0       CPU1\n 11:      12345      67890     GICv3  27 Level     arch_timer\n 50:          0          9   ITS-MSI 524288 Edge      nvme0q1\nIPI0:1234567890 1234567890       Rescheduling interrupts\nErr:          0\n";
        let p = parse(text).unwrap();
        assert_eq!(p.irqs[0].desc.chip, "GICv3");
        assert_eq!(p.irqs[0].desc.hwirq.as_deref(), Some("27"));
        assert_eq!(p.irqs[0].desc.trigger.as_deref(), Some("Level"));
        assert_eq!(p.irqs[0].desc.actions, vec!["arch_timer"]);
        assert_eq!(p.irqs[1].desc.actions, vec!["nvme0q1"]);
        assert_eq!(p.arch[0].name, "IPI0");
        assert_eq!(p.arch[0].counts, vec![1234567890, 1234567890]);
        assert_eq!(p.arch[1].name, "Err");
    }

    #[test]
    fn old_x86_chip_with_trigger() {
        let text =
            "     CPU0\n  1:   9   IO-APIC-edge      i8042\n 24: 5 PCI-MSI-edge eth0-TxRx-0\n";
        let p = parse(text).unwrap();
        assert_eq!(p.irqs[0].desc.chip, "IO-APIC-edge");
        assert_eq!(p.irqs[0].desc.hwirq, None);
        assert_eq!(p.irqs[0].desc.actions, vec!["i8042"]);
        assert_eq!(p.irqs[1].desc.actions, vec!["eth0-TxRx-0"]);
    }

    #[test]
    fn fewer_counts_than_cpus() {
        let text = "   CPU0 CPU1 CPU2\n 5: 1 2\nMIS: 3\n";
        let p = parse(text).unwrap();
        assert_eq!(p.counts(&p.irqs[0]).to_vec(), vec![1, 2]);
        assert_eq!(p.irqs[0].desc.chip, "");
        assert_eq!(p.arch[0].counts, vec![3]);
    }

    #[test]
    fn truncated_last_line_is_reported_not_trusted() {
        let text = "   CPU0 CPU1\n 5: 1 2 PCI-MSI 1-edge a\n 6: 12";
        let p = parse(text).unwrap();
        assert_eq!(p.irqs.len(), 1);
        assert_eq!(p.skipped.len(), 1);
        assert_eq!(p.skipped[0].line, 3);
    }

    /// A table written from `rows` (IRQ, counts; `None` for an arch row), with the
    /// kernel's `%10u` columns or single spaces.
    fn table_text(cpus: &[u32], rows: &[(Option<u32>, Vec<u64>)], wide: bool) -> String {
        let mut t: String = cpus.iter().map(|c| format!("  CPU{c}")).collect();
        t.push('\n');
        for (n, (irq, counts)) in rows.iter().enumerate() {
            match irq {
                Some(irq) => t.push_str(&format!("{irq:>4}:")),
                None => t.push_str(&format!("A{n}:")),
            }
            for c in counts {
                t.push_str(&if wide {
                    format!(" {c:>10}")
                } else {
                    format!(" {c}")
                });
            }
            t.push_str("   PCI-MSIX-0000:3b:00.0 7-edge      mlx5_comp7@pci:0000:3b:00.0\n");
        }
        t
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(256))]

        /// The sparse rows mean what the dense ones did: every cell's count, the row's
        /// length, its total and its non-zero columns are those written, through `parse`,
        /// through a parser reusing the previous table's descriptions and size alike, and
        /// through one writing into a past table's storage.
        #[test]
        fn sparse_rows_read_as_the_dense_counts_written(
            ids in proptest::collection::btree_set(0u32..64, 1..10),
            rows in proptest::collection::vec(
                (
                    proptest::option::weighted(0.8, 0u32..40),
                    proptest::collection::vec(
                        proptest::prop_oneof![
                            6 => proptest::strategy::Just(0u64),
                            3 => 1u64..5_000,
                            1 => proptest::prelude::any::<u64>(),
                        ],
                        1..12,
                    ),
                ),
                0..24,
            ),
            wide in proptest::prelude::any::<bool>(),
        ) {
            let cpus: Vec<u32> = ids.into_iter().collect();
            let rows: Vec<(Option<u32>, Vec<u64>)> = rows
                .into_iter()
                .map(|(irq, mut c)| {
                    c.truncate(cpus.len());
                    (irq, c)
                })
                .collect();
            let text = table_text(&cpus, &rows, wide);
            let p = parse(&text).unwrap();
            let mut known = Vec::new();
            p.descriptions(&mut known);
            let mut again = Parser::reusing(&known);
            again.reserve_cells(p.cells());
            for line in text.lines() {
                again.line(line, true);
            }
            proptest::prop_assert_eq!(&again.finish().unwrap(), &p);
            // And into the storage of another table, widened (`retired` filled) as the
            // engine leaves it, with more architecture rows than most tables written here
            // and fewer than some: nothing of it remains.
            let mut spare = parse(&table_text(
                &[0, 1, 2],
                &[
                    (Some(99), vec![5, 0, 7]),
                    (None, vec![1, 2, 3]),
                    (None, vec![8]),
                    (None, vec![4, 0, 6]),
                ],
                false,
            ))
            .unwrap();
            spare.retired = vec![4, 5, 6];
            let mut into = Parser::reusing_in(&known, spare);
            for line in text.lines() {
                into.line(line, true);
            }
            proptest::prop_assert_eq!(&into.finish().unwrap(), &p);
            let written: Vec<&(Option<u32>, Vec<u64>)> =
                rows.iter().filter(|(irq, _)| irq.is_some()).collect();
            proptest::prop_assert_eq!(p.irqs.len(), written.len());
            let mut cells = 0;
            for (line, (irq, dense)) in p.irqs.iter().zip(written) {
                let c = p.counts(line);
                proptest::prop_assert_eq!(Some(line.irq), *irq);
                proptest::prop_assert_eq!(c.len(), dense.len());
                proptest::prop_assert_eq!(&c.to_vec(), dense);
                for col in 0..dense.len() + 2 {
                    proptest::prop_assert_eq!(c.get(col), dense.get(col).copied());
                }
                let nonzero: Vec<(usize, u64)> =
                    dense.iter().copied().enumerate().filter(|(_, v)| *v != 0).collect();
                proptest::prop_assert_eq!(c.nonzero().collect::<Vec<_>>(), nonzero.clone());
                proptest::prop_assert_eq!(line.has_fired(), !nonzero.is_empty());
                let total = dense.iter().fold(0u64, |a, v| a.saturating_add(*v));
                proptest::prop_assert_eq!(c.total(), total);
                let pairs: Vec<(u32, u64)> =
                    cpus.iter().copied().zip(dense.iter().copied()).collect();
                proptest::prop_assert_eq!(p.per_cpu(line).collect::<Vec<_>>(), pairs);
                cells += nonzero.len();
            }
            proptest::prop_assert_eq!(p.cells(), cells);
            let arch: Vec<&Vec<u64>> =
                rows.iter().filter(|(irq, _)| irq.is_none()).map(|(_, c)| c).collect();
            proptest::prop_assert_eq!(p.arch.iter().map(|a| &a.counts).collect::<Vec<_>>(), arch);
        }
    }

    /// `push_irq` and `set_count` keep a table equal to the parse of the same counts.
    #[test]
    fn built_tables_equal_parsed_ones() {
        let text = "   CPU0 CPU1 CPU2\n 5: 0 2 0\n 6: 1 0 0\n 7: 0 0 3\n";
        let parsed = parse(text).unwrap();
        let mut built = Interrupts::with_cpus(vec![0, 1, 2]);
        for (irq, counts) in [(5, [0, 2, 0]), (6, [0, 0, 0]), (7, [0, 0, 3])] {
            built.push_irq(irq, Arc::default(), &counts);
        }
        built.set_count(1, 0, 9);
        built.set_count(1, 0, 1);
        built.set_count(2, 1, 4);
        built.set_count(2, 1, 0);
        built.set_count(2, 3, 4);
        assert_eq!(
            built, parsed,
            "rows without a description read as the default one"
        );
    }

    #[test]
    fn bad_input_is_an_error_or_a_skipped_line() {
        assert_eq!(parse(""), Err(InterruptsError::Empty));
        assert!(matches!(
            parse("garbage\n"),
            Err(InterruptsError::BadHeader(_))
        ));
        let p = parse("  CPU0\nno colon here\n 99999999999: 1\n7:\n").unwrap();
        assert_eq!(p.skipped.len(), 3, "{:?}", p.skipped);
    }
}
