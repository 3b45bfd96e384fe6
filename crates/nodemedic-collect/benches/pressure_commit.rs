//! Two of issue 6's side-by-side figures, nodemedic's half (bench/pressure-commit-bench.sh
//! runs node_exporter and fio in the same invocation for the other half):
//!
//! - `pressure`: the node PSI collector over this machine's `/proc/pressure/*`, through the
//!   read layer (kept-open fds, `pread`), `$NODEMEDIC_BENCH_ROUNDS` collections (default
//!   20,000): median and p90 wall µs per collection and process CPU µs per collection.
//! - `commit`: the disk commit probe with no interval between commits, for
//!   `$NODEMEDIC_BENCH_COMMIT_SECS` seconds (default 10) per backend (io_uring, syscalls), in
//!   `$NODEMEDIC_BENCH_COMMIT_DIR` (default /var/tmp): commits, mean latency, the histogram's
//!   p50/p99 bucket bounds, and the probe's CPU µs per commit (process CPU, all threads).
//!
//! ```sh
//! bench/pressure-commit-bench.sh
//! cargo bench -p nodemedic-collect --bench pressure_commit
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nodemedic_collect::commit_timer::WAL_FSYNC_BUCKETS;
use nodemedic_collect::sources::pressure::NodePressure;
use nodemedic_collect::sources::PressureCollector;
use nodemedic_collect::{
    process_cpu_seconds, Collector, CommitTimer, CommitTimerConfig, Ctx, Paths, Reader,
};
use nodemedic_sample::Snapshot;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

// Ticks are 10 ms; over many rounds that resolves well below a µs per round.

fn pressure(rounds: usize) {
    let paths = Paths::default();
    let reader = Reader::new();
    let collector = PressureCollector::default();
    let ctx = Ctx {
        paths: &paths,
        reader: &reader,
        rescan: false,
        netns: &nodemedic_collect::netns::NetnsView::Host,
    };
    // Warm-up: opens the kept-open fds.
    let mut snap = Snapshot::default();
    collector.collect(&ctx, &mut snap).unwrap();
    assert!(
        snap.get::<NodePressure>().is_some(),
        "no /proc/pressure on this machine"
    );
    let mut walls = Vec::with_capacity(rounds);
    let cpu0 = process_cpu_seconds();
    for _ in 0..rounds {
        let mut snap = Snapshot::default();
        let t = Instant::now();
        collector.collect(&ctx, &mut snap).unwrap();
        walls.push(t.elapsed());
        std::hint::black_box(&snap);
    }
    let cpu = (process_cpu_seconds() - cpu0) * 1e6 / rounds as f64;
    walls.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "pressure collector (/proc/pressure, {} files): {rounds} collections: median {:.2} µs, p90 {:.2} µs wall; CPU {:.2} µs per collection",
        snap.get::<NodePressure>().map_or(0, |p| p.len()),
        us(walls[rounds / 2]),
        us(walls[rounds * 9 / 10]),
        cpu
    );
}

fn bucket_bound(buckets: &[u64; 14], count: u64, q: f64) -> String {
    let want = (count as f64 * q).ceil() as u64;
    for (b, n) in WAL_FSYNC_BUCKETS.iter().zip(buckets) {
        if *n >= want {
            return format!("≤ {} ms", b * 1000.0);
        }
    }
    "> 8192 ms".into()
}

fn commit(dir: &Path, secs: u64, io_uring: bool) {
    let config = CommitTimerConfig {
        directory: dir.to_path_buf(),
        interval: Duration::ZERO,
        io_uring,
        ..CommitTimerConfig::default()
    };
    let cpu0 = process_cpu_seconds();
    let timer = CommitTimer::start(&config).unwrap();
    std::thread::sleep(Duration::from_secs(secs));
    let l = timer.latest();
    drop(timer);
    let cpu = (process_cpu_seconds() - cpu0) * 1e6;
    assert_eq!(l.errors, 0, "{:?}", l.last_error);
    println!(
        "commit probe ({}, asked io_uring={io_uring}) in {}: {} commits of {} B in {secs} s: mean {:.1} µs, p50 {}, p99 {}; CPU {:.1} µs per commit",
        l.backend.as_str(),
        dir.display(),
        l.count,
        config.block_bytes,
        l.sum_seconds / l.count as f64 * 1e6,
        bucket_bound(&l.buckets, l.count, 0.5),
        bucket_bound(&l.buckets, l.count, 0.99),
        cpu / l.count as f64
    );
}

fn main() {
    // `cargo bench` passes --bench; nothing else to parse.
    let what = std::env::var("NODEMEDIC_BENCH_WHAT").unwrap_or_else(|_| "all".into());
    if what == "all" || what == "pressure" {
        pressure(env_or("NODEMEDIC_BENCH_ROUNDS", 20_000));
    }
    if what == "all" || what == "commit" {
        let dir: PathBuf = env_or("NODEMEDIC_BENCH_COMMIT_DIR", PathBuf::from("/var/tmp"));
        let secs = env_or("NODEMEDIC_BENCH_COMMIT_SECS", 10);
        commit(&dir, secs, true);
        commit(&dir, secs, false);
    }
}
