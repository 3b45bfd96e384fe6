//! Per-file read cost of the read layer's backends on the SAME files, in one process:
//! open + read + close, a kept-open fd re-read with `pread`, and one io_uring batch of reads
//! on registered fds.
//!
//! File sets (each skipped with a note when absent):
//! - `procfs`: this machine's `/proc/irq/N/{smp_affinity,effective_affinity}`;
//! - `cgroup v2 kernfs`: `cpu.stat`, `cpu.max`, `cpu.pressure`, `memory.pressure`,
//!   `io.pressure` of every child of `$NODEMEDIC_BENCH_CGROUPS` (bench/read-bench.sh makes 500
//!   cgroups under `/sys/fs/cgroup/unified` and removes them after);
//! - `fixture (ext4)`: every regular file under `$NODEMEDIC_BENCH_PODS` (bench/read-bench.sh
//!   writes a 500-pod cgroup tree, 5 files per pod);
//! - `irq fixture (ext4)`: `proc/irq/N/{smp,effective}_affinity` under
//!   `$NODEMEDIC_BENCH_IRQ_FIXTURE` (default `tests/fixtures/256cpu-collapsed`).
//!
//! Per set and backend: median and p90 wall time per file over `$NODEMEDIC_BENCH_ROUNDS`
//! rounds (default 200; more for small sets, so that each covers 200,000 reads) after one
//! warm-up round, and the process's CPU time (all threads,
//! so io_uring's io-wq workers count) per file over all rounds, from /proc/self/stat.
//!
//! ```sh
//! bench/read-bench.sh            # makes the cgroups and the pod tree, runs this, cleans up
//! cargo bench -p nodemedic-collect --bench read_backends
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nodemedic_collect::{process_cpu_seconds, Backend, Reader, ReaderConfig};

fn irq_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(root.join("irq")) else {
        return out;
    };
    for e in rd.flatten() {
        if e.file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
            .is_some()
        {
            for f in ["smp_affinity", "effective_affinity"] {
                let p = e.path().join(f);
                if p.exists() {
                    out.push(p);
                }
            }
        }
    }
    out.sort();
    out
}

fn cgroup_files(parent: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(parent) else {
        return out;
    };
    for e in rd.flatten() {
        if e.path().is_dir() {
            for f in [
                "cpu.stat",
                "cpu.max",
                "cpu.pressure",
                "memory.pressure",
                "io.pressure",
            ] {
                let p = e.path().join(f);
                if p.exists() {
                    out.push(p);
                }
            }
        }
    }
    out.sort();
    out
}

fn all_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let Ok(t) = e.file_type() else { continue };
        if t.is_dir() {
            all_files(&e.path(), out);
        } else if t.is_file() {
            out.push(e.path());
        }
    }
}

struct Result {
    median_us: f64,
    p90_us: f64,
    cpu_us: f64,
}

fn run(files: &[PathBuf], backend: Backend, rounds: usize) -> Option<Result> {
    let reader = Reader::with_config(ReaderConfig {
        backend,
        max_open_files: 1 << 20,
        file_limit_share: None,
    });
    if reader.backend() != backend {
        eprintln!(
            "  {}: unavailable ({:?})",
            backend.as_str(),
            reader.status().fallback_reason
        );
        return None;
    }
    let mut bytes = 0usize;
    let mut one_round = |reader: &Reader| {
        // Every backend goes through read_batch: file by file for open and pread, one
        // submission for io_uring.
        reader.read_batch(files, |_, r| {
            if let Ok(s) = r {
                bytes += s.len();
            }
        });
    };
    one_round(&reader);
    // Small sets get more rounds so that every measurement covers at least 200,000 reads.
    let rounds = rounds.max(200_000 / files.len().max(1));
    let mut times = Vec::with_capacity(rounds);
    let c0 = process_cpu_seconds();
    for _ in 0..rounds {
        let t = Instant::now();
        one_round(&reader);
        times.push(t.elapsed());
    }
    let c1 = process_cpu_seconds();
    assert!(bytes > 0);
    times.sort();
    let per_file = |d: Duration| d.as_secs_f64() * 1e6 / files.len() as f64;
    Some(Result {
        median_us: per_file(times[times.len() / 2]),
        p90_us: per_file(times[times.len() * 9 / 10]),
        cpu_us: (c1 - c0) * 1e6 / (rounds * files.len()) as f64,
    })
}

fn main() {
    let rounds: usize = std::env::var("NODEMEDIC_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);

    let irq_fixture = std::env::var_os("NODEMEDIC_BENCH_IRQ_FIXTURE")
        .map(PathBuf::from)
        .unwrap_or_else(|| nodemedic_testkit::fixture("256cpu-collapsed"));
    let mut sets: Vec<(String, Vec<PathBuf>)> = vec![(
        "procfs `/proc/irq/*/{smp,effective}_affinity`".into(),
        irq_files(Path::new("/proc")),
    )];
    if let Some(dir) = std::env::var_os("NODEMEDIC_BENCH_CGROUPS") {
        sets.push((
            format!("cgroup v2 kernfs ({})", Path::new(&dir).display()),
            cgroup_files(Path::new(&dir)),
        ));
    } else {
        eprintln!("note: NODEMEDIC_BENCH_CGROUPS unset: no cgroup kernfs set (bench/read-bench.sh sets it)");
    }
    if let Some(dir) = std::env::var_os("NODEMEDIC_BENCH_PODS") {
        let mut files = Vec::new();
        all_files(Path::new(&dir), &mut files);
        files.sort();
        sets.push(("500-pod cgroup fixture tree (ext4)".into(), files));
    } else {
        eprintln!(
            "note: NODEMEDIC_BENCH_PODS unset: no pod fixture set (bench/read-bench.sh sets it)"
        );
    }
    sets.push((
        format!(
            "IRQ fixture tree (ext4, {})",
            irq_fixture
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
        ),
        irq_files(&irq_fixture.join("proc")),
    ));
    println!("{rounds} rounds per set and backend after one warm-up; µs per file.\n");
    println!("| file set | files | backend | median wall µs/file | p90 wall µs/file | CPU µs/file (all threads) |");
    println!("|---|---|---|---|---|---|");
    for (name, files) in &sets {
        if files.is_empty() {
            eprintln!("note: {name}: no files, skipped");
            continue;
        }
        for backend in [Backend::Open, Backend::Pread, Backend::IoUring] {
            let label = match backend {
                Backend::Open => "open + read + close",
                Backend::Pread => "kept-open fd, pread at 0",
                Backend::IoUring => "io_uring batch, registered fds",
            };
            if let Some(r) = run(files, backend, rounds) {
                println!(
                    "| {name} | {} | {label} | {:.2} | {:.2} | {:.2} |",
                    files.len(),
                    r.median_us,
                    r.p90_us,
                    r.cpu_us
                );
            }
        }
    }
}
