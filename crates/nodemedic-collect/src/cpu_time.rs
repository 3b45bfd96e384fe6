//! This process's CPU time.

/// This process's CPU time in seconds, from the scheduler's nanosecond accounting
/// (`CLOCK_PROCESS_CPUTIME_ID`; `/proc/self/stat` counts 10 ms ticks). For benchmarks.
pub fn process_cpu_seconds() -> f64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}
