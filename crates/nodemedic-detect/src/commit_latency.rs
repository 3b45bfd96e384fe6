//! Slow disk commits: the commit probe's p99 over a window above a threshold, with
//! hysteresis. etcd's guidance is a WAL fsync p99 under 10 ms; past it, requests time out and
//! leaders change.

use std::collections::VecDeque;
use std::time::Duration;

use nodemedic_collect::commit_timer::{CommitLatency, WAL_FSYNC_BUCKETS};
use nodemedic_sample::Snapshot;
use serde::{Deserialize, Serialize};

use crate::{Finding, Hysteresis, Latch, Severity};

/// The verdict this detector produces (a type of the sample, shared with the outputs).
pub use nodemedic_sample::verdict::CommitVerdict;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CommitLatencyConfig {
    /// p99 above this is slow.
    #[serde(with = "humantime_serde")]
    pub p99_threshold: Duration,
    /// The p99 is taken over the commits of this window.
    #[serde(with = "humantime_serde")]
    pub window: Duration,
    /// Fewer commits than this in the window: no verdict either way.
    pub min_commits: u64,
    pub raise_after: u32,
    pub clear_after: u32,
}

impl Default for CommitLatencyConfig {
    fn default() -> Self {
        Self {
            p99_threshold: Duration::from_millis(10),
            window: Duration::from_secs(300),
            min_commits: 20,
            raise_after: 2,
            clear_after: 2,
        }
    }
}

#[derive(Debug, Default)]
pub struct CommitLatencyDetector {
    config: CommitLatencyConfig,
    history: VecDeque<(Duration, CommitLatency)>,
    latch: Latch,
}

impl CommitLatencyDetector {
    pub fn new(config: CommitLatencyConfig) -> Self {
        Self {
            config,
            ..Self::default()
        }
    }

    /// `None` when the snapshot has no probe data.
    pub fn observe(&mut self, snap: &Snapshot) -> Option<CommitVerdict> {
        let now = snap.get::<CommitLatency>()?;
        // Keep the newest sample at least `window` old as the window's start.
        self.history.push_back((snap.at, now.clone()));
        while self.history.len() > 2
            && self
                .history
                .get(1)
                .is_some_and(|(at, _)| snap.at.saturating_sub(*at) >= self.config.window)
        {
            self.history.pop_front();
        }
        let (_, start) = self.history.front()?;
        let mut delta = [0u64; 14];
        for (i, d) in delta.iter_mut().enumerate() {
            *d = now.buckets[i].saturating_sub(start.buckets[i]);
        }
        let commits = now.count.saturating_sub(start.count);
        let p99 = if commits >= self.config.min_commits.max(1) {
            Some(quantile(0.99, &delta, commits))
        } else {
            None
        };
        let h = Hysteresis {
            raise_after: self.config.raise_after,
            clear_after: self.config.clear_after,
        };
        let observed = match p99 {
            Some(p) => p > self.config.p99_threshold.as_secs_f64(),
            // Too few commits to judge: keep the verdict as it is.
            None => self.latch.active,
        };
        let changed = self.latch.update(observed, &h, snap.timestamp);
        Some(CommitVerdict {
            directory: now.directory.clone(),
            commits,
            p99_seconds: p99,
            slow: self.latch.active,
            changed,
        })
    }

    pub fn config(&self) -> &CommitLatencyConfig {
        &self.config
    }
}

/// The `q` quantile of a cumulative histogram over [`WAL_FSYNC_BUCKETS`] with `count`
/// observations (those above the last bound are in `count` only), interpolated linearly
/// within the bucket like `histogram_quantile`. Past the last bound it answers the last bound.
pub fn quantile(q: f64, cumulative: &[u64; 14], count: u64) -> f64 {
    let rank = q * count as f64;
    let mut prev_bound = 0.0;
    let mut prev_count = 0u64;
    for (bound, &c) in WAL_FSYNC_BUCKETS.iter().zip(cumulative.iter()) {
        if c as f64 >= rank {
            let in_bucket = c.saturating_sub(prev_count) as f64;
            if in_bucket == 0.0 {
                return *bound;
            }
            return prev_bound + (bound - prev_bound) * (rank - prev_count as f64) / in_bucket;
        }
        prev_bound = *bound;
        prev_count = c;
    }
    WAL_FSYNC_BUCKETS[13]
}

/// A finding while commits are slow.
pub fn findings(verdict: Option<&CommitVerdict>, config: &CommitLatencyConfig) -> Vec<Finding> {
    let Some(v) = verdict.filter(|v| v.slow) else {
        return Vec::new();
    };
    let p99 = v
        .p99_seconds
        .map(|p| format!("{:.1} ms", p * 1000.0))
        .unwrap_or_else(|| "unknown (too few recent commits)".into());
    vec![Finding {
        kind: crate::FindingKind::DiskCommitSlow,
        severity: Severity::Warning,
        subject: v.directory.clone(),
        message: format!(
            "write + fdatasync of a 2,300-byte block in {} has p99 {p99} over the last {} \
             ({} commits), above {} ms: etcd on this disk will time out requests and lose \
             leaders. Move etcd's data dir to a dedicated low-latency disk, or find what else \
             writes to it (iostat -x, /proc/pressure/io)",
            v.directory,
            humantime::format_duration(config.window),
            v.commits,
            config.p99_threshold.as_millis(),
        ),
    }]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(at: u64, latency: &CommitLatency) -> Snapshot {
        let mut snap = Snapshot {
            at: Duration::from_secs(at),
            timestamp: at as f64,
            ..Snapshot::default()
        };
        snap.put(latency.clone());
        snap
    }

    #[test]
    fn quantile_interpolates_within_the_bucket() {
        let mut h = CommitLatency::default();
        for _ in 0..99 {
            h.observe(0.0005);
        }
        h.observe(0.5);
        // 99 of 100 in the first bucket: p99 is its upper bound.
        assert_eq!(quantile(0.99, &h.buckets, h.count), 0.001);
        // p99.5 lands halfway through (0.256, 0.512].
        let p = quantile(0.995, &h.buckets, h.count);
        assert!((p - 0.384).abs() < 1e-9, "{p}");
        let mut slow = CommitLatency::default();
        slow.observe(20.0);
        assert_eq!(quantile(0.99, &slow.buckets, slow.count), 8.192);
    }

    #[test]
    fn slow_commits_raise_after_hysteresis_and_clear_when_fast_again() {
        let cfg = CommitLatencyConfig {
            window: Duration::from_secs(10),
            min_commits: 5,
            ..CommitLatencyConfig::default()
        };
        let mut d = CommitLatencyDetector::new(cfg.clone());
        let mut h = CommitLatency {
            directory: "/var/lib/etcd".into(),
            ..CommitLatency::default()
        };
        // Fast commits (0.5 ms).
        for t in 0..5 {
            for _ in 0..5 {
                h.observe(0.0005);
            }
            let v = d.observe(&snap(t, &h)).unwrap();
            assert!(!v.slow);
        }
        // 30 ms commits: the first slow sample does not raise (raise_after = 2).
        let mut raised_at = None;
        for t in 5..40 {
            for _ in 0..5 {
                h.observe(0.030);
            }
            let v = d.observe(&snap(t, &h)).unwrap();
            if v.slow && raised_at.is_none() {
                raised_at = Some(t);
                assert!(v.changed);
                let f = findings(Some(&v), &cfg);
                assert_eq!(f.len(), 1);
                assert_eq!(f[0].kind, crate::FindingKind::DiskCommitSlow);
                assert!(f[0].message.contains("/var/lib/etcd"), "{}", f[0].message);
            }
        }
        let raised_at = raised_at.expect("never raised");
        assert!(raised_at >= 6, "raised at {raised_at}");
        // Fast again: once the window holds only fast commits, it clears.
        let mut cleared = false;
        for t in 40..80 {
            for _ in 0..5 {
                h.observe(0.0005);
            }
            let v = d.observe(&snap(t, &h)).unwrap();
            cleared |= !v.slow;
        }
        assert!(cleared);
        assert!(findings(d.observe(&snap(80, &h)).as_ref(), &cfg).is_empty());
    }

    #[test]
    fn too_few_commits_give_no_p99() {
        let mut d = CommitLatencyDetector::new(CommitLatencyConfig::default());
        let mut h = CommitLatency::default();
        h.observe(1.0);
        let v = d.observe(&snap(0, &h)).unwrap();
        assert_eq!(v.p99_seconds, None);
        assert!(!v.slow);
        assert!(d.observe(&Snapshot::default()).is_none());
    }
}
