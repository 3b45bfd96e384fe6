//! The kernel's per-CPU interrupt and softirq counts are 32-bit and wrap. A fixture tree whose
//! counts cross 2^32 between samples, read by the real collectors through the real engine,
//! must give the rate the counts really moved by, and exported `_total` counters that never go
//! backwards.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::Path;

use nodemedic_collect::sources::interrupts::Interrupts;
use nodemedic_collect::Paths;
use nodemedic_engine::{Engine, EngineConfig};
use nodemedic_export::{render, ExportInput, Format, MetricsOptions};
use nodemedic_sample::Sample;
use nodemedic_testkit::copy_fixture;

const WRAP: u64 = 1 << 32;
/// How far below 2^32 the first reading starts: every count under this wraps on the next step.
const HEADROOM: u64 = 1_000;
/// What every per-CPU count moves by between two samples.
const STEP: u64 = 5_000;

/// Rewrites the per-CPU counts of a `/proc/interrupts`-shaped table as a 32-bit kernel would
/// print them after `steps` steps: `(original + 2^32 - HEADROOM + steps * STEP) mod 2^32`.
fn rewrite_table(original: &str, steps: u64) -> String {
    let mut lines = original.lines();
    let header = lines.next().unwrap();
    let ncpus = header.split_whitespace().count();
    let mut out = format!("{header}\n");
    for line in lines {
        let (label, rest) = line.split_once(':').unwrap();
        let mut tokens = rest.split_whitespace().peekable();
        let mut row = format!("{label}:");
        let mut n = 0;
        while n < ncpus {
            match tokens.peek().and_then(|t| t.parse::<u64>().ok()) {
                Some(v) => {
                    tokens.next();
                    let c = (v + WRAP - HEADROOM + steps * STEP) % WRAP;
                    row.push_str(&format!(" {c:>10}"));
                    n += 1;
                }
                None => break,
            }
        }
        for t in tokens {
            row.push(' ');
            row.push_str(t);
        }
        out.push_str(&row);
        out.push('\n');
    }
    out
}

fn step(root: &Path, originals: &[(&str, String)], steps: u64) {
    for (rel, text) in originals {
        std::fs::write(root.join(rel), rewrite_table(text, steps)).unwrap();
    }
}

/// `name{labels}` -> value of every sample of the exposition.
fn exposition(sample: &Sample) -> BTreeMap<String, f64> {
    let input = ExportInput {
        snapshot: Some(&sample.snapshot),
        verdicts: &sample.verdicts,
        collectors: &sample.collectors,
        samples_total: sample.samples_total,
        process: None,
        remediation: None,
        pressure: sample.pressure.as_ref(),
        host: Some(&sample.host),
    };
    let opts = MetricsOptions {
        per_irq_per_cpu: true,
        per_cpu_arch_interrupts: true,
        ..Default::default()
    };
    let (text, _) = render(&input, &opts, Format::Text);
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

#[test]
fn counts_crossing_2_pow_32_give_the_true_rate_and_monotonic_totals() {
    let tree = copy_fixture("8cpu-collapsed");
    let root = tree.path();
    let originals: Vec<(&str, String)> = ["proc/interrupts", "proc/softirqs"]
        .into_iter()
        .map(|rel| (rel, std::fs::read_to_string(root.join(rel)).unwrap()))
        .collect();
    let mut engine = Engine::new(EngineConfig {
        paths: Paths::under(root.to_path_buf()),
        ..Default::default()
    });

    let mut samples = Vec::new();
    for s in 0..3u64 {
        step(root, &originals, s);
        let sample = engine.sample();
        for c in &sample.collectors {
            assert!(
                c.warnings.is_empty() || c.name != nodemedic_collect::sources::interrupts::NAME,
                "{}: {:?}",
                c.name,
                c.warnings
            );
        }
        samples.push(sample);
    }

    // The step really crosses 2^32 in the files the collectors read.
    let first = samples[0].snapshot.get::<Interrupts>().unwrap();
    let wrapped = first
        .irqs
        .iter()
        .any(|l| first.counts(l).nonzero().any(|(_, c)| c >= WRAP - HEADROOM));
    assert!(wrapped, "the first reading starts just under 2^32");
    let raw_after = rewrite_table(&originals[0].1, 1);
    assert!(
        raw_after.lines().skip(1).any(|l| l
            .split_whitespace()
            .nth(1)
            .and_then(|t| t.parse::<u64>().ok())
            .is_some_and(|c| c < STEP)),
        "the second reading has wrapped counts"
    );

    for (before, after) in samples.iter().zip(&samples[1..]) {
        let dt = after
            .snapshot
            .at
            .checked_sub(before.snapshot.at)
            .unwrap()
            .as_secs_f64();
        // Rates: the collapsed group moved STEP per IRQ per CPU, wrap or not.
        let collapsed: Vec<_> = after.verdicts.iter().filter(|v| v.collapsed_now).collect();
        assert!(
            !collapsed.is_empty(),
            "the fixture's collapse is still seen"
        );
        for v in &after.verdicts {
            let ints = after.snapshot.get::<Interrupts>().unwrap();
            let cells: u64 = ints
                .irqs
                .iter()
                .filter(|l| v.group.irqs.contains(&l.irq))
                .map(|l| ints.counts(l).len() as u64)
                .sum();
            if cells == 0 {
                continue;
            }
            let want = (cells * STEP) as f64 / dt;
            let got = v.evidence.irq_rate.unwrap();
            assert!(
                (got - want).abs() <= want * 1e-9,
                "group {}: rate {got}, want {want}",
                v.group.name
            );
            if let Some(net_rx) = v.evidence.hottest_net_rx_rate {
                let want = STEP as f64 / dt;
                assert!((net_rx - want).abs() <= want * 1e-9, "NET_RX rate {net_rx}");
            }
        }

        // Exported counters: every `_total` series moved forward by exactly what the kernel
        // counted (STEP per CPU cell), none went backwards.
        let (a, b) = (exposition(before), exposition(after));
        let mut checked = 0;
        for (key, then) in a.iter().filter(|(k, _)| {
            k.starts_with("nodemedic_irq_interrupts_total")
                || k.starts_with("nodemedic_irq_cpu_interrupts_total")
                || k.starts_with("nodemedic_cpu_device_interrupts_total")
                || k.starts_with("nodemedic_arch_interrupts_total")
                || k.starts_with("nodemedic_softirqs_total")
        }) {
            let now = b[key];
            assert!(now >= *then, "{key} went backwards: {then} -> {now}");
            if key.starts_with("nodemedic_irq_cpu_interrupts_total")
                || key.starts_with("nodemedic_softirqs_total")
            {
                assert_eq!(now - then, STEP as f64, "{key}");
            }
            checked += 1;
        }
        assert!(checked > 100, "only {checked} counter series compared");
    }
}
