use nodemedic_kernel::snapshot::IrqbalanceConfig;
use nodemedic_kernel::{irqbalance, Snapshot};

use super::skipped_warnings;
use crate::{CollectError, Collected, Collector, Ctx, ReadError};

/// irqbalance's banned CPUs from `/etc/default/irqbalance` or `/etc/sysconfig/irqbalance`
/// under the root filesystem.
pub struct IrqbalanceConfigCollector;

impl Collector for IrqbalanceConfigCollector {
    fn name(&self) -> &'static str {
        "irqbalance_config"
    }

    fn collect(&self, ctx: &Ctx<'_>, snap: &mut Snapshot) -> Result<Collected, CollectError> {
        let mut out = Collected::default();
        for rel in ["etc/default/irqbalance", "etc/sysconfig/irqbalance"] {
            let path = ctx.paths.rootfs.join(rel);
            let Some(text) = ctx.reader.read_optional(&path)? else {
                continue;
            };
            let env = irqbalance::parse_env_file(&text);
            out.warnings.extend(skipped_warnings(&path, &env.skipped));
            let banned_cpus =
                irqbalance::banned_cpus(&env).map_err(|e| ReadError::parse(&path, e))?;
            snap.irqbalance = Some(IrqbalanceConfig {
                source: Some(path.display().to_string()),
                banned_cpus,
            });
            return Ok(out);
        }
        snap.irqbalance = Some(IrqbalanceConfig::default());
        Ok(out)
    }
}
