//! nodemedic's eBPF probes: how often the kernel writes a perf event record
//! (`perf_event_output*`) and how often that wakes the event's readers
//! (`perf_event_wakeup`), per CPU and per owning process, counted in the kernel.
//!
//! The probes are C (`ebpf/perf_wakeup.bpf.c`), compiled by build.rs with clang and relocated
//! at load time against the running kernel's BTF (CO-RE), loaded and attached with aya, in a
//! short-lived child process that hands the probes' fds to the daemon ([`loader`]). See
//! docs/ebpf.md for what is hooked and why.

pub mod abi;
mod collector;
pub mod host;
pub mod loader;
mod probe;
mod render;

pub use abi::{CpuCounts, EventKind, OwnerCounts, ProbeEvent};
pub use collector::{
    CollectorOptions, PerfProbeCollector, RingCounters, RingReader, NAME as PERF_PROBES,
    RING_DRAIN_INTERVAL,
};
pub use probe::{
    error_chain, parse_program_fdinfo, AttachMode, Hook, HookStatus, Method, PerfProbes,
    ProbeError, ProbeOptions, ProgramStats, Readings, HOOKS,
};
