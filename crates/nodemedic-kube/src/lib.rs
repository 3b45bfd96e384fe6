//! Kubernetes reporting: what nodemedic knows about IRQ collapse, where cluster operators look.
//!
//! - a Node condition `IRQAffinityCollapsed` (True/False, reason, message) on `nodes/status`;
//! - optionally a node label `nodemedic.io/irq-collapsed=true` for schedulers;
//! - events.k8s.io/v1 Events for each detection, action and verification, de-duplicated and
//!   rate limited;
//! - the node annotation `nodemedic.io/pause=true`, which pauses remediation.
//!
//! [`Reporter`] is driven by the daemon with verdicts and audit decisions; without
//! Kubernetes it is never constructed.

mod events;
mod pods;
mod retry;
pub mod task;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeStatus};
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use nodemedic_detect::pressure::PressureVerdict;
use nodemedic_detect::GroupVerdict;
use nodemedic_sample::remedy::Decision;
use serde::{Deserialize, Serialize};
use serde_json::json;

pub use events::{EventLimiter, Regarding};
pub use nodemedic_sample::kube::{KubeState, KubeStatus};
pub use pods::{list_pods, watch_pods, PodDirectory, PodNamesCollector, NAME as POD_NAMES};
pub use retry::Retry;

pub const CONDITION_TYPE: &str = "IRQAffinityCollapsed";
pub const LABEL: &str = "nodemedic.io/irq-collapsed";
pub const PAUSE_ANNOTATION: &str = "nodemedic.io/pause";
const FIELD_MANAGER: &str = "nodemedic";
/// How often the condition's heartbeat is refreshed when nothing changes.
const HEARTBEAT: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Enabled {
    /// When running in a pod (`KUBERNETES_SERVICE_HOST` set) with `NODE_NAME` known.
    Auto,
    Always,
    Never,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KubeConfig {
    pub enabled: Enabled,
    /// The node's name; defaults to the `NODE_NAME` environment variable (downward API).
    pub node_name: Option<String>,
    /// Set `nodemedic.io/irq-collapsed=true` on the node while any group is collapsed (needs
    /// the extra `nodes patch` permission).
    pub label: bool,
    pub events: bool,
    /// Namespace for Events about the node.
    pub events_namespace: String,
    /// Most Events per minute; identical Events within `event_dedup_seconds` are dropped.
    pub events_per_minute: u32,
    pub event_dedup_seconds: u64,
    /// Resolve pod UIDs and container IDs in cgroup series to namespace/pod/container names,
    /// from one watch of this node's pods (needs "pods list, watch").
    pub pod_names: bool,
    /// An Event on a pod when it turns quota-bound or starved (`kubectl describe pod`), in
    /// the pod's namespace, within the same rate limit (needs `pod_names` and "events
    /// create").
    pub pod_events: bool,
}

impl Default for KubeConfig {
    fn default() -> Self {
        Self {
            enabled: Enabled::Auto,
            node_name: None,
            label: false,
            events: true,
            events_namespace: "default".into(),
            events_per_minute: 10,
            event_dedup_seconds: 600,
            pod_names: true,
            pod_events: true,
        }
    }
}

impl KubeConfig {
    /// The node name when reporting is on, `None` when it is off.
    pub fn resolve(&self) -> Result<Option<String>, KubeConfigError> {
        let name = self
            .node_name
            .clone()
            .or_else(|| std::env::var("NODE_NAME").ok())
            .filter(|n| !n.is_empty());
        match (self.enabled, name) {
            (Enabled::Never, _) => Ok(None),
            (Enabled::Always, Some(n)) => Ok(Some(n)),
            (Enabled::Always, None) => Err(KubeConfigError::NodeNameMissing),
            (Enabled::Auto, Some(n)) if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() => {
                Ok(Some(n))
            }
            (Enabled::Auto, _) => Ok(None),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeConfigError {
    #[error("kubernetes.enabled = \"always\" needs kubernetes.node_name or NODE_NAME")]
    NodeNameMissing,
}

#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error("kubernetes client configuration: {0}")]
    Config(#[from] kube::config::InferConfigError),
    #[error("kubernetes API: {0}")]
    Api(#[from] kube::Error),
}

/// The condition nodemedic wants on the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredCondition {
    pub status: &'static str,
    pub reason: &'static str,
    pub message: String,
}

pub fn desired_condition(verdicts: &[GroupVerdict]) -> DesiredCondition {
    let collapsed: Vec<String> = verdicts
        .iter()
        .filter(|v| v.collapsed)
        .map(|v| {
            format!(
                "{} ({} IRQs on CPUs {}{})",
                v.group.name,
                v.group.irqs.len(),
                v.group.effective_cpus,
                if v.hurting { ", hurting" } else { "" }
            )
        })
        .collect();
    if collapsed.is_empty() {
        DesiredCondition {
            status: "False",
            reason: "IRQsSpread",
            message: "no device's IRQs are collapsed onto too few CPUs".into(),
        }
    } else {
        DesiredCondition {
            status: "True",
            reason: if verdicts.iter().any(|v| v.hurting) {
                "IRQsCollapsedHurting"
            } else {
                "IRQsCollapsed"
            },
            message: format!("collapsed: {}", collapsed.join("; ")),
        }
    }
}

pub struct Reporter {
    cfg: KubeConfig,
    node: String,
    nodes: Api<Node>,
    client: Client,
    last_condition: Option<(DesiredCondition, Instant)>,
    last_label: Option<bool>,
    limiter: EventLimiter,
    previous: BTreeMap<String, (bool, bool)>,
    /// Pod-level pressure findings (by pod UID and kind) active at the last report.
    previous_pods: BTreeSet<(String, nodemedic_detect::FindingKind)>,
}

impl Reporter {
    pub async fn connect(cfg: KubeConfig, node: String) -> Result<Self, KubeError> {
        let config = kube::Config::infer().await?;
        let client = Client::try_from(config)?;
        let limiter = EventLimiter::new(
            cfg.events_per_minute,
            Duration::from_secs(cfg.event_dedup_seconds),
        );
        Ok(Self {
            nodes: Api::all(client.clone()),
            client,
            node,
            cfg,
            last_condition: None,
            last_label: None,
            limiter,
            previous: BTreeMap::new(),
            previous_pods: BTreeSet::new(),
        })
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    /// Reads the pause annotation.
    pub async fn paused(&self) -> Result<bool, KubeError> {
        let node = self.nodes.get(&self.node).await?;
        Ok(node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PAUSE_ANNOTATION))
            .is_some_and(|v| v == "true"))
    }

    /// Brings the node condition and label in line with the verdicts, and emits Events for
    /// verdict changes and remediation decisions.
    pub async fn report(
        &mut self,
        verdicts: &[GroupVerdict],
        pressure: Option<&PressureVerdict>,
        decisions: &[Decision],
    ) -> Result<(), KubeError> {
        let want = desired_condition(verdicts);
        let now = Instant::now();
        let stale = match &self.last_condition {
            Some((c, at)) => *c != want || now.duration_since(*at) > HEARTBEAT,
            None => true,
        };
        if stale {
            self.patch_condition(&want).await?;
            self.last_condition = Some((want.clone(), now));
        }
        let collapsed = want.status == "True";
        if self.cfg.label && self.last_label != Some(collapsed) {
            let value = if collapsed {
                json!("true")
            } else {
                serde_json::Value::Null
            };
            // A merge patch removes a label with `null`, which a typed Node cannot say.
            let patch = json!({"metadata": {"labels": {LABEL: value}}});
            self.nodes
                .patch(
                    &self.node,
                    &PatchParams::apply(FIELD_MANAGER),
                    &Patch::Merge(&patch),
                )
                .await?;
            self.last_label = Some(collapsed);
        }
        if self.cfg.events {
            let mut events = Vec::new();
            // Transitions are tracked here rather than taken from `GroupVerdict::changed`:
            // the reporter reads samples through a watch channel and may skip some.
            let mut now_state = BTreeMap::new();
            for v in verdicts {
                let state = (v.collapsed, v.hurting);
                let before = self
                    .previous
                    .get(&v.group.key)
                    .copied()
                    .unwrap_or((false, false));
                if state != before && (v.collapsed || before.0) {
                    events.push((Regarding::Node, events::for_verdict(v)));
                }
                now_state.insert(v.group.key.clone(), state);
            }
            self.previous = now_state;
            events.extend(
                decisions
                    .iter()
                    .filter(|d| d.result != nodemedic_sample::remedy::DecisionResult::Pending)
                    .map(|d| (Regarding::Node, events::for_decision(d))),
            );
            for (regarding, e) in events {
                self.create_event(&regarding, &e, now).await?;
            }
        }
        if self.cfg.pod_events {
            self.report_pods(pressure, now).await?;
        }
        Ok(())
    }

    /// An Event on each pod that turned quota-bound or starved since the last report.
    async fn report_pods(
        &mut self,
        pressure: Option<&PressureVerdict>,
        now: Instant,
    ) -> Result<(), KubeError> {
        let Some(p) = pressure else {
            return Ok(());
        };
        let mut active = BTreeSet::new();
        let mut new = Vec::new();
        for c in p.cgroups.iter() {
            for f in nodemedic_detect::pressure::cgroup_findings(c) {
                let Some((regarding, e)) = events::for_pod_finding(c, &f) else {
                    continue;
                };
                let key = (c.pod_uid.clone().unwrap_or_default(), f.kind);
                if !self.previous_pods.contains(&key) {
                    new.push((regarding, e));
                }
                active.insert(key);
            }
        }
        for (regarding, e) in new {
            self.create_event(&regarding, &e, now).await?;
        }
        // Only once every new Event is out: a failed round tries them again (the limiter
        // drops those that did go out).
        self.previous_pods = active;
        Ok(())
    }

    async fn create_event(
        &mut self,
        regarding: &Regarding,
        e: &events::NodeEvent,
        now: Instant,
    ) -> Result<(), KubeError> {
        if self.limiter.admit(&e.reason, &e.note, now) {
            events::create(
                &self.client,
                &self.cfg.events_namespace,
                &self.node,
                regarding,
                e,
            )
            .await?;
        }
        Ok(())
    }

    /// nodemedic is stopping: a condition it set is no longer maintained, so it becomes
    /// `Unknown` with a reason that says so (a frozen `True` would claim a collapse nobody
    /// watches any more). A condition this process never set is left alone.
    pub async fn stopped(&mut self) -> Result<(), KubeError> {
        if self.last_condition.is_none() {
            return Ok(());
        }
        let stopped = DesiredCondition {
            status: "Unknown",
            reason: "NodemedicStopped",
            message: "nodemedic stopped on this node; the condition is not maintained until it \
                      runs again"
                .into(),
        };
        self.patch_condition(&stopped).await?;
        self.last_condition = Some((stopped, Instant::now()));
        Ok(())
    }

    async fn patch_condition(&self, c: &DesiredCondition) -> Result<(), KubeError> {
        let now =
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::chrono::Utc::now());
        let transition = match &self.last_condition {
            Some((prev, _)) if prev.status == c.status => None,
            _ => Some(now.clone()),
        };
        let patch = Node {
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: CONDITION_TYPE.into(),
                    status: c.status.to_string(),
                    reason: Some(c.reason.to_string()),
                    message: Some(c.message.clone()),
                    last_heartbeat_time: Some(now),
                    last_transition_time: transition,
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        self.nodes
            .patch_status(&self.node, &params, &Patch::Strategic(&patch))
            .await?;
        Ok(())
    }
}
