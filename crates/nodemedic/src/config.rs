//! The configuration file: serde structs with defaults, unknown keys rejected, and an explicit
//! validation step with messages that say which setting is wrong.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use nodemedic_collect::{registry, CollectorName, Paths};
use nodemedic_detect::TuningConfig;
use nodemedic_detect::{CollapseConfig, HurtingConfig, WakeupStormConfig};
use nodemedic_engine::{EngineConfig, NicLimitsFrom, TuningSetup};
use nodemedic_export::MetricsOptions;
use nodemedic_kube::KubeConfig;
use nodemedic_remedy::RemediationConfig;
use serde::{Deserialize, Serialize};

use nodemedic_webkit::{FileLimit, ListenAddr, ListenAddrs};

use crate::cli::GlobalArgs;

pub const DEFAULT_LISTEN: &str = "0.0.0.0:9847";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Time between samples of the kernel's files.
    #[serde(with = "humantime_serde")]
    pub sample_interval: Duration,
    pub web: WebConfig,
    pub paths: PathsConfig,
    pub collectors: CollectorsConfig,
    pub detector: DetectorConfig,
    pub metrics: MetricsOptions,
    pub remediation: RemediationConfig,
    pub kubernetes: KubeConfig,
    pub reader: ReaderSection,
    pub disk_probe: DiskProbeSection,
    pub probes: ProbesConfig,
    pub cgroups: CgroupsSection,
    pub tuning: TuningSection,
}

/// The tuning audit (docs/tuning.md): how often its settings are re-read, where channels
/// and rings come from, and the audit's rules (`ignore` mutes one) and thresholds. The
/// audit's fields are spelled out here rather than flattened: serde cannot refuse unknown
/// keys through `flatten`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TuningSection {
    #[serde(with = "humantime_serde")]
    pub settings_interval: Duration,
    pub nic_limits: NicLimitsFrom,
    pub ignore: Vec<nodemedic_detect::TuningRule>,
    pub net_rx_min_rate: f64,
    pub net_rx_share: f64,
    pub iommu_irq_rate: f64,
    pub raise_after: u32,
    pub clear_after: u32,
}

impl Default for TuningSection {
    fn default() -> Self {
        let TuningSetup {
            settings_interval,
            nic_limits,
            audit,
        } = TuningSetup::default();
        Self {
            settings_interval,
            nic_limits,
            ignore: audit.ignore,
            net_rx_min_rate: audit.net_rx_min_rate,
            net_rx_share: audit.net_rx_share,
            iommu_irq_rate: audit.iommu_irq_rate,
            raise_after: audit.raise_after,
            clear_after: audit.clear_after,
        }
    }
}

impl TuningSection {
    pub fn audit(&self) -> TuningConfig {
        TuningConfig {
            ignore: self.ignore.clone(),
            net_rx_min_rate: self.net_rx_min_rate,
            net_rx_share: self.net_rx_share,
            iommu_irq_rate: self.iommu_irq_rate,
            raise_after: self.raise_after,
            clear_after: self.clear_after,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            sample_interval: Duration::from_secs(5),
            web: WebConfig::default(),
            paths: PathsConfig::default(),
            collectors: CollectorsConfig::default(),
            detector: DetectorConfig::default(),
            metrics: MetricsOptions::default(),
            remediation: RemediationConfig::default(),
            kubernetes: KubeConfig::default(),
            reader: ReaderSection::default(),
            disk_probe: DiskProbeSection::default(),
            probes: ProbesConfig::default(),
            cgroups: CgroupsSection::default(),
            tuning: TuningSection::default(),
        }
    }
}

/// Which cgroups get per-cgroup series and verdicts. Pods always; each container multiplies
/// a pod's series by its containers, so that is opt-in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CgroupsSection {
    pub containers: bool,
    /// systemd services (`system.slice/<unit>.service`), for bare-metal nodes.
    pub services: bool,
    /// Only cgroups whose path relative to the hierarchy root matches this regex.
    pub include: Option<String>,
    /// No cgroup whose path matches this regex.
    pub exclude: Option<String>,
    /// How often the cgroups are walked and read (like cAdvisor's housekeeping interval):
    /// 500 pods are ~2,000 kernfs reads, too many for every sample. Samples in between carry
    /// the last reading; `0s` reads them on every sample.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
}

impl Default for CgroupsSection {
    fn default() -> Self {
        Self {
            containers: false,
            services: true,
            include: None,
            exclude: None,
            interval: Duration::from_secs(15),
        }
    }
}

impl CgroupsSection {
    pub fn selection(&self) -> anyhow::Result<nodemedic_collect::sources::CgroupSelection> {
        let re = |field: &str, v: &Option<String>| -> anyhow::Result<Option<regex::Regex>> {
            v.as_deref()
                .map(|p| {
                    regex::Regex::new(p)
                        .with_context(|| format!("cgroups.{field}: {p:?} is not a valid regex"))
                })
                .transpose()
        };
        Ok(nodemedic_collect::sources::CgroupSelection {
            containers: self.containers,
            services: self.services,
            include: re("include", &self.include)?,
            exclude: re("exclude", &self.exclude)?,
        })
    }
}

/// The disk commit latency probe (off by default): a 2,300-byte write + fdatasync every
/// `interval` in `directory`, as etcd's WAL commits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DiskProbeSection {
    pub enabled: bool,
    pub directory: PathBuf,
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// The probe's file never grows past this many bytes (writes wrap around).
    pub max_file_bytes: u64,
    /// Linked write + fsync through io_uring when available; plain syscalls otherwise.
    pub io_uring: bool,
}

impl Default for DiskProbeSection {
    fn default() -> Self {
        let d = nodemedic_collect::CommitTimerConfig::default();
        Self {
            enabled: false,
            directory: d.directory,
            interval: d.interval,
            max_file_bytes: d.max_file_bytes,
            io_uring: d.io_uring,
        }
    }
}

/// How kernel files are read (the read layer shared by every collector).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReaderSection {
    /// `pread` (kept-open fds), `io_uring` (kept-open fds, batched reads; falls back to
    /// `pread` when unavailable) or `open` (open + read + close every time).
    pub backend: nodemedic_collect::Backend,
    /// Most files kept open at once; further files are opened, read and closed each time.
    pub max_open_files: usize,
    /// How often rarely-changing data (topology, PCI devices, IRQ NUMA nodes, irqbalance's
    /// configuration, the list of IRQs) is re-read, and unused files are closed.
    #[serde(with = "humantime_serde")]
    pub rescan_interval: Duration,
    /// An IRQ's `/proc/irq/N/{smp,effective}_affinity` are read when `/proc/interrupts` shows
    /// it may have moved (a count rose on a CPU it was not delivered to), and otherwise in
    /// turn, every IRQ within this; `0s` reads them all every sample. At most half of
    /// `remediation.verify_after` is used, so that a verification sees every IRQ read again
    /// ([`Config::adjusted`] says so when it lowers the value).
    #[serde(with = "humantime_serde")]
    pub affinity_refresh: Duration,
}

impl Default for ReaderSection {
    fn default() -> Self {
        Self {
            backend: nodemedic_collect::Backend::default(),
            max_open_files: nodemedic_collect::DEFAULT_MAX_OPEN_FILES,
            rescan_interval: nodemedic_collect::DEFAULT_RESCAN_INTERVAL,
            affinity_refresh: nodemedic_collect::sources::DEFAULT_AFFINITY_REFRESH,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebConfig {
    /// Addresses to listen on: `host:port` and `unix:/path` (one string or a list).
    pub listen_address: ListenAddrs,
    /// The Prometheus exporter-toolkit web configuration file (TLS, client certificates,
    /// basic auth, headers): docs/web-config.md. Re-read when it changes.
    pub config_file: Option<PathBuf>,
    /// Requests served at once; the excess gets 503 (node_exporter's --web.max-requests).
    pub max_requests: usize,
    /// Open connections at most (also capped at a quarter of the fds left after a reserve
    /// for the collectors). When full, the connection that has waited longest without
    /// sending a request is closed to make room.
    pub max_connections: usize,
    /// A connection must send its request headers within this.
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// A request is answered within this, or gets 503.
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
}

impl Default for WebConfig {
    fn default() -> Self {
        Self {
            listen_address: ListenAddrs(vec![ListenAddr::Tcp(
                DEFAULT_LISTEN
                    .parse()
                    .unwrap_or(std::net::SocketAddr::from(([0, 0, 0, 0], 9847))),
            )]),
            config_file: None,
            max_requests: 40,
            max_connections: 512,
            header_read_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(20),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PathsConfig {
    pub host_root: Option<PathBuf>,
    pub procfs: Option<PathBuf>,
    pub sysfs: Option<PathBuf>,
    pub cgroupfs: Option<PathBuf>,
    pub rootfs: Option<PathBuf>,
    /// Mounts under the host's paths that are meant to be writable: the check at start of
    /// the host mounts a container can write leaves them out. Native rebalancing's
    /// `<procfs>/irq` is left out when it is on, without being listed.
    pub writable_mounts: Vec<PathBuf>,
}

/// Each collector that `[collectors]` switches (`registry::switchable`) can be switched off,
/// under its name; all are on by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CollectorsConfig {
    off: BTreeSet<CollectorName>,
}

impl CollectorsConfig {
    /// The collectors switched off.
    pub fn disabled(&self) -> BTreeSet<CollectorName> {
        self.off.clone()
    }

    pub fn enabled(&self, name: CollectorName) -> bool {
        !self.off.contains(&name)
    }
}

impl Serialize for CollectorsConfig {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let switchable = registry::switchable();
        let mut map = s.serialize_map(Some(switchable.len()))?;
        for name in switchable {
            map.serialize_entry(name.as_str(), &self.enabled(name))?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for CollectorsConfig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Switches;
        impl<'de> serde::de::Visitor<'de> for Switches {
            type Value = CollectorsConfig;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a table of collector names and booleans")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut off = BTreeSet::new();
                while let Some(key) = map.next_key::<String>()? {
                    let name = registry::find(&key)
                        .filter(|d| d.switch == registry::Switch::Collectors)
                        .map(|d| d.name)
                        .ok_or_else(|| {
                            serde::de::Error::unknown_field(&key, registry::switch_keys())
                        })?;
                    if map.next_value::<bool>()? {
                        off.remove(&name);
                    } else {
                        off.insert(name);
                    }
                }
                Ok(CollectorsConfig { off })
            }
        }
        d.deserialize_map(Switches)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DetectorConfig {
    pub collapse: CollapseConfig,
    pub hurting: HurtingConfig,
    pub disk_commit: nodemedic_detect::CommitLatencyConfig,
    pub wakeup_storm: WakeupStormConfig,
    pub pressure: nodemedic_detect::PressureConfig,
}

/// nodemedic's eBPF probes on perf_event_output*/perf_event_wakeup (docs/ebpf.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProbesConfig {
    pub enabled: bool,
    /// "auto" (fentry, else kprobes), "fentry" or "kprobe".
    pub attach: ProbeAttach,
    /// Owners exported as {pid, comm} series, busiest first.
    pub top_owners: usize,
    /// One series per CPU for outputs and wakeups.
    pub per_cpu: bool,
    /// Capacity of the in-kernel per-owner map.
    pub max_owners: u32,
    /// The probes' ring buffer (rare events only), bytes: a power of two, at least 4096.
    pub ring_buffer_bytes: u32,
    /// Queued bytes that make the kernel wake the reader before its 1 s timer.
    pub ring_buffer_wakeup_bytes: u32,
    /// Wakeups on one CPU within one second that make the kernel log a storm start; 0 = off.
    pub storm_wakeups_per_cpu: u64,
    /// Have the kernel measure the probes' run time (BPF_ENABLE_STATS while nodemedic runs;
    /// the kernel.bpf_stats_enabled sysctl is never written).
    pub bpf_stats: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ProbeAttach {
    #[default]
    Auto,
    Fentry,
    Kprobe,
}

impl Default for ProbesConfig {
    fn default() -> Self {
        let p = nodemedic_probe::CollectorOptions::default();
        Self {
            enabled: true,
            attach: ProbeAttach::Auto,
            top_owners: p.top_owners,
            per_cpu: p.per_cpu,
            max_owners: p.probe.max_owners,
            ring_buffer_bytes: p.probe.ring_buffer_bytes,
            ring_buffer_wakeup_bytes: p.probe.ring_buffer_wakeup_bytes,
            storm_wakeups_per_cpu: p.probe.storm_wakeups_per_cpu,
            bpf_stats: p.probe.bpf_stats,
        }
    }
}

impl ProbesConfig {
    pub fn validate(&self) -> anyhow::Result<()> {
        let rb = self.ring_buffer_bytes;
        if rb < 4096 || !rb.is_power_of_two() {
            bail!("ring_buffer_bytes must be a power of two and at least 4096, got {rb}");
        }
        if self.ring_buffer_wakeup_bytes == 0 || self.ring_buffer_wakeup_bytes > rb {
            bail!("ring_buffer_wakeup_bytes must be between 1 and ring_buffer_bytes ({rb})");
        }
        if self.max_owners == 0 {
            bail!("max_owners must be at least 1");
        }
        Ok(())
    }

    pub fn collector_options(&self) -> nodemedic_probe::CollectorOptions {
        nodemedic_probe::CollectorOptions {
            probe: nodemedic_probe::ProbeOptions {
                attach: match self.attach {
                    ProbeAttach::Auto => nodemedic_probe::AttachMode::Auto,
                    ProbeAttach::Fentry => nodemedic_probe::AttachMode::Fentry,
                    ProbeAttach::Kprobe => nodemedic_probe::AttachMode::Kprobe,
                },
                max_owners: self.max_owners,
                ring_buffer_bytes: self.ring_buffer_bytes,
                ring_buffer_wakeup_bytes: self.ring_buffer_wakeup_bytes,
                storm_wakeups_per_cpu: self.storm_wakeups_per_cpu,
                bpf_stats: self.bpf_stats,
                // The process's, read at start: crate::probes::collector sets it.
                lsm: Default::default(),
            },
            top_owners: self.top_owners,
            per_cpu: self.per_cpu,
        }
    }
}

impl Config {
    pub fn load(path: Option<&Path>) -> anyhow::Result<Config> {
        let Some(path) = path else {
            return Ok(Config::default());
        };
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading config file {}", path.display()))?;
        Config::parse(&text).with_context(|| format!("in config file {}", path.display()))
    }

    pub fn parse(text: &str) -> anyhow::Result<Config> {
        let config: Config = toml::from_str(text)?;
        config.validate()?;
        Ok(config)
    }

    /// `reader.affinity_refresh` as used: at most half of `remediation.verify_after`, so that
    /// a verification sees every IRQ's affinity read again.
    fn affinity_refresh(&self) -> Duration {
        self.reader
            .affinity_refresh
            .min(self.remediation.verify_after / 2)
    }

    /// The settings used with another value than the one written, each with why. The daemon
    /// logs them at start and `nodemedic config` prints them, so that no value is changed
    /// silently.
    pub fn adjusted(&self) -> Vec<String> {
        let mut notes = Vec::new();
        let used = self.affinity_refresh();
        if used != self.reader.affinity_refresh {
            notes.push(format!(
                "reader.affinity_refresh {} is used as {}: at most half of \
                 remediation.verify_after ({}), so that a verification sees every IRQ's \
                 affinity read again",
                humantime::format_duration(self.reader.affinity_refresh),
                humantime::format_duration(used),
                humantime::format_duration(self.remediation.verify_after),
            ));
        }
        notes
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        if self.sample_interval < Duration::from_millis(100) {
            bail!(
                "sample_interval must be at least 100ms, got {}",
                humantime::format_duration(self.sample_interval)
            );
        }
        if self.sample_interval > Duration::from_secs(3600) {
            bail!("sample_interval must be at most 1h");
        }
        self.detector
            .collapse
            .validate()
            .map_err(|e| anyhow::anyhow!("detector.collapse: {e}"))?;
        self.detector
            .hurting
            .validate()
            .map_err(|e| anyhow::anyhow!("detector.hurting: {e}"))?;
        self.detector
            .wakeup_storm
            .validate()
            .map_err(|e| anyhow::anyhow!("detector.wakeup_storm: {e}"))?;
        self.probes
            .validate()
            .map_err(|e| anyhow::anyhow!("probes: {e}"))?;
        self.remediation
            .validate()
            .map_err(|e| anyhow::anyhow!("remediation: {e}"))?;
        self.kubernetes
            .resolve()
            .map_err(|e| anyhow::anyhow!("kubernetes: {e}"))?;
        if self.disk_probe.interval < Duration::from_millis(100) {
            bail!(
                "disk_probe.interval must be at least 100ms, got {}",
                humantime::format_duration(self.disk_probe.interval)
            );
        }
        let block = nodemedic_collect::commit_timer::DEFAULT_BLOCK_BYTES as u64;
        if self.disk_probe.max_file_bytes < block {
            bail!("disk_probe.max_file_bytes must be at least {block} (one block)");
        }
        let dc = &self.detector.disk_commit;
        if dc.window.is_zero() || dc.p99_threshold.is_zero() {
            bail!("detector.disk_commit: window and p99_threshold must be positive");
        }
        if self.reader.rescan_interval < Duration::from_secs(1) {
            bail!(
                "reader.rescan_interval must be at least 1s, got {}",
                humantime::format_duration(self.reader.rescan_interval)
            );
        }
        self.detector
            .pressure
            .validate()
            .map_err(|e| anyhow::anyhow!("detector.pressure: {e}"))?;
        self.cgroups.selection()?;
        self.tuning
            .audit()
            .validate()
            .map_err(|e| anyhow::anyhow!("tuning: {e}"))?;
        if self.tuning.settings_interval < Duration::from_secs(1) {
            bail!(
                "tuning.settings_interval must be at least 1s, got {}",
                humantime::format_duration(self.tuning.settings_interval)
            );
        }
        if self.web.listen_address.0.is_empty() {
            bail!("web.listen_address names no address");
        }
        if self.web.max_requests == 0 || self.web.max_connections == 0 {
            bail!("web.max_requests and web.max_connections must be at least 1");
        }
        if self.web.header_read_timeout.is_zero() || self.web.request_timeout.is_zero() {
            bail!("web.header_read_timeout and web.request_timeout must be positive");
        }
        if !self
            .collectors
            .enabled(nodemedic_collect::sources::interrupts::NAME)
        {
            bail!("collectors.interrupts cannot be disabled: every IRQ verdict depends on it");
        }
        Ok(())
    }

    /// Applies command-line flags over the file: explicit `--path.*` flags win over
    /// `--host-root`, which wins over the file.
    pub fn apply_cli(&mut self, g: &GlobalArgs) {
        if let Some(root) = &g.host_root {
            self.paths.host_root = Some(root.clone());
        }
        let overrides = [
            (&g.procfs, &mut self.paths.procfs),
            (&g.sysfs, &mut self.paths.sysfs),
            (&g.cgroupfs, &mut self.paths.cgroupfs),
            (&g.rootfs, &mut self.paths.rootfs),
        ];
        for (flag, field) in overrides {
            if let Some(v) = flag {
                *field = Some(v.clone());
            }
        }
        if !g.listen_address.is_empty() {
            self.web.listen_address = ListenAddrs(g.listen_address.clone());
        }
        if let Some(f) = &g.web_config_file {
            self.web.config_file = Some(f.clone());
        }
        if let Some(n) = g.max_requests {
            self.web.max_requests = n;
        }
    }

    /// What the sampling pipeline needs from this configuration; the read layer keeps its
    /// files within its share of `files`.
    pub fn engine_config(&self, files: &FileLimit) -> EngineConfig {
        EngineConfig {
            paths: self.resolved_paths(),
            disabled_collectors: {
                let mut off = self.collectors.disabled();
                if !self.probes.enabled {
                    off.insert(nodemedic_probe::PERF_PROBES);
                }
                off
            },
            collapse: self.detector.collapse.clone(),
            hurting: self.detector.hurting.clone(),
            rescan_interval: self.reader.rescan_interval,
            affinity_refresh: self.affinity_refresh(),
            reader: nodemedic_collect::ReaderConfig {
                backend: self.reader.backend,
                max_open_files: self.reader.max_open_files,
                file_limit_share: Some(files.kept_open_files()),
            },
            commit_timer: self
                .disk_probe
                .enabled
                .then(|| nodemedic_collect::CommitTimerConfig {
                    directory: self.disk_probe.directory.clone(),
                    interval: self.disk_probe.interval,
                    block_bytes: nodemedic_collect::commit_timer::DEFAULT_BLOCK_BYTES,
                    max_file_bytes: self.disk_probe.max_file_bytes,
                    io_uring: self.disk_probe.io_uring,
                }),
            commit_latency: self.detector.disk_commit.clone(),
            pressure: self.detector.pressure.clone(),
            // validate() has compiled these; a config that fails here never got this far.
            cgroups: self.cgroups.selection().unwrap_or_default(),
            cgroups_interval: self.cgroups.interval,
            wakeup_storm: self.detector.wakeup_storm.clone(),
            tuning: TuningSetup {
                settings_interval: self.tuning.settings_interval,
                nic_limits: self.tuning.nic_limits,
                audit: self.tuning.audit(),
            },
            // Read from the process and its mounts by `run` and `check` ([`Config::host_access`]):
            // not a setting.
            host: Default::default(),
        }
    }

    /// What the process can do to the host, read now (once: it does not change while the
    /// process runs): its LSM labels, and the host mounts it can write but the ones meant to
    /// be writable ([`PathsConfig::writable_mounts`], native rebalancing's `/proc/irq`).
    pub fn host_access(&self) -> nodemedic_sample::host::HostAccess {
        let paths = self.resolved_paths();
        let mut meant = self.paths.writable_mounts.clone();
        if self.remediation.native.enabled {
            meant.push(paths.procfs.join("irq"));
        }
        nodemedic_collect::host_access::host_access(&paths, &meant)
    }

    pub fn resolved_paths(&self) -> Paths {
        let mut paths = match &self.paths.host_root {
            Some(root) => Paths::under(root),
            None => Paths::default(),
        };
        let p = &self.paths;
        for (value, field) in [
            (&p.procfs, &mut paths.procfs),
            (&p.sysfs, &mut paths.sysfs),
            (&p.cgroupfs, &mut paths.cgroupfs),
            (&p.rootfs, &mut paths.rootfs),
        ] {
            if let Some(v) = value {
                *field = v.clone();
            }
        }
        paths
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value used other than as written is said, with the value used; the defaults and
    /// the shipped file have none.
    #[test]
    fn an_adjusted_setting_is_said() {
        let c = Config::parse(
            "[reader]\naffinity_refresh = \"1m\"\n[remediation]\nverify_after = \"30s\"\n",
        )
        .unwrap();
        assert_eq!(c.affinity_refresh(), Duration::from_secs(15));
        assert_eq!(
            c.adjusted(),
            vec![
                "reader.affinity_refresh 1m is used as 15s: at most half of \
                 remediation.verify_after (30s), so that a verification sees every IRQ's \
                 affinity read again"
                    .to_string()
            ]
        );
        assert_eq!(Config::default().adjusted(), Vec::<String>::new());
        let shipped = include_str!("../../../deploy/nodemedic.toml");
        assert_eq!(
            Config::parse(shipped).unwrap().adjusted(),
            Vec::<String>::new()
        );
    }

    #[test]
    fn tuning_section_mutes_rules_and_refuses_unknown_keys() {
        let c = Config::parse(
            "[tuning]\nsettings_interval = \"10m\"\nnic_limits = \"files\"\nignore = [\"iommu_strict\", \"srso\"]\n",
        )
        .unwrap();
        assert_eq!(c.tuning.settings_interval, Duration::from_secs(600));
        assert_eq!(c.tuning.nic_limits, NicLimitsFrom::Files);
        assert_eq!(
            c.tuning.ignore,
            [
                nodemedic_detect::TuningRule::IommuStrict,
                nodemedic_detect::TuningRule::Srso
            ]
        );
        for bad in [
            "[tuning]\nbogus = 1\n",
            "[tuning]\nignore = [\"no_such_rule\"]\n",
            "[tuning]\nnet_rx_share = 2.0\n",
            "[tuning]\nsettings_interval = \"0s\"\n",
        ] {
            assert!(Config::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn empty_file_is_the_default() {
        assert_eq!(Config::parse("").unwrap(), Config::default());
    }

    #[test]
    fn shipped_example_parses_and_matches_defaults() {
        let text = include_str!("../../../deploy/nodemedic.toml");
        assert_eq!(Config::parse(text).unwrap(), Config::default());
    }

    #[test]
    fn unknown_keys_are_rejected_with_their_name() {
        let err = format!(
            "{:#}",
            Config::parse("sample_intervall = \"5s\"").unwrap_err()
        );
        assert!(err.contains("sample_intervall"), "{err}");
        let err = format!(
            "{:#}",
            Config::parse("[detector.collapse]\nmin_irq = 3\n").unwrap_err()
        );
        assert!(err.contains("min_irq"), "{err}");
    }

    #[test]
    fn invalid_values_say_which_setting() {
        let err = format!(
            "{:#}",
            Config::parse("sample_interval = \"1ms\"").unwrap_err()
        );
        assert!(err.contains("sample_interval"), "{err}");
        let err = format!(
            "{:#}",
            Config::parse("[detector.collapse]\nmax_cpu_ratio = 1.5\n").unwrap_err()
        );
        assert!(err.contains("detector.collapse: max_cpu_ratio"), "{err}");
        let err = format!(
            "{:#}",
            Config::parse("[detector.hurting]\nraise_after = 0\n").unwrap_err()
        );
        assert!(err.contains("raise_after"), "{err}");
        assert!(Config::parse("[collectors]\ninterrupts = false\n").is_err());
    }

    #[test]
    fn each_collector_is_switched_off_under_its_name() {
        for name in registry::switchable() {
            let text = format!("[collectors]\n{name} = false\n");
            let c: Config = toml::from_str(&text).unwrap();
            assert_eq!(c.collectors.disabled(), BTreeSet::from([name]), "{text}");
            assert!(registry::switchable()
                .into_iter()
                .all(|n| c.collectors.enabled(n) == (n != name)));
            let written = toml::to_string(&c).unwrap();
            assert!(written.contains(&format!("{name} = false")), "{written}");
            assert_eq!(toml::from_str::<Config>(&written).unwrap(), c);
        }
        for not_a_switch in ["disk_commit", "perf_probes", "kube_pods", "irq"] {
            let err =
                Config::parse(&format!("[collectors]\n{not_a_switch} = false\n")).unwrap_err();
            let err = format!("{err:#}");
            assert!(
                err.contains(&format!(
                    "unknown field `{not_a_switch}`, expected one of `topology`"
                )),
                "{err}"
            );
        }
    }

    #[test]
    fn host_root_and_explicit_paths() {
        let mut c = Config::default();
        c.paths.host_root = Some("/host".into());
        c.paths.sysfs = Some("/other/sys".into());
        let p = c.resolved_paths();
        assert_eq!(p.procfs, PathBuf::from("/host/proc"));
        assert_eq!(p.sysfs, PathBuf::from("/other/sys"));
        assert_eq!(p.cgroupfs, PathBuf::from("/host/sys/fs/cgroup"));
        assert_eq!(p.rootfs, PathBuf::from("/host"));
    }
}
