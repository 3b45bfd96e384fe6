use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// A child process that cannot outlive its test: dropping it kills it (SIGKILL) and reaps it,
/// whatever happened in the test.
pub struct ChildGuard {
    child: Child,
}

impl ChildGuard {
    pub fn new(child: Child) -> Self {
        Self { child }
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// `Some(status)` if the process has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Waits up to `limit` for the process to exit (after a signal the test sent, say);
    /// `None` if it is still running then.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            if start.elapsed() >= limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if self.exited().is_none() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn dropping_the_guard_kills_and_reaps_the_child() {
        let mut guard = ChildGuard::new(
            Command::new("sleep")
                .arg("600")
                .spawn()
                .expect("spawning sleep"),
        );
        let pid = guard.id();
        assert!(guard.wait_exit(Duration::from_millis(50)).is_none());
        drop(guard);
        // Reaped: the pid names no process, not even a zombie.
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    fn wait_exit_sees_an_exit() {
        let mut guard = ChildGuard::new(Command::new("true").spawn().expect("spawning true"));
        let status = guard.wait_exit(Duration::from_secs(10));
        assert!(status.is_some_and(|s| s.success()), "{status:?}");
    }
}
