//! Grouping interrupts by the device that owns them.

use std::collections::BTreeMap;

use nodemedic_kernel::device::{classify, IrqDevice, IrqRole};
use nodemedic_kernel::{CpuSet, Snapshot};
use serde::Serialize;

/// A device and its interrupts, with where they are delivered and where they could be.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceGroup {
    /// Stable identity across samples (`pci:0000:3b:00.0`, `dev:timer`).
    pub key: String,
    /// Readable name: the device instance (`virtio3`, `nvme0`, `eth0`) or `driver address`
    /// (`mlx5_core 0000:3b:00.0`).
    pub name: String,
    pub driver: Option<String>,
    pub pci: Option<String>,
    /// Network interface backed by this device, if any.
    pub netdev: Option<String>,
    pub numa_node: Option<u32>,
    /// The IRQs the collapse verdict considers: the data-queue IRQs when the device has any
    /// (control vectors sit on one CPU by design), else all of them.
    pub irqs: Vec<u32>,
    /// The device's other IRQs (control, admin, config).
    pub other_irqs: Vec<u32>,
    /// Union of the CPUs the considered IRQs are delivered to.
    pub effective_cpus: CpuSet,
    /// CPUs the IRQs could be placed on: online, not isolated, not `nohz_full`, not banned
    /// for irqbalance, and on the device's NUMA node when that is known and non-empty.
    pub eligible_cpus: CpuSet,
    /// Considered IRQs with no affinity data (vanished, unreadable).
    pub unknown_affinity: Vec<u32>,
}

#[derive(Debug, Clone, Copy)]
pub struct GroupingOptions {
    pub numa_local: bool,
    pub queue_irqs_only: bool,
}

struct Member {
    irq: u32,
    dev: IrqDevice,
}

pub fn build_groups(snap: &Snapshot, opts: GroupingOptions) -> Vec<DeviceGroup> {
    let Some(ints) = &snap.interrupts else {
        return Vec::new();
    };
    let mut by_key: BTreeMap<String, Vec<Member>> = BTreeMap::new();
    for line in &ints.irqs {
        let mut dev = classify(&line.chip, line.hwirq.as_deref(), &line.actions);
        if dev.pci.is_none() {
            dev.pci = dev
                .instance
                .as_ref()
                .and_then(|i| snap.netdevs.get(i))
                .cloned();
        }
        let key = match (&dev.pci, &dev.instance) {
            (Some(pci), _) => format!("pci:{pci}"),
            (None, Some(instance)) => format!("dev:{instance}"),
            (None, None) => format!("irq:{}", line.irq),
        };
        by_key
            .entry(key)
            .or_default()
            .push(Member { irq: line.irq, dev });
    }
    let base = base_eligible(snap);
    by_key
        .into_iter()
        .map(|(key, members)| build_group(snap, key, &members, &base, opts))
        .collect()
}

/// Online CPUs minus isolated, `nohz_full` and irqbalance-banned ones.
fn base_eligible(snap: &Snapshot) -> CpuSet {
    let mut set = match &snap.topology {
        Some(t) => t.online.difference(&t.isolated).difference(&t.nohz_full),
        None => snap
            .interrupts
            .as_ref()
            .map(|i| i.cpus.iter().copied().collect())
            .unwrap_or_default(),
    };
    if let Some(irqb) = &snap.irqbalance {
        set = set.difference(&irqb.banned_cpus);
    }
    set
}

fn build_group(
    snap: &Snapshot,
    key: String,
    members: &[Member],
    base: &CpuSet,
    opts: GroupingOptions,
) -> DeviceGroup {
    let pci = members.iter().find_map(|m| m.dev.pci.clone());
    let sysfs = pci.as_ref().and_then(|p| snap.pci_devices.get(p));
    let has_queues = members.iter().any(|m| m.dev.role == IrqRole::Queue);
    let considered =
        |m: &&Member| !opts.queue_irqs_only || !has_queues || m.dev.role == IrqRole::Queue;
    let instance = members
        .iter()
        .filter(considered)
        .chain(members.iter())
        .find_map(|m| m.dev.instance.clone());
    let driver = sysfs
        .and_then(|d| d.driver.clone())
        .or_else(|| members.iter().find_map(|m| m.dev.driver_hint.clone()));
    let netdev = pci.as_ref().and_then(|p| {
        snap.netdevs
            .iter()
            .find_map(|(name, addr)| (addr == p).then(|| name.clone()))
    });
    let name = match (&instance, &driver, &pci) {
        (Some(i), _, _) => i.clone(),
        (None, Some(d), Some(p)) => format!("{d} {p}"),
        (None, None, Some(p)) => p.clone(),
        (None, _, None) => key.clone(),
    };
    let (irqs, other_irqs): (Vec<u32>, Vec<u32>) = {
        let (a, b): (Vec<&Member>, Vec<&Member>) = members.iter().partition(|m| considered(m));
        (
            a.iter().map(|m| m.irq).collect(),
            b.iter().map(|m| m.irq).collect(),
        )
    };
    let mut effective_cpus = CpuSet::new();
    let mut unknown_affinity = Vec::new();
    for irq in &irqs {
        match snap.affinity.get(irq).and_then(|a| a.delivery_cpus()) {
            Some(cpus) => effective_cpus = effective_cpus.union(cpus),
            None => unknown_affinity.push(*irq),
        }
    }
    // An IRQ bound to an offline CPU does not fire (managed IRQs are shut down with their
    // CPU); it is not a place interrupts are delivered.
    if let Some(t) = &snap.topology {
        effective_cpus = effective_cpus.intersection(&t.online);
    }
    let numa_node = sysfs.and_then(|d| d.numa_node).or_else(|| {
        irqs.iter()
            .find_map(|i| snap.affinity.get(i)?.node)
            .and_then(|n| u32::try_from(n).ok())
    });
    let mut eligible_cpus = base.clone();
    if opts.numa_local {
        let local = sysfs
            .and_then(|d| d.local_cpus.clone())
            .or_else(|| {
                let t = snap.topology.as_ref()?;
                t.numa_nodes.get(&numa_node?).cloned()
            })
            .map(|cpus| base.intersection(&cpus));
        if let Some(local) = local.filter(|l| !l.is_empty()) {
            eligible_cpus = local;
        }
    }
    DeviceGroup {
        key,
        name,
        driver,
        pci,
        netdev,
        numa_node,
        irqs,
        other_irqs,
        effective_cpus,
        eligible_cpus,
        unknown_affinity,
    }
}
