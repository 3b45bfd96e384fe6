//! `/proc/softirqs`: per-CPU counts of each softirq type (`NET_RX`, `NET_TX`, …).

use serde::Serialize;

use crate::{complete_lines, leading_counts, parse_cpu_header, SkippedLine};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SoftirqsError {
    #[error("file is empty")]
    Empty,
    #[error("line 1: bad CPU header: {0}")]
    BadHeader(String),
}

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
    let (mut lines, truncated) = complete_lines(text);
    let header = loop {
        match lines.next() {
            Some((_, l)) if l.trim().is_empty() => continue,
            Some((_, l)) => break l,
            None => return Err(SoftirqsError::Empty),
        }
    };
    let cpus = parse_cpu_header(header).map_err(SoftirqsError::BadHeader)?;
    let mut out = Softirqs {
        cpus,
        ..Default::default()
    };
    if let Some(line) = truncated {
        out.skipped.push(SkippedLine {
            line,
            reason: "last line has no newline: the file was cut short".into(),
        });
    }
    for (n, line) in lines {
        if line.trim().is_empty() {
            continue;
        }
        let Some((name, rest)) = line.split_once(':') else {
            out.skipped.push(SkippedLine {
                line: n,
                reason: "no ':' after the softirq name".into(),
            });
            continue;
        };
        let name = name.trim();
        let (counts, used) = leading_counts(rest, out.cpus.len());
        if name.is_empty() || !rest[used..].trim().is_empty() {
            out.skipped.push(SkippedLine {
                line: n,
                reason: format!("unexpected content in softirq row {name:?}"),
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
