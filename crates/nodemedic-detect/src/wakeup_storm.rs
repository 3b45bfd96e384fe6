//! Wakeup storm: perf-event records that wake their reader nearly one for one, many times a
//! second. Each wakeup is an irq_work interrupt plus a reader's context switch; an eBPF agent
//! that ships events through per-CPU perf buffers with `wakeup_events=1` pays that per event
//! and can cost a busy node a third of its throughput. The fix is on the agent's side, so the
//! finding names the owning process and says what to change.

use nodemedic_sample::perf::PerfProbes;
use serde::{Deserialize, Serialize};

use crate::finding::{Finding, Severity};
use crate::hysteresis::{ratio, ConfigError, Hysteresis, Latch};
use nodemedic_sample::perf::PerfRates;
use nodemedic_sample::Snapshot;

/// The verdict this detector produces (a type of the sample, shared with the outputs).
pub use nodemedic_sample::verdict::StormVerdict;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WakeupStormConfig {
    /// Node-wide perf-event wakeups per second at or above which a storm is possible.
    pub min_wakeups_per_sec: f64,
    /// Wakeups per output at or above which records wake their reader too often (a reader
    /// batching with a watermark or `wakeup_events` > 1 stays far below).
    pub min_wakeup_ratio: f64,
    pub raise_after: u32,
    pub clear_after: u32,
}

impl Default for WakeupStormConfig {
    fn default() -> Self {
        Self {
            min_wakeups_per_sec: 5000.0,
            min_wakeup_ratio: 0.5,
            raise_after: 3,
            clear_after: 3,
        }
    }
}

impl WakeupStormConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.min_wakeups_per_sec.is_finite() && self.min_wakeups_per_sec > 0.0) {
            return Err(ConfigError::Below {
                field: "min_wakeups_per_sec",
                min: f64::MIN_POSITIVE,
                value: self.min_wakeups_per_sec,
            });
        }
        ratio("min_wakeup_ratio", self.min_wakeup_ratio)?;
        Hysteresis {
            raise_after: self.raise_after,
            clear_after: self.clear_after,
        }
        .validate()
    }
}

#[derive(Debug, Default)]
pub struct WakeupStormDetector {
    config: WakeupStormConfig,
    latch: Latch,
}

impl WakeupStormDetector {
    pub fn new(config: WakeupStormConfig) -> Self {
        Self {
            config,
            latch: Latch::default(),
        }
    }

    /// Feeds one snapshot. `None` while the probes give no rates (down, or first sample).
    pub fn observe(&mut self, snapshot: &Snapshot) -> Option<StormVerdict> {
        let rates = snapshot.get::<PerfProbes>()?.rates.as_ref()?;
        let observed = rates.wakeups_per_second >= self.config.min_wakeups_per_sec
            && rates.wakeup_ratio >= self.config.min_wakeup_ratio;
        let h = Hysteresis {
            raise_after: self.config.raise_after,
            clear_after: self.config.clear_after,
        };
        let changed = self.latch.update(observed, &h, snapshot.timestamp);
        Some(StormVerdict {
            storming: self.latch.active,
            changed,
            observed,
            wakeups_per_second: rates.wakeups_per_second,
            wakeup_ratio: rates.wakeup_ratio,
            top_owner: top_owner(rates),
        })
    }
}

fn top_owner(rates: &PerfRates) -> Option<(u32, String, f64, f64)> {
    rates
        .owners
        .iter()
        .max_by(|a, b| a.wakeups_per_second.total_cmp(&b.wakeups_per_second))
        .filter(|o| o.wakeups_per_second > 0.0)
        .map(|o| {
            (
                o.pid,
                o.comm.clone(),
                o.wakeups_per_second,
                o.outputs_per_second,
            )
        })
}

/// The finding for an active storm.
pub fn finding(v: &StormVerdict) -> Option<Finding> {
    if !v.storming {
        return None;
    }
    let (subject, who) = match &v.top_owner {
        Some((pid, comm, w, o)) => (
            format!("{comm} (pid {pid})"),
            format!(
                "{comm} (pid {pid}) owns the busiest events: {w:.0} wakeups/s for {o:.0} outputs/s. "
            ),
        ),
        None => ("node".to_owned(), String::new()),
    };
    Some(Finding {
        kind: crate::FindingKind::PerfWakeupStorm,
        severity: Severity::Warning,
        subject,
        message: format!(
            "perf-event wakeup storm: {:.0} wakeups/s, {:.0}% of perf-event outputs wake their reader. \
             {who}Each wakeup is an interrupt and a reader context switch. Fix it in that process: \
             move it from perf buffers to a BPF ring buffer (with batched or no wakeups), or raise \
             its perf events' wakeup_events / watermark so one wakeup carries many records, or pin \
             its readers to CPUs away from the hot path.",
            v.wakeups_per_second,
            v.wakeup_ratio * 100.0
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodemedic_sample::perf::{PerfOwnerRate, PerfProbes};

    fn snap(t: f64, wakeups: f64, ratio: f64) -> Snapshot {
        let mut snap = Snapshot {
            timestamp: t,
            ..Snapshot::default()
        };
        snap.put(PerfProbes {
            rates: Some(PerfRates {
                interval_seconds: 5.0,
                outputs_per_second: if ratio > 0.0 { wakeups / ratio } else { 0.0 },
                wakeups_per_second: wakeups,
                wakeup_ratio: ratio,
                owners: vec![
                    PerfOwnerRate {
                        pid: 10,
                        comm: "quiet".into(),
                        outputs_per_second: 5.0,
                        wakeups_per_second: 1.0,
                    },
                    PerfOwnerRate {
                        pid: 4242,
                        comm: "agent".into(),
                        outputs_per_second: wakeups / ratio.max(0.01),
                        wakeups_per_second: wakeups,
                    },
                ],
            }),
            ..PerfProbes::default()
        });
        snap
    }

    #[test]
    fn raises_after_consecutive_samples_and_names_the_owner() {
        let mut d = WakeupStormDetector::new(WakeupStormConfig::default());
        let v1 = d.observe(&snap(1.0, 63000.0, 0.7)).unwrap();
        assert!(v1.observed && !v1.storming);
        d.observe(&snap(2.0, 63000.0, 0.7));
        let v3 = d.observe(&snap(3.0, 63000.0, 0.7)).unwrap();
        assert!(v3.storming && v3.changed);
        let f = finding(&v3).unwrap();
        assert_eq!(f.subject, "agent (pid 4242)");
        assert!(
            f.message.contains("ring buffer") && f.message.contains("wakeup_events"),
            "{}",
            f.message
        );
        assert!(f.message.contains("70%"), "{}", f.message);
    }

    #[test]
    fn both_thresholds_needed_and_hysteresis_holds() {
        let mut d = WakeupStormDetector::new(WakeupStormConfig::default());
        // Many wakeups but batched (ratio 0.01): healthy.
        for t in 0..5 {
            assert!(!d.observe(&snap(t as f64, 60000.0, 0.01)).unwrap().storming);
        }
        // One-to-one but few: healthy.
        for t in 5..10 {
            assert!(!d.observe(&snap(t as f64, 100.0, 1.0)).unwrap().storming);
        }
        // Flapping never raises.
        for t in 10..30 {
            let w = if t % 2 == 0 { 60000.0 } else { 10.0 };
            assert!(!d.observe(&snap(t as f64, w, 0.9)).unwrap().storming);
        }
        for t in 30..33 {
            d.observe(&snap(t as f64, 60000.0, 0.9));
        }
        assert!(d.latch.active);
        // Two quiet samples are not enough to clear.
        d.observe(&snap(33.0, 10.0, 0.9));
        assert!(d.observe(&snap(34.0, 10.0, 0.9)).unwrap().storming);
        assert!(d.observe(&snap(35.0, 10.0, 0.9)).unwrap().changed);
        assert!(!d.latch.active);
    }

    #[test]
    fn no_rates_no_verdict() {
        let mut d = WakeupStormDetector::new(WakeupStormConfig::default());
        assert!(d.observe(&Snapshot::default()).is_none());
        let mut down = Snapshot::default();
        down.put(PerfProbes::default());
        assert!(d.observe(&down).is_none());
    }

    #[test]
    fn config_validation() {
        assert!(WakeupStormConfig::default().validate().is_ok());
        let bad = WakeupStormConfig {
            min_wakeup_ratio: 1.5,
            ..Default::default()
        };
        assert!(bad
            .validate()
            .unwrap_err()
            .to_string()
            .contains("min_wakeup_ratio"));
        let bad = WakeupStormConfig {
            raise_after: 0,
            ..Default::default()
        };
        assert!(bad.validate().is_err());
    }
}
