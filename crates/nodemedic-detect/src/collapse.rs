//! The IRQ collapse detector.
//!
//! A device group is *collapsed* when several of its IRQs are delivered to very few CPUs while
//! more CPUs could take them — the state a stuck irqbalance leaves behind. It is *hurting*
//! when, on top of that, the hottest of those CPUs carries most of the group's interrupt rate
//! or the network stack on those CPUs is visibly overloaded (softnet drops or time squeezes).
//! Both verdicts pass through [`Hysteresis`], so a signal that flaps never flips them.

use nodemedic_collect::sources::interrupts::device::Classified;
use nodemedic_collect::sources::interrupts::{Counts, Interrupts};
use nodemedic_collect::sources::softirqs::Softirqs;
use nodemedic_collect::sources::softnet::Softnet;
use nodemedic_kernel::counter;
use nodemedic_sample::Snapshot;
use serde::{Deserialize, Serialize};

use crate::groups::{build_groups_into, DeviceGroup, GroupScratch, GroupingOptions};
use crate::hysteresis::{ratio, ConfigError, Hysteresis, Latch};
use crate::{Finding, Severity};

/// The verdict this detector produces (a type of the sample, shared with the outputs).
pub use nodemedic_sample::verdict::{Evidence, GroupVerdict, ShareBasis};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CollapseConfig {
    /// Groups with fewer considered IRQs are never called collapsed.
    pub min_irqs: usize,
    /// Collapsed when the distinct CPUs are at most this share of min(#IRQs, #eligible CPUs),
    /// rounded to the nearest whole CPU (at least 1)…
    pub max_cpu_ratio: f64,
    /// …and at most this many CPUs.
    pub max_cpus: usize,
    /// Count only CPUs on the device's NUMA node as eligible (when the node is known).
    pub numa_local: bool,
    /// Judge only data-queue IRQs when a device has them (control vectors sit still by design).
    pub queue_irqs_only: bool,
    /// Consecutive samples the condition must hold before the verdict turns on…
    pub raise_after: u32,
    /// …and be absent before it turns off.
    pub clear_after: u32,
}

impl Default for CollapseConfig {
    fn default() -> Self {
        Self {
            min_irqs: 4,
            max_cpu_ratio: 0.25,
            max_cpus: 2,
            numa_local: true,
            queue_irqs_only: true,
            raise_after: 3,
            clear_after: 3,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HurtingConfig {
    /// Hurting when the hottest CPU takes at least this share of the group's interrupt rate…
    pub min_hottest_share: f64,
    /// …and the group's rate is at least this many interrupts per second.
    pub min_irq_rate: f64,
    /// Also hurting when softnet drops or time squeezes rise on the group's CPUs.
    pub softnet_pressure: bool,
    pub raise_after: u32,
    pub clear_after: u32,
}

impl Default for HurtingConfig {
    fn default() -> Self {
        Self {
            min_hottest_share: 0.5,
            min_irq_rate: 100.0,
            softnet_pressure: true,
            raise_after: 3,
            clear_after: 3,
        }
    }
}

impl CollapseConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        ratio("max_cpu_ratio", self.max_cpu_ratio)?;
        if self.min_irqs < 2 {
            return Err(ConfigError::TooSmall {
                field: "min_irqs",
                min: 2,
                value: self.min_irqs as u64,
            });
        }
        if self.max_cpus < 1 {
            return Err(ConfigError::TooSmall {
                field: "max_cpus",
                min: 1,
                value: self.max_cpus as u64,
            });
        }
        self.hysteresis().validate()
    }

    pub fn hysteresis(&self) -> Hysteresis {
        Hysteresis {
            raise_after: self.raise_after,
            clear_after: self.clear_after,
        }
    }

    /// The most distinct CPUs a group of `irqs` IRQs with `eligible` eligible CPUs may use and
    /// still be called collapsed.
    pub fn cpu_limit(&self, irqs: usize, eligible: usize) -> usize {
        let by_ratio = (self.max_cpu_ratio * irqs.min(eligible) as f64).round() as usize;
        by_ratio.max(1).min(self.max_cpus)
    }
}

impl HurtingConfig {
    pub fn hysteresis(&self) -> Hysteresis {
        Hysteresis {
            raise_after: self.raise_after,
            clear_after: self.clear_after,
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        ratio("min_hottest_share", self.min_hottest_share)?;
        if !(self.min_irq_rate >= 0.0 && self.min_irq_rate.is_finite()) {
            return Err(ConfigError::Below {
                field: "min_irq_rate",
                min: 0.0,
                value: self.min_irq_rate,
            });
        }
        self.hysteresis().validate()
    }
}

#[derive(Debug, Clone, Default)]
struct GroupState {
    collapsed: Latch,
    hurting: Latch,
    /// The (collapsed, hurting) pair last reported, to tell callers what changed.
    reported: (bool, bool),
    /// The last observation that had this group.
    seen: u64,
}

/// What the next sample compares with. Refilled in place every sample ([`Previous::fill`]):
/// its lists are ordered by IRQ or CPU, where three hash maps a sample (one entry per IRQ,
/// two per CPU) were built, hashed and freed (BENCHMARKS.md, "The sampler's maps").
#[derive(Debug, Clone, Default)]
struct Previous {
    at: std::time::Duration,
    /// The CPU of each count column (the `/proc/interrupts` header).
    cpus: Vec<u32>,
    /// The sample's table, shared with the snapshot (not copied).
    interrupts: Option<std::sync::Arc<Interrupts>>,
    /// (IRQ, its row in `interrupts`), by IRQ.
    rows: Vec<(u32, usize)>,
    /// (CPU, NET_RX softirqs), by CPU.
    net_rx: Vec<(u32, u64)>,
    /// (CPU, (dropped, time_squeeze)), by CPU.
    softnet: Vec<(u32, (u64, u64))>,
}

pub struct CollapseDetector {
    collapse: CollapseConfig,
    hurting: HurtingConfig,
    /// Each group's state, sorted by key (byte order, as the groups are).
    state: Vec<(String, GroupState)>,
    previous: Option<Previous>,
    /// The buffers of the sample before `previous`, for the next sample to refill.
    spare: Previous,
    classified: Classified,
    observations: u64,
    /// Per-column sums of one group (its growth, its counts since boot), kept from one group
    /// to the next and one sample to the next rather than allocated for each.
    scratch: (Vec<u64>, Vec<u64>),
    /// The list of a past sample's verdicts, emptied, that its holder gave back
    /// ([`CollapseDetector::recycle`]), for the next sample's verdicts.
    spare_verdicts: Vec<GroupVerdict>,
    /// The list the device groups are built into, empty between samples (each group moves
    /// into its verdict), kept for its capacity.
    groups: Vec<DeviceGroup>,
    group_scratch: GroupScratch,
}

impl CollapseDetector {
    pub fn new(collapse: CollapseConfig, hurting: HurtingConfig) -> Self {
        Self {
            collapse,
            hurting,
            state: Vec::new(),
            previous: None,
            spare: Previous::default(),
            classified: Classified::default(),
            observations: 0,
            scratch: Default::default(),
            spare_verdicts: Vec::new(),
            groups: Vec::new(),
            group_scratch: GroupScratch::default(),
        }
    }

    /// Takes back the verdicts of a past sample that nothing else holds: the next sample's
    /// verdicts go into their list, where a new one would be allocated (and, under musl's
    /// allocator, a page mapped) every sample and freed on the thread that dropped the sample.
    /// Their groups are kept too: the next sample's groups are written into their storage.
    pub fn recycle(&mut self, mut verdicts: Vec<GroupVerdict>) {
        if self.groups.is_empty() {
            self.groups.extend(verdicts.drain(..).map(|v| v.group));
        }
        verdicts.clear();
        if verdicts.capacity() > self.spare_verdicts.capacity() {
            self.spare_verdicts = verdicts;
        }
    }

    /// Feeds one snapshot and returns the verdict of every device group in it.
    pub fn observe(&mut self, snap: &Snapshot) -> Vec<GroupVerdict> {
        let mut groups = std::mem::take(&mut self.groups);
        build_groups_into(
            snap,
            GroupingOptions {
                numa_local: self.collapse.numa_local,
                queue_irqs_only: self.collapse.queue_irqs_only,
            },
            &mut self.classified,
            &mut groups,
            &mut self.group_scratch,
        );
        let mut current = std::mem::take(&mut self.spare);
        current.fill(snap);
        let elapsed = self
            .previous
            .as_ref()
            .map(|p| snap.at.saturating_sub(p.at).as_secs_f64())
            .filter(|dt| *dt > 0.0);
        let mut verdicts = std::mem::take(&mut self.spare_verdicts);
        verdicts.reserve(groups.len());
        self.observations += 1;
        let observation = self.observations;
        let mut scratch = std::mem::take(&mut self.scratch);
        for group in groups.drain(..) {
            let evidence = self.evidence(&group, &current, elapsed, &mut scratch);
            let collapsed_now = self.collapsed_now(&group, &evidence);
            let hurting_now = collapsed_now && self.hurting_now(&evidence);
            let Some(state) = state_of(&mut self.state, &group.key) else {
                continue;
            };
            state.seen = observation;
            state
                .collapsed
                .update(collapsed_now, &self.collapse.hysteresis(), snap.timestamp);
            state
                .hurting
                .update(hurting_now, &self.hurting.hysteresis(), snap.timestamp);
            let collapsed = state.collapsed.active;
            let hurting = collapsed && state.hurting.active;
            let changed = state.reported != (collapsed, hurting);
            state.reported = (collapsed, hurting);
            verdicts.push(GroupVerdict {
                collapsed,
                hurting,
                changed,
                collapsed_now,
                hurting_now,
                collapsed_since: state.collapsed.since.filter(|_| collapsed),
                hurting_since: state
                    .hurting
                    .since
                    .filter(|_| collapsed && state.hurting.active),
                evidence,
                group,
            });
        }
        // A device that went away takes its state with it.
        self.state.retain(|(_, s)| s.seen == observation);
        self.scratch = scratch;
        self.groups = groups;
        if let Some(mut old) = self.previous.replace(current) {
            // Its table goes now, as it did when the whole was dropped: a share kept
            // would make the engine copy the next table rather than widen it in place.
            old.interrupts = None;
            self.spare = old;
        }
        verdicts
    }

    fn collapsed_now(&self, g: &DeviceGroup, e: &Evidence) -> bool {
        let n = g.irqs.len();
        n >= self.collapse.min_irqs
            && g.unknown_affinity.len() < n
            && e.distinct_cpus <= e.cpu_limit
            && g.eligible_cpus.len() > e.distinct_cpus
    }

    fn hurting_now(&self, e: &Evidence) -> bool {
        let concentrated = matches!((e.hottest_share, e.share_basis, e.irq_rate),
            (Some(share), Some(ShareBasis::Rate), Some(rate))
                if share >= self.hurting.min_hottest_share && rate >= self.hurting.min_irq_rate);
        let softnet = self.hurting.softnet_pressure
            && (e.softnet_dropped.unwrap_or(0) > 0 || e.softnet_squeezed.unwrap_or(0) > 0);
        concentrated || softnet
    }

    fn evidence(
        &self,
        g: &DeviceGroup,
        cur: &Previous,
        elapsed: Option<f64>,
        (delta, cumulative): &mut (Vec<u64>, Vec<u64>),
    ) -> Evidence {
        let distinct_cpus = g.effective_cpus.len();
        let mut e = Evidence {
            distinct_cpus,
            cpu_limit: self.collapse.cpu_limit(g.irqs.len(), g.eligible_cpus.len()),
            ..Default::default()
        };
        // Per-column sums of the group's counts, and of their growth since the previous
        // sample. Columns map to CPUs through the header; when it is unchanged (the usual
        // case) the previous sample's columns line up index for index.
        let ncols = cur.cpus.len();
        delta.clear();
        delta.resize(ncols, 0);
        let mut busiest_irq = 0u64;
        let prev = self.previous.as_ref().filter(|_| elapsed.is_some());
        if let Some(p) = prev {
            let map = crate::rates::column_map(&p.cpus, &cur.cpus);
            for irq in &g.irqs {
                if let (Some(now), Some(before)) = (cur.row(*irq), p.row(*irq)) {
                    let grew = crate::rates::add_growth(delta, now, before, map.as_deref());
                    busiest_irq = busiest_irq.max(grew);
                }
            }
        }
        let total_delta: u64 = delta.iter().fold(0u64, |a, d| a.saturating_add(*d));
        if total_delta > 0 {
            e.busiest_irq_share = Some(busiest_irq as f64 / total_delta as f64);
        }
        // The counts since boot are the basis only when nothing grew (the first sample, an
        // idle device), so they are summed only then.
        cumulative.clear();
        if total_delta == 0 {
            cumulative.resize(ncols, 0);
            for row in g.irqs.iter().filter_map(|irq| cur.row(*irq)) {
                crate::rates::add_counts(cumulative, row);
            }
        }
        if let (Some(dt), Some(_)) = (elapsed, prev) {
            e.irq_rate = Some(total_delta as f64 / dt);
            e.per_cpu_rate = delta
                .iter()
                .enumerate()
                .filter(|(_, d)| **d > 0)
                .map(|(col, d)| (cur.cpus[col], *d as f64 / dt))
                .collect();
        }
        let (basis, source) = if total_delta > 0 {
            (ShareBasis::Rate, &*delta)
        } else {
            (ShareBasis::Cumulative, &*cumulative)
        };
        let total: u64 = source.iter().fold(0u64, |a, v| a.saturating_add(*v));
        if total > 0 {
            // Ties go to the lowest CPU id, so the result does not depend on column order.
            let (cpu, max) = source
                .iter()
                .enumerate()
                .fold((u32::MAX, 0u64), |best, (col, v)| {
                    let cpu = cur.cpus[col];
                    if *v > best.1 || (*v == best.1 && cpu < best.0) {
                        (cpu, *v)
                    } else {
                        best
                    }
                });
            e.hottest_cpu = Some(cpu);
            e.hottest_share = Some(max as f64 / total as f64);
            e.share_basis = Some(basis);
        }
        if let (Some(dt), Some(p)) = (elapsed, prev) {
            if let Some(cpu) = e.hottest_cpu {
                if let (Some(now), Some(before)) =
                    (of_cpu(&cur.net_rx, cpu), of_cpu(&p.net_rx, cpu))
                {
                    e.hottest_net_rx_rate = counter::delta(before, now).map(|d| d as f64 / dt);
                }
            }
            let mut dropped = None;
            let mut squeezed = None;
            for cpu in g.effective_cpus.iter() {
                if let (Some(now), Some(before)) =
                    (of_cpu(&cur.softnet, cpu), of_cpu(&p.softnet, cpu))
                {
                    // softnet_stat is 32-bit and not widened: wrap-aware here.
                    *dropped.get_or_insert(0) += counter::delta(before.0, now.0).unwrap_or(0);
                    *squeezed.get_or_insert(0) += counter::delta(before.1, now.1).unwrap_or(0);
                }
            }
            e.softnet_dropped = dropped;
            e.softnet_squeezed = squeezed;
        }
        e
    }
}

/// The state of the group `key`, new if it has none yet (always `Some`). `states` is sorted
/// by key: a binary search with word-wise compares (`nodemedic_kernel::bytes`; a map's `str`
/// compares were calls to musl's byte-wise `memcmp`, two lookups a group a sample). The key is
/// copied for a new group only.
fn state_of<'s>(
    states: &'s mut Vec<(String, GroupState)>,
    key: &str,
) -> Option<&'s mut GroupState> {
    let at = match states
        .binary_search_by(|(have, _)| nodemedic_kernel::bytes::cmp(have.as_bytes(), key.as_bytes()))
    {
        Ok(at) => at,
        Err(at) => {
            states.insert(at, (key.to_string(), GroupState::default()));
            at
        }
    };
    states.get_mut(at).map(|(_, s)| s)
}

impl Previous {
    /// An IRQ's counts, aligned with `cpus`.
    fn row(&self, irq: u32) -> Option<Counts<'_>> {
        let at = self.rows.binary_search_by_key(&irq, |(q, _)| *q).ok()?;
        let row = self.rows.get(at)?.1;
        let ints = self.interrupts.as_ref()?;
        Some(ints.counts(ints.irqs.get(row)?))
    }

    /// `snap`'s state, into `self`'s buffers.
    fn fill(&mut self, snap: &Snapshot) {
        self.at = snap.at;
        self.cpus.clear();
        self.rows.clear();
        self.interrupts = None;
        if let Some(ints) = snap.get::<Interrupts>() {
            self.cpus.extend_from_slice(&ints.cpus);
            self.rows
                .extend(ints.irqs.iter().enumerate().map(|(i, line)| (line.irq, i)));
            by_key(&mut self.rows);
            self.interrupts = snap.shared::<Interrupts>();
        }
        fill_per_cpu(snap, &mut self.net_rx, &mut self.softnet);
    }
}

/// `snap`'s per-CPU NET_RX softirqs and softnet (dropped, time_squeeze) counts, into the
/// two lists, each ordered by CPU with one entry per CPU (see [`by_key`]). Both detectors
/// compare these from one sample to the next.
pub(crate) fn fill_per_cpu(
    snap: &Snapshot,
    net_rx: &mut Vec<(u32, u64)>,
    softnet: &mut Vec<(u32, (u64, u64))>,
) {
    net_rx.clear();
    if let Some(s) = snap.get::<Softirqs>() {
        if let Some(row) = s.row("NET_RX") {
            net_rx.extend(s.per_cpu(&row.counts));
        }
    }
    by_key(net_rx);
    softnet.clear();
    if let Some(rows) = snap.get::<Softnet>() {
        softnet.extend(
            rows.iter()
                .map(|(cpu, r)| (*cpu, (u64::from(r.dropped), u64::from(r.time_squeeze)))),
        );
    }
    by_key(softnet);
}

/// Orders `entries` by key and keeps one entry per key, the last one given: what a map
/// collected from the same entries holds, which these lists replace. The kernel writes its
/// IRQs and CPUs in order and once each, so the check is one pass and nothing moves; only
/// a damaged file pays for the (stable) sort.
pub(crate) fn by_key<T: Copy>(entries: &mut Vec<(u32, T)>) {
    if !entries.is_sorted_by_key(|(k, _)| *k) {
        entries.sort_by_key(|(k, _)| *k);
    }
    // `later` follows `kept`; a repeated key overwrites the kept entry and is dropped.
    entries.dedup_by(|later, kept| {
        let same = later.0 == kept.0;
        if same {
            *kept = *later;
        }
        same
    });
}

/// The value of `cpu` in a list ordered by CPU (see [`by_key`]).
pub(crate) fn of_cpu<T: Copy>(by_cpu: &[(u32, T)], cpu: u32) -> Option<T> {
    let at = by_cpu.binary_search_by_key(&cpu, |(c, _)| *c).ok()?;
    by_cpu.get(at).map(|(_, v)| *v)
}

/// What an operator should read about the verdicts.
pub fn findings(verdicts: &[GroupVerdict]) -> Vec<Finding> {
    let mut out = Vec::new();
    for v in verdicts.iter().filter(|v| v.collapsed) {
        let g = &v.group;
        let what = match &g.netdev {
            Some(nd) if *nd != g.name => format!("{} ({nd})", g.name),
            _ => g.name.clone(),
        };
        out.push(Finding {
            kind: crate::FindingKind::IrqCollapsed,
            severity: Severity::Warning,
            subject: g.name.clone(),
            message: format!(
                "{} IRQs of {what} are delivered to {} CPU(s) ({}) although {} CPUs are eligible. \
                 irqbalance should have spread them: check `systemctl status irqbalance` and its \
                 version (1.7.0 and 1.8.0 never rebalance by load); `systemctl try-restart \
                 irqbalance` re-places them.",
                g.irqs.len(),
                g.effective_cpus.len(),
                g.effective_cpus,
                g.eligible_cpus.len(),
            ),
        });
        if v.hurting {
            let e = &v.evidence;
            let mut parts = Vec::new();
            if let (Some(cpu), Some(share), Some(rate)) =
                (e.hottest_cpu, e.hottest_share, e.irq_rate)
            {
                parts.push(format!(
                    "CPU {cpu} takes {:.0}% of its {:.0} interrupts/s",
                    share * 100.0,
                    rate
                ));
            }
            if let Some(r) = e.hottest_net_rx_rate {
                parts.push(format!("NET_RX softirqs on that CPU at {r:.0}/s"));
            }
            if e.softnet_dropped.unwrap_or(0) > 0 || e.softnet_squeezed.unwrap_or(0) > 0 {
                parts.push(format!(
                    "softnet dropped {} and squeezed {} times since the last sample",
                    e.softnet_dropped.unwrap_or(0),
                    e.softnet_squeezed.unwrap_or(0)
                ));
            }
            out.push(Finding {
                kind: crate::FindingKind::IrqHurting,
                severity: Severity::Critical,
                subject: g.name.clone(),
                message: format!(
                    "The collapse of {what} is hurting: {}. Expect packet delay and drops until \
                     the IRQs are spread.",
                    parts.join("; ")
                ),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each key has one state, found again in any order of lookups, and the list stays in
    /// byte order as a map's would.
    #[test]
    fn a_group_keeps_its_state_whatever_order_it_comes_in() {
        let keys = [
            "pci:0000:3b:00.0",
            "dev:timer",
            "irq:9",
            "irq:10",
            "dev:ttyS0",
            "pci:0000:00:02.0",
        ];
        let mut states = Vec::new();
        for (n, key) in keys.iter().enumerate() {
            state_of(&mut states, key).unwrap().seen = n as u64 + 1;
        }
        for (n, key) in keys.iter().rev().enumerate() {
            assert_eq!(
                state_of(&mut states, key).unwrap().seen,
                (keys.len() - n) as u64
            );
        }
        let mut sorted: Vec<&str> = keys.to_vec();
        sorted.sort();
        let held: Vec<&str> = states.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(held, sorted);
    }

    #[test]
    fn by_key_orders_and_keeps_the_last_entry_of_a_key_as_a_map_would() {
        let entries = [(3, 'a'), (1, 'b'), (3, 'c'), (2, 'd'), (1, 'e')];
        let mut list = entries.to_vec();
        by_key(&mut list);
        let map: std::collections::HashMap<u32, char> = entries.iter().copied().collect();
        let mut from_map: Vec<(u32, char)> = map.into_iter().collect();
        from_map.sort_unstable();
        assert_eq!(list, from_map);
        assert_eq!(list, vec![(1, 'e'), (2, 'd'), (3, 'c')]);
        assert_eq!(of_cpu(&list, 3), Some('c'));
        assert_eq!(of_cpu(&list, 4), None);
        // In order already (what the kernel writes): unchanged.
        let mut sorted = vec![(0, 1), (1, 2), (5, 3)];
        by_key(&mut sorted);
        assert_eq!(sorted, vec![(0, 1), (1, 2), (5, 3)]);
    }
}
