//! events.k8s.io/v1 Events about the node, and the limiter that keeps them few.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::Client;
use nodemedic_collect::sources::cgroups::Workload;
use nodemedic_detect::pressure::CgroupRates;
use nodemedic_detect::{FindingKind, GroupVerdict};
use nodemedic_sample::remedy::Decision;

pub struct NodeEvent {
    pub type_: &'static str,
    pub reason: String,
    pub action: String,
    pub note: String,
}

/// What an Event is about: the node, or one of its pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Regarding {
    Node,
    Pod {
        namespace: String,
        name: String,
        uid: String,
    },
}

/// An Event on a pod for a cgroup finding of the pressure detector (`quota_bound`,
/// `starved`), with the finding's words: what was measured and what to do. `None` for
/// another kind, or a cgroup that is not a named pod.
pub fn for_pod_finding(
    c: &CgroupRates,
    f: &nodemedic_detect::Finding,
) -> Option<(Regarding, NodeEvent)> {
    let reason = match f.kind {
        FindingKind::QuotaBound => "CPUQuotaBound",
        FindingKind::Starved => "CPUStarved",
        _ => return None,
    };
    if !matches!(c.workload, Workload::Pod { .. }) {
        return None;
    }
    let regarding = Regarding::Pod {
        namespace: c.namespace.clone()?,
        name: c.pod.clone()?,
        uid: c.pod_uid.clone()?,
    };
    Some((
        regarding,
        NodeEvent {
            type_: "Warning",
            reason: reason.into(),
            action: "Detect".into(),
            note: limit_note(f.message.clone()),
        },
    ))
}

/// Event notes are limited to 1 kB.
fn limit_note(mut note: String) -> String {
    if note.len() > 1000 {
        let mut cut = 997;
        while !note.is_char_boundary(cut) {
            cut -= 1;
        }
        note.truncate(cut);
        note.push_str("...");
    }
    note
}

pub fn for_verdict(v: &GroupVerdict) -> NodeEvent {
    let (reason, type_) = match (v.collapsed, v.hurting) {
        (true, true) => ("IRQCollapseHurting", "Warning"),
        (true, false) => ("IRQCollapsed", "Warning"),
        (false, _) => ("IRQCollapseCleared", "Normal"),
    };
    NodeEvent {
        type_,
        reason: reason.into(),
        action: "Detect".into(),
        note: format!(
            "{}: {} IRQs on CPUs {} of {} eligible",
            v.group.name,
            v.group.irqs.len(),
            v.group.effective_cpus,
            v.group.eligible_cpus.len()
        ),
    }
}

pub fn for_decision(d: &Decision) -> NodeEvent {
    use nodemedic_sample::remedy::{DecisionAction as A, DecisionResult as R};
    let ok = matches!(d.result, R::Done | R::Verified | R::DryRun | R::Resumed);
    let reason = match (d.action, d.result) {
        (A::Verify, R::Verified) => "RemediationVerified".to_string(),
        (A::Verify, _) => "RemediationNotVerified".to_string(),
        (A::Escalate, _) => "RemediationEscalated".to_string(),
        (A::Pause, R::Paused) => "RemediationPaused".to_string(),
        (A::Pause, _) => "RemediationResumed".to_string(),
        (action, R::DryRun) => format!("DryRun{}", camel(action.as_str())),
        (action, _) => camel(action.as_str()),
    };
    let note = limit_note(format!(
        "{} [{}] {}: {}",
        d.groups.join(", "),
        d.result.as_str(),
        d.reason,
        d.evidence
    ));
    NodeEvent {
        type_: if ok { "Normal" } else { "Warning" },
        reason,
        action: camel(d.action.as_str()),
        note,
    }
}

fn camel(s: &str) -> String {
    s.split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// Drops identical Events (same reason and note) within the dedup window, and caps the rate.
pub struct EventLimiter {
    per_minute: u32,
    dedup: Duration,
    recent: VecDeque<Instant>,
    seen: HashMap<(String, String), Instant>,
}

impl EventLimiter {
    pub fn new(per_minute: u32, dedup: Duration) -> Self {
        Self {
            per_minute,
            dedup,
            recent: VecDeque::new(),
            seen: HashMap::new(),
        }
    }

    pub fn admit(&mut self, reason: &str, note: &str, now: Instant) -> bool {
        let minute = Duration::from_secs(60);
        while self
            .recent
            .front()
            .is_some_and(|t| now.duration_since(*t) >= minute)
        {
            self.recent.pop_front();
        }
        self.seen.retain(|_, t| now.duration_since(*t) < self.dedup);
        let key = (reason.to_string(), note.to_string());
        if self.seen.contains_key(&key) || self.recent.len() >= self.per_minute as usize {
            return false;
        }
        self.seen.insert(key, now);
        self.recent.push_back(now);
        true
    }
}

/// Creates `e` about `regarding`: a node Event in `node_namespace`, a pod Event in the
/// pod's namespace (where `kubectl describe pod` shows it).
pub async fn create(
    client: &Client,
    node_namespace: &str,
    node: &str,
    regarding: &Regarding,
    e: &NodeEvent,
) -> Result<(), kube::Error> {
    let (namespace, object) = match regarding {
        Regarding::Node => (
            node_namespace,
            ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(node.into()),
                ..Default::default()
            },
        ),
        Regarding::Pod {
            namespace,
            name,
            uid,
        } => (
            namespace.as_str(),
            ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                namespace: Some(namespace.clone()),
                name: Some(name.clone()),
                uid: Some(uid.clone()),
                ..Default::default()
            },
        ),
    };
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    let event = Event {
        metadata: ObjectMeta {
            generate_name: Some("nodemedic-".into()),
            namespace: Some(namespace.into()),
            ..Default::default()
        },
        event_time: Some(MicroTime(k8s_openapi::chrono::Utc::now())),
        reporting_controller: Some("nodemedic.io/nodemedic".into()),
        reporting_instance: Some(format!("nodemedic-{node}")),
        action: Some(e.action.clone()),
        reason: Some(e.reason.clone()),
        note: Some(e.note.clone()),
        type_: Some(e.type_.to_string()),
        regarding: Some(object),
        ..Default::default()
    };
    api.create(&PostParams::default(), &event).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limiter_dedups_and_caps() {
        let mut l = EventLimiter::new(3, Duration::from_secs(600));
        let t = Instant::now();
        assert!(l.admit("A", "x", t));
        assert!(!l.admit("A", "x", t), "duplicate");
        assert!(l.admit("A", "y", t));
        assert!(l.admit("B", "x", t));
        assert!(!l.admit("C", "z", t), "rate cap");
        assert!(
            l.admit("C", "z", t + Duration::from_secs(61)),
            "cap window passed"
        );
        assert!(
            !l.admit("A", "x", t + Duration::from_secs(300)),
            "still deduplicated"
        );
        assert!(l.admit("A", "x", t + Duration::from_secs(601)));
    }

    /// A pod's cgroup, or with `container` one of its containers'.
    fn rates(container: bool, named: bool) -> CgroupRates {
        use nodemedic_collect::sources::cgroups::Qos;
        let (uid, qos) = ("0a1b".to_string(), Qos::Burstable);
        CgroupRates {
            path: "kubepods/burstable/pod0a1b".into(),
            workload: if container {
                Workload::Container {
                    uid,
                    qos,
                    runtime: None,
                    id: "abc".into(),
                }
            } else {
                Workload::Pod { uid, qos }
            },
            pod_uid: Some("0a1b".into()),
            qos: Some(Qos::Burstable),
            name: "shop/web-0".into(),
            namespace: named.then(|| "shop".into()),
            pod: named.then(|| "web-0".into()),
            container: None,
            quota_cores: Some(0.1),
            cpu_usage_cores: Some(0.1),
            throttled_ratio: Some(0.99),
            cpu_some_ratio: Some(0.95),
            memory_some_ratio: Some(0.0),
            io_some_ratio: Some(0.0),
            quota_bound: true,
            starved: false,
        }
    }

    /// A quota-bound pod gets a Warning on the Pod itself, in its namespace, saying what was
    /// measured and what to do; a container's cgroup, or a pod without names, gets none.
    #[test]
    fn quota_bound_pods_get_an_event_on_the_pod() {
        let c = rates(false, true);
        let f = nodemedic_detect::pressure::cgroup_findings(&c);
        assert_eq!(f.len(), 1);
        let (regarding, e) = for_pod_finding(&c, &f[0]).unwrap();
        assert_eq!(
            regarding,
            Regarding::Pod {
                namespace: "shop".into(),
                name: "web-0".into(),
                uid: "0a1b".into()
            }
        );
        assert_eq!((e.type_, e.reason.as_str()), ("Warning", "CPUQuotaBound"));
        assert!(
            e.note.contains("throttled in 99% of its CFS periods"),
            "{}",
            e.note
        );
        assert!(e.note.contains("waited for CPU 95%"), "{}", e.note);
        assert!(
            e.note.contains("raise or remove the CPU limit"),
            "{}",
            e.note
        );
        assert!(for_pod_finding(&rates(true, true), &f[0]).is_none());
        assert!(for_pod_finding(&rates(false, false), &f[0]).is_none());
    }

    #[test]
    fn camel_case_reasons() {
        assert_eq!(camel("irqbalance_restart"), "IrqbalanceRestart");
        assert_eq!(camel("escalate"), "Escalate");
    }
}
