use std::collections::BTreeMap;

use nodemedic_kernel::psi::{self, PsiResource};
use nodemedic_sample::Snapshot;

use super::RescanCache;
use crate::{CollectError, Collected, Collector, Ctx, ReadError};

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
        snap.pressure = (!found.is_empty()).then_some(found);
        Ok(out)
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
            s.pressure
                .as_ref()
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
        let cpu = &s.pressure.as_ref().unwrap()[&PsiResource::Cpu];
        assert_eq!(cpu.some.map(|l| l.total_us), Some(8));

        let (s, _) = set.sample(&paths, secs(161));
        assert_eq!(names(&s), ["cpu", "io", "irq", "memory"]);
        assert_eq!(
            s.pressure.as_ref().unwrap()[&PsiResource::Irq]
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
            assert!(s.pressure.is_none());
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
        assert!(s.pressure.unwrap().contains_key(&PsiResource::Cpu));
    }
}
