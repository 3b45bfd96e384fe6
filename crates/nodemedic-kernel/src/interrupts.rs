//! `/proc/interrupts`.
//!
//! The layout varies more than it looks: the header names only online CPUs (so columns are
//! mapped by the `CPUn` header, never by position), aarch64 labels such as `IPI0:` can run
//! straight into the first count on wide machines, some rows (`ERR`, `MIS`) carry a single
//! count, and the chip/hwirq/trigger columns differ between x86 (`IR-PCI-MSIX-0000:3b:00.0
//! 5-edge`), older x86 (`IO-APIC-edge`) and GIC (`GICv3  27 Level`).

use std::sync::Arc;

use serde::Serialize;

use crate::{leading_counts, parse_cpu_header, SkipReason, SkippedLine, TableError};

pub type InterruptsError = TableError;

/// One parse of `/proc/interrupts`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Interrupts {
    /// CPU ids in header order; `counts[i]` of every row belongs to `cpus[i]`.
    pub cpus: Vec<u32>,
    /// Numbered (device) interrupts.
    pub irqs: Vec<IrqLine>,
    /// Architecture rows (`NMI`, `LOC`, `IPI0`, `ERR`, …).
    pub arch: Vec<ArchLine>,
    pub skipped: Vec<SkippedLine>,
    /// Per CPU (aligned with `cpus`), the interrupts of IRQs that disappeared while nodemedic
    /// watched, so that per-CPU sums stay monotonic. Filled by [`crate::counter::Widener`];
    /// empty from the parser.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub retired: Vec<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IrqLine {
    pub irq: u32,
    /// Per-CPU counts aligned with [`Interrupts::cpus`]; may be shorter than it.
    pub counts: Vec<u64>,
    /// What follows the counts. Shared with the previous table's row when it reads the same
    /// (see [`Parser::reusing`]).
    #[serde(flatten)]
    pub desc: Arc<IrqDescription>,
    /// The columns whose count is not zero, ascending, when known: the parser and the
    /// 64-bit widener fill it, so that work over a wide row (an IRQ counts on the few CPUs it
    /// has been routed to) can visit those columns only. `None`: scan `counts`.
    #[serde(skip)]
    pub nonzero: Option<Vec<u32>>,
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
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
    }

    /// Whether `known` says the same.
    fn reads_as(&self, known: &IrqDescription) -> bool {
        known.chip == self.chip
            && known.hwirq.as_deref() == self.hwirq
            && known.trigger.as_deref() == self.trigger
            && known.actions.iter().map(String::as_str).eq(self.actions())
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

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ArchLine {
    pub name: String,
    pub counts: Vec<u64>,
    pub description: String,
}

impl IrqLine {
    /// A row of `counts` for IRQ `irq` with no description (tables built by tests and tools).
    pub fn with_counts(irq: u32, counts: Vec<u64>) -> Self {
        IrqLine {
            irq,
            counts,
            desc: Arc::default(),
            nonzero: None,
        }
    }

    pub fn total(&self) -> u64 {
        self.counts.iter().fold(0u64, |a, c| a.saturating_add(*c))
    }
}

impl Interrupts {
    /// Each row's IRQ and description, in order, into `out` (cleared first): what
    /// [`Parser::reusing`] takes to share them with the next table.
    pub fn descriptions(&self, out: &mut Vec<(u32, Arc<IrqDescription>)>) {
        out.clear();
        out.extend(self.irqs.iter().map(|l| (l.irq, Arc::clone(&l.desc))));
    }

    /// `(cpu, count)` pairs of a row, mapped through the header.
    pub fn per_cpu<'a>(&'a self, counts: &'a [u64]) -> impl Iterator<Item = (u32, u64)> + 'a {
        self.cpus.iter().copied().zip(counts.iter().copied())
    }
}

pub fn parse(text: &str) -> Result<Interrupts, InterruptsError> {
    let mut p = Parser::default();
    for line in text.split_inclusive('\n') {
        match line.strip_suffix('\n') {
            Some(l) => p.line(l.strip_suffix('\r').unwrap_or(l), true),
            None => p.line(line.strip_suffix('\r').unwrap_or(line), false),
        }
    }
    p.finish()
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
}

impl<'k> Parser<'k> {
    /// A parser that gives a row the description of `known` for its IRQ, shared, when the
    /// row reads the same, and allocates one only for a row that is new or changed. The
    /// table is equal to [`parse`]'s. `known` is the previous table's rows, in its order
    /// (see [`Interrupts::descriptions`]).
    pub fn reusing(known: &'k [(u32, Arc<IrqDescription>)]) -> Self {
        Parser {
            known,
            ..Default::default()
        }
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
                self.header = Some(match parse_cpu_header(line) {
                    Ok(cpus) => {
                        self.out.cpus = cpus;
                        Ok(())
                    }
                    Err(e) => Err(TableError::BadHeader(e)),
                });
            }
            Some(Ok(())) => match parse_row(line, self.out.cpus.len()) {
                Ok(Row::Irq {
                    irq,
                    counts,
                    nonzero,
                    desc,
                }) => {
                    let desc = self.description(irq, &desc);
                    self.out.irqs.push(IrqLine {
                        irq,
                        counts,
                        desc,
                        nonzero: Some(nonzero),
                    });
                }
                Ok(Row::Arch(arch)) => self.out.arch.push(arch),
                Err(reason) => self.out.skipped.push(SkippedLine { line: n, reason }),
            },
            Some(Err(_)) => {}
        }
    }

    pub fn finish(self) -> Result<Interrupts, InterruptsError> {
        match self.header {
            None => Err(TableError::Empty),
            Some(Err(e)) => Err(e),
            Some(Ok(())) => Ok(self.out),
        }
    }
}

enum Row<'a> {
    Irq {
        irq: u32,
        counts: Vec<u64>,
        nonzero: Vec<u32>,
        desc: DescriptionText<'a>,
    },
    Arch(ArchLine),
}

fn parse_row(line: &str, ncpus: usize) -> Result<Row<'_>, SkipReason> {
    let (label, rest) = line.split_once(':').ok_or(SkipReason::NoColon)?;
    let label = label.trim();
    if label.is_empty() {
        return Err(SkipReason::EmptyLabel);
    }
    let (counts, nonzero, used) = leading_counts(rest, ncpus);
    let desc = rest[used..].trim();
    if label.bytes().all(|b| b.is_ascii_digit()) {
        let irq = label
            .parse::<u32>()
            .map_err(|_| SkipReason::IrqOutOfRange(label.to_string()))?;
        if counts.is_empty() {
            return Err(SkipReason::NoCounts(irq));
        }
        Ok(Row::Irq {
            irq,
            counts,
            nonzero,
            desc: parse_irq_description(desc),
        })
    } else {
        if label.chars().any(char::is_whitespace) {
            return Err(SkipReason::LabelWithSpaces(label.to_string()));
        }
        Ok(Row::Arch(ArchLine {
            name: label.to_string(),
            counts,
            description: desc.to_string(),
        }))
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
    let (hw, trig) = tok.split_once('-')?;
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
        assert_eq!(virtio.counts, vec![0, 7]);
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
        let pairs: Vec<_> = p.per_cpu(&p.irqs[0].counts).collect();
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
        assert_eq!(p.irqs[0].counts, vec![1, 2]);
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
