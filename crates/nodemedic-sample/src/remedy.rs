//! What the remediator tells the rest of the daemon: its audit entries ([`Decision`]), its
//! state after each sample ([`RemedyState`], which `/metrics` and `/status` render), and the
//! pause it is told ([`Pause`], from the node annotation the Kubernetes reporter reads).
//! The remediator in nodemedic-remedy produces them; the binary carries them to the outputs.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::finding::Finding;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Never decide anything.
    Off,
    /// Decide, log, count and report; change nothing.
    DryRun,
    /// Act.
    On,
}

impl Mode {
    /// The spelling used in the config file and in metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::DryRun => "dry-run",
            Mode::On => "on",
        }
    }
}

/// What nodemedic knows about irqbalance on the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum IrqbalanceState {
    Running {
        version: Option<String>,
    },
    /// Installed but not running, or disabled/masked: someone stopped it on purpose.
    Stopped {
        detail: String,
        version: Option<String>,
    },
    NotInstalled,
    /// Could not find out (no D-Bus access, for instance), or was not asked.
    Unknown {
        detail: String,
        /// From the package database, which needs no D-Bus.
        version: Option<String>,
    },
}

impl IrqbalanceState {
    /// The same state with the version the package database gave (systemd does not know it).
    pub fn with_version(mut self, package_version: Option<&str>) -> Self {
        match &mut self {
            IrqbalanceState::Running { version }
            | IrqbalanceState::Stopped { version, .. }
            | IrqbalanceState::Unknown { version, .. } => {
                *version = package_version.map(str::to_string);
            }
            IrqbalanceState::NotInstalled => {}
        }
        self
    }

    /// The label of `nodemedic_irqbalance_info{state}`.
    pub fn as_str(&self) -> &'static str {
        match self {
            IrqbalanceState::Running { .. } => "running",
            IrqbalanceState::Stopped { .. } => "stopped",
            IrqbalanceState::NotInstalled => "not_installed",
            IrqbalanceState::Unknown { .. } => "unknown",
        }
    }

    pub fn version(&self) -> Option<&str> {
        match self {
            IrqbalanceState::Running { version }
            | IrqbalanceState::Stopped { version, .. }
            | IrqbalanceState::Unknown { version, .. } => version.as_deref(),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionKind {
    IrqbalanceRestart,
    NativeRebalance,
}

impl ActionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ActionKind::IrqbalanceRestart => "irqbalance_restart",
            ActionKind::NativeRebalance => "native_rebalance",
        }
    }
}

/// One audit entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    pub timestamp: f64,
    pub action: DecisionAction,
    pub groups: Vec<String>,
    pub mode: Mode,
    pub reason: String,
    /// What was measured, or the error text of a failed step.
    pub evidence: String,
    /// Bounded: it is a label.
    pub result: DecisionResult,
}

/// What a decision is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DecisionAction {
    Act(ActionKind),
    Verify,
    Escalate,
    Pause,
    /// A completion for a step the policy does not know (a bug in the caller).
    Unknown,
}

impl DecisionAction {
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionAction::Act(kind) => kind.as_str(),
            DecisionAction::Verify => "verify",
            DecisionAction::Escalate => "escalate",
            DecisionAction::Pause => "pause",
            DecisionAction::Unknown => "unknown",
        }
    }
}

/// How a decision came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DecisionResult {
    /// A step handed to the actuators; its completion follows.
    Pending,
    DryRun,
    Done,
    Failed(FailureClass),
    Verified,
    NotVerified,
    Escalated,
    Paused,
    Resumed,
    Ignored,
}

impl DecisionResult {
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionResult::Pending => "pending",
            DecisionResult::DryRun => "dry_run",
            DecisionResult::Done => "done",
            DecisionResult::Failed(class) => class.as_str(),
            DecisionResult::Verified => "verified",
            DecisionResult::NotVerified => "not_verified",
            DecisionResult::Escalated => "escalated",
            DecisionResult::Paused => "paused",
            DecisionResult::Resumed => "resumed",
            DecisionResult::Ignored => "ignored",
        }
    }

    /// An action was taken (or would have been, in dry-run), whatever its outcome.
    pub fn is_action(self) -> bool {
        matches!(
            self,
            DecisionResult::Done | DecisionResult::DryRun | DecisionResult::Failed(_)
        )
    }
}

macro_rules! serialize_as_str {
    ($($t:ty),*) => {$(
        impl Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }
    )*};
}
serialize_as_str!(DecisionAction, DecisionResult, FailureClass);

/// Why a step failed, from its error's type (an io error kind, a D-Bus error name, a
/// timeout), for the `result` label: the error text itself would make every distinct message
/// a new series. The text stays in the decision's `evidence` (`/status`, the audit log).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FailureClass {
    Timeout,
    Permission,
    /// What the step needs is not there: the bus, the unit, the IRQ.
    Unavailable,
    Other,
}

impl FailureClass {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::Timeout => "failed_timeout",
            FailureClass::Permission => "failed_permission",
            FailureClass::Unavailable => "failed_unavailable",
            FailureClass::Other => "failed",
        }
    }

    pub fn of_io(e: &std::io::Error) -> Self {
        use std::io::ErrorKind as K;
        match e.kind() {
            K::TimedOut => FailureClass::Timeout,
            K::PermissionDenied => FailureClass::Permission,
            K::NotFound | K::ConnectionRefused | K::AddrNotAvailable => FailureClass::Unavailable,
            _ => FailureClass::Other,
        }
    }
}

/// What the rest of the daemon can see of the remediator.
#[derive(Debug, Default, Serialize)]
pub struct RemedyState {
    pub mode: Option<Mode>,
    pub paused: bool,
    pub verifying: bool,
    pub irqbalance: Option<IrqbalanceState>,
    /// The most recent decisions, oldest first.
    pub audit: VecDeque<Decision>,
    #[serde(skip)]
    pub counts: BTreeMap<(DecisionAction, DecisionResult), u64>,
    pub last_action_timestamp: Option<f64>,
    pub findings: Vec<Finding>,
}

/// The node annotation `nodemedic.io/pause`, as last read by the Kubernetes reporter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Pause {
    /// Not read yet: remediation waits (it must not act on a node an operator paused just
    /// because the API was slow), without auditing a pause nobody asked for.
    Unknown = 0,
    Off = 1,
    On = 2,
}

/// [`Pause`], shared between the Kubernetes reporter (writer) and the remediator (reader).
/// Without Kubernetes it is set to [`Pause::Off`] at start.
#[derive(Debug, Clone, Default)]
pub struct PauseFlag(Arc<AtomicU8>);

impl PauseFlag {
    pub fn new(p: Pause) -> Self {
        Self(Arc::new(AtomicU8::new(p as u8)))
    }

    pub fn get(&self) -> Pause {
        match self.0.load(Ordering::Relaxed) {
            1 => Pause::Off,
            2 => Pause::On,
            _ => Pause::Unknown,
        }
    }

    pub fn set(&self, p: Pause) {
        self.0.store(p as u8, Ordering::Relaxed);
    }
}
