//! Where the cgroup hierarchies are mounted, from `/proc/self/mountinfo` (parsed by the
//! procfs project's `procfs-core`).

use std::path::PathBuf;

use procfs_core::process::MountInfos;
use procfs_core::FromRead;
use serde::Serialize;

/// The cgroup mounts nodemedic reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CgroupMounts {
    /// The cgroup v2 (unified) hierarchy: the root of a pure v2 node, `…/unified` on a
    /// hybrid one.
    pub unified: Option<PathBuf>,
    /// The v1 hierarchy with the `cpu` controller (`…/cpu` or `…/cpu,cpuacct`).
    pub cpu: Option<PathBuf>,
    /// The v1 hierarchy with `cpuacct` (CPU usage), often the same as `cpu`.
    pub cpuacct: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MountInfoError {
    #[error("mountinfo: {0}")]
    Parse(String),
}

pub fn cgroup_mounts(text: &str) -> Result<CgroupMounts, MountInfoError> {
    let mounts =
        MountInfos::from_read(text.as_bytes()).map_err(|e| MountInfoError::Parse(e.to_string()))?;
    let mut out = CgroupMounts::default();
    for m in mounts.0 {
        match m.fs_type.as_str() {
            "cgroup2" => {
                out.unified.get_or_insert(m.mount_point);
            }
            "cgroup" => {
                // v1 controllers are named in the super options: `rw,cpu,cpuacct`.
                let has = |c: &str| m.super_options.contains_key(c);
                if has("cpu") && out.cpu.is_none() {
                    out.cpu = Some(m.mount_point.clone());
                }
                if has("cpuacct") && out.cpuacct.is_none() {
                    out.cpuacct = Some(m.mount_point);
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn hybrid_and_unified_layouts() {
        let hybrid = "\
25 1 253:0 / / rw,relatime - ext4 /dev/vda rw
30 25 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
33 30 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:13 - cgroup cgroup rw,cpu,cpuacct
34 30 0:30 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,memory
";
        let m = cgroup_mounts(hybrid).unwrap();
        assert_eq!(m.unified, Some("/sys/fs/cgroup/unified".into()));
        assert_eq!(m.cpu, Some("/sys/fs/cgroup/cpu,cpuacct".into()));
        assert_eq!(m.cpuacct, m.cpu);
        let v2 = "29 1 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n";
        let m = cgroup_mounts(v2).unwrap();
        assert_eq!((m.unified, m.cpu), (Some("/sys/fs/cgroup".into()), None));
        assert_eq!(cgroup_mounts("").unwrap(), CgroupMounts::default());
        assert!(cgroup_mounts("garbage line\n").is_err());
    }
}
