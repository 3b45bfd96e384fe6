//! `/proc/PID/stat` (proc_pid_stat(5)): the fields a process's `process_*` metrics come from.
//!
//! One line: the PID, the command in parentheses (which may itself hold spaces and
//! parentheses: the last `)` ends it), then the state and 49 numbers, space-separated.
//! procfs parses every field, and allocates a buffer and a `String` for each parse; the daemon
//! reads its own file every sample, and under musl's allocator that buffer mapped and unmapped
//! a page each time (BENCHMARKS.md, "Fewer wakeups, kept lists"). This reads the five it
//! exports.

/// The fields of `/proc/PID/stat` the `process_*` metrics are made from, in the kernel's units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PidStat {
    /// Time in user mode, in clock ticks (field 14).
    pub utime: u64,
    /// Time in kernel mode, in clock ticks (field 15).
    pub stime: u64,
    /// When the process started, in clock ticks after boot (field 22).
    pub starttime: u64,
    /// Virtual memory size in bytes (field 23).
    pub vsize: u64,
    /// Resident set size in pages (field 24).
    pub rss: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PidStatError {
    #[error("no ')' ending the command")]
    NoCommand,
    #[error("field {0} is missing: the line was cut short")]
    Missing(usize),
    #[error("field {0} is not a number")]
    NotANumber(usize),
}

/// Parses one `/proc/PID/stat` line (a trailing newline is allowed).
pub fn parse(text: &str) -> Result<PidStat, PidStatError> {
    let end = text.rfind(')').ok_or(PidStatError::NoCommand)?;
    // Fields after the command, numbered as proc(5) numbers them: the state is field 3.
    let mut fields = text[end + 1..].split_ascii_whitespace().zip(3usize..);
    let mut number = |wanted: usize| -> Result<u64, PidStatError> {
        let (value, _) = fields
            .find(|(_, n)| *n == wanted)
            .ok_or(PidStatError::Missing(wanted))?;
        value.parse().map_err(|_| PidStatError::NotANumber(wanted))
    };
    Ok(PidStat {
        utime: number(14)?,
        stime: number(15)?,
        starttime: number(22)?,
        vsize: number(23)?,
        rss: number(24)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The daemon's own line on Linux 6.18 (this machine, 2026-11-29, three seconds after
    /// start), verbatim.
    const LINE: &str = "17070 (nm-musl-c2) S 17068 17068 27661 0 -1 4194304 893 9831 1 0 0 0 3 2 \
        20 0 2 0 1337216 19529728 2323 18446744073709551615 139656566562816 139656578929592 \
        140732488975552 0 0 0 0 4100 17474 0 0 0 17 1 0 0 0 0 0 139656582084680 \
        139656582612896 93825244577792 140732488981119 140732488981201 140732488981201 \
        140732488982504 0\n";

    #[test]
    fn reads_the_five_fields() {
        assert_eq!(
            parse(LINE),
            Ok(PidStat {
                utime: 0,
                stime: 0,
                starttime: 1337216,
                vsize: 19529728,
                rss: 2323,
            })
        );
    }

    #[test]
    fn a_command_with_spaces_and_parentheses_ends_at_the_last_one() {
        // Any process can name itself so (prctl PR_SET_NAME).
        let odd = LINE.replace("(nm-musl-c2)", "(a) 1 2 (b c)");
        assert_eq!(parse(&odd), parse(LINE));
    }

    #[test]
    fn a_cut_line_or_a_bad_field_is_named() {
        let cut = &LINE[..LINE.find(" 19529728").unwrap()];
        assert_eq!(parse(cut), Err(PidStatError::Missing(23)));
        assert_eq!(parse("1 init S 0"), Err(PidStatError::NoCommand));
        let bad = LINE.replace(" 1 0 0 0 3 2 ", " 1 0 0 x 3 2 ");
        assert_eq!(parse(&bad), Err(PidStatError::NotANumber(15)));
    }
}
