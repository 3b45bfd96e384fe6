//! The builds the binary gives to the engine's collector registry: the collectors that live
//! in nodemedic-probe and nodemedic-kube. `run` and `check` take their collectors from here,
//! and differ only in how the long-lived sources start.

use nodemedic_collect::Collector;
use nodemedic_engine::Registry;

use crate::config::Config;

/// Who the collectors are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum For {
    /// The daemon: the probes' ring buffer reader and the pod watch run on the current tokio
    /// runtime.
    Daemon,
    /// `check`: no reader, and the pod names from one list of the API (check cannot wait for
    /// a watch), so that `kubectl exec … nodemedic check` names pods as `/metrics` does.
    Check,
}

/// Every collector, with the probes and, in a pod, this node's pod names.
pub fn registry(config: &Config, who: For) -> Registry<'_> {
    Registry::new()
        .build_with(nodemedic_kube::POD_NAMES, move |_| pod_names(config, who))
        .build_with(nodemedic_probe::PERF_PROBES, move |engine| {
            Some(Box::new(crate::probes::collector(
                config,
                &engine.host.lsm,
                who == For::Daemon,
            )))
        })
}

/// This node's pod names, when nodemedic runs in Kubernetes and names pods.
fn pod_names(config: &Config, who: For) -> Option<Box<dyn Collector>> {
    let node = config.kubernetes.resolve().ok().flatten()?;
    if !config.kubernetes.pod_names {
        return None;
    }
    let dir = nodemedic_kube::PodDirectory::new();
    match who {
        For::Daemon => {
            tokio::spawn(nodemedic_kube::watch_pods(node, dir.clone()));
        }
        For::Check => match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt.block_on(nodemedic_kube::list_pods(&node, &dir)),
            Err(e) => tracing::warn!(error = %e, "no runtime for the pod list"),
        },
    }
    Some(Box::new(nodemedic_kube::PodNamesCollector::new(dir)))
}
