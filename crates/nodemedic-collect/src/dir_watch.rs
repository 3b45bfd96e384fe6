//! inotify directory watches (through rustix), for the read layer's kept-open regular files
//! and the cgroup tree's scan.

use std::fs::File;
use std::io;

/// Directory watches (inotify) that tell when a kept-open regular file may have been
/// replaced: a name created, deleted or renamed in its directory, or the directory itself
/// removed or moved. One non-blocking read per sample replaces an `fstat` per file per read.
pub struct DirWatch {
    /// The inotify fd (non-blocking), read and decoded by rustix.
    fd: File,
    buf: Vec<std::mem::MaybeUninit<u8>>,
}

/// What [`DirWatch::drain`] found.
pub enum DirEvents {
    /// Nothing happened in any watched directory.
    None,
    /// Something happened in these watches (by descriptor).
    Some(Vec<i32>),
    /// The kernel's event queue overflowed (or the read failed): anything may have changed.
    All,
}

impl DirWatch {
    pub fn new() -> io::Result<Self> {
        use rustix::fs::inotify::{init, CreateFlags};
        let fd = init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC)?;
        Ok(Self {
            fd: File::from(fd),
            buf: vec![std::mem::MaybeUninit::uninit(); 4096],
        })
    }

    /// Watches `dir` (the same directory twice gives the same descriptor).
    pub fn add(&self, dir: &std::path::Path) -> io::Result<i32> {
        use rustix::fs::inotify::{add_watch, WatchFlags};
        let mask = WatchFlags::CREATE
            | WatchFlags::DELETE
            | WatchFlags::MOVED_FROM
            | WatchFlags::MOVED_TO
            | WatchFlags::DELETE_SELF
            | WatchFlags::MOVE_SELF
            | WatchFlags::ONLYDIR;
        Ok(add_watch(&self.fd, dir, mask)?)
    }

    /// Reads every queued event without blocking.
    pub fn drain(&mut self) -> DirEvents {
        use rustix::fs::inotify::{ReadFlags, Reader};
        let mut wds = Vec::new();
        let mut events = Reader::new(&self.fd, &mut self.buf);
        loop {
            match events.next() {
                Ok(e) if e.events().contains(ReadFlags::QUEUE_OVERFLOW) => return DirEvents::All,
                Ok(e) => wds.push(e.wd()),
                Err(rustix::io::Errno::AGAIN) => break,
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return DirEvents::All,
            }
        }
        if wds.is_empty() {
            DirEvents::None
        } else {
            DirEvents::Some(wds)
        }
    }
}
