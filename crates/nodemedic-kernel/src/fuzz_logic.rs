//! Entry points shared by the cargo-fuzz targets (`fuzz/`) and the corpus replay test. Each
//! runs one parser on arbitrary bytes and checks invariants a correct result must keep; any
//! panic, in the parser or here, is a bug.

use crate::{cpuset::CpuSet, device, interrupts, irqbalance, softirqs, softnet};

pub fn interrupts(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(p) = interrupts::parse(&text) {
        for irq in &p.irqs {
            assert!(irq.counts.len() <= p.cpus.len());
            let _ = irq.total();
            let _ = device::classify(&irq.chip, irq.hwirq.as_deref(), &irq.actions);
        }
        for arch in &p.arch {
            assert!(arch.counts.len() <= p.cpus.len());
        }
    }
}

pub fn softirqs(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(p) = softirqs::parse(&text) {
        for row in &p.rows {
            assert!(row.counts.len() <= p.cpus.len());
        }
    }
}

pub fn softnet(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let p = softnet::parse(&text);
    let _ = softnet::assign_cpus(&p.rows, &[0, 1, 2, 3]);
}

pub fn cpuset(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(set) = CpuSet::parse_list(&text) {
        assert_eq!(
            CpuSet::parse_list(&set.to_list_string()).ok(),
            Some(set.clone())
        );
        assert_eq!(CpuSet::parse_mask(&set.to_mask_string()).ok(), Some(set));
    }
    if let Ok(set) = CpuSet::parse_mask(&text) {
        assert_eq!(CpuSet::parse_mask(&set.to_mask_string()).ok(), Some(set));
    }
}

pub fn irqbalance_env(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let env = irqbalance::parse_env_file(&text);
    let _ = irqbalance::banned_cpus(&env);
}

/// A fuzz entry point.
pub type Target = fn(&[u8]);

/// Every target, by the name its fuzz target and corpus directory use.
pub const TARGETS: &[(&str, Target)] = &[
    ("interrupts", interrupts),
    ("softirqs", softirqs),
    ("softnet", softnet),
    ("cpuset", cpuset),
    ("irqbalance_env", irqbalance_env),
];
