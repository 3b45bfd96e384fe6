//! The tuning audit on this machine's real /proc, /sys and ethtool netlink: no warning, and
//! where a setting is not the guest's (no cpufreq, no IOMMU groups) a note saying so.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

use nodemedic_collect::sources::topology::Topology;
use nodemedic_collect::sources::tuning::{SrsoState, Tuning};
use nodemedic_collect::sources::TuningCollector;
use nodemedic_collect::{monotonic_now, CollectorSet, Paths};
use nodemedic_detect::{
    CollapseConfig, CollapseDetector, HurtingConfig, Severity, TuningConfig, TuningDetector,
    TuningRule,
};

fn has_entries(dir: &str, prefix: &str) -> bool {
    std::fs::read_dir(dir).is_ok_and(|d| {
        d.flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(prefix))
    })
}

#[test]
fn this_machine_has_no_tuning_warning() {
    let mut set = CollectorSet::all().with(Box::new(TuningCollector::default()));
    let mut irq = CollapseDetector::new(CollapseConfig::default(), HurtingConfig::default());
    // Warnings at once, so that a symptom in the interval could not hide behind hysteresis.
    let mut audit = TuningDetector::new(TuningConfig {
        raise_after: 1,
        clear_after: 1,
        ..Default::default()
    });
    let mut last = None;
    for i in 0..2 {
        if i > 0 {
            std::thread::sleep(Duration::from_secs(1));
        }
        let (snap, runs) = set.sample(&Paths::default(), monotonic_now());
        for r in &runs {
            let c = r.outcome.as_ref().unwrap();
            if r.name == nodemedic_collect::sources::tuning::NAME {
                assert!(c.warnings.is_empty(), "{:?}", c.warnings);
            }
        }
        let verdicts = irq.observe(&snap);
        last = Some((audit.observe(&snap, &verdicts), snap));
    }
    let (v, snap) = last.unwrap();
    for f in &v.findings {
        eprintln!(
            "{:?} {} {}: {}",
            f.severity,
            f.rule.as_str(),
            f.subject,
            f.evidence
        );
    }
    assert_eq!(v.warnings().count(), 0, "{:#?}", v.findings);
    let s = &snap.get::<Tuning>().unwrap().settings;
    let rules: Vec<TuningRule> = v.findings.iter().map(|f| f.rule).collect();

    if !has_entries("/sys/devices/system/cpu/cpufreq", "policy") {
        let note = v
            .findings
            .iter()
            .find(|f| f.rule == TuningRule::CpufreqAbsent)
            .expect("a cpufreq note");
        assert_eq!(note.severity, Severity::Info);
        if s.hypervisor != Some(false) {
            assert!(
                note.evidence.contains("belongs to the hypervisor"),
                "{note:?}"
            );
        }
    } else {
        assert!(!rules.contains(&TuningRule::CpufreqAbsent));
    }
    if !has_entries("/sys/kernel/iommu_groups", "") {
        let note = v
            .findings
            .iter()
            .find(|f| f.rule == TuningRule::IommuAbsent)
            .expect("an IOMMU note");
        if s.hypervisor != Some(false) {
            assert!(
                note.evidence.contains("belongs to the hypervisor"),
                "{note:?}"
            );
        }
    }
    // The SRSO state as the kernel prints it, info when it costs.
    let srso = Path::new("/sys/devices/system/cpu/vulnerabilities/spec_rstack_overflow");
    if let Ok(text) = std::fs::read_to_string(srso) {
        let state = SrsoState::classify(&text);
        let found = v.findings.iter().find(|f| f.rule == TuningRule::Srso);
        assert_eq!(found.is_some(), state.costs(), "{text}");
        if let Some(f) = found {
            assert!(f.evidence.contains(text.trim()), "{f:?}");
            assert_eq!(f.severity, Severity::Info);
        }
    }
    // Every NIC uses all the channels it has, or has as many as CPUs: no channel finding.
    for (name, nic) in &s.nics {
        if let Some(c) = nic.channels.value() {
            let cpus = snap.get::<Topology>().unwrap().online.len() as u32;
            if c.rx_in_use() >= c.rx_max().min(cpus) {
                assert!(
                    !v.findings
                        .iter()
                        .any(|f| f.rule == TuningRule::NicChannels && &f.subject == name),
                    "{name}"
                );
            }
        }
    }
}
