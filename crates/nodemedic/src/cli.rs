use nodemedic_webkit::ListenAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Watches a Linux node's kernel-level health — IRQ placement, softirqs, softnet — exports it
/// to Prometheus, and diagnoses IRQ collapse (device interrupts piled onto one or two CPUs).
#[derive(Debug, Parser)]
#[command(
    name = "nodemedic",
    version = nodemedic_export::build_info::VERSION_LINE,
    propagate_version = true
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Configuration file (TOML). See deploy/nodemedic.toml for every setting, commented.
    #[arg(long, global = true, value_name = "FILE", env = "NODEMEDIC_CONFIG")]
    pub config: Option<PathBuf>,
    /// procfs mount point.
    #[arg(long = "path.procfs", global = true, value_name = "DIR")]
    pub procfs: Option<PathBuf>,
    /// sysfs mount point.
    #[arg(long = "path.sysfs", global = true, value_name = "DIR")]
    pub sysfs: Option<PathBuf>,
    /// Root of the cgroup filesystem: a cgroup v2 mount, or the tmpfs holding v1 controllers and a hybrid unified/.
    #[arg(long = "path.cgroupfs", global = true, value_name = "DIR")]
    pub cgroupfs: Option<PathBuf>,
    /// Root of the host filesystem, for configuration files such as /etc/default/irqbalance.
    #[arg(long = "path.rootfs", global = true, value_name = "DIR")]
    pub rootfs: Option<PathBuf>,
    /// Host root mounted in a container (e.g. /host): sets procfs, sysfs, cgroupfs and rootfs
    /// under DIR. Explicit --path.* flags still win.
    #[arg(long = "host-root", global = true, value_name = "DIR")]
    pub host_root: Option<PathBuf>,
    /// Address to serve /metrics, /status and /healthz on: host:port or unix:/path.
    /// Repeat it to listen on several.
    #[arg(long = "web.listen-address", global = true, value_name = "ADDR")]
    pub listen_address: Vec<ListenAddr>,
    /// Prometheus exporter-toolkit web configuration file: TLS, client certificates, basic
    /// auth, headers (docs/web-config.md). Re-read when it is modified.
    #[arg(long = "web.config.file", global = true, value_name = "FILE")]
    pub web_config_file: Option<PathBuf>,
    /// Requests served at once; the excess gets 503 (as node_exporter's flag).
    #[arg(long = "web.max-requests", global = true, value_name = "N")]
    pub max_requests: Option<usize>,
    /// More logging (-v debug, -vv trace). RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon: sample on an interval, detect, serve /metrics, /status and /healthz.
    Run(RunArgs),
    /// One-shot diagnosis for a terminal: sample twice, print what is wrong and what to do.
    ///
    /// Exit status: 0 healthy; 1 findings (IRQ collapse, or a collector that failed);
    /// 2 could not run (bad usage or configuration, /proc/interrupts unreadable).
    Check(CheckArgs),
    /// Validate a configuration file and print the effective configuration as TOML.
    Config,
    /// Print the man page (roff) generated from these definitions; used to build packages.
    #[command(hide = true)]
    Man,
    /// Load and attach the eBPF probes and hand them to the nodemedic that started this one
    /// over the socket on stdin (run by `run` and `check` themselves).
    #[command(hide = true, name = "load-probes")]
    LoadProbes,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Time between samples (overrides sample_interval in the config), e.g. 5s, 500ms.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub sample_interval: Option<Duration>,
    /// Fault injection for tests: after this many samples the sampler hangs for good (the
    /// endpoint keeps serving), as a wedged sampler would; systemd's watchdog must notice.
    #[arg(long = "fault.hang-sampler-after", value_name = "N", hide = true)]
    pub hang_sampler_after: Option<u64>,
    /// Fault injection for tests: this task (`sampler`, `remediator`, `kubernetes`) panics a
    /// second after start, as a bug would; the daemon must exit non-zero.
    #[arg(long = "fault.panic-task", value_name = "TASK", hide = true)]
    pub panic_task: Option<String>,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Time between the two samples.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub interval: Duration,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
    /// Cgroups listed in the text output's pressure section, by pressure and by throttling
    /// (the JSON lists every watched cgroup).
    #[arg(long, default_value_t = 5)]
    pub top: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
}
