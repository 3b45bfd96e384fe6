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
use nodemedic_collect::{CollectorName, CollectorState, Paths};
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

/// The collectors of the daemon's defaults that `256cpu-collapsed` holds no files for, each
/// with the directory it lacks: they report `Unavailable`, with nothing to read. Every other
/// collector of the sample must be active, or the bounds would hold for less work than they
/// were set over (a collector that fails or is switched off allocates less).
const NOT_IN_TREE: &[(CollectorName, &str)] = &[
    (nodemedic_collect::sources::pressure::NAME, "proc/pressure"),
    (nodemedic_collect::sources::cgroups::NAME, "sys/fs/cgroup"),
];

#[test]
fn steady_samples_and_renders_allocate_within_their_bounds() {
    // The daemon's defaults (see benches/allocations.rs).
    let tree = nodemedic_testkit::fixture("256cpu-collapsed");
    let mut engine = Engine::new(EngineConfig {
        paths: Paths::under(&tree),
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
    let wrong: Vec<String> = sample
        .collectors
        .iter()
        .filter(|c| match NOT_IN_TREE.iter().find(|(n, _)| *n == c.name) {
            None => c.state != CollectorState::Active,
            Some((_, dir)) => {
                tree.join(dir).exists() || !matches!(c.state, CollectorState::Unavailable { .. })
            }
        })
        .map(|c| format!("{}: {:?}", c.name, c.state))
        .collect();
    assert!(
        wrong.is_empty() && sample.collectors.len() > NOT_IN_TREE.len(),
        "the collectors measured on {} are not all active (or, of NOT_IN_TREE, unavailable \
         for want of their directory): {wrong:?}",
        tree.display()
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
