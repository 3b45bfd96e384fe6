use std::sync::{Arc, Mutex};

use nodemedic_kernel::{interrupts, Snapshot};

use super::skipped_warnings;
use crate::{CollectError, Collected, Collector, Ctx, ReadError};

/// `/proc/interrupts`.
///
/// The text is read into a buffer kept between samples: on 256 CPUs it is over a megabyte,
/// and growing a fresh one to that size every sample cost more than parsing it.
#[derive(Default)]
pub struct InterruptsCollector {
    text: Mutex<String>,
}

impl Collector for InterruptsCollector {
    fn name(&self) -> &'static str {
        "interrupts"
    }

    fn collect(&self, ctx: &Ctx<'_>, snap: &mut Snapshot) -> Result<Collected, CollectError> {
        let path = ctx.paths.procfs.join("interrupts");
        let mut text = self.text.lock().unwrap_or_else(|p| p.into_inner());
        ctx.reader.read_into(&path, &mut text)?;
        let parsed = interrupts::parse(&text).map_err(|e| ReadError::parse(&path, e))?;
        let warnings = skipped_warnings(&path, &parsed.skipped);
        snap.interrupts = Some(Arc::new(parsed));
        Ok(Collected {
            warnings,
            ..Default::default()
        })
    }
}
