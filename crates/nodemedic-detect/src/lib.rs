//! Detectors: pure state machines over [`Snapshot`]s. A detector never does I/O; it is fed
//! snapshots and returns verdicts, so it can be driven by fixtures and a paused clock alike.

pub mod collapse;
pub mod commit_latency;
pub mod groups;
/// Findings are a type of the sample (`nodemedic-sample`), shared with every output.
pub use nodemedic_sample::finding;
pub mod hysteresis;
pub mod pressure;
pub mod rates;
pub mod tuning;
pub mod wakeup_storm;

pub use collapse::{CollapseConfig, CollapseDetector, GroupVerdict, HurtingConfig};
pub use commit_latency::{CommitLatencyConfig, CommitLatencyDetector, CommitVerdict};
pub use finding::{Finding, FindingKind, Severity};
pub use groups::DeviceGroup;
pub use hysteresis::{ConfigError, Hysteresis, Latch};
pub use pressure::{PressureConfig, PressureDetector, PressureVerdict};
pub use tuning::{TuningConfig, TuningDetector, TuningFinding, TuningRule, TuningVerdict};
pub use wakeup_storm::{StormVerdict, WakeupStormConfig, WakeupStormDetector};
