//! Loading, attaching and reading the perf-event probes with aya.

use std::error::Error as StdError;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use aya::maps::{HashMap, MapData, PerCpuArray, RingBuf};
use aya::programs::{FEntry, KProbe};
use aya::{Btf, Ebpf, EbpfLoader};
use nodemedic_kernel::lsm::LsmContext;
use serde::{Deserialize, Serialize};

use crate::abi::{CpuCounts, OwnerCounts, RawCpuCounts, RawOwner};
use crate::host;

/// The object built from `ebpf/perf_wakeup.bpf.c` by build.rs.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/perf_wakeup.bpf.o"));

/// How to hook the kernel functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum AttachMode {
    /// fentry (BTF trampolines, cheapest) and, if that fails, kprobes.
    #[default]
    Auto,
    Fentry,
    Kprobe,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Method {
    Fentry,
    Kprobe,
}

impl Method {
    pub fn as_str(&self) -> &'static str {
        match self {
            Method::Fentry => "fentry",
            Method::Kprobe => "kprobe",
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A kernel function the probes hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hook {
    pub function: &'static str,
    /// A required hook that cannot attach fails the whole probe set; an optional one (the
    /// rarely used backward ring buffer path) only shows as down.
    pub required: bool,
}

pub const HOOKS: &[Hook] = &[
    Hook {
        function: "perf_event_output",
        required: true,
    },
    Hook {
        function: "perf_event_output_forward",
        required: true,
    },
    Hook {
        function: "perf_event_output_backward",
        required: false,
    },
    Hook {
        function: "perf_event_wakeup",
        required: true,
    },
];

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeOptions {
    pub attach: AttachMode,
    /// Capacity of the per-owner map; owners beyond it are counted as untracked.
    pub max_owners: u32,
    /// Ring buffer size in bytes (a power of two, at least one page).
    pub ring_buffer_bytes: u32,
    /// Queued ring buffer bytes that make the kernel wake the reader (else it waits for the
    /// reader's timer).
    pub ring_buffer_wakeup_bytes: u32,
    /// Per-CPU wakeups in one second that make the kernel report a storm start; 0 = off.
    pub storm_wakeups_per_cpu: u64,
    /// Ask the kernel to count the probes' run time (BPF_ENABLE_STATS, held only while the
    /// probes are loaded; the `kernel.bpf_stats_enabled` sysctl is never written).
    pub bpf_stats: bool,
    /// The daemon's LSM labels (read once at start), which name a load or an attach a
    /// security policy refuses. Handed to the loader child with the rest.
    #[serde(default)]
    pub lsm: LsmContext,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        Self {
            attach: AttachMode::Auto,
            max_owners: 1024,
            ring_buffer_bytes: 16 * 1024,
            ring_buffer_wakeup_bytes: 4 * 1024,
            storm_wakeups_per_cpu: 1000,
            bpf_stats: false,
            lsm: LsmContext::default(),
        }
    }
}

/// Why the probes are not running. Display gives the one-line reason shown in the log, on
/// `/status` and in `nodemedic check`. The loader child sends it to the daemon as it is
/// (serde), so the reason reads the same wherever the load ran.
#[derive(Debug, thiserror::Error, Serialize, Deserialize)]
pub enum ProbeError {
    #[error(
        "kernel BTF is missing ({path}): the probes read struct perf_event through BTF CO-RE \
         and need a kernel built with CONFIG_DEBUG_INFO_BTF=y"
    )]
    NoBtf { path: String },
    #[error(
        "permission denied {what}: this process lacks {missing} (grant CAP_BPF and CAP_PERFMON, \
         or CAP_SYS_ADMIN on kernels before 5.8)"
    )]
    Permission { what: String, missing: String },
    #[error(
        "permission denied {what}: kernel {kernel} (< 5.11) charges BPF maps to RLIMIT_MEMLOCK \
         and the limit is {limit}; raise it (systemd: LimitMEMLOCK=infinity)"
    )]
    Memlock {
        what: String,
        kernel: String,
        limit: String,
    },
    /// Refused with EACCES or EPERM while a security module confines the process (and not
    /// for a capability it lacks): `denial` names the call, the module and the profile or
    /// label.
    #[error("{what}: {denial}: {detail}")]
    Denied {
        what: String,
        denial: String,
        detail: String,
    },
    /// `perf_event_open()` refused with EACCES at a `kernel.perf_event_paranoid` of 3 or more
    /// without CAP_SYS_ADMIN: Debian's kernels (and Ubuntu's at 3) carry a patch that then
    /// refuses every perf event to a process without CAP_SYS_ADMIN, CAP_PERFMON or not. A
    /// kprobe is attached through a perf event; fentry is not.
    #[error(
        "attaching {function}: perf_event_open() refused: kernel.perf_event_paranoid is \
         {level}, at which Debian's and Ubuntu's kernels open perf events only for a process \
         with CAP_SYS_ADMIN (CAP_PERFMON is not enough), which this one does not hold; set \
         kernel.perf_event_paranoid=2 on the node for kprobes, or attach by fentry where the \
         kernel has BTF trampolines: {detail}"
    )]
    PerfParanoid {
        function: String,
        level: i32,
        detail: String,
    },
    #[error("the kernel's verifier rejected {program}: {log}")]
    Verifier { program: String, log: String },
    #[error("cannot attach {function}: {detail}")]
    Attach { function: String, detail: String },
    #[error("{what}: {detail}")]
    Other { what: String, detail: String },
    /// The child process that loads the probes crashed, hung or answered nonsense.
    #[error("the probes' loader (a child process) {detail}")]
    Loader { detail: String },
}

/// Every message in an error's source chain, joined: aya's top-level messages leave the
/// errno in the source.
pub fn error_chain(err: &(dyn StdError + 'static)) -> String {
    let mut parts = vec![err.to_string()];
    let mut cur = err.source();
    while let Some(e) = cur {
        let s = e.to_string();
        if !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
        cur = e.source();
    }
    parts.join(": ")
}

fn io_error_in<'a>(err: &'a (dyn StdError + 'static)) -> Option<&'a io::Error> {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            return Some(io);
        }
        cur = e.source();
    }
    None
}

/// The last lines of a verifier log: the rejection reason is at the end.
fn log_tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(3);
    lines[start..].join(" | ")
}

/// Names the cause of a failed load: permission problems are told apart by this process's
/// capabilities, the security module confining it (`lsm`) and, on kernels before 5.11, its
/// memlock limit.
fn classify(what: String, err: &(dyn StdError + 'static), lsm: &LsmContext) -> ProbeError {
    if let Some(aya::programs::ProgramError::LoadError {
        verifier_log,
        io_error,
    }) = err.downcast_ref::<aya::programs::ProgramError>()
    {
        let log = verifier_log.to_string();
        if io_error.raw_os_error() != Some(libc_eperm()) && !log.trim().is_empty() {
            return ProbeError::Verifier {
                program: what,
                log: log_tail(&log),
            };
        }
    }
    // aya's LoadError prints an empty "Verifier output:" when the kernel refused before
    // verifying; the errno is the whole story then.
    let detail = match err.downcast_ref::<aya::programs::ProgramError>() {
        Some(aya::programs::ProgramError::LoadError {
            io_error,
            verifier_log,
        }) if verifier_log.to_string().trim().is_empty() => {
            format!("BPF_PROG_LOAD: {io_error}")
        }
        _ => error_chain(err),
    };
    let errno = io_error_in(err).and_then(io::Error::raw_os_error);
    if errno == Some(libc_eperm()) {
        if let Some(missing) = host::own_missing_caps().filter(|m| !m.is_empty()) {
            return ProbeError::Permission {
                what,
                missing: missing.join(" and "),
            };
        }
    }
    // With the capabilities there (or EACCES, which no capability check gives), a module
    // confining the process may be what refused: a profile without `capability bpf`, or
    // SELinux's bpf and perf_event classes.
    if let Some(denial) = lsm.denial("bpf()", errno) {
        return ProbeError::Denied {
            what,
            denial,
            detail,
        };
    }
    if errno == Some(libc_eperm()) {
        if let Some((maj, min)) = host::kernel_version() {
            if (maj, min) < (5, 11) {
                let limit = match host::own_memlock_soft() {
                    Some(Some(b)) => format!("{} KiB", b / 1024),
                    Some(None) => "unlimited".to_owned(),
                    None => "unknown".to_owned(),
                };
                return ProbeError::Memlock {
                    what,
                    kernel: host::kernel_release().unwrap_or_default(),
                    limit,
                };
            }
        }
    }
    ProbeError::Other { what, detail }
}

fn libc_eperm() -> i32 {
    io::Error::from(io::ErrorKind::PermissionDenied)
        .raw_os_error()
        .unwrap_or(1)
}

/// One hook's state after loading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookStatus {
    pub function: &'static str,
    /// How it is attached, or None with the reason it is not.
    pub method: Option<Method>,
    pub error: Option<String>,
}

/// Kernel-measured cost of one program (BPF stats).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProgramStats {
    pub run_count: u64,
    pub run_time_ns: u64,
}

/// Everything read from the maps in one sample.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Readings {
    /// Indexed by CPU number (possible CPUs).
    pub per_cpu: Vec<CpuCounts>,
    pub owners: Vec<OwnerCounts>,
    /// Per hooked function, when BPF stats are on.
    pub programs: Vec<(&'static str, ProgramStats)>,
}

impl Readings {
    pub fn totals(&self) -> CpuCounts {
        let mut t = CpuCounts::default();
        for c in &self.per_cpu {
            t.add(c);
        }
        t
    }
}

/// What keeps the programs attached.
pub(crate) enum Attachments {
    /// The aya object that loaded them, in the process that loaded them (the loader child,
    /// tests).
    Loaded(Box<Ebpf>),
    /// The fds of their links (bpf links, or perf events on kernels before 5.15), handed over
    /// by the loader child: the kernel detaches a program when the last of these closes.
    Handed(Vec<OwnedFd>),
}

/// The loaded and attached probes. Dropping it detaches and unloads them.
pub struct PerfProbes {
    pub(crate) attachments: Attachments,
    pub(crate) cpu_counts: PerCpuArray<MapData, RawCpuCounts>,
    pub(crate) owners: HashMap<MapData, u32, RawOwner>,
    pub(crate) ring: Option<RingBuf<MapData>>,
    /// One program fd per attached hook, for its run-time counters (`/proc/self/fdinfo`).
    pub(crate) programs: Vec<(&'static str, OwnedFd)>,
    pub(crate) hooks: Vec<HookStatus>,
    pub(crate) method: Method,
    /// Holding this fd keeps the kernel's run-time accounting on (BPF_ENABLE_STATS).
    pub(crate) stats: Option<OwnedFd>,
    pub(crate) stats_error: Option<String>,
}

impl fmt::Debug for PerfProbes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let attachments = match &self.attachments {
            Attachments::Loaded(ebpf) => {
                format!("{} programs loaded here", ebpf.programs().count())
            }
            Attachments::Handed(links) => format!("{} links handed over", links.len()),
        };
        f.debug_struct("PerfProbes")
            .field("attachments", &attachments)
            .field("method", &self.method)
            .field("hooks", &self.hooks)
            .finish_non_exhaustive()
    }
}

fn program_name(method: Method, function: &str) -> String {
    format!("{}_{function}", method.as_str())
}

impl PerfProbes {
    /// Loads the object, then attaches every hook with fentry or kprobes as `opts.attach`
    /// says. Errors name one cause (see [`ProbeError`]).
    pub fn load(opts: &ProbeOptions) -> Result<Self, ProbeError> {
        if !host::has_kernel_btf() {
            return Err(ProbeError::NoBtf {
                path: host::KERNEL_BTF.to_owned(),
            });
        }
        let btf = Btf::from_sys_fs().map_err(|e| ProbeError::Other {
            what: format!("reading {}", host::KERNEL_BTF),
            detail: error_chain(&e),
        })?;
        let mut ebpf = EbpfLoader::new()
            .btf(Some(&btf))
            .override_global(
                "storm_wakeups_per_cpu_sec",
                &opts.storm_wakeups_per_cpu,
                true,
            )
            .override_global(
                "ringbuf_wakeup_bytes",
                &u64::from(opts.ring_buffer_wakeup_bytes),
                true,
            )
            .map_max_entries("owners", opts.max_owners.max(1))
            .map_max_entries("events", opts.ring_buffer_bytes)
            .load(OBJECT)
            .map_err(|e| {
                classify(
                    "loading the BPF object (creating its maps)".to_owned(),
                    &e,
                    &opts.lsm,
                )
            })?;

        // Run-time accounting, before attaching so the first calls count too.
        let (stats, stats_error) = if opts.bpf_stats {
            match aya::sys::enable_stats(aya::sys::Stats::RunTime) {
                Ok(fd) => (Some(fd), None),
                // The kernel allows BPF_ENABLE_STATS to CAP_SYS_ADMIN only, which the hardened
                // unit and the DaemonSet do not grant; the sysctl is the admin's switch.
                Err(e) => (
                    None,
                    Some(format!(
                        "{} (BPF_ENABLE_STATS needs CAP_SYS_ADMIN; without it, set \
                         kernel.bpf_stats_enabled=1 to have run times counted)",
                        error_chain(&e)
                    )),
                ),
            }
        } else {
            (None, None)
        };

        let (method, hooks) = match opts.attach {
            AttachMode::Fentry => (
                Method::Fentry,
                attach_all(&mut ebpf, &btf, Method::Fentry, &opts.lsm)?,
            ),
            AttachMode::Kprobe => (
                Method::Kprobe,
                attach_all(&mut ebpf, &btf, Method::Kprobe, &opts.lsm)?,
            ),
            AttachMode::Auto => match attach_all(&mut ebpf, &btf, Method::Fentry, &opts.lsm) {
                Ok(h) => (Method::Fentry, h),
                Err(fentry_err) => match attach_all(&mut ebpf, &btf, Method::Kprobe, &opts.lsm) {
                    Ok(h) => {
                        tracing::info!(error = %fentry_err, "fentry unavailable, probes attached as kprobes");
                        (Method::Kprobe, h)
                    }
                    Err(kprobe_err) => {
                        return Err(ProbeError::Attach {
                            function: "perf-event probes".to_owned(),
                            detail: format!("fentry: {fentry_err}; kprobe: {kprobe_err}"),
                        })
                    }
                },
            },
        };

        let cpu_counts = take_map(&mut ebpf, "cpu_counts")
            .and_then(|m| PerCpuArray::try_from(m).map_err(|e| map_err("cpu_counts", &e)))?;
        let owners = take_map(&mut ebpf, "owners")
            .and_then(|m| HashMap::try_from(m).map_err(|e| map_err("owners", &e)))?;
        let ring = take_map(&mut ebpf, "events")
            .and_then(|m| RingBuf::try_from(m).map_err(|e| map_err("events", &e)))?;
        let mut programs = Vec::new();
        for hook in &hooks {
            let Some(method) = hook.method else { continue };
            let name = program_name(method, hook.function);
            let fd = ebpf
                .program(&name)
                .and_then(|p| p.fd().ok())
                .map(|fd| fd.as_fd().try_clone_to_owned())
                .transpose()
                .map_err(|e| ProbeError::Other {
                    what: format!("program {name}"),
                    detail: e.to_string(),
                })?;
            if let Some(fd) = fd {
                programs.push((hook.function, fd));
            }
        }
        Ok(Self {
            attachments: Attachments::Loaded(Box::new(ebpf)),
            cpu_counts,
            owners,
            ring: Some(ring),
            programs,
            hooks,
            method,
            stats,
            stats_error,
        })
    }

    pub fn method(&self) -> Method {
        self.method
    }

    pub fn hooks(&self) -> &[HookStatus] {
        &self.hooks
    }

    /// Why BPF stats were asked for but are off (BPF_ENABLE_STATS needs 5.8).
    pub fn stats_error(&self) -> Option<&str> {
        self.stats_error.as_deref()
    }

    /// The ring buffer, once: the reader task owns it.
    pub fn take_ring_buffer(&mut self) -> Option<RingBuf<MapData>> {
        self.ring.take()
    }

    /// Reads all counters: one per-CPU array lookup and one pass over the owner map.
    pub fn read(&self) -> Result<Readings, ProbeError> {
        let per_cpu = self
            .cpu_counts
            .get(&0, 0)
            .map_err(|e| map_err("cpu_counts", &e))?
            .iter()
            .map(CpuCounts::from_raw)
            .collect();
        let mut owners = Vec::new();
        for item in self.owners.iter() {
            match item {
                Ok((tgid, raw)) => owners.push(OwnerCounts::from_raw(tgid, &raw)),
                // An owner deleted between get_next_key and lookup: skip it.
                Err(aya::maps::MapError::KeyNotFound) => continue,
                Err(e) => return Err(map_err("owners", &e)),
            }
        }
        let programs = self
            .programs
            .iter()
            .filter_map(|(function, fd)| {
                let fdinfo = format!("/proc/self/fdinfo/{}", fd.as_raw_fd());
                let text = std::fs::read_to_string(fdinfo).ok()?;
                Some((*function, parse_program_fdinfo(&text)?))
            })
            .collect();
        Ok(Readings {
            per_cpu,
            owners,
            programs,
        })
    }

    /// Forgets owners the caller knows have exited, so the bounded map keeps room for new
    /// ones. Returns how many were removed.
    pub fn forget_owners(&mut self, tgids: &[u32]) -> usize {
        tgids
            .iter()
            .filter(|t| self.owners.remove(t).is_ok())
            .count()
    }
}

/// A BPF program's run-time counters from its fd's `/proc/<pid>/fdinfo` entry (`run_time_ns`
/// and `run_cnt`, since Linux 5.1): readable by whoever holds the fd, without a BPF syscall.
pub fn parse_program_fdinfo(text: &str) -> Option<ProgramStats> {
    let field = |key: &str| -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
    };
    Some(ProgramStats {
        run_count: field("run_cnt")?,
        run_time_ns: field("run_time_ns")?,
    })
}

pub(crate) fn map_err(name: &str, e: &aya::maps::MapError) -> ProbeError {
    ProbeError::Other {
        what: format!("map {name}"),
        detail: error_chain(e),
    }
}

fn take_map(ebpf: &mut Ebpf, name: &str) -> Result<aya::maps::Map, ProbeError> {
    ebpf.take_map(name).ok_or_else(|| ProbeError::Other {
        what: format!("map {name}"),
        detail: "missing from the BPF object".to_owned(),
    })
}

/// Loads and attaches one program per hook with `method`. A required hook failing fails the
/// set (the caller may retry with the other method; aya detaches what was attached when the
/// programs are unloaded).
fn attach_all(
    ebpf: &mut Ebpf,
    btf: &Btf,
    method: Method,
    lsm: &LsmContext,
) -> Result<Vec<HookStatus>, ProbeError> {
    let mut statuses = Vec::new();
    let mut loaded: Vec<String> = Vec::new();
    for hook in HOOKS {
        let name = program_name(method, hook.function);
        match attach_one(ebpf, btf, method, hook.function, &name, lsm) {
            Ok(()) => {
                loaded.push(name);
                statuses.push(HookStatus {
                    function: hook.function,
                    method: Some(method),
                    error: None,
                });
            }
            Err(e) if !hook.required => {
                tracing::warn!(function = hook.function, %method, error = %e, "optional probe not attached");
                statuses.push(HookStatus {
                    function: hook.function,
                    method: None,
                    error: Some(e.to_string()),
                });
            }
            Err(e) => {
                for n in &loaded {
                    unload(ebpf, method, n);
                }
                unload(ebpf, method, &name);
                return Err(e);
            }
        }
    }
    Ok(statuses)
}

fn unload(ebpf: &mut Ebpf, method: Method, name: &str) {
    let Some(p) = ebpf.program_mut(name) else {
        return;
    };
    let r = match method {
        Method::Fentry => <&mut FEntry>::try_from(p).map(|p| p.unload()),
        Method::Kprobe => <&mut KProbe>::try_from(p).map(|p| p.unload()),
    };
    if let Ok(Err(e)) = r {
        tracing::debug!(program = name, error = %e, "unload after a failed attach");
    }
}

fn attach_one(
    ebpf: &mut Ebpf,
    btf: &Btf,
    method: Method,
    function: &str,
    name: &str,
    lsm: &LsmContext,
) -> Result<(), ProbeError> {
    let prog = ebpf.program_mut(name).ok_or_else(|| ProbeError::Other {
        what: format!("program {name}"),
        detail: "missing from the BPF object".to_owned(),
    })?;
    match method {
        Method::Fentry => {
            let p: &mut FEntry = prog
                .try_into()
                .map_err(|e| classify(format!("program {name}"), &e, lsm))?;
            p.load(function, btf)
                .map_err(|e| classify(format!("loading {name}"), &e, lsm))?;
            p.attach().map_err(|e| {
                attach_error(
                    format!("fentry {function}"),
                    "bpf()",
                    &e,
                    error_chain(&e),
                    lsm,
                )
            })?;
        }
        Method::Kprobe => {
            let p: &mut KProbe = prog
                .try_into()
                .map_err(|e| classify(format!("program {name}"), &e, lsm))?;
            p.load()
                .map_err(|e| classify(format!("loading {name}"), &e, lsm))?;
            p.attach(function, 0).map_err(|e| {
                let mut detail = error_chain(&e);
                if detail.contains("devices/kprobe/type") {
                    detail.push_str(
                        " (this kernel has no kprobe PMU: CONFIG_KPROBES/CONFIG_KPROBE_EVENTS off)",
                    );
                }
                attach_error(
                    format!("kprobe {function}"),
                    "perf_event_open()",
                    &e,
                    detail,
                    lsm,
                )
            })?;
        }
    }
    Ok(())
}

/// An attach that failed: refused under a confining security module (EACCES, EPERM: SELinux's
/// perf_event and bpf classes, a profile without `capability perfmon`), named as the
/// module's; else as it failed.
fn attach_error(
    function: String,
    call: &str,
    err: &(dyn StdError + 'static),
    detail: String,
    lsm: &LsmContext,
) -> ProbeError {
    let errno = io_error_in(err).and_then(io::Error::raw_os_error);
    if call == "perf_event_open()" {
        let level = host::perf_event_paranoid();
        let sys_admin = host::own_cap_eff().map(host::has_sys_admin);
        if let Some(level) = paranoid_refusal(errno, level, sys_admin) {
            return ProbeError::PerfParanoid {
                function,
                level,
                detail,
            };
        }
    }
    match lsm.denial(call, errno) {
        Some(denial) => ProbeError::Denied {
            what: format!("attaching {function}"),
            denial,
            detail,
        },
        None => ProbeError::Attach { function, detail },
    }
}

/// The paranoid level that refused a `perf_event_open()`, when it is the cause: EACCES, a
/// level of 3 or more (mainline stops at 2; Debian's and Ubuntu's patch adds 3 and 4) and no
/// CAP_SYS_ADMIN. At that level the refusal comes before any security module's hook runs,
/// so it is named first.
fn paranoid_refusal(
    errno: Option<i32>,
    level: Option<i32>,
    sys_admin: Option<bool>,
) -> Option<i32> {
    const EACCES: i32 = 13;
    match (errno, level, sys_admin) {
        (Some(EACCES), Some(level), Some(false)) if level >= 3 => Some(level),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// EACCES at paranoid 3 without CAP_SYS_ADMIN is the sysctl's; with CAP_SYS_ADMIN, at 2,
    /// for another errno, or with the level or the capabilities unreadable, it is not.
    #[test]
    fn a_kprobe_refused_at_paranoid_3_names_the_sysctl() {
        assert_eq!(paranoid_refusal(Some(13), Some(3), Some(false)), Some(3));
        assert_eq!(paranoid_refusal(Some(13), Some(4), Some(false)), Some(4));
        assert_eq!(paranoid_refusal(Some(13), Some(2), Some(false)), None);
        assert_eq!(paranoid_refusal(Some(13), Some(3), Some(true)), None);
        assert_eq!(paranoid_refusal(Some(1), Some(3), Some(false)), None);
        assert_eq!(paranoid_refusal(Some(13), None, Some(false)), None);
        assert_eq!(paranoid_refusal(Some(13), Some(3), None), None);
        let e = ProbeError::PerfParanoid {
            function: "kprobe perf_event_output".into(),
            level: 3,
            detail: "Permission denied (os error 13)".into(),
        };
        assert_eq!(
            e.to_string(),
            "attaching kprobe perf_event_output: perf_event_open() refused: \
             kernel.perf_event_paranoid is 3, at which Debian's and Ubuntu's kernels open perf \
             events only for a process with CAP_SYS_ADMIN (CAP_PERFMON is not enough), which \
             this one does not hold; set kernel.perf_event_paranoid=2 on the node for kprobes, \
             or attach by fentry where the kernel has BTF trampolines: Permission denied (os \
             error 13)"
        );
        let json = serde_json::to_string(&e).unwrap_or_default();
        assert!(matches!(
            serde_json::from_str::<ProbeError>(&json),
            Ok(ProbeError::PerfParanoid { level: 3, .. })
        ));
    }

    /// A load or an attach refused with EACCES or EPERM names the module confining the
    /// process (its capabilities are there: this test runs as root); without one the reason
    /// is what it was.
    #[test]
    fn a_refused_load_or_attach_names_the_lsm() {
        use nodemedic_kernel::lsm::LsmFiles;
        let selinux = LsmContext::from_files(&LsmFiles {
            current: Some("system_u:system_r:container_t:s0:c12,c34\0"),
            selinux_enforce: Some("1\n"),
            ..Default::default()
        });
        let eacces = io::Error::from_raw_os_error(13);
        let e = classify("loading perf_wakeup".into(), &eacces, &selinux);
        assert_eq!(
            e.to_string(),
            "loading perf_wakeup: bpf() denied by SELinux (label \
             system_u:system_r:container_t:s0:c12,c34): Permission denied (os error 13)"
        );
        let e = classify(
            "loading perf_wakeup".into(),
            &eacces,
            &LsmContext::default(),
        );
        assert!(matches!(e, ProbeError::Other { .. }), "{e}");
        let apparmor = LsmContext::from_files(&LsmFiles {
            apparmor_current: Some("nodemedic (enforce)\n"),
            ..Default::default()
        });
        let eperm = io::Error::from_raw_os_error(1);
        let e = attach_error(
            "kprobe perf_event_output".into(),
            "perf_event_open()",
            &eperm,
            eperm.to_string(),
            &apparmor,
        );
        assert_eq!(
            e.to_string(),
            "attaching kprobe perf_event_output: perf_event_open() denied by AppArmor (profile \
             nodemedic, enforce mode): Operation not permitted (os error 1)"
        );
        let enoent = io::Error::from_raw_os_error(2);
        let e = attach_error(
            "kprobe x".into(),
            "perf_event_open()",
            &enoent,
            enoent.to_string(),
            &apparmor,
        );
        assert!(matches!(e, ProbeError::Attach { .. }), "{e}");
        // The reason crosses from the loader child as it is.
        let json =
            serde_json::to_string(&classify("x".into(), &eacces, &selinux)).unwrap_or_default();
        let back: Result<ProbeError, _> = serde_json::from_str(&json);
        assert!(matches!(back, Ok(ProbeError::Denied { .. })), "{json}");
        let opts = ProbeOptions {
            lsm: selinux,
            ..ProbeOptions::default()
        };
        let json = serde_json::to_string(&opts).unwrap_or_default();
        assert_eq!(serde_json::from_str::<ProbeOptions>(&json).ok(), Some(opts));
    }

    #[test]
    fn program_counters_come_from_the_fds_fdinfo() {
        // Linux 6.1's fdinfo of a tracing program.
        let text = "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\nprog_type:\t26\n\
                    prog_jited:\t1\nprog_tag:\t3b185187f1855c4c\nmemlock:\t4096\nprog_id:\t42\n\
                    run_time_ns:\t123456\nrun_cnt:\t789\nrecursion_misses:\t0\n\
                    verified_insns:\t88\n";
        assert_eq!(
            parse_program_fdinfo(text),
            Some(ProgramStats {
                run_count: 789,
                run_time_ns: 123456,
            })
        );
        // Before 5.1 there are no counters; a map's fdinfo has none either.
        assert_eq!(parse_program_fdinfo("prog_type:\t2\nprog_id:\t1\n"), None);
        assert_eq!(parse_program_fdinfo("run_cnt:\tx\nrun_time_ns:\t1\n"), None);
        assert_eq!(parse_program_fdinfo(""), None);
    }
}
