//! Which device an interrupt belongs to, read from the chip and action names of a
//! `/proc/interrupts` row. Pure string work: the sysfs lookups that refine it (driver, NUMA
//! node, interface name) happen in the collectors.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Serialize;

use crate::sources::interrupts::{IrqDescription, IrqLine};

/// What an interrupt row says about its device.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct IrqDevice {
    /// PCI address (`0000:3b:00.0`), from the chip name, an `@pci:` action suffix, or the
    /// hwirq of old-style `PCI-MSI` chips.
    pub pci: Option<String>,
    /// Device instance named by the action (`virtio3`, `nvme0`, `eth0`, `ens1f0`).
    pub instance: Option<String>,
    /// Driver implied by the action name (`mlx5_core`, `ice`, `nvme`, `virtio`).
    pub driver_hint: Option<String>,
    pub role: IrqRole,
}

/// Whether an IRQ carries a data queue (whose placement matters for throughput), is a
/// device's control/admin vector (which sits idle on one CPU by design), or is an event line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IrqRole {
    Queue,
    Control,
    /// A platform or port event line: an ACPI event (`ACPI:Ged`), a PCIe port's services
    /// (`PCIe PME`, `aerdrv`, `pciehp`, `pcie-dpc`, `PCIe bwctrl`), an IOMMU's faults (`dmar0`,
    /// `AMD-Vi0-Evt`, `arm-smmu-v3-evtq`). No data flows through it; it fires on rare events
    /// and stays where the kernel first put it, often the first CPU of its mask.
    Event,
    #[default]
    Other,
}

/// Handler names of event lines (see [`IrqRole::Event`]), as the kernel's drivers request
/// them.
fn is_event_handler(action: &str) -> bool {
    const NAMES: &[&str] = &[
        "ACPI:Ged",
        "acpi",
        "PCIe PME",
        "aerdrv",
        "pciehp",
        "pcie-dpc",
        "PCIe bwctrl",
        "PCIe BW notif",
        "AMD-Vi",
    ];
    // Intel VT-d: `dmar0`, and its page-request and perfmon lines `dmar0-prq`, `dmar0-perf`.
    let dmar = action
        .strip_prefix("dmar")
        .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()));
    NAMES.contains(&action)
        || dmar
        || action.starts_with("AMD-Vi")
        || action.starts_with("arm-smmu")
}

/// Drivers that prefix their queue names with their own name (`ice-ens1f0-TxRx-5`).
const PREFIXING_DRIVERS: &[&str] = &[
    "ice", "i40e", "iavf", "ixgbevf", "ena", "idpf", "gve", "qede", "hns3", "igc",
];

pub fn classify(chip: &str, hwirq: Option<&str>, actions: &[String]) -> IrqDevice {
    let mut dev = IrqDevice {
        pci: find_pci_address(chip).or_else(|| pci_from_msi_hwirq(chip, hwirq)),
        ..Default::default()
    };
    // A shared line (several actions) is legacy INTx, or a PCIe port's services sharing its
    // one vector (`PCIe PME, aerdrv, pciehp`): no queue semantics.
    let [action] = actions else {
        if dev.pci.is_none() {
            dev.pci = actions.iter().find_map(|a| find_pci_address(a));
        }
        if !actions.is_empty() && actions.iter().all(|a| is_event_handler(a)) {
            dev.role = IrqRole::Event;
        }
        return dev;
    };
    let action = action.as_str();
    if is_event_handler(action) {
        dev.instance = Some(action.to_string());
        dev.role = IrqRole::Event;
        return dev;
    }
    if let Some((name, addr)) = action.split_once("@pci:") {
        // mlx5: `mlx5_comp3@pci:0000:3b:00.0`, `mlx5_async17@pci:…`.
        dev.pci = dev.pci.or_else(|| find_pci_address(addr));
        if let Some(prefix) = name.split('_').next().filter(|p| !p.is_empty()) {
            dev.driver_hint = Some(format!("{prefix}_core"));
        }
        dev.role = if name.contains("_comp") {
            IrqRole::Queue
        } else {
            IrqRole::Control
        };
        return dev;
    }
    if let Some(addr) = find_pci_address(action) {
        // `ice-0000:86:00.0:misc`: a control vector named after the device.
        dev.pci = dev.pci.or(Some(addr));
        dev.driver_hint = action.split(['-', '[']).next().map(str::to_string);
        dev.role = IrqRole::Control;
        return dev;
    }
    if let Some(rest) = action.strip_prefix("virtio") {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if !digits.is_empty() {
            dev.instance = Some(format!("virtio{digits}"));
            dev.driver_hint = Some("virtio".into());
            let queue = rest[digits.len()..].trim_start_matches('-');
            dev.role = match queue {
                "config" => IrqRole::Control,
                "" => IrqRole::Other,
                _ => IrqRole::Queue,
            };
            return dev;
        }
    }
    if let Some((ctrl, q)) = nvme_queue(action) {
        dev.instance = Some(format!("nvme{ctrl}"));
        dev.driver_hint = Some("nvme".into());
        dev.role = if q == 0 {
            IrqRole::Control
        } else {
            IrqRole::Queue
        };
        return dev;
    }
    if let Some(prefix) = netdev_queue_prefix(action) {
        match prefix.split_once('-') {
            Some((drv, ifname)) if PREFIXING_DRIVERS.contains(&drv) && !ifname.is_empty() => {
                dev.driver_hint = Some(drv.to_string());
                dev.instance = Some(ifname.to_string());
            }
            _ => dev.instance = Some(prefix.to_string()),
        }
        dev.role = IrqRole::Queue;
        return dev;
    }
    dev.instance = Some(action.to_string());
    dev
}

/// `nvme0q12` → `(0, 12)`.
fn nvme_queue(action: &str) -> Option<(u32, u32)> {
    let rest = action.strip_prefix("nvme")?;
    let (ctrl, q) = rest.split_once('q')?;
    Some((ctrl.parse().ok()?, q.parse().ok()?))
}

/// `eth0-TxRx-7` → `eth0`; also `-rx-N`, `-tx-N`, `-fp-N`, `-Tx-Rx-N`.
fn netdev_queue_prefix(action: &str) -> Option<&str> {
    let (head, index) = action.rsplit_once('-')?;
    if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    const KINDS: &[&str] = &[
        "-TxRx", "-txrx", "-rx", "-tx", "-Rx", "-Tx", "-fp", "-Tx-Rx", "-rxtx", "-comb",
    ];
    KINDS
        .iter()
        .filter_map(|k| head.strip_suffix(k))
        .max_by_key(|p| std::cmp::Reverse(p.len()))
        .filter(|p| !p.is_empty())
}

/// Finds a PCI address (`dddd:bb:dd.f`, hex) anywhere in `s`.
pub fn find_pci_address(s: &str) -> Option<String> {
    let b = s.as_bytes();
    const LEN: usize = 12;
    if b.len() < LEN {
        return None;
    }
    (0..=b.len() - LEN).find_map(|i| {
        let w = &b[i..i + LEN];
        let hex = |r: std::ops::Range<usize>| w[r].iter().all(u8::is_ascii_hexdigit);
        let ok = hex(0..4)
            && w[4] == b':'
            && hex(5..7)
            && w[7] == b':'
            && hex(8..10)
            && w[10] == b'.'
            && (b'0'..=b'7').contains(&w[11]);
        let boundary_before = i == 0 || !b[i - 1].is_ascii_hexdigit();
        (ok && boundary_before).then(|| String::from_utf8_lossy(w).to_ascii_lowercase())
    })
}

/// Old kernels print MSI chips without the address (`PCI-MSI 1572864-edge`); the hwirq then
/// encodes it: `index | devid << 11 | domain << 27`, with devid = bus << 8 | devfn.
fn pci_from_msi_hwirq(chip: &str, hwirq: Option<&str>) -> Option<String> {
    // x86's PCI MSI domains and arm64's GICv3 ITS encode the requester the same way.
    if !chip.ends_with("PCI-MSI") && !chip.ends_with("PCI-MSIX") && chip != "ITS-MSI" {
        return None;
    }
    let hw: u64 = hwirq?.parse().ok()?;
    let devid = (hw >> 11) & 0xffff;
    let domain = hw >> 27;
    if domain > 0xffff {
        return None;
    }
    let (bus, devfn) = (devid >> 8, devid & 0xff);
    Some(format!(
        "{domain:04x}:{bus:02x}:{:02x}.{}",
        devfn >> 3,
        devfn & 7
    ))
}

/// What [`classify`] said about each IRQ row, kept between samples. A row's chip, hwirq and
/// handlers change only when a driver (re)binds; classifying all 422 rows of a 256-CPU node
/// every sample was a tenth of the collapse detector's sample, and the PCI collector did it
/// again. A row that changed is classified again, and rows of IRQs that are gone are
/// dropped. Rows are kept in the order of the last update's lines: `/proc/interrupts` lists
/// them in the same order every sample, so an update is one pass over both.
#[derive(Debug, Default)]
pub struct Classified {
    rows: Vec<Row>,
}

#[derive(Debug)]
struct Row {
    irq: u32,
    /// The description classified, shared with the line it came from.
    desc: Arc<IrqDescription>,
    dev: IrqDevice,
}

impl Row {
    fn new(line: &IrqLine) -> Self {
        let d = &line.desc;
        Self {
            irq: line.irq,
            desc: Arc::clone(d),
            dev: classify(&d.chip, d.hwirq.as_deref(), &d.actions),
        }
    }

    /// Whether `line`, already matched to this row by IRQ number, still reads the same:
    /// the same description (a parser reusing the previous table's shares it), or an equal
    /// one.
    fn describes(&self, line: &IrqLine) -> bool {
        Arc::ptr_eq(&self.desc, &line.desc) || self.desc == line.desc
    }
}

impl Classified {
    /// Classifies the rows that are new or changed since the last call; forgets IRQs that
    /// are gone. Afterwards row `i` is `lines[i]`'s (see [`Classified::get`]). `false` when
    /// every row is the last call's, as it was classified then.
    pub fn update(&mut self, lines: &[IrqLine]) -> bool {
        let same_irqs = self.rows.len() == lines.len()
            && self.rows.iter().zip(lines).all(|(r, l)| r.irq == l.irq);
        if same_irqs {
            let mut changed = false;
            for (row, line) in self.rows.iter_mut().zip(lines) {
                if !row.describes(line) {
                    *row = Row::new(line);
                    changed = true;
                }
            }
            return changed;
        }
        // IRQs came or went (or moved): match by number, once.
        let mut old: HashMap<u32, Row> = std::mem::take(&mut self.rows)
            .into_iter()
            .map(|r| (r.irq, r))
            .collect();
        self.rows = lines
            .iter()
            .map(|line| match old.remove(&line.irq) {
                Some(row) if row.describes(line) => row,
                _ => Row::new(line),
            })
            .collect();
        true
    }

    /// What row `i` of the lines given to the last [`Classified::update`] was classified as,
    /// when it is IRQ `irq`.
    pub fn get(&self, i: usize, irq: u32) -> Option<&IrqDevice> {
        self.rows.get(i).filter(|r| r.irq == irq).map(|r| &r.dev)
    }

    /// The rows classified.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(chip: &str, hw: Option<&str>, action: &str) -> IrqDevice {
        classify(chip, hw, &[action.to_string()])
    }

    #[test]
    fn virtio() {
        let d = c("PCI-MSIX-0000:00:04.0", Some("1"), "virtio3-input.0");
        assert_eq!(d.pci.as_deref(), Some("0000:00:04.0"));
        assert_eq!(d.instance.as_deref(), Some("virtio3"));
        assert_eq!(d.role, IrqRole::Queue);
        assert_eq!(
            c("PCI-MSIX-0000:00:04.0", None, "virtio3-config").role,
            IrqRole::Control
        );
    }

    #[test]
    fn mlx5() {
        let d = c(
            "IR-PCI-MSIX-0000:3b:00.0",
            Some("5"),
            "mlx5_comp4@pci:0000:3b:00.0",
        );
        assert_eq!(d.pci.as_deref(), Some("0000:3b:00.0"));
        assert_eq!(d.driver_hint.as_deref(), Some("mlx5_core"));
        assert_eq!(d.instance, None);
        assert_eq!(d.role, IrqRole::Queue);
        assert_eq!(
            c("x", None, "mlx5_async0@pci:0000:3b:00.0").role,
            IrqRole::Control
        );
    }

    #[test]
    fn nvme_and_netdevs() {
        let d = c("IR-PCI-MSIX-0000:d8:00.0", Some("3"), "nvme0q3");
        assert_eq!(
            (d.instance.as_deref(), d.role),
            (Some("nvme0"), IrqRole::Queue)
        );
        assert_eq!(c("", None, "nvme1q0").role, IrqRole::Control);
        let d = c("IR-PCI-MSIX-0000:5e:00.0", Some("12"), "ice-ens1f0-TxRx-11");
        assert_eq!(d.instance.as_deref(), Some("ens1f0"));
        assert_eq!(d.driver_hint.as_deref(), Some("ice"));
        let d = c("IR-PCI-MSI", Some("1572864"), "eth0-TxRx-7");
        assert_eq!(d.instance.as_deref(), Some("eth0"));
        assert_eq!(d.pci.as_deref(), Some("0000:03:00.0"));
        let d = c("x", None, "ice-0000:86:00.0:misc");
        assert_eq!(
            (d.pci.as_deref(), d.role),
            (Some("0000:86:00.0"), IrqRole::Control)
        );
        assert_eq!(c("x", None, "eth0-rx-0").instance.as_deref(), Some("eth0"));
        let d = c("IR-PCI-MSI-0000:00:17.0", Some("0"), "ahci[0000:00:17.0]");
        assert_eq!(d.driver_hint.as_deref(), Some("ahci"));
        let d = c("ITS-MSI", Some("65536"), "nvme0q1");
        assert_eq!(d.pci.as_deref(), Some("0000:00:04.0"));
    }

    #[test]
    fn unrelated_irqs() {
        let d = c("IO-APIC", Some("2"), "timer");
        assert_eq!(
            (d.pci, d.instance.as_deref(), d.role),
            (None, Some("timer"), IrqRole::Other)
        );
        let d = classify("IO-APIC", Some("8"), &["rtc0".into(), "i8042".into()]);
        assert_eq!(d.instance, None);
        assert_eq!(find_pci_address("A0000:00:1f.7"), None);
        assert_eq!(
            find_pci_address("-0000:00:1F.7:"),
            Some("0000:00:1f.7".into())
        );
    }

    /// Event lines on every architecture, alone or sharing a port's vector; names that only
    /// look alike are not.
    #[test]
    fn event_lines() {
        for (chip, hw, action) in [
            ("GICv3", Some("34"), "ACPI:Ged"),
            ("IO-APIC", Some("9"), "acpi"),
            ("DMAR-MSI", Some("0"), "dmar0"),
            ("DMAR-MSI", Some("3"), "dmar3-prq"),
            ("IR-PCI-MSI-0000:00:1c.0", Some("0"), "aerdrv"),
            ("PCI-MSI", Some("458752"), "pciehp"),
            ("ITS-MSI", Some("8192"), "PCIe PME"),
            ("IR-PCI-MSI-0000:00:00.2", Some("0"), "AMD-Vi0-Evt"),
            ("ITS-MSI", Some("0"), "arm-smmu-v3-evtq"),
        ] {
            assert_eq!(c(chip, hw, action).role, IrqRole::Event, "{action}");
        }
        let port = classify(
            "IR-PCI-MSI-0000:5d:00.0",
            Some("0"),
            &["PCIe PME".into(), "aerdrv".into(), "pciehp".into()],
        );
        assert_eq!(
            (port.pci.as_deref(), port.role),
            (Some("0000:5d:00.0"), IrqRole::Event)
        );
        let shared = classify("IO-APIC", Some("9"), &["acpi".into(), "ehci_hcd".into()]);
        assert_eq!(
            shared.role,
            IrqRole::Other,
            "an event line shared with a device"
        );
        assert_eq!(c("x", None, "dmarc-rx-0").role, IrqRole::Queue);
        assert_eq!(c("x", None, "acpi-tx-1").role, IrqRole::Queue);
    }

    /// A row that changes in place is classified again; rows that move, come or go are
    /// matched by IRQ number, and `get` answers only for the row at that position.
    #[test]
    fn classified_rows_follow_their_lines() {
        let line = |irq: u32, action: &str| {
            IrqLine::new(
                irq,
                Arc::new(IrqDescription {
                    chip: "PCI-MSIX-0000:00:03.0".into(),
                    hwirq: Some("1-edge".into()),
                    trigger: None,
                    actions: vec![action.into()],
                }),
            )
        };
        let instance =
            |c: &Classified, i: usize, irq: u32| c.get(i, irq).and_then(|d| d.instance.clone());
        let mut c = Classified::default();
        c.update(&[line(24, "virtio2-input.0"), line(25, "virtio2-output.0")]);
        assert_eq!(instance(&c, 0, 24).as_deref(), Some("virtio2"));
        assert_eq!(c.get(0, 25), None, "row 0 is IRQ 24");
        // Same IRQs, one handler renamed (a driver rebound): classified again.
        c.update(&[line(24, "virtio3-input.0"), line(25, "virtio2-output.0")]);
        assert_eq!(instance(&c, 0, 24).as_deref(), Some("virtio3"));
        assert_eq!(instance(&c, 1, 25).as_deref(), Some("virtio2"));
        // Reordered, one gone, one new.
        c.update(&[line(26, "nvme0q1"), line(24, "virtio3-input.0")]);
        assert_eq!(c.len(), 2);
        assert_eq!(instance(&c, 0, 26).as_deref(), Some("nvme0"));
        assert_eq!(instance(&c, 1, 24).as_deref(), Some("virtio3"));
    }
}
