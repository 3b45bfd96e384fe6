//! Allocations per steady-state sample and per render stay low (issue 35, point 2): a change
//! that allocates per row again (a `String` per IRQ, a map rebuilt every sample, a label
//! formatted per series) fails here, deterministically, without timing anything.
//! `benches/allocations.rs` prints the same counts on every tree; BENCHMARKS.md, "Allocations
//! per sample and per render", has them before and after.
//!
//! One test in this file on purpose: the counting allocator counts every thread of the
//! process, and a second test running beside it would add its allocations to these.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::alloc::System;
use std::time::Duration;

use nodemedic_collect::sources::CgroupSelection;
use nodemedic_collect::Paths;
use nodemedic_engine::{Engine, EngineConfig};
use nodemedic_export::endpoint::render_sample;
use nodemedic_export::{Format, MetricsOptions};
use nodemedic_sample::remedy::{Mode, RemedyState};
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Allocator calls (`alloc` + `realloc`) per sample on `256cpu-collapsed`, mean of 12 steady
/// samples (one rescan among them): BENCHMARKS.md gives the count this bound is set over.
const MAX_PER_SAMPLE: usize = 450;
/// The same per plain-text render of that sample's `/metrics`.
const MAX_PER_RENDER: usize = 60;

#[test]
fn steady_samples_and_renders_allocate_within_their_bounds() {
    // The daemon's defaults (see benches/allocations.rs).
    let mut engine = Engine::new(EngineConfig {
        paths: Paths::under(nodemedic_testkit::fixture("256cpu-collapsed")),
        cgroups: CgroupSelection {
            services: true,
            ..Default::default()
        },
        cgroups_interval: Duration::from_secs(15),
        ..Default::default()
    });
    let mut at = Duration::from_secs(1);
    // As the daemon does: it holds the last sample and gives back the one before it.
    let (mut older, mut last) = (None, None);
    for _ in 0..13 {
        at += Duration::from_secs(5);
        if let Some(old) = older.take() {
            engine.recycle(old);
        }
        older = last.replace(engine.sample_at(at));
    }
    let samples = 12;
    let mut calls = 0;
    for _ in 0..samples {
        if let Some(old) = older.take() {
            engine.recycle(old);
        }
        at += Duration::from_secs(5);
        let region = Region::new(GLOBAL);
        let sample = engine.sample_at(at);
        let change = region.change();
        calls += change.allocations + change.reallocations;
        older = last.replace(sample);
    }
    let per_sample = calls / samples;
    let sample = last.unwrap();
    assert!(
        sample.collectors.iter().any(|c| c.is_success()),
        "{:?}",
        sample.collectors
    );

    let remedy = RemedyState {
        mode: Some(Mode::On),
        ..Default::default()
    };
    let metrics = MetricsOptions::default();
    let region = Region::new(GLOBAL);
    let body = render_sample(Some(&sample), None, &remedy, &metrics, Format::Text);
    let change = region.change();
    let per_render = change.allocations + change.reallocations;
    assert!(body.contains("nodemedic_irq_collapsed"));

    eprintln!("allocations per sample {per_sample}, per render {per_render}");
    assert!(
        per_sample <= MAX_PER_SAMPLE,
        "a steady sample of 256cpu-collapsed made {per_sample} allocator calls, above the \
         bound of {MAX_PER_SAMPLE}: what allocates per row again? (cargo bench -p \
         nodemedic-engine --bench allocations, and heaptrack on it, say where)"
    );
    assert!(
        per_render <= MAX_PER_RENDER,
        "a render of /metrics made {per_render} allocator calls, above the bound of \
         {MAX_PER_RENDER}"
    );
}
