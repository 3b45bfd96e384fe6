//! What this process can do to the host, read once at start: the security module labels it
//! runs under (which name a refusal, see `nodemedic_kernel::lsm`) and the mounts of the
//! host's tree it could write. Neither changes while the process runs; the binary reads
//! them before the first sample and hands them to the read layer, the remediation and the
//! probes' loader, and every sample carries them to `/status` and `check`.

use std::path::{Path, PathBuf};

use nodemedic_kernel::lsm::{LsmContext, LsmFiles};
use nodemedic_kernel::mounts::writable_mounts;
use nodemedic_sample::host::HostAccess;

use crate::Paths;

/// The process's own LSM context: its attributes under the process's own `/proc` (they
/// describe this process, whatever tree it reads), the active modules and SELinux's mode
/// from the host's sysfs where it is mounted (`sysfs`), else the container's own.
pub fn read_lsm_context(sysfs: &Path) -> LsmContext {
    let read = |p: &Path| std::fs::read_to_string(p).ok();
    let either = |rel: &str| read(&sysfs.join(rel)).or_else(|| read(&Path::new("/sys").join(rel)));
    let apparmor_current = read(Path::new("/proc/self/attr/apparmor/current"));
    let current = read(Path::new("/proc/self/attr/current"));
    let lsm = either("kernel/security/lsm");
    let selinux_enforce = either("fs/selinux/enforce");
    LsmContext::from_files(&LsmFiles {
        apparmor_current: apparmor_current.as_deref(),
        current: current.as_deref(),
        lsm: lsm.as_deref(),
        selinux_enforce: selinux_enforce.as_deref(),
    })
}

/// The host paths a process reading `paths` expects read-only: each root that is not the
/// process's own (`/proc`, `/sys`, `/sys/fs/cgroup`, `/`), when the host's tree is mounted
/// into a container (its rootfs is not `/`). Empty on the node itself.
pub fn read_only_roots(paths: &Paths) -> Vec<PathBuf> {
    let own = Paths::default();
    if paths.rootfs == own.rootfs {
        return Vec::new();
    }
    let mut roots = Vec::new();
    for (p, own) in [
        (&paths.rootfs, &own.rootfs),
        (&paths.procfs, &own.procfs),
        (&paths.sysfs, &own.sysfs),
        (&paths.cgroupfs, &own.cgroupfs),
    ] {
        if p != own && !roots.iter().any(|r: &PathBuf| p.starts_with(r)) {
            roots.push(p.clone());
        }
    }
    roots
}

/// What the process can do to the host: its LSM context, and the mounts at or below
/// [`read_only_roots`] it can write, from `<procfs>/self/mountinfo` (the process's own,
/// through the host's procfs in a pod), less `meant_writable` (native rebalancing's
/// `<procfs>/irq`, a configured one).
pub fn host_access(paths: &Paths, meant_writable: &[PathBuf]) -> HostAccess {
    let lsm = read_lsm_context(&paths.sysfs);
    let read_only = read_only_roots(paths);
    let mut access = HostAccess {
        lsm,
        read_only,
        ..HostAccess::default()
    };
    if access.read_only.is_empty() {
        access.mounts_unchecked =
            Some("the node's own tree is read (no host root mounted into a container)".into());
        return access;
    }
    let mountinfo = paths.procfs.join("self/mountinfo");
    let checked = std::fs::read_to_string(&mountinfo)
        .map_err(|e| format!("{}: {e}", mountinfo.display()))
        .and_then(|text| {
            writable_mounts(&text, &access.read_only, meant_writable)
                .map_err(|e| format!("{}: {e}", mountinfo.display()))
        });
    match checked {
        Ok(w) => access.writable_mounts = w,
        Err(e) => access.mounts_unchecked = Some(e),
    }
    access
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_roots_of_a_container_and_none_on_the_node() {
        assert!(read_only_roots(&Paths::default()).is_empty());
        assert_eq!(
            read_only_roots(&Paths::under("/host")),
            vec![PathBuf::from("/host")]
        );
        // The chart with hostNetwork: the container's own /sys, the host's cgroup tree.
        let paths = Paths {
            sysfs: "/sys".into(),
            cgroupfs: "/host/sys/fs/cgroup".into(),
            ..Paths::under("/host")
        };
        assert_eq!(read_only_roots(&paths), vec![PathBuf::from("/host")]);
        let apart = Paths {
            procfs: "/hostproc".into(),
            ..Paths::under("/host")
        };
        assert_eq!(
            read_only_roots(&apart),
            vec![PathBuf::from("/host"), PathBuf::from("/hostproc")]
        );
    }

    /// A tree whose `proc/self/mountinfo` names a writable mount under it: named; without
    /// one, the mounts are unchecked with the reason; the node's own tree is not checked.
    #[test]
    fn host_access_reads_the_mountinfo_under_the_procfs_root() {
        let root = tempfile::tempdir().unwrap();
        let host = root.path().join("host");
        let paths = Paths::under(&host);
        std::fs::create_dir_all(host.join("proc/self")).unwrap();
        let a = host_access(&paths, &[]);
        assert!(
            a.mounts_unchecked
                .as_deref()
                .is_some_and(|r| r.contains("self/mountinfo")),
            "{a:?}"
        );
        let line = |id: u32, point: &Path, opts: &str| {
            format!(
                "{id} 1 0:{id} / {} {opts},relatime - tmpfs tmpfs rw\n",
                point.display()
            )
        };
        let text = line(10, &host.join("sys"), "ro")
            + &line(11, &host.join("sys/kernel/security"), "rw")
            + &line(12, &host.join("proc/irq"), "rw");
        std::fs::write(host.join("proc/self/mountinfo"), text).unwrap();
        let a = host_access(&paths, &[host.join("proc/irq")]);
        assert!(a.mounts_checked());
        let points: Vec<&Path> = a
            .writable_mounts
            .iter()
            .map(|m| m.mount_point.as_path())
            .collect();
        assert_eq!(points, vec![host.join("sys/kernel/security")]);
        let own = host_access(&Paths::default(), &[]);
        assert!(!own.mounts_checked() && own.read_only.is_empty());
    }
}
