//! The one read layer every collector goes through.
//!
//! Collectors ask the [`Reader`] for a file's contents by path and never open files
//! themselves, so how files are read (opened per sample, kept open and re-read with `pread`,
//! batched through io_uring) is decided in one place, for every collector at once.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use crate::ReadError;

/// Reads kernel files by path.
#[derive(Debug, Default)]
pub struct Reader {}

impl Reader {
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads a whole file into `buf` (cleared first), reusing its allocation.
    pub fn read_into(&self, path: &Path, buf: &mut String) -> Result<(), ReadError> {
        buf.clear();
        let mut f = File::open(path).map_err(|e| ReadError::from_io(path, e))?;
        f.read_to_string(buf).map_err(|e| match e.kind() {
            io::ErrorKind::InvalidData => ReadError::parse(path, "contents are not UTF-8"),
            _ => ReadError::from_io(path, e),
        })?;
        Ok(())
    }

    pub fn read(&self, path: &Path) -> Result<String, ReadError> {
        let mut s = String::new();
        self.read_into(path, &mut s)?;
        Ok(s)
    }

    /// Reads an optional file: `Ok(None)` when it does not exist.
    pub fn read_optional(&self, path: &Path) -> Result<Option<String>, ReadError> {
        match self.read(path) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.is_missing() => Ok(None),
            Err(e) => Err(e),
        }
    }
}
