//! The tuning collector on this machine's real kernel files and its real ethtool netlink.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

use nodemedic_collect::sources::tuning::{Queried, SrsoState, Tuning};
use nodemedic_collect::sources::{
    EthtoolNetlink, NicLimitsSource, PciDevicesCollector, TopologyCollector, TuningCollector,
    ETHTOOL_NETLINK_UNSUPPORTED,
};
use nodemedic_collect::{CollectorSet, Paths};

/// The interface of the default route, which every CI machine has.
fn default_interface() -> String {
    let route = std::fs::read_to_string("/proc/net/route").unwrap();
    route
        .lines()
        .skip(1)
        .find_map(|l| {
            let mut w = l.split_whitespace();
            let name = w.next()?;
            (w.next()? == "00000000").then(|| name.to_string())
        })
        .expect("a default route")
}

/// ethtool netlink answers for the real interface with what `ethtool -l`/`-g` show, or the
/// kernel has no ethtool family: the one reason tolerated. Which one it was is printed.
#[test]
fn ethtool_netlink_on_the_real_interface() {
    let name = default_interface();
    let got = EthtoolNetlink::default().query(std::slice::from_ref(&name));
    let limits = &got[&name];
    match (&limits.channels, &limits.rings) {
        (Queried::Read(c), Queried::Read(r)) => {
            eprintln!("{name}: read through netlink: {c:?} {r:?}");
            let queues = std::fs::read_dir(format!("/sys/class/net/{name}/queues"))
                .unwrap()
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                .count() as u32;
            assert!(c.rx_in_use() >= 1 && c.rx_in_use() <= c.rx_max(), "{c:?}");
            assert_eq!(
                c.rx_in_use(),
                queues,
                "channels in use match the RX queues in sysfs"
            );
            assert!(r.rx >= 1 && r.rx <= r.rx_max, "{r:?}");
        }
        (c, r) => {
            for reason in [c.reason(), r.reason()] {
                let reason = reason.unwrap_or("read");
                assert!(
                    reason.starts_with(ETHTOOL_NETLINK_UNSUPPORTED),
                    "only an unsupported ethtool netlink is tolerated: {reason}"
                );
            }
            eprintln!("{name}: {ETHTOOL_NETLINK_UNSUPPORTED}");
        }
    }
    // From inside a runtime (as `check` may call it) the same answer, on a thread of its own.
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let inside =
        rt.block_on(async { EthtoolNetlink::default().query(std::slice::from_ref(&name)) });
    assert_eq!(inside, got);
    // An interface that does not exist is absent with a reason, not an error.
    let none = EthtoolNetlink::default().query(&["nm-nonexistent0".to_string()]);
    assert!(none["nm-nonexistent0"].channels.reason().is_some());
}

/// The whole collector on the real /proc and /sys: what the files say, read without a
/// warning, and the drop counters read every sample.
#[test]
fn real_settings() {
    let mut set = CollectorSet::new(vec![
        Box::new(TopologyCollector::default()),
        Box::new(PciDevicesCollector::default()),
        Box::new(TuningCollector::default()),
    ]);
    let (snap, runs) = set.sample(&Paths::default(), Duration::from_secs(1));
    for r in &runs {
        let c = r.outcome.as_ref().unwrap();
        assert!(c.warnings.is_empty(), "{}: {:?}", r.name, c.warnings);
    }
    let t = snap.get::<Tuning>().expect("tuning");
    let s = &t.settings;
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap();
    let first = cmdline.split_whitespace().next().unwrap();
    assert_eq!(
        s.cmdline
            .as_ref()
            .unwrap()
            .args
            .first()
            .map(|(k, _)| k.as_str()),
        first.split('=').next()
    );
    if let Ok(srso) =
        std::fs::read_to_string("/sys/devices/system/cpu/vulnerabilities/spec_rstack_overflow")
    {
        let (state, text) = s.srso().unwrap();
        assert_eq!(text, srso.trim());
        assert_ne!(state, SrsoState::Unknown, "{text}");
    }
    let policies = std::fs::read_dir("/sys/devices/system/cpu/cpufreq")
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("policy"))
                .count()
        })
        .unwrap_or(0);
    assert_eq!(s.cpufreq.len(), policies);
    assert_eq!(s.cpufreq_present, policies > 0);
    let groups = std::fs::read_dir("/sys/kernel/iommu_groups")
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(s.iommu_groups.len(), groups);
    let name = default_interface();
    let nic = &s.nics[&name];
    let rx = std::fs::read_dir(format!("/sys/class/net/{name}/queues"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
        .count() as u32;
    assert_eq!(nic.rx_queues, rx);
    assert_eq!(nic.rps.len() as u32, rx, "rps_cpus of every RX queue");
    let budget: u64 = std::fs::read_to_string("/proc/sys/net/core/netdev_budget")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(s.net_core.netdev_budget, Some(budget));
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap();
    assert!(thp.contains(&format!("[{}]", s.thp.as_ref().unwrap().selected)));
    let stats = t.nic_stats[&name];
    assert!(stats.rx_dropped.is_some() && stats.rx_missed_errors.is_some());
    assert!(nic.channels.value().is_some() || nic.channels.reason().is_some());
    if s.cpuidle.as_ref().is_some_and(|i| i.states > 0) {
        assert!(s.cpuidle.as_ref().unwrap().deepest_enabled.is_some());
    }

    // Between rescans the settings are the same reading; the counters are read again.
    let (again, _) = set.sample(&Paths::default(), Duration::from_secs(2));
    let t2 = again.get::<Tuning>().unwrap();
    assert!(std::sync::Arc::ptr_eq(&t.settings, &t2.settings));
    assert!(t2.nic_stats.contains_key(&name));
}

/// ethtool netlink answers for nodemedic's own network namespace: asked for the interfaces of
/// its own /sys, or of another sysfs root that lists the same interfaces (a pod with
/// hostNetwork), never for a root whose interfaces are others (a fixture, a pod's own veth).
#[test]
fn netlink_is_asked_only_for_the_interfaces_of_its_namespace() {
    use nodemedic_collect::sources::netlink_sees_host;
    assert!(netlink_sees_host(Path::new("/sys")).is_ok());

    let iface = default_interface();
    let copy = |dir: &Path, address: Option<&str>| {
        let d = dir.join("class/net").join(&iface);
        std::fs::create_dir_all(&d).unwrap();
        let own = Path::new("/sys/class/net").join(&iface);
        std::fs::copy(own.join("ifindex"), d.join("ifindex")).unwrap();
        match address {
            Some(a) => std::fs::write(d.join("address"), a).unwrap(),
            None => {
                std::fs::copy(own.join("address"), d.join("address")).unwrap();
            }
        }
    };
    // The same interface, seen through another root: netlink answers for it.
    let same = tempfile::tempdir().unwrap();
    copy(same.path(), None);
    assert!(netlink_sees_host(same.path()).is_ok());
    // Same name and index, another address: another namespace's interface.
    let other = tempfile::tempdir().unwrap();
    copy(other.path(), Some("02:00:00:00:00:01\n"));
    let why = netlink_sees_host(other.path()).unwrap_err().to_string();
    assert!(why.contains(&iface) && why.contains("hostNetwork"), "{why}");
    // No interface list at all: cannot tell.
    let none = tempfile::tempdir().unwrap();
    assert!(netlink_sees_host(none.path()).is_err());
    // The fixture trees' NICs are not this machine's.
    let fixture = nodemedic_testkit::fixture("tuning-nic-channels/sys");
    assert!(netlink_sees_host(&fixture).is_err());
}
