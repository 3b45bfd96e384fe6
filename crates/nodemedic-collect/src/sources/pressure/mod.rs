//! Node-wide Pressure Stall Information (`/proc/pressure/*`): the PSI parser (`parse.rs`, which
//! the cgroups collector reuses for `<resource>.pressure`), the collector and its series.

mod parse;

pub use parse::*;

use std::collections::BTreeMap;

use nodemedic_exposition::{Encoder, Kind};
use nodemedic_sample::Snapshot;

use self::parse as psi;
use super::RescanCache;
use crate::registry::Render;
use crate::{CollectError, Collected, Collector, Ctx, ReadError};

/// Node-wide Pressure Stall Information by resource (`cpu`, `memory`, `io`, `irq`): only the
/// resources this kernel reports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodePressure(pub BTreeMap<PsiResource, Psi>);

nodemedic_sample::deref! { NodePressure => BTreeMap<PsiResource, Psi> }

/// Node-wide Pressure Stall Information.
pub const NAME: crate::CollectorName = crate::CollectorName::new("pressure");

crate::register!(crate::registry::Declaration {
    name: NAME,
    order: 80,
    switch: crate::registry::Switch::Collectors,
    optional: false,
    checks: crate::registry::Checks {
        fixtures: crate::registry::Fixtures::Trees(&["k8s-systemd-v2", "k8s-cgroupfs-hybrid"]),
        golden: crate::registry::Golden::Series(&[(
            "k8s-systemd-v2",
            "nodemedic_pressure_cpu_waiting_seconds_total ",
        )]),
        fuzz: crate::registry::Fuzz::Targets(&["psi"]),
    },
    faults: &[crate::registry::FileKind {
        name: "node pressure",
        tree: "k8s-systemd-v2",
        pattern: "proc/pressure/*",
        table: true,
        optional: false,
        empty_ok: false,
        impact: crate::registry::Impact::NoGroup,
        may_change: &["collector/pressure", "pressure/", "series/pressure"],
    },],
    render: Some(render),
    build: crate::registry::Build::Here(|_| { Some(Box::new(PressureCollector::default())) }),
});

/// `EOPNOTSUPP`: PSI compiled in but switched off (`psi=0`, or `CONFIG_PSI_DEFAULT_DISABLED`
/// without `psi=1`); the files exist and every read fails.
pub(super) const EOPNOTSUPP: i32 = libc::EOPNOTSUPP;

/// Node-wide Pressure Stall Information from `/proc/pressure/{cpu,memory,io,irq}`.
///
/// A kernel without PSI, or with PSI switched off, is no data with its reason, never zeros.
/// One damaged file loses that resource and is a warning naming it.
///
/// Whether the directory exists, and whether it has the `irq` file (Linux 6.1+), is looked
/// up on rescans only: samples in between do not retry a file that was not there.
#[derive(Default)]
pub struct PressureCollector {
    /// From the last rescan: `None` when `/proc/pressure` did not exist, else whether `irq`
    /// did.
    present: RescanCache<Option<bool>>,
}

impl Collector for PressureCollector {
    fn name(&self) -> crate::CollectorName {
        NAME
    }

    fn collect(&self, ctx: &Ctx<'_>, snap: &mut Snapshot) -> Result<Collected, CollectError> {
        let dir = ctx.paths.procfs.join("pressure");
        let mut out = Collected::default();
        let (present, _) = self.present.get(ctx.rescan, || {
            let irq = dir.join("irq").exists();
            Ok((dir.is_dir().then_some(irq), Vec::new()))
        })?;
        let Some(irq_present) = present else {
            out.unavailable = Some(format!(
                "{} does not exist: the kernel has no PSI (CONFIG_PSI, Linux 4.20+)",
                dir.display()
            ));
            return Ok(out);
        };
        let mut found = BTreeMap::new();
        let mut switched_off = false;
        let mut errors = Vec::new();
        for resource in PsiResource::ALL {
            if resource == PsiResource::Irq && !irq_present {
                continue;
            }
            let path = dir.join(resource.as_str());
            match ctx.reader.read_with(&path, psi::parse) {
                Ok(Ok(p)) => {
                    found.insert(resource, p);
                }
                Ok(Err(e)) => errors.push(ReadError::parse(&path, e)),
                // irq pressure needs Linux 6.1 and CONFIG_IRQ_TIME_ACCOUNTING.
                Err(e) if e.is_missing() && resource == PsiResource::Irq => {}
                Err(ReadError::Io { source, .. }) if source.raw_os_error() == Some(EOPNOTSUPP) => {
                    switched_off = true;
                }
                Err(e) => errors.push(e),
            }
        }
        if found.is_empty() {
            if switched_off {
                out.unavailable = Some(
                    "PSI is switched off (boot with psi=1; kernels built with \
                     CONFIG_PSI_DEFAULT_DISABLED need it)"
                        .into(),
                );
                return Ok(out);
            }
            if !errors.is_empty() {
                return Err(errors.swap_remove(0).into());
            }
        }
        out.warnings.extend(errors.iter().map(ToString::to_string));
        if !found.is_empty() {
            snap.put(NodePressure(found));
        }
        Ok(out)
    }
}

/// Node-wide PSI, named as node_exporter names it: `some` is `_waiting_seconds_total` (at
/// least one task waited), `full` is `_stalled_seconds_total` (all non-idle tasks waited at
/// once); only the resources the kernel reports.
fn render(e: &mut Encoder, ctx: &mut Render<'_>) {
    let snap = ctx.snapshot;
    let Some(p) = snap.get::<NodePressure>() else {
        return;
    };
    for resource in PsiResource::ALL {
        let Some(psi) = p.get(&resource) else {
            continue;
        };
        if let Some(some) = psi.some {
            e.family(
                &format!("nodemedic_pressure_{resource}_waiting_seconds"),
                Kind::Counter,
                &format!(
                    "Time in which at least one task on the node waited for {} (PSI some).",
                    what(resource)
                ),
            );
            e.sample(&[], some.total_seconds());
        }
        // The system-level cpu `full` line is always zero (some CPU is always running), so
        // it is not exported: a series that cannot move misleads.
        if let Some(full) = psi.full.filter(|_| resource != PsiResource::Cpu) {
            e.family(
                &format!("nodemedic_pressure_{resource}_stalled_seconds"),
                Kind::Counter,
                &format!("Time in which all non-idle tasks on the node waited for {} at once (PSI full).", what(resource)),
            );
            e.sample(&[], full.total_seconds());
        }
    }
    e.family(
        "nodemedic_pressure_avg_ratio",
        Kind::Gauge,
        "The kernel's running averages of PSI (share of wall time stalled) over 10 s, 60 s and 300 s, by resource and kind (some, full).",
    );
    for resource in PsiResource::ALL {
        let Some(psi) = p.get(&resource) else {
            continue;
        };
        for (kind, line) in [("some", psi.some), ("full", psi.full)] {
            let Some(l) = line else { continue };
            if resource == PsiResource::Cpu && kind == "full" {
                continue;
            }
            for (window, v) in [("10s", l.avg10), ("60s", l.avg60), ("300s", l.avg300)] {
                e.sample(
                    &[
                        ("resource", resource.as_str()),
                        ("kind", kind),
                        ("window", window),
                    ],
                    // The kernel prints percent with two decimals; keep exactly those digits.
                    (v * 100.0).round() / 10_000.0,
                );
            }
        }
    }
}

/// What tasks waited for, in a help text.
pub(crate) fn what(resource: PsiResource) -> &'static str {
    match resource {
        PsiResource::Cpu => "a CPU",
        PsiResource::Memory => "memory (reclaim, refaults, swap-in)",
        PsiResource::Io => "I/O",
        PsiResource::Irq => "IRQ/softirq processing",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use super::*;

    const LINES: &str = "some avg10=1.00 avg60=0.00 avg300=0.00 total=7\n\
                         full avg10=0.00 avg60=0.00 avg300=0.00 total=3\n";

    /// A file that was missing (irq before Linux 6.1) is not looked up again until the next
    /// rescan; the files that exist are re-read every sample.
    #[test]
    fn a_missing_file_is_looked_up_again_at_the_next_rescan() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("proc/pressure");
        std::fs::create_dir_all(&dir).unwrap();
        for r in ["cpu", "memory", "io"] {
            std::fs::write(dir.join(r), LINES).unwrap();
        }
        let paths = crate::Paths::under(tmp.path());
        let mut set = crate::CollectorSet::new(vec![Box::new(PressureCollector::default())])
            .with_rescan_interval(Duration::from_secs(60));
        let secs = Duration::from_secs;
        let (s, runs) = set.sample(&paths, secs(100));
        assert!(runs[0].outcome.is_ok());
        let names = |s: &Snapshot| {
            s.get::<NodePressure>()
                .unwrap()
                .keys()
                .map(|r| r.as_str())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&s), ["cpu", "io", "memory"]);

        std::fs::write(
            dir.join("irq"),
            "full avg10=0.00 avg60=0.00 avg300=0.00 total=9\n",
        )
        .unwrap();
        // The existing files are read afresh between rescans.
        std::fs::write(dir.join("cpu"), LINES.replace("total=7", "total=8")).unwrap();
        let (s, _) = set.sample(&paths, secs(105));
        assert_eq!(
            names(&s),
            ["cpu", "io", "memory"],
            "irq waits for the rescan"
        );
        let cpu = &s.get::<NodePressure>().unwrap()[&PsiResource::Cpu];
        assert_eq!(cpu.some.map(|l| l.total_us), Some(8));

        let (s, _) = set.sample(&paths, secs(161));
        assert_eq!(names(&s), ["cpu", "io", "irq", "memory"]);
        assert_eq!(
            s.get::<NodePressure>().unwrap()[&PsiResource::Irq]
                .full
                .map(|l| l.total_us),
            Some(9)
        );
    }

    /// No `/proc/pressure` at all: no data with its reason, every sample, and the directory
    /// is found at the next rescan once it exists.
    #[test]
    fn no_psi_is_unavailable_not_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("proc")).unwrap();
        let paths = crate::Paths::under(tmp.path());
        let mut set = crate::CollectorSet::new(vec![Box::new(PressureCollector::default())])
            .with_rescan_interval(Duration::from_secs(60));
        let secs = Duration::from_secs;
        for at in [100, 105] {
            let (s, runs) = set.sample(&paths, secs(at));
            assert!(s.get::<NodePressure>().is_none());
            let c = runs[0].outcome.as_ref().unwrap();
            assert!(
                c.unavailable.as_deref().unwrap().contains("has no PSI"),
                "{:?}",
                c.unavailable
            );
        }
        let dir = tmp.path().join("proc/pressure");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cpu"), LINES).unwrap();
        let (s, _) = set.sample(&paths, secs(161));
        assert!(s
            .get::<NodePressure>()
            .unwrap()
            .contains_key(&PsiResource::Cpu));
    }
}
