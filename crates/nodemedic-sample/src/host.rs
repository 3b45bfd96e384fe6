//! What the daemon found at start about its own access to the host: the security module
//! that confines it, and the mounts of the host's tree it could write. Neither changes while
//! it runs, so both are read once and every sample carries them (shared, never copied).

use std::path::PathBuf;

use nodemedic_kernel::lsm::LsmContext;
use nodemedic_kernel::mounts::WritableMount;
use serde::Serialize;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HostAccess {
    /// The LSM labels of the process (what a refusal is named after).
    pub lsm: LsmContext,
    /// The host paths the daemon reads and expects read-only (`/host`, or the roots
    /// configured one by one); empty when it reads the node's own tree.
    pub read_only: Vec<PathBuf>,
    /// The mounts at or below them that this process can write: the runtime did not make
    /// them read-only all the way down. Empty when none, or when not checked.
    pub writable_mounts: Vec<WritableMount>,
    /// Why the mounts were not checked (the node's own tree, mountinfo unreadable); absent
    /// when they were.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mounts_unchecked: Option<String>,
}

impl HostAccess {
    /// Whether the mounts were checked (and `writable_mounts` is the whole answer).
    pub fn mounts_checked(&self) -> bool {
        self.mounts_unchecked.is_none()
    }

    /// `host mount /host/sys/kernel/security (securityfs) is writable: …`, naming every
    /// writable mount; `None` when there is none.
    pub fn writable_message(&self) -> Option<String> {
        let w = &self.writable_mounts;
        let names: Vec<String> = w
            .iter()
            .map(|m| format!("{} ({})", m.mount_point.display(), m.fs_type))
            .collect();
        let (what, verb, them, fix) = match w.len() {
            0 => return None,
            1 => (
                "host mount",
                "is",
                "the mount",
                "mount it read-only on its own, or leave it out of the pod",
            ),
            _ => (
                "host mounts",
                "are",
                "these mounts",
                "mount each read-only on its own, or leave them out of the pod",
            ),
        };
        Some(format!(
            "{what} {} {verb} writable from nodemedic's container: the runtime did not make \
             {them} read-only all the way down (recursive read-only mounts need Linux 5.12 \
             and a runtime that makes them, such as containerd 2 or CRI-O 1.30); {fix}",
            names.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writable_mounts_are_named_in_one_message() {
        let mount = |p: &str, fs: &str| WritableMount {
            mount_point: p.into(),
            fs_type: fs.into(),
        };
        let mut h = HostAccess::default();
        assert_eq!(h.writable_message(), None);
        h.writable_mounts = vec![mount("/host/sys/fs/cgroup/cpu", "cgroup")];
        assert_eq!(
            h.writable_message().as_deref(),
            Some(
                "host mount /host/sys/fs/cgroup/cpu (cgroup) is writable from nodemedic's \
                 container: the runtime did not make the mount read-only all the way down \
                 (recursive read-only mounts need Linux 5.12 and a runtime that makes them, \
                 such as containerd 2 or CRI-O 1.30); mount it read-only on its own, or leave \
                 it out of the pod"
            )
        );
        h.writable_mounts
            .push(mount("/host/sys/kernel/security", "securityfs"));
        let m = h.writable_message().unwrap_or_default();
        assert!(
            m.starts_with(
                "host mounts /host/sys/fs/cgroup/cpu (cgroup), /host/sys/kernel/security \
                 (securityfs) are writable"
            ),
            "{m}"
        );
    }
}
