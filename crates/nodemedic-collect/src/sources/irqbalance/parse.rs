//! irqbalance's environment file (`/etc/default/irqbalance` on Debian,
//! `/etc/sysconfig/irqbalance` on RHEL): shell-style `KEY=VALUE` lines.

use std::collections::BTreeMap;

use nodemedic_kernel::{CpuSet, CpuSetError, SkipReason, SkippedLine};

/// irqbalance's package, as the node's package database lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum IrqbalancePackage {
    /// Installed at `version`, per `database`.
    Installed { version: String, database: String },
    /// `database` was read and does not list irqbalance as installed.
    NotInstalled { database: String },
    /// No package database could be read.
    Unknown { reason: String },
}

impl Default for IrqbalancePackage {
    fn default() -> Self {
        Self::Unknown {
            reason: "not read yet".into(),
        }
    }
}

impl IrqbalancePackage {
    pub fn version(&self) -> Option<&str> {
        match self {
            Self::Installed { version, .. } => Some(version),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvFile {
    pub vars: BTreeMap<String, String>,
    pub skipped: Vec<SkippedLine>,
}

pub fn parse_env_file(text: &str) -> EnvFile {
    let mut out = EnvFile::default();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line).trim_start();
        let Some((key, value)) = line.split_once('=') else {
            out.skipped.push(SkippedLine {
                line: i + 1,
                reason: SkipReason::NotKeyValue,
            });
            continue;
        };
        let key = key.trim();
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            out.skipped.push(SkippedLine {
                line: i + 1,
                reason: SkipReason::BadVariableName(key.to_string()),
            });
            continue;
        }
        out.vars.insert(key.to_string(), unquote(value.trim()));
    }
    out
}

fn unquote(v: &str) -> String {
    for q in ['"', '\''] {
        if let Some(inner) = v.strip_prefix(q) {
            return inner.split(q).next().unwrap_or("").to_string();
        }
    }
    // Unquoted: a trailing ` # comment` is not part of the value.
    v.split(" #").next().unwrap_or("").trim().to_string()
}

/// The CPUs irqbalance is told to keep IRQs off. `IRQBALANCE_BANNED_CPULIST` (irqbalance ≥ 1.8)
/// wins over the deprecated hex mask `IRQBALANCE_BANNED_CPUS`, as in irqbalance itself.
pub fn banned_cpus(env: &EnvFile) -> Result<CpuSet, CpuSetError> {
    if let Some(list) = env
        .vars
        .get("IRQBALANCE_BANNED_CPULIST")
        .filter(|v| !v.is_empty())
    {
        return CpuSet::parse_list(list);
    }
    if let Some(mask) = env
        .vars
        .get("IRQBALANCE_BANNED_CPUS")
        .filter(|v| !v.is_empty())
    {
        return CpuSet::parse_mask(mask);
    }
    Ok(CpuSet::new())
}

/// The version of `package` if dpkg's status file lists it as installed.
pub fn dpkg_installed_version(status: &str, package: &str) -> Option<String> {
    for stanza in status.split("\n\n") {
        let mut name = None;
        let mut version = None;
        let mut installed = false;
        for line in stanza.lines() {
            if let Some(v) = line.strip_prefix("Package: ") {
                name = Some(v.trim());
            } else if let Some(v) = line.strip_prefix("Version: ") {
                version = Some(v.trim());
            } else if let Some(v) = line.strip_prefix("Status: ") {
                installed = v.trim().ends_with(" installed");
            }
        }
        if name == Some(package) && installed {
            return version.map(str::to_string);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_installed_package_version() {
        let status = "Package: dbus\nStatus: install ok installed\nVersion: 1.14\n\nPackage: irqbalance\nStatus: install ok installed\nPriority: optional\nVersion: 1.9.2-1\n\nPackage: gone\nStatus: deinstall ok config-files\nVersion: 1\n";
        assert_eq!(
            dpkg_installed_version(status, "irqbalance").as_deref(),
            Some("1.9.2-1")
        );
        assert_eq!(dpkg_installed_version(status, "gone"), None);
        assert_eq!(dpkg_installed_version(status, "missing"), None);
        assert_eq!(dpkg_installed_version("", "x"), None);
    }

    #[test]
    fn debian_style_file() {
        let env = parse_env_file(
            "# irqbalance is a daemon\n#IRQBALANCE_BANNED_CPUS=\"ff\"\nIRQBALANCE_BANNED_CPULIST=\"6-7\" \nexport IRQBALANCE_ARGS='--policyscript=/x' \nONESHOT=yes # old\nbad line\n",
        );
        assert_eq!(env.vars["IRQBALANCE_BANNED_CPULIST"], "6-7");
        assert_eq!(env.vars["IRQBALANCE_ARGS"], "--policyscript=/x");
        assert_eq!(env.vars["ONESHOT"], "yes");
        assert_eq!(env.skipped.len(), 1);
        assert_eq!(banned_cpus(&env).unwrap().to_list_string(), "6-7");
    }

    #[test]
    fn mask_fallback_and_errors() {
        let env = parse_env_file("IRQBALANCE_BANNED_CPUS=00000000,00000003\n");
        assert_eq!(banned_cpus(&env).unwrap().to_list_string(), "0-1");
        let env = parse_env_file("IRQBALANCE_BANNED_CPULIST=x\n");
        assert!(banned_cpus(&env).is_err());
        assert!(banned_cpus(&parse_env_file("")).unwrap().is_empty());
    }
}
