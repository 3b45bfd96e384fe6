//! CPU per sample of the whole pipeline (every collector through the read layer, then every
//! detector), as `nodemedic run` does it each `sample_interval`:
//!
//! - `256cpu-collapsed`: the 256-CPU, 422-IRQ fixture;
//! - `256cpu-collapsed + 500 pods`: the same plus a cgroup v2 tree of 500 burstable pods (5
//!   files each, systemd driver layout) generated in a temporary directory;
//! - `1024cpu`: `$NODEMEDIC_BENCH_1024` (`python3 tests/fixtures/generate.py --big DIR`), if set;
//! - `this machine`: the real `/proc`, `/sys` and `/sys/fs/cgroup`.
//!
//! Per case: `$NODEMEDIC_BENCH_SAMPLES` samples (default 300) after 5 warm-up samples, 5 s
//! apart in the engine's clock (1 ms in real time, `$NODEMEDIC_BENCH_PAUSE_MS`); wall median and
//! p90 per sample, and process CPU time (`CLOCK_PROCESS_CPUTIME_ID`) divided by the samples.
//! Each sample is given back to the engine once the next one is taken, as the daemon does.
//! `cargo bench -p nodemedic-engine`.

#![allow(clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nodemedic_collect::Paths;
use nodemedic_engine::{Engine, EngineConfig};

/// Real time between two samples: `$NODEMEDIC_BENCH_PAUSE_MS`, default 1. The daemon samples
/// every few seconds, and after a pause that long a sample starts with cold caches (on this
/// VM the vCPU halts and the host runs other work), which costs more than back to back.
fn pause() -> Duration {
    Duration::from_millis(
        std::env::var("NODEMEDIC_BENCH_PAUSE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1),
    )
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

fn pods(dir: &Path, n: usize) {
    std::fs::write(dir.join("cgroup.controllers"), "cpu io memory pids\n").ok();
    let psi = "some avg10=0.12 avg60=0.08 avg300=0.02 total=1234567\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=2345\n";
    let base = dir.join("kubepods.slice/kubepods-burstable.slice");
    for i in 0..n {
        let d = base.join(format!(
            "kubepods-burstable-pod{:08x}_0000_4000_8000_{:012x}.slice",
            i + 1,
            i + 1
        ));
        std::fs::create_dir_all(&d).ok();
        for (name, text) in [
            ("cpu.max", "50000 100000\n"),
            (
                "cpu.stat",
                "usage_usec 123456789\nuser_usec 100000000\nsystem_usec 23456789\nnr_periods 100000\nnr_throttled 1234\nthrottled_usec 5678901\nnr_bursts 0\nburst_usec 0\n",
            ),
            ("cpu.pressure", psi),
            ("memory.pressure", psi),
            ("io.pressure", psi),
        ] {
            std::fs::write(d.join(name), text).ok();
        }
    }
}

fn run(name: &str, paths: Paths, samples: usize) {
    run_with(name, paths, samples, Duration::ZERO);
}

/// `cgroups_interval`: how often the cgroups are read (zero: every sample). Samples are 5 s
/// apart in the engine's clock (the daemon's default `sample_interval`), [`pause`] in real time.
fn run_with(name: &str, paths: Paths, samples: usize, cgroups_interval: Duration) {
    if !wanted(name) {
        return;
    }
    let mut engine = Engine::new(EngineConfig {
        paths,
        cgroups_interval,
        ..Default::default()
    });
    let pause = pause();
    let mut clock = Duration::from_secs(1);
    let mut tick = || {
        clock += Duration::from_secs(5);
        clock
    };
    // As the daemon does: it holds the last sample and gives the one before it back to the
    // engine, whose next sample fills its storage (`Engine::recycle`).
    let (mut older, mut last) = (None, None);
    for _ in 0..5 {
        if let Some(old) = older.take() {
            engine.recycle(old);
        }
        older = last.replace(engine.sample_at(tick()));
    }
    let cpu0 = nodemedic_collect::process_cpu_seconds();
    let mut walls = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        if let Some(old) = older.take() {
            engine.recycle(old);
        }
        let s = engine.sample_at(tick());
        walls.push(t.elapsed());
        older = last.replace(s);
        std::thread::sleep(pause);
    }
    let cpu = (nodemedic_collect::process_cpu_seconds() - cpu0) / samples as f64;
    walls.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let s = last.expect("samples");
    let shape = common::shape(name, &s);
    println!(
        "| {name} | {shape} | {:.2} | {:.2} | {:.2} | {:.1} |",
        ms(walls[walls.len() / 2]),
        ms(walls[walls.len() * 9 / 10]),
        cpu * 1e3,
        rss_mib()
    );
    let per: Vec<String> = s
        .collectors
        .iter()
        .filter(|c| c.last_duration_seconds > 0.0001)
        .map(|c| format!("{} {:.2}", c.name, c.last_duration_seconds * 1e3))
        .collect();
    eprintln!("{name}: last sample's collectors (ms): {}", per.join(", "));
}

const PODS: &str = "256cpu-collapsed + 500 pods";
const PODS_INTERVAL: &str = "256cpu-collapsed + 500 pods, cgroups.interval 15s (daemon default)";
const CASES: [&str; 5] = [
    "256cpu-collapsed",
    PODS,
    PODS_INTERVAL,
    "1024cpu",
    "this machine (real /proc, /sys)",
];

/// `$NODEMEDIC_BENCH_CASE` picks one case by its whole name, or else the cases whose name
/// contains it (for profiling one).
fn wanted(name: &str) -> bool {
    match std::env::var("NODEMEDIC_BENCH_CASE") {
        Ok(only) if CASES.contains(&only.as_str()) => name == only,
        Ok(only) => name.contains(only.as_str()),
        Err(_) => true,
    }
}

fn main() {
    let samples: usize = std::env::var("NODEMEDIC_BENCH_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let fixtures = nodemedic_testkit::fixtures_dir();
    println!("{samples} samples per case after 5 warm-up samples; ms per sample; RSS = this process's peak so far.\n");
    println!("| case | shape | wall median ms | wall p90 ms | CPU ms/sample | peak RSS MiB |");
    println!("|---|---|---|---|---|---|");
    let irq256 = fixtures.join("256cpu-collapsed");
    run(CASES[0], Paths::under(&irq256), samples);
    // The 500-pod tree takes seconds to write: only when a case reads it.
    if wanted(PODS) || wanted(PODS_INTERVAL) {
        let tmp =
            std::env::temp_dir().join(format!("nodemedic-sample-bench-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).ok();
        pods(&tmp, 500);
        let mut with_pods = Paths::under(&irq256);
        with_pods.cgroupfs = tmp.clone();
        run(PODS, with_pods.clone(), samples);
        run_with(PODS_INTERVAL, with_pods, samples, Duration::from_secs(15));
        std::fs::remove_dir_all(&tmp).ok();
    }
    if let Some(big) = std::env::var_os("NODEMEDIC_BENCH_1024") {
        run(CASES[3], Paths::under(PathBuf::from(big)), samples.min(100));
    }
    run(CASES[4], Paths::default(), samples);
}
