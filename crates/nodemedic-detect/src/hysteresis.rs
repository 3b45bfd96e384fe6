use serde::Serialize;

/// How many consecutive samples a condition must hold before a verdict turns on, and how many
/// it must be absent before it turns off. A signal that flips every sample never changes the
/// verdict when both are at least 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Hysteresis {
    pub raise_after: u32,
    pub clear_after: u32,
}

impl Default for Hysteresis {
    fn default() -> Self {
        Self {
            raise_after: 3,
            clear_after: 3,
        }
    }
}

/// A detector setting out of range; the message names the setting.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("{field} must be a ratio in (0, 1], got {value}")]
    Ratio { field: &'static str, value: f64 },
    #[error("{field} must be a finite number >= {min}, got {value}")]
    Below {
        field: &'static str,
        min: f64,
        value: f64,
    },
    #[error("{field} must be at least {min}, got {value}")]
    TooSmall {
        field: &'static str,
        min: u64,
        value: u64,
    },
    #[error("raise_after and clear_after must be at least 1")]
    Hysteresis,
}

impl Hysteresis {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.raise_after < 1 || self.clear_after < 1 {
            return Err(ConfigError::Hysteresis);
        }
        Ok(())
    }
}

/// `value` as a ratio in (0, 1].
pub fn ratio(field: &'static str, value: f64) -> Result<(), ConfigError> {
    if value > 0.0 && value <= 1.0 {
        Ok(())
    } else {
        Err(ConfigError::Ratio { field, value })
    }
}

/// A verdict with hysteresis.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Latch {
    pub active: bool,
    /// Consecutive samples that disagreed with `active`.
    pub streak: u32,
    /// Timestamp of the last change of `active`.
    pub since: Option<f64>,
}

impl Latch {
    /// Feeds one sample; returns whether the verdict changed.
    pub fn update(&mut self, observed: bool, h: &Hysteresis, timestamp: f64) -> bool {
        if observed == self.active {
            self.streak = 0;
            return false;
        }
        self.streak += 1;
        let needed = if observed {
            h.raise_after
        } else {
            h.clear_after
        };
        if self.streak >= needed.max(1) {
            self.active = observed;
            self.streak = 0;
            self.since = Some(timestamp);
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needs_consecutive_samples_both_ways() {
        let h = Hysteresis {
            raise_after: 3,
            clear_after: 2,
        };
        let mut l = Latch::default();
        assert!(!l.update(true, &h, 1.0));
        assert!(!l.update(true, &h, 2.0));
        assert!(l.update(true, &h, 3.0));
        assert!(l.active);
        assert_eq!(l.since, Some(3.0));
        assert!(!l.update(false, &h, 4.0));
        assert!(l.update(false, &h, 5.0));
        assert!(!l.active);
    }

    #[test]
    fn oscillation_never_flips() {
        let h = Hysteresis {
            raise_after: 2,
            clear_after: 2,
        };
        let mut l = Latch::default();
        for i in 0..1000 {
            assert!(!l.update(i % 2 == 0, &h, i as f64));
        }
        assert!(!l.active);
        l.active = true;
        for i in 0..1000 {
            assert!(!l.update(i % 2 == 0, &h, i as f64));
        }
        assert!(l.active);
    }
}
