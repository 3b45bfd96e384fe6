//! The tuning collector's series (docs/tuning.md): the settings a dashboard or an alert
//! needs next to the audit's findings (which the exporter renders from the audit's verdict).
//!
//! Cardinality is a few series per NIC, per IOMMU domain type and per (governor, driver),
//! never per queue, per CPU or per IOMMU group: a 256-CPU host with 64 queues per NIC and 256
//! cpufreq policies adds about thirty series. The evidence, cost and fix of a finding are
//! prose and stay on `/status` and in `nodemedic check`; the series says which rule fired on
//! what, so an alert can point there.
//!
//! Absent data has no series: an interface whose driver does not report channels or rings
//! (or a kernel without ethtool netlink) has no `nodemedic_net_channels`, a virtual machine
//! without IOMMU groups or cpufreq policies has no `nodemedic_iommu_groups` or
//! `nodemedic_cpufreq_policies` samples (the audit's `iommu_absent` and `cpufreq_absent`
//! findings say whose settings those are).

use nodemedic_exposition::{Encoder, Kind};

use crate::registry::Render;
use crate::sources::tuning::{NicStats, Tuning};

/// The settings and NIC counters the tuning collector read.
pub(super) fn render(e: &mut Encoder, ctx: &mut Render<'_>) {
    let Some(t) = ctx.snapshot.get::<Tuning>() else {
        return;
    };
    nic_limits(e, t);
    nic_queues(e, t);
    nic_drops(e, t);
    let s = &t.settings;
    e.family(
        "nodemedic_iommu_groups",
        Kind::Gauge,
        "IOMMU groups by default domain type: strict (DMA), lazy (DMA-FQ), passthrough (identity), blocked, unmanaged, unknown.",
    );
    for (ty, n) in s.iommu_groups_by_type() {
        e.sample(&[("type", ty)], n as f64);
    }
    e.family(
        "nodemedic_cpufreq_policies",
        Kind::Gauge,
        "cpufreq policies by scaling governor and driver (unknown where the file was unreadable).",
    );
    for ((governor, driver), n) in s.cpufreq_policies_by_governor() {
        e.sample(&[("governor", governor), ("driver", driver)], n as f64);
    }
}

fn nic_limits(e: &mut Encoder, t: &Tuning) {
    let nics = &t.settings.nics;
    e.family(
        "nodemedic_net_channels",
        Kind::Gauge,
        "A NIC's channels (ethtool -l) by kind (rx, tx, other, combined) and limit (current, max); absent where the driver does not report them.",
    );
    for (name, nic) in nics {
        let Some(c) = nic.channels.value() else {
            continue;
        };
        for (kind, current, max) in [
            ("rx", c.rx, c.rx_max),
            ("tx", c.tx, c.tx_max),
            ("other", c.other, c.other_max),
            ("combined", c.combined, c.combined_max),
        ] {
            for (limit, v) in [("current", current), ("max", max)] {
                e.sample(
                    &[("interface", name), ("kind", kind), ("limit", limit)],
                    f64::from(v),
                );
            }
        }
    }
    e.family(
        "nodemedic_net_ring_entries",
        Kind::Gauge,
        "A NIC's ring sizes in descriptors (ethtool -g) by direction (rx, tx) and limit (current, max); absent where the driver does not report them.",
    );
    for (name, nic) in nics {
        let Some(r) = nic.rings.value() else {
            continue;
        };
        for (direction, current, max) in [("rx", r.rx, r.rx_max), ("tx", r.tx, r.tx_max)] {
            for (limit, v) in [("current", current), ("max", max)] {
                e.sample(
                    &[
                        ("interface", name),
                        ("direction", direction),
                        ("limit", limit),
                    ],
                    f64::from(v),
                );
            }
        }
    }
}

/// The queues the kernel made for the NIC: the only channel count there is where ethtool
/// netlink is missing (a virtual machine's virtio-net often has no limits to ask).
fn nic_queues(e: &mut Encoder, t: &Tuning) {
    e.family(
        "nodemedic_net_queues",
        Kind::Gauge,
        "A NIC's queues under /sys/class/net/<interface>/queues, by direction (rx, tx).",
    );
    for (name, nic) in &t.settings.nics {
        for (direction, n) in [("rx", nic.rx_queues), ("tx", nic.tx_queues)] {
            // The kernel gives every registered netdev at least one queue each way, so zero
            // means the directory was missing or unreadable: no data, not a NIC without queues.
            if n > 0 {
                e.sample(
                    &[("interface", name), ("direction", direction)],
                    f64::from(n),
                );
            }
        }
    }
}

/// The NIC statistics the `nic_rings` rule watches, as counters: the kernel folds some of
/// them into others (`rx_missed_errors` is also counted in `/proc/net/dev`'s drops), so they
/// are separate families rather than one family whose label values a `sum` would add up.
fn nic_drops(e: &mut Encoder, t: &Tuning) {
    type Field = fn(&NicStats) -> Option<u64>;
    let fields: [(&str, &str, Field); 3] = [
        (
            "nodemedic_net_rx_missed_errors",
            "Packets the NIC missed for lack of room in its RX ring or buffer (statistics/rx_missed_errors).",
            |s| s.rx_missed_errors,
        ),
        (
            "nodemedic_net_rx_fifo_errors",
            "RX FIFO overruns on the NIC (statistics/rx_fifo_errors).",
            |s| s.rx_fifo_errors,
        ),
        (
            "nodemedic_net_rx_dropped",
            "Packets received but dropped by the NIC or the kernel (statistics/rx_dropped).",
            |s| s.rx_dropped,
        ),
    ];
    for (name, help, field) in fields {
        e.family(name, Kind::Counter, help);
        for (interface, stats) in &t.nic_stats {
            if let Some(v) = field(stats) {
                e.sample(&[("interface", interface)], v as f64);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::BTreeMap;
    use std::sync::Arc;

    use nodemedic_exposition::Format;
    use nodemedic_sample::Snapshot;

    use super::*;
    use crate::sources::tuning::{
        Channels, CpufreqPolicy, IommuDomain, IommuGroup, NicSettings, Queried, Rings,
        TuningSettings,
    };

    fn nic(channels: Queried<Channels>, rings: Queried<Rings>) -> NicSettings {
        NicSettings {
            pci: Some("0000:3b:00.0".into()),
            rx_queues: 1,
            tx_queues: 2,
            rps: BTreeMap::new(),
            xps: BTreeMap::new(),
            channels,
            rings,
        }
    }

    fn policy(n: u32, driver: Option<&str>, governor: Option<&str>) -> CpufreqPolicy {
        CpufreqPolicy {
            policy: n,
            cpus: None,
            driver: driver.map(str::to_string),
            governor: governor.map(str::to_string),
            energy_performance_preference: None,
            cur_khz: None,
            max_khz: None,
        }
    }

    fn group(id: u32, domain: IommuDomain) -> IommuGroup {
        IommuGroup {
            id,
            domain,
            devices: Vec::new(),
        }
    }

    fn render(snap: &Snapshot) -> String {
        let mut e = Encoder::new(Format::Text);
        let options = crate::registry::MetricsOptions::default();
        let mut scratch = crate::registry::Scratch::default();
        let mut ctx = Render {
            snapshot: snap,
            options: &options,
            groups: &[],
            pressure: None,
            scratch: &mut scratch,
        };
        super::render(&mut e, &mut ctx);
        e.finish()
    }

    fn samples(text: &str) -> Vec<&str> {
        text.lines().filter(|l| !l.starts_with('#')).collect()
    }

    #[test]
    fn channels_rings_queues_and_drops_per_interface() {
        let mut nics = BTreeMap::new();
        nics.insert(
            "ens1f0".to_string(),
            nic(
                Queried::Read(Channels {
                    other: 1,
                    other_max: 1,
                    combined: 1,
                    combined_max: 8,
                    ..Default::default()
                }),
                Queried::Read(Rings {
                    rx: 256,
                    rx_max: 4096,
                    tx: 512,
                    tx_max: 4096,
                }),
            ),
        );
        // A driver that reports neither: queues and counters only.
        nics.insert(
            "eth0".to_string(),
            nic(
                Queried::Absent("ethtool netlink unsupported: no family".into()),
                Queried::Absent("the driver does not report rings".into()),
            ),
        );
        let mut nic_stats = BTreeMap::new();
        nic_stats.insert(
            "ens1f0".to_string(),
            NicStats {
                rx_missed_errors: Some(1234),
                rx_fifo_errors: Some(12),
                rx_dropped: None,
            },
        );
        nic_stats.insert("eth0".to_string(), NicStats::default());
        // No `queues/` directory read (a damaged tree): no queue series either.
        let mut bare = nic(
            Queried::Absent("not queried".into()),
            Queried::Absent("not queried".into()),
        );
        bare.rx_queues = 0;
        bare.tx_queues = 0;
        nics.insert("eth1".to_string(), bare);
        let mut snap = Snapshot::default();
        snap.put(Tuning {
            settings: Arc::new(TuningSettings {
                nics,
                ..Default::default()
            }),
            nic_stats,
        });
        let text = render(&snap);
        let got = samples(&text);
        let channels: Vec<&str> = got
            .iter()
            .copied()
            .filter(|l| l.starts_with("nodemedic_net_channels{"))
            .collect();
        assert_eq!(channels.len(), 8, "{channels:#?}");
        assert!(channels.iter().all(|l| l.contains("interface=\"ens1f0\"")));
        for line in [
            "nodemedic_net_channels{interface=\"ens1f0\",kind=\"combined\",limit=\"current\"} 1",
            "nodemedic_net_channels{interface=\"ens1f0\",kind=\"combined\",limit=\"max\"} 8",
            "nodemedic_net_channels{interface=\"ens1f0\",kind=\"rx\",limit=\"max\"} 0",
            "nodemedic_net_ring_entries{interface=\"ens1f0\",direction=\"rx\",limit=\"current\"} 256",
            "nodemedic_net_ring_entries{interface=\"ens1f0\",direction=\"tx\",limit=\"current\"} 512",
            "nodemedic_net_ring_entries{interface=\"ens1f0\",direction=\"rx\",limit=\"max\"} 4096",
            "nodemedic_net_queues{interface=\"eth0\",direction=\"rx\"} 1",
            "nodemedic_net_queues{interface=\"eth0\",direction=\"tx\"} 2",
            "nodemedic_net_rx_missed_errors_total{interface=\"ens1f0\"} 1234",
            "nodemedic_net_rx_fifo_errors_total{interface=\"ens1f0\"} 12",
        ] {
            assert!(got.contains(&line), "no `{line}` in\n{text}");
        }
        assert_eq!(
            got.iter()
                .filter(|l| l.starts_with("nodemedic_net_ring_entries{"))
                .count(),
            4
        );
        // Unreadable counters and absent limits have no series, not a zero.
        assert!(!text.contains("nodemedic_net_rx_dropped_total{"), "{text}");
        assert!(
            !got.iter()
                .any(|l| l.contains("interface=\"eth0\"") && !l.starts_with("nodemedic_net_queues")),
            "{text}"
        );
        assert!(!text.contains("interface=\"eth1\""), "{text}");
        // No IOMMU groups, no cpufreq: declared, without samples.
        assert!(text.contains("# TYPE nodemedic_iommu_groups gauge\n# HELP"));
        assert!(!text.contains("nodemedic_iommu_groups{"));
        assert!(!text.contains("nodemedic_cpufreq_policies{"));
    }

    #[test]
    fn iommu_groups_and_cpufreq_policies_are_counted() {
        let mut snap = Snapshot::default();
        snap.put(Tuning {
            settings: Arc::new(TuningSettings {
                iommu_groups: vec![
                    group(7, IommuDomain::Strict),
                    group(24, IommuDomain::Strict),
                    group(31, IommuDomain::Lazy),
                    group(40, IommuDomain::Unknown("DMA-XYZ".into())),
                ],
                iommu_groups_present: true,
                cpufreq: vec![
                    policy(0, Some("intel_pstate"), Some("powersave")),
                    policy(1, Some("intel_pstate"), Some("powersave")),
                    policy(2, Some("intel_pstate"), Some("performance")),
                    policy(3, None, Some("powersave")),
                ],
                cpufreq_present: true,
                ..Default::default()
            }),
            nic_stats: BTreeMap::new(),
        });
        let text = render(&snap);
        let got = samples(&text);
        for line in [
            "nodemedic_iommu_groups{type=\"strict\"} 2",
            "nodemedic_iommu_groups{type=\"lazy\"} 1",
            "nodemedic_iommu_groups{type=\"unknown\"} 1",
            "nodemedic_cpufreq_policies{governor=\"powersave\",driver=\"intel_pstate\"} 2",
            "nodemedic_cpufreq_policies{governor=\"performance\",driver=\"intel_pstate\"} 1",
            "nodemedic_cpufreq_policies{governor=\"powersave\",driver=\"unknown\"} 1",
        ] {
            assert!(got.contains(&line), "no `{line}` in\n{text}");
        }
        assert_eq!(
            got.iter()
                .filter(|l| l.starts_with("nodemedic_iommu_groups{")
                    || l.starts_with("nodemedic_cpufreq_policies{"))
                .count(),
            6,
            "{text}"
        );
        assert!(
            !text.contains("nodemedic_tuning_finding"),
            "no verdict, no family"
        );
    }
}
