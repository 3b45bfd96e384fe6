//! io_uring (the read layer's batched reads of registered files, the disk commit probe's
//! linked write + fdatasync). This is the only module of the crate allowed to use `unsafe`
//! (io_uring submissions); every block says why it is sound.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};

/// Why io_uring cannot be set up here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UringUnavailable {
    #[error(
        "io_uring_setup: ENOSYS: this kernel has no io_uring (CONFIG_IO_URING off, or a \
         seccomp profile answering ENOSYS)"
    )]
    NotInKernel,
    #[error("io_uring_setup: EPERM: disabled by sysctl kernel.io_uring_disabled = {0}")]
    DisabledBySysctl(String),
    #[error(
        "io_uring_setup: EPERM: denied by a seccomp profile (the container runtimes' \
         RuntimeDefault blocks io_uring) or by missing privilege"
    )]
    Denied,
    #[error("io_uring_setup: {0}")]
    Other(String),
}

impl UringUnavailable {
    /// Names the cause of a failed `io_uring_setup`.
    pub fn explain(e: &io::Error) -> Self {
        match e.raw_os_error() {
            Some(libc::ENOSYS) => Self::NotInKernel,
            Some(libc::EPERM) => {
                match std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled") {
                    Ok(v) if v.trim() != "0" => Self::DisabledBySysctl(v.trim().to_string()),
                    _ => Self::Denied,
                }
            }
            _ => Self::Other(e.to_string()),
        }
    }
}

/// Why an io_uring request failed.
#[derive(Debug, thiserror::Error)]
pub enum RingError {
    /// Nothing the request handed to the kernel is still in flight: the ring can be used
    /// again.
    #[error("io_uring: {0}")]
    Io(#[from] io::Error),
    /// Waiting failed and so did reaping what was in flight: the kernel may still read or
    /// write the memory and files handed to it. They were leaked, never to be freed or
    /// reused, and the ring refuses every later request. Drop it and go on without.
    #[error("io_uring: {in_flight} request(s) could not be reaped ({source}); ring abandoned")]
    Abandoned { in_flight: usize, source: io::Error },
    /// An earlier request abandoned the ring.
    #[error("io_uring: ring abandoned by an earlier failure")]
    Unusable,
}

impl RingError {
    /// Whether the ring is unusable from now on.
    pub fn abandons_ring(&self) -> bool {
        !matches!(self, RingError::Io(_))
    }
}

/// One io_uring instance for batched reads of registered files and for the disk commit
/// probe's linked write + fdatasync.
///
/// Soundness rests on one rule: memory and files handed to the kernel stay valid until their
/// completions are reaped. Every request waits for its completions before it returns. When
/// that wait fails and reaping fails too, the request leaks what it handed over (the read
/// buffers, the write's copy of its data and its duplicate of the fd) and the ring is
/// abandoned: nothing handed over is ever freed or reused, whatever the caller does next.
pub struct Ring {
    ring: io_uring::IoUring,
    /// The fds registered with the ring, in registration order; `Fixed(i)` is `registered[i]`.
    registered: Vec<RawFd>,
    /// The write's data, owned by the ring while the kernel may read it.
    write_buf: Vec<u8>,
    abandoned: bool,
    /// Test fault hook: this many waits submit for real and then fail.
    #[cfg(test)]
    failing_waits: u32,
}

/// Entries in the submission queue; a batch larger than this is submitted in chunks.
const RING_ENTRIES: u32 = 256;

impl Ring {
    /// Sets up a ring, or says why it cannot.
    pub fn new() -> Result<Ring, UringUnavailable> {
        io_uring::IoUring::new(RING_ENTRIES)
            .map(|ring| Ring {
                ring,
                registered: Vec::new(),
                write_buf: Vec::new(),
                abandoned: false,
                #[cfg(test)]
                failing_waits: 0,
            })
            .map_err(|e| UringUnavailable::explain(&e))
    }

    /// Makes `fds` the ring's registered file table unless it already is.
    ///
    /// The caller must keep every fd open until the next call to this function (or until
    /// the ring is dropped): the kernel takes its own reference at registration, so a
    /// closed fd cannot be read through a stale slot, but its number could be reused.
    pub fn register(&mut self, fds: &[RawFd]) -> Result<(), RingError> {
        if self.abandoned {
            return Err(RingError::Unusable);
        }
        if self.registered == fds {
            return Ok(());
        }
        if !self.registered.is_empty() {
            self.ring.submitter().unregister_files()?;
            self.registered.clear();
        }
        if !fds.is_empty() {
            self.ring.submitter().register_files(fds)?;
        }
        self.registered = fds.to_vec();
        Ok(())
    }

    /// Reads registered file `i` at offset 0 into `bufs[i]` for every `i`, in as few
    /// submissions as the ring's size allows. Returns, per file, the byte count or the error.
    ///
    /// Takes the buffers' `Vec` so that it can keep them: on [`RingError::Abandoned`] they
    /// are leaked and `bufs` is left empty.
    pub fn read_registered(
        &mut self,
        bufs: &mut Vec<Vec<u8>>,
    ) -> Result<Vec<io::Result<usize>>, RingError> {
        if self.abandoned {
            return Err(RingError::Unusable);
        }
        let n = bufs.len().min(self.registered.len());
        if u32::try_from(n).is_err() {
            return Err(io::Error::other("batch larger than u32 fixed-file indexes").into());
        }
        let mut results: Vec<io::Result<usize>> = (0..n)
            .map(|_| Err(io::Error::other("not completed")))
            .collect();
        let mut next = 0usize;
        let mut in_flight = 0usize;
        while next < n || in_flight > 0 {
            {
                let mut sq = self.ring.submission();
                while next < n && !sq.is_full() {
                    let buf = &mut bufs[next];
                    let len = u32::try_from(buf.len()).unwrap_or(u32::MAX);
                    // `n` fits in u32 (checked above) and `next < n`.
                    let idx = next as u32;
                    let entry = io_uring::opcode::Read::new(
                        io_uring::types::Fixed(idx),
                        buf.as_mut_ptr(),
                        len,
                    )
                    .offset(0)
                    .build()
                    .user_data(next as u64);
                    // SAFETY: the entry points at `bufs[next]`, `len` bytes long, which
                    // nobody touches until its completion is reaped below: we wait for
                    // every in-flight entry before returning, and when reaping fails,
                    // `abandon` leaks every buffer so it is never freed or reused (see
                    // `Ring`). Fixed file `idx` is registered (idx < registered.len()).
                    if unsafe { sq.push(&entry) }.is_err() {
                        break;
                    }
                    next += 1;
                    in_flight += 1;
                }
            }
            if let Err(e) = self.submit_and_wait(1) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                if !self.drain(in_flight) {
                    self.abandoned = true;
                    std::mem::forget(std::mem::take(bufs));
                    return Err(RingError::Abandoned {
                        in_flight,
                        source: e,
                    });
                }
                return Err(e.into());
            }
            for cqe in self.ring.completion() {
                in_flight = in_flight.saturating_sub(1);
                let i = cqe.user_data() as usize;
                let res = cqe.result();
                if let Some(slot) = results.get_mut(i) {
                    *slot = if res < 0 {
                        Err(io::Error::from_raw_os_error(-res))
                    } else {
                        Ok(res as usize)
                    };
                }
            }
        }
        Ok(results)
    }

    /// `submit_and_wait`, through the test fault hook.
    fn submit_and_wait(&mut self, want: usize) -> io::Result<usize> {
        #[cfg(test)]
        if self.failing_waits > 0 {
            self.failing_waits -= 1;
            // Submit for real, so whatever was queued is in flight, then fail as
            // io_uring_enter can (EBUSY: the completion queue overflowed).
            let _ = self.ring.submit();
            return Err(io::Error::from_raw_os_error(libc::EBUSY));
        }
        self.ring.submit_and_wait(want)
    }

    /// Makes the next `n` waits fail after submitting.
    #[cfg(test)]
    pub(crate) fn fail_next_waits(&mut self, n: u32) {
        self.failing_waits = n;
    }

    /// Reaps `in_flight` completions. `false` when a wait failed before all were reaped.
    fn drain(&mut self, mut in_flight: usize) -> bool {
        while in_flight > 0 {
            match self.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return false,
            }
            in_flight = in_flight.saturating_sub(self.ring.completion().count());
        }
        true
    }

    /// Writes `data` at `offset` of `file` and then fdatasyncs it, as one linked pair of
    /// submissions. Returns once both completed.
    pub fn write_then_fdatasync(
        &mut self,
        file: &File,
        data: &[u8],
        offset: u64,
    ) -> Result<(), RingError> {
        use io_uring::{opcode, squeue::Flags, types};
        if self.abandoned {
            return Err(RingError::Unusable);
        }
        let len = u32::try_from(data.len()).map_err(io::Error::other)?;
        // The kernel reads the data and resolves the fd of the linked fsync after this
        // function could have returned (if reaping fails): both are the ring's own, a copy
        // and a duplicate, so that they can be leaked instead of freed or reused.
        let fd = file.try_clone()?;
        self.write_buf.clear();
        self.write_buf.extend_from_slice(data);
        let raw = types::Fd(fd.as_raw_fd());
        let write = opcode::Write::new(raw, self.write_buf.as_ptr(), len)
            .offset(offset)
            .build()
            .flags(Flags::IO_LINK)
            .user_data(1);
        let sync = opcode::Fsync::new(raw)
            .flags(types::FsyncFlags::DATASYNC)
            .build()
            .user_data(2);
        {
            let mut sq = self.ring.submission();
            if sq.capacity() - sq.len() < 2 {
                return Err(io::Error::other("io_uring submission queue full").into());
            }
            // SAFETY: both entries point at `write_buf` and `fd`, which the ring owns: they
            // are not touched until both completions are reaped below, and when reaping
            // fails they are leaked (see `Ring`). There is room for both (checked above).
            unsafe {
                sq.push(&write).map_err(io::Error::other)?;
                sq.push(&sync).map_err(io::Error::other)?;
            }
        }
        let mut done = 0usize;
        let mut first_err = None;
        while done < 2 {
            match self.submit_and_wait(2 - done) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    if !self.drain(2 - done) {
                        self.abandoned = true;
                        std::mem::forget(std::mem::take(&mut self.write_buf));
                        std::mem::forget(fd);
                        return Err(RingError::Abandoned {
                            in_flight: 2 - done,
                            source: e,
                        });
                    }
                    return Err(e.into());
                }
            }
            for cqe in self.ring.completion() {
                done += 1;
                let res = cqe.result();
                if res < 0 && first_err.is_none() {
                    first_err = Some(io::Error::from_raw_os_error(-res));
                } else if cqe.user_data() == 1 && res >= 0 && (res as usize) != data.len() {
                    first_err.get_or_insert_with(|| {
                        io::Error::new(io::ErrorKind::WriteZero, "short write")
                    });
                }
            }
        }
        match first_err {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::io::Write;

    use super::*;

    /// A read of an empty pipe stays in flight until the pipe is written. When the wait
    /// fails and so does the drain, the kernel may still write into the buffers: the caller
    /// must not get them back, and the ring must refuse further batches.
    #[test]
    fn abandoned_batch_keeps_its_buffers_from_the_caller() {
        let (rx, mut tx) = std::io::pipe().unwrap();
        let mut ring = Ring::new().unwrap();
        ring.register(&[rx.as_raw_fd()]).unwrap();
        ring.fail_next_waits(2);
        let mut bufs = vec![vec![0u8; 64]];
        assert!(ring.read_registered(&mut bufs).is_err());
        assert!(
            bufs.is_empty(),
            "the caller got back a buffer with a read still in flight into it"
        );
        // The late read lands in memory nobody else owns.
        tx.write_all(b"late").unwrap();
        let mut again = vec![vec![0u8; 64]];
        assert!(
            ring.read_registered(&mut again).is_err(),
            "an abandoned ring reads again"
        );
        assert_eq!(
            again,
            vec![vec![0u8; 64]],
            "a refused batch leaves its buffers alone"
        );
    }

    /// The same for the commit probe's write: the ring keeps its copy of the data and its
    /// duplicate of the fd when reaping fails, and refuses further writes.
    #[test]
    fn abandoned_write_is_refused_afterwards() {
        let file = tempfile::tempfile().unwrap();
        let mut ring = Ring::new().unwrap();
        ring.write_then_fdatasync(&file, b"first", 0).unwrap();
        ring.fail_next_waits(2);
        let err = ring.write_then_fdatasync(&file, b"second", 0).unwrap_err();
        assert!(matches!(err, RingError::Abandoned { .. }), "{err}");
        assert!(
            ring.write_buf.is_empty(),
            "the data copy was not leaked with the ring"
        );
        let err = ring.write_then_fdatasync(&file, b"third", 0).unwrap_err();
        assert!(matches!(err, RingError::Unusable), "{err}");
    }
}
