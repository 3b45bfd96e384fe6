//! Collectors: each reads one kernel source under an injectable root and fills its part of a
//! [`Snapshot`]. A collector never decides anything; it reports what it read, or why it could
//! not.
//!
//! Failures are isolated: one collector failing marks only itself failed (with a reason) and
//! the others still run. A kernel feature that does not exist on this machine (no
//! `effective_affinity`, no `nohz_full`, no irqbalance config) is "no data", not a failure.

pub mod commit_timer;
mod cpu_time;
mod dir_watch;
mod fsread;
pub mod host_access;
pub mod netns;
mod open_file;
mod reader;
pub mod registry;
mod self_stats;
pub mod sources;
#[allow(unsafe_code)]
mod uring;
pub mod widen;
pub use cpu_time::process_cpu_seconds;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use commit_timer::{CommitTimer, CommitTimerCollector, CommitTimerConfig};
pub use fsread::ReadError;
pub use reader::{Reader, ReaderConfig, DEFAULT_MAX_OPEN_FILES};
pub use self_stats::SelfStats;
// The sample's types this crate's API speaks in (they live in nodemedic-sample, below
// every collector, detector and output).
pub use nodemedic_sample::status::{Backend, ReaderStatus};
pub use nodemedic_sample::{CollectorName, CollectorState, CollectorStatus, Snapshot};

/// Where the kernel's files are. Every reader resolves paths under these roots so that tests
/// can point them at fixture trees and a container can point them at the host's mounts.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Paths {
    pub procfs: PathBuf,
    pub sysfs: PathBuf,
    pub cgroupfs: PathBuf,
    /// Root of the host filesystem, for configuration files such as `/etc/default/irqbalance`.
    pub rootfs: PathBuf,
}

impl Default for Paths {
    fn default() -> Self {
        Self {
            procfs: "/proc".into(),
            sysfs: "/sys".into(),
            cgroupfs: "/sys/fs/cgroup".into(),
            rootfs: "/".into(),
        }
    }
}

impl Paths {
    /// All roots under one directory, as when the host is mounted at `/host` in a pod.
    pub fn under(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        Self {
            procfs: root.join("proc"),
            sysfs: root.join("sys"),
            cgroupfs: root.join("sys/fs/cgroup"),
            rootfs: root,
        }
    }
}

/// The result of one collector run that succeeded.
#[derive(Debug, Default)]
pub struct Collected {
    /// Things read but not fully understood (skipped lines, vanished IRQs, unreadable
    /// optional files). They do not fail the collector but are shown in its status.
    pub warnings: Vec<String>,
    /// Set when the kernel does not provide the source at all (with the reason): the
    /// collector ran fine and has no data, which is not the same as zeros.
    pub unavailable: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The collector panicked (a bug); the panic's message.
    #[error("collector panicked (bug): {0}")]
    Panicked(String),
    /// What the collector depends on is down (the eBPF probes, the disk probe, the pod
    /// watch); the error says why. Shared: the same error is reported by every sample.
    #[error(transparent)]
    Down(Arc<dyn std::error::Error + Send + Sync>),
}

impl CollectError {
    /// [`CollectError::Down`] from any error.
    pub fn down(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        CollectError::Down(Arc::new(e))
    }
}

/// What a collector reads with: where the files are, the read layer, and whether this sample
/// is a rescan.
pub struct Ctx<'a> {
    pub paths: &'a Paths,
    pub reader: &'a Reader,
    /// True on the first sample and then once per rescan interval. Data that rarely changes
    /// (CPU topology, PCI devices, configuration files) need only be re-read then; a collector
    /// that caches it must still put it in every snapshot.
    pub rescan: bool,
    /// Whose network namespace `/proc/net` and `/proc/sys/net` describe here: for a collector
    /// that declares [`netns::NetnsUse::Partly`].
    pub netns: &'a netns::NetnsView,
}

/// Runs `collector` once on `paths` into `snapshot`, outside any engine, with a read layer
/// of its own and no rescan: one collector's outcome on its own (a test, a tool).
pub fn collect_once(
    collector: &dyn Collector,
    paths: &Paths,
    snapshot: &mut Snapshot,
) -> Result<Collected, CollectError> {
    let reader = Reader::new();
    let netns = netns::network_namespace(paths);
    let ctx = Ctx {
        paths,
        reader: &reader,
        rescan: false,
        netns: &netns,
    };
    match refused(collector, &netns) {
        Some(unavailable) => Ok(unavailable),
        None => collector.collect(&ctx, snapshot),
    }
}

/// A collector whose declared files would describe another network namespace than the
/// host's is not run: it is unavailable, with the reason.
fn refused(collector: &dyn Collector, netns: &netns::NetnsView) -> Option<Collected> {
    netns
        .refuses(collector.network_namespace())
        .map(|reason| Collected {
            unavailable: Some(reason),
            ..Default::default()
        })
}

/// One source of kernel data.
pub trait Collector: Send + Sync {
    /// Stable name, used in metrics labels, config and status.
    fn name(&self) -> CollectorName;
    fn collect(&self, ctx: &Ctx<'_>, snapshot: &mut Snapshot) -> Result<Collected, CollectError>;
    /// Takes back what it put in a past `snapshot` that nothing else holds any more, to fill
    /// again in the next sample rather than allocate (the interrupts table). Optional.
    fn recycle(&self, _snapshot: &mut Snapshot) {}
    /// What it reads that belongs to a network namespace (`/proc/net`, `/proc/sys/net`,
    /// netlink): a collector that reads any says so here ([`netns`]). None by default.
    fn network_namespace(&self) -> netns::NetnsUse {
        netns::NetnsUse::None
    }
}

/// How often rarely-changing sources are re-read when nothing else is said.
pub const DEFAULT_RESCAN_INTERVAL: Duration = Duration::from_secs(60);

/// One collector's outcome in one sample.
#[derive(Debug)]
pub struct CollectorRun {
    pub name: CollectorName,
    pub duration: Duration,
    pub outcome: Result<Collected, CollectError>,
}

/// Most warnings kept per collector: a corrupt file can produce one per line.
const MAX_WARNINGS: usize = 20;

impl CollectorRun {
    /// How the collector fared, for `/status` and metrics.
    pub fn status(&self) -> CollectorStatus {
        let (state, warnings) = match &self.outcome {
            Ok(c) => {
                let mut w: Vec<String> = c.warnings.iter().take(MAX_WARNINGS).cloned().collect();
                if c.warnings.len() > MAX_WARNINGS {
                    w.push(format!("… and {} more", c.warnings.len() - MAX_WARNINGS));
                }
                let state = match &c.unavailable {
                    Some(reason) => CollectorState::Unavailable {
                        reason: reason.clone(),
                    },
                    None => CollectorState::Active,
                };
                (state, w)
            }
            Err(e) => (
                CollectorState::Failed {
                    reason: e.to_string(),
                },
                Vec::new(),
            ),
        };
        CollectorStatus {
            name: self.name,
            state,
            warnings,
            last_duration_seconds: self.duration.as_secs_f64(),
        }
    }
}

/// The collectors of a daemon, run in order (later ones may use what earlier ones read),
/// with the read layer they share.
pub struct CollectorSet {
    collectors: Vec<Box<dyn Collector>>,
    reader: Reader,
    rescan_interval: Duration,
    last_rescan: Option<Duration>,
    /// Whose network namespace the paths' namespaced files describe, seen on each rescan.
    netns: netns::NetnsView,
}

impl CollectorSet {
    /// The collectors that read with no setting of the configuration, built with the
    /// defaults (`Settings::defaults`): every registered one built here but the cgroups
    /// (which cgroups it watches) and tuning (where NIC limits come from) collectors, which
    /// tests and benches build with the settings they need.
    pub fn all() -> Self {
        use sources::{cgroups, tuning};
        Self::registered(&registry::Settings::defaults(), |n| {
            n != cgroups::NAME && n != tuning::NAME
        })
    }

    /// Every registered collector that `settings` builds here and `keep` keeps, in order
    /// (those the binary builds are left out).
    pub fn registered(
        settings: &registry::Settings<'_>,
        keep: impl Fn(CollectorName) -> bool,
    ) -> Self {
        let collectors = registry::declarations()
            .iter()
            .filter(|d| keep(d.name))
            .filter_map(|d| match d.build {
                registry::Build::Here(build) => build(settings),
                registry::Build::ByBinary => None,
            })
            .collect();
        Self::new(collectors)
    }

    pub fn new(collectors: Vec<Box<dyn Collector>>) -> Self {
        Self {
            collectors,
            reader: Reader::new(),
            rescan_interval: DEFAULT_RESCAN_INTERVAL,
            last_rescan: None,
            netns: netns::NetnsView::Host,
        }
    }

    /// Adds a collector after the others (a source that lives in another crate).
    pub fn with(mut self, collector: Box<dyn Collector>) -> Self {
        self.collectors.push(collector);
        self
    }

    pub fn with_rescan_interval(mut self, interval: Duration) -> Self {
        self.rescan_interval = interval;
        self
    }

    /// Replaces the read layer (backend, fd bound).
    pub fn with_reader(mut self, reader: Reader) -> Self {
        self.reader = reader;
        self
    }

    /// What the read layer is doing (backend, kept-open files, fallbacks).
    pub fn reader_status(&self) -> ReaderStatus {
        self.reader.status()
    }

    /// Keeps only the collectors for which `enabled(name)` is true.
    pub fn filtered(mut self, enabled: impl Fn(CollectorName) -> bool) -> Self {
        self.collectors.retain(|c| enabled(c.name()));
        self
    }

    pub fn names(&self) -> Vec<CollectorName> {
        self.collectors.iter().map(|c| c.name()).collect()
    }

    /// Gives a past snapshot that nothing else holds to every collector, for its storage
    /// ([`Collector::recycle`]).
    pub fn recycle(&self, mut snapshot: Snapshot) {
        for c in &self.collectors {
            c.recycle(&mut snapshot);
        }
    }

    /// Runs every collector once and returns the snapshot and each collector's outcome.
    /// A panicking collector (a bug) is caught and reported as failed.
    ///
    /// `at` is the sample's monotonic time; it also decides whether this sample is a rescan.
    pub fn sample(&mut self, paths: &Paths, at: Duration) -> (Snapshot, Vec<CollectorRun>) {
        let rescan = self
            .last_rescan
            .is_none_or(|last| at < last || at - last >= self.rescan_interval);
        if rescan {
            self.last_rescan = Some(at);
            self.netns = netns::network_namespace(paths);
        }
        self.reader.begin_sample(rescan);
        let ctx = Ctx {
            paths,
            reader: &self.reader,
            rescan,
            netns: &self.netns,
        };
        let mut snapshot = Snapshot {
            at,
            timestamp: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0),
            ..Default::default()
        };
        let mut runs = Vec::with_capacity(self.collectors.len());
        for collector in &self.collectors {
            let start = Instant::now();
            let outcome = match refused(collector.as_ref(), &self.netns) {
                Some(unavailable) => Ok(unavailable),
                None => catch_unwind(AssertUnwindSafe(|| collector.collect(&ctx, &mut snapshot)))
                    .unwrap_or_else(|panic| {
                        Err(CollectError::Panicked(panic_message(panic.as_ref())))
                    }),
            };
            runs.push(CollectorRun {
                name: collector.name(),
                duration: start.elapsed(),
                outcome,
            });
        }
        self.reader.end_sample();
        (snapshot, runs)
    }
}

/// The text of a caught panic's payload.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Monotonic time since the first call, for [`Snapshot::at`].
pub fn monotonic_now() -> Duration {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Declares files of the reader's network namespace; running it would be a bug here.
    struct Conntrack;

    impl Collector for Conntrack {
        fn name(&self) -> CollectorName {
            crate::sources::softnet::NAME
        }
        fn collect(&self, _: &Ctx<'_>, _: &mut Snapshot) -> Result<Collected, CollectError> {
            panic!("run in another network namespace")
        }
        fn network_namespace(&self) -> netns::NetnsUse {
            netns::NetnsUse::Reader("/proc/sys/net/netfilter/nf_conntrack_count")
        }
    }

    /// Outside the host's namespace a collector that declares the reader's files is not run
    /// and is unavailable with the reason; in the host's it runs.
    #[test]
    fn a_reader_namespace_collector_is_unavailable_outside_the_hosts() {
        let other = netns::NetnsView::Other("its namespace has lo".into());
        let Some(c) = refused(&Conntrack, &other) else {
            panic!("run outside the host's namespace")
        };
        let why = c.unavailable.unwrap_or_default();
        assert!(
            why.starts_with("/proc/sys/net/netfilter/nf_conntrack_count describe the reader's")
                && why.contains("(its namespace has lo)"),
            "{why}"
        );
        assert!(refused(&Conntrack, &netns::NetnsView::Host).is_none());
        assert!(refused(&sources::SoftnetCollector::default(), &other).is_none());
    }
}
