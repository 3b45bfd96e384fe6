//! The I/O tuning audit: settings that silently cost throughput, each tied to evidence from
//! this node and a fix.
//!
//! A setting alone is **info**: strict IOMMU, a powersave governor or the SRSO mitigation
//! can be deliberate trade-offs. A setting together with its symptom on this node is a
//! **warning**, through [`Hysteresis`] since the symptom is a rate:
//! - fewer RX channels than the NIC has and than there are local CPUs, RPS off, while the
//!   device's NET_RX is concentrated on one CPU or softnet drops rise on its CPUs; when the
//!   driver's channel maximum cannot be read (a fixture tree, a foreign network namespace,
//!   a driver without `get_channels`), one RX queue with RPS off on several local CPUs is
//!   the same finding, with the reason the maximum is unknown and RPS as the fix;
//! - RX rings below their maximum while `rx_missed_errors` or `rx_fifo_errors` rise;
//! - `netdev_budget` while softnet `time_squeeze` rises;
//! - `netdev_max_backlog` while softnet `dropped` rises;
//! - strict IOMMU on a NIC's or NVMe drive's group while that device takes many interrupts.
//!
//! The signals the IRQ detector already computes (each device's interrupt rate and hottest
//! CPU, softnet growth on its CPUs) are taken from its verdicts, not recomputed. Nothing is
//! changed on the node: every finding says what to run, and a kernel argument needs a reboot.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use nodemedic_collect::sources::pci::{Netdevs, PciDevices};
use nodemedic_collect::sources::topology::Topology;
use nodemedic_collect::sources::tuning::{
    IommuDomain, NicSettings, Queried, SrsoState, Tuning, TuningSettings,
};
use nodemedic_kernel::{counter, CpuSet};
use nodemedic_sample::Snapshot;
use serde::{Deserialize, Serialize};

use crate::collapse::{fill_per_cpu, of_cpu, GroupVerdict};
use crate::finding::{Finding, Severity};
use crate::hysteresis::{ratio, ConfigError, Hysteresis, Latch};

/// The audit's rules and verdict (types of the sample, shared with the outputs).
pub use nodemedic_sample::verdict::{TuningFinding, TuningRule, TuningVerdict};

/// The `[tuning]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TuningConfig {
    /// Rules to mute: a site may run strict IOMMU or full mitigations on purpose.
    pub ignore: Vec<TuningRule>,
    /// A NIC's NET_RX is concentrated when the CPU its interrupts mostly go to runs at
    /// least this many NET_RX softirqs per second…
    pub net_rx_min_rate: f64,
    /// …and at least this share of the node's NET_RX softirqs.
    pub net_rx_share: f64,
    /// Strict IOMMU costs when the device takes at least this many interrupts per second
    /// (each completion unmaps, and a strict unmap waits for the IOTLB flush).
    pub iommu_irq_rate: f64,
    pub raise_after: u32,
    pub clear_after: u32,
}

impl Default for TuningConfig {
    fn default() -> Self {
        Self {
            ignore: Vec::new(),
            net_rx_min_rate: 1000.0,
            net_rx_share: 0.5,
            iommu_irq_rate: 10_000.0,
            raise_after: 3,
            clear_after: 3,
        }
    }
}

impl TuningConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        ratio("net_rx_share", self.net_rx_share)?;
        for (field, value) in [
            ("net_rx_min_rate", self.net_rx_min_rate),
            ("iommu_irq_rate", self.iommu_irq_rate),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(ConfigError::Below {
                    field,
                    min: 0.0,
                    value,
                });
            }
        }
        self.hysteresis().validate()
    }

    pub fn hysteresis(&self) -> Hysteresis {
        Hysteresis {
            raise_after: self.raise_after,
            clear_after: self.clear_after,
        }
    }

    fn muted(&self, rule: TuningRule) -> bool {
        self.ignore.contains(&rule)
    }
}

/// The findings as the shared [`Finding`] type.
pub fn findings(v: &TuningVerdict) -> Vec<Finding> {
    v.findings.iter().map(Finding::from).collect()
}

/// The counters of one sample the rates come from. The per-CPU ones are lists ordered by
/// CPU, refilled in place every sample ([`Counters::fill`]): on a 256-CPU node a map per
/// sample was four hash tables of 256 entries built, hashed and freed, and the C library
/// mapped and unmapped their memory every time (BENCHMARKS.md, "The sampler's maps").
#[derive(Debug, Clone, Default)]
struct Counters {
    at: Duration,
    /// (CPU, NET_RX softirqs), by CPU.
    net_rx: Vec<(u32, u64)>,
    /// (CPU, (dropped, time_squeeze)), by CPU.
    softnet: Vec<(u32, (u64, u64))>,
    /// Interface → (rx_missed_errors, rx_fifo_errors).
    nic: HashMap<String, (Option<u64>, Option<u64>)>,
}

impl Counters {
    /// `snap`'s counters, into `self`'s buffers.
    fn fill(&mut self, snap: &Snapshot) {
        self.at = snap.at;
        fill_per_cpu(snap, &mut self.net_rx, &mut self.softnet);
        self.nic.clear();
        if let Some(t) = snap.get::<Tuning>() {
            self.nic.extend(
                t.nic_stats
                    .iter()
                    .map(|(n, s)| (n.clone(), (s.rx_missed_errors, s.rx_fifo_errors))),
            );
        }
    }
}

/// Growth between two samples, node-wide and per interface. Refilled in place
/// ([`Rates::between`]).
#[derive(Debug, Default)]
struct Rates {
    seconds: f64,
    /// (CPU, NET_RX softirqs per second), by CPU.
    net_rx: Vec<(u32, f64)>,
    net_rx_total: f64,
    /// (CPU, (dropped, squeezed)) since the previous sample, where either grew, by CPU.
    softnet: Vec<(u32, (u64, u64))>,
    /// Interface → (rx_missed growth, rx_fifo growth).
    nic: HashMap<String, (u64, u64)>,
}

impl Rates {
    /// The growth from `before` to `now`, into `self`; false (and `self` unchanged) when
    /// the clock did not move forward.
    fn between(&mut self, before: &Counters, now: &Counters) -> bool {
        let Some(seconds) = now.at.checked_sub(before.at).map(|d| d.as_secs_f64()) else {
            return false;
        };
        if seconds <= 0.0 {
            return false;
        }
        self.seconds = seconds;
        self.net_rx.clear();
        self.net_rx_total = 0.0;
        for (cpu, n) in &now.net_rx {
            if let Some(d) = of_cpu(&before.net_rx, *cpu).and_then(|b| counter::delta(b, *n)) {
                let rate = d as f64 / seconds;
                self.net_rx_total += rate;
                self.net_rx.push((*cpu, rate));
            }
        }
        self.softnet.clear();
        for (cpu, (dropped, squeezed)) in &now.softnet {
            if let Some((bd, bs)) = of_cpu(&before.softnet, *cpu) {
                // softnet_stat is 32-bit and not widened: wrap-aware.
                let d = counter::delta(bd, *dropped).unwrap_or(0);
                let s = counter::delta(bs, *squeezed).unwrap_or(0);
                if d > 0 || s > 0 {
                    self.softnet.push((*cpu, (d, s)));
                }
            }
        }
        self.nic.clear();
        for (name, (missed, fifo)) in &now.nic {
            let Some((bm, bf)) = before.nic.get(name) else {
                continue;
            };
            let grow = |b: &Option<u64>, n: &Option<u64>| match (b, n) {
                (Some(b), Some(n)) => counter::delta(*b, *n).unwrap_or(0),
                _ => 0,
            };
            self.nic
                .insert(name.clone(), (grow(bm, missed), grow(bf, fifo)));
        }
        true
    }

    fn dropped(&self) -> u64 {
        self.softnet.iter().map(|(_, (d, _))| d).sum()
    }

    fn squeezed(&self) -> u64 {
        self.softnet.iter().map(|(_, (_, s))| s).sum()
    }

    fn cpus_where(&self, pick: impl Fn(&(u64, u64)) -> bool) -> CpuSet {
        CpuSet::from_cpus(
            self.softnet
                .iter()
                .filter(|(_, v)| pick(v))
                .map(|(c, _)| *c),
        )
    }
}

/// The audit's state machine: the previous sample's counters and one latch per
/// (rule, subject) whose warning depends on a rate.
#[derive(Debug, Default)]
pub struct TuningDetector {
    config: TuningConfig,
    previous: Option<Counters>,
    /// The counters before `previous`, whose buffers the next sample refills.
    spare: Counters,
    /// The last growth, refilled every sample.
    rates: Rates,
    latches: BTreeMap<(TuningRule, String), Latch>,
}

/// The measured costs the findings cite (see docs/tuning.md for the sources).
const IOMMU_COST: &str = "every DMA unmap waits for an IOTLB flush; one published NVMe \
    benchmark measured 233k TPS with iommu.strict=1 against 835k with lazy invalidation \
    (iommu.strict=0) on the same machine, and Talos Linux changed its default to lazy.";
const CHANNELS_COST: &str = "each channel's interrupts and NET_RX softirqs run on one CPU: with \
    fewer channels than CPUs, the receive work of the whole NIC is bounded by that many cores, \
    and once one saturates (ksoftirqd at 100%) packets are delayed and dropped.";
const SRSO_COST: &str = "the same article measured 5-12% of random I/O between \
    spec_rstack_overflow=microcode and off; Safe RET (the default) adds a return thunk to \
    every kernel return on top.";

impl TuningDetector {
    pub fn new(config: TuningConfig) -> Self {
        Self {
            config,
            ..Default::default()
        }
    }

    pub fn config(&self) -> &TuningConfig {
        &self.config
    }

    /// Feeds one snapshot, with the IRQ detector's verdicts of the same snapshot (for each
    /// device's interrupt rate, hottest CPU and softnet growth), and returns the findings.
    /// Without the tuning data in the snapshot there is nothing to audit.
    pub fn observe(&mut self, snap: &Snapshot, irq: &[GroupVerdict]) -> TuningVerdict {
        let mut now = std::mem::take(&mut self.spare);
        now.fill(snap);
        let moved = match &self.previous {
            Some(before) => self.rates.between(before, &now),
            None => false,
        };
        if let Some(old) = self.previous.replace(now) {
            self.spare = old;
        }
        let rates = moved.then_some(&self.rates);
        let mut out = TuningVerdict {
            interval_seconds: rates.map(|r| r.seconds),
            findings: Vec::new(),
        };
        let Some(tuning) = snap.get::<Tuning>() else {
            return out;
        };
        let s = tuning.settings.as_ref();
        let mut audit = Audit {
            config: &self.config,
            snap,
            irq,
            rates,
            latches: &mut self.latches,
            seen: Vec::new(),
            findings: Vec::new(),
        };
        for (name, nic) in &s.nics {
            audit.nic_channels(name, nic);
            audit.nic_rings(name, nic);
        }
        audit.netdev_budget(s);
        audit.netdev_max_backlog(s);
        audit.iommu(s);
        audit.srso(s);
        audit.mitigations(s);
        audit.cpufreq(s);
        let Audit {
            seen, mut findings, ..
        } = audit;
        // A subject that went away (or a rule muted since) takes its latch with it.
        self.latches.retain(|k, _| seen.contains(k));
        findings.retain(|f| !self.config.muted(f.rule));
        findings.sort_by(|a, b| (a.rule, &a.subject).cmp(&(b.rule, &b.subject)));
        out.findings = findings;
        out
    }
}

/// One sample's audit.
struct Audit<'a> {
    config: &'a TuningConfig,
    snap: &'a Snapshot,
    irq: &'a [GroupVerdict],
    rates: Option<&'a Rates>,
    latches: &'a mut BTreeMap<(TuningRule, String), Latch>,
    seen: Vec<(TuningRule, String)>,
    findings: Vec<TuningFinding>,
}

impl Audit<'_> {
    /// Feeds this sample's symptom to the (rule, subject) latch; whether it is on.
    fn latch(&mut self, rule: TuningRule, subject: &str, symptom: bool) -> bool {
        let key = (rule, subject.to_string());
        let latch = self.latches.entry(key.clone()).or_default();
        latch.update(symptom, &self.config.hysteresis(), self.snap.timestamp);
        self.seen.push(key);
        latch.active
    }

    fn push(
        &mut self,
        rule: TuningRule,
        warning: bool,
        subject: &str,
        evidence: String,
        cost: &str,
        fix: String,
    ) {
        if self.config.muted(rule) {
            return;
        }
        self.findings.push(TuningFinding {
            rule,
            severity: if warning {
                Severity::Warning
            } else {
                Severity::Info
            },
            subject: subject.to_string(),
            evidence,
            cost: cost.to_string(),
            fix,
        });
    }

    /// The IRQ detector's group for a NIC: by interface name, else by PCI address.
    fn group_of(&self, name: &str, pci: Option<&str>) -> Option<&GroupVerdict> {
        self.irq
            .iter()
            .find(|v| v.group.netdev.as_deref() == Some(name))
            .or_else(|| {
                let pci = pci?;
                self.irq
                    .iter()
                    .find(|v| v.group.pci.as_deref() == Some(pci))
            })
    }

    /// The CPUs a PCI device is local to and that are online; all online CPUs when the
    /// device says nothing (a VM's NIC without NUMA information).
    fn local_cpus(&self, pci: Option<&str>) -> Option<CpuSet> {
        let online = self.snap.get::<Topology>().map(|t| &t.online)?;
        let local = pci
            .and_then(|p| self.snap.get::<PciDevices>()?.get(p))
            .and_then(|d| d.local_cpus.as_ref())
            .map(|l| l.intersection(online))
            .filter(|l| !l.is_empty());
        Some(local.unwrap_or_else(|| online.clone()))
    }

    /// The NIC's receive symptom this sample: its NET_RX piles onto one CPU, or packets are
    /// dropped on the CPUs its interrupts go to. Empty without rates or without the IRQ
    /// detector's group for the device.
    fn rx_symptom(&self, name: &str, nic: &NicSettings, local: &CpuSet) -> Vec<String> {
        let mut symptom = Vec::new();
        let (Some(r), Some(g)) = (self.rates, self.group_of(name, nic.pci.as_deref())) else {
            return symptom;
        };
        let e = &g.evidence;
        if let (Some(cpu), Some(rate)) = (e.hottest_cpu, e.hottest_net_rx_rate) {
            let share = if r.net_rx_total > 0.0 {
                of_cpu(&r.net_rx, cpu).unwrap_or(0.0) / r.net_rx_total
            } else {
                0.0
            };
            if rate >= self.config.net_rx_min_rate
                && share >= self.config.net_rx_share
                && local.len() > 1
            {
                symptom.push(format!(
                    "NET_RX is concentrated: CPU {cpu} runs {rate:.0} NET_RX softirqs/s, {:.0}% of the node's",
                    share * 100.0
                ));
            }
        }
        if let Some(d) = e.softnet_dropped.filter(|d| *d > 0) {
            symptom.push(format!(
                "softnet dropped {d} packets on its CPUs ({}) in the last {:.0} s",
                g.group.effective_cpus, r.seconds
            ));
        }
        symptom
    }

    fn nic_channels(&mut self, name: &str, nic: &NicSettings) {
        let rule = TuningRule::NicChannels;
        let Some(local) = self.local_cpus(nic.pci.as_deref()) else {
            return;
        };
        let ch = match &nic.channels {
            Queried::Read(ch) => ch,
            Queried::Absent(why) => return self.nic_single_queue(name, nic, &local, why),
        };
        let (used, max) = (ch.rx_in_use(), ch.rx_max());
        let want = (max as usize).min(local.len());
        if used as usize >= want || nic.rps_enabled() {
            return;
        }
        let symptom = self.rx_symptom(name, nic, &local);
        let warning = self.latch(rule, name, !symptom.is_empty());
        let rx_queues = nic.rx_queues;
        let mut evidence = format!(
            "{name} receives on {used} of its {max} channels with {} NUMA-local CPUs ({}), and RPS is off on its {rx_queues} RX queue(s).",
            local.len(),
            local
        );
        if !symptom.is_empty() {
            evidence.push(' ');
            evidence.push_str(&capitalize(&symptom.join("; ")));
            evidence.push('.');
        }
        let kind = if ch.combined_max >= ch.rx_max {
            "combined"
        } else {
            "rx"
        };
        let fix = format!(
            "ethtool -L {name} {kind} {want} (spreads receive work over {want} CPUs; irqbalance places the new IRQs); \
             or, if the NIC cannot, steer in software with RPS: echo {} > /sys/class/net/{name}/queues/rx-0/rps_cpus",
            local.to_mask_string()
        );
        self.push(rule, warning, name, evidence, CHANNELS_COST, fix);
    }

    /// The channel rule without the driver's maximum: one RX queue and RPS off is a setting
    /// the audit can see whatever the driver could do, and RPS fixes it in software. The
    /// maximum's absence is said with its reason (ethtool -L may or may not be possible).
    fn nic_single_queue(&mut self, name: &str, nic: &NicSettings, local: &CpuSet, why: &str) {
        let rule = TuningRule::NicChannels;
        // RPS off, not absent: without CONFIG_RPS there is no rps_cpus file and no fix.
        let Some((&queue, _)) = nic.rps.iter().next() else {
            return;
        };
        if nic.rx_queues != 1 || nic.rps_enabled() || local.len() < 2 {
            return;
        }
        let symptom = self.rx_symptom(name, nic, local);
        let warning = self.latch(rule, name, !symptom.is_empty());
        let mut evidence = format!(
            "{name} receives on 1 RX queue with {} NUMA-local CPUs ({local}), and RPS is off; \
             how many channels the driver allows is unknown: {why}.",
            local.len()
        );
        if !symptom.is_empty() {
            evidence.push(' ');
            evidence.push_str(&capitalize(&symptom.join("; ")));
            evidence.push('.');
        }
        let fix = format!(
            "steer receive processing over the local CPUs in software with RPS: echo {} > \
             /sys/class/net/{name}/queues/rx-{queue}/rps_cpus (persist it with a udev rule); if the \
             driver has more channels (ethtool -l {name} on the host shows the maximum), \
             ethtool -L {name} combined N spreads the receive work in hardware instead.",
            local.to_mask_string()
        );
        self.push(rule, warning, name, evidence, CHANNELS_COST, fix);
    }

    fn nic_rings(&mut self, name: &str, nic: &NicSettings) {
        let rule = TuningRule::NicRings;
        let Some(rings) = nic.rings.value() else {
            return;
        };
        if rings.rx >= rings.rx_max || rings.rx == 0 {
            return;
        }
        let (missed, fifo) = self
            .rates
            .and_then(|r| r.nic.get(name).copied())
            .unwrap_or((0, 0));
        let warning = self.latch(rule, name, missed > 0 || fifo > 0);
        let mut evidence = format!(
            "{name}'s RX ring holds {} of a possible {} descriptors.",
            rings.rx, rings.rx_max
        );
        if let (Some(r), true) = (self.rates, missed > 0 || fifo > 0) {
            evidence.push_str(&format!(
                " rx_missed_errors rose by {missed} and rx_fifo_errors by {fifo} in the last {:.0} s.",
                r.seconds
            ));
        }
        self.push(
            rule,
            warning,
            name,
            evidence,
            "a burst longer than the ring overflows it: the NIC drops packets before the kernel \
             sees them (counted in rx_missed_errors / rx_fifo_errors, invisible to softnet).",
            format!(
                "ethtool -G {name} rx {} (larger rings take more memory and some cache locality; \
                 persist it in the interface's configuration, e.g. a udev rule or NetworkManager's \
                 ethtool settings).",
                rings.rx_max
            ),
        );
    }

    fn netdev_budget(&mut self, s: &TuningSettings) {
        let rule = TuningRule::NetdevBudget;
        let (Some(budget), usecs) = (s.net_core.netdev_budget, s.net_core.netdev_budget_usecs)
        else {
            return;
        };
        let squeezed = self.rates.map_or(0, Rates::squeezed);
        let warning = self.latch(rule, "net.core.netdev_budget", squeezed > 0);
        // Below the kernel's defaults (300 packets, 2000 µs) is a setting on its own.
        let low = budget < 300 || usecs.is_some_and(|u| u < 2000);
        if !warning && !low {
            return;
        }
        let usecs_text = usecs.map_or(String::new(), |u| format!(" (netdev_budget_usecs {u})"));
        let mut evidence = format!("net.core.netdev_budget is {budget}{usecs_text}.");
        if let (Some(r), true) = (self.rates, squeezed > 0) {
            evidence.push_str(&format!(
                " softnet time_squeeze rose by {squeezed} on CPUs {} in the last {:.0} s: \
                 NET_RX rounds ran out of budget with packets left.",
                r.cpus_where(|(_, s)| *s > 0),
                r.seconds
            ));
        }
        let new_budget = (budget * 2).max(600);
        let new_usecs = usecs.map_or(4000, |u| (u * 2).max(4000));
        self.push(
            rule,
            warning,
            "net.core.netdev_budget",
            evidence,
            "packets left when a NET_RX round ends wait for the next round or for ksoftirqd: \
             added latency, and drops once the backlog fills.",
            format!(
                "sysctl -w net.core.netdev_budget={new_budget} net.core.netdev_budget_usecs={new_usecs} \
                 (persist in /etc/sysctl.d/); if squeezes persist, the CPU itself is the limit: \
                 spread the NIC's queues (channels, RPS)."
            ),
        );
    }

    fn netdev_max_backlog(&mut self, s: &TuningSettings) {
        let rule = TuningRule::NetdevMaxBacklog;
        let Some(backlog) = s.net_core.netdev_max_backlog else {
            return;
        };
        let dropped = self.rates.map_or(0, Rates::dropped);
        let warning = self.latch(rule, "net.core.netdev_max_backlog", dropped > 0);
        if !warning && backlog >= 1000 {
            return;
        }
        let mut evidence = format!("net.core.netdev_max_backlog is {backlog}.");
        if let (Some(r), true) = (self.rates, dropped > 0) {
            evidence.push_str(&format!(
                " softnet dropped {dropped} packets on CPUs {} in the last {:.0} s: the per-CPU \
                 backlog was full.",
                r.cpus_where(|(d, _)| *d > 0),
                r.seconds
            ));
        }
        self.push(
            rule,
            warning,
            "net.core.netdev_max_backlog",
            evidence,
            "a packet that finds the per-CPU input backlog full (RPS, veth, loopback and \
             non-NAPI paths) is dropped: retransmits and tail latency.",
            format!(
                "sysctl -w net.core.netdev_max_backlog={} (persist in /etc/sysctl.d/).",
                (backlog * 2).max(4096)
            ),
        );
    }

    fn iommu(&mut self, s: &TuningSettings) {
        if !s.iommu_groups_present {
            self.iommu_absent(s);
            return;
        }
        let rule = TuningRule::IommuStrict;
        let devices = self.dma_devices();
        let requested = s
            .cmdline
            .as_ref()
            .map(|c| {
                c.spelled(&[
                    "iommu.strict",
                    "iommu",
                    "intel_iommu",
                    "amd_iommu",
                    "iommu.passthrough",
                ])
            })
            .unwrap_or_default();
        for (pci, name) in devices {
            let Some(group) = s.iommu_group_of(&pci) else {
                continue;
            };
            if group.domain != IommuDomain::Strict {
                continue;
            }
            let rate = self
                .irq
                .iter()
                .find(|v| v.group.pci.as_deref() == Some(pci.as_str()))
                .and_then(|v| v.evidence.irq_rate);
            let busy = rate.is_some_and(|r| r >= self.config.iommu_irq_rate);
            let warning = self.latch(rule, &name, busy);
            let mut evidence = format!(
                "IOMMU group {} of {name} ({pci}) has a strict DMA domain (type DMA)",
                group.id
            );
            if requested.is_empty() {
                evidence.push_str(", the kernel's build-time default.");
            } else {
                evidence.push_str(&format!(
                    ", from the kernel arguments {}.",
                    requested.join(" ")
                ));
            }
            if let (Some(r), true) = (rate, busy) {
                evidence.push_str(&format!(" The device takes {r:.0} interrupts/s."));
            }
            self.push(
                rule,
                warning,
                &name,
                evidence,
                IOMMU_COST,
                "boot with iommu.strict=0 (lazy: DMA-FQ, keeps DMA isolation) or, where devices \
                 need no isolation, iommu=pt (passthrough); a reboot is needed."
                    .into(),
            );
        }
    }

    /// No IOMMU groups: a note of who owns DMA remapping here, the firmware or the hypervisor.
    fn iommu_absent(&mut self, s: &TuningSettings) {
        let mut evidence =
            "/sys/kernel/iommu_groups is empty: no device is behind an IOMMU this kernel manages."
                .to_string();
        let owner = if s.hypervisor == Some(false) {
            " DMA is not translated (the IOMMU is off in the firmware or the kernel): no \
             isolation, and no IOMMU cost."
        } else {
            " On a virtual machine DMA remapping belongs to the hypervisor, not to this guest."
        };
        evidence.push_str(owner);
        if s.hypervisor == Some(true) {
            evidence.push_str(" This node is a virtual machine (cpuinfo: hypervisor).");
        }
        self.push(
            TuningRule::IommuAbsent,
            false,
            "iommu",
            evidence,
            "none on this node.",
            "nothing to change in the guest; on the host, the IOMMU mode is the hypervisor's \
             kernel argument (iommu.strict=0 or iommu=pt)."
                .into(),
        );
    }

    /// The devices nodemedic knows that move the most DMA, NICs and NVMe drives: by PCI
    /// address, each with its name.
    fn dma_devices(&self) -> BTreeMap<String, String> {
        let mut devices: BTreeMap<String, String> = BTreeMap::new();
        for (netdev, pci) in self
            .snap
            .get::<Netdevs>()
            .into_iter()
            .flat_map(|n| n.iter())
        {
            devices.insert(pci.clone(), netdev.clone());
        }
        for (pci, d) in self
            .snap
            .get::<PciDevices>()
            .into_iter()
            .flat_map(|d| d.iter())
        {
            if d.driver.as_deref() == Some("nvme") {
                let name = self
                    .irq
                    .iter()
                    .find(|v| v.group.pci.as_deref() == Some(pci))
                    .map_or_else(|| format!("nvme {pci}"), |v| v.group.name.clone());
                devices.entry(pci.clone()).or_insert(name);
            }
        }
        devices
    }

    fn srso(&mut self, s: &TuningSettings) {
        let Some((state, text)) = s.srso() else {
            return;
        };
        if !state.costs() {
            return;
        }
        let arg = s
            .cmdline
            .as_ref()
            .map(|c| c.spelled(&["spec_rstack_overflow", "mitigations"]))
            .unwrap_or_default();
        let mut evidence = format!("spec_rstack_overflow reports \"{text}\"");
        if arg.is_empty() {
            evidence.push_str(" (the kernel's default).");
        } else {
            evidence.push_str(&format!(" (kernel arguments {}).", arg.join(" ")));
        }
        let mut fix = String::from(
            "a deliberate trade-off: keep it unless the threat model allows \
             spec_rstack_overflow=off (or mitigations=off for every mitigation); a reboot is needed.",
        );
        if state == SrsoState::SafeRetNoMicrocode {
            let whose = if s.hypervisor == Some(true) {
                "the host's (the hypervisor passes the microcode's IBPB to this guest)"
            } else {
                "this node's"
            };
            evidence.push_str(&format!(
                " The kernel pays for Safe RET without the microcode it needs to protect fully; the microcode is {whose}."
            ));
            fix.push_str(
                " Update the CPU microcode (amd64-microcode) to get the protection being paid for.",
            );
        }
        self.push(
            TuningRule::Srso,
            false,
            "spec_rstack_overflow",
            evidence,
            SRSO_COST,
            fix,
        );
    }

    fn mitigations(&mut self, s: &TuningSettings) {
        let Some(value) = s
            .cmdline
            .as_ref()
            .and_then(|c| c.get("mitigations"))
            .flatten()
        else {
            return;
        };
        let opts: Vec<&str> = value.split(',').collect();
        let (evidence, cost, fix) = if opts.contains(&"off") {
            (
                "mitigations=off: every CPU vulnerability mitigation is off.".to_string(),
                "none in throughput; the node is exposed to the vulnerabilities listed under \
                 /sys/devices/system/cpu/vulnerabilities.",
                "deliberate: remove mitigations=off if the node runs untrusted workloads.",
            )
        } else if opts.contains(&"nosmt") {
            (
                format!("mitigations={value}: SMT is disabled where a vulnerability needs it."),
                "up to half the hardware threads are offline: fewer CPUs for interrupts, softirqs \
                 and workloads.",
                "deliberate: use mitigations=auto if SMT siblings may share a core across trust \
                 domains.",
            )
        } else {
            return;
        };
        self.push(
            TuningRule::Mitigations,
            false,
            "mitigations",
            evidence,
            cost,
            fix.into(),
        );
    }

    fn cpufreq(&mut self, s: &TuningSettings) {
        if !s.cpufreq_present {
            let evidence = if s.hypervisor == Some(false) {
                "/sys/devices/system/cpu/cpufreq has no policies: no cpufreq driver is loaded, the \
                 firmware chooses the frequency."
            } else {
                "/sys/devices/system/cpu/cpufreq has no policies: on a virtual machine the CPU \
                 frequency belongs to the hypervisor, not to this guest."
            };
            let mut evidence = evidence.to_string();
            if s.hypervisor == Some(true) {
                evidence.push_str(" This node is a virtual machine (cpuinfo: hypervisor).");
            }
            self.push(
                TuningRule::CpufreqAbsent,
                false,
                "cpufreq",
                evidence,
                "none that the guest can change.",
                "nothing to change in the guest; on the host, the governor is the hypervisor's \
                 (cpupower frequency-set -g performance)."
                    .into(),
            );
            return;
        }
        // One finding per (driver, governor, EPP): a node has one or two of these, however
        // many policies.
        let mut groups: BTreeMap<(String, String, Option<String>), Vec<usize>> = BTreeMap::new();
        for (i, p) in s.cpufreq.iter().enumerate() {
            let Some(gov) = &p.governor else {
                continue;
            };
            if gov == "performance" {
                continue;
            }
            let driver = p.driver.clone().unwrap_or_else(|| "unknown".into());
            groups
                .entry((driver, gov.clone(), p.energy_performance_preference.clone()))
                .or_default()
                .push(i);
        }
        for ((driver, gov, epp), members) in groups {
            let policies: Vec<_> = members.iter().map(|i| &s.cpufreq[*i]).collect();
            let cpus = policies
                .iter()
                .filter_map(|p| p.cpus.as_ref())
                .fold(CpuSet::new(), |a, c| a.union(c));
            let mut evidence = format!(
                "{} cpufreq polic{} (CPUs {cpus}) use {driver}'s {gov} governor",
                policies.len(),
                if policies.len() == 1 { "y" } else { "ies" }
            );
            if let Some(epp) = &epp {
                evidence.push_str(&format!(" with energy_performance_preference {epp}"));
            }
            evidence.push('.');
            let freqs: Vec<(u64, u64)> = policies
                .iter()
                .filter_map(|p| Some((p.cur_khz?, p.max_khz?)))
                .filter(|(_, max)| *max > 0)
                .collect();
            if !freqs.is_empty() {
                let n = freqs.len() as u64;
                let cur = freqs.iter().map(|f| f.0).sum::<u64>() / n;
                let max = freqs.iter().map(|f| f.1).sum::<u64>() / n;
                evidence.push_str(&format!(
                    " They run at {} MHz of {} MHz on average.",
                    cur / 1000,
                    max / 1000
                ));
            }
            let mut fix = String::from(
                "cpupower frequency-set -g performance (or a tuned profile such as \
                 throughput-performance)",
            );
            if epp.is_some() {
                fix.push_str(
                    "; with EPP, at least echo performance > \
                     /sys/devices/system/cpu/cpufreq/policy*/energy_performance_preference",
                );
            }
            fix.push_str(". A deliberate trade-off where power matters.");
            let subject = format!("cpufreq {driver} {gov}");
            self.push(
                TuningRule::CpufreqGovernor,
                false,
                &subject,
                evidence,
                "the governor lowers the clock between bursts; interrupt and softirq work arriving \
                 then waits for the ramp-up, which shows as I/O latency rather than throughput.",
                fix,
            );
        }
    }
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(first) => first.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use nodemedic_collect::sources::softnet::{Softnet, SoftnetRow};
    use nodemedic_collect::sources::topology::Topology;
    use nodemedic_collect::sources::tuning::{Channels, NetCore, NicStats, Queried, Rings, Tuning};

    use super::*;

    fn snap(at: u64, squeeze: u32, missed: u64) -> Snapshot {
        let mut nics = BTreeMap::new();
        nics.insert(
            "eth0".to_string(),
            NicSettings {
                pci: None,
                rx_queues: 1,
                tx_queues: 1,
                rps: BTreeMap::new(),
                xps: BTreeMap::new(),
                channels: Queried::Absent("test".into()),
                rings: Queried::Read(Rings {
                    rx: 256,
                    rx_max: 4096,
                    tx: 256,
                    tx_max: 4096,
                }),
            },
        );
        let settings = TuningSettings {
            nics,
            net_core: NetCore {
                netdev_budget: Some(300),
                netdev_budget_usecs: Some(2000),
                netdev_max_backlog: Some(1000),
            },
            cpufreq_present: true,
            iommu_groups_present: true,
            ..Default::default()
        };
        let mut snap = Snapshot {
            at: Duration::from_secs(at),
            timestamp: at as f64,
            ..Default::default()
        };
        snap.put(Topology {
            online: CpuSet::from_cpus(0..2),
            ..Default::default()
        });
        snap.put(Softnet(vec![(
            0,
            SoftnetRow {
                time_squeeze: squeeze,
                ..Default::default()
            },
        )]));
        snap.put(Tuning {
            settings: Arc::new(settings),
            nic_stats: BTreeMap::from([(
                "eth0".to_string(),
                NicStats {
                    rx_missed_errors: Some(missed),
                    ..Default::default()
                },
            )]),
        });
        snap
    }

    fn severities(v: &TuningVerdict) -> Vec<(TuningRule, Severity)> {
        v.findings.iter().map(|f| (f.rule, f.severity)).collect()
    }

    /// A rate-backed warning needs `raise_after` samples of the symptom to appear and
    /// `clear_after` without it to go; the setting alone stays info throughout.
    #[test]
    fn warnings_follow_hysteresis() {
        let mut d = TuningDetector::new(TuningConfig {
            raise_after: 2,
            clear_after: 2,
            ..Default::default()
        });
        let first = d.observe(&snap(0, 0, 0), &[]);
        assert_eq!(first.interval_seconds, None);
        assert_eq!(severities(&first), [(TuningRule::NicRings, Severity::Info)]);
        // Squeezes and missed packets rise from here on.
        let s1 = d.observe(&snap(10, 5, 3), &[]);
        assert_eq!(severities(&s1), [(TuningRule::NicRings, Severity::Info)]);
        let s2 = d.observe(&snap(20, 10, 6), &[]);
        assert_eq!(
            severities(&s2),
            [
                (TuningRule::NicRings, Severity::Warning),
                (TuningRule::NetdevBudget, Severity::Warning)
            ]
        );
        assert!(s2.findings[0]
            .evidence
            .contains("rx_missed_errors rose by 3"));
        // Quiet again: one quiet sample keeps the warning, the second clears it.
        let s3 = d.observe(&snap(30, 10, 6), &[]);
        assert_eq!(s3.warnings().count(), 2);
        let s4 = d.observe(&snap(40, 10, 6), &[]);
        assert_eq!(severities(&s4), [(TuningRule::NicRings, Severity::Info)]);
    }

    /// `mitigations=off` and `auto,nosmt` are info with their consequence; the default says
    /// nothing. On bare metal an absent cpufreq is the firmware's, not the hypervisor's.
    #[test]
    fn mitigations_and_bare_metal_notes() {
        let with = |cmdline: &str, hypervisor: Option<bool>| {
            let mut s = snap(0, 0, 0);
            let t = s.get_mut::<Tuning>().unwrap();
            let mut settings = (*t.settings).clone();
            settings.cmdline = Some(
                nodemedic_collect::sources::tuning::parse_cmdline(&format!("{cmdline}\n")).unwrap(),
            );
            settings.hypervisor = hypervisor;
            settings.cpufreq_present = false;
            settings.nics.clear();
            t.settings = Arc::new(settings);
            TuningDetector::new(TuningConfig::default()).observe(&s, &[])
        };
        let off = with("ro mitigations=off", Some(false));
        let m = off
            .findings
            .iter()
            .find(|f| f.rule == TuningRule::Mitigations)
            .unwrap();
        assert_eq!(
            (m.severity, m.subject.as_str()),
            (Severity::Info, "mitigations")
        );
        assert_eq!(
            m.evidence,
            "mitigations=off: every CPU vulnerability mitigation is off."
        );
        assert!(m.fix.contains("remove mitigations=off"), "{m:?}");
        let cpufreq = off
            .findings
            .iter()
            .find(|f| f.rule == TuningRule::CpufreqAbsent)
            .unwrap();
        assert!(
            cpufreq.evidence.contains("the firmware chooses"),
            "{cpufreq:?}"
        );
        let nosmt = with("mitigations=auto,nosmt", None);
        let m = nosmt
            .findings
            .iter()
            .find(|f| f.rule == TuningRule::Mitigations)
            .unwrap();
        assert!(m.evidence.contains("SMT is disabled"), "{m:?}");
        let cpufreq = nosmt
            .findings
            .iter()
            .find(|f| f.rule == TuningRule::CpufreqAbsent)
            .unwrap();
        assert!(cpufreq.evidence.contains("belongs to the hypervisor"));
        let default = with("ro quiet mitigations=auto", Some(true));
        assert!(!default
            .findings
            .iter()
            .any(|f| f.rule == TuningRule::Mitigations));
    }

    /// An 8-CPU node whose NIC `eth0` (PCI 0000:00:03.0) has `rx_queues` RX queues with
    /// `rps` masks and the given channels; `net_rx_cpu3` NET_RX softirqs on CPU 3 (where its
    /// interrupts go), none elsewhere. With the IRQ detector's group for it, whose hottest
    /// CPU is 3 at `rate` NET_RX/s.
    fn one_nic(
        at: u64,
        channels: Queried<Channels>,
        rx_queues: u32,
        rps: &[(u32, &[u32])],
        net_rx_cpu3: u64,
        rate: f64,
    ) -> (Snapshot, Vec<GroupVerdict>) {
        use nodemedic_collect::sources::softirqs::{SoftirqRow, Softirqs};

        use crate::collapse::Evidence;
        use crate::groups::DeviceGroup;
        let pci = "0000:00:03.0";
        let nic = NicSettings {
            pci: Some(pci.into()),
            rx_queues,
            tx_queues: rx_queues,
            rps: rps
                .iter()
                .map(|(q, cpus)| (*q, CpuSet::from_cpus(cpus.iter().copied())))
                .collect(),
            xps: BTreeMap::new(),
            channels,
            rings: Queried::Absent("test".into()),
        };
        let settings = TuningSettings {
            nics: BTreeMap::from([("eth0".to_string(), nic)]),
            cpufreq_present: true,
            iommu_groups_present: true,
            ..Default::default()
        };
        let mut counts = vec![0; 8];
        counts[3] = net_rx_cpu3;
        let mut snap = Snapshot {
            at: Duration::from_secs(at),
            timestamp: at as f64,
            ..Default::default()
        };
        snap.put(Topology {
            online: CpuSet::from_cpus(0..8),
            ..Default::default()
        });
        snap.put(Netdevs(BTreeMap::from([(
            "eth0".to_string(),
            pci.to_string(),
        )])));
        snap.put(Softirqs {
            cpus: (0..8).collect(),
            rows: vec![SoftirqRow {
                name: "NET_RX".into(),
                counts,
            }],
            skipped: Vec::new(),
        });
        snap.put(Tuning {
            settings: Arc::new(settings),
            nic_stats: BTreeMap::new(),
        });
        let group = GroupVerdict {
            group: DeviceGroup {
                key: format!("pci:{pci}"),
                name: "virtio2".into(),
                driver: Some("virtio-pci".into()),
                pci: Some(pci.into()),
                netdev: Some("eth0".into()),
                numa_node: None,
                irqs: vec![27],
                other_irqs: Vec::new(),
                effective_cpus: CpuSet::from_cpus([3]),
                eligible_cpus: CpuSet::from_cpus(0..8),
                unknown_affinity: Vec::new(),
            },
            evidence: Evidence {
                hottest_cpu: Some(3),
                hottest_net_rx_rate: Some(rate),
                ..Default::default()
            },
            ..Default::default()
        };
        (snap, vec![group])
    }

    const NO_GET_CHANNELS: &str = "the driver does not report channels (EOPNOTSUPP)";

    /// One RX queue, RPS off, 8 CPUs and no channel maximum (a driver without get_channels):
    /// info with the reason and RPS as the fix; a warning while NET_RX piles onto the one
    /// CPU; info again once it stops.
    #[test]
    fn one_queue_without_the_channel_maximum() {
        let absent = || Queried::Absent(NO_GET_CHANNELS.to_string());
        let mut d = TuningDetector::new(TuningConfig {
            raise_after: 1,
            clear_after: 1,
            ..Default::default()
        });
        let (s, g) = one_nic(0, absent(), 1, &[(0, &[])], 1_000_000, 0.0);
        let first = d.observe(&s, &g);
        assert_eq!(
            severities(&first),
            [(TuningRule::NicChannels, Severity::Info)]
        );
        let f = &first.findings[0];
        assert_eq!(f.subject, "eth0");
        assert_eq!(
            f.evidence,
            "eth0 receives on 1 RX queue with 8 NUMA-local CPUs (0-7), and RPS is off; how \
             many channels the driver allows is unknown: the driver does not report channels \
             (EOPNOTSUPP)."
        );
        assert!(
            f.fix
                .contains("echo ff > /sys/class/net/eth0/queues/rx-0/rps_cpus"),
            "{}",
            f.fix
        );
        assert!(f.fix.contains("ethtool -l eth0"), "{}", f.fix);
        // 10 s later CPU 3 ran 200,000 more NET_RX softirqs, all of the node's.
        let (s, g) = one_nic(10, absent(), 1, &[(0, &[])], 1_200_000, 20_000.0);
        let hot = d.observe(&s, &g);
        assert_eq!(
            severities(&hot),
            [(TuningRule::NicChannels, Severity::Warning)]
        );
        assert!(
            hot.findings[0].evidence.ends_with(
                "NET_RX is concentrated: CPU 3 runs 20000 NET_RX softirqs/s, 100% of the node's."
            ),
            "{}",
            hot.findings[0].evidence
        );
        // Quiet: the setting stays, the warning goes.
        let (s, g) = one_nic(20, absent(), 1, &[(0, &[])], 1_200_000, 0.0);
        assert_eq!(
            severities(&d.observe(&s, &g)),
            [(TuningRule::NicChannels, Severity::Info)]
        );
    }

    /// Without the maximum the rule says nothing where the setting is not the one-queue,
    /// RPS-off case on several CPUs, or where it has no RPS fix to give (no rps_cpus file:
    /// a kernel without CONFIG_RPS). With the maximum the driver's word decides: one channel
    /// of one is nothing to change.
    #[test]
    fn one_queue_rule_stays_out_of_the_other_cases() {
        let absent = || Queried::Absent(NO_GET_CHANNELS.to_string());
        let quiet = |channels, rx_queues, rps: &[(u32, &[u32])], what: &str| {
            let mut d = TuningDetector::new(TuningConfig {
                raise_after: 1,
                ..Default::default()
            });
            for at in [0, 10] {
                let (s, g) = one_nic(
                    at,
                    Queried::clone(&channels),
                    rx_queues,
                    rps,
                    at * 20_000,
                    20_000.0,
                );
                let v = d.observe(&s, &g);
                assert!(v.findings.is_empty(), "{what}: {:#?}", v.findings);
            }
        };
        quiet(absent(), 1, &[(0, &[0, 1, 2, 3, 4, 5, 6, 7])], "RPS on");
        quiet(absent(), 2, &[(0, &[]), (1, &[])], "two RX queues");
        quiet(absent(), 1, &[], "no rps_cpus file");
        let one_of_one = Channels {
            combined: 1,
            combined_max: 1,
            ..Default::default()
        };
        quiet(Queried::Read(one_of_one), 1, &[(0, &[])], "1 of 1 channels");

        // A single CPU: nothing to spread over.
        let mut d = TuningDetector::new(TuningConfig::default());
        let (mut s, g) = one_nic(0, absent(), 1, &[(0, &[])], 0, 0.0);
        s.put(Topology {
            online: CpuSet::from_cpus([0]),
            ..Default::default()
        });
        assert!(d.observe(&s, &g).findings.is_empty());
    }

    #[test]
    fn muted_rules_are_silent() {
        let mut d = TuningDetector::new(TuningConfig {
            ignore: vec![TuningRule::NicRings, TuningRule::NetdevBudget],
            raise_after: 1,
            ..Default::default()
        });
        d.observe(&snap(0, 0, 0), &[]);
        let v = d.observe(&snap(10, 5, 3), &[]);
        assert!(v.findings.is_empty(), "{:?}", v.findings);
    }

    #[test]
    fn config_names_its_rules_and_refuses_unknown_ones() {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            tuning: TuningConfig,
        }
        let parse = |t: &str| toml::from_str::<File>(t).map(|f| f.tuning);
        let c = parse("[tuning]\nignore = [\"iommu_strict\", \"srso\"]\n").unwrap();
        assert_eq!(c.ignore, [TuningRule::IommuStrict, TuningRule::Srso]);
        assert_eq!(c.raise_after, 3, "defaults for the rest");
        assert!(parse("[tuning]\nignore = [\"nope\"]\n").is_err());
        assert!(parse("[tuning]\nignroe = []\n").is_err());
        assert!(TuningConfig {
            net_rx_share: 0.0,
            ..Default::default()
        }
        .validate()
        .is_err());
        assert!(TuningConfig::default().validate().is_ok());
        for r in TuningRule::ALL {
            let f = TuningFinding {
                rule: r,
                severity: Severity::Info,
                subject: "s".into(),
                evidence: "E.".into(),
                cost: "c.".into(),
                fix: "f.".into(),
            };
            let finding = Finding::from(&f);
            assert_eq!(finding.kind.as_str(), format!("tuning_{}", r.as_str()));
            assert_eq!(finding.message, "E. Cost: c. Fix: f.");
            // The serde name is the one config and findings use.
            let name = toml::Value::try_from(r).unwrap();
            assert_eq!(name.as_str(), Some(r.as_str()));
        }
    }

    #[test]
    fn rates_refilled_in_place_keep_nothing_of_the_last_pair() {
        let counters = |at, net_rx: &[(u32, u64)], softnet: &[(u32, (u64, u64))]| Counters {
            at: Duration::from_secs(at),
            net_rx: net_rx.to_vec(),
            softnet: softnet.to_vec(),
            nic: HashMap::new(),
        };
        let first = counters(10, &[(0, 100), (2, 50)], &[(0, (1, 1)), (2, (5, 5))]);
        let second = counters(
            12,
            &[(0, 300), (1, 7), (2, 50)],
            &[(0, (3, 1)), (2, (5, 5))],
        );
        let mut r = Rates::default();
        assert!(r.between(&first, &second));
        // CPU 1 has no earlier count, so no rate; CPU 2 did not move.
        assert_eq!(r.net_rx, vec![(0, 100.0), (2, 0.0)]);
        assert_eq!(r.net_rx_total, 100.0);
        assert_eq!(r.softnet, vec![(0, (2, 0))]);
        let third = counters(14, &[(1, 9)], &[]);
        assert!(r.between(&second, &third));
        assert_eq!(r.net_rx, vec![(1, 1.0)]);
        assert_eq!(r.net_rx_total, 1.0);
        assert!(r.softnet.is_empty());
        // A clock that did not move forward leaves the last rates as they were.
        assert!(!r.between(&third, &second));
        assert_eq!(r.net_rx, vec![(1, 1.0)]);
    }

    #[test]
    fn counters_refilled_from_a_bare_snapshot_are_empty() {
        let absent = Queried::Absent(NO_GET_CHANNELS.to_string());
        let (s, _) = one_nic(5, absent, 1, &[(0, &[])], 1_000, 0.0);
        let mut c = Counters::default();
        c.fill(&s);
        assert_eq!(c.net_rx.len(), 8);
        assert_eq!(of_cpu(&c.net_rx, 3), Some(1_000));
        c.fill(&Snapshot::default());
        assert!(c.net_rx.is_empty() && c.softnet.is_empty() && c.nic.is_empty());
    }
}
