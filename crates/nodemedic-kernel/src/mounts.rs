//! Where the cgroup hierarchies are mounted, from `/proc/self/mountinfo` (parsed by the
//! procfs project's `procfs-core`).

use std::path::{Path, PathBuf};

use procfs_core::process::{MountInfo, MountInfos};
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
    /// Cgroup mounts under a container's host root (`/host`) that are read-write: through
    /// them a process of the container could rewrite any pod's limits or move tasks. A bind
    /// mount's read-only flag does not reach the mounts below it (before containerd 2), so a
    /// read-only `/sys` is not enough. Empty when reading the node's own tree.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub writable: Vec<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MountInfoError {
    #[error("mountinfo: {0}")]
    Parse(String),
}

/// The cgroup mounts of a mountinfo text: the first of each kind (see
/// [`cgroup_mounts_under`] for a process that sees more than one).
pub fn cgroup_mounts(text: &str) -> Result<CgroupMounts, MountInfoError> {
    cgroup_mounts_under(text, Path::new("/"), false)
}

/// The cgroup mounts under `root` (the host's root mounted in a container, `/host`, or `/`).
///
/// In a pod on a cgroup v1 (or hybrid) node a process sees two mounts of each hierarchy: the
/// container's own `/sys/fs/cgroup/cpu`, whose mount root is its cgroup
/// (`/kubepods/burstable/pod…/<id>`), and the host's, bind-mounted under `/host` with root
/// `/`. On a cgroup v2 node the container has a cgroup namespace of its own: mountinfo shows
/// roots relative to it, so the container's own `/sys/fs/cgroup` has root `/` and the host's
/// has `/../../../..` (as many `..` as the container's cgroup is deep). Of the mounts under
/// `root`, the one reaching highest in the hierarchy is taken (the most leading `..`, then
/// `/`, in mountinfo's order among equals); a part of a hierarchy only when there is nothing
/// higher.
///
/// `in_container`: the host's tree is mounted into a container (`root` is not the process's
/// own), so the ones of its mounts the process can write are named in `writable`.
pub fn cgroup_mounts_under(
    text: &str,
    root: &Path,
    in_container: bool,
) -> Result<CgroupMounts, MountInfoError> {
    let mounts = MountInfos::from_read(text.as_bytes())
        .map_err(|e| MountInfoError::Parse(e.to_string()))?
        .0;
    let writable = if in_container {
        writable_cgroup_mounts(&mounts, root)
    } else {
        Vec::new()
    };
    // (mount point, how high it reaches) of each kind, in mountinfo's order.
    let mut unified = Vec::new();
    let mut cpu = Vec::new();
    let mut cpuacct = Vec::new();
    for m in mounts {
        if !m.mount_point.starts_with(root) {
            continue;
        }
        let up = reach(&m.root);
        match m.fs_type.as_str() {
            "cgroup2" => unified.push((m.mount_point, up)),
            "cgroup" => {
                // v1 controllers are named in the super options: `rw,cpu,cpuacct`.
                let has = |c: &str| m.super_options.contains_key(c);
                if has("cpu") {
                    cpu.push((m.mount_point.clone(), up));
                }
                if has("cpuacct") {
                    cpuacct.push((m.mount_point, up));
                }
            }
            _ => {}
        }
    }
    let pick = |v: Vec<(PathBuf, i32)>| {
        let best = v.iter().map(|(_, r)| *r).max()?;
        v.into_iter().find(|(_, r)| *r == best).map(|(p, _)| p)
    };
    Ok(CgroupMounts {
        unified: pick(unified),
        cpu: pick(cpu),
        cpuacct: pick(cpuacct),
        writable,
    })
}

/// The visible cgroup mounts under `root` mounted read-write (see
/// [`CgroupMounts::writable`]).
fn writable_cgroup_mounts(mounts: &[MountInfo], root: &Path) -> Vec<PathBuf> {
    visible_read_write(mounts, |m| {
        matches!(m.fs_type.as_str(), "cgroup" | "cgroup2") && m.mount_point.starts_with(root)
    })
    .map(|m| m.mount_point.clone())
    .fold(Vec::new(), |mut out, p| {
        if !out.contains(&p) {
            out.push(p);
        }
        out
    })
}

/// The visible mounts `pick` chooses that are mounted read-write, in mountinfo's order. A
/// mount is hidden when a later one (mountinfo lists them in mount order) sits on its mount
/// point or above it.
fn visible_read_write<'a>(
    mounts: &'a [MountInfo],
    pick: impl Fn(&MountInfo) -> bool + 'a,
) -> impl Iterator<Item = &'a MountInfo> + 'a {
    mounts.iter().enumerate().filter_map(move |(i, m)| {
        if !pick(m) || !m.mount_options.contains_key("rw") {
            return None;
        }
        let hidden = mounts[i + 1..]
            .iter()
            .any(|later| m.mount_point.starts_with(&later.mount_point));
        (!hidden).then_some(m)
    })
}

/// A mount of the host's tree that is meant to be read-only and that this process can write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WritableMount {
    pub mount_point: PathBuf,
    /// The filesystem (`cgroup2`, `tmpfs`, `securityfs`, `binfmt_misc`…).
    pub fs_type: String,
}

/// The mounts of a mountinfo text at or below any of `read_only` (the host's paths a
/// container reads: `/host`, or `/host/proc`, `/host/sys`…) that this process can write: the
/// mount read-write (its own options: a bind mount's `ro` does not reach the mounts below it
/// unless the runtime makes it recursive) on a filesystem that is not read-only itself, and
/// visible (not covered by a later mount). A mount whose mount point is one of `writable` is
/// meant to be (native rebalancing's `/host/proc/irq`) and is left out; the mounts below it
/// are not. In mountinfo's order, each mount point once.
pub fn writable_mounts(
    text: &str,
    read_only: &[PathBuf],
    writable: &[PathBuf],
) -> Result<Vec<WritableMount>, MountInfoError> {
    let mounts = MountInfos::from_read(text.as_bytes())
        .map_err(|e| MountInfoError::Parse(e.to_string()))?
        .0;
    let mut out: Vec<WritableMount> = Vec::new();
    let picked = visible_read_write(&mounts, |m| {
        read_only.iter().any(|r| m.mount_point.starts_with(r))
            && !writable.contains(&m.mount_point)
            && !m.super_options.contains_key("ro")
    });
    for m in picked {
        if !out.iter().any(|w| w.mount_point == m.mount_point) {
            out.push(WritableMount {
                mount_point: m.mount_point.clone(),
                fs_type: m.fs_type.clone(),
            });
        }
    }
    Ok(out)
}

/// How high a mount's root reaches in its hierarchy, seen from the reader's cgroup namespace:
/// the number of `..` components (above the namespace's root) of a root made of them only, 0
/// for the root `/` itself, -1 for any part of a hierarchy (a cgroup below the root, or a
/// sibling's subtree such as `/../other`).
fn reach(root: &str) -> i32 {
    let mut up = 0;
    for c in root.split('/').filter(|c| !c.is_empty()) {
        if c != ".." {
            return -1;
        }
        up += 1;
    }
    up
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// What a container reading the host's tree under `root` can write.
    fn writable_cgroup_mounts(text: &str, root: &Path) -> Result<Vec<PathBuf>, MountInfoError> {
        cgroup_mounts_under(text, root, true).map(|m| m.writable)
    }

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

    /// A pod on a hybrid node (kubelet's cgroupfs driver, containerd, the host's / under
    /// /host): the container's own v1 mounts come first and hold only its cgroup; the
    /// host's whole hierarchies under /host are the ones to read.
    #[test]
    fn a_pod_on_a_hybrid_node_reads_the_hosts_hierarchies() {
        let pod = "\
1200 1100 0:150 / / ro,relatime - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w
1210 1200 0:160 / /sys ro,nosuid,nodev,noexec,relatime - sysfs sysfs ro
1211 1210 0:161 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,mode=755
1212 1211 0:29 /kubepods/burstable/pod0a1b/c0ffee /sys/fs/cgroup/cpu ro,nosuid,nodev,noexec,relatime master:12 - cgroup cgroup rw,cpu
1213 1211 0:30 /kubepods/burstable/pod0a1b/c0ffee /sys/fs/cgroup/cpuacct ro,nosuid,nodev,noexec,relatime master:13 - cgroup cgroup rw,cpuacct
1214 1211 0:38 /kubepods/burstable/pod0a1b/c0ffee /sys/fs/cgroup/unified ro,nosuid,nodev,noexec,relatime master:20 - cgroup2 cgroup2 rw
1300 1200 0:22 / /host/proc ro,nosuid,nodev,noexec,relatime master:2 - proc proc rw
1310 1200 0:21 / /host/sys ro,nosuid,nodev,noexec,relatime master:3 - sysfs sysfs rw
1311 1310 0:28 / /host/sys/fs/cgroup ro,relatime master:4 - tmpfs tmpfs rw,mode=755
1312 1311 0:29 / /host/sys/fs/cgroup/cpu ro,relatime master:12 - cgroup cgroup rw,cpu
1313 1311 0:30 / /host/sys/fs/cgroup/cpuacct ro,relatime master:13 - cgroup cgroup rw,cpuacct
1314 1311 0:38 / /host/sys/fs/cgroup/unified ro,relatime master:20 - cgroup2 cgroup2 rw
";
        let m = cgroup_mounts_under(pod, Path::new("/host/sys/fs/cgroup"), false).unwrap();
        assert_eq!(m.cpu, Some("/host/sys/fs/cgroup/cpu".into()));
        assert_eq!(m.cpuacct, Some("/host/sys/fs/cgroup/cpuacct".into()));
        assert_eq!(m.unified, Some("/host/sys/fs/cgroup/unified".into()));
        assert!(writable_cgroup_mounts(pod, Path::new("/host"))
            .unwrap()
            .is_empty());
        // Without a root, the whole hierarchy still beats the container's part of it.
        let m = cgroup_mounts(pod).unwrap();
        assert_eq!(m.cpu, Some("/host/sys/fs/cgroup/cpu".into()));
        // A part of a hierarchy only when there is no whole one.
        let own = pod.lines().take(6).collect::<Vec<_>>().join("\n") + "\n";
        let m = cgroup_mounts(&own).unwrap();
        assert_eq!(m.cpu, Some("/sys/fs/cgroup/cpu".into()));
    }

    /// A pod on a pure cgroup v2 node (the systemd driver, containerd with SystemdCgroup): the
    /// container has a cgroup namespace of its own, so its /sys/fs/cgroup has root `/`, and
    /// the host's, under /host, is shown relative to the namespace: `/../../../..`.
    #[test]
    fn a_pod_on_a_v2_node_reads_the_hosts_hierarchy() {
        let pod = "\
1200 1100 0:150 / / ro,relatime - overlay overlay rw
1211 1200 0:30 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
1310 1200 0:21 / /host/sys ro,nosuid,nodev,noexec,relatime master:3 - sysfs sysfs rw
1311 1310 0:30 /../../../.. /host/sys/fs/cgroup rw,nosuid,nodev,noexec,relatime master:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
1320 1200 0:30 /../../../.. /host/sys/fs/cgroup ro,nosuid,nodev,noexec,relatime master:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";
        let m = cgroup_mounts_under(pod, Path::new("/host/sys/fs/cgroup"), false).unwrap();
        assert_eq!(
            (m.unified, m.cpu),
            (Some("/host/sys/fs/cgroup".into()), None)
        );
        // Without the /host prefix too: the host's mount reaches above the namespace's root.
        let m = cgroup_mounts(pod).unwrap();
        assert_eq!(m.unified, Some("/host/sys/fs/cgroup".into()));
        // The container's own hierarchy alone is still a hierarchy.
        let own = pod.lines().take(2).collect::<Vec<_>>().join("\n") + "\n";
        assert_eq!(
            cgroup_mounts(&own).unwrap().unified,
            Some("/sys/fs/cgroup".into())
        );
    }

    /// The chart's defaults on a hybrid node with containerd 1.6 (this machine's node in the
    /// test cluster): the host's /sys and /sys/fs/cgroup bound read-only, their v1
    /// hierarchies below still read-write. The ones under /host/sys are hidden by the later
    /// /host/sys/fs/cgroup mount; the visible ones are named.
    #[test]
    fn writable_host_cgroup_mounts_are_named() {
        let pod = "\
1200 1100 0:150 / / ro,relatime - overlay overlay rw
1211 1200 0:161 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,mode=755
1212 1211 0:29 /kubepods/besteffort/pod1/c1 /sys/fs/cgroup/cpu,cpuacct ro,nosuid - cgroup cgroup rw,cpu,cpuacct
1310 1200 0:21 / /host/sys ro,nosuid,nodev,noexec,relatime - sysfs sysfs rw
1311 1310 0:28 / /host/sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
1312 1311 0:29 / /host/sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
1320 1200 0:28 / /host/sys/fs/cgroup ro,relatime - tmpfs tmpfs rw,mode=755
1321 1320 0:29 / /host/sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
1322 1320 0:30 / /host/sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
1323 1320 0:38 / /host/sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
1330 1320 0:39 / /host/sys/fs/cgroup/pids ro,relatime - cgroup cgroup rw,pids
";
        let root = Path::new("/host/sys/fs/cgroup");
        let want: Vec<PathBuf> = ["cpu,cpuacct", "memory", "unified"]
            .iter()
            .map(|d| root.join(d))
            .collect();
        assert_eq!(writable_cgroup_mounts(pod, root).unwrap(), want);
        assert_eq!(
            writable_cgroup_mounts(pod, Path::new("/host")).unwrap(),
            want
        );
        // The container's own mounts are not the host's.
        assert!(writable_cgroup_mounts(pod, Path::new("/sys/fs/cgroup"))
            .unwrap()
            .is_empty());
        // The v2 pod before the chart's fix: its rw mount of the host's tree, then the
        // read-only one over it: hidden, so nothing writable.
        let v2 = "\
1311 1310 0:30 /../../../.. /host/sys/fs/cgroup rw,nosuid,nodev,noexec,relatime master:4 - cgroup2 cgroup2 rw
1320 1200 0:30 /../../../.. /host/sys/fs/cgroup ro,nosuid,nodev,noexec,relatime master:4 - cgroup2 cgroup2 rw
";
        assert!(writable_cgroup_mounts(v2, Path::new("/host"))
            .unwrap()
            .is_empty());
        let first_only = v2.lines().next().unwrap().to_string() + "\n";
        assert_eq!(
            writable_cgroup_mounts(&first_only, Path::new("/host")).unwrap(),
            vec![PathBuf::from("/host/sys/fs/cgroup")]
        );
        assert!(writable_cgroup_mounts("garbage\n", Path::new("/host")).is_err());
    }

    /// A pod's mountinfo in the shape of this machine's (`/proc/self/mountinfo` of the
    /// development VM: proc, sysfs, a v1 cgroup tree under a tmpfs), with the chart's host
    /// mounts on a runtime without recursive read-only mounts (containerd 1.7, `cgroupMount:
    /// subPath`): /host/proc and /host/sys are read-only binds, but the mounts below them stay
    /// read-write; native rebalancing's /host/proc/irq is writable on purpose.
    const POD_WITHOUT_RRO: &str = "\
1200 1100 0:150 / / ro,relatime - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w
1201 1200 0:151 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
1202 1200 0:152 / /sys ro,nosuid,nodev,noexec,relatime - sysfs sysfs ro
1203 1202 0:153 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw
1204 1200 254:0 /var/lib/kubelet/pods/p/volumes/kubernetes.io~configmap/config /etc/nodemedic ro,relatime - ext4 /dev/vda rw
1300 1200 0:21 / /host/proc ro,relatime - proc proc rw
1301 1300 0:39 / /host/proc/sys/fs/binfmt_misc rw,relatime - autofs systemd-1 rw,fd=29,pgrp=1
1302 1301 0:40 / /host/proc/sys/fs/binfmt_misc rw,nosuid,nodev,noexec,relatime - binfmt_misc binfmt_misc rw
1303 1300 0:21 /irq /host/proc/irq rw,relatime - proc proc rw
1310 1200 0:22 / /host/sys ro,relatime - sysfs sysfs rw
1311 1310 0:7 / /host/sys/kernel/security rw,nosuid,nodev,noexec,relatime - securityfs securityfs rw
1312 1310 0:28 / /host/sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
1313 1312 0:29 / /host/sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
1314 1312 0:30 / /host/sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
1315 1312 0:38 / /host/sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
1316 1310 0:12 / /host/sys/kernel/tracing rw,nosuid,nodev,noexec,relatime - tracefs tracefs rw
1317 1310 0:41 / /host/sys/fs/pstore ro,nosuid,nodev,noexec,relatime - pstore pstore rw
1320 1200 0:28 / /host/sys/fs/cgroup ro,relatime - tmpfs tmpfs rw,mode=755
1330 1200 0:25 / /host/run/dbus ro,nosuid,nodev - tmpfs tmpfs rw,size=2466364k,mode=755
1340 1200 254:0 /etc/default /host/etc/default ro,relatime - ext4 /dev/vda rw
1341 1200 254:0 /var/lib/dpkg /host/var/lib/dpkg ro,relatime - ext4 /dev/vda rw
";

    fn points(w: &[WritableMount]) -> Vec<String> {
        w.iter()
            .map(|m| format!("{} {}", m.mount_point.display(), m.fs_type))
            .collect()
    }

    /// Every writable mount under the host's root is named, once, but the ones a later mount
    /// covers (the chart's own /host/sys/fs/cgroup over the one the /host/sys bind brought)
    /// and the one meant to be writable.
    #[test]
    fn writable_host_mounts_below_a_read_only_bind() {
        let host = [PathBuf::from("/host")];
        let irq = [PathBuf::from("/host/proc/irq")];
        let w = writable_mounts(POD_WITHOUT_RRO, &host, &irq).unwrap();
        assert_eq!(
            points(&w),
            [
                "/host/proc/sys/fs/binfmt_misc binfmt_misc",
                "/host/sys/kernel/security securityfs",
                "/host/sys/kernel/tracing tracefs",
            ]
        );
        // Without native rebalancing, /host/proc/irq is one of them.
        let w = writable_mounts(POD_WITHOUT_RRO, &host, &[]).unwrap();
        assert!(
            points(&w).contains(&"/host/proc/irq proc".to_string()),
            "{w:?}"
        );
        // Only the roots asked about; the container's own mounts are never the host's.
        let w = writable_mounts(POD_WITHOUT_RRO, &[PathBuf::from("/host/sys")], &[]).unwrap();
        assert_eq!(points(&w).len(), 2, "{w:?}");
        let own = [PathBuf::from("/proc"), PathBuf::from("/sys")];
        assert_eq!(
            points(&writable_mounts(POD_WITHOUT_RRO, &own, &[]).unwrap()),
            ["/proc proc"]
        );
    }

    /// The chart's defaults where the runtime makes mounts read-only all the way down
    /// (containerd 2, `recursiveReadOnly`): nothing. A read-only filesystem mounted read-write
    /// cannot be written either.
    #[test]
    fn nothing_writable_with_recursive_read_only_mounts() {
        let rro: String = POD_WITHOUT_RRO
            .lines()
            .map(|l| match l.split_once(" rw,") {
                Some((head, tail)) if l.contains("/host/") => format!("{head} ro,{tail}\n"),
                _ => format!("{l}\n"),
            })
            .collect();
        let host = [PathBuf::from("/host")];
        assert_eq!(writable_mounts(&rro, &host, &[]).unwrap(), []);
        let ro_super = "1400 1200 0:50 / /host/x rw,relatime - squashfs /dev/loop0 ro\n";
        assert_eq!(writable_mounts(ro_super, &host, &[]).unwrap(), []);
        assert_eq!(writable_mounts("", &host, &[]).unwrap(), []);
        assert!(writable_mounts("garbage\n", &host, &[]).is_err());
    }

    #[test]
    fn how_high_a_root_reaches() {
        assert_eq!(reach("/"), 0);
        assert_eq!(reach("/../.."), 2);
        assert_eq!(reach("/../../../.."), 4);
        assert_eq!(reach("/kubepods/burstable/pod0a1b/c0ffee"), -1);
        assert_eq!(reach("/../sibling"), -1);
    }
}
