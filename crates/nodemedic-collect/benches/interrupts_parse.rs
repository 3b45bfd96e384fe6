//! `/proc/interrupts` parsed from memory, no I/O: the 256-CPU fixture, the 1024-CPU tree of
//! `$NODEMEDIC_BENCH_1024` (`python3 tests/fixtures/generate.py --big DIR`) when set, and this
//! machine's own table. Best of 5 rounds, µs per parse.
//!
//! ```sh
//! NODEMEDIC_BENCH_1024=DIR/1024cpu cargo bench -p nodemedic-kernel --bench interrupts_parse
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::Instant;

fn bench(name: &str, path: PathBuf, rounds: usize) {
    let Ok(text) = std::fs::read_to_string(&path) else {
        println!("| {name} | {} unreadable | |", path.display());
        return;
    };
    let mut best = f64::MAX;
    for _ in 0..5 {
        let start = Instant::now();
        for _ in 0..rounds {
            let table = nodemedic_collect::sources::interrupts::parse(std::hint::black_box(&text));
            std::hint::black_box(table.expect("a table"));
        }
        best = best.min(start.elapsed().as_secs_f64() * 1e6 / rounds as f64);
    }
    println!("| {name} | {} KiB | {best:.1} |", text.len() / 1024);
}

fn main() {
    println!("| table | size | µs per parse, best of 5 |");
    println!("|---|---|---|");
    let fixtures = nodemedic_testkit::fixtures_dir();
    bench(
        "256cpu-collapsed",
        fixtures.join("256cpu-collapsed/proc/interrupts"),
        200,
    );
    if let Some(big) = std::env::var_os("NODEMEDIC_BENCH_1024") {
        bench("1024cpu", PathBuf::from(big).join("proc/interrupts"), 30);
    }
    bench("this machine", PathBuf::from("/proc/interrupts"), 2000);
}
