use std::fs::File;
use std::io::{self, Read};
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

    pub(crate) fn parse(path: &Path, message: impl std::fmt::Display) -> Self {
        ReadError::Parse {
            path: path.to_path_buf(),
            message: message.to_string(),
        }
    }
}

fn classify(path: &Path, e: io::Error) -> ReadError {
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

/// Reads a whole file into `buf` (cleared first), reusing its allocation.
pub(crate) fn read_into(path: &Path, buf: &mut String) -> Result<(), ReadError> {
    buf.clear();
    let mut f = File::open(path).map_err(|e| classify(path, e))?;
    f.read_to_string(buf).map_err(|e| match e.kind() {
        io::ErrorKind::InvalidData => ReadError::parse(path, "contents are not UTF-8"),
        _ => classify(path, e),
    })?;
    Ok(())
}

pub(crate) fn read(path: &Path) -> Result<String, ReadError> {
    let mut s = String::new();
    read_into(path, &mut s)?;
    Ok(s)
}

/// Reads an optional file: `Ok(None)` when it does not exist.
pub(crate) fn read_optional(path: &Path) -> Result<Option<String>, ReadError> {
    match read(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.is_missing() => Ok(None),
        Err(e) => Err(e),
    }
}

/// The last component of a symlink's target (`.../drivers/mlx5_core` → `mlx5_core`).
pub(crate) fn link_name(path: &Path) -> Option<String> {
    std::fs::read_link(path)
        .ok()?
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
}
