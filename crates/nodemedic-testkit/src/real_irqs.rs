//! One test at a time on this machine may move its real IRQs, and what it moved is put back even
//! when the test process dies.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

const LOCK: &str = "/tmp/nodemedic-real-irqs.lock";
/// Where [`RealIrqs::save`] writes the masks it read. On tmpfs: gone at a reboot, which resets
/// the masks anyway.
pub const JOURNAL: &str = "/run/nodemedic-real-irqs.saved";

fn smp_affinity(irq: u32) -> PathBuf {
    PathBuf::from(format!("/proc/irq/{irq}/smp_affinity"))
}

/// Held while a test writes `/proc/irq/*/smp_affinity`, until it has put the masks back.
///
/// - **One at a time:** an exclusive `flock` on `/tmp/nodemedic-real-irqs.lock`, which every
///   such test takes, in any test binary and any checkout, before it reads a mask. Two test runs
///   on one machine (a developer's `cargo test` beside CI) otherwise undo each other's pinning:
///   one test's restore spread the IRQs that the other had just collapsed.
/// - **Put back:** [`RealIrqs::save`] writes the masks it read to `/run/nodemedic-real-irqs.saved`
///   before the test changes them; dropping the guard writes them back and removes the file. A
///   test killed before that (a timeout, SIGKILL) leaves the file, and the next
///   [`RealIrqs::lock`] puts those masks back first. Without it a killed test left this
///   machine's virtio IRQs on CPU 0; the next test saved that as the original, and a later CI's
///   daemon on this node rightly reported a collapse that no test had made.
pub struct RealIrqs {
    saved: BTreeMap<u32, String>,
    _lock: File,
}

impl RealIrqs {
    /// Waits for the lock, then puts back what a test that died while holding it had moved.
    pub fn lock() -> Self {
        let f = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(LOCK)
            .unwrap_or_else(|e| panic!("opening {LOCK}: {e}"));
        rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive)
            .unwrap_or_else(|e| panic!("flock of {LOCK}: {e}"));
        if let Ok(text) = std::fs::read_to_string(JOURNAL) {
            let left = parse_journal(&text);
            eprintln!(
                "{JOURNAL}: a test that moved real IRQs died before putting them back; restoring {} masks",
                left.len()
            );
            restore(&left);
            let _ = std::fs::remove_file(JOURNAL);
        }
        Self {
            saved: BTreeMap::new(),
            _lock: f,
        }
    }

    /// Whether the kernel lets us set this IRQ's affinity (kernel-managed IRQs refuse; so does a
    /// non-root user). Writes the IRQ's current mask back, which changes nothing, under the lock.
    pub fn writable(&self, irq: u32) -> bool {
        let path = smp_affinity(irq);
        let Ok(mask) = std::fs::read_to_string(&path) else {
            return false;
        };
        std::fs::write(&path, mask.trim()).is_ok()
    }

    /// The current `smp_affinity` of IRQ, trimmed.
    pub fn mask(irq: u32) -> String {
        std::fs::read_to_string(smp_affinity(irq))
            .unwrap_or_else(|e| panic!("reading {}: {e}", smp_affinity(irq).display()))
            .trim()
            .to_string()
    }

    /// Writes MASK to the `smp_affinity` of each of IRQS, every one of which must have been
    /// saved first (so that it is put back).
    pub fn pin(&self, irqs: impl IntoIterator<Item = u32>, mask: &str) {
        for irq in irqs {
            assert!(
                self.saved.contains_key(&irq),
                "IRQ {irq} is pinned without its mask saved first (RealIrqs::save)"
            );
            std::fs::write(smp_affinity(irq), mask).unwrap_or_else(|e| {
                panic!("writing {}: {e} (needs root)", smp_affinity(irq).display())
            });
        }
    }

    /// Records the current masks of IRQS, on disk before the caller changes any of them, so that
    /// they are put back when the guard drops or, if this process dies first, at the next lock.
    pub fn save(&mut self, irqs: impl IntoIterator<Item = u32>) {
        for irq in irqs {
            self.saved.entry(irq).or_insert_with(|| Self::mask(irq));
        }
        let text: String = self
            .saved
            .iter()
            .map(|(irq, mask)| format!("{irq} {mask}\n"))
            .collect();
        write_atomically(Path::new(JOURNAL), &text);
    }
}

impl Drop for RealIrqs {
    fn drop(&mut self) {
        restore(&self.saved);
        let _ = std::fs::remove_file(JOURNAL);
    }
}

fn restore(saved: &BTreeMap<u32, String>) {
    for (irq, mask) in saved {
        // An IRQ that went away (a device unplugged) has nothing to put back.
        let _ = std::fs::write(smp_affinity(*irq), mask);
    }
}

fn parse_journal(text: &str) -> BTreeMap<u32, String> {
    text.lines()
        .filter_map(|l| {
            let (irq, mask) = l.split_once(' ')?;
            Some((irq.parse().ok()?, mask.trim().to_string()))
        })
        .collect()
}

fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap_or_else(|e| panic!("writing {}: {e}", tmp.display()));
    std::fs::rename(&tmp, path).unwrap_or_else(|e| panic!("renaming to {}: {e}", path.display()));
}

#[cfg(test)]
mod tests {
    use super::parse_journal;

    #[test]
    fn journal_round_trip() {
        let j = parse_journal("29 3\n38 00000001\nbad\n41\n");
        assert_eq!(
            j.into_iter().collect::<Vec<_>>(),
            vec![(29, "3".to_string()), (38, "00000001".to_string())]
        );
    }
}
