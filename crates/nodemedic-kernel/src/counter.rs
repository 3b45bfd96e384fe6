//! Kernel counters are narrower than they look: `/proc/interrupts` and `/proc/softirqs` print
//! each per-CPU count with `%10u` (an `unsigned int`), and `softnet_stat` with `%08x`, so they
//! wrap at 2^32. At a million interrupts a second a queue wraps about every 71 minutes.
//!
//! [`delta`] is the one place nodemedic turns two readings into an increase: the collapse
//! detector and `check` both use it. `nodemedic_collect::widen::Widener` turns the narrow readings of every sample into
//! 64-bit counts that nodemedic accumulates itself, so the exported `_total` counters never go
//! backwards while the daemon runs (node_exporter exports the kernel's narrow values as they
//! are, and a wrap there looks like a counter reset to Prometheus).

/// Half of the 32-bit range: a backwards step shorter than this is a wrap, a longer one a reset.
/// A wrap is only mistaken for a reset if a counter moved by more than 2^31 between two samples
/// (over 35 minutes at a million a second); a reset is only mistaken for a wrap if the old count
/// was within 2^31 of the top.
const HALF_U32: u64 = 1 << 31;

/// The increase of a counter from `before` to `now`, or `None` when it was reset.
///
/// Values that both fit in 32 bits are taken to come from a 32-bit kernel counter (the
/// kernel's `%u` fields): a step backwards by less than half the range is a wrap. A value
/// beyond 32 bits comes from a 64-bit counter, where a step backwards is a reset.
pub fn delta(before: u64, now: u64) -> Option<u64> {
    if now >= before {
        return Some(now - before);
    }
    if before > u64::from(u32::MAX) {
        return None;
    }
    let wrapped = (1u64 << 32) - before + now;
    (wrapped <= HALF_U32).then_some(wrapped)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOP: u64 = u32::MAX as u64;

    #[test]
    fn delta_across_a_32_bit_wrap_is_the_distance_travelled() {
        assert_eq!(delta(TOP - 9, 20), Some(30));
        assert_eq!(delta(TOP, 0), Some(1));
        assert_eq!(delta(5, 5), Some(0));
        assert_eq!(delta(5, 12), Some(7));
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(64))]

        /// A 32-bit counter that moved forward by less than half the range, wrapping or not,
        /// is read as exactly that step.
        #[test]
        fn delta_of_a_32_bit_step_is_the_step(before in 0..=TOP, step in 0..=HALF_U32) {
            let now = (before + step) % (TOP + 1);
            proptest::prop_assert_eq!(delta(before, now), Some(step));
        }

        /// A 64-bit counter never wraps: forward is the difference, backward a reset.
        #[test]
        fn delta_of_a_64_bit_counter(before in (TOP + 1)..u64::MAX, now in proptest::prelude::any::<u64>()) {
            let want = now.checked_sub(before);
            proptest::prop_assert_eq!(delta(before, now), want);
        }
    }

    #[test]
    fn a_long_step_backwards_is_a_reset_not_a_wrap() {
        // An IRQ number reused by a new device starts again from a small count.
        assert_eq!(delta(1_000_000, 3), None);
        // 64-bit counters do not wrap in practice: backwards is a reset.
        assert_eq!(delta(TOP + 10, 5), None);
        assert_eq!(delta(TOP + 10, TOP + 9), None);
    }
}
