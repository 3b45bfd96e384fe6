//! What the Kubernetes reporter tells `/status`.

use serde::Serialize;

/// Where Kubernetes reporting stands, for `/status`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KubeState {
    /// Not started yet (the first sample is not in).
    #[default]
    Starting,
    /// Not running in Kubernetes (no node name), or switched off.
    Disabled,
    /// The last round with the API succeeded.
    Active,
    /// The last round failed, or the configuration is wrong: `reason` says why.
    Failed,
}

impl KubeState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Disabled => "disabled",
            Self::Active => "active",
            Self::Failed => "failed",
        }
    }
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct KubeStatus {
    pub state: KubeState,
    pub node: Option<String>,
    pub reason: Option<String>,
    pub paused_by_annotation: bool,
}
