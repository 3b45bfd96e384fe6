//! The types that flow through nodemedic, once per sample, and nothing else: no I/O, no
//! detector logic. Every other crate speaks them.
//!
//! ```text
//! collectors ──▶ Snapshot ──▶ detectors ──▶ Sample ──┬─▶ /metrics, /status (nodemedic-export)
//! (nodemedic-collect)         (nodemedic-detect)       ├─▶ remediation      (nodemedic-remedy) ─▶ RemedyState, Decision
//!                                                       └─▶ Kubernetes       (nodemedic-kube)   ─▶ KubeStatus, Pause
//! ```
//!
//! - [`snapshot`]: what the collectors read, nothing derived;
//! - [`status`]: how each collector and the read layer fared;
//! - [`verdict`] and [`finding`]: what the detectors concluded;
//! - [`Sample`]: all of the above for one sample, as the engine hands it to the outputs;
//! - [`host`]: what the daemon found at start about its access to the host (its LSM
//!   label, host mounts it could write), carried by every sample;
//! - [`remedy`] and [`kube`]: what the outputs tell each other and `/status`, carried by
//!   the binary (no output crate imports another).

pub mod finding;
pub mod host;
pub mod kube;
pub mod names;
pub mod perf;
pub mod remedy;
pub mod snapshot;
pub mod status;
pub mod verdict;

use std::time::Duration;

pub use finding::{Finding, FindingKind, Severity};
pub use names::CollectorName;
pub use snapshot::Snapshot;
pub use status::{CollectorState, CollectorStatus, ReaderStatus};
pub use verdict::{CommitVerdict, GroupVerdict, PressureVerdict, StormVerdict, TuningVerdict};

/// Everything one sample produced.
#[derive(Debug, Clone)]
pub struct Sample {
    pub snapshot: Snapshot,
    pub collectors: Vec<CollectorStatus>,
    pub verdicts: Vec<GroupVerdict>,
    /// The disk commit detector's verdict, when the probe is enabled.
    pub commit: Option<CommitVerdict>,
    pub findings: Vec<Finding>,
    /// The perf-event wakeup storm verdict (None while the eBPF probes give no rates).
    pub storm: Option<StormVerdict>,
    /// Node and per-cgroup pressure rates and verdicts (None on the first sample, or
    /// without PSI and cgroups).
    pub pressure: Option<PressureVerdict>,
    /// The tuning audit's findings (None with the tuning collector off or failed).
    pub tuning: Option<TuningVerdict>,
    pub duration: Duration,
    pub samples_total: u64,
    /// The read layer after this sample (backend, kept-open files, fallbacks).
    pub reader: ReaderStatus,
    /// What the daemon found at start about its access to the host (the same for every
    /// sample).
    pub host: std::sync::Arc<host::HostAccess>,
}
