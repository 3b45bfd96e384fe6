//! Back-off between attempts at an API that does not answer.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

/// Exponential back-off with jitter: 1 s, doubling, at most 30 s (up to twice that with the
/// jitter); back to the start after a success. What the log says during an outage follows it: a minute without the API is a
/// handful of lines, not one per second.
#[derive(Debug)]
pub struct Retry {
    builder: ExponentialBuilder,
    delays: ExponentialBackoff,
}

/// The first delay.
pub const FIRST: Duration = Duration::from_secs(1);
/// The longest delay before jitter: an API back from an outage is used again within a minute.
pub const MAX: Duration = Duration::from_secs(30);

impl Default for Retry {
    fn default() -> Self {
        let builder = ExponentialBuilder::new()
            .with_min_delay(FIRST)
            .with_max_delay(MAX)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times();
        Self {
            delays: builder.build(),
            builder,
        }
    }
}

impl Retry {
    /// The wait before the next attempt, after a failure.
    pub fn next_delay(&mut self) -> Duration {
        self.delays.next().unwrap_or(MAX)
    }

    /// A success: the next failure waits [`FIRST`] again.
    pub fn reset(&mut self) {
        self.delays = self.builder.build();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_to_the_cap_and_start_over_after_a_success() {
        let mut r = Retry::default();
        let delays: Vec<Duration> = (0..10).map(|_| r.next_delay()).collect();
        for (i, d) in delays.iter().enumerate() {
            let base = (FIRST * 2u32.pow(i as u32)).min(MAX);
            // Jitter adds up to one more delay, and never passes the cap by more than that.
            assert!(
                *d >= base && *d <= base * 2,
                "delay {i}: {d:?} (base {base:?})"
            );
        }
        let outage = Duration::from_secs(60);
        let mut waited = Duration::ZERO;
        let mut attempts = 0;
        let mut r = Retry::default();
        while waited < outage {
            waited += r.next_delay();
            attempts += 1;
        }
        assert!(attempts <= 6, "{attempts} attempts in a minute's outage");
        r.reset();
        assert!(r.next_delay() < FIRST * 2);
    }
}
