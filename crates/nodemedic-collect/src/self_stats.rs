//! The daemon's own resource use, for `process_*` metrics.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::OnceLock;

use nodemedic_sample::snapshot::ProcessStats;

/// Reads this process's CPU time and memory from the real `/proc/self` (not the configured
/// procfs root, which may be a fixture or the host's).
///
/// Read by the sampler thread once per sample, not per scrape: `/proc/self/stat` is kept open
/// and re-read with one `pread` (parsed by [`nodemedic_kernel::pid_stat`], which allocates
/// nothing), and the fd count is one `fstat` of `/proc/self/fd`, also kept open. What never
/// changes (boot time, clock ticks, page size) is read once.
pub struct SelfStats {
    stat: Option<File>,
    /// `/proc/self/fd`, open: an `fstat` of it needs no path walk. A `stat` of the path walked
    /// `/proc`, `self` and `fd` every sample, 7% of the sampler thread's CPU on a 2-CPU node
    /// (BENCHMARKS.md, "Fewer wakeups, kept lists").
    fds: Option<File>,
    buf: Vec<u8>,
}

impl Default for SelfStats {
    fn default() -> Self {
        Self::new()
    }
}

impl SelfStats {
    pub fn new() -> Self {
        Self {
            stat: File::open("/proc/self/stat").ok(),
            fds: File::open("/proc/self/fd").ok(),
            buf: vec![0; 1024],
        }
    }

    /// `None` if `/proc` is unavailable or the file did not parse.
    pub fn read(&mut self) -> Option<ProcessStats> {
        let n = self.stat.as_ref()?.read_at(&mut self.buf, 0).ok()?;
        let text = std::str::from_utf8(self.buf.get(..n)?).ok()?;
        let stat = nodemedic_kernel::pid_stat::parse(text).ok()?;
        let fixed = fixed();
        Some(ProcessStats {
            cpu_seconds: (stat.utime + stat.stime) as f64 / fixed.ticks,
            resident_memory_bytes: stat.rss as f64 * fixed.page,
            virtual_memory_bytes: stat.vsize as f64,
            start_time_seconds: fixed.boot + stat.starttime as f64 / fixed.ticks,
            open_fds: open_fds(self.fds.as_ref()),
        })
    }
}

struct Fixed {
    ticks: f64,
    page: f64,
    /// Boot time; `procfs::boot_time_secs` parses all of `/proc/stat` (one line per CPU).
    boot: f64,
}

fn fixed() -> &'static Fixed {
    static FIXED: OnceLock<Fixed> = OnceLock::new();
    FIXED.get_or_init(|| Fixed {
        ticks: procfs::ticks_per_second() as f64,
        page: procfs::page_size() as f64,
        boot: procfs::boot_time_secs()
            .ok()
            .map(|b| b as f64)
            .unwrap_or(0.0),
    })
}

/// Open fds. The read layer keeps thousands of files open on a large node, and listing
/// `/proc/self/fd` costs one entry each; since Linux 6.2 the directory's size is the count
/// (the open directory `dir` answers an `fstat` the same way). Before 6.2 the size is 0 and the
/// directory is listed.
fn open_fds(dir: Option<&File>) -> f64 {
    if let Some(m) = dir.and_then(|d| d.metadata().ok()) {
        if m.len() > 0 {
            return m.len() as f64;
        }
    }
    procfs::process::Process::myself()
        .and_then(|me| me.fd_count())
        .map(|n| n as f64)
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// procfs, which parses every field of the line, is the oracle for the five read here.
    #[test]
    fn reads_what_procfs_reads() {
        use procfs::FromRead;
        let line = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
        let ours = nodemedic_kernel::pid_stat::parse(&line).expect("our parse");
        let theirs = procfs::process::Stat::from_read(line.as_bytes()).expect("procfs's parse");
        assert_eq!(
            (ours.utime, ours.stime, ours.starttime, ours.vsize, ours.rss),
            (
                theirs.utime,
                theirs.stime,
                theirs.starttime,
                theirs.vsize,
                theirs.rss
            )
        );
        assert!(
            ours.vsize > 0 && ours.rss > 0 && ours.starttime > 0,
            "{ours:?}"
        );
    }

    #[test]
    fn reads_this_process_and_sees_its_cpu_time_grow() {
        let mut stats = SelfStats::new();
        let before = stats.read().expect("/proc/self/stat reads on Linux");
        // Burn CPU until the kept-open fd shows more of it than the first read: a stale read
        // never does. Not a fixed spin: the counters move in clock ticks (10 ms), and on a
        // loaded machine 120 ms of wall time once gave this thread less than one (cold CI run,
        // 2026-11-29: "0 then 0"). 10 s of wall time is enough CPU on any machine.
        let start = std::time::Instant::now();
        let mut x = 0u64;
        let mut after = stats.read().expect("second read");
        while after.cpu_seconds <= before.cpu_seconds
            && start.elapsed() < std::time::Duration::from_secs(10)
        {
            for _ in 0..100_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            std::hint::black_box(x);
            after = stats.read().expect("another read");
        }
        assert!(
            after.cpu_seconds > before.cpu_seconds,
            "{} then {} after {:?} of spinning",
            before.cpu_seconds,
            after.cpu_seconds,
            start.elapsed()
        );
        assert!(after.resident_memory_bytes > 1e6);
        assert!(after.open_fds >= 3.0, "{}", after.open_fds);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            (now - after.start_time_seconds).abs() < 3600.0,
            "started {} s ago?",
            now - after.start_time_seconds
        );
    }
}
