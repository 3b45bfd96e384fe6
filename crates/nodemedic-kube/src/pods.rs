//! Names for this node's pods: one watch of the pods bound to the node, cached, so that
//! per-cgroup series and findings can say `namespace`/`pod`/`container` instead of a UID.
//! Samples read the cache; no sample or scrape ever calls the API.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::runtime::watcher;
use kube::{Api, Client};
use nodemedic_collect::{registry, CollectError, Collected, Collector, CollectorName, Ctx};
use nodemedic_sample::snapshot::{PodIdentity, Pods};
use nodemedic_sample::Snapshot;

use crate::Retry;

/// How long to wait before trying again when no client can be built.
const CLIENT_RETRY: Duration = Duration::from_secs(30);

type PodMap = BTreeMap<String, PodIdentity>;

#[derive(Debug, Default)]
struct State {
    /// Replaced whole on every change so that samples share it without copying.
    pods: Arc<Pods>,
    synced: bool,
    /// The last watch error, cleared by the next good event.
    error: Option<Arc<PodsError>>,
}

/// The cache of pod names, shared by the watch task (writer) and the collector (reader).
#[derive(Debug, Clone, Default)]
pub struct PodDirectory {
    state: Arc<RwLock<State>>,
}

impl PodDirectory {
    pub fn new() -> Self {
        Self::default()
    }

    fn update(&self, f: impl FnOnce(&mut State)) {
        let mut s = self.state.write().unwrap_or_else(|p| p.into_inner());
        f(&mut s);
    }

    /// The pods known now, once the first full list has arrived.
    pub fn pods(&self) -> Option<Arc<Pods>> {
        let s = self.state.read().unwrap_or_else(|p| p.into_inner());
        s.synced.then(|| s.pods.clone())
    }

    /// Applies one watch event. `pending` buffers a re-list until it is complete, so that a
    /// sample never sees half a list.
    fn apply(&self, event: watcher::Event<Pod>, pending: &mut Option<PodMap>) {
        match event {
            watcher::Event::Init => *pending = Some(PodMap::new()),
            watcher::Event::InitApply(pod) => {
                if let (Some(buf), Some((uid, id))) = (pending.as_mut(), identity(&pod)) {
                    buf.insert(uid, id);
                }
            }
            watcher::Event::InitDone => {
                let pods = Arc::new(Pods(pending.take().unwrap_or_default()));
                self.update(|s| {
                    s.pods = pods;
                    s.synced = true;
                    s.error = None;
                });
            }
            watcher::Event::Apply(pod) => {
                if let Some((uid, id)) = identity(&pod) {
                    self.update(|s| {
                        if s.pods.get(&uid) != Some(&id) {
                            Arc::make_mut(&mut s.pods).insert(uid, id);
                        }
                        s.error = None;
                    });
                }
            }
            watcher::Event::Delete(pod) => {
                if let Some(uid) = pod.metadata.uid.as_deref() {
                    self.update(|s| {
                        if s.pods.contains_key(uid) {
                            Arc::make_mut(&mut s.pods).remove(uid);
                        }
                    });
                }
            }
        }
    }

    fn fail(&self, e: PodsError) {
        self.update(|s| s.error = Some(Arc::new(e)));
    }
}

/// A pod's UID and names; `None` for an object without a UID, name or namespace.
fn identity(pod: &Pod) -> Option<(String, PodIdentity)> {
    let uid = pod.metadata.uid.clone()?;
    let id = PodIdentity {
        namespace: pod.metadata.namespace.clone()?,
        name: pod.metadata.name.clone()?,
        containers: pod
            .status
            .iter()
            .flat_map(|st| {
                let all = [
                    st.container_statuses.as_deref(),
                    st.init_container_statuses.as_deref(),
                    st.ephemeral_container_statuses.as_deref(),
                ];
                all.into_iter().flatten().flatten()
            })
            .filter_map(container_entry)
            .collect(),
    };
    Some((uid, id))
}

/// `containerd://0123…` → (`0123…`, name). cgroup names carry the bare ID.
fn container_entry(c: &ContainerStatus) -> Option<(String, String)> {
    let raw = c.container_id.as_deref()?;
    let id = raw.split_once("://").map_or(raw, |(_, id)| id);
    (!id.is_empty()).then(|| (id.to_string(), c.name.clone()))
}

/// Watches the pods bound to `node` and keeps `dir` current, for as long as the daemon
/// runs. Reconnects with exponential back-off ([`Retry`]), which only data resets: kube's
/// default back-off is reset by the `Init` event that every re-list starts with, so an
/// unreachable API was retried (and logged) every 0.8 s. Errors are kept for the collector.
pub async fn watch_pods(node: String, dir: PodDirectory) {
    let client = loop {
        match Client::try_default().await {
            Ok(c) => break c,
            Err(e) => {
                dir.fail(PodsError::Client(e));
                tokio::time::sleep(CLIENT_RETRY).await;
            }
        }
    };
    let api: Api<Pod> = Api::all(client);
    let config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
    let mut events = watcher(api, config).boxed();
    let mut pending = None;
    let mut retry = Retry::default();
    let mut failing = false;
    while let Some(event) = events.next().await {
        match event {
            Ok(event) => {
                let data = !matches!(event, watcher::Event::Init);
                dir.apply(event, &mut pending);
                if data && failing {
                    failing = false;
                    retry.reset();
                    tracing::info!("watching this node's pods again");
                }
            }
            Err(e) => {
                let wait = retry.next_delay();
                failing = true;
                tracing::warn!(error = %e, retry_in = ?wait, "watching this node's pods");
                dir.fail(PodsError::Watch {
                    node: node.clone(),
                    source: e,
                });
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// One list of the pods bound to `node`, into `dir`: for one-shot commands (`check`), which
/// cannot wait for a watch. A failure is kept in `dir` for the collector to report.
pub async fn list_pods(node: &str, dir: &PodDirectory) {
    let listed = async {
        let client = Client::try_default().await?;
        let api: Api<Pod> = Api::all(client);
        let params = kube::api::ListParams::default().fields(&format!("spec.nodeName={node}"));
        api.list(&params).await
    };
    match tokio::time::timeout(LIST_TIMEOUT, listed).await {
        Ok(Ok(list)) => {
            let mut pending = None;
            dir.apply(watcher::Event::Init, &mut pending);
            for pod in list.items {
                dir.apply(watcher::Event::InitApply(pod), &mut pending);
            }
            dir.apply(watcher::Event::InitDone, &mut pending);
        }
        Ok(Err(source)) => dir.fail(PodsError::List {
            node: node.to_string(),
            source,
        }),
        Err(_) => dir.fail(PodsError::ListTimeout {
            node: node.to_string(),
        }),
    }
}

/// Why this node's pod names are not (or no longer) known.
#[derive(Debug, thiserror::Error)]
pub enum PodsError {
    #[error("kubernetes client: {0}")]
    Client(#[source] kube::Error),
    #[error("watching pods on {node}: {source}")]
    Watch {
        node: String,
        #[source]
        source: watcher::Error,
    },
    #[error("listing pods on {node}: {source}")]
    List {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("listing pods on {node}: no answer within {LIST_TIMEOUT:?}")]
    ListTimeout { node: String },
}

/// How long [`list_pods`] waits for the API.
const LIST_TIMEOUT: Duration = Duration::from_secs(10);

/// Puts the cached pod names into each sample.
pub struct PodNamesCollector {
    dir: PodDirectory,
}

impl PodNamesCollector {
    pub fn new(dir: PodDirectory) -> Self {
        Self { dir }
    }
}

/// This node's pods' names, from the Kubernetes API.
pub const NAME: CollectorName = CollectorName::new("kube_pods");

// The binary builds it: it holds the client and the runtime the watch runs on.
nodemedic_collect::register!(registry::Declaration {
    name: NAME,
    order: 110,
    switch: registry::Switch::Elsewhere("[kubernetes] pod_names"),
    optional: false,
    checks: registry::Checks {
        fixtures: registry::Fixtures::NotFiles(registry::Instead::new(
            "it watches the Kubernetes API: the test runs it against a real kube-apiserver",
            "crates/nodemedic/tests/kubernetes.rs",
            "condition_label_events_rbac_and_pause_on_a_real_apiserver",
        )),
        golden: registry::Golden::None(registry::Instead::new(
            "it adds namespace/pod/container labels to the cgroups collector's series and \
             no series of its own: the test checks them on a real kube-apiserver",
            "crates/nodemedic/tests/kubernetes.rs",
            "condition_label_events_rbac_and_pause_on_a_real_apiserver",
        )),
        fuzz: registry::Fuzz::NoParser(registry::Instead::new(
            "the API's objects are decoded by kube-rs and k8s-openapi, from a real \
             kube-apiserver in the test",
            "crates/nodemedic/tests/kubernetes.rs",
            "condition_label_events_rbac_and_pause_on_a_real_apiserver",
        )),
    },
    faults: &[],
    render: None,
    build: registry::Build::ByBinary,
});

impl Collector for PodNamesCollector {
    fn name(&self) -> CollectorName {
        NAME
    }

    fn collect(&self, _ctx: &Ctx<'_>, snap: &mut Snapshot) -> Result<Collected, CollectError> {
        let s = self.dir.state.read().unwrap_or_else(|p| p.into_inner());
        let mut out = Collected::default();
        match (&s.error, s.synced) {
            (Some(e), false) => return Err(CollectError::Down(e.clone())),
            (Some(e), true) => out.warnings.push(format!("names may be stale: {e}")),
            (None, false) => out
                .warnings
                .push("waiting for the first list of this node's pods".into()),
            (None, true) => {}
        }
        if s.synced {
            snap.put_shared(Arc::clone(&s.pods));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use k8s_openapi::api::core::v1::PodStatus;
    use kube::api::ObjectMeta;

    use super::*;

    fn pod(uid: &str, name: &str, containers: &[(&str, &str)]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                uid: Some(uid.into()),
                name: Some(name.into()),
                namespace: Some("shop".into()),
                ..Default::default()
            },
            status: Some(PodStatus {
                container_statuses: Some(
                    containers
                        .iter()
                        .map(|(n, id)| ContainerStatus {
                            name: n.to_string(),
                            container_id: (!id.is_empty()).then(|| id.to_string()),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn sample(dir: &PodDirectory) -> (Snapshot, Result<Collected, CollectError>) {
        let mut snap = Snapshot::default();
        let r = nodemedic_collect::collect_once(
            &PodNamesCollector::new(dir.clone()),
            &nodemedic_collect::Paths::default(),
            &mut snap,
        );
        (snap, r)
    }

    #[test]
    fn a_relist_is_seen_whole_and_then_kept_current() {
        let dir = PodDirectory::new();
        let mut pending = None;
        let (snap, r) = sample(&dir);
        assert!(
            snap.get::<Pods>().is_none(),
            "nothing before the first list"
        );
        assert!(r.unwrap().warnings[0].contains("waiting"));

        dir.apply(watcher::Event::Init, &mut pending);
        dir.apply(
            watcher::Event::InitApply(pod(
                "u-1",
                "web-0",
                &[("app", "containerd://c0ffee"), ("sidecar", "")],
            )),
            &mut pending,
        );
        assert!(dir.pods().is_none(), "half a list is never shown");
        dir.apply(watcher::Event::InitDone, &mut pending);
        let (snap, r) = sample(&dir);
        assert!(r.unwrap().warnings.is_empty());
        let web = snap.pod("u_1").unwrap();
        assert_eq!(
            (web.namespace.as_str(), web.name.as_str()),
            ("shop", "web-0")
        );
        assert_eq!(
            web.containers,
            BTreeMap::from([("c0ffee".to_string(), "app".to_string())]),
            "a container not started yet has no ID and no entry"
        );

        let before = dir.pods().unwrap();
        dir.apply(
            watcher::Event::Apply(pod("u-2", "db-0", &[("pg", "cri-o://beef")])),
            &mut pending,
        );
        dir.apply(
            watcher::Event::Delete(pod("u-1", "web-0", &[])),
            &mut pending,
        );
        let now = dir.pods().unwrap();
        assert_eq!(now.keys().collect::<Vec<_>>(), vec!["u-2"]);
        assert_eq!(now["u-2"].containers["beef"], "pg");
        assert_eq!(before.len(), 1, "a sample's map never changes under it");

        dir.fail(PodsError::ListTimeout { node: "n1".into() });
        let (snap, r) = sample(&dir);
        assert!(
            snap.get::<Pods>().is_some(),
            "stale names are better than none"
        );
        assert!(r.unwrap().warnings[0].contains("listing pods on n1: no answer"));
    }

    #[test]
    fn an_error_before_any_list_fails_the_collector_with_the_reason() {
        let dir = PodDirectory::new();
        dir.fail(PodsError::ListTimeout { node: "n1".into() });
        let (snap, r) = sample(&dir);
        assert!(snap.get::<Pods>().is_none());
        assert!(r
            .unwrap_err()
            .to_string()
            .contains("listing pods on n1: no answer within"));
    }
}
