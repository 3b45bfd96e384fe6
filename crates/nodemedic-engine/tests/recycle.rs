//! A sample given back to the engine ([`Engine::recycle`], as the daemon does with the sample
//! it replaced) has its lists (the interrupts table's rows among them) filled again by the
//! next sample, and changes nothing in it.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use nodemedic_collect::sources::interrupts::Interrupts;
use nodemedic_collect::Paths;
use nodemedic_engine::{Engine, EngineConfig};
use nodemedic_sample::Sample;

fn engine() -> Engine {
    let mut config = EngineConfig {
        paths: Paths::under(nodemedic_testkit::fixture("256cpu-collapsed")),
        ..Default::default()
    };
    config.collapse.raise_after = 1;
    Engine::new(config)
}

/// What a sample says, without what is timed: the collectors' durations, and the wall-clock
/// time a verdict was raised at (the two engines sample at different moments), of which only
/// whether it is set is kept.
fn said(s: &Sample) -> serde_json::Value {
    let mut verdicts = serde_json::to_value(&s.verdicts).unwrap();
    for v in verdicts.as_array_mut().unwrap() {
        for since in ["collapsed_since", "hurting_since"] {
            v[since] = serde_json::Value::Bool(!v[since].is_null());
        }
    }
    let collectors: Vec<(String, String)> = s
        .collectors
        .iter()
        .map(|c| (c.name.to_string(), format!("{:?}", c.state)))
        .collect();
    serde_json::json!({
        "verdicts": verdicts,
        "findings": serde_json::to_value(&s.findings).unwrap(),
        "collectors": collectors,
    })
}

/// As the daemon does: a sample is given back once the next one has replaced it, so the
/// detector's share of its interrupts table is gone (it keeps the last table only).
#[test]
fn a_recycled_samples_lists_are_filled_again_with_the_same_verdicts() {
    let (mut recycling, mut plain) = (engine(), engine());
    let mut older = recycling.sample_at(Duration::from_secs(100));
    let mut last = recycling.sample_at(Duration::from_secs(101));
    plain.sample_at(Duration::from_secs(100));
    plain.sample_at(Duration::from_secs(101));
    let rows = |s: &Sample| s.snapshot.get::<Interrupts>().unwrap().irqs.as_ptr();
    for t in 102..106 {
        let at = Duration::from_secs(t);
        let lists = (
            older.verdicts.as_ptr(),
            older.collectors.as_ptr(),
            older.findings.as_ptr(),
            rows(&older),
        );
        assert!(!older.verdicts.is_empty() && !older.findings.is_empty());
        recycling.recycle(older);
        let next = recycling.sample_at(at);
        assert_eq!(said(&next), said(&plain.sample_at(at)), "sample at {t} s");
        assert_eq!(
            (
                next.verdicts.as_ptr(),
                next.collectors.as_ptr(),
                next.findings.as_ptr(),
                rows(&next),
            ),
            lists,
            "the next sample's lists are the given-back sample's"
        );
        (older, last) = (last, next);
    }
}

/// The endpoint keeps the lists a rendering builds (the IRQs' labels) from one scrape to the
/// next: a rendering with lists a larger or a smaller node left behind is the same text as
/// one with new lists.
#[test]
fn a_rendering_with_kept_lists_is_the_same_as_with_new_ones() {
    use nodemedic_export::endpoint::render_sample_into;
    use nodemedic_export::{Format, MetricsOptions, RenderScratch};
    use nodemedic_sample::remedy::RemedyState;

    let sample_of = |tree: &str| {
        let mut engine = Engine::new(EngineConfig {
            paths: Paths::under(nodemedic_testkit::fixture(tree)),
            ..Default::default()
        });
        engine.sample_at(Duration::from_secs(100));
        engine.sample_at(Duration::from_secs(101))
    };
    let (big, small) = (sample_of("256cpu-collapsed"), sample_of("8cpu-collapsed"));
    let remedy = RemedyState::default();
    let opts = MetricsOptions::default();
    let render = |s: &Sample, scratch: &mut RenderScratch| {
        render_sample_into(
            Some(s),
            None,
            &remedy,
            &opts,
            Format::Text,
            Vec::new(),
            scratch,
        )
    };
    let mut kept = RenderScratch::default();
    for s in [&big, &small, &big, &small] {
        let text = render(s, &mut kept);
        assert!(text.contains("nodemedic_irq_interrupts_total{"), "{text}");
        assert_eq!(text, render(s, &mut RenderScratch::default()));
    }
}
