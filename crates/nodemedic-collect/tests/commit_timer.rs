//! The disk commit latency timer on a real directory: it writes and fdatasyncs, stays within its byte
//! bound, fills the histogram, falls back to plain syscalls without io_uring, and removes its
//! file when stopped. No timings are asserted, only that commits happened and were counted.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nodemedic_collect::commit_timer::{CommitBackend, CommitLatency};
use nodemedic_collect::{CommitTimer, CommitTimerConfig};
use nodemedic_testkit::poll_until;

/// The sysctl test turns io_uring off for the whole machine: no other test here may set up
/// a ring meanwhile.
static URING: Mutex<()> = Mutex::new(());
fn uring_lock() -> MutexGuard<'static, ()> {
    URING.lock().unwrap_or_else(|p| p.into_inner())
}

fn config(dir: &Path, io_uring: bool) -> CommitTimerConfig {
    CommitTimerConfig {
        directory: dir.to_path_buf(),
        interval: Duration::from_millis(20),
        block_bytes: 2300,
        max_file_bytes: 3 * 2300,
        io_uring,
    }
}

/// Waits (up to a minute: the disk may be busy) until the timer has `n` commits.
fn wait_for(timer: &CommitTimer, n: u64) -> CommitLatency {
    let deadline = Instant::now() + Duration::from_secs(60);
    poll_until(deadline, &format!("{n} commits"), || {
        let l = timer.latest();
        if l.count >= n {
            Ok(l)
        } else {
            Err(format!("{l:?}"))
        }
    })
}

fn check_histogram(l: &CommitLatency) {
    assert!(l.buckets.windows(2).all(|w| w[0] <= w[1]), "{l:?}");
    assert!(l.buckets[13] <= l.count);
    assert!(l.sum_seconds > 0.0);
    assert_eq!(l.errors, 0, "{:?}", l.last_error);
}

#[test]
fn timer_commits_within_its_bound_and_cleans_up() {
    let _g = uring_lock();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let timer = CommitTimer::start(&config(dir.path(), true)).unwrap();
    let path = timer.path().to_path_buf();
    assert!(path.starts_with(dir.path()));
    let l = wait_for(&timer, 6);
    assert!(l.count >= 6, "{l:?}");
    assert_eq!(l.backend, CommitBackend::IoUring);
    assert_eq!(l.directory, dir.path().display().to_string());
    check_histogram(&l);
    // Six commits of 2,300 bytes into a file bounded at three blocks: it wrapped around.
    let len = std::fs::metadata(&path).unwrap().len();
    assert_eq!(len, 3 * 2300);
    let data = std::fs::read(&path).unwrap();
    assert_eq!(data[1], 1, "the block's pattern was written");
    drop(timer);
    assert!(!path.exists(), "the timer removes its file");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn timer_without_io_uring_uses_write_and_fdatasync() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let timer = CommitTimer::start(&config(dir.path(), false)).unwrap();
    let l = wait_for(&timer, 3);
    assert!(l.count >= 3, "{l:?}");
    assert_eq!(l.backend, CommitBackend::Syscalls);
    assert_eq!(l.fallback_reason, None, "syscalls were asked for");
    check_histogram(&l);
}

#[test]
fn timer_falls_back_when_the_sysctl_disables_io_uring() {
    let _g = uring_lock();
    const SYSCTL: &str = "/proc/sys/kernel/io_uring_disabled";
    let old = std::fs::read_to_string(SYSCTL).unwrap();
    struct Restore(String);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = std::fs::write(SYSCTL, self.0.trim());
        }
    }
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let timer = {
        let _restore = Restore(old);
        std::fs::write(SYSCTL, "2").expect("writing kernel.io_uring_disabled (needs root)");
        CommitTimer::start(&config(dir.path(), true)).unwrap()
    };
    let l = wait_for(&timer, 2);
    assert_eq!(l.backend, CommitBackend::Syscalls);
    assert!(
        l.fallback_reason
            .as_deref()
            .is_some_and(|r| r.contains("kernel.io_uring_disabled = 2")),
        "the reason is kept for /status: {l:?}"
    );
    assert!(l.count >= 2, "{l:?}");
}

#[test]
fn unwritable_directory_is_a_clear_error() {
    let err = match CommitTimer::start(&config(Path::new("/proc/nodemedic-no-such-dir"), true)) {
        Ok(_) => panic!("started in a directory that does not exist"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("/proc/nodemedic-no-such-dir"), "{err}");
}
