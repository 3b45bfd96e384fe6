//! The collectors, one per kernel source, in dependency order.

use std::collections::BTreeSet;
use std::path::Path;

use nodemedic_kernel::snapshot::{IrqAffinity, IrqbalanceConfig, PciDevice, Topology};
use nodemedic_kernel::{device, interrupts, irqbalance, softirqs, softnet, CpuSet, Snapshot};

use crate::fsread::{link_name, read, read_into, read_optional, ReadError};
use crate::{CollectError, Collected, Collector, Paths};

pub fn all() -> Vec<Box<dyn Collector>> {
    vec![
        Box::new(TopologyCollector),
        Box::new(InterruptsCollector),
        Box::new(IrqAffinityCollector::default()),
        Box::new(PciDevicesCollector),
        Box::new(SoftirqsCollector),
        Box::new(SoftnetCollector),
        Box::new(IrqbalanceConfigCollector),
    ]
}

fn cpuset_file(path: &Path, mask: bool) -> Result<Option<CpuSet>, ReadError> {
    let Some(text) = read_optional(path)? else {
        return Ok(None);
    };
    let parsed = if mask {
        CpuSet::parse_mask(&text)
    } else {
        CpuSet::parse_list(&text)
    };
    parsed.map(Some).map_err(|e| ReadError::parse(path, e))
}

fn skipped_warnings(path: &Path, skipped: &[nodemedic_kernel::SkippedLine]) -> Vec<String> {
    skipped
        .iter()
        .map(|s| format!("{}:{}: skipped: {}", path.display(), s.line, s.reason))
        .collect()
}

/// Online, isolated and `nohz_full` CPUs and NUMA nodes, from sysfs.
pub struct TopologyCollector;

impl Collector for TopologyCollector {
    fn name(&self) -> &'static str {
        "topology"
    }

    fn collect(&self, paths: &Paths, snap: &mut Snapshot) -> Result<Collected, CollectError> {
        let cpu = paths.sysfs.join("devices/system/cpu");
        let online_path = cpu.join("online");
        let online = CpuSet::parse_list(&read(&online_path)?)
            .map_err(|e| ReadError::parse(&online_path, e))?;
        let mut out = Collected::default();
        let mut optional = |name: &str| match cpuset_file(&cpu.join(name), false) {
            Ok(set) => set,
            Err(e) => {
                out.warnings.push(e.to_string());
                None
            }
        };
        let possible = optional("possible");
        let isolated = optional("isolated").unwrap_or_default();
        let nohz_full = optional("nohz_full").unwrap_or_default();
        let mut numa_nodes = std::collections::BTreeMap::new();
        let node_dir = paths.sysfs.join("devices/system/node");
        if let Ok(entries) = std::fs::read_dir(&node_dir) {
            for entry in entries.flatten() {
                let name = entry.file_name();
                let Some(id) = name
                    .to_str()
                    .and_then(|n| n.strip_prefix("node"))
                    .and_then(|n| n.parse::<u32>().ok())
                else {
                    continue;
                };
                match cpuset_file(&entry.path().join("cpulist"), false) {
                    Ok(Some(cpus)) => {
                        numa_nodes.insert(id, cpus);
                    }
                    Ok(None) => {}
                    Err(e) => out.warnings.push(e.to_string()),
                }
            }
        }
        snap.topology = Some(Topology {
            online,
            possible,
            isolated,
            nohz_full,
            numa_nodes,
        });
        Ok(out)
    }
}

/// `/proc/interrupts`.
pub struct InterruptsCollector;

impl Collector for InterruptsCollector {
    fn name(&self) -> &'static str {
        "interrupts"
    }

    fn collect(&self, paths: &Paths, snap: &mut Snapshot) -> Result<Collected, CollectError> {
        let path = paths.procfs.join("interrupts");
        let parsed = interrupts::parse(&read(&path)?).map_err(|e| ReadError::parse(&path, e))?;
        let warnings = skipped_warnings(&path, &parsed.skipped);
        snap.interrupts = Some(parsed);
        Ok(Collected { warnings })
    }
}

/// `/proc/irq/N/{smp_affinity,effective_affinity,node}`.
///
/// An IRQ descriptor's NUMA node is fixed when it is allocated, so `node` is read once per
/// IRQ and remembered while the IRQ exists: a third fewer file reads every sample.
#[derive(Default)]
pub struct IrqAffinityCollector {
    nodes: std::sync::Mutex<std::collections::HashMap<u32, Option<i32>>>,
}

impl Collector for IrqAffinityCollector {
    fn name(&self) -> &'static str {
        "irq_affinity"
    }

    fn collect(&self, paths: &Paths, snap: &mut Snapshot) -> Result<Collected, CollectError> {
        let dir = paths.procfs.join("irq");
        let entries = std::fs::read_dir(&dir).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => ReadError::Missing(dir.clone()),
            std::io::ErrorKind::PermissionDenied => ReadError::PermissionDenied(dir.clone()),
            _ => ReadError::Io {
                path: dir.clone(),
                source: e,
            },
        })?;
        let mut irqs: Vec<u32> = entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect();
        irqs.sort_unstable();
        let mut out = Collected::default();
        let mut buf = String::with_capacity(128);
        let mut path = dir.clone();
        let mut vanished = 0usize;
        let mut errors = Vec::new();
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        nodes.retain(|irq, _| irqs.binary_search(irq).is_ok());
        for irq in &irqs {
            path.push(irq.to_string());
            match read_irq(&mut path, &mut buf, nodes.get(irq).copied()) {
                Ok(Some(aff)) => {
                    nodes.insert(*irq, aff.node);
                    snap.affinity.insert(*irq, aff);
                }
                // The IRQ was freed between listing the directory and reading it.
                Ok(None) => vanished += 1,
                Err(e) => errors.push(e),
            }
            path.pop();
        }
        if vanished > 0 {
            out.warnings.push(format!(
                "{vanished} IRQ(s) vanished between listing {} and reading them",
                dir.display()
            ));
        }
        if !irqs.is_empty() && snap.affinity.is_empty() {
            if let Some(first) = errors.into_iter().next() {
                return Err(first.into());
            }
        } else {
            out.warnings.extend(errors.iter().map(ToString::to_string));
        }
        Ok(out)
    }
}

fn read_irq(
    path: &mut std::path::PathBuf,
    buf: &mut String,
    known_node: Option<Option<i32>>,
) -> Result<Option<IrqAffinity>, ReadError> {
    let mut aff = IrqAffinity::default();
    path.push("smp_affinity");
    let smp = read_into(path, buf);
    let result = match smp {
        Ok(()) => CpuSet::parse_mask(buf).map_err(|e| ReadError::parse(path, e)),
        Err(e) => Err(e),
    };
    path.pop();
    match result {
        Ok(set) => aff.smp = Some(set),
        Err(e) if e.is_missing() => {
            // No smp_affinity: either the IRQ vanished, or the file is absent for this
            // IRQ (per-CPU interrupts have none). Tell them apart by the directory.
            if !path.exists() {
                return Ok(None);
            }
        }
        Err(e) => return Err(e),
    }
    path.push("effective_affinity");
    match read_into(path, buf) {
        Ok(()) => {
            aff.effective = Some(CpuSet::parse_mask(buf).map_err(|e| ReadError::parse(path, e))?)
        }
        Err(e) if e.is_missing() => {}
        Err(e) => {
            path.pop();
            return Err(e);
        }
    }
    path.pop();
    aff.node = match known_node {
        Some(node) => node,
        None => {
            path.push("node");
            let node = read_into(path, buf)
                .ok()
                .and_then(|_| buf.trim().parse().ok());
            path.pop();
            node
        }
    };
    Ok(Some(aff))
}

/// The PCI devices that own interrupts (driver, NUMA node, local CPUs) and the network
/// interfaces backed by PCI devices. Reads only devices named in `/proc/interrupts`, so its
/// cost follows the number of interrupting devices, not the size of the PCI tree.
pub struct PciDevicesCollector;

impl Collector for PciDevicesCollector {
    fn name(&self) -> &'static str {
        "pci_devices"
    }

    fn collect(&self, paths: &Paths, snap: &mut Snapshot) -> Result<Collected, CollectError> {
        let mut out = Collected::default();
        if let Ok(entries) = std::fs::read_dir(paths.sysfs.join("class/net")) {
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
        let devices = paths.sysfs.join("bus/pci/devices");
        for addr in addrs {
            let dir = devices.join(&addr);
            if !dir.exists() {
                continue;
            }
            let numa_node = match read_optional(&dir.join("numa_node")) {
                Ok(v) => v
                    .and_then(|s| s.trim().parse::<i64>().ok())
                    .and_then(|n| u32::try_from(n).ok()),
                Err(e) => {
                    out.warnings.push(e.to_string());
                    None
                }
            };
            let local_cpus = cpuset_file(&dir.join("local_cpulist"), false).unwrap_or_else(|e| {
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

/// `/proc/softirqs`.
pub struct SoftirqsCollector;

impl Collector for SoftirqsCollector {
    fn name(&self) -> &'static str {
        "softirqs"
    }

    fn collect(&self, paths: &Paths, snap: &mut Snapshot) -> Result<Collected, CollectError> {
        let path = paths.procfs.join("softirqs");
        let parsed = softirqs::parse(&read(&path)?).map_err(|e| ReadError::parse(&path, e))?;
        let warnings = skipped_warnings(&path, &parsed.skipped);
        snap.softirqs = Some(parsed);
        Ok(Collected { warnings })
    }
}

/// `/proc/net/softnet_stat`.
pub struct SoftnetCollector;

impl Collector for SoftnetCollector {
    fn name(&self) -> &'static str {
        "softnet"
    }

    fn collect(&self, paths: &Paths, snap: &mut Snapshot) -> Result<Collected, CollectError> {
        let path = paths.procfs.join("net/softnet_stat");
        let text = read(&path)?;
        let parsed = softnet::parse(&text);
        let mut warnings = skipped_warnings(&path, &parsed.skipped);
        if parsed.rows.is_empty() && !text.trim().is_empty() {
            return Err(ReadError::parse(&path, "no usable rows").into());
        }
        let online: Vec<u32> = match &snap.topology {
            Some(t) => t.online.iter().collect(),
            None => {
                if parsed.rows.iter().any(|r| r.cpu.is_none()) {
                    warnings.push(
                        "topology unknown: softnet rows without a CPU column mapped to CPUs 0..n"
                            .into(),
                    );
                }
                (0..parsed.rows.len() as u32).collect()
            }
        };
        let (placed, unplaced) = softnet::assign_cpus(&parsed.rows, &online);
        if unplaced > 0 {
            warnings.push(format!(
                "{}: {unplaced} row(s) more than online CPUs, not attributed",
                path.display()
            ));
        }
        snap.softnet = Some(placed);
        Ok(Collected { warnings })
    }
}

/// irqbalance's banned CPUs from `/etc/default/irqbalance` or `/etc/sysconfig/irqbalance`
/// under the root filesystem.
pub struct IrqbalanceConfigCollector;

impl Collector for IrqbalanceConfigCollector {
    fn name(&self) -> &'static str {
        "irqbalance_config"
    }

    fn collect(&self, paths: &Paths, snap: &mut Snapshot) -> Result<Collected, CollectError> {
        let mut out = Collected::default();
        for rel in ["etc/default/irqbalance", "etc/sysconfig/irqbalance"] {
            let path = paths.rootfs.join(rel);
            let Some(text) = read_optional(&path)? else {
                continue;
            };
            let env = irqbalance::parse_env_file(&text);
            out.warnings.extend(skipped_warnings(&path, &env.skipped));
            let banned_cpus =
                irqbalance::banned_cpus(&env).map_err(|e| ReadError::parse(&path, e))?;
            snap.irqbalance = Some(IrqbalanceConfig {
                source: Some(path.display().to_string()),
                banned_cpus,
            });
            return Ok(out);
        }
        snap.irqbalance = Some(IrqbalanceConfig::default());
        Ok(out)
    }
}
