//! Remediation of IRQ collapse.
//!
//! [`policy::Policy`] decides, and is pure: it is fed latched verdicts, the state of
//! irqbalance and a clock, and returns what to do. Actuators ([`actuator`]) carry decisions
//! out and never decide. The daemon wires them together; tests drive the policy with a paused
//! clock and the actuators against a real kernel and a real systemd.

pub mod actuator;
pub mod config;
pub mod dpkg;
pub mod policy;
pub mod spread;
pub mod task;

pub use config::RemediationConfig;
pub use policy::{Outcome, Policy, Step, StepFailure};
pub use task::{Actuate, RealActuators};
// What the remediator tells the rest of the daemon: types of the sample, so that the outputs
// read them without importing this crate.
pub use nodemedic_sample::remedy::{
    ActionKind, Decision, DecisionAction, DecisionResult, FailureClass, IrqbalanceState, Mode,
    Pause, PauseFlag, RemedyState,
};
