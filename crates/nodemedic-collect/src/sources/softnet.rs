use nodemedic_kernel::softnet;
use nodemedic_sample::Snapshot;

use super::skipped_warnings;
use crate::{CollectError, Collected, Collector, Ctx, ReadError};

/// `/proc/net/softnet_stat`.
pub struct SoftnetCollector;

impl Collector for SoftnetCollector {
    fn name(&self) -> crate::CollectorName {
        crate::CollectorName::Softnet
    }

    fn collect(&self, ctx: &Ctx<'_>, snap: &mut Snapshot) -> Result<Collected, CollectError> {
        let path = ctx.paths.procfs.join("net/softnet_stat");
        let (parsed, blank) = ctx
            .reader
            .read_with(&path, |text| (softnet::parse(text), text.trim().is_empty()))?;
        let mut warnings = skipped_warnings(&path, &parsed.skipped);
        // The kernel writes one row per possible CPU: no rows at all is a broken read.
        if parsed.rows.is_empty() {
            let why = if blank {
                "empty (the kernel writes one row per CPU)"
            } else {
                "no usable rows"
            };
            return Err(ReadError::parse(&path, why).into());
        }
        let online: Vec<u32> = match &snap.topology {
            Some(t) => t.online.iter().collect(),
            None => {
                if parsed.rows.iter().any(|r| r.cpu.is_none()) {
                    warnings.push(
                        "topology unknown: softnet rows without a CPU column mapped to CPUs 0..n"
                            .into(),
                    );
                }
                (0..parsed.rows.len() as u32).collect()
            }
        };
        let (placed, unplaced) = softnet::assign_cpus(&parsed.rows, &online);
        if unplaced > 0 {
            warnings.push(format!(
                "{}: {unplaced} row(s) more than online CPUs, not attributed",
                path.display()
            ));
        }
        snap.softnet = Some(placed);
        Ok(Collected {
            warnings,
            ..Default::default()
        })
    }
}
