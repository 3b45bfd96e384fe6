//! cgroup CPU files, v2 and v1, and what a cgroup's path says about the workload in it.
//!
//! - v2 `cpu.max`: `$QUOTA $PERIOD` in microseconds, `max` for no quota.
//! - v1 `cpu.cfs_quota_us` (`-1` for no quota) and `cpu.cfs_period_us`.
//! - `cpu.stat`: v2 in microseconds (`usage_usec`, `nr_throttled`, `throttled_usec`, …), v1 in
//!   nanoseconds (`throttled_time`, `burst_time`); both become [`CpuStat`] in microseconds.

use std::collections::BTreeMap;

use serde::Serialize;

pub use nodemedic_kernel::workload::{Qos, Workload};

use nodemedic_kernel::mounts::CgroupMounts;
use nodemedic_kernel::psi::PsiResource;
use nodemedic_kernel::{body, whole_lines, SkipReason};

use crate::sources::pressure::Psi;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CgroupFileError {
    #[error("file is empty")]
    Empty,
    #[error("line {line}: {reason}")]
    BadLine { line: usize, reason: String },
}

fn bad(line: usize, reason: impl Into<String>) -> CgroupFileError {
    CgroupFileError::BadLine {
        line,
        reason: reason.into(),
    }
}

/// A CFS bandwidth limit: at most `quota_us` of CPU time every `period_us`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CpuMax {
    /// `None`: no quota (`max`, or `-1` on v1).
    pub quota_us: Option<u64>,
    pub period_us: u64,
}

impl CpuMax {
    /// The quota in CPUs (`1000000 100000` → 10.0); `None` without a quota.
    pub fn cores(&self) -> Option<f64> {
        self.quota_us.map(|q| q as f64 / self.period_us as f64)
    }
}

/// The one line of a single-line file, or why there is none.
fn single_line(text: &str) -> Result<&str, CgroupFileError> {
    let b = body(text);
    if let Some(s) = b.skipped.first() {
        return Err(bad(s.line, s.reason.to_string()));
    }
    match b.lines.as_slice() {
        [] => Err(CgroupFileError::Empty),
        [(_, line)] => Ok(line.trim()),
        [_, (n, _), ..] => Err(bad(*n, "more than one line")),
    }
}

fn period(value: &str, line: usize) -> Result<u64, CgroupFileError> {
    value
        .parse::<u64>()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| bad(line, format!("period {value:?} is not a positive number")))
}

/// v2 `cpu.max`.
pub fn parse_cpu_max(text: &str) -> Result<CpuMax, CgroupFileError> {
    let line = single_line(text)?;
    let mut words = line.split_whitespace();
    let (Some(quota), Some(p), None) = (words.next(), words.next(), words.next()) else {
        return Err(bad(1, format!("{line:?} is not \"QUOTA PERIOD\"")));
    };
    let quota_us = match quota {
        "max" => None,
        q => Some(
            q.parse::<u64>()
                .map_err(|_| bad(1, format!("quota {q:?} is neither a number nor max")))?,
        ),
    };
    Ok(CpuMax {
        quota_us,
        period_us: period(p, 1)?,
    })
}

/// v1 `cpu.cfs_quota_us` and `cpu.cfs_period_us`.
pub fn parse_cfs(quota: &str, period_text: &str) -> Result<CpuMax, CgroupFileError> {
    let q = single_line(quota)?;
    let quota_us = match q.parse::<i64>() {
        Ok(-1) => None,
        Ok(v) if v > 0 => Some(v as u64),
        _ => {
            return Err(bad(
                1,
                format!("cfs_quota_us {q:?} is neither -1 nor positive"),
            ))
        }
    };
    Ok(CpuMax {
        quota_us,
        period_us: period(single_line(period_text)?, 1)?,
    })
}

/// `cpu.stat`, in microseconds whatever the cgroup version.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CpuStat {
    /// CPU time used (v2 `usage_usec`; v1 has it in `cpuacct.usage`, not here).
    pub usage_us: Option<u64>,
    /// Enforcement periods that elapsed while the cgroup had runnable tasks.
    pub nr_periods: u64,
    /// Periods in which the cgroup ran out of quota.
    pub nr_throttled: u64,
    pub throttled_us: u64,
    /// Periods that used burst (`cpu.max.burst`, Linux 5.14+).
    pub nr_bursts: Option<u64>,
    pub burst_us: Option<u64>,
}

impl CpuStat {
    /// Throttled periods / periods between two readings; `None` with no period between them.
    pub fn throttled_ratio_since(&self, before: &CpuStat) -> Option<f64> {
        let periods = self.nr_periods.checked_sub(before.nr_periods)?;
        let throttled = self.nr_throttled.checked_sub(before.nr_throttled)?;
        (periods > 0).then(|| (throttled as f64 / periods as f64).min(1.0))
    }
}

/// Parses `cpu.stat` of either version. Keys it does not use are ignored (the v2 file has
/// `user_usec`, `system_usec`, and more with each kernel).
pub fn parse_cpu_stat(text: &str) -> Result<CpuStat, CgroupFileError> {
    let lines = whole_lines(text).map_err(|n| bad(n, SkipReason::CutShort.to_string()))?;
    let mut s = CpuStat::default();
    let (mut periods, mut throttled, mut throttled_time) = (None, None, None);
    let mut empty = true;
    for (n, line) in lines {
        empty = false;
        let Some((key, value)) = key_value(line).or_else(|| {
            let mut words = line.split_whitespace();
            match (words.next(), words.next(), words.next()) {
                (Some(key), Some(value), None) => Some((key, value)),
                _ => None,
            }
        }) else {
            return Err(bad(n, format!("{line:?} is not \"key value\"")));
        };
        let v = value
            .parse::<u64>()
            .map_err(|_| bad(n, format!("{key} {value:?} is not a count")))?;
        match key {
            "usage_usec" => s.usage_us = Some(v),
            "nr_periods" => periods = Some(v),
            "nr_throttled" => throttled = Some(v),
            "throttled_usec" => throttled_time = Some(v),
            "throttled_time" => throttled_time = Some(v / 1000),
            "nr_bursts" => s.nr_bursts = Some(v),
            "burst_usec" => s.burst_us = Some(v),
            "burst_time" => s.burst_us = Some(v / 1000),
            _ => {}
        }
    }
    if empty {
        return Err(CgroupFileError::Empty);
    }
    // A cgroup v2 without the cpu controller enabled has only usage, user and system.
    match (periods, throttled, throttled_time) {
        (Some(p), Some(t), Some(tt)) => {
            s.nr_periods = p;
            s.nr_throttled = t;
            s.throttled_us = tt;
        }
        (None, None, None) if s.usage_us.is_some() => {}
        _ => {
            return Err(bad(
                0,
                "nr_periods, nr_throttled and throttled time must come together",
            ))
        }
    }
    Ok(s)
}

/// The kernel's own `key value` line: a printable ASCII key, one space, decimal digits. The
/// same two words as splitting at whitespace gives, without decoding the line as Unicode
/// (500 pods make 500 `cpu.stat` files per reading); `None` for any other line. Public for
/// the fuzz targets (`fuzz/logic`), which check that claim.
pub fn key_value(line: &str) -> Option<(&str, &str)> {
    let (key, value) = line.split_once(' ')?;
    let plain = !key.is_empty()
        && !value.is_empty()
        && key.bytes().all(|b| b.is_ascii_graphic())
        && value.bytes().all(|b| b.is_ascii_digit());
    plain.then_some((key, value))
}

/// Classifies a cgroup path such as
/// `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b_3c.slice/cri-containerd-abc.scope`
/// (systemd driver) or `kubepods/burstable/pod1a2b-3c/abc` (cgroupfs driver).
pub fn classify(path: &str) -> Workload {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let Some(start) = parts
        .iter()
        .position(|p| *p == "kubepods.slice" || *p == "kubepods")
    else {
        return service(&parts);
    };
    let rest = &parts[start + 1..];
    let (qos, rest) = match rest.first().map(|p| qos_of(p)) {
        Some(Some(q)) if q != Qos::Guaranteed => (q, &rest[1..]),
        _ => (Qos::Guaranteed, rest),
    };
    let Some(uid) = rest.first().and_then(|p| pod_uid(p)) else {
        return Workload::Other;
    };
    match rest.get(1) {
        None => Workload::Pod { uid, qos },
        Some(c) => match container_id(c) {
            Some((runtime, id)) => Workload::Container {
                uid,
                qos,
                runtime,
                id,
            },
            None => Workload::Other,
        },
    }
}

fn qos_of(part: &str) -> Option<Qos> {
    let name = part.strip_suffix(".slice").unwrap_or(part);
    let name = name.strip_prefix("kubepods-").unwrap_or(name);
    match name {
        "burstable" => Some(Qos::Burstable),
        "besteffort" => Some(Qos::BestEffort),
        _ => None,
    }
}

/// `kubepods-burstable-pod1a2b_3c.slice` or `pod1a2b-3c` → `1a2b-3c`.
fn pod_uid(part: &str) -> Option<String> {
    let name = part.strip_suffix(".slice").unwrap_or(part);
    let at = name.rfind("pod")?;
    let uid = &name[at + 3..];
    let ok = !uid.is_empty()
        && uid
            .chars()
            .all(|c| c.is_ascii_hexdigit() || c == '-' || c == '_');
    ok.then(|| uid.replace('_', "-"))
}

/// `cri-containerd-<id>.scope`, `crio-<id>.scope`, `docker-<id>.scope`, or a bare `<id>`.
fn container_id(part: &str) -> Option<(Option<String>, String)> {
    let hex = |s: &str| s.len() >= 12 && s.chars().all(|c| c.is_ascii_hexdigit());
    if let Some(name) = part.strip_suffix(".scope") {
        for runtime in ["cri-containerd", "crio", "docker"] {
            if let Some(id) = name.strip_prefix(runtime).and_then(|r| r.strip_prefix('-')) {
                return hex(id).then(|| (Some(runtime.to_string()), id.to_string()));
            }
        }
        return None;
    }
    hex(part).then(|| (None, part.to_string()))
}

fn service(parts: &[&str]) -> Workload {
    match parts {
        ["system.slice", unit] if unit.ends_with(".service") => Workload::Service {
            unit: (*unit).to_string(),
        },
        _ => Workload::Other,
    }
}

/// v1 `cpuacct.usage`: cumulative CPU time in nanoseconds, returned in microseconds like
/// v2's `usage_usec`.
pub fn parse_cpuacct_usage(text: &str) -> Result<u64, CgroupFileError> {
    let line = single_line(text)?;
    line.parse::<u64>()
        .map(|ns| ns / 1000)
        .map_err(|_| bad(1, format!("{line:?} is not a count of nanoseconds")))
}

/// What one cgroup showed in one sample. Each file is optional: a cgroup without the cpu
/// controller has no `cpu.max`, a v1 node keeps PSI on the unified hierarchy only.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CgroupStats {
    pub workload: Workload,
    pub cpu_max: Option<CpuMax>,
    pub cpu_stat: Option<CpuStat>,
    /// `cpu`, `memory`, `io` pressure of this cgroup (cgroup v2 only).
    pub pressure: CgroupPressure,
}

/// A cgroup's `{cpu,memory,io}.pressure`, each when present; serialized as a map keyed by
/// resource. A struct, not a map: 500 pods make 1,500 of these per reading.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CgroupPressure {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Psi>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<Psi>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io: Option<Psi>,
}

impl CgroupPressure {
    /// The pressure of `resource` (cgroups have no `irq.pressure`).
    pub fn get(&self, resource: PsiResource) -> Option<&Psi> {
        match resource {
            PsiResource::Cpu => self.cpu.as_ref(),
            PsiResource::Memory => self.memory.as_ref(),
            PsiResource::Io => self.io.as_ref(),
            PsiResource::Irq => None,
        }
    }
}

/// The cgroups nodemedic watches (pods, optionally containers, systemd services), keyed by
/// their path relative to the hierarchy root (`kubepods.slice/…`), and where it found them.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Cgroups {
    pub mounts: CgroupMounts,
    /// The mounts were confirmed by `/proc/self/mountinfo` (else found by the directory shape
    /// under `--path.cgroupfs`, as for fixture trees).
    pub from_mountinfo: bool,
    pub groups: BTreeMap<String, CgroupStats>,
    /// CPU time used by every task on the node: the root cgroup's (v1 `cpuacct.usage`, v2
    /// `cpu.stat` `usage_usec`). Whether the CPUs are busy, which CPU pressure alone does not
    /// say (throttled tasks wait too).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_usage_us: Option<u64>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn cpu_max_and_cfs() {
        let m = parse_cpu_max("1000000 100000\n").unwrap();
        assert_eq!(
            (m.quota_us, m.period_us, m.cores()),
            (Some(1_000_000), 100_000, Some(10.0))
        );
        let none = parse_cpu_max("max 100000\n").unwrap();
        assert_eq!((none.quota_us, none.cores()), (None, None));
        let v1 = parse_cfs("50000\n", "100000\n").unwrap();
        assert_eq!(v1.cores(), Some(0.5));
        assert_eq!(parse_cfs("-1\n", "100000\n").unwrap().quota_us, None);
        for bad in [
            "",
            "max\n",
            "max 0\n",
            "1 2 3\n",
            "x 100000\n",
            "100 100000",
        ] {
            assert!(parse_cpu_max(bad).is_err(), "{bad:?}");
        }
        assert!(parse_cfs("0\n", "100000\n").is_err());
        assert!(parse_cfs("-2\n", "100000\n").is_err());
    }

    #[test]
    fn cpu_stat_v2_v1_and_no_controller() {
        let v2 = parse_cpu_stat(
            "usage_usec 8000000\nuser_usec 7000000\nsystem_usec 1000000\nnr_periods 100\n\
             nr_throttled 60\nthrottled_usec 2500000\nnr_bursts 2\nburst_usec 1000\n",
        )
        .unwrap();
        assert_eq!(
            (
                v2.usage_us,
                v2.nr_periods,
                v2.nr_throttled,
                v2.throttled_us,
                v2.nr_bursts
            ),
            (Some(8_000_000), 100, 60, 2_500_000, Some(2))
        );
        let v1 =
            parse_cpu_stat("nr_periods 10\nnr_throttled 5\nthrottled_time 3000000000\n").unwrap();
        assert_eq!((v1.throttled_us, v1.usage_us), (3_000_000, None));
        let no_ctrl = parse_cpu_stat("usage_usec 5\nuser_usec 3\nsystem_usec 2\n").unwrap();
        assert_eq!((no_ctrl.usage_us, no_ctrl.nr_periods), (Some(5), 0));
        let before = CpuStat {
            nr_periods: 40,
            nr_throttled: 10,
            ..v2
        };
        assert_eq!(v2.throttled_ratio_since(&before), Some(50.0 / 60.0));
        assert_eq!(v2.throttled_ratio_since(&v2), None, "no period elapsed");
        for bad in [
            "",
            "nr_periods 1\n",
            "nr_periods x\n",
            "a b c\n",
            "nr_periods 1\nnr_throttled 1\nthrottled_usec 1",
        ] {
            assert!(parse_cpu_stat(bad).is_err(), "{bad:?}");
        }
        // The plain-line shortcut gives what splitting at whitespace gives, where it applies.
        for line in [
            "usage_usec 12",
            "a 1",
            "a\u{a0}b 1",
            "a  1",
            " a 1",
            "a 1 ",
            "a 1 2",
            "a b",
            "a 1x",
            "é 1",
            "a\t1",
            "a ",
            " 1",
        ] {
            if let Some(kv) = key_value(line) {
                let words: Vec<&str> = line.split_whitespace().collect();
                assert_eq!(words, [kv.0, kv.1], "{line:?}");
            }
        }
        assert_eq!(key_value("usage_usec 12"), Some(("usage_usec", "12")));
        assert_eq!(key_value("a\u{a0}b 1"), None);
        assert_eq!(parse_cpu_stat(""), Err(CgroupFileError::Empty));
        assert_eq!(parse_cpu_stat(" \n\n"), Err(CgroupFileError::Empty));
        assert_eq!(
            parse_cpu_stat("nr_periods 1\nnr_throttled 1\nthrottled_usec 1"),
            Err(bad(3, SkipReason::CutShort.to_string())),
            "a cut file names its last line"
        );
    }

    #[test]
    fn kubernetes_paths_both_drivers_all_qos() {
        let uid = "1a2b3c4d-0000-1111-2222-333344445555";
        let us = uid.replace('-', "_");
        let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        assert_eq!(
            classify(&format!(
                "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{us}.slice"
            )),
            Workload::Pod {
                uid: uid.into(),
                qos: Qos::Burstable
            }
        );
        assert_eq!(
            classify(&format!(
                "kubepods.slice/kubepods-pod{us}.slice/cri-containerd-{id}.scope"
            )),
            Workload::Container {
                uid: uid.into(),
                qos: Qos::Guaranteed,
                runtime: Some("cri-containerd".into()),
                id: id.into()
            }
        );
        assert_eq!(
            classify(&format!("kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{us}.slice/crio-{id}.scope")),
            Workload::Container { uid: uid.into(), qos: Qos::BestEffort, runtime: Some("crio".into()), id: id.into() }
        );
        assert_eq!(
            classify(&format!("/kubepods/besteffort/pod{uid}/{id}")),
            Workload::Container {
                uid: uid.into(),
                qos: Qos::BestEffort,
                runtime: None,
                id: id.into()
            }
        );
        assert_eq!(
            classify(&format!("kubepods/pod{uid}")),
            Workload::Pod {
                uid: uid.into(),
                qos: Qos::Guaranteed
            }
        );
        assert_eq!(
            classify("system.slice/containerd.service"),
            Workload::Service {
                unit: "containerd.service".into()
            }
        );
        for other in [
            "",
            "user.slice",
            "kubepods.slice",
            "kubepods.slice/kubepods-burstable.slice",
            "kubepods/burstable/podzz",
            "system.slice/a/b",
        ] {
            assert_eq!(classify(other), Workload::Other, "{other:?}");
        }
    }
}
