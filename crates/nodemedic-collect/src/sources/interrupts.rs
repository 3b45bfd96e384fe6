use nodemedic_kernel::{interrupts, Snapshot};

use super::skipped_warnings;
use crate::{CollectError, Collected, Collector, Ctx, ReadError};

/// `/proc/interrupts`.
pub struct InterruptsCollector;

impl Collector for InterruptsCollector {
    fn name(&self) -> &'static str {
        "interrupts"
    }

    fn collect(&self, ctx: &Ctx<'_>, snap: &mut Snapshot) -> Result<Collected, CollectError> {
        let path = ctx.paths.procfs.join("interrupts");
        let parsed =
            interrupts::parse(&ctx.reader.read(&path)?).map_err(|e| ReadError::parse(&path, e))?;
        let warnings = skipped_warnings(&path, &parsed.skipped);
        snap.interrupts = Some(parsed);
        Ok(Collected {
            warnings,
            ..Default::default()
        })
    }
}
