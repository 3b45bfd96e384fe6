use std::io;
use std::path::{Path, PathBuf};

/// Reading a kernel file failed. Always carries the path.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{}: not found", .0.display())]
    Missing(PathBuf),
    #[error("{}: permission denied (nodemedic needs root or CAP_SYS_ADMIN to read it)", .0.display())]
    PermissionDenied(PathBuf),
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
        match e.kind() {
            io::ErrorKind::NotFound => ReadError::Missing(path.to_path_buf()),
            io::ErrorKind::PermissionDenied => ReadError::PermissionDenied(path.to_path_buf()),
            _ if e.raw_os_error() == Some(19) => ReadError::Missing(path.to_path_buf()), // ENODEV
            _ => ReadError::Io {
                path: path.to_path_buf(),
                source: e,
            },
        }
    }
}

/// Lists a directory, with the error classified like a file read's.
pub(crate) fn read_dir(path: &Path) -> Result<std::fs::ReadDir, ReadError> {
    std::fs::read_dir(path).map_err(|e| ReadError::from_io(path, e))
}

/// The last component of a symlink's target (`.../drivers/mlx5_core` → `mlx5_core`).
pub(crate) fn link_name(path: &Path) -> Option<String> {
    std::fs::read_link(path)
        .ok()?
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
}
