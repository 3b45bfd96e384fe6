use nodemedic_kernel::softirqs;
use nodemedic_sample::Snapshot;

use super::skipped_warnings;
use crate::{CollectError, Collected, Collector, Ctx, ReadError};

/// `/proc/softirqs`.
pub struct SoftirqsCollector;

impl Collector for SoftirqsCollector {
    fn name(&self) -> crate::CollectorName {
        crate::CollectorName::Softirqs
    }

    fn collect(&self, ctx: &Ctx<'_>, snap: &mut Snapshot) -> Result<Collected, CollectError> {
        let path = ctx.paths.procfs.join("softirqs");
        let parsed = ctx
            .reader
            .read_with(&path, softirqs::parse)?
            .map_err(|e| ReadError::parse(&path, e))?;
        let warnings = skipped_warnings(&path, &parsed.skipped);
        snap.softirqs = Some(parsed);
        Ok(Collected {
            warnings,
            ..Default::default()
        })
    }
}
