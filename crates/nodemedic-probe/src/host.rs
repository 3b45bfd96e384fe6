//! What the running kernel and this process allow, read from procfs/sysfs when a load or an
//! attach fails, so that the one reason we report names the cause (no BTF, missing
//! capabilities, memlock on an old kernel) instead of a bare errno.

use std::fs;
use std::path::Path;

pub const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";
pub const BPF_STATS_SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";
pub const PERF_EVENT_PARANOID: &str = "/proc/sys/kernel/perf_event_paranoid";

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// `major.minor` of `/proc/sys/kernel/osrelease` ("6.1.0-50-amd64" -> (6, 1)).
pub fn parse_kernel_release(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

pub fn kernel_release() -> Option<String> {
    fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .map(|s| s.trim().to_owned())
}

pub fn kernel_version() -> Option<(u32, u32)> {
    kernel_release().as_deref().and_then(parse_kernel_release)
}

/// The effective capability mask from a `/proc/<pid>/status` text.
pub fn parse_cap_eff(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
}

/// Capabilities the probes need that this process lacks, by name. Since 5.8, CAP_BPF plus
/// CAP_PERFMON suffice; CAP_SYS_ADMIN covers everything on every kernel.
pub fn missing_caps(cap_eff: u64) -> Vec<&'static str> {
    let has = |bit: u32| cap_eff & (1u64 << bit) != 0;
    if has(CAP_SYS_ADMIN) {
        return Vec::new();
    }
    let mut missing = Vec::new();
    if !has(CAP_BPF) {
        missing.push("CAP_BPF");
    }
    if !has(CAP_PERFMON) {
        missing.push("CAP_PERFMON");
    }
    missing
}

/// Whether a `CapEff` mask holds CAP_SYS_ADMIN.
pub fn has_sys_admin(cap_eff: u64) -> bool {
    cap_eff & (1u64 << CAP_SYS_ADMIN) != 0
}

/// This process's effective capabilities.
pub fn own_cap_eff() -> Option<u64> {
    fs::read_to_string("/proc/self/status")
        .ok()
        .as_deref()
        .and_then(parse_cap_eff)
}

/// `kernel.perf_event_paranoid` (the node's: the sysctl is not namespaced).
pub fn perf_event_paranoid() -> Option<i32> {
    fs::read_to_string(PERF_EVENT_PARANOID)
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

pub fn own_missing_caps() -> Option<Vec<&'static str>> {
    fs::read_to_string("/proc/self/status")
        .ok()
        .as_deref()
        .and_then(parse_cap_eff)
        .map(missing_caps)
}

/// The soft "Max locked memory" of a `/proc/<pid>/limits` text, in bytes (None = unlimited).
pub fn parse_memlock_soft(limits: &str) -> Option<Option<u64>> {
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))?;
    let soft = line
        .trim_start_matches("Max locked memory")
        .split_whitespace()
        .next()?;
    if soft == "unlimited" {
        return Some(None);
    }
    soft.parse().ok().map(Some)
}

pub fn own_memlock_soft() -> Option<Option<u64>> {
    fs::read_to_string("/proc/self/limits")
        .ok()
        .as_deref()
        .and_then(parse_memlock_soft)
}

pub fn has_kernel_btf() -> bool {
    Path::new(KERNEL_BTF).is_file()
}

/// `kernel.bpf_stats_enabled`: whether the kernel counts run time for every BPF program.
pub fn bpf_stats_sysctl() -> Option<bool> {
    fs::read_to_string(BPF_STATS_SYSCTL)
        .ok()
        .map(|s| s.trim() != "0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_releases() {
        assert_eq!(parse_kernel_release("6.1.0-50-amd64\n"), Some((6, 1)));
        assert_eq!(parse_kernel_release("6.18.44-fc-v782"), Some((6, 18)));
        assert_eq!(parse_kernel_release("5.10"), Some((5, 10)));
        assert_eq!(parse_kernel_release("garbage"), None);
        assert_eq!(parse_kernel_release(""), None);
    }

    #[test]
    fn capabilities() {
        let status = "Name:\tx\nCapEff:\t000001fffeffffff\n";
        assert_eq!(parse_cap_eff(status), Some(0x1fffeffffff));
        assert!(missing_caps(0x1fffeffffff).is_empty());
        // CAP_BPF + CAP_PERFMON without CAP_SYS_ADMIN is enough.
        assert!(missing_caps((1 << 38) | (1 << 39)).is_empty());
        assert_eq!(missing_caps(1 << 39), vec!["CAP_PERFMON"]);
        assert_eq!(missing_caps(0), vec!["CAP_BPF", "CAP_PERFMON"]);
        assert_eq!(parse_cap_eff("CapEff:\tzz\n"), None);
    }

    #[test]
    fn memlock() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max locked memory         8388608              8388608              bytes\n";
        assert_eq!(parse_memlock_soft(limits), Some(Some(8_388_608)));
        let unl = "Max locked memory         unlimited            unlimited            bytes\n";
        assert_eq!(parse_memlock_soft(unl), Some(None));
        assert_eq!(parse_memlock_soft("nothing"), None);
    }

    #[test]
    fn this_process_reads() {
        // Real /proc: these files exist on every Linux this runs on.
        assert!(kernel_version().is_some());
        assert!(own_missing_caps().is_some());
        assert!(own_memlock_soft().is_some());
    }
}
