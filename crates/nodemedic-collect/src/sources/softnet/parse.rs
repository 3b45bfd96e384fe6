//! `/proc/net/softnet_stat`: one row of hex counters per CPU.
//!
//! The column set grew over kernel versions: 10 or 11 columns on old kernels, 13 with the CPU
//! index since 5.10 (before that, row `i` is the `i`-th *online* CPU, not CPU `i`), 15 with the
//! input/process queue lengths on recent kernels. Columns 3–8 are always zero (they once held
//! fastroute and cpu_collision counters).

use nodemedic_kernel::{body, SkipReason, SkippedLine};
use serde::Serialize;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SoftnetTable {
    pub rows: Vec<SoftnetRow>,
    pub skipped: Vec<SkippedLine>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SoftnetRow {
    pub processed: u32,
    pub dropped: u32,
    pub time_squeeze: u32,
    pub received_rps: Option<u32>,
    pub flow_limit_count: Option<u32>,
    pub backlog_len: Option<u32>,
    /// The CPU the row belongs to, when the kernel prints it (5.10+).
    pub cpu: Option<u32>,
    pub input_queue_len: Option<u32>,
    pub process_queue_len: Option<u32>,
}

/// Fewer than this many columns is not a softnet row from any kernel.
const MIN_COLUMNS: usize = 10;

pub fn parse(text: &str) -> SoftnetTable {
    let mut out = SoftnetTable::default();
    parse_into(text, &mut out);
    out
}

/// [`parse`] into `out`, emptied first: a caller that parses every sample keeps the rows'
/// storage (one row per CPU) rather than allocating it each time.
pub fn parse_into(text: &str, out: &mut SoftnetTable) {
    let body = body(text);
    out.rows.clear();
    out.rows.reserve(body.lines.len());
    out.skipped = body.skipped;
    for (n, line) in body.lines {
        match parse_row(line) {
            Ok(row) => out.rows.push(row),
            Err(reason) => out.skipped.push(SkippedLine { line: n, reason }),
        }
    }
}

/// Columns read; a newer kernel's further columns are checked as hex and otherwise ignored.
const MAX_COLUMNS: usize = 15;

fn parse_row(line: &str) -> Result<SoftnetRow, SkipReason> {
    // One row per CPU every sample (256 on a 256-CPU node): no allocation unless it fails.
    let mut cols = [0u32; MAX_COLUMNS];
    let mut n = 0;
    for c in line.split_ascii_whitespace() {
        let v = u32::from_str_radix(c, 16).map_err(|_| SkipReason::NotHex(c.to_string()))?;
        if let Some(slot) = cols.get_mut(n) {
            *slot = v;
        }
        n += 1;
    }
    if n < MIN_COLUMNS {
        return Err(SkipReason::TooFewColumns {
            found: n,
            min: MIN_COLUMNS,
        });
    }
    let at = |i: usize| (i < n).then(|| cols[i]);
    Ok(SoftnetRow {
        processed: cols[0],
        dropped: cols[1],
        time_squeeze: cols[2],
        received_rps: at(9),
        flow_limit_count: at(10),
        backlog_len: at(11),
        cpu: at(12),
        input_queue_len: at(13),
        process_queue_len: at(14),
    })
}

/// Assigns each row to a CPU: by its own CPU column when present, else to the online CPUs in
/// order (older kernels print rows for online CPUs only). Rows that cannot be placed are
/// dropped and counted in the returned number.
pub fn assign_cpus(rows: &[SoftnetRow], online: &[u32]) -> (Vec<(u32, SoftnetRow)>, usize) {
    let mut placed = Vec::new();
    let unplaced = assign_cpus_into(rows, online, &mut placed);
    (placed, unplaced)
}

/// [`assign_cpus`] into `placed`, emptied first (a past sample's list); returns the number of
/// rows not placed.
pub fn assign_cpus_into(
    rows: &[SoftnetRow],
    online: &[u32],
    placed: &mut Vec<(u32, SoftnetRow)>,
) -> usize {
    placed.clear();
    placed.reserve(rows.len());
    let mut unplaced = 0;
    for (i, row) in rows.iter().enumerate() {
        match row.cpu.or_else(|| online.get(i).copied()) {
            Some(cpu) => placed.push((cpu, *row)),
            None => unplaced += 1,
        }
    }
    unplaced
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifteen_columns() {
        let s = parse("0000000a 00000002 00000003 00000000 00000000 00000000 00000000 00000000 00000000 00000004 00000005 00000006 00000007 00000008 00000009\n");
        let r = s.rows[0];
        assert_eq!((r.processed, r.dropped, r.time_squeeze), (10, 2, 3));
        assert_eq!(r.received_rps, Some(4));
        assert_eq!(r.flow_limit_count, Some(5));
        assert_eq!(r.backlog_len, Some(6));
        assert_eq!(r.cpu, Some(7));
        assert_eq!(r.process_queue_len, Some(9));
    }

    #[test]
    fn legacy_rows_map_to_online_cpus() {
        let row = "00000001 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000\n";
        let s = parse(&row.repeat(3));
        assert_eq!(s.rows.len(), 3);
        assert_eq!(s.rows[0].cpu, None);
        let (placed, unplaced) = assign_cpus(&s.rows, &[0, 2, 5]);
        assert_eq!(
            placed.iter().map(|p| p.0).collect::<Vec<_>>(),
            vec![0, 2, 5]
        );
        assert_eq!(unplaced, 0);
        let (_, unplaced) = assign_cpus(&s.rows, &[0]);
        assert_eq!(unplaced, 2);
    }

    /// Columns beyond the fifteen read are still checked, and the counts named.
    #[test]
    fn extra_columns_are_checked_and_ignored() {
        let row = "1 2 3 0 0 0 0 0 0 4 5 6 7 8 9 a b\n";
        assert_eq!(parse(row).rows[0].process_queue_len, Some(9));
        let s = parse("1 2 3 0 0 0 0 0 0 4 5 6 7 8 9 a zz\n1 2 3\n");
        assert!(s.rows.is_empty());
        assert_eq!(s.skipped[0].reason, SkipReason::NotHex("zz".into()));
        assert_eq!(
            s.skipped[1].reason.to_string(),
            "3 columns, expected at least 10"
        );
    }

    #[test]
    fn short_and_garbage_rows_are_skipped() {
        let s = parse("00000001 00000000 00000000\nzz 1 2 3 4 5 6 7 8 9\n00000001 00000000");
        assert!(s.rows.is_empty());
        assert_eq!(s.skipped.len(), 3);
    }
}
