//! `/proc/interrupts`.
//!
//! The layout varies more than it looks: the header names only online CPUs (so columns are
//! mapped by the `CPUn` header, never by position), aarch64 labels such as `IPI0:` can run
//! straight into the first count on wide machines, some rows (`ERR`, `MIS`) carry a single
//! count, and the chip/hwirq/trigger columns differ between x86 (`IR-PCI-MSIX-0000:3b:00.0
//! 5-edge`), older x86 (`IO-APIC-edge`) and GIC (`GICv3  27 Level`).

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
    pub chip: String,
    pub hwirq: Option<String>,
    pub trigger: Option<String>,
    /// Handler names (`virtio2-input.0`, `mlx5_comp3@pci:0000:3b:00.0`), in kernel order.
    pub actions: Vec<String>,
    /// The columns whose count is not zero, ascending, when known: the parser and the
    /// 64-bit widener fill it, so that work over a wide row (an IRQ counts on the few CPUs it
    /// has been routed to) can visit those columns only. `None`: scan `counts`.
    #[serde(skip)]
    pub nonzero: Option<Vec<u32>>,
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
            chip: String::new(),
            hwirq: None,
            trigger: None,
            actions: Vec::new(),
            nonzero: None,
        }
    }

    pub fn total(&self) -> u64 {
        self.counts.iter().fold(0u64, |a, c| a.saturating_add(*c))
    }
}

impl Interrupts {
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
pub struct Parser {
    line_no: usize,
    header: Option<Result<(), InterruptsError>>,
    out: Interrupts,
}

impl Parser {
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
                Ok(Row::Irq(irq)) => self.out.irqs.push(irq),
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

enum Row {
    Irq(IrqLine),
    Arch(ArchLine),
}

fn parse_row(line: &str, ncpus: usize) -> Result<Row, SkipReason> {
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
        let mut line = parse_irq_description(irq, counts, desc);
        line.nonzero = Some(nonzero);
        Ok(Row::Irq(line))
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

fn parse_irq_description(irq: u32, counts: Vec<u64>, desc: &str) -> IrqLine {
    let (chip, after_chip) = take_token(desc);
    let (tok, after_tok) = take_token(after_chip);
    let (hwirq, trigger, rest) = if let Some((hw, trig)) = split_hwirq_trigger(tok) {
        (
            (!hw.is_empty()).then(|| hw.to_string()),
            Some(trig.to_string()),
            after_tok,
        )
    } else if !tok.is_empty() && tok.bytes().all(|b| b.is_ascii_hexdigit()) {
        // GIC style: `27 Level` / `524288 Edge`.
        let (t, after_t) = take_token(after_tok);
        if is_trigger_word(t) {
            (Some(tok.to_string()), Some(t.to_string()), after_t)
        } else {
            (Some(tok.to_string()), None, after_tok)
        }
    } else {
        (None, None, after_chip)
    };
    let actions = rest
        .trim()
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_string)
        .collect();
    IrqLine {
        irq,
        counts,
        chip: chip.to_string(),
        hwirq,
        trigger,
        actions,
        nonzero: None,
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
    matches!(
        t.to_ascii_lowercase().as_str(),
        "edge" | "level" | "fasteoi" | "simple" | "percpu"
    )
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
        assert_eq!(virtio.chip, "PCI-MSIX-0000:00:01.0");
        assert_eq!(virtio.hwirq.as_deref(), Some("0"));
        assert_eq!(virtio.trigger.as_deref(), Some("edge"));
        assert_eq!(virtio.actions, vec!["virtio0-config"]);
        assert_eq!(p.irqs[3].actions, vec!["rtc0", "i8042"]);
        assert_eq!(p.arch.len(), 3);
        assert_eq!(p.arch[1].name, "LOC");
        assert_eq!(p.arch[1].counts, vec![7590, 10292]);
        assert_eq!(p.arch[1].description, "Local timer interrupts");
        assert_eq!(p.arch[2].counts, vec![0]);
        assert!(p.skipped.is_empty());
    }

    #[test]
    fn offline_cpus_map_by_header() {
        let text = "           CPU0       CPU1       CPU3       CPU6\n 30:  1  2  3  4   IR-PCI-MSIX-0000:3b:00.0    5-edge      mlx5_comp4@pci:0000:3b:00.0\n";
        let p = parse(text).unwrap();
        assert_eq!(p.cpus, vec![0, 1, 3, 6]);
        let pairs: Vec<_> = p.per_cpu(&p.irqs[0].counts).collect();
        assert_eq!(pairs, vec![(0, 1), (1, 2), (3, 3), (6, 4)]);
        assert_eq!(p.irqs[0].chip, "IR-PCI-MSIX-0000:3b:00.0");
        assert_eq!(p.irqs[0].actions, vec!["mlx5_comp4@pci:0000:3b:00.0"]);
    }

    #[test]
    fn aarch64_rows() {
        let text = "           CPU0       CPU1\n 11:      12345      67890     GICv3  27 Level     arch_timer\n 50:          0          9   ITS-MSI 524288 Edge      nvme0q1\nIPI0:1234567890 1234567890       Rescheduling interrupts\nErr:          0\n";
        let p = parse(text).unwrap();
        assert_eq!(p.irqs[0].chip, "GICv3");
        assert_eq!(p.irqs[0].hwirq.as_deref(), Some("27"));
        assert_eq!(p.irqs[0].trigger.as_deref(), Some("Level"));
        assert_eq!(p.irqs[0].actions, vec!["arch_timer"]);
        assert_eq!(p.irqs[1].actions, vec!["nvme0q1"]);
        assert_eq!(p.arch[0].name, "IPI0");
        assert_eq!(p.arch[0].counts, vec![1234567890, 1234567890]);
        assert_eq!(p.arch[1].name, "Err");
    }

    #[test]
    fn old_x86_chip_with_trigger() {
        let text =
            "     CPU0\n  1:   9   IO-APIC-edge      i8042\n 24: 5 PCI-MSI-edge eth0-TxRx-0\n";
        let p = parse(text).unwrap();
        assert_eq!(p.irqs[0].chip, "IO-APIC-edge");
        assert_eq!(p.irqs[0].hwirq, None);
        assert_eq!(p.irqs[0].actions, vec!["i8042"]);
        assert_eq!(p.irqs[1].actions, vec!["eth0-TxRx-0"]);
    }

    #[test]
    fn fewer_counts_than_cpus() {
        let text = "   CPU0 CPU1 CPU2\n 5: 1 2\nMIS: 3\n";
        let p = parse(text).unwrap();
        assert_eq!(p.irqs[0].counts, vec![1, 2]);
        assert_eq!(p.irqs[0].chip, "");
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
