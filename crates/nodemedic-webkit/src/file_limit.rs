//! The process's open-file limit, raised once at start and shared out: a reserve for
//! everything that is neither a client connection nor a kept-open file (logs, the probes,
//! the web configuration, files read once), a quarter of the rest for client connections,
//! and what is left for the files the read layer keeps open.
//!
//! systemd starts services with a soft limit of 1024 and a hard one of 524288; a 256-CPU
//! node with 500 pods needs a few thousand kept-open files.

/// File descriptors kept free for everything that is neither a client connection nor a
/// kept-open file.
pub const FD_RESERVE: u64 = 256;

/// `RLIMIT_NOFILE` after the raise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileLimit {
    pub soft: u64,
    pub hard: u64,
}

impl FileLimit {
    /// Raises the soft `RLIMIT_NOFILE` to the hard limit, once for the whole process, before
    /// anything that opens files is built. When it cannot, warns and keeps the limit as it
    /// is (1024 when even that cannot be read).
    pub fn raise() -> FileLimit {
        let (soft, hard) = rlimit::Resource::NOFILE.get().unwrap_or((1024, 1024));
        match rlimit::increase_nofile_limit(hard) {
            Ok(soft) => FileLimit { soft, hard },
            Err(e) => {
                tracing::warn!(error = %e, soft, hard, "cannot raise RLIMIT_NOFILE");
                FileLimit { soft, hard }
            }
        }
    }

    /// Client connections' share: a quarter of what is left after the reserve, so that
    /// connections can never take the collectors' fds.
    pub fn connections(&self) -> u64 {
        self.soft.saturating_sub(FD_RESERVE) / 4
    }

    /// The read layer's share for kept-open files: what the reserve and the connections'
    /// share leave.
    pub fn kept_open_files(&self) -> u64 {
        self.soft.saturating_sub(FD_RESERVE) - self.connections()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(soft: u64) -> FileLimit {
        FileLimit { soft, hard: soft }
    }

    #[test]
    fn the_reserve_and_the_shares_add_up_to_the_limit() {
        // systemd's LimitNOFILE=1024: 256 kept free, 192 connections, 576 kept-open files.
        assert_eq!(limit(1024).connections(), 192);
        assert_eq!(limit(1024).kept_open_files(), 576);
        // The shares never overlap: together with the reserve they are the limit, no more.
        for soft in [256, 257, 259, 260, 1025, 524_288, 1 << 40] {
            let l = limit(soft);
            assert_eq!(
                FD_RESERVE + l.connections() + l.kept_open_files(),
                soft,
                "{soft}"
            );
            assert!(l.kept_open_files() >= 3 * l.connections(), "{soft}");
        }
    }

    #[test]
    fn below_the_reserve_nothing_is_shared() {
        assert_eq!(limit(100).connections(), 0);
        assert_eq!(limit(100).kept_open_files(), 0);
    }
}
