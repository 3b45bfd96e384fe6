//! The daemon's own resource use, for `process_*` metrics.

use nodemedic_export::ProcessStats;

/// Reads this process's CPU time and memory from the real `/proc/self` (not the configured
/// procfs root, which may be a fixture or the host's). `None` if /proc is unavailable.
pub fn self_stats() -> Option<ProcessStats> {
    let me = procfs::process::Process::myself().ok()?;
    let stat = me.stat().ok()?;
    let ticks = procfs::ticks_per_second() as f64;
    let page = procfs::page_size() as f64;
    let boot = procfs::boot_time_secs()
        .ok()
        .map(|b| b as f64)
        .unwrap_or(0.0);
    Some(ProcessStats {
        cpu_seconds: (stat.utime + stat.stime) as f64 / ticks,
        resident_memory_bytes: stat.rss as f64 * page,
        virtual_memory_bytes: stat.vsize as f64,
        start_time_seconds: boot + stat.starttime as f64 / ticks,
        open_fds: me.fd_count().map(|n| n as f64).unwrap_or(0.0),
    })
}
