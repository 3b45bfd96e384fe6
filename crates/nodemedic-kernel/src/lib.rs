//! Pure parsers for the kernel files nodemedic reads, and the typed values they produce.
//!
//! Every parser takes `&str` and returns a typed value or a typed error. None of them does
//! I/O and none of them panics on any input: they are fuzzed (see `fuzz/` at the repository
//! root: its targets and its corpus replay test call `fuzz/logic`). Lines that cannot be
//! understood are not silently dropped: parsers that tolerate a bad line report it as a
//! [`SkippedLine`] so the caller can surface it.

pub mod bytes;
pub mod counter;
pub mod cpuset;
pub mod lsm;
pub mod mounts;
pub mod pid_stat;
pub mod psi;
pub mod workload;

pub use cpuset::{CpuSet, CpuSetError};

/// A line a tolerant parser could not use, with the reason. Line numbers start at 1.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SkippedLine {
    pub line: usize,
    pub reason: SkipReason,
}

/// Why a line was skipped. Serialized as its message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SkipReason {
    /// The last line of a file that does not end with a newline (see [`body`]).
    #[error("last line has no newline: the file was cut short")]
    CutShort,
    #[error("no ':' after the row label")]
    NoColon,
    #[error("empty row label")]
    EmptyLabel,
    #[error("IRQ number {0:?} out of range")]
    IrqOutOfRange(String),
    #[error("IRQ {0} has no counts")]
    NoCounts(u32),
    #[error("row label {0:?} contains spaces")]
    LabelWithSpaces(String),
    #[error("no ':' after the softirq name")]
    NoSoftirqColon,
    #[error("unexpected content in softirq row {0:?}")]
    SoftirqContent(String),
    #[error("column {0:?} is not hex")]
    NotHex(String),
    #[error("{found} columns, expected at least {min}")]
    TooFewColumns { found: usize, min: usize },
    #[error("not KEY=VALUE")]
    NotKeyValue,
    #[error("invalid variable name {0:?}")]
    BadVariableName(String),
}

impl serde::Serialize for SkipReason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The usable lines of a kernel file: complete, non-blank, numbered from 1.
pub struct Body<'a> {
    pub lines: Vec<(usize, &'a str)>,
    pub skipped: Vec<SkippedLine>,
}

/// The complete, non-blank lines of `text`, numbered from 1, without collecting them, and the
/// number of its last line when that line was cut short.
///
/// The kernel always ends these files with a newline, so a final line without one comes from
/// a truncated read (or a truncated copy) and cannot be trusted: a count cut mid-number still
/// parses as a number. It is left out of the lines.
pub fn complete_lines(text: &str) -> (impl Iterator<Item = (usize, &str)>, Option<usize>) {
    let complete = match memchr::memrchr(b'\n', text.as_bytes()) {
        // `\n` is ASCII: a character boundary.
        Some(i) => text.get(..=i).unwrap_or(""),
        None => "",
    };
    let cut = (complete.len() < text.len())
        .then(|| memchr::memchr_iter(b'\n', complete.as_bytes()).count() + 1);
    let lines = bytes::lines(complete)
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .filter(|(_, l)| !l.trim().is_empty());
    (lines, cut)
}

/// The complete, non-blank lines of a file that must be whole ([`complete_lines`]; small
/// per-cgroup files are read by the thousand); `Err` with the number of the last line when
/// the file was cut short.
pub fn whole_lines(text: &str) -> Result<impl Iterator<Item = (usize, &str)>, usize> {
    match complete_lines(text) {
        (_, Some(cut)) => Err(cut),
        (lines, None) => Ok(lines),
    }
}

/// Splits `text` into its complete lines ([`complete_lines`]); a line cut short is reported
/// as skipped.
pub fn body(text: &str) -> Body<'_> {
    let (lines, cut) = complete_lines(text);
    Body {
        lines: lines.collect(),
        skipped: cut
            .map(|line| SkippedLine {
                line,
                reason: SkipReason::CutShort,
            })
            .into_iter()
            .collect(),
    }
}

/// A per-CPU table (`/proc/interrupts`, `/proc/softirqs`) without a usable header.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    #[error("file is empty")]
    Empty,
    #[error("bad CPU header: {0}")]
    BadHeader(#[from] HeaderError),
}

/// Why a `CPU<n>` header line is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    #[error("header token {0:?} is not CPU<n>")]
    NotCpu(String),
    #[error("CPU id {0} exceeds the supported maximum")]
    TooLarge(u32),
    #[error("header names no CPUs")]
    NoCpus,
}

/// Parses a header line of `CPU<n>` tokens (as in `/proc/interrupts` and `/proc/softirqs`).
///
/// The header names only the CPUs that were online when the file was read, so the position of
/// a count column says nothing by itself: column `i` belongs to the CPU named by token `i`.
///
/// The ids go into `cpus` (emptied first), a past table's list.
pub fn parse_cpu_header_into(line: &str, cpus: &mut Vec<u32>) -> Result<(), HeaderError> {
    cpus.clear();
    for token in line.split_whitespace() {
        let id = token
            .strip_prefix("CPU")
            .and_then(|n| n.parse::<u32>().ok())
            .ok_or_else(|| HeaderError::NotCpu(token.to_string()))?;
        if id >= cpuset::MAX_CPUS {
            return Err(HeaderError::TooLarge(id));
        }
        cpus.push(id);
    }
    if cpus.is_empty() {
        return Err(HeaderError::NoCpus);
    }
    Ok(())
}

/// The first index from `i` that is not a space, eight bytes at a time: `/proc/interrupts`
/// prints each count right-aligned in 10 columns, so most of a wide table is spaces.
fn skip_spaces(b: &[u8], mut i: usize) -> usize {
    const SPACES: u64 = u64::from_ne_bytes([b' '; 8]);
    while let Some(chunk) = b.get(i..i + 8) {
        let Ok(word) = <[u8; 8]>::try_from(chunk) else {
            break;
        };
        let diff = u64::from_le_bytes(word) ^ SPACES;
        if diff != 0 {
            // The lowest differing byte is the first non-space (little-endian load).
            return i + (diff.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while b.get(i) == Some(&b' ') {
        i += 1;
    }
    i
}

/// Whether `b[pos..]` starts with the kernel's `" %10u"` of zero, followed by whitespace or
/// the end: two word compares rather than a call to `memcmp`.
fn is_zero_cell(b: &[u8], pos: usize) -> bool {
    const SPACES: u64 = u64::from_ne_bytes([b' '; 8]);
    let (Some(head), Some(tail)) = (b.get(pos..pos + 8), b.get(pos + 8..pos + 11)) else {
        return false;
    };
    <[u8; 8]>::try_from(head).is_ok_and(|h| u64::from_ne_bytes(h) == SPACES)
        && tail == b"  0"
        && b.get(pos + 11).is_none_or(|c| c.is_ascii_whitespace())
}

/// How many zero cells [`are_zero_cells`] takes at once.
const ZERO_RUN: usize = 8;

/// [`ZERO_RUN`] of the kernel's zero cells (`" %10u"` of 0), as the words they load as.
const ZERO_WORDS: [u64; ZERO_RUN * 11 / 8] = {
    let mut cells = [b' '; ZERO_RUN * 11];
    let mut c = 0;
    while c < ZERO_RUN {
        cells[c * 11 + 10] = b'0';
        c += 1;
    }
    let mut words = [0u64; ZERO_RUN * 11 / 8];
    let mut w = 0;
    while w < words.len() {
        let mut bytes = [0u8; 8];
        let mut i = 0;
        while i < 8 {
            bytes[i] = cells[w * 8 + i];
            i += 1;
        }
        words[w] = u64::from_le_bytes(bytes);
        w += 1;
    }
    words
};

/// Whether `b[pos..]` starts with [`ZERO_RUN`] zero cells followed by whitespace or the end:
/// eleven word compares for eight cells, where a wide table's rows are runs of zeros.
fn are_zero_cells(b: &[u8], pos: usize) -> bool {
    let Some(run) = b.get(pos..pos + ZERO_RUN * 11) else {
        return false;
    };
    let mut diff = 0u64;
    for (chunk, want) in run.chunks_exact(8).zip(ZERO_WORDS) {
        if let Ok(word) = <[u8; 8]>::try_from(chunk) {
            diff |= u64::from_le_bytes(word) ^ want;
        }
    }
    diff == 0
        && b.get(pos + ZERO_RUN * 11)
            .is_none_or(|c| c.is_ascii_whitespace())
}

/// The counts of a row as a dense vector (one per column, zeros included) into `counts`
/// (emptied first), and where the rest begins: the per-CPU rows that count on every CPU
/// (`LOC`, `NET_RX`), where most cells are not zero. `counts` is a past row's storage: the
/// same row of every sample is as wide, so it is filled again rather than allocated.
pub fn leading_counts_into(s: &str, max: usize, counts: &mut Vec<u64>) -> usize {
    counts.clear();
    counts.resize(max, 0);
    let (len, used) = scan_counts(s, max, |col, count| counts[col] = count);
    counts.truncate(len);
    used
}

/// Scans the leading whitespace-separated tokens of `s` that are decimal counts, at most `max`
/// of them, and hands each non-zero one to `cell` with its column, in ascending order; returns
/// how many columns were read and the byte offset where the rest begins. A hand-rolled
/// scanner: a 256-CPU `/proc/interrupts` has over 100,000 counts, and this is most of the cost
/// of reading it. A zero is only counted: an IRQ counts on the few CPUs it is routed to, so on a wide
/// table almost every cell is zero and a caller that keeps only the others (the sparse rows of
/// [`interrupts`]) stores nothing for them.
pub fn scan_counts(s: &str, max: usize, mut cell: impl FnMut(usize, u64)) -> (usize, usize) {
    // Index loops with the bound in the condition, so the compiler drops the bounds checks;
    // up to 19 digits cannot overflow a u64, so only a 20th digit is checked.
    let b = s.as_bytes();
    let n = b.len();
    let mut k = 0;
    let mut pos = 0;
    while k < max {
        // The kernel's own spelling of a zero (`" %10u"`), which is most cells of a wide
        // table: an IRQ counts on the few CPUs it is routed to.
        if is_zero_cell(b, pos) {
            // Zeros come in runs (all the CPUs an IRQ is not routed to): eight at a time.
            if k + ZERO_RUN <= max && are_zero_cells(b, pos) {
                k += ZERO_RUN;
                pos += ZERO_RUN * 11;
            } else {
                k += 1;
                pos += 11;
            }
            continue;
        }
        let mut i = skip_spaces(b, pos);
        while i < n && b[i].is_ascii_whitespace() {
            i += 1;
        }
        let start = i;
        let mut value: u64 = 0;
        while i < n && i - start < 19 && b[i].is_ascii_digit() {
            value = value * 10 + u64::from(b[i] - b'0');
            i += 1;
        }
        if i < n && b[i].is_ascii_digit() {
            match value
                .checked_mul(10)
                .and_then(|v| v.checked_add(u64::from(b[i] - b'0')))
            {
                Some(v) => value = v,
                None => break,
            }
            i += 1;
        }
        // A token that is not all digits (or does not fit in u64) ends the counts.
        if i == start || (i < n && !b[i].is_ascii_whitespace()) {
            break;
        }
        if value != 0 {
            cell(k, value);
        }
        k += 1;
        pos = i;
    }
    (k, pos)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Complete lines numbered as the file's, blank ones left out, and the number of a last
    /// line without its newline; `body` reports that one skipped, `whole_lines` refuses it.
    #[test]
    fn complete_lines_leave_out_a_line_cut_short() {
        /// A text, its complete non-blank lines, and the line cut short.
        type Case<'a> = (&'a str, &'a [(usize, &'a str)], Option<usize>);
        let cases: [Case<'_>; 7] = [
            ("a\n\nb\nc", &[(1, "a"), (3, "b")], Some(4)),
            ("a\r\nb\n", &[(1, "a"), (2, "b")], None),
            ("", &[], None),
            ("x", &[], Some(1)),
            ("a\n  \n", &[(1, "a")], None),
            ("a\n \n   ", &[(1, "a")], Some(3)),
            ("\n\n12 3\n", &[(3, "12 3")], None),
        ];
        for (text, want, cut) in cases {
            let (lines, got_cut) = complete_lines(text);
            assert_eq!(lines.collect::<Vec<_>>(), want, "{text:?}");
            assert_eq!(got_cut, cut, "{text:?}");
            let b = body(text);
            assert_eq!(b.lines, want, "{text:?}");
            let skipped: Vec<usize> = b.skipped.iter().map(|s| s.line).collect();
            assert_eq!(skipped, cut.into_iter().collect::<Vec<_>>(), "{text:?}");
            match (whole_lines(text), cut) {
                (Ok(lines), None) => assert_eq!(lines.collect::<Vec<_>>(), want),
                (Err(n), Some(c)) => assert_eq!(n, c),
                (r, c) => panic!("{text:?}: {:?} against {c:?}", r.map(|l| l.count())),
            }
        }
    }

    #[test]
    fn skip_spaces_finds_the_first_non_space_at_any_offset() {
        for lead in 0..20 {
            for tail in ["7", "", "x        "] {
                let s = format!("{}{tail}", " ".repeat(lead));
                assert_eq!(skip_spaces(s.as_bytes(), 0), lead, "{s:?}");
            }
        }
    }

    /// Rows of zeros in the kernel's spelling, long and short runs, with a count at any
    /// place, read cell by cell and `max` at any place: the runs taken eight at a time read as
    /// the tokens written, and the rest starts where the counts end.
    #[test]
    fn runs_of_zero_cells_read_as_the_cells_written() {
        for width in 0..30 {
            for hot in (0..width).map(Some).chain([None]) {
                let counts: Vec<u64> = (0..width)
                    .map(|c| if Some(c) == hot { 4_575_942 } else { 0 })
                    .collect();
                let cells: String = counts.iter().map(|c| format!(" {c:>10}")).collect();
                for rest in ["  IR-PCI-MSIX-0000:3b:00.0 7-edge eth0", "", "\n", "0x"] {
                    let row = format!("{cells}{rest}");
                    for max in [0, 1, 7, 8, 9, 16, width, width + 3] {
                        let mut got = Vec::new();
                        let (len, at) = scan_counts(&row, max, |col, c| got.push((col, c)));
                        // A token glued to the last zero ("0x") ends the counts before it.
                        let glued = rest == "0x" && width > 0;
                        let read = if glued { width - 1 } else { width }.min(max);
                        assert_eq!(len, read, "{row:?} max {max}");
                        let want: Vec<(usize, u64)> = counts
                            .iter()
                            .enumerate()
                            .take(read)
                            .filter(|(_, c)| **c != 0)
                            .map(|(i, c)| (i, *c))
                            .collect();
                        assert_eq!(got, want, "{row:?} max {max}");
                        if !glued {
                            assert_eq!(at, read * 11, "{row:?} max {max}");
                        }
                    }
                }
            }
        }
    }

    /// Counts and offset, checking the cells `scan_counts` hands over against the counts.
    fn lc(s: &str, max: usize) -> (Vec<u64>, usize) {
        let mut counts = vec![5; 3];
        let pos = leading_counts_into(s, max, &mut counts);
        let mut cells = Vec::new();
        let (len, at) = scan_counts(s, max, |col, count| cells.push((col, count)));
        let expect: Vec<(usize, u64)> = counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c != 0)
            .map(|(col, c)| (col, *c))
            .collect();
        assert_eq!((cells, len, at), (expect, counts.len(), pos), "{s:?}");
        (counts, pos)
    }

    #[test]
    fn leading_counts_stop_at_the_first_non_count() {
        assert_eq!(lc("  1 22\t333 IO-APIC 5-edge", 8), (vec![1, 22, 333], 10));
        assert_eq!(lc(" 1 2 3", 2), (vec![1, 2], 4));
        assert_eq!(
            lc("          7          0 \t         12 x", 8),
            (vec![7, 0, 12], 35),
            "runs of spaces longer than a word, and a tab"
        );
        assert_eq!(lc(" 12x 3", 4), (vec![], 0));
        assert_eq!(lc(" 99999999999999999999 1", 4), (vec![], 0));
        assert_eq!(lc(" 1 184467440737095516150", 4), (vec![1], 2));
        assert_eq!(
            lc(" 1234567890123456789 12345678901234567890", 4),
            (
                vec![1_234_567_890_123_456_789, 12_345_678_901_234_567_890],
                41
            )
        );
        assert_eq!(lc("", 4), (vec![], 0));
        assert_eq!(lc(" 18446744073709551615", 1), (vec![u64::MAX], 21));
    }
}
