use std::io;
use std::path::{Path, PathBuf};

use nodemedic_kernel::lsm::LsmContext;

/// Reading a kernel file failed. Always carries the path.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{}: not found", .0.display())]
    Missing(PathBuf),
    /// `EACCES` or `EPERM`. `denied`: the words naming the security module confining this
    /// process that may have refused it (`read denied by AppArmor (profile …)`), else the
    /// plain reason.
    #[error("{}: {}", .path.display(), .denied.as_deref().unwrap_or(
        "permission denied (nodemedic needs root or CAP_SYS_ADMIN to read it)"
    ))]
    PermissionDenied {
        path: PathBuf,
        denied: Option<String>,
    },
    #[error("{}: {source}", .path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("{}: {message}", .path.display())]
    Parse { path: PathBuf, message: String },
}

impl ReadError {
    pub fn is_missing(&self) -> bool {
        matches!(self, ReadError::Missing(_))
    }

    pub fn parse(path: &Path, message: impl std::fmt::Display) -> Self {
        ReadError::Parse {
            path: path.to_path_buf(),
            message: message.to_string(),
        }
    }
}

impl ReadError {
    /// Classifies an I/O error on `path`: a vanished file (`ENOENT`, or `ENODEV` from a
    /// freed IRQ or removed device) is [`ReadError::Missing`].
    pub fn from_io(path: &Path, e: io::Error) -> ReadError {
        Self::from_io_under(path, e, &LsmContext::default())
    }

    /// [`ReadError::from_io`] for a process under `lsm`: a refusal names the module that
    /// confines it, when one does.
    pub fn from_io_under(path: &Path, e: io::Error, lsm: &LsmContext) -> ReadError {
        match e.kind() {
            io::ErrorKind::NotFound => ReadError::Missing(path.to_path_buf()),
            io::ErrorKind::PermissionDenied => ReadError::PermissionDenied {
                path: path.to_path_buf(),
                denied: lsm.denial("read", e.raw_os_error()),
            },
            _ if e.raw_os_error() == Some(19) => ReadError::Missing(path.to_path_buf()), // ENODEV
            _ => ReadError::Io {
                path: path.to_path_buf(),
                source: e,
            },
        }
    }
}

/// The last component of a symlink's target (`.../drivers/mlx5_core` → `mlx5_core`).
pub(crate) fn link_name(path: &Path) -> Option<String> {
    std::fs::read_link(path)
        .ok()?
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use nodemedic_kernel::lsm::{LsmContext, LsmFiles};

    use super::*;

    /// A refusal names the module confining the process; without one, or for another error,
    /// the words stay what they were.
    #[test]
    fn a_refused_read_names_the_lsm_that_confines_the_process() {
        let path = Path::new("/host/proc/interrupts");
        let eacces = || io::Error::from_raw_os_error(13);
        assert_eq!(
            ReadError::from_io(path, eacces()).to_string(),
            "/host/proc/interrupts: permission denied (nodemedic needs root or CAP_SYS_ADMIN to \
             read it)"
        );
        let apparmor = LsmContext::from_files(&LsmFiles {
            apparmor_current: Some("cri-containerd.apparmor.d (enforce)\n"),
            ..Default::default()
        });
        assert_eq!(
            ReadError::from_io_under(path, eacces(), &apparmor).to_string(),
            "/host/proc/interrupts: read denied by AppArmor (profile cri-containerd.apparmor.d, \
             enforce mode)"
        );
        let selinux = LsmContext::from_files(&LsmFiles {
            current: Some("system_u:system_r:container_t:s0:c12,c34\0"),
            selinux_enforce: Some("1\n"),
            ..Default::default()
        });
        assert_eq!(
            ReadError::from_io_under(path, eacces(), &selinux).to_string(),
            "/host/proc/interrupts: read denied by SELinux (label \
             system_u:system_r:container_t:s0:c12,c34)"
        );
        let unconfined = LsmContext::from_files(&LsmFiles {
            apparmor_current: Some("unconfined\n"),
            ..Default::default()
        });
        assert_eq!(
            ReadError::from_io_under(path, eacces(), &unconfined).to_string(),
            ReadError::from_io(path, eacces()).to_string()
        );
        assert!(
            ReadError::from_io_under(path, io::Error::from_raw_os_error(2), &apparmor).is_missing()
        );
    }
}
