use std::collections::BTreeSet;
use std::path::Path;

use nodemedic_kernel::snapshot::PciDevice;
use nodemedic_kernel::{device, Snapshot};

use super::cpuset_file;
use crate::fsread::link_name;
use crate::{CollectError, Collected, Collector, Ctx};

/// The PCI devices that own interrupts (driver, NUMA node, local CPUs) and the network
/// interfaces backed by PCI devices. Reads only devices named in `/proc/interrupts`, so its
/// cost follows the number of interrupting devices, not the size of the PCI tree.
pub struct PciDevicesCollector;

impl Collector for PciDevicesCollector {
    fn name(&self) -> &'static str {
        "pci_devices"
    }

    fn collect(&self, ctx: &Ctx<'_>, snap: &mut Snapshot) -> Result<Collected, CollectError> {
        let mut out = Collected::default();
        if let Ok(entries) = std::fs::read_dir(ctx.paths.sysfs.join("class/net")) {
            for entry in entries.flatten() {
                if let Some(addr) = pci_address_behind(&entry.path().join("device")) {
                    snap.netdevs
                        .insert(entry.file_name().to_string_lossy().into_owned(), addr);
                }
            }
        }
        let mut addrs = BTreeSet::new();
        if let Some(ints) = &snap.interrupts {
            for irq in &ints.irqs {
                if let Some(pci) =
                    device::classify(&irq.chip, irq.hwirq.as_deref(), &irq.actions).pci
                {
                    addrs.insert(pci);
                }
            }
        }
        addrs.extend(snap.netdevs.values().cloned());
        let devices = ctx.paths.sysfs.join("bus/pci/devices");
        for addr in addrs {
            let dir = devices.join(&addr);
            if !dir.exists() {
                continue;
            }
            let numa_node = match ctx.reader.read_optional(&dir.join("numa_node")) {
                Ok(v) => v
                    .and_then(|s| s.trim().parse::<i64>().ok())
                    .and_then(|n| u32::try_from(n).ok()),
                Err(e) => {
                    out.warnings.push(e.to_string());
                    None
                }
            };
            let local_cpus = cpuset_file(ctx.reader, &dir.join("local_cpulist"), false)
                .unwrap_or_else(|e| {
                    out.warnings.push(e.to_string());
                    None
                });
            snap.pci_devices.insert(
                addr,
                PciDevice {
                    driver: link_name(&dir.join("driver")),
                    numa_node,
                    local_cpus,
                },
            );
        }
        Ok(out)
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
