//! Wiring of the eBPF probes (crate `nodemedic-probe`) into `run` and `check`.

use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use nodemedic_probe::PerfProbeCollector;

use crate::config::Config;

/// The hidden subcommand that runs the probes' loader (`nodemedic_probe::loader::serve`).
pub const LOADER_SUBCOMMAND: &str = "load-probes";

/// How long the loader may take. It reads and parses the kernel's BTF, relocates and loads
/// four programs through the verifier, and attaches them: about a second on a 2-CPU node,
/// several in an emulated VM; a minute means it hangs.
const LOADER_TIMEOUT: Duration = Duration::from_secs(60);

/// The probe collector, loaded and attached now (a failure is kept as its reason, never
/// fatal); the engine does not build it when the probes are switched off. `lsm`: the
/// process's LSM labels, which name a load a security policy refuses. With `spawn_reader`,
/// its ring buffer reader starts on the current tokio runtime.
pub fn collector(
    config: &Config,
    lsm: &nodemedic_kernel::lsm::LsmContext,
    spawn_reader: bool,
) -> PerfProbeCollector {
    let mut opts = config.probes.collector_options();
    opts.probe.lsm = lsm.clone();
    // Before the loader starts: it inherits the limit.
    raise_memlock();
    // The load parses the kernel's BTF (megabytes, the daemon's peak when it was done here)
    // and drops it: in a child process, whose memory ends with it. The child hands the
    // probes' fds back and exits.
    let loaded =
        nodemedic_probe::loader::load_in_child(loader_command(), &opts.probe, LOADER_TIMEOUT);
    let collector = PerfProbeCollector::new(opts, loaded);
    if spawn_reader {
        if let Some(reader) = collector.take_ring_reader() {
            tokio::spawn(reader.run());
        }
    }
    collector
}

/// This binary re-executed as the probes' loader: `/proc/self/exe` rather than the path it was
/// started from, which a package upgrade may have replaced since. The unit's and the chart's
/// restrictions allow it: execve is in systemd's @system-service set and in the container
/// runtimes' default seccomp profiles, and the capabilities the probes need carry over (root
/// keeps its bounding set across execve, no_new_privs only forbids gaining more).
fn loader_command() -> Command {
    let mut command = Command::new("/proc/self/exe");
    command.arg0("nodemedic").arg(LOADER_SUBCOMMAND);
    command
}

/// The loader's side: its stdin is its end of the socket pair the daemon made.
pub fn serve_loader() -> anyhow::Result<u8> {
    let socket = std::io::stdin().as_fd().try_clone_to_owned()?;
    nodemedic_probe::loader::serve(socket).map_err(|e| {
        anyhow::anyhow!("{LOADER_SUBCOMMAND} is run by nodemedic itself, its stdin a socket: {e}")
    })?;
    Ok(0)
}

/// Kernels before 5.11 charge BPF maps to `RLIMIT_MEMLOCK` (64 KiB by default): lift it, which
/// needs `CAP_SYS_RESOURCE` (the Helm chart's `features.probesMemlock`, or root outside a
/// hardened unit). Without it the probes report the limit as their reason.
fn raise_memlock() {
    let old_kernel = nodemedic_probe::host::kernel_version().is_some_and(|v| v < (5, 11));
    if !old_kernel {
        return;
    }
    match rlimit::Resource::MEMLOCK.set(rlimit::INFINITY, rlimit::INFINITY) {
        Ok(()) => tracing::info!("RLIMIT_MEMLOCK lifted for the eBPF probes (kernel < 5.11)"),
        Err(e) => {
            tracing::warn!(error = %e, "cannot lift RLIMIT_MEMLOCK for the eBPF probes (needs CAP_SYS_RESOURCE)")
        }
    }
}
