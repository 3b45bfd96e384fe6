//! One test at a time on this machine may move its real IRQs.

use std::fs::File;

/// Held while a test writes `/proc/irq/*/smp_affinity` and until it has put the masks back:
/// an exclusive `flock` on `/tmp/nodemedic-real-irqs.lock`, which every such test takes, in any
/// test binary and any checkout. Two test runs on one machine (a developer's `cargo test` beside
/// CI) otherwise undo each other's pinning: one test's restore spread the IRQs that the other
/// had just collapsed, and its assertion that nothing but nodemedic moves them failed. The
/// kernel drops the lock with the file, also when the test process dies.
pub struct RealIrqsLock(#[allow(dead_code)] File);

impl RealIrqsLock {
    /// Waits for the lock.
    pub fn take() -> Self {
        let f = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open("/tmp/nodemedic-real-irqs.lock")
            .expect("opening /tmp/nodemedic-real-irqs.lock");
        rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive)
            .expect("flock of /tmp/nodemedic-real-irqs.lock");
        Self(f)
    }
}
