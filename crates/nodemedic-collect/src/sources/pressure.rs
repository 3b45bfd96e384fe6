use std::collections::BTreeMap;

use nodemedic_kernel::{psi, Snapshot};

use crate::{CollectError, Collected, Collector, Ctx, ReadError};

/// The resources the kernel may report, in `/proc/pressure/`.
const RESOURCES: [&str; 4] = ["cpu", "memory", "io", "irq"];
/// `EOPNOTSUPP`: PSI compiled in but switched off (`psi=0`, or `CONFIG_PSI_DEFAULT_DISABLED`
/// without `psi=1`); the files exist and every read fails.
const EOPNOTSUPP: i32 = 95;

/// Node-wide Pressure Stall Information from `/proc/pressure/{cpu,memory,io,irq}`.
///
/// A kernel without PSI, or with PSI switched off, is no data with its reason, never zeros.
/// One damaged file loses that resource and is a warning naming it.
pub struct PressureCollector;

impl Collector for PressureCollector {
    fn name(&self) -> &'static str {
        "pressure"
    }

    fn collect(&self, ctx: &Ctx<'_>, snap: &mut Snapshot) -> Result<Collected, CollectError> {
        let dir = ctx.paths.procfs.join("pressure");
        let mut out = Collected::default();
        if !dir.is_dir() {
            out.unavailable = Some(format!(
                "{} does not exist: the kernel has no PSI (CONFIG_PSI, Linux 4.20+)",
                dir.display()
            ));
            return Ok(out);
        }
        let mut found = BTreeMap::new();
        let mut switched_off = false;
        let mut errors = Vec::new();
        for resource in RESOURCES {
            let path = dir.join(resource);
            match ctx.reader.read(&path) {
                Ok(text) => match psi::parse(&text) {
                    Ok(p) => {
                        found.insert(resource.to_string(), p);
                    }
                    Err(e) => errors.push(ReadError::parse(&path, e)),
                },
                // irq pressure needs Linux 6.1 and CONFIG_IRQ_TIME_ACCOUNTING.
                Err(e) if e.is_missing() && resource == "irq" => {}
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
