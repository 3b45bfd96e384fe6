//! Heap allocations per steady-state sample and per render of `/metrics` (issue 35, point 2),
//! counted, not timed: the count is the same on a loaded machine as on an idle one.
//!
//! The global allocator of this bench (and of nothing shipped) is `stats_alloc`'s counting
//! wrapper over the C library's allocator. It counts every `alloc` and `realloc` call and
//! their bytes, on every thread. Per case:
//!
//! - **a sample**: `Engine::sample_at`, the sample before given back first (`Engine::recycle`,
//!   as the daemon gives back the one a new sample replaced), with the daemon's default configuration (cgroups every
//!   15 s with services, a rescan every 60 s, the tuning audit, probes and disk probe off, as
//!   on a node where they do not attach), plus the `process_*` stats the sampler thread reads
//!   after it (`SelfStats::read`). Samples are 5 s apart in the engine's clock, as the
//!   daemon's `sample_interval`; 13 warm-up samples first (the first rescan, the first cgroup
//!   walk, every cache filled), then 24 measured ones: 2 minutes of the daemon, with 2
//!   rescans and 8 cgroup reads in them. Mean, min and max per sample.
//! - **a render**: `nodemedic_export::endpoint::render_sample_into` of the last sample (what
//!   the endpoint renders once per sample for the first scrape of it), with the lists of the
//!   last rendering (`RenderScratch`) kept as the endpoint keeps them, plain text; then the same
//!   plus `endpoint::Gzip::compress` of it (its compressor kept between renders, as the
//!   endpoint keeps it), as a scrape that accepts gzip (Prometheus) costs.
//!
//! Cases: this machine's real `/proc` and `/sys`; `tests/fixtures/256cpu-collapsed`; the
//! 1024-CPU tree (`$NODEMEDIC_BENCH_1024`, else written by `generate.py --big` into a
//! temporary directory). `$NODEMEDIC_BENCH_CASE` keeps the cases whose name contains it.
//!
//! `cargo bench -p nodemedic-engine --bench allocations`

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::alloc::System;
use std::path::PathBuf;
use std::time::Duration;

use nodemedic_collect::sources::CgroupSelection;
use nodemedic_collect::{Paths, SelfStats};
use nodemedic_engine::{Engine, EngineConfig};
use nodemedic_export::endpoint::{render_sample_into, Gzip};
use nodemedic_export::{Format, MetricsOptions, RenderScratch};
use nodemedic_sample::remedy::{Mode, RemedyState};
use stats_alloc::{Region, Stats, StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const WARM_UP: usize = 13;
const SAMPLES: usize = 24;
const RENDERS: usize = 10;

/// The daemon's defaults where they differ from `EngineConfig::default()` (the binary's
/// `config.rs`: `[cgroups] interval = "15s"`, `services = true`).
fn daemon_config(paths: Paths) -> EngineConfig {
    EngineConfig {
        paths,
        cgroups: CgroupSelection {
            services: true,
            ..Default::default()
        },
        cgroups_interval: Duration::from_secs(15),
        ..Default::default()
    }
}

/// Calls to the allocator (`alloc` and `realloc`) and the bytes they asked for.
#[derive(Clone, Copy, Default)]
struct Count {
    calls: usize,
    reallocs: usize,
    bytes: usize,
}

impl From<Stats> for Count {
    fn from(s: Stats) -> Self {
        Count {
            calls: s.allocations + s.reallocations,
            reallocs: s.reallocations,
            // Bytes of new blocks, plus what reallocations grew by.
            bytes: s.bytes_allocated,
        }
    }
}

struct Row {
    case: String,
    shape: String,
    sample_mean: Count,
    sample_min: usize,
    sample_max: usize,
    text: Count,
    text_len: usize,
    gzip: Count,
    gzip_len: usize,
}

fn measure(case: &str, paths: Paths) -> Row {
    let mut engine = Engine::new(daemon_config(paths));
    let mut self_stats = SelfStats::new();
    let mut clock = Duration::from_secs(1);
    let mut tick = || {
        clock += Duration::from_secs(5);
        clock
    };
    // The daemon holds the last sample (published) and gives back the one before it, which
    // the next sample replaced: its frees are not this sample's, and its lists (the
    // interrupts table among them: the detector holds only the last table) are filled again.
    let (mut older, mut last) = (None, None);
    for _ in 0..WARM_UP {
        if let Some(old) = older.take() {
            engine.recycle(old);
        }
        older = last.replace(engine.sample_at(tick()));
        let _ = self_stats.read();
    }
    let mut per_sample = Vec::with_capacity(SAMPLES);
    let mut process = None;
    for _ in 0..SAMPLES {
        if let Some(old) = older.take() {
            engine.recycle(old);
        }
        let region = Region::new(GLOBAL);
        let sample = engine.sample_at(tick());
        process = self_stats.read();
        per_sample.push(Count::from(region.change()));
        older = last.replace(sample);
    }
    let sample = last.expect("a sample");
    let remedy = RemedyState {
        mode: Some(Mode::On),
        ..Default::default()
    };
    let metrics = MetricsOptions::default();
    let mut text = Count::default();
    let mut gz = Count::default();
    let (mut text_len, mut gzip_len) = (0, 0);
    // The endpoint's compressor and the lists of its renderings (the IRQs' labels), kept
    // from one rendering to the next as the endpoint keeps them. The text is new each time.
    let gzip = Gzip::default();
    let mut scratch = RenderScratch::default();
    let mut render = || {
        render_sample_into(
            Some(&sample),
            process,
            &remedy,
            &metrics,
            Format::Text,
            Vec::new(),
            &mut scratch,
        )
    };
    for _ in 0..RENDERS {
        let region = Region::new(GLOBAL);
        let body = render();
        text = Count::from(region.change());
        text_len = body.len();
        drop(body);
        let region = Region::new(GLOBAL);
        let body = render();
        let z = gzip.compress(body.as_bytes()).expect("gzip");
        gz = Count::from(region.change());
        gzip_len = z.len();
    }
    let n = per_sample.len();
    let sum = |f: fn(&Count) -> usize| per_sample.iter().map(f).sum::<usize>() / n;
    Row {
        case: case.to_string(),
        shape: common::shape(case, &sample),
        sample_mean: Count {
            calls: sum(|c| c.calls),
            reallocs: sum(|c| c.reallocs),
            bytes: sum(|c| c.bytes),
        },
        sample_min: per_sample.iter().map(|c| c.calls).min().unwrap_or(0),
        sample_max: per_sample.iter().map(|c| c.calls).max().unwrap_or(0),
        text,
        text_len,
        gzip: gz,
        gzip_len,
    }
}

fn wanted(name: &str) -> bool {
    match std::env::var("NODEMEDIC_BENCH_CASE") {
        Ok(only) => name.contains(only.as_str()),
        Err(_) => true,
    }
}

/// The 1024-CPU tree: `$NODEMEDIC_BENCH_1024`, or written by `generate.py --big` into a
/// temporary directory (removed when the guard drops).
fn tree_1024() -> Option<(PathBuf, Option<tempfile::TempDir>)> {
    if let Some(dir) = std::env::var_os("NODEMEDIC_BENCH_1024") {
        return Some((PathBuf::from(dir), None));
    }
    let tmp = tempfile::tempdir().ok()?;
    let status = std::process::Command::new("python3")
        .arg(nodemedic_testkit::fixtures_dir().join("generate.py"))
        .arg("--big")
        .arg(tmp.path())
        .status();
    match status {
        Ok(s) if s.success() => Some((tmp.path().join("1024cpu"), Some(tmp))),
        other => {
            eprintln!("note: no 1024-CPU tree (python3 generate.py --big: {other:?}); set NODEMEDIC_BENCH_1024");
            None
        }
    }
}

fn main() {
    let mut rows = Vec::new();
    let real = "this machine (real /proc, /sys)";
    if wanted(real) {
        rows.push(measure(real, Paths::default()));
    }
    let c256 = "256cpu-collapsed";
    if wanted(c256) {
        rows.push(measure(
            c256,
            Paths::under(nodemedic_testkit::fixture("256cpu-collapsed")),
        ));
    }
    let c1024 = "1024cpu (generate.py --big)";
    if wanted(c1024) {
        if let Some((dir, _guard)) = tree_1024() {
            rows.push(measure(c1024, Paths::under(dir)));
        }
    }
    println!(
        "Allocator calls (alloc + realloc) and bytes asked for; per sample: mean (min–max) of \
         {SAMPLES} samples after {WARM_UP} warm-up ones, 5 s apart in the engine's clock.\n"
    );
    println!("| case | shape | allocations per sample | of which reallocs | KiB per sample | allocations per render (text) | KiB per render | allocations per render + gzip | KiB per render + gzip | text / gzip bytes |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let kib = |b: usize| b as f64 / 1024.0;
    for r in &rows {
        println!(
            "| {} | {} | **{}** ({}–{}) | {} | {:.0} | **{}** | {:.0} | **{}** | {:.0} | {} / {} |",
            r.case,
            r.shape,
            r.sample_mean.calls,
            r.sample_min,
            r.sample_max,
            r.sample_mean.reallocs,
            kib(r.sample_mean.bytes),
            r.text.calls,
            kib(r.text.bytes),
            r.gzip.calls,
            kib(r.gzip.bytes),
            r.text_len,
            r.gzip_len,
        );
    }
}
