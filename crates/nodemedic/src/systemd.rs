//! systemd integration for `Type=notify` units: readiness once the endpoint serves, a watchdog
//! ping from the sampling loop (so a wedged sampler is restarted even while the endpoint still
//! answers), and a status line for `systemctl status`. Outside systemd every call is a no-op.

use std::time::Duration;

use sd_notify::NotifyState;

fn send(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!(error = %e, "notifying systemd");
    }
}

/// The endpoint is bound and about to serve.
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// One sample completed: the sampler is alive.
pub fn sampled(status: &str) {
    send(&[NotifyState::Watchdog, NotifyState::Status(status)]);
}

pub fn stopping() {
    send(&[NotifyState::Stopping]);
}

/// Warns when the unit's `WatchdogSec=` cannot be met by pings sent once per sample.
pub fn check_watchdog(sample_interval: Duration) {
    if let Some(timeout) = sd_notify::watchdog_enabled() {
        tracing::info!(watchdog = ?timeout, "systemd watchdog enabled; pinged after every sample");
        if timeout < sample_interval * 2 {
            tracing::warn!(
                watchdog = ?timeout,
                sample_interval = ?sample_interval,
                "WatchdogSec is less than two sample intervals: systemd will restart a healthy nodemedic"
            );
        }
    }
}
