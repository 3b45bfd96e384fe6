//! The node's I/O tuning settings (`/proc/cmdline`, IOMMU groups, CPU vulnerabilities,
//! cpufreq, cpuidle, NIC queues and masks, channels and rings, `net.core` budgets,
//! transparent hugepages) and the NIC drop counters behind the ring rule.

mod parse;
mod render;

pub use parse::*;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nodemedic_kernel::CpuSet;
use nodemedic_sample::Snapshot;

use self::parse as tuning;
use super::RescanCache;
use crate::sources::pci::Netdevs;
use crate::sources::topology::Topology;
use crate::{CollectError, Collected, Collector, Ctx, ReadError, Reader};

/// The node's I/O tuning settings and NIC drop counters.
pub const NAME: crate::CollectorName = crate::CollectorName::new("tuning");

crate::register!(crate::registry::Declaration {
    name: NAME,
    order: 100,
    switch: crate::registry::Switch::Collectors,
    optional: false,
    checks: crate::registry::Checks {
        fixtures: crate::registry::Fixtures::Trees(&["tuning-nic-channels", "tuning-iommu-strict"]),
        golden: crate::registry::Golden::Series(&[
            ("tuning-nic-channels", "nodemedic_net_channels{"),
            (
                "tuning-iommu-strict",
                "nodemedic_iommu_groups{type=\"strict\"}",
            ),
        ]),
        fuzz: crate::registry::Fuzz::Targets(&[
            "tuning_cmdline",
            "tuning_value",
            "tuning_choice",
            "tuning_queue",
            "cpuinfo",
        ]),
    },
    faults: &[
        crate::registry::FileKind {
            name: "netdev_budget",
            tree: "tuning-nic-channels",
            pattern: "proc/sys/net/core/netdev_budget",
            table: false,
            optional: true,
            empty_ok: false,
            impact: crate::registry::Impact::NoGroup,
            may_change: &["collector/tuning"],
        },
        crate::registry::FileKind {
            name: "nic rx_dropped",
            tree: "tuning-nic-channels",
            pattern: "sys/class/net/*/statistics/rx_dropped",
            table: false,
            optional: true,
            empty_ok: false,
            impact: crate::registry::Impact::NoGroup,
            may_change: &["collector/tuning", "series/tuning"],
        },
        crate::registry::FileKind {
            name: "iommu group type",
            tree: "tuning-iommu-strict",
            pattern: "sys/kernel/iommu_groups/*/type",
            table: false,
            optional: true,
            empty_ok: false,
            impact: crate::registry::Impact::NoGroup,
            may_change: &["collector/tuning", "series/tuning"],
        },
    ],
    render: Some(render::render),
    build: crate::registry::Build::Here(|settings| {
        Some(Box::new(TuningCollector::from_settings(settings)))
    }),
});

/// Channels and rings of one interface, as the driver reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicLimits {
    pub channels: Queried<Channels>,
    pub rings: Queried<Rings>,
}

impl NicLimits {
    fn absent(reason: &str) -> Self {
        NicLimits {
            channels: Queried::Absent(reason.to_string()),
            rings: Queried::Absent(reason.to_string()),
        }
    }
}

/// Where channel and ring sizes come from. They live in the driver, not in a file: the real
/// source is ethtool netlink ([`EthtoolNetlink`]); fixture tests use [`NicLimitsFiles`].
pub trait NicLimitsSource: Send + Sync {
    /// Channels and rings of each of `interfaces`. Never fails: what cannot be read is
    /// [`Queried::Absent`] with the reason.
    fn query(&self, interfaces: &[String]) -> BTreeMap<String, NicLimits>;
}

/// No source: every interface's channels and rings are absent with this reason (ethtool
/// netlink would answer for another network namespace's interfaces).
#[derive(Debug, Clone)]
pub struct NicLimitsUnavailable(pub String);

impl NicLimitsSource for NicLimitsUnavailable {
    fn query(&self, interfaces: &[String]) -> BTreeMap<String, NicLimits> {
        interfaces
            .iter()
            .map(|name| (name.clone(), NicLimits::absent(&self.0)))
            .collect()
    }
}

/// Whether ethtool netlink, which answers for this process's network namespace, answers
/// for the interfaces listed under `sysfs`. The process's own `/sys` lists its own
/// namespace's interfaces. Another root (`--host-root /host` in a pod) lists the host's:
/// netlink answers for them only in the host's namespace (`hostNetwork`), which shows as the
/// same interfaces, by index and address, in this process's own `/sys/class/net`. (PID 1's
/// namespace link would say it directly, but reading it takes CAP_SYS_PTRACE.) `Err` with
/// the reason when they differ or cannot be compared.
pub fn netlink_sees_host(sysfs: &std::path::Path) -> Result<(), ForeignInterfaces> {
    let own = std::path::Path::new("/sys");
    if sysfs == own {
        return Ok(());
    }
    let listed = sysfs.join("class/net");
    let names = std::fs::read_dir(&listed).map_err(|source| ForeignInterfaces::Unlisted {
        path: listed.clone(),
        source,
    })?;
    let identity = |root: &std::path::Path, name: &std::ffi::OsStr| {
        let dir = root.join("class/net").join(name);
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
        (read("ifindex"), read("address"))
    };
    for entry in names.flatten() {
        let name = entry.file_name();
        let theirs = identity(sysfs, &name);
        if theirs != identity(own, &name) || theirs.0.is_none() {
            return Err(ForeignInterfaces::Other {
                name: name.to_string_lossy().into_owned(),
                root: sysfs.to_path_buf(),
            });
        }
    }
    Ok(())
}

/// Why ethtool netlink is not asked for the interfaces under a sysfs root.
#[derive(Debug, thiserror::Error)]
pub enum ForeignInterfaces {
    #[error("cannot list the interfaces under {}: {source}", path.display())]
    Unlisted {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{name} under {} is not the interface of that name in nodemedic's network namespace: \
         ethtool netlink would answer for another one (channels and rings need hostNetwork)",
        root.display()
    )]
    Other { name: String, root: PathBuf },
}

/// The reason given when the kernel has no ethtool generic netlink family; the words
/// `ethtool netlink unsupported` are what callers and tests match.
pub const ETHTOOL_NETLINK_UNSUPPORTED: &str =
    "ethtool netlink unsupported: the kernel has no ethtool generic netlink family \
     (CONFIG_ETHTOOL_NETLINK, Linux 5.6+)";

/// Channels and rings through ethtool generic netlink, with the rust-netlink `ethtool`
/// crate. The crate is async-only; the collectors are synchronous, so each query runs on a
/// current-thread runtime of its own, made for it (queries run on rescans only).
#[derive(Debug, Clone)]
pub struct EthtoolNetlink {
    /// Bound on one interface's queries: a wedged socket must not stall the sample.
    pub timeout: Duration,
}

impl Default for EthtoolNetlink {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(2),
        }
    }
}

impl NicLimitsSource for EthtoolNetlink {
    fn query(&self, interfaces: &[String]) -> BTreeMap<String, NicLimits> {
        // A runtime cannot be started inside another one's context (tokio panics): called
        // from async code (`check` run from a runtime, a collector on a runtime thread), the
        // query moves to a thread of its own.
        if tokio::runtime::Handle::try_current().is_ok() {
            return std::thread::scope(|scope| {
                scope
                    .spawn(|| self.query_here(interfaces))
                    .join()
                    .unwrap_or_else(|_| {
                        interfaces
                            .iter()
                            .map(|i| (i.clone(), NicLimits::absent("the netlink query panicked")))
                            .collect()
                    })
            });
        }
        self.query_here(interfaces)
    }
}

impl EthtoolNetlink {
    fn query_here(&self, interfaces: &[String]) -> BTreeMap<String, NicLimits> {
        let all_absent = |reason: &str| {
            interfaces
                .iter()
                .map(|i| (i.clone(), NicLimits::absent(reason)))
                .collect()
        };
        if interfaces.is_empty() {
            return BTreeMap::new();
        }
        let rt = match tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => return all_absent(&format!("cannot start the netlink runtime: {e}")),
        };
        rt.block_on(async {
            let (connection, handle, _) = match ethtool::new_connection() {
                Ok(c) => c,
                Err(e) => {
                    return all_absent(&format!("cannot open a generic netlink socket: {e}"));
                }
            };
            let driver = tokio::spawn(connection);
            let mut out = BTreeMap::new();
            let mut unsupported = false;
            for name in interfaces {
                if unsupported {
                    out.insert(name.clone(), NicLimits::absent(ETHTOOL_NETLINK_UNSUPPORTED));
                    continue;
                }
                // One interface's two requests go out together on the one socket.
                let (channels, rings) = tokio::join!(
                    bounded(self.timeout, channels_of(handle.clone(), name)),
                    bounded(self.timeout, rings_of(handle.clone(), name)),
                );
                unsupported = [channels.reason(), rings.reason()]
                    .iter()
                    .any(|r| r.is_some_and(|r| r.starts_with(ETHTOOL_NETLINK_UNSUPPORTED)));
                out.insert(name.clone(), NicLimits { channels, rings });
            }
            driver.abort();
            out
        })
    }
}

async fn bounded<T>(
    timeout: Duration,
    query: impl std::future::Future<Output = Queried<T>>,
) -> Queried<T> {
    tokio::time::timeout(timeout, query)
        .await
        .unwrap_or_else(|_| {
            Queried::Absent(format!("ethtool netlink did not answer within {timeout:?}"))
        })
}

/// Why a request failed, in words an operator can act on.
fn netlink_reason(what: &str, e: &ethtool::EthtoolError) -> String {
    match e {
        ethtool::EthtoolError::NetlinkError(msg) => match -msg.raw_code() {
            libc::EOPNOTSUPP => format!("the driver does not report {what} (EOPNOTSUPP)"),
            libc::ENODEV => "the interface vanished".into(),
            _ => format!("ethtool netlink error reading {what}: {msg}"),
        },
        // The family is resolved on the first request; a kernel without it answers ENOENT.
        ethtool::EthtoolError::RequestFailed(m)
            if m.contains("os error 2") || m.contains("No such file") =>
        {
            ETHTOOL_NETLINK_UNSUPPORTED.to_string()
        }
        other => format!("ethtool netlink error reading {what}: {other}"),
    }
}

/// Every attribute of an ethtool netlink answer, folded into a `T` by `take` (which says
/// whether the attribute was one of `T`'s). Absent with the reason on an error, or when the
/// answer held none of them.
async fn fold_answer<T: Default>(
    what: &str,
    answer: Result<
        impl futures_util::Stream<
            Item = Result<
                netlink_packet_generic::GenlMessage<ethtool::EthtoolMessage>,
                ethtool::EthtoolError,
            >,
        >,
        ethtool::EthtoolError,
    >,
    mut take: impl FnMut(&mut T, &ethtool::EthtoolAttr) -> bool,
) -> Queried<T> {
    use futures_util::StreamExt;
    let mut stream = match answer {
        Ok(s) => Box::pin(s),
        Err(e) => return Queried::Absent(netlink_reason(what, &e)),
    };
    let mut value = T::default();
    let mut any = false;
    while let Some(msg) = stream.next().await {
        let msg = match msg {
            Ok(m) => m,
            Err(e) => return Queried::Absent(netlink_reason(what, &e)),
        };
        for nla in &msg.payload.nlas {
            any |= take(&mut value, nla);
        }
    }
    if any {
        Queried::Read(value)
    } else {
        Queried::Absent(format!(
            "ethtool netlink answered without {what} attributes"
        ))
    }
}

async fn channels_of(mut handle: ethtool::EthtoolHandle, name: &str) -> Queried<Channels> {
    let answer = handle.channel().get(Some(name)).execute().await;
    fold_answer("channels", answer, |c: &mut Channels, nla| {
        use ethtool::EthtoolChannelAttr as A;
        let ethtool::EthtoolAttr::Channel(attr) = nla else {
            return false;
        };
        match attr {
            A::RxMax(v) => c.rx_max = *v,
            A::TxMax(v) => c.tx_max = *v,
            A::OtherMax(v) => c.other_max = *v,
            A::CombinedMax(v) => c.combined_max = *v,
            A::RxCount(v) => c.rx = *v,
            A::TxCount(v) => c.tx = *v,
            A::OtherCount(v) => c.other = *v,
            A::CombinedCount(v) => c.combined = *v,
            _ => {}
        }
        true
    })
    .await
}

async fn rings_of(mut handle: ethtool::EthtoolHandle, name: &str) -> Queried<Rings> {
    let answer = handle.ring().get(Some(name)).execute().await;
    fold_answer("rings", answer, |r: &mut Rings, nla| {
        use ethtool::EthtoolRingAttr as A;
        let ethtool::EthtoolAttr::Ring(attr) = nla else {
            return false;
        };
        match attr {
            A::RxMax(v) => r.rx_max = *v,
            A::TxMax(v) => r.tx_max = *v,
            A::Rx(v) => r.rx = *v,
            A::Tx(v) => r.tx = *v,
            _ => {}
        }
        true
    })
    .await
}

/// Channels and rings from files, one per interface, for fixture trees (the driver's
/// answer cannot be a sysfs file). `DIR/<interface>` holds lines such as
///
/// ```text
/// channels rx=0/0 tx=0/0 other=1/1 combined=1/8
/// rings rx=256/4096 tx=256/4096
/// ```
///
/// (`current/max`), or `channels absent <reason>`. A missing file or line is absent with
/// that reason.
#[derive(Debug, Clone)]
pub struct NicLimitsFiles {
    pub dir: PathBuf,
}

impl NicLimitsSource for NicLimitsFiles {
    fn query(&self, interfaces: &[String]) -> BTreeMap<String, NicLimits> {
        interfaces
            .iter()
            .map(|name| {
                let path = self.dir.join(name);
                let limits = match std::fs::read_to_string(&path) {
                    Ok(text) => parse_limits_file(&text),
                    Err(e) => NicLimits::absent(&format!("{}: {e}", path.display())),
                };
                (name.clone(), limits)
            })
            .collect()
    }
}

fn parse_limits_file(text: &str) -> NicLimits {
    let mut out = NicLimits::absent("not in the file");
    for line in text.lines() {
        let mut words = line.split_ascii_whitespace();
        let kind = words.next();
        let rest: Vec<&str> = words.collect();
        if rest.first() == Some(&"absent") {
            let reason = rest.get(1..).unwrap_or_default().join(" ");
            match kind {
                Some("channels") => out.channels = Queried::Absent(reason),
                Some("rings") => out.rings = Queried::Absent(reason),
                _ => {}
            }
            continue;
        }
        let mut pairs = BTreeMap::new();
        let mut bad = None;
        for w in &rest {
            let parsed = w.split_once('=').and_then(|(k, v)| {
                let (cur, max) = v.split_once('/')?;
                Some((k, cur.parse::<u32>().ok()?, max.parse::<u32>().ok()?))
            });
            match parsed {
                Some((k, cur, max)) => {
                    pairs.insert(k, (cur, max));
                }
                None => bad = Some(format!("bad entry {w:?}")),
            }
        }
        let get = |k: &str| pairs.get(k).copied().unwrap_or((0, 0));
        match (kind, bad) {
            (Some("channels"), None) => {
                let (rx, rx_max) = get("rx");
                let (tx, tx_max) = get("tx");
                let (other, other_max) = get("other");
                let (combined, combined_max) = get("combined");
                out.channels = Queried::Read(Channels {
                    rx,
                    tx,
                    other,
                    combined,
                    rx_max,
                    tx_max,
                    other_max,
                    combined_max,
                });
            }
            (Some("rings"), None) => {
                let (rx, rx_max) = get("rx");
                let (tx, tx_max) = get("tx");
                out.rings = Queried::Read(Rings {
                    rx,
                    rx_max,
                    tx,
                    tx_max,
                });
            }
            (Some("channels"), Some(why)) => out.channels = Queried::Absent(why),
            (Some("rings"), Some(why)) => out.rings = Queried::Absent(why),
            _ => {}
        }
    }
    out
}

/// The `tuning` collector: the settings that silently cost I/O throughput, re-read on
/// rescans only (they change with a reboot, a sysctl or an `ethtool` command), and the NIC
/// drop counters, read every sample (the ring rule needs their rate).
///
/// A missing source (no cpufreq in a VM, no IOMMU groups, a kernel without ethtool netlink)
/// is recorded as absent, never a failure; a malformed file is a warning naming it.
pub struct TuningCollector {
    limits: Box<dyn NicLimitsSource>,
    settings: RescanCache<Arc<TuningSettings>>,
    /// Re-read the settings at a rescan only when this long has passed since the last
    /// reading; `None`: at every rescan.
    settings_interval: Option<Duration>,
    /// The sample time of the last reading of the settings.
    last_read: std::sync::Mutex<Option<Duration>>,
}

impl Default for TuningCollector {
    fn default() -> Self {
        Self::new(Box::new(EthtoolNetlink::default()))
    }
}

impl TuningCollector {
    /// With channels and rings from `limits` (see [`NicLimitsFiles`] for fixture trees).
    pub fn new(limits: Box<dyn NicLimitsSource>) -> Self {
        Self {
            limits,
            settings: RescanCache::default(),
            settings_interval: None,
            last_read: std::sync::Mutex::new(None),
        }
    }

    /// Re-reads the settings at most once per `interval` (at the first rescan after it), not
    /// at every rescan. A 256-CPU host has about 2,000 setting files (cpufreq policies, queue
    /// masks), which cost milliseconds per reading; the drop counters stay per sample.
    pub fn with_settings_interval(mut self, interval: Duration) -> Self {
        self.settings_interval = Some(interval);
        self
    }

    fn settings_due(&self, ctx: &Ctx<'_>, at: Duration) -> bool {
        if !ctx.rescan {
            return false;
        }
        let last = *self.last_read.lock().unwrap_or_else(|p| p.into_inner());
        match (self.settings_interval, last) {
            (Some(interval), Some(last)) => at < last || at - last >= interval,
            _ => true,
        }
    }
}

impl TuningCollector {
    /// As the configuration says: channels and rings through ethtool netlink when this
    /// process sees the host's NICs (else unavailable, with the reason), or from files under
    /// `<rootfs>/ethtool` on fixture trees.
    pub fn from_settings(settings: &crate::registry::Settings<'_>) -> Self {
        use crate::registry::NicLimitsFrom;
        match settings.nic_limits {
            NicLimitsFrom::Netlink => match netlink_sees_host(&settings.paths.sysfs) {
                Ok(()) => Self::default(),
                Err(why) => Self::new(Box::new(NicLimitsUnavailable(why.to_string()))),
            },
            NicLimitsFrom::Files => Self::new(Box::new(NicLimitsFiles {
                dir: settings.paths.rootfs.join("ethtool"),
            })),
        }
        .with_settings_interval(settings.tuning_settings_interval)
    }
}

impl Collector for TuningCollector {
    fn name(&self) -> crate::CollectorName {
        NAME
    }

    /// The `net.core` sysctls exist in the host's network namespace only (another lists
    /// none); the NICs' channels and rings come from ethtool netlink, which answers for the
    /// reader's namespace ([`netlink_sees_host`], checked when the collector is built).
    fn network_namespace(&self) -> crate::netns::NetnsUse {
        crate::netns::NetnsUse::Partly(
            "/proc/sys/net/core/{netdev_budget,netdev_budget_usecs,netdev_max_backlog}; \
             channels and rings through ethtool netlink",
        )
    }

    fn collect(&self, ctx: &Ctx<'_>, snap: &mut Snapshot) -> Result<Collected, CollectError> {
        let due = self.settings_due(ctx, snap.at);
        let (settings, mut warnings) = self.settings.get(due, || {
            let mut w = Vec::new();
            let s = read_settings(ctx, snap, self.limits.as_ref(), &mut w);
            *self.last_read.lock().unwrap_or_else(|p| p.into_inner()) = Some(snap.at);
            Ok((Arc::new(s), w))
        })?;
        let mut nic_stats = BTreeMap::new();
        let class = ctx.paths.sysfs.join("class/net");
        for name in settings.nics.keys() {
            let dir = class.join(name).join("statistics");
            let mut stats = NicStats::default();
            for (file, slot) in [
                ("rx_missed_errors", &mut stats.rx_missed_errors),
                ("rx_fifo_errors", &mut stats.rx_fifo_errors),
                ("rx_dropped", &mut stats.rx_dropped),
            ] {
                *slot = optional(
                    ctx.reader,
                    &dir.join(file),
                    tuning::parse_count,
                    &mut warnings,
                );
            }
            nic_stats.insert(name.clone(), stats);
        }
        snap.put(Tuning {
            settings,
            nic_stats,
        });
        Ok(Collected {
            warnings,
            ..Default::default()
        })
    }
}

/// An optional one-value file parsed by `parse`: `None` when missing, unreadable or
/// malformed (the last two with a warning).
fn optional<T, E: std::fmt::Display>(
    reader: &Reader,
    path: &Path,
    parse: impl FnOnce(&str) -> Result<T, E>,
    warnings: &mut Vec<String>,
) -> Option<T> {
    match reader.read_with(path, parse) {
        Ok(Ok(v)) => Some(v),
        Ok(Err(e)) => {
            warnings.push(ReadError::parse(path, e).to_string());
            None
        }
        Err(e) if e.is_missing() => None,
        Err(e) => {
            warnings.push(e.to_string());
            None
        }
    }
}

/// An optional one-word file as an owned string.
fn word(reader: &Reader, path: &Path, warnings: &mut Vec<String>) -> Option<String> {
    optional(
        reader,
        path,
        |t| tuning::parse_word(t).map(str::to_string),
        warnings,
    )
}

/// The entries of a directory, sorted by name; empty when it does not exist (a warning when
/// it exists but cannot be listed).
fn entries(r: &Reader, dir: &Path, warnings: &mut Vec<String>) -> Vec<(String, PathBuf)> {
    let list = match r.read_dir(dir) {
        Ok(l) => l,
        Err(e) if e.is_missing() => return Vec::new(),
        Err(e) => {
            warnings.push(e.to_string());
            return Vec::new();
        }
    };
    let mut out: Vec<(String, PathBuf)> = list
        .flatten()
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .collect();
    out.sort();
    out
}

/// `/proc/sys/net/core`'s budget and backlog, which only the host's network namespace lists:
/// outside it, none, with the reason.
fn net_core(ctx: &Ctx<'_>, w: &mut Vec<String>) -> NetCore {
    if let crate::netns::NetnsView::Other(seen) = ctx.netns {
        w.push(format!(
            "net.core.netdev_budget, netdev_budget_usecs and netdev_max_backlog not read: \
             nodemedic runs in another network namespace than the host's ({seen}), which \
             does not list them (hostNetwork: true reads them)"
        ));
        return NetCore::default();
    }
    let dir = ctx.paths.procfs.join("sys/net/core");
    let mut count = |file: &str| optional(ctx.reader, &dir.join(file), tuning::parse_count, w);
    NetCore {
        netdev_budget: count("netdev_budget"),
        netdev_budget_usecs: count("netdev_budget_usecs"),
        netdev_max_backlog: count("netdev_max_backlog"),
    }
}

fn read_settings(
    ctx: &Ctx<'_>,
    snap: &Snapshot,
    limits: &dyn NicLimitsSource,
    w: &mut Vec<String>,
) -> TuningSettings {
    let r = ctx.reader;
    let proc = &ctx.paths.procfs;
    let sys = &ctx.paths.sysfs;
    let cpu = sys.join("devices/system/cpu");
    let mut s = TuningSettings {
        cmdline: optional(r, &proc.join("cmdline"), tuning::parse_cmdline, w),
        // `None` without a `flags` line (not x86): nothing said either way.
        hypervisor: optional(
            r,
            &proc.join("cpuinfo"),
            |t| Ok::<_, tuning::TuningError>(tuning::cpuinfo_hypervisor(t)),
            w,
        )
        .flatten(),
        kernel_release: optional(
            r,
            &proc.join("sys/kernel/osrelease"),
            |t| tuning::parse_word(t).map(str::to_string),
            w,
        ),
        net_core: net_core(ctx, w),
        thp: optional(
            r,
            &sys.join("kernel/mm/transparent_hugepage/enabled"),
            tuning::parse_choice,
            w,
        ),
        thp_defrag: optional(
            r,
            &sys.join("kernel/mm/transparent_hugepage/defrag"),
            tuning::parse_choice,
            w,
        ),
        ..Default::default()
    };
    s.iommu_groups = iommu_groups(r, &sys.join("kernel/iommu_groups"), w);
    s.iommu_groups_present = !s.iommu_groups.is_empty();
    for (name, path) in entries(r, &cpu.join("vulnerabilities"), w) {
        let text = optional(
            r,
            &path,
            |t| tuning::parse_vulnerability(t).map(str::to_string),
            w,
        );
        if let Some(text) = text {
            s.vulnerabilities.insert(name, text);
        }
    }
    s.cpufreq = cpufreq(r, &cpu.join("cpufreq"), w);
    s.cpufreq_present = !s.cpufreq.is_empty();
    let first_cpu = snap
        .get::<Topology>()
        .and_then(|t| t.online.first())
        .unwrap_or(0);
    s.cpuidle = cpuidle(r, &cpu, first_cpu, w);
    s.nics = nics(r, &sys.join("class/net"), snap, w);
    let names: Vec<String> = s.nics.keys().cloned().collect();
    for (name, l) in limits.query(&names) {
        if let Some(nic) = s.nics.get_mut(&name) {
            nic.channels = l.channels;
            nic.rings = l.rings;
        }
    }
    s
}

fn iommu_groups(r: &Reader, dir: &Path, w: &mut Vec<String>) -> Vec<IommuGroup> {
    let mut groups = Vec::new();
    for (name, path) in entries(r, dir, w) {
        let Ok(id) = name.parse::<u32>() else {
            continue;
        };
        // `type` appeared in Linux 5.2; a group without it is still a group.
        let domain = optional(r, &path.join("type"), tuning::parse_iommu_group_type, w)
            .unwrap_or_else(|| tuning::IommuDomain::Unknown(String::new()));
        let devices = entries(r, &path.join("devices"), w)
            .into_iter()
            .map(|(d, _)| d)
            .collect();
        groups.push(IommuGroup {
            id,
            domain,
            devices,
        });
    }
    groups.sort_by_key(|g| g.id);
    groups
}

fn cpufreq(r: &Reader, dir: &Path, w: &mut Vec<String>) -> Vec<CpufreqPolicy> {
    let mut out = Vec::new();
    // One cpufreq driver serves every policy: its name is read once, not 256 times.
    let mut driver: Option<Option<String>> = None;
    for (name, path) in entries(r, dir, w) {
        let Some(policy) = tuning::parse_indexed(&name, "policy") else {
            continue;
        };
        let driver = driver
            .get_or_insert_with(|| word(r, &path.join("scaling_driver"), w))
            .clone();
        out.push(CpufreqPolicy {
            policy,
            cpus: optional(r, &path.join("affected_cpus"), tuning::parse_cpu_words, w),
            driver,
            governor: word(r, &path.join("scaling_governor"), w),
            energy_performance_preference: word(r, &path.join("energy_performance_preference"), w),
            // `<unknown>` when the driver cannot tell: no value, no warning.
            cur_khz: r
                .read_optional(&path.join("scaling_cur_freq"))
                .ok()
                .flatten()
                .and_then(|t| tuning::parse_count(&t).ok()),
            max_khz: optional(r, &path.join("cpuinfo_max_freq"), tuning::parse_count, w),
        });
    }
    out.sort_by_key(|p| p.policy);
    out
}

fn cpuidle(r: &Reader, cpu: &Path, first_cpu: u32, w: &mut Vec<String>) -> Option<CpuIdle> {
    let dir = cpu.join("cpuidle");
    if !dir.is_dir() {
        return None;
    }
    // `none` when no driver registered.
    let driver = word(r, &dir.join("current_driver"), w).filter(|d| d != "none");
    let governor = word(r, &dir.join("current_governor"), w)
        .or_else(|| word(r, &dir.join("current_governor_ro"), w));
    let mut idle = CpuIdle {
        driver,
        governor,
        ..Default::default()
    };
    for (name, path) in entries(r, &cpu.join(format!("cpu{first_cpu}/cpuidle")), w) {
        let Some(index) = tuning::parse_indexed(&name, "state") else {
            continue;
        };
        idle.states += 1;
        let disabled = optional(r, &path.join("disable"), tuning::parse_flag, w).unwrap_or(false);
        let latency = optional(r, &path.join("latency"), tuning::parse_count, w);
        let state_name = optional(
            r,
            &path.join("name"),
            |t| tuning::parse_text(t).map(str::to_string),
            w,
        );
        if let (false, Some(exit_latency_us)) = (disabled, latency) {
            let deeper = idle
                .deepest_enabled
                .as_ref()
                .is_none_or(|d| index > d.index);
            if deeper {
                idle.deepest_enabled = Some(IdleState {
                    index,
                    name: state_name.unwrap_or_default(),
                    exit_latency_us,
                });
            }
        }
    }
    Some(idle)
}

fn nics(
    r: &Reader,
    class: &Path,
    snap: &Snapshot,
    w: &mut Vec<String>,
) -> BTreeMap<String, NicSettings> {
    let mut out = BTreeMap::new();
    for (name, path) in entries(r, class, w) {
        // Only interfaces backed by a device: a Kubernetes node has hundreds of veths, and
        // bridges, bonds and tunnels have no queues of their own to tune.
        if !path.join("device").exists() {
            continue;
        }
        let mut nic = NicSettings {
            pci: snap.get::<Netdevs>().and_then(|n| n.get(&name)).cloned(),
            rx_queues: 0,
            tx_queues: 0,
            rps: BTreeMap::new(),
            xps: BTreeMap::new(),
            channels: Queried::Absent("not queried".into()),
            rings: Queried::Absent("not queried".into()),
        };
        for (q, qpath) in entries(r, &path.join("queues"), w) {
            match tuning::parse_queue_name(&q) {
                Some(QueueName::Rx(n)) => {
                    nic.rx_queues += 1;
                    // Absent without CONFIG_RPS.
                    if let Some(m) = mask(r, &qpath.join("rps_cpus"), w) {
                        nic.rps.insert(n, m);
                    }
                }
                Some(QueueName::Tx(n)) => {
                    nic.tx_queues += 1;
                    // The kernel answers ENOENT on a single-queue device.
                    if let Some(m) = mask(r, &qpath.join("xps_cpus"), w) {
                        nic.xps.insert(n, m);
                    }
                }
                None => {}
            }
        }
        out.insert(name, nic);
    }
    out
}

fn mask(r: &Reader, path: &Path, w: &mut Vec<String>) -> Option<CpuSet> {
    optional(r, path, tuning::parse_queue_mask, w)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn limits_files_read_current_and_max() {
        let l = parse_limits_file(
            "channels rx=0/0 tx=0/0 other=1/1 combined=1/8\nrings rx=256/4096 tx=256/4096\n",
        );
        let c = l.channels.value().unwrap();
        assert_eq!((c.combined, c.combined_max, c.other), (1, 8, 1));
        assert_eq!(l.rings.value().unwrap().rx_max, 4096);
        let l = parse_limits_file("channels absent the driver does not report channels\n");
        assert_eq!(
            l.channels.reason(),
            Some("the driver does not report channels")
        );
        assert_eq!(l.rings.reason(), Some("not in the file"));
        let l = parse_limits_file("rings rx=a/4096\n");
        assert!(l.rings.reason().unwrap().contains("bad entry"));
    }

    /// The reasons an operator reads: an unsupported kernel, a driver without the data, a
    /// vanished interface.
    #[test]
    fn netlink_errors_become_reasons() {
        use ethtool::EthtoolError;
        let nack = |errno: i32| {
            let mut m = netlink_packet_core::ErrorMessage::default();
            m.code = std::num::NonZeroI32::new(-errno);
            EthtoolError::NetlinkError(m)
        };
        assert_eq!(
            netlink_reason("channels", &nack(libc::EOPNOTSUPP)),
            "the driver does not report channels (EOPNOTSUPP)"
        );
        assert_eq!(
            netlink_reason("rings", &nack(libc::ENODEV)),
            "the interface vanished"
        );
        assert!(netlink_reason("rings", &nack(libc::EPERM)).starts_with("ethtool netlink error"));
        // What genetlink's family lookup gives on a kernel without the ethtool family.
        let missing = EthtoolError::RequestFailed(
            "BUG: Request failed with Netlink error message: No such file or directory \
             (os error 2)"
                .into(),
        );
        assert_eq!(
            netlink_reason("channels", &missing),
            ETHTOOL_NETLINK_UNSUPPORTED
        );
    }

    /// Settings follow the rescan interval; the drop counters every sample.
    #[test]
    fn settings_wait_for_the_rescan_and_counters_do_not() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        write(root, "proc/sys/net/core/netdev_budget", "300\n");
        write(root, "sys/class/net/eth0/device/vendor", "0x8086\n");
        write(
            root,
            "sys/class/net/eth0/statistics/rx_missed_errors",
            "1\n",
        );
        write(root, "ethtool/eth0", "rings rx=256/4096 tx=256/4096\n");
        let mut set = set(root);
        let budget = |s: &Snapshot| s.get::<Tuning>().unwrap().settings.net_core.netdev_budget;
        let missed = |s: &Snapshot| s.get::<Tuning>().unwrap().nic_stats["eth0"].rx_missed_errors;
        let (first, _) = run(root, &mut set, 100);
        assert_eq!((budget(&first), missed(&first)), (Some(300), Some(1)));
        write(root, "proc/sys/net/core/netdev_budget", "600\n");
        write(
            root,
            "sys/class/net/eth0/statistics/rx_missed_errors",
            "9\n",
        );
        write(root, "ethtool/eth0", "rings rx=4096/4096 tx=4096/4096\n");
        let (between, _) = run(root, &mut set, 130);
        assert_eq!((budget(&between), missed(&between)), (Some(300), Some(9)));
        let rings = |s: &Snapshot| {
            s.get::<Tuning>().unwrap().settings.nics["eth0"]
                .rings
                .value()
                .unwrap()
                .rx
        };
        assert_eq!(rings(&between), 256, "the driver is asked on rescans only");
        let (rescan, _) = run(root, &mut set, 161);
        assert_eq!((budget(&rescan), rings(&rescan)), (Some(600), 4096));

        // With a longer settings interval, a rescan within it keeps the last reading.
        let mut set = crate::CollectorSet::new(vec![Box::new(
            TuningCollector::new(Box::new(NicLimitsFiles {
                dir: root.join("ethtool"),
            }))
            .with_settings_interval(Duration::from_secs(300)),
        )])
        .with_rescan_interval(Duration::from_secs(60));
        let (first, _) = run(root, &mut set, 1000);
        assert_eq!(budget(&first), Some(600));
        write(root, "proc/sys/net/core/netdev_budget", "900\n");
        let (rescan, _) = run(root, &mut set, 1061);
        assert_eq!(budget(&rescan), Some(600), "a rescan within the interval");
        let (due, _) = run(root, &mut set, 1301);
        assert_eq!(budget(&due), Some(900), "the first rescan after it");
    }

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn run(root: &Path, set: &mut crate::CollectorSet, at: u64) -> (Snapshot, Collected) {
        let (snap, mut runs) = set.sample(&crate::Paths::under(root), Duration::from_secs(at));
        (snap, runs.remove(0).outcome.unwrap())
    }

    fn set(dir: &Path) -> crate::CollectorSet {
        crate::CollectorSet::new(vec![Box::new(TuningCollector::new(Box::new(
            NicLimitsFiles {
                dir: dir.join("ethtool"),
            },
        )))])
        .with_rescan_interval(Duration::from_secs(60))
    }

    /// Nothing there at all (a bare container, a stripped kernel): empty settings, no
    /// failure, no warning.
    #[test]
    fn missing_everything_is_empty_not_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        let (snap, c) = run(tmp.path(), &mut set(tmp.path()), 1);
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let s = &snap.get::<Tuning>().unwrap().settings;
        assert!(!s.cpufreq_present && !s.iommu_groups_present && s.nics.is_empty());
        assert_eq!(s.cmdline, None);
    }

    /// Malformed files are warnings naming the file; the rest is read. A NIC whose
    /// statistics vanish between rescans keeps its settings and loses only its counters.
    #[test]
    fn malformed_files_are_warnings_and_vanished_counters_are_none() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        write(root, "proc/cmdline", "ro iommu.strict=1\n");
        write(root, "proc/sys/net/core/netdev_budget", "30"); // cut short
        write(root, "proc/sys/net/core/netdev_max_backlog", "1000\n");
        write(root, "sys/kernel/iommu_groups/3/type", "DMA\n");
        write(root, "sys/kernel/iommu_groups/3/devices/0000:01:00.0", "");
        write(root, "sys/kernel/iommu_groups/x/type", "DMA\n");
        write(
            root,
            "sys/devices/system/cpu/cpufreq/policy0/scaling_governor",
            "power save\n",
        );
        write(
            root,
            "sys/devices/system/cpu/cpufreq/policy0/cpuinfo_max_freq",
            "3000000\n",
        );
        write(
            root,
            "sys/devices/system/cpu/cpufreq/policy0/scaling_cur_freq",
            "<unknown>\n",
        );
        write(
            root,
            "sys/kernel/mm/transparent_hugepage/enabled",
            "always\n",
        );
        write(root, "sys/class/net/eth0/device/vendor", "0x1af4\n");
        write(root, "sys/class/net/eth0/queues/rx-0/rps_cpus", "zz\n");
        write(root, "sys/class/net/eth0/queues/tx-0/xps_cpus", "3\n");
        write(root, "sys/class/net/eth0/statistics/rx_dropped", "7\n");
        write(root, "sys/class/net/veth1/queues/rx-0/rps_cpus", "0\n");
        write(
            root,
            "ethtool/eth0",
            "channels rx=0/0 tx=0/0 other=0/0 combined=1/4\n",
        );
        let mut set = set(root);
        let (snap, c) = run(root, &mut set, 1);
        let joined = c.warnings.join("\n");
        for want in [
            "netdev_budget: no final newline",
            "scaling_governor",
            "transparent_hugepage/enabled",
            "rps_cpus",
        ] {
            assert!(joined.contains(want), "{want}: {joined}");
        }
        let t = snap.get::<Tuning>().unwrap();
        let s = &t.settings;
        assert_eq!(s.net_core.netdev_budget, None);
        assert_eq!(s.net_core.netdev_max_backlog, Some(1000));
        assert_eq!(s.iommu_groups.len(), 1, "only numbered groups");
        assert_eq!(s.iommu_groups[0].devices, ["0000:01:00.0"]);
        assert_eq!(s.cpufreq[0].governor, None);
        assert_eq!(s.cpufreq[0].cur_khz, None);
        assert_eq!(s.cpufreq[0].max_khz, Some(3_000_000));
        assert_eq!(s.nics.keys().collect::<Vec<_>>(), ["eth0"], "no veth");
        let nic = &s.nics["eth0"];
        assert_eq!((nic.rx_queues, nic.tx_queues), (1, 1));
        assert!(nic.rps.is_empty());
        assert_eq!(nic.xps[&0].to_list_string(), "0-1");
        assert_eq!(nic.channels.value().unwrap().combined_max, 4);
        assert_eq!(nic.rings.reason(), Some("not in the file"));
        assert_eq!(t.nic_stats["eth0"].rx_dropped, Some(7));
        assert_eq!(t.nic_stats["eth0"].rx_missed_errors, None);

        std::fs::remove_dir_all(root.join("sys/class/net/eth0/statistics")).unwrap();
        let (snap, c) = run(root, &mut set, 2);
        let t = snap.get::<Tuning>().unwrap();
        assert!(
            t.settings.nics.contains_key("eth0"),
            "settings until the rescan"
        );
        assert_eq!(t.nic_stats["eth0"], NicStats::default());
        assert!(
            !c.warnings.iter().any(|w| w.contains("statistics")),
            "{:?}",
            c.warnings
        );
    }
}
