//! events.k8s.io/v1 Events about the node, and the limiter that keeps them few.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::Client;
use nodemedic_detect::GroupVerdict;
use nodemedic_remedy::Decision;

pub struct NodeEvent {
    pub type_: &'static str,
    pub reason: String,
    pub action: String,
    pub note: String,
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
    let ok = matches!(
        d.result.as_str(),
        "done" | "verified" | "dry_run" | "resumed"
    );
    let reason = match (d.action.as_str(), d.result.as_str()) {
        ("verify", "verified") => "RemediationVerified".to_string(),
        ("verify", _) => "RemediationNotVerified".to_string(),
        ("escalate", _) => "RemediationEscalated".to_string(),
        ("pause", r) => format!(
            "Remediation{}",
            if r == "paused" { "Paused" } else { "Resumed" }
        ),
        (action, "dry_run") => format!("DryRun{}", camel(action)),
        (action, _) => camel(action),
    };
    let mut note = format!(
        "{} [{}] {}: {}",
        d.groups.join(", "),
        d.result,
        d.reason,
        d.evidence
    );
    // Event notes are limited to 1 kB.
    if note.len() > 1000 {
        let mut cut = 997;
        while !note.is_char_boundary(cut) {
            cut -= 1;
        }
        note.truncate(cut);
        note.push_str("...");
    }
    NodeEvent {
        type_: if ok { "Normal" } else { "Warning" },
        reason,
        action: camel(&d.action),
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

pub async fn create(
    client: &Client,
    namespace: &str,
    node: &str,
    e: &NodeEvent,
) -> Result<(), kube::Error> {
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
        regarding: Some(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.into()),
            ..Default::default()
        }),
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

    #[test]
    fn camel_case_reasons() {
        assert_eq!(camel("irqbalance_restart"), "IrqbalanceRestart");
        assert_eq!(camel("escalate"), "Escalate");
    }
}
