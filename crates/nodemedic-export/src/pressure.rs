//! The pressure detector's verdicts: the node saturated, cgroups quota-bound or starved,
//! labelled as the cgroups collector labels its series (`sources::cgroups::Labels`).

use nodemedic_collect::sources::cgroups::Labels;
use nodemedic_kernel::cgroup::Workload;
use nodemedic_sample::verdict::CgroupRates;
use nodemedic_sample::PressureVerdict;
use nodemedic_sample::Snapshot;

use crate::encoder::{Encoder, Kind};

pub(crate) fn verdicts(e: &mut Encoder, snap: &Snapshot, verdict: Option<&PressureVerdict>) {
    let Some(v) = verdict else {
        return;
    };
    e.family(
        "nodemedic_node_pressure_saturated",
        Kind::Gauge,
        "Whether the node is judged saturated (node PSI above the thresholds, CPU pressure only with busy CPUs, with hysteresis).",
    );
    e.sample(&[], f64::from(u8::from(v.node_saturated)));
    if let Some(busy) = v.node_cpu_busy {
        e.family(
            "nodemedic_node_cpu_busy_ratio",
            Kind::Gauge,
            "Share of the online CPUs' time spent running tasks between the last two cgroup readings (the root cgroup's CPU usage): what CPU saturation needs besides CPU pressure.",
        );
        e.sample(&[], busy);
    }
    let labelled: Vec<(Labels, &CgroupRates)> = v
        .cgroups
        .iter()
        .filter_map(|r| {
            let g = snap.cgroups.as_ref()?.groups.get(&r.path)?;
            Some((Labels::of(snap, &r.path, g), r))
        })
        .collect();
    type Pick = fn(&CgroupRates) -> Option<bool>;
    let families: [(&str, &str, Pick); 2] = [
        (
            "nodemedic_cgroup_quota_bound",
            "Whether the cgroup is judged held back by its CPU quota: throttled in many periods while its tasks wait for CPU (with hysteresis).",
            |r| Some(r.quota_bound),
        ),
        (
            "nodemedic_cgroup_starved",
            "Whether the pod or service is judged starved: its tasks wait for CPU or memory above the thresholds (with hysteresis). Containers share their pod's verdict.",
            |r| (!matches!(r.workload, Workload::Container { .. })).then_some(r.starved),
        ),
    ];
    for (name, help, pick) in families {
        e.family(name, Kind::Gauge, help);
        for (l, r) in &labelled {
            if let Some(v) = pick(r) {
                e.sample(l.get(), f64::from(u8::from(v)));
            }
        }
    }
}
