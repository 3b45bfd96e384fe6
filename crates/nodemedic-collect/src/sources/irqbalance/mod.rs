//! irqbalance's configuration (`IRQBALANCE_BANNED_CPUS` and friends) and its installed package:
//! the parsers (`parse.rs`) and the collector.

mod parse;

pub use parse::*;

use std::os::unix::fs::MetadataExt;
use std::sync::Mutex;
use std::time::SystemTime;

use nodemedic_kernel::CpuSet;
use nodemedic_sample::Snapshot;
use serde::Serialize;

use self::parse as irqbalance;
use super::{skipped_warnings, RescanCache};
use crate::{CollectError, Collected, Collector, Ctx, ReadError};

/// What irqbalance is told to leave alone, and which irqbalance is installed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct IrqbalanceConfig {
    /// Which file was read, if any.
    pub source: Option<String>,
    pub banned_cpus: CpuSet,
    /// The installed package and its version, or why it is unknown.
    pub package: IrqbalancePackage,
}

/// irqbalance's configuration and package.
pub const NAME: crate::CollectorName = crate::CollectorName::new("irqbalance_config");

crate::register!(crate::registry::Declaration {
    name: NAME,
    order: 70,
    switch: crate::registry::Switch::Collectors,
    optional: false,
    checks: crate::registry::Checks {
        fixtures: crate::registry::Fixtures::Trees(&["isolated", "96cpu-collapsed"]),
        golden: crate::registry::Golden::Series(&[(
            "96cpu-collapsed",
            "nodemedic_cpus{state=\"irqbalance_banned\"}",
        )]),
        fuzz: crate::registry::Fuzz::Targets(&["irqbalance_env", "cpuset"]),
    },
    faults: &[crate::registry::FileKind {
        name: "irqbalance config",
        tree: "8cpu-collapsed",
        pattern: "etc/default/irqbalance",
        table: true,
        optional: true,
        empty_ok: true,
        impact: crate::registry::Impact::AllGroups,
        may_change: &[
            "collector/irqbalance_config",
            "count/banned",
            "series/topology"
        ],
    },],
    render: None,
    build: crate::registry::Build::Here(|_| {
        Some(Box::new(IrqbalanceConfigCollector::default()))
    }),
});

/// irqbalance's banned CPUs from `/etc/default/irqbalance` or `/etc/sysconfig/irqbalance`
/// under the root filesystem, and its installed version from the package database. Read on
/// rescans only: they change when an administrator edits the file or upgrades the package,
/// and irqbalance itself only reads its file when it starts.
#[derive(Default)]
pub struct IrqbalanceConfigCollector {
    cache: RescanCache<IrqbalanceConfig>,
    /// The package database's identity when last parsed, and what it said: dpkg's status is
    /// most of a megabyte, parsed again only when it changed (a stat per rescan otherwise).
    package: Mutex<Option<(DatabaseStamp, IrqbalancePackage)>>,
}

/// What tells a rewritten database from the one parsed before (dpkg replaces the file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DatabaseStamp {
    inode: u64,
    len: u64,
    modified: Option<SystemTime>,
}

impl Collector for IrqbalanceConfigCollector {
    fn name(&self) -> crate::CollectorName {
        NAME
    }

    fn collect(&self, ctx: &Ctx<'_>, snap: &mut Snapshot) -> Result<Collected, CollectError> {
        let (config, warnings) = self.cache.get(ctx.rescan, || {
            let (config, warnings) = read_config(ctx)?;
            let config = IrqbalanceConfig {
                package: self.package(ctx),
                ..config
            };
            Ok((config, warnings))
        })?;
        snap.put(config);
        Ok(Collected {
            warnings,
            ..Default::default()
        })
    }
}

impl IrqbalanceConfigCollector {
    fn package(&self, ctx: &Ctx<'_>) -> IrqbalancePackage {
        let dpkg = dpkg_status(ctx);
        let stamp = std::fs::metadata(&dpkg).ok().map(|m| DatabaseStamp {
            inode: m.ino(),
            len: m.len(),
            modified: m.modified().ok(),
        });
        let mut cached = self.package.lock().unwrap_or_else(|p| p.into_inner());
        if let (Some(stamp), Some((was, package))) = (stamp, cached.as_ref()) {
            if stamp == *was {
                return package.clone();
            }
        }
        let package = read_package(ctx);
        *cached = stamp.map(|s| (s, package.clone()));
        package
    }
}

fn dpkg_status(ctx: &Ctx<'_>) -> std::path::PathBuf {
    ctx.paths.rootfs.join("var/lib/dpkg/status")
}

/// irqbalance's package from dpkg's status database under the root filesystem. An unknown
/// version is not a collector failure (a pod without the host's database, an RPM node): it
/// carries its reason to `/status` and `version="unknown"` to the info series.
fn read_package(ctx: &Ctx<'_>) -> IrqbalancePackage {
    let dpkg = dpkg_status(ctx);
    let database = dpkg.display().to_string();
    match ctx.reader.read_optional(&dpkg) {
        Ok(Some(status)) => match irqbalance::dpkg_installed_version(&status, "irqbalance") {
            Some(version) => IrqbalancePackage::Installed { version, database },
            None => IrqbalancePackage::NotInstalled { database },
        },
        Ok(None) => {
            let rpm = ctx.paths.rootfs.join("var/lib/rpm");
            let reason = if rpm.is_dir() {
                format!(
                    "{} is RPM's database, which nodemedic does not read; {database} does not exist",
                    rpm.display()
                )
            } else if dpkg.parent().is_some_and(|d| d.is_dir()) {
                // The chart mounts the host's /var/lib/dpkg with DirectoryOrCreate: on a node
                // without dpkg it is an empty directory.
                format!(
                    "no package database: {database} does not exist and its directory is \
                     empty or incomplete (not a dpkg-based node? nodemedic reads only dpkg's \
                     database)"
                )
            } else if ctx.paths.rootfs == std::path::Path::new("/") {
                format!("no package database: {database} does not exist")
            } else {
                format!(
                    "no package database: {database} does not exist (the host's /var/lib/dpkg \
                     is not mounted under {})",
                    ctx.paths.rootfs.display()
                )
            };
            IrqbalancePackage::Unknown { reason }
        }
        Err(e) => IrqbalancePackage::Unknown {
            reason: e.to_string(),
        },
    }
}

fn read_config(ctx: &Ctx<'_>) -> Result<(IrqbalanceConfig, Vec<String>), CollectError> {
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
            ..Default::default()
        };
        return Ok((config, out.warnings));
    }
    Ok((IrqbalanceConfig::default(), out.warnings))
}
