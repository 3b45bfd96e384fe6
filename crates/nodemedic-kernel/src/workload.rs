//! What a cgroup holds, as its path names it: the vocabulary of the cgroups collector, the
//! pressure verdict and the Kubernetes events (the classifier is the cgroups collector's,
//! `nodemedic_collect::sources::cgroups::classify`).

use serde::Serialize;

/// Kubernetes QoS class, from the cgroup hierarchy kubelet builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Qos {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl Qos {
    pub fn as_str(&self) -> &'static str {
        match self {
            Qos::Guaranteed => "guaranteed",
            Qos::Burstable => "burstable",
            Qos::BestEffort => "besteffort",
        }
    }
}

/// What a cgroup's path (relative to its hierarchy's root) says it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Workload {
    /// A pod's cgroup. `uid` as the API spells it (dashes).
    Pod {
        uid: String,
        qos: Qos,
    },
    /// A container in a pod; `id` is the runtime's container ID.
    Container {
        uid: String,
        qos: Qos,
        runtime: Option<String>,
        id: String,
    },
    /// A systemd service (`system.slice/foo.service`).
    Service {
        unit: String,
    },
    Other,
}

impl Workload {
    /// What the cgroup holds, as `/status` and `check` name it: the `kind` of its serialized
    /// form.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Pod { .. } => "pod",
            Self::Container { .. } => "container",
            Self::Service { .. } => "service",
            Self::Other => "other",
        }
    }
}
