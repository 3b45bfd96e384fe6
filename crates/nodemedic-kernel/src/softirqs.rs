//! `/proc/softirqs`: per-CPU counts of each softirq type (`NET_RX`, `NET_TX`, …).

use serde::Serialize;

use crate::{cpu_table, leading_counts, SkipReason, SkippedLine, TableError};

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
    let (cpus, body) = cpu_table(text)?;
    let mut out = Softirqs {
        cpus,
        skipped: body.skipped,
        ..Default::default()
    };
    for (n, line) in body.lines {
        let Some((name, rest)) = line.split_once(':') else {
            out.skipped.push(SkippedLine {
                line: n,
                reason: SkipReason::NoSoftirqColon,
            });
            continue;
        };
        let name = name.trim();
        let (counts, used) = leading_counts(rest, out.cpus.len());
        if name.is_empty() || !rest[used..].trim().is_empty() {
            out.skipped.push(SkippedLine {
                line: n,
                reason: SkipReason::SoftirqContent(name.to_string()),
            });
            continue;
        }
        out.rows.push(SoftirqRow {
            name: name.to_string(),
            counts,
        });
    }
    Ok(out)
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

    #[test]
    fn bad_rows_are_reported() {
        assert_eq!(parse(""), Err(SoftirqsError::Empty));
        let s = parse("  CPU0\n NET_RX: 1 x\nfoo\n").unwrap();
        assert_eq!(s.skipped.len(), 2);
    }
}
