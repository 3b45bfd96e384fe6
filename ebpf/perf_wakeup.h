/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/*
 * Layouts shared between the probes and nodemedic's loader (crates/nodemedic-probe/src/abi.rs
 * mirrors them with #[repr(C)]; its tests check the sizes against the object's BTF).
 */
#ifndef NODEMEDIC_PERF_WAKEUP_H
#define NODEMEDIC_PERF_WAKEUP_H

/* One per CPU (PERCPU_ARRAY, key 0): plain increments, no atomics, no shared cache line. */
struct nm_cpu_counts {
	/* perf_event_output(): bpf_perf_event_output() and friends from BPF programs. */
	__u64 bpf_outputs;
	/* perf_event_output_forward/_backward(): a sampling perf event's overflow. */
	__u64 sample_outputs;
	/* perf_event_wakeup(): a perf event's waiters (poll/epoll, fasync) woken. */
	__u64 wakeups;
	/* Calls whose owner could not get a slot in `owners` (map full). */
	__u64 untracked;
	/* Rare events offered to the ring buffer, and those it had no room for. */
	__u64 events_emitted;
	__u64 events_dropped;
	/* Storm state for this CPU: start of the current window, wakeups in it, storming. */
	__u64 window_start_ns;
	__u64 window_wakeups;
	__u64 storming;
};

/* Per owning process (HASH keyed by tgid; owner 0 = kernel-owned events). */
struct nm_owner {
	__u64 bpf_outputs;
	__u64 sample_outputs;
	__u64 wakeups;
	char comm[16];
};

enum nm_event_kind {
	NM_EVENT_NEW_OWNER = 1,
	NM_EVENT_STORM_START = 2,
};

/* Ring buffer record: only for rare events, never one per call. */
struct nm_event {
	__u32 kind;
	__u32 tgid;
	__u32 cpu;
	__u32 _pad;
	__u64 ts_ns;
	/* STORM_START: the wakeups in the window that reached the threshold. */
	__u64 value;
	char comm[16];
};

/* The Rust side decodes these as u64 words (crates/nodemedic-probe/src/abi.rs). */
_Static_assert(sizeof(struct nm_cpu_counts) == 9 * 8, "nm_cpu_counts layout");
_Static_assert(sizeof(struct nm_owner) == 5 * 8, "nm_owner layout");
_Static_assert(sizeof(struct nm_event) == 48, "nm_event layout");

#endif /* NODEMEDIC_PERF_WAKEUP_H */
