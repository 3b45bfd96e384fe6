//! The PCI devices behind the IRQs (driver, NUMA node, local CPUs) and the network
//! interfaces' PCI addresses, from sysfs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

use nodemedic_kernel::CpuSet;
use nodemedic_sample::Snapshot;
use serde::Serialize;

use super::{complete, cpuset_file};
use crate::fsread::link_name;
use crate::sources::interrupts::device::{self, Classified};
use crate::sources::interrupts::Interrupts;
use crate::{CollectError, Collected, Collector, Ctx, ReadError};

/// A PCI device that owns interrupts: its driver, its NUMA node and the CPUs local to it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PciDevice {
    pub driver: Option<String>,
    /// `numa_node`; `None` when the kernel reports -1 (unknown) or the file is absent.
    pub numa_node: Option<u32>,
    pub local_cpus: Option<CpuSet>,
}

/// The PCI devices that own interrupts, by address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PciDevices(pub BTreeMap<String, PciDevice>);

/// Network interface name → its PCI address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Netdevs(pub BTreeMap<String, String>);

nodemedic_sample::deref! {
    PciDevices => BTreeMap<String, PciDevice>,
    Netdevs => BTreeMap<String, String>,
}

/// The PCI devices that own interrupts; after the IRQs.
pub const NAME: crate::CollectorName = crate::CollectorName::new("pci_devices");

crate::register!(crate::registry::Declaration {
    name: NAME,
    order: 40,
    switch: crate::registry::Switch::Collectors,
    optional: false,
    checks: crate::registry::Checks {
        fixtures: crate::registry::Fixtures::Trees(&[
            "8cpu-collapsed",
            "96cpu-collapsed",
            "256cpu-healthy"
        ]),
        golden: crate::registry::Golden::Series(&[(
            "96cpu-collapsed",
            "nodemedic_irq_group_info{group=\"mlx5_core 0000:3b:00.0\",driver=\"mlx5_core\"",
        )]),
        fuzz: crate::registry::Fuzz::Targets(&["cpuset"]),
    },
    faults: &[
        crate::registry::FileKind {
            name: "pci numa_node",
            tree: "8cpu-collapsed",
            pattern: "sys/bus/pci/devices/*/numa_node",
            table: false,
            optional: true,
            empty_ok: false,
            impact: crate::registry::Impact::Pci,
            may_change: &["collector/pci_devices", "count/pci"],
        },
        crate::registry::FileKind {
            name: "pci local_cpulist",
            tree: "8cpu-collapsed",
            pattern: "sys/bus/pci/devices/*/local_cpulist",
            table: false,
            optional: true,
            empty_ok: false,
            impact: crate::registry::Impact::Pci,
            may_change: &["collector/pci_devices", "count/pci"],
        },
    ],
    render: None,
    build: crate::registry::Build::Here(|_| { Some(Box::new(PciDevicesCollector::default())) }),
});

/// The PCI devices that own interrupts (driver, NUMA node, local CPUs) and the network
/// interfaces backed by PCI devices. Reads only devices named in `/proc/interrupts`, so its
/// cost follows the number of interrupting devices, not the size of the PCI tree.
///
/// sysfs is read on rescans, and when `/proc/interrupts` names a device not read yet (a
/// driver bound since); every other sample reuses what was read.
#[derive(Default)]
pub struct PciDevicesCollector {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Which device each IRQ row names, classified again only when the row changes.
    classified: Classified,
    read: Option<PciRead>,
}

struct PciRead {
    netdevs: Arc<Netdevs>,
    devices: Arc<PciDevices>,
    /// Every address looked up, found or not.
    looked_up: BTreeSet<String>,
    warnings: Vec<String>,
}

impl Collector for PciDevicesCollector {
    fn name(&self) -> crate::CollectorName {
        NAME
    }

    fn collect(&self, ctx: &Ctx<'_>, snap: &mut Snapshot) -> Result<Collected, CollectError> {
        let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let st = &mut *guard;
        let same_rows = match snap.get::<Interrupts>() {
            Some(ints) => !st.classified.update(&ints.irqs),
            None => {
                // What is read now covers no IRQ row: the next rows must not count as the same.
                st.classified = Classified::default();
                false
            }
        };
        let (ints, classified) = (snap.get::<Interrupts>(), &st.classified);
        // The PCI address of each IRQ row that names one (a device's IRQs name it each).
        let irq_addrs = || {
            ints.into_iter().flat_map(|ints| {
                ints.irqs
                    .iter()
                    .enumerate()
                    .filter_map(|(i, irq)| classified.get(i, irq.irq)?.pci.as_deref())
            })
        };
        // What was read holds until a rescan while every row is classified as in the last
        // sample (then the rows are not walked again: a PCI address per IRQ, each compared
        // through the C library's `memcmp`), or while every address they name was looked up.
        let reusable = !ctx.rescan
            && st
                .read
                .as_ref()
                .is_some_and(|c| same_rows || irq_addrs().all(|a| c.looked_up.contains(a)));
        if !reusable {
            st.read = None;
        }
        let read = st
            .read
            .get_or_insert_with(|| read_sysfs(ctx, irq_addrs().map(str::to_string).collect()));
        // What the snapshot needs, shared; the addresses looked up stay here.
        snap.put_shared(Arc::clone(&read.netdevs));
        snap.put_shared(Arc::clone(&read.devices));
        Ok(Collected {
            warnings: read.warnings.clone(),
            ..Default::default()
        })
    }
}

fn read_sysfs(ctx: &Ctx<'_>, mut addrs: BTreeSet<String>) -> PciRead {
    let mut out = Collected::default();
    let mut netdevs = BTreeMap::new();
    let mut found = BTreeMap::new();
    if let Ok(entries) = std::fs::read_dir(ctx.paths.sysfs.join("class/net")) {
        for entry in entries.flatten() {
            if let Some(addr) = pci_address_behind(&entry.path().join("device")) {
                netdevs.insert(entry.file_name().to_string_lossy().into_owned(), addr);
            }
        }
    }
    addrs.extend(netdevs.values().cloned());
    let devices = ctx.paths.sysfs.join("bus/pci/devices");
    for addr in &addrs {
        let dir = devices.join(addr);
        if !dir.exists() {
            continue;
        }
        // `-1` is "no NUMA affinity" (a single-node machine); anything unparsable is named.
        let numa_path = dir.join("numa_node");
        let numa_node = match ctx.reader.read_optional(&numa_path).and_then(|v| {
            v.map(|s| {
                complete(&numa_path, &s)?
                    .trim()
                    .parse::<i64>()
                    .map_err(|e| ReadError::parse(&numa_path, format!("not a NUMA node: {e}")))
            })
            .transpose()
        }) {
            Ok(n) => n.and_then(|n| u32::try_from(n).ok()),
            Err(e) => {
                out.warnings.push(e.to_string());
                None
            }
        };
        let local_cpus =
            cpuset_file(ctx.reader, &dir.join("local_cpulist"), false).unwrap_or_else(|e| {
                out.warnings.push(e.to_string());
                None
            });
        found.insert(
            addr.clone(),
            PciDevice {
                driver: link_name(&dir.join("driver")),
                numa_node,
                local_cpus,
            },
        );
    }
    PciRead {
        netdevs: Arc::new(Netdevs(netdevs)),
        devices: Arc::new(PciDevices(found)),
        looked_up: addrs,
        warnings: out.warnings,
    }
}

/// The PCI device a sysfs device link leads to. The link may point at the PCI function
/// itself or at a child of it (a virtio NIC's `device` is `…/0000:00:03.0/virtio2`), so the
/// nearest PCI address in the resolved path wins.
fn pci_address_behind(link: &Path) -> Option<String> {
    let real = std::fs::canonicalize(link).ok()?;
    real.components()
        .rev()
        .find_map(|c| device::find_pci_address(&c.as_os_str().to_string_lossy()))
}
