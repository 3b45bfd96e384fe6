//! `/proc/softirqs`: per-CPU counts of each softirq type (`NET_RX`, `NET_TX`, …).

use nodemedic_kernel::{
    leading_counts_into, parse_cpu_header_into, SkipReason, SkippedLine, TableError,
};
use serde::Serialize;

pub type SoftirqsError = TableError;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Softirqs {
    /// CPU ids in header order; `counts[i]` of every row belongs to `cpus[i]`.
    pub cpus: Vec<u32>,
    pub rows: Vec<SoftirqRow>,
    pub skipped: Vec<SkippedLine>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SoftirqRow {
    pub name: String,
    pub counts: Vec<u64>,
}

impl Softirqs {
    pub fn row(&self, name: &str) -> Option<&SoftirqRow> {
        self.rows.iter().find(|r| r.name == name)
    }

    /// `(cpu, count)` pairs of a row, mapped through the header.
    pub fn per_cpu<'a>(&'a self, counts: &'a [u64]) -> impl Iterator<Item = (u32, u64)> + 'a {
        self.cpus.iter().copied().zip(counts.iter().copied())
    }

    /// The count of softirq `name` on `cpu`, if the file has it.
    pub fn count(&self, name: &str, cpu: u32) -> Option<u64> {
        let col = self.cpus.iter().position(|c| *c == cpu)?;
        self.row(name)?.counts.get(col).copied()
    }
}

pub fn parse(text: &str) -> Result<Softirqs, SoftirqsError> {
    let mut out = Softirqs::default();
    parse_into(text, &mut out)?;
    Ok(out)
}

/// [`parse`] into `out`, a past table's storage: its rows' names and counts are filled again
/// rather than allocated (about 25 allocations a sample with new ones). `out` is then equal to
/// `parse(text)`'s table; after an `Err` its content is unspecified.
pub fn parse_into(text: &str, out: &mut Softirqs) -> Result<(), SoftirqsError> {
    out.skipped.clear();
    let (lines, cut) = nodemedic_kernel::complete_lines(text);
    // A line cut short is reported first, as `nodemedic_kernel::body` does.
    out.skipped.extend(cut.map(|line| SkippedLine {
        line,
        reason: SkipReason::CutShort,
    }));
    let mut used = 0;
    let mut header = false;
    for (n, line) in lines {
        if !header {
            parse_cpu_header_into(line, &mut out.cpus)?;
            header = true;
            continue;
        }
        let Some((name, rest)) = line.split_once(':') else {
            out.skipped.push(SkippedLine {
                line: n,
                reason: SkipReason::NoSoftirqColon,
            });
            continue;
        };
        let name = name.trim();
        if used == out.rows.len() {
            out.rows.push(SoftirqRow {
                name: String::new(),
                counts: Vec::new(),
            });
        }
        let row = &mut out.rows[used];
        let end = leading_counts_into(rest, out.cpus.len(), &mut row.counts);
        if name.is_empty() || !rest[end..].trim().is_empty() {
            out.skipped.push(SkippedLine {
                line: n,
                reason: SkipReason::SoftirqContent(name.to_string()),
            });
            continue;
        }
        row.name.clear();
        row.name.push_str(name);
        used += 1;
    }
    out.rows.truncate(used);
    if !header {
        return Err(SoftirqsError::Empty);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rows_by_header() {
        let text = "                    CPU0       CPU2       \n          HI:          0          0\n      NET_RX:        347        496\n";
        let s = parse(text).unwrap();
        assert_eq!(s.cpus, vec![0, 2]);
        assert_eq!(s.count("NET_RX", 2), Some(496));
        assert_eq!(s.count("NET_RX", 1), None);
        assert_eq!(s.count("NET_TX", 0), None);
    }

    /// Into a past table's storage (more rows, other CPUs, a skipped line), the table is the
    /// one `parse` gives, whatever the text, including cut short, blank and malformed lines.
    #[test]
    fn parse_into_a_past_table_is_parse() {
        let past =
            "    CPU0 CPU1 CPU2\n HI: 1 2 3\n TIMER: 4 5 6\n NET_TX: 7 8 9\n NET_RX: 1 1 1\nbad\n";
        for text in [
            "                    CPU0       CPU2       \n          HI:          0          0\n      NET_RX:        347        496\n",
            "  CPU0\n\n NET_RX: 1 x\nfoo\n TIMER: 5\n",
            "  CPU0 CPU1\n HI: 1 2\n NET_RX: 3",
            "  CPU0 CPU1\n HI: 1 2\n   ",
            "  CPU0 CPU1",
            "  CPU0 CPU1\n",
            "  CPUx\n HI: 1\n",
            "",
            "\n\n",
            " : 1 2\n",
        ] {
            let mut into = parse(past).unwrap();
            let got = parse_into(text, &mut into).map(|()| into);
            assert_eq!(got, parse(text), "{text:?}");
        }
    }

    /// The same for this machine's own file: rows as the kernel writes them.
    #[test]
    fn parse_into_reads_this_machines_file() {
        let text = std::fs::read_to_string("/proc/softirqs").expect("/proc/softirqs");
        let fresh = parse(&text).unwrap();
        assert!(fresh.rows.iter().any(|r| r.name == "NET_RX"), "{fresh:?}");
        assert!(fresh.skipped.is_empty(), "{fresh:?}");
        let mut into = parse("  CPU0\n A: 1\n B: 2\n").unwrap();
        parse_into(&text, &mut into).unwrap();
        assert_eq!(into, fresh);
    }

    #[test]
    fn bad_rows_are_reported() {
        assert_eq!(parse(""), Err(SoftirqsError::Empty));
        let s = parse("  CPU0\n NET_RX: 1 x\nfoo\n").unwrap();
        assert_eq!(s.skipped.len(), 2);
    }
}
