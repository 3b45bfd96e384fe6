use nodemedic_kernel::snapshot::IrqbalanceConfig;
use nodemedic_kernel::{irqbalance, Snapshot};

use super::{skipped_warnings, RescanCache};
use crate::{CollectError, Collected, Collector, Ctx, ReadError};

/// irqbalance's banned CPUs from `/etc/default/irqbalance` or `/etc/sysconfig/irqbalance`
/// under the root filesystem. Read on rescans only: it changes when an administrator edits
/// it, and irqbalance itself only reads it when it starts.
#[derive(Default)]
pub struct IrqbalanceConfigCollector {
    cache: RescanCache<IrqbalanceConfig>,
}

impl Collector for IrqbalanceConfigCollector {
    fn name(&self) -> &'static str {
        crate::CollectorName::IrqbalanceConfig.as_str()
    }

    fn collect(&self, ctx: &Ctx<'_>, snap: &mut Snapshot) -> Result<Collected, CollectError> {
        let (config, warnings) = self.cache.get(ctx.rescan, || read(ctx))?;
        snap.irqbalance = Some(config);
        Ok(Collected {
            warnings,
            ..Default::default()
        })
    }
}

fn read(ctx: &Ctx<'_>) -> Result<(IrqbalanceConfig, Vec<String>), CollectError> {
    let mut out = Collected::default();
    for rel in ["etc/default/irqbalance", "etc/sysconfig/irqbalance"] {
        let path = ctx.paths.rootfs.join(rel);
        let Some(text) = ctx.reader.read_optional(&path)? else {
            continue;
        };
        let env = irqbalance::parse_env_file(&text);
        out.warnings.extend(skipped_warnings(&path, &env.skipped));
        let banned_cpus = irqbalance::banned_cpus(&env).map_err(|e| ReadError::parse(&path, e))?;
        let config = IrqbalanceConfig {
            source: Some(path.display().to_string()),
            banned_cpus,
        };
        return Ok((config, out.warnings));
    }
    Ok((IrqbalanceConfig::default(), out.warnings))
}
