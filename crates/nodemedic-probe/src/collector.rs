//! The probes as a nodemedic collector: loaded once, read every sample into the snapshot
//! (as a [`PerfSection`], by type), and reported failed with their one reason when they
//! could not load.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aya::maps::{MapData, RingBuf};
use nodemedic_collect::{registry, CollectError, Collected, Collector, CollectorName, Ctx};
use nodemedic_sample::perf::{
    PerfCounters, PerfHook, PerfOwner, PerfOwnerRate, PerfProbes as PerfSection, PerfProgramStats,
    PerfRates, PerfRing,
};
use nodemedic_sample::Snapshot;

use crate::abi::{CpuCounts, EventKind, OwnerCounts, ProbeEvent};
use crate::probe::{PerfProbes, ProbeError, ProbeOptions, HOOKS};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectorOptions {
    pub probe: ProbeOptions,
    /// Owners kept in each snapshot (and exported), busiest first.
    pub top_owners: usize,
    /// Per-CPU counters in the snapshot (one series per CPU when exported).
    pub per_cpu: bool,
}

impl Default for CollectorOptions {
    fn default() -> Self {
        Self {
            probe: ProbeOptions::default(),
            top_owners: 10,
            per_cpu: false,
        }
    }
}

/// Counters of the ring buffer reader, shared between it and the collector.
#[derive(Debug, Default)]
pub struct RingCounters {
    pub read: AtomicU64,
    pub storms: AtomicU64,
    pub undecodable: AtomicU64,
}

struct Previous {
    at: Duration,
    totals: CpuCounts,
    owners: HashMap<u32, (u64, u64)>,
}

/// Why the probes are down: a load or attach error, or a read that failed.
type DownReason = Arc<dyn std::error::Error + Send + Sync>;

enum State {
    Up(Box<PerfProbes>),
    Down(DownReason),
}

/// The collector's error while the probes are down: `eBPF probes down: ` and the reason,
/// written once per reason ([`Inner::down_text`]). Every sample reports it, and the engine
/// and `/status` each write it out: a write of one piece allocates once, where the reason's
/// own `Display` (several pieces) grew the text several times, three times a sample.
#[derive(Debug, thiserror::Error)]
#[error("{text}")]
pub struct ProbesDown {
    text: Arc<str>,
}

const DOWN_PREFIX: &str = "eBPF probes down: ";

struct Inner {
    state: State,
    previous: Option<Previous>,
    /// The last down reason and its [`ProbesDown`] text, kept while the reason is the same.
    down_text: Option<(DownReason, Arc<str>)>,
    /// A past sample's down section ([`Collector::recycle`]), used again while it reads the
    /// same: a sample with the probes down then allocates nothing for them.
    spare_down: Option<PerfSection>,
}

impl Inner {
    /// The [`ProbesDown`] text of `reason`, written once while the reason is the same.
    fn down_text(&mut self, reason: &DownReason) -> Arc<str> {
        match &self.down_text {
            Some((r, text)) if Arc::ptr_eq(r, reason) => text.clone(),
            _ => {
                let text: Arc<str> = format!("{DOWN_PREFIX}{reason}").into();
                self.down_text = Some((reason.clone(), text.clone()));
                text
            }
        }
    }
}

pub struct PerfProbeCollector {
    inner: Mutex<Inner>,
    ring: Mutex<Option<RingBuf<MapData>>>,
    counters: Arc<RingCounters>,
    opts: CollectorOptions,
}

impl PerfProbeCollector {
    /// The collector of probes loaded with `opts.probe`, or down with the load's reason (by
    /// [`crate::loader::load_in_child`] in the daemon). A failure is logged once here and then
    /// reported by every sample (collector failed with the reason, hooks down); it never
    /// stops the caller.
    pub fn new(opts: CollectorOptions, loaded: Result<PerfProbes, ProbeError>) -> Self {
        let (state, ring) = match loaded {
            Ok(mut p) => {
                tracing::info!(
                    method = %p.method(),
                    hooks = ?p.hooks().iter().filter(|h| h.method.is_some()).map(|h| h.function).collect::<Vec<_>>(),
                    "eBPF perf-event probes attached"
                );
                if let Some(e) = p.stats_error() {
                    tracing::warn!(error = %e, "BPF run-time stats requested but unavailable");
                }
                let ring = p.take_ring_buffer();
                (State::Up(Box::new(p)), ring)
            }
            Err(e) => {
                // The engine logs the collector failure with this reason once; no second line.
                tracing::debug!(reason = %e, "eBPF perf-event probes are down");
                (State::Down(Arc::new(e)), None)
            }
        };
        Self {
            inner: Mutex::new(Inner {
                state,
                previous: None,
                down_text: None,
                spare_down: None,
            }),
            ring: Mutex::new(ring),
            counters: Arc::new(RingCounters::default()),
            opts,
        }
    }

    /// Why the probes are down, if they are.
    pub fn down_reason(&self) -> Option<String> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        match &inner.state {
            State::Up(_) => None,
            State::Down(r) => Some(r.to_string()),
        }
    }

    /// The ring buffer reader, once (the daemon spawns it on its runtime; `check` does not
    /// need it).
    pub fn take_ring_reader(&self) -> Option<RingReader> {
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner()).take()?;
        Some(RingReader {
            ring,
            counters: self.counters.clone(),
        })
    }

    fn section(
        &self,
        inner: &mut Inner,
        ctx: &Ctx<'_>,
        now: Duration,
    ) -> Result<PerfSection, DownReason> {
        let probes = match &mut inner.state {
            State::Up(p) => p,
            State::Down(reason) => return Err(reason.clone()),
        };
        let readings = probes.read().map_err(|e| Arc::new(e) as DownReason)?;
        let totals = readings.totals();

        // Owners that exited give their slot back (on rescans, so the check is rare).
        if ctx.rescan {
            forget_exited(probes, &readings.owners, &ctx.paths.procfs);
        }

        let previous = inner.previous.as_ref();
        let rates = previous.and_then(|prev| interval(prev, &totals, now));
        let since = previous.zip(rates.map(|(dt, _, _)| dt));
        let ranked = rank_owners(&readings.owners, since, self.opts.top_owners);

        let section = PerfSection {
            method: Some(probes.method().as_str().to_owned()),
            hooks: probes
                .hooks()
                .iter()
                .map(|h| PerfHook {
                    function: h.function.to_owned(),
                    up: h.method.is_some(),
                    error: h.error.clone(),
                })
                .collect(),
            down_reason: None,
            totals: counters(&totals),
            per_cpu: if self.opts.per_cpu {
                readings
                    .per_cpu
                    .iter()
                    .enumerate()
                    .map(|(cpu, c)| (cpu as u32, counters(c)))
                    .collect()
            } else {
                Vec::new()
            },
            owners: ranked
                .iter()
                .map(|(o, _)| PerfOwner {
                    pid: o.tgid,
                    comm: o.comm.clone(),
                    bpf_outputs: o.bpf_outputs,
                    sample_outputs: o.sample_outputs,
                    wakeups: o.wakeups,
                })
                .collect(),
            owners_tracked: readings.owners.len(),
            rates: rates.map(|rates| perf_rates(rates, &ranked)),
            programs: readings
                .programs
                .iter()
                .filter(|(_, s)| s.run_count > 0 || s.run_time_ns > 0)
                .map(|(f, s)| PerfProgramStats {
                    function: (*f).to_owned(),
                    run_count: s.run_count,
                    run_time_ns: s.run_time_ns,
                })
                .collect(),
            ring: PerfRing {
                emitted: totals.events_emitted,
                dropped: totals.events_dropped,
                read: self.counters.read.load(Ordering::Relaxed),
                storms: self.counters.storms.load(Ordering::Relaxed),
            },
        };
        inner.previous = Some(Previous {
            at: now,
            totals,
            owners: readings
                .owners
                .iter()
                .map(|o| (o.tgid, (o.outputs(), o.wakeups)))
                .collect(),
        });
        Ok(section)
    }
}

/// Gives the probe map's slots of owners that exited back.
fn forget_exited(probes: &mut PerfProbes, owners: &[OwnerCounts], procfs: &Path) {
    let gone: Vec<u32> = owners
        .iter()
        .map(|o| o.tgid)
        .filter(|&t| t != 0 && !procfs.join(t.to_string()).exists())
        .collect();
    if !gone.is_empty() {
        let n = probes.forget_owners(&gone);
        tracing::debug!(
            forgotten = n,
            "exited perf-event owners removed from the probe map"
        );
    }
}

/// Seconds since the previous sample and the outputs and wakeups within them; none when no
/// time passed.
fn interval(prev: &Previous, totals: &CpuCounts, now: Duration) -> Option<(f64, f64, f64)> {
    let dt = now.checked_sub(prev.at)?.as_secs_f64();
    (dt > 0.0).then(|| {
        let outputs = totals.outputs().saturating_sub(prev.totals.outputs()) as f64;
        let wakeups = totals.wakeups.saturating_sub(prev.totals.wakeups) as f64;
        (dt, outputs, wakeups)
    })
}

/// The `top` busiest owners with their output and wakeup rates since the previous sample
/// (`since`, with the seconds in between), busiest first: by wakeup rate, output rate, then
/// wakeups and outputs since the probes loaded.
fn rank_owners<'o>(
    owners: &'o [OwnerCounts],
    since: Option<(&Previous, f64)>,
    top: usize,
) -> Vec<(&'o OwnerCounts, (f64, f64))> {
    let owner_rate = |o: &OwnerCounts| -> (f64, f64) {
        match since {
            Some((prev, dt)) => {
                let (po, pw) = prev.owners.get(&o.tgid).copied().unwrap_or((0, 0));
                (
                    o.outputs().saturating_sub(po) as f64 / dt,
                    o.wakeups.saturating_sub(pw) as f64 / dt,
                )
            }
            None => (0.0, 0.0),
        }
    };
    let mut ranked: Vec<(&OwnerCounts, (f64, f64))> =
        owners.iter().map(|o| (o, owner_rate(o))).collect();
    ranked.sort_by(|(a, (ao, aw)), (b, (bo, bw))| {
        bw.total_cmp(aw)
            .then(bo.total_cmp(ao))
            .then(b.wakeups.cmp(&a.wakeups))
            .then(b.outputs().cmp(&a.outputs()))
            .then(a.tgid.cmp(&b.tgid))
    });
    ranked.truncate(top);
    ranked
}

/// The interval's rates, node-wide and of the ranked owners.
fn perf_rates(
    (dt, outputs, wakeups): (f64, f64, f64),
    ranked: &[(&OwnerCounts, (f64, f64))],
) -> PerfRates {
    PerfRates {
        interval_seconds: dt,
        outputs_per_second: outputs / dt,
        wakeups_per_second: wakeups / dt,
        wakeup_ratio: if outputs > 0.0 {
            wakeups / outputs
        } else {
            0.0
        },
        owners: ranked
            .iter()
            .map(|(o, (orate, wrate))| PerfOwnerRate {
                pid: o.tgid,
                comm: o.comm.clone(),
                outputs_per_second: *orate,
                wakeups_per_second: *wrate,
            })
            .collect(),
    }
}

fn counters(c: &CpuCounts) -> PerfCounters {
    PerfCounters {
        bpf_outputs: c.bpf_outputs,
        sample_outputs: c.sample_outputs,
        wakeups: c.wakeups,
        untracked: c.untracked,
    }
}

/// The eBPF probes' counts: perf-event outputs and wakeups per CPU and owner.
pub const NAME: CollectorName = CollectorName::new("perf_probes");

// Its failure says something about the kernel or the daemon's privileges, not about the
// node's health: the eBPF probes need BTF, kprobes or fentry trampolines and
// CAP_BPF/CAP_PERFMON. The binary builds it: it holds the loader.
nodemedic_collect::register!(registry::Declaration {
    name: NAME,
    order: 74,
    switch: registry::Switch::Elsewhere("[probes]"),
    optional: true,
    checks: registry::Checks {
        fixtures: registry::Fixtures::NotFiles(registry::Instead::new(
            "it reads the eBPF probes' maps and ring buffer, on this kernel (and in the VM \
             test, tests/vm, on a guest's)",
            "crates/nodemedic-probe/tests/this_kernel.rs",
            "load_attaches_or_names_the_cause",
        )),
        golden: registry::Golden::Series(&[("perf-probes", "nodemedic_perf_event_wakeup_ratio ")]),
        fuzz: registry::Fuzz::NoParser(registry::Instead::new(
            "it reads fixed-layout records its own BPF programs write, no text: their \
             decoding is tested",
            "crates/nodemedic-probe/src/abi.rs",
            "event_round_trip_and_rejects",
        )),
    },
    faults: &[],
    render: Some(crate::render::render),
    build: registry::Build::ByBinary,
});

impl Collector for PerfProbeCollector {
    fn name(&self) -> CollectorName {
        NAME
    }

    fn collect(&self, ctx: &Ctx<'_>, snapshot: &mut Snapshot) -> Result<Collected, CollectError> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        match self.section(&mut inner, ctx, snapshot.at) {
            Ok(section) => {
                snapshot.put(section);
                Ok(Collected::default())
            }
            Err(down) => {
                let text = inner.down_text(&down);
                let reason = text.strip_prefix(DOWN_PREFIX).unwrap_or(&text);
                snapshot.put(match inner.spare_down.take() {
                    Some(past) if past.down_reason.as_deref() == Some(reason) => past,
                    // Hooks are listed down with the reason, so metrics show probe_up 0 for
                    // each.
                    _ => PerfSection {
                        hooks: HOOKS
                            .iter()
                            .map(|h| PerfHook {
                                function: h.function.to_owned(),
                                up: false,
                                error: Some(reason.to_owned()),
                            })
                            .collect(),
                        down_reason: Some(reason.to_owned()),
                        ..PerfSection::default()
                    },
                });
                Err(CollectError::down(ProbesDown { text }))
            }
        }
    }

    fn recycle(&self, snapshot: &mut Snapshot) {
        if snapshot
            .get::<PerfSection>()
            .is_some_and(|p| p.down_reason.is_some())
        {
            let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            inner.spare_down = snapshot.take::<PerfSection>();
        }
    }
}

/// Reads the probes' ring buffer on the daemon's runtime. The kernel side submits records
/// without waking us until `ring_buffer_wakeup_bytes` are queued, so the reader wakes either
/// then (readable fd) or on its own timer, and drains everything each time: never one wakeup
/// per record.
pub struct RingReader {
    ring: RingBuf<MapData>,
    counters: Arc<RingCounters>,
}

pub const RING_DRAIN_INTERVAL: Duration = Duration::from_secs(1);

impl RingReader {
    fn drain(ring: &mut RingBuf<MapData>, counters: &RingCounters) {
        while let Some(item) = ring.next() {
            counters.read.fetch_add(1, Ordering::Relaxed);
            match ProbeEvent::decode(&item) {
                Ok(ev) if ev.kind == EventKind::StormStart => {
                    counters.storms.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        cpu = ev.cpu,
                        pid = ev.tgid,
                        comm = %ev.comm,
                        wakeups = ev.value,
                        "perf-event wakeup storm starting on a CPU (kernel-side threshold reached within one second)"
                    );
                }
                Ok(ev) => {
                    tracing::debug!(pid = ev.tgid, comm = %ev.comm, cpu = ev.cpu, "new perf-event owner");
                }
                Err(e) => {
                    counters.undecodable.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(error = %e, "undecodable probe record");
                }
            }
        }
    }

    /// Runs until the fd fails (never, normally). Must run inside a tokio runtime.
    #[allow(unsafe_code)]
    pub async fn run(self) {
        // SAFETY: register_with_interest requires that the inner value's raw fd stays open
        // and the same for the AsyncFd's whole life. RingBuf owns its map fd (an OwnedFd in
        // MapData), never replaces or closes it while alive, and is moved into the AsyncFd,
        // which is the only owner from here on; the fd closes only when the AsyncFd drops it.
        let registered = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(
                self.ring,
                tokio::io::Interest::READABLE,
            )
        };
        let mut fd = match registered {
            Ok(fd) => fd,
            Err(e) => {
                tracing::warn!(error = %e, "cannot poll the probes' ring buffer; its records are not read");
                return;
            }
        };
        let mut tick = tokio::time::interval(RING_DRAIN_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                guard = fd.readable_mut() => match guard {
                    Ok(mut g) => {
                        Self::drain(g.get_inner_mut(), &self.counters);
                        g.clear_ready();
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "polling the probes' ring buffer failed; reader stops");
                        return;
                    }
                },
                _ = tick.tick() => Self::drain(fd.get_mut(), &self.counters),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(tgid: u32, bpf_outputs: u64, wakeups: u64) -> OwnerCounts {
        OwnerCounts {
            tgid,
            comm: format!("task{tgid}"),
            bpf_outputs,
            sample_outputs: 0,
            wakeups,
        }
    }

    fn previous(at: u64, wakeups: u64, owners: &[(u32, (u64, u64))]) -> Previous {
        Previous {
            at: Duration::from_secs(at),
            totals: CpuCounts {
                wakeups,
                ..CpuCounts::default()
            },
            owners: owners.iter().copied().collect(),
        }
    }

    /// Probes that could not load report the same reason every sample, with each hook down,
    /// and a sample given back is used again rather than built anew.
    #[test]
    fn probes_down_report_their_reason_every_sample() {
        let collector = PerfProbeCollector::new(
            CollectorOptions::default(),
            Err(ProbeError::NoBtf {
                path: "/sys/kernel/btf/vmlinux".into(),
            }),
        );
        let paths = nodemedic_collect::Paths::default();
        let want = "eBPF probes down: kernel BTF is missing (/sys/kernel/btf/vmlinux): the \
                    probes read struct perf_event through BTF CO-RE and need a kernel built with \
                    CONFIG_DEBUG_INFO_BTF=y";
        let mut first: Option<PerfSection> = None;
        let mut hooks_at = Vec::new();
        for _ in 0..3 {
            let mut snap = Snapshot::default();
            let err = nodemedic_collect::collect_once(&collector, &paths, &mut snap).unwrap_err();
            assert_eq!(err.to_string(), want);
            let perf = snap.get::<PerfSection>().unwrap().clone();
            assert_eq!(perf.down_reason.as_deref(), want.strip_prefix(DOWN_PREFIX));
            assert_eq!(perf.hooks.len(), HOOKS.len());
            assert!(perf
                .hooks
                .iter()
                .all(|h| !h.up && h.error == perf.down_reason));
            assert_eq!(first.get_or_insert_with(|| perf.clone()), &perf);
            hooks_at.push(snap.get::<PerfSection>().map(|p| p.hooks.as_ptr()));
            collector.recycle(&mut snap);
            assert!(
                snap.get::<PerfSection>().is_none(),
                "the down section was taken back"
            );
        }
        assert_eq!(
            hooks_at[1], hooks_at[0],
            "the section given back is used again"
        );
        assert_eq!(hooks_at[2], hooks_at[0]);
    }

    #[test]
    fn an_interval_needs_time_to_have_passed() {
        let prev = previous(10, 100, &[]);
        let totals = CpuCounts {
            bpf_outputs: 40,
            sample_outputs: 20,
            wakeups: 130,
            ..CpuCounts::default()
        };
        assert_eq!(
            interval(&prev, &totals, Duration::from_secs(12)),
            Some((2.0, 60.0, 30.0))
        );
        assert_eq!(interval(&prev, &totals, Duration::from_secs(10)), None);
        assert_eq!(interval(&prev, &totals, Duration::from_secs(9)), None);
    }

    #[test]
    fn owners_rank_by_their_rates_since_the_previous_sample() {
        // 1 woke most in all but not since; 3 is new: counted from zero.
        let owners = [
            owner(1, 0, 1000),
            owner(2, 10, 20),
            owner(3, 40, 10),
            owner(4, 0, 0),
        ];
        let prev = previous(0, 0, &[(1, (0, 1000)), (2, (0, 0))]);
        let ranked = rank_owners(&owners, Some((&prev, 2.0)), 3);
        let got: Vec<(u32, (f64, f64))> = ranked.iter().map(|(o, r)| (o.tgid, *r)).collect();
        assert_eq!(
            got,
            vec![(2, (5.0, 10.0)), (3, (20.0, 5.0)), (1, (0.0, 0.0))]
        );

        // Without a previous sample, by what they did since the probes loaded.
        let ranked = rank_owners(&owners, None, 4);
        let got: Vec<u32> = ranked.iter().map(|(o, _)| o.tgid).collect();
        assert_eq!(got, vec![1, 2, 3, 4]);
    }
}
