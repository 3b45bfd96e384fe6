//! Grouping interrupts by the device that owns them.

use std::fmt::Write;

use nodemedic_collect::sources::interrupts::device::{Classified, IrqDevice, IrqRole};
use nodemedic_collect::sources::interrupts::{Interrupts, IrqLine};
use nodemedic_collect::sources::irq_affinity::IrqAffinities;
use nodemedic_collect::sources::irqbalance::IrqbalanceConfig;
use nodemedic_collect::sources::pci::{Netdevs, PciDevices};
use nodemedic_collect::sources::topology::Topology;
use nodemedic_kernel::CpuSet;
use nodemedic_sample::Snapshot;

pub use nodemedic_sample::verdict::DeviceGroup;

#[derive(Debug, Clone, Copy)]
pub struct GroupingOptions {
    pub numa_local: bool,
    pub queue_irqs_only: bool,
}

struct Member<'a> {
    /// Its group's key, and its row in the table: members are sorted by both.
    key: GroupKey<'a>,
    row: usize,
    irq: u32,
    line: &'a IrqLine,
    dev: &'a IrqDevice,
    /// The device's PCI address: classified, or through the network interface it names.
    pci: Option<&'a str>,
}

/// A group's identity, borrowed while grouping; written out (`pci:…`, `dev:…`, `irq:…`), it
/// is [`DeviceGroup::key`]. Ordered as the derived order would (variant, then value), with the
/// text compared a word at a time (`nodemedic_kernel::bytes`): a lookup per IRQ per sample.
#[derive(Eq)]
enum GroupKey<'a> {
    Pci(&'a str),
    Dev(&'a str),
    Irq(u32),
}

impl Ord for GroupKey<'_> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        match (self, other) {
            (GroupKey::Pci(a), GroupKey::Pci(b)) | (GroupKey::Dev(a), GroupKey::Dev(b)) => {
                nodemedic_kernel::bytes::cmp(a.as_bytes(), b.as_bytes())
            }
            (GroupKey::Irq(a), GroupKey::Irq(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

impl PartialEq for GroupKey<'_> {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (GroupKey::Pci(a), GroupKey::Pci(b)) | (GroupKey::Dev(a), GroupKey::Dev(b)) => {
                nodemedic_kernel::bytes::eq_str(a, b)
            }
            (GroupKey::Irq(a), GroupKey::Irq(b)) => a == b,
            _ => false,
        }
    }
}

impl PartialOrd for GroupKey<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl GroupKey<'_> {
    /// The variant's place in the order, as declared.
    fn rank(&self) -> u8 {
        match self {
            GroupKey::Pci(_) => 0,
            GroupKey::Dev(_) => 1,
            GroupKey::Irq(_) => 2,
        }
    }
}

/// The device groups of `snap`, ordered by key. `classified` carries the rows' device
/// classification from one call to the next.
pub fn build_groups(
    snap: &Snapshot,
    opts: GroupingOptions,
    classified: &mut Classified,
) -> Vec<DeviceGroup> {
    let mut groups = Vec::new();
    build_groups_into(
        snap,
        opts,
        classified,
        &mut groups,
        &mut GroupScratch::default(),
    );
    groups
}

/// The storage [`build_groups_into`] sorts the IRQs in, kept by its caller from one sample
/// to the next (a row per IRQ: tens of KiB on a big node, which musl's allocator mapped and
/// unmapped every sample).
#[derive(Default)]
pub struct GroupScratch {
    /// Always empty between calls: only its capacity is kept. `'static` is the lifetime of
    /// no member; an empty list of them is a list of any lifetime's.
    members: Vec<Member<'static>>,
}

/// [`build_groups`] into `groups` (emptied first), a list the caller keeps from one sample
/// to the next, as it keeps `scratch`: on a big node each is tens of KiB.
pub fn build_groups_into(
    snap: &Snapshot,
    opts: GroupingOptions,
    classified: &mut Classified,
    groups: &mut Vec<DeviceGroup>,
    scratch: &mut GroupScratch,
) {
    let Some(ints) = snap.get::<Interrupts>() else {
        groups.clear();
        return;
    };
    classified.update(&ints.irqs);
    let classified = &*classified;
    // Every IRQ that belongs to a device, with its group's key, sorted by key and row: each
    // group's members are one run, in the table's order. One list, where a map of a list per
    // group grew each list a push at a time (on a big node, three maps of pages a sample).
    let mut members: Vec<Member<'_>> = std::mem::take(&mut scratch.members);
    members.reserve(ints.irqs.len());
    let netdevs = snap.get::<Netdevs>();
    for (row, line) in ints.irqs.iter().enumerate() {
        let Some(dev) = classified.get(row, line.irq) else {
            continue;
        };
        let pci = dev.pci.as_deref().or_else(|| {
            let instance = dev.instance.as_ref()?;
            netdevs?.get(instance).map(String::as_str)
        });
        let key = match (pci, &dev.instance) {
            (Some(pci), _) => GroupKey::Pci(pci),
            (None, Some(instance)) => GroupKey::Dev(instance),
            (None, None) => GroupKey::Irq(line.irq),
        };
        members.push(Member {
            key,
            row,
            irq: line.irq,
            line,
            dev,
            pci,
        });
    }
    // Rows are distinct, so the order is total and an unstable sort (no buffer) is stable.
    members.sort_unstable_by(|a, b| a.key.cmp(&b.key).then(a.row.cmp(&b.row)));
    let base = base_eligible(snap);
    let mut built = 0;
    for same in members.chunk_by(|a, b| a.key == b.key) {
        if built == groups.len() {
            groups.push(DeviceGroup::default());
        }
        build_group_into(snap, &same[0].key, same, &base, opts, &mut groups[built]);
        built += 1;
    }
    groups.truncate(built);
    // Back into the scratch, empty: collecting a vector's own items into one of the same
    // layout reuses its allocation (std's in-place collect; a test checks it does).
    members.clear();
    // (`filter` would keep the borrowing type; the point is the change to `'static`.)
    #[allow(clippy::unnecessary_filter_map)]
    let empty = members.into_iter().filter_map(|_| None).collect();
    scratch.members = empty;
    // The order of the rendered keys (`irq:10` before `irq:9`), as it has always been. The
    // keys are distinct, so an unstable sort gives the same order, in place: the stable one
    // took a buffer of half the groups (tens of KiB on a big node) for every sample.
    groups
        .sort_unstable_by(|a, b| nodemedic_kernel::bytes::cmp(a.key.as_bytes(), b.key.as_bytes()));
}

/// Online CPUs minus isolated, `nohz_full` and irqbalance-banned ones.
fn base_eligible(snap: &Snapshot) -> CpuSet {
    let mut set = match snap.get::<Topology>() {
        Some(t) => t.online.difference(&t.isolated).difference(&t.nohz_full),
        None => snap
            .get::<Interrupts>()
            .map(|i| i.cpus.iter().copied().collect())
            .unwrap_or_default(),
    };
    if let Some(irqb) = snap.get::<IrqbalanceConfig>() {
        set = set.difference(&irqb.banned_cpus);
    }
    set
}

/// Group `key` of `members` into `out`, a past sample's group: every field is written, and
/// its texts, lists and sets are filled again in their storage rather than allocated (about
/// ten allocations a group a sample when new).
fn build_group_into(
    snap: &Snapshot,
    key: &GroupKey<'_>,
    members: &[Member<'_>],
    base: &CpuSet,
    opts: GroupingOptions,
    out: &mut DeviceGroup,
) {
    let pci = members.iter().find_map(|m| m.pci);
    let sysfs = pci.and_then(|p| snap.get::<PciDevices>()?.get(p));
    let affinity = snap.get::<IrqAffinities>();
    let has_queues = members.iter().any(|m| m.dev.role == IrqRole::Queue);
    // Event lines are never judged, nor are control vectors but beside their device's queues
    // when asked to (`queue_irqs_only = false`): both sit on one CPU by design.
    let by_role = |m: &&Member| match m.dev.role {
        IrqRole::Queue => true,
        IrqRole::Event => false,
        IrqRole::Control => has_queues && !opts.queue_irqs_only,
        IrqRole::Other => !has_queues || !opts.queue_irqs_only,
    };
    // A device with no data queue none of whose IRQs has fired since boot (an HBA with no
    // disks, a platform line nodemedic has no name for) carries nothing to misplace: it is
    // judged from its first interrupt on. Data queues count idle: their placement hurts the
    // moment traffic starts.
    let judged = has_queues || members.iter().filter(by_role).any(|m| m.line.has_fired());
    let considered = |m: &&Member| judged && by_role(m);
    let instance = members
        .iter()
        .filter(considered)
        .chain(members.iter())
        .find_map(|m| m.dev.instance.as_deref());
    let driver = sysfs
        .and_then(|d| d.driver.as_deref())
        .or_else(|| members.iter().find_map(|m| m.dev.driver_hint.as_deref()));
    let netdev = pci.and_then(|p| {
        snap.get::<Netdevs>()?
            .iter()
            .find_map(|(name, addr)| (addr == p).then_some(name.as_str()))
    });
    out.key.clear();
    // Writing into a `String` cannot fail.
    let _ = match key {
        GroupKey::Pci(pci) => write!(out.key, "pci:{pci}"),
        GroupKey::Dev(instance) => write!(out.key, "dev:{instance}"),
        GroupKey::Irq(irq) => write!(out.key, "irq:{irq}"),
    };
    out.name.clear();
    let _ = match (instance, driver, pci) {
        (Some(i), _, _) => write!(out.name, "{i}"),
        (None, Some(d), Some(p)) => write!(out.name, "{d} {p}"),
        (None, None, Some(p)) => write!(out.name, "{p}"),
        (None, _, None) => write!(out.name, "{}", out.key),
    };
    set_text(&mut out.driver, driver);
    set_text(&mut out.pci, pci);
    set_text(&mut out.netdev, netdev);
    out.irqs.clear();
    out.other_irqs.clear();
    for m in members {
        if considered(&m) {
            out.irqs.push(m.irq);
        } else {
            out.other_irqs.push(m.irq);
        }
    }
    out.effective_cpus.clear();
    out.unknown_affinity.clear();
    for irq in &out.irqs {
        match affinity.and_then(|m| m.get(irq)?.delivery_cpus()) {
            Some(cpus) => out.effective_cpus.union_with(cpus),
            None => out.unknown_affinity.push(*irq),
        }
    }
    // An IRQ bound to an offline CPU does not fire (managed IRQs are shut down with their
    // CPU); it is not a place interrupts are delivered.
    if let Some(t) = snap.get::<Topology>() {
        out.effective_cpus.intersect_with(&t.online);
    }
    // The device's node, from any of its IRQs when none is judged (an event line's too).
    out.numa_node = sysfs.and_then(|d| d.numa_node).or_else(|| {
        out.irqs
            .iter()
            .chain(&out.other_irqs)
            .find_map(|i| affinity?.get(i)?.node)
            .and_then(|n| u32::try_from(n).ok())
    });
    let local = opts
        .numa_local
        .then(|| {
            sysfs.and_then(|d| d.local_cpus.as_ref()).or_else(|| {
                let t = snap.get::<Topology>()?;
                t.numa_nodes.get(&out.numa_node?)
            })
        })
        .flatten();
    // The base CPUs on the device's node, when that leaves any; else the base.
    out.eligible_cpus.clone_from(base);
    if let Some(cpus) = local {
        out.eligible_cpus.intersect_with(cpus);
        if out.eligible_cpus.is_empty() {
            out.eligible_cpus.clone_from(base);
        }
    }
}

/// Sets `slot` to `text`, in the storage of the text it held when it held one.
fn set_text(slot: &mut Option<String>, text: Option<&str>) {
    match (slot.as_mut(), text) {
        (Some(old), Some(new)) => {
            old.clear();
            old.push_str(new);
        }
        (_, new) => *slot = new.map(str::to_owned),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use nodemedic_collect::sources::interrupts::{Interrupts, IrqDescription};

    use super::*;

    fn row(irq: u32, chip: &str, actions: &[&str]) -> (u32, Arc<IrqDescription>) {
        let desc = Arc::new(IrqDescription {
            chip: chip.into(),
            hwirq: Some("1-edge".into()),
            trigger: None,
            actions: actions.iter().map(|a| a.to_string()).collect(),
        });
        (irq, desc)
    }

    fn keys(snap: &Snapshot, c: &mut Classified) -> Vec<(String, Vec<u32>)> {
        let opts = GroupingOptions {
            numa_local: false,
            queue_irqs_only: true,
        };
        build_groups(snap, opts, c)
            .into_iter()
            .map(|g| (g.key, [g.irqs, g.other_irqs].concat()))
            .collect()
    }

    /// The kept scratch gives the same groups as a new one, and its storage is reused from
    /// one call to the next (std's in-place collect, which it relies on, does so).
    #[test]
    fn the_kept_scratch_gives_the_same_groups_in_the_same_storage() {
        let mut ints = Interrupts::with_cpus(vec![0, 1]);
        for irq in 24..40 {
            let handler = format!("mlx5_comp{irq}@pci:0000:3b:00.0");
            let desc = row(irq, "PCI-MSIX-0000:3b:00.0", &[handler.as_str()]).1;
            ints.push_irq(irq, desc, &[1, 0]);
        }
        let mut snap = Snapshot::default();
        snap.put(ints);
        let opts = GroupingOptions {
            numa_local: false,
            queue_irqs_only: true,
        };
        let (mut c, mut groups, mut scratch) = Default::default();
        build_groups_into(&snap, opts, &mut c, &mut groups, &mut scratch);
        let storage = (scratch.members.as_ptr(), scratch.members.capacity());
        assert!(scratch.members.is_empty() && storage.1 >= 16, "{storage:?}");
        assert_eq!(
            groups,
            build_groups(&snap, opts, &mut Classified::default())
        );
        build_groups_into(&snap, opts, &mut c, &mut groups, &mut scratch);
        assert_eq!(
            (scratch.members.as_ptr(), scratch.members.capacity()),
            storage
        );
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].irqs, (24..40).collect::<Vec<u32>>());
    }

    /// Rows are classified once and reused; a row whose handler changes (a driver rebound)
    /// is classified again, a vanished IRQ is forgotten, and groups keep the order of their
    /// rendered keys.
    #[test]
    fn classification_is_kept_until_a_row_changes() {
        let mut snap = Snapshot::default();
        let mut set = |rows: Vec<(u32, Arc<IrqDescription>)>| {
            let mut ints = Interrupts::with_cpus(vec![0, 1]);
            for (irq, desc) in rows {
                ints.push_irq(irq, desc, &[1, 0]);
            }
            snap.put(ints);
            snap.clone()
        };
        let mut c = Classified::default();
        let first = set(vec![
            row(9, "IO-APIC", &["acpi", "ehci_hcd:usb1"]),
            row(10, "IO-APIC", &["i8042", "ata_piix"]),
            row(
                24,
                "PCI-MSIX-0000:3b:00.0",
                &["mlx5_comp0@pci:0000:3b:00.0"],
            ),
            row(
                25,
                "PCI-MSIX-0000:3b:00.0",
                &["mlx5_comp1@pci:0000:3b:00.0"],
            ),
        ]);
        let want = vec![
            ("irq:10".to_string(), vec![10]),
            ("irq:9".to_string(), vec![9]),
            ("pci:0000:3b:00.0".to_string(), vec![24, 25]),
        ];
        assert_eq!(keys(&first, &mut c), want);
        assert_eq!(keys(&first, &mut c), want, "the same from the kept rows");
        // IRQ 10 is now a virtio queue alone (a driver rebound); IRQ 25 is freed.
        let second = set(vec![
            row(9, "IO-APIC", &["acpi", "ehci_hcd:usb1"]),
            row(10, "IO-APIC", &["virtio3-input.0"]),
            row(
                24,
                "PCI-MSIX-0000:3b:00.0",
                &["mlx5_comp0@pci:0000:3b:00.0"],
            ),
        ]);
        assert_eq!(
            keys(&second, &mut c),
            vec![
                ("dev:virtio3".to_string(), vec![10]),
                ("irq:9".to_string(), vec![9]),
                ("pci:0000:3b:00.0".to_string(), vec![24]),
            ]
        );
        assert_eq!(c.len(), 3, "IRQ 25 is forgotten");
    }
}
