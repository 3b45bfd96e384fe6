//! `/proc/softirqs`: per-CPU counts of each softirq type (`NET_RX`, `NET_TX`, …).

use serde::ser::{SerializeSeq, SerializeStruct};
use serde::{Serialize, Serializer};

use crate::{cpu_table, leading_counts_into, SkipReason, SkippedLine, TableError};

pub type SoftirqsError = TableError;

/// The table. Every row's counts are held in one vector, row after row, where a vector per
/// row was ten allocations of 8 KiB per sample on a 1024-CPU node, each mapped and unmapped
/// by musl's allocator (BENCHMARKS.md, "The sampler's maps").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Softirqs {
    /// CPU ids in header order; `counts(row)[i]` of every row belongs to `cpus[i]`.
    pub cpus: Vec<u32>,
    pub rows: Vec<SoftirqRow>,
    pub skipped: Vec<SkippedLine>,
    /// The rows' counts, row after row (see [`Softirqs::counts`]).
    cells: Vec<u64>,
}

/// A softirq type; its counts are [`Softirqs::counts`] of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SoftirqRow {
    pub name: String,
    start: usize,
    end: usize,
}

impl Softirqs {
    /// A table of `cpus` with no rows yet (see [`Softirqs::push_row`]).
    pub fn with_cpus(cpus: Vec<u32>) -> Self {
        Softirqs {
            cpus,
            ..Default::default()
        }
    }

    /// Appends a row (at most one count per CPU of the header is kept).
    pub fn push_row(&mut self, name: &str, counts: &[u64]) {
        let start = self.cells.len();
        self.cells
            .extend(counts.iter().take(self.cpus.len()).copied());
        self.rows.push(SoftirqRow {
            name: name.to_string(),
            start,
            end: self.cells.len(),
        });
    }

    /// A row's counts, in header order (fewer than the CPUs where the kernel wrote fewer).
    /// `row` must be a row of this table.
    pub fn counts(&self, row: &SoftirqRow) -> &[u64] {
        self.cells.get(row.start..row.end).unwrap_or(&[])
    }

    /// The header and every row's name and counts, to rewrite the counts in place (the
    /// widener).
    pub fn rows_mut(&mut self) -> (&[u32], impl Iterator<Item = (&str, &mut [u64])>) {
        // The rows' counts lie one after the other from the start ([`parse`] and
        // [`Softirqs::push_row`] store them so): each row is split off the rest.
        let mut rest: &mut [u64] = &mut self.cells;
        let rows = self.rows.iter().map(move |r| {
            let tail = std::mem::take(&mut rest);
            let (row, tail) = tail.split_at_mut((r.end - r.start).min(tail.len()));
            rest = tail;
            (r.name.as_str(), row)
        });
        (&self.cpus, rows)
    }

    pub fn row(&self, name: &str) -> Option<&SoftirqRow> {
        self.rows.iter().find(|r| r.name == name)
    }

    /// `(cpu, count)` pairs of a row, mapped through the header.
    pub fn per_cpu<'a>(&'a self, row: &'a SoftirqRow) -> impl Iterator<Item = (u32, u64)> + 'a {
        self.cpus
            .iter()
            .copied()
            .zip(self.counts(row).iter().copied())
    }

    /// The count of softirq `name` on `cpu`, if the file has it.
    pub fn count(&self, name: &str, cpu: u32) -> Option<u64> {
        let col = self.cpus.iter().position(|c| *c == cpu)?;
        self.counts(self.row(name)?).get(col).copied()
    }
}

/// As it always serialized: `{cpus, rows: [{name, counts}], skipped}`.
impl Serialize for Softirqs {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct Rows<'a>(&'a Softirqs);
        struct Row<'a>(&'a SoftirqRow, &'a [u64]);
        impl Serialize for Row<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut st = s.serialize_struct("SoftirqRow", 2)?;
                st.serialize_field("name", &self.0.name)?;
                st.serialize_field("counts", self.1)?;
                st.end()
            }
        }
        impl Serialize for Rows<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut seq = s.serialize_seq(Some(self.0.rows.len()))?;
                for r in &self.0.rows {
                    seq.serialize_element(&Row(r, self.0.counts(r)))?;
                }
                seq.end()
            }
        }
        let mut st = s.serialize_struct("Softirqs", 3)?;
        st.serialize_field("cpus", &self.cpus)?;
        st.serialize_field("rows", &Rows(self))?;
        st.serialize_field("skipped", &self.skipped)?;
        st.end()
    }
}

pub fn parse(text: &str) -> Result<Softirqs, SoftirqsError> {
    let (cpus, body) = cpu_table(text)?;
    let mut out = Softirqs {
        cells: Vec::with_capacity(body.lines.len() * cpus.len()),
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
        let start = out.cells.len();
        let used = leading_counts_into(rest, out.cpus.len(), &mut out.cells);
        if name.is_empty() || !rest[used..].trim().is_empty() {
            out.cells.truncate(start);
            out.skipped.push(SkippedLine {
                line: n,
                reason: SkipReason::SoftirqContent(name.to_string()),
            });
            continue;
        }
        out.rows.push(SoftirqRow {
            name: name.to_string(),
            start,
            end: out.cells.len(),
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

    #[test]
    fn rows_share_one_vector_and_read_back_as_written() {
        let text = "    CPU0  CPU1  CPU2\n  HI: 1 2 3\n BAD: 4 x\n NET_RX: 5 6\n TIMER: 7 8 9\n";
        let mut s = parse(text).unwrap();
        let names: Vec<&str> = s.rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["HI", "NET_RX", "TIMER"]);
        assert_eq!(s.skipped.len(), 1);
        assert_eq!(s.counts(&s.rows[1]), &[5, 6]);
        assert_eq!(s.count("TIMER", 2), Some(9));
        let (cpus, rows) = s.rows_mut();
        assert_eq!(cpus, &[0, 1, 2]);
        for (_, counts) in rows {
            for c in counts {
                *c *= 10;
            }
        }
        assert_eq!(s.counts(&s.rows[0]), &[10, 20, 30]);
        assert_eq!(s.counts(&s.rows[1]), &[50, 60]);
        assert_eq!(s.counts(&s.rows[2]), &[70, 80, 90]);
        let mut built = Softirqs::with_cpus(vec![0, 1, 2]);
        built.push_row("HI", &[10, 20, 30]);
        built.push_row("NET_RX", &[50, 60]);
        built.push_row("TIMER", &[70, 80, 90, 100]);
        assert_eq!(
            built.counts(&built.rows[2]),
            &[70, 80, 90],
            "one count per CPU at most"
        );
        assert_eq!(
            (built.cpus.clone(), built.rows.clone(), built.cells.clone()),
            (s.cpus.clone(), s.rows.clone(), s.cells.clone())
        );
    }

    #[test]
    fn serializes_as_rows_of_names_and_counts() {
        let s = parse("  CPU0 CPU1\n NET_RX: 5 6\n").unwrap();
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            r#"{"cpus":[0,1],"rows":[{"name":"NET_RX","counts":[5,6]}],"skipped":[]}"#
        );
    }
}
