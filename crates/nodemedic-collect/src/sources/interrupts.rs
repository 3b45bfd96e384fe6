use std::sync::Arc;

use nodemedic_kernel::interrupts;
use nodemedic_sample::Snapshot;

use super::skipped_warnings;
use crate::{CollectError, Collected, Collector, Ctx, ReadError};

/// `/proc/interrupts`, streamed a line at a time into the parser: on 1024 CPUs the file is
/// 7 MB, which would otherwise sit in memory whole next to the counts parsed from it.
#[derive(Default)]
pub struct InterruptsCollector;

impl Collector for InterruptsCollector {
    fn name(&self) -> crate::CollectorName {
        crate::CollectorName::Interrupts
    }

    fn collect(&self, ctx: &Ctx<'_>, snap: &mut Snapshot) -> Result<Collected, CollectError> {
        let path = ctx.paths.procfs.join("interrupts");
        let mut parser = interrupts::Parser::default();
        ctx.reader
            .read_lines(&path, |line, complete| parser.line(line, complete))?;
        let parsed = parser.finish().map_err(|e| ReadError::parse(&path, e))?;
        let warnings = skipped_warnings(&path, &parsed.skipped);
        snap.interrupts = Some(Arc::new(parsed));
        Ok(Collected {
            warnings,
            ..Default::default()
        })
    }
}
