//! The daemon's own resource use, for `process_*` metrics.

use std::sync::OnceLock;

use nodemedic_export::ProcessStats;

/// Reads this process's CPU time and memory from the real `/proc/self` (not the configured
/// procfs root, which may be a fixture or the host's). `None` if /proc is unavailable.
///
/// Called on every scrape, so it reads only `/proc/self/stat` and one `stat` of
/// `/proc/self/fd`; what never changes (boot time, start time, clock ticks, page size) is
/// read once.
pub fn self_stats() -> Option<ProcessStats> {
    let me = procfs::process::Process::myself().ok()?;
    let stat = me.stat().ok()?;
    let fixed = fixed();
    Some(ProcessStats {
        cpu_seconds: (stat.utime + stat.stime) as f64 / fixed.ticks,
        resident_memory_bytes: stat.rss as f64 * fixed.page,
        virtual_memory_bytes: stat.vsize as f64,
        start_time_seconds: fixed.boot + stat.starttime as f64 / fixed.ticks,
        open_fds: open_fds(&me),
    })
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
/// `/proc/self/fd` costs one entry each; since Linux 6.2 the directory's size is the count.
fn open_fds(me: &procfs::process::Process) -> f64 {
    if let Ok(m) = std::fs::metadata("/proc/self/fd") {
        if m.len() > 0 {
            return m.len() as f64;
        }
    }
    me.fd_count().map(|n| n as f64).unwrap_or(0.0)
}
