//! irqbalance's installed version, from dpkg's status database (pure parsing), and whether it
//! is one of the releases whose load rebalancing never runs.

/// The version of `package` if dpkg's status file lists it as installed.
pub fn installed_version(status: &str, package: &str) -> Option<String> {
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

/// irqbalance 1.7.0 and 1.8.0 never rebalance by load (fixed in 1.9.0): after a CPU is
/// saturated, IRQs placed on it stay there until irqbalance restarts.
pub fn has_rebalance_bug(version: &str) -> bool {
    // Debian versions look like `1.8.0-1` or `1:1.8.0-1ubuntu2`.
    let upstream = version
        .split_once(':')
        .map_or(version, |(_, v)| v)
        .split(['-', '~', '+'])
        .next()
        .unwrap_or("");
    let mut parts = upstream.split('.').map(|p| p.parse::<u32>().ok());
    matches!(
        (
            parts.next().flatten(),
            parts.next().flatten(),
            parts.next().flatten()
        ),
        (Some(1), Some(7), _) | (Some(1), Some(8), Some(0) | None)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_installed_package_version() {
        let status = "Package: dbus\nStatus: install ok installed\nVersion: 1.14\n\nPackage: irqbalance\nStatus: install ok installed\nPriority: optional\nVersion: 1.9.2-1\n\nPackage: gone\nStatus: deinstall ok config-files\nVersion: 1\n";
        assert_eq!(
            installed_version(status, "irqbalance").as_deref(),
            Some("1.9.2-1")
        );
        assert_eq!(installed_version(status, "gone"), None);
        assert_eq!(installed_version(status, "missing"), None);
        assert_eq!(installed_version("", "x"), None);
    }

    #[test]
    fn buggy_versions() {
        for v in ["1.7.0", "1.7.0-3", "1.8.0-1", "1:1.8.0-1ubuntu2", "1.8"] {
            assert!(has_rebalance_bug(v), "{v}");
        }
        for v in ["1.9.0", "1.9.2-1", "1.6.0", "1.8.1", "2.0", "garbage", ""] {
            assert!(!has_rebalance_bug(v), "{v}");
        }
    }
}
