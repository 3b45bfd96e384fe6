//! `/proc/softirqs`: its parser (`parse.rs`), the collector and its series.

mod parse;

pub use parse::*;

use std::sync::Mutex;

use nodemedic_exposition::{Encoder, Kind};
use nodemedic_sample::Snapshot;

use self::parse as softirqs;
use super::skipped_warnings;
use crate::registry::Render;
use crate::{CollectError, Collected, Collector, Ctx, ReadError};

/// /proc/softirqs.
pub const NAME: crate::CollectorName = crate::CollectorName::new("softirqs");

crate::register!(crate::registry::Declaration {
    name: NAME,
    order: 50,
    switch: crate::registry::Switch::Collectors,
    optional: false,
    checks: crate::registry::Checks {
        fixtures: crate::registry::Fixtures::Trees(&["8cpu-collapsed", "aarch64"]),
        golden: crate::registry::Golden::Series(&[("8cpu-collapsed", "nodemedic_softirqs_total{")]),
        fuzz: crate::registry::Fuzz::Targets(&["softirqs"]),
    },
    faults: &[crate::registry::FileKind {
        name: "softirqs",
        tree: "8cpu-collapsed",
        pattern: "proc/softirqs",
        table: true,
        optional: false,
        empty_ok: false,
        impact: crate::registry::Impact::NoGroup,
        may_change: &["collector/softirqs", "count/softirqs", "series/softirqs"],
    },],
    render: Some(render),
    build: crate::registry::Build::Here(|_| { Some(Box::new(SoftirqsCollector::default())) }),
});

/// `/proc/softirqs`. The table of a past sample that nothing holds any more is given back
/// ([`Collector::recycle`]) and the next parse fills its rows again rather than allocating
/// them.
#[derive(Default)]
pub struct SoftirqsCollector {
    spare: Mutex<Option<softirqs::Softirqs>>,
}

impl Collector for SoftirqsCollector {
    fn name(&self) -> crate::CollectorName {
        NAME
    }

    fn collect(&self, ctx: &Ctx<'_>, snap: &mut Snapshot) -> Result<Collected, CollectError> {
        let path = ctx.paths.procfs.join("softirqs");
        let mut table = self
            .spare
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .unwrap_or_default();
        ctx.reader
            .read_with(&path, |text| softirqs::parse_into(text, &mut table))?
            .map_err(|e| ReadError::parse(&path, e))?;
        let warnings = skipped_warnings(&path, &table.skipped);
        snap.put(table);
        Ok(Collected {
            warnings,
            ..Default::default()
        })
    }

    fn recycle(&self, snap: &mut Snapshot) {
        if let Some(table) = snap.take::<Softirqs>() {
            *self.spare.lock().unwrap_or_else(|p| p.into_inner()) = Some(table);
        }
    }
}

/// Per CPU, the softirq types `[metrics] softirq_types` names (NET_RX and NET_TX).
fn render(e: &mut Encoder, ctx: &mut Render<'_>) {
    let (snap, opts) = (ctx.snapshot, ctx.options);
    let Some(s) = snap.get::<Softirqs>() else {
        return;
    };
    e.family(
        "nodemedic_softirqs",
        Kind::Counter,
        "Softirqs handled per CPU and type (from /proc/softirqs).",
    );
    let mut num = itoa::Buffer::new();
    for ty in &opts.softirq_types {
        if let Some(row) = s.row(ty) {
            for (cpu, count) in s.cpus.iter().zip(&row.counts) {
                e.sample(&[("cpu", num.format(*cpu)), ("type", ty)], *count as f64);
            }
        }
    }
}
