use std::time::Duration;

use nodemedic_sample::remedy::Mode;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RemediationConfig {
    /// `on` by default for the irqbalance step, which only ever asks a running irqbalance to
    /// re-place IRQs; native rebalancing is opt-in below.
    pub mode: Mode,
    /// Stop deciding while true (also: the node annotation `nodemedic.io/pause=true`).
    pub paused: bool,
    /// Minimum time between two actions. Longer than irqbalance's 10 s sampling interval and
    /// systemd's default start limit (5 starts in 10 s), so restarts can never trip it.
    #[serde(with = "humantime_serde")]
    pub cooldown: Duration,
    /// How long after an action to check that it worked (at least two irqbalance intervals).
    #[serde(with = "humantime_serde")]
    pub verify_after: Duration,
    pub max_actions_per_hour: u32,
    pub max_actions_per_day: u32,
    /// Decisions kept for /status.
    pub audit_entries: usize,
    pub irqbalance: IrqbalanceStep,
    pub native: NativeStep,
}

impl Default for RemediationConfig {
    fn default() -> Self {
        Self {
            mode: Mode::On,
            paused: false,
            cooldown: Duration::from_secs(300),
            verify_after: Duration::from_secs(30),
            max_actions_per_hour: 3,
            max_actions_per_day: 10,
            audit_entries: 50,
            irqbalance: IrqbalanceStep::default(),
            native: NativeStep::default(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IrqbalanceMethod {
    /// `TryRestartUnit(unit, "replace")`: restarts irqbalance if it is running.
    TryRestart,
    /// `KillUnit(unit, "main", SIGHUP)`: irqbalance re-reads topology and re-places IRQs.
    Sighup,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IrqbalanceStep {
    pub enabled: bool,
    pub method: IrqbalanceMethod,
    pub unit: String,
    /// The system bus; in a pod, the host's socket mounted into it.
    pub dbus_socket: String,
    /// Run `systemctl try-restart UNIT` when D-Bus fails.
    pub systemctl_fallback: bool,
}

impl Default for IrqbalanceStep {
    fn default() -> Self {
        Self {
            enabled: true,
            method: IrqbalanceMethod::TryRestart,
            unit: "irqbalance.service".into(),
            dbus_socket: "/run/dbus/system_bus_socket".into(),
            systemctl_fallback: true,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NativeStep {
    /// Write `smp_affinity` itself when irqbalance is absent, stopped, or did not help.
    pub enabled: bool,
    /// Only when the collapse is also hurting.
    pub require_hurting: bool,
}

impl Default for NativeStep {
    fn default() -> Self {
        Self {
            enabled: false,
            require_hurting: true,
        }
    }
}

/// A remediation setting that would make remediation unsafe or impossible.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("cooldown must be at least 11s (longer than irqbalance's interval and systemd's start limit window)")]
    CooldownTooShort,
    #[error("verify_after must be at least 1s")]
    VerifyTooSoon,
    #[error("verify_after must be shorter than cooldown")]
    VerifyAfterCooldown,
    #[error("need 1 <= max_actions_per_hour <= max_actions_per_day")]
    Caps,
    #[error("irqbalance.unit must not be empty")]
    NoUnit,
}

impl RemediationConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.cooldown < Duration::from_secs(11) {
            return Err(ConfigError::CooldownTooShort);
        }
        if self.verify_after < Duration::from_secs(1) {
            return Err(ConfigError::VerifyTooSoon);
        }
        if self.verify_after >= self.cooldown {
            return Err(ConfigError::VerifyAfterCooldown);
        }
        if self.max_actions_per_hour == 0 || self.max_actions_per_day < self.max_actions_per_hour {
            return Err(ConfigError::Caps);
        }
        if self.irqbalance.unit.is_empty() {
            return Err(ConfigError::NoUnit);
        }
        Ok(())
    }
}
