// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * nodemedic's perf-event probes: count perf_event outputs and the wakeups they cause, per CPU
 * and per owning process, entirely in the kernel. Userspace reads the maps once per sample;
 * the ring buffer carries only rare events (a new owner, a CPU's storm starting).
 *
 * Hook points (see docs/ebpf.md for the kernel source walk):
 *   perf_event_output()            bpf_perf_event_output() and the skb/xdp variants end here
 *   perf_event_output_forward()    a sampling event's default overflow handler
 *   perf_event_output_backward()   the same for write_backward ring buffers
 *   perf_event_wakeup()            the irq_work that wakes a perf ring buffer's readers
 * Each has an fentry program (BTF trampoline, direct CO-RE loads) and a kprobe twin
 * (bpf_probe_read_kernel through BPF_CORE_READ) for kernels without trampolines.
 */
#include "nodemedic_vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "perf_wakeup.h"

/* fentry/kprobe programs that read kernel memory must be GPL. */
char LICENSE[] SEC("license") = "GPL";

/*
 * Set by the loader before the object is loaded (.rodata is frozen, so the verifier prunes
 * what a zero disables).
 *   storm_wakeups_per_cpu_sec: a CPU whose wakeups in one second reach this emits one
 *     STORM_START record, once per storm; 0 = off.
 *   ringbuf_wakeup_bytes: records are submitted without waking userspace until this much
 *     data waits; userspace also drains on a timer, so a trickle never wakes it per record.
 */
const volatile __u64 storm_wakeups_per_cpu_sec = 0;
const volatile __u64 ringbuf_wakeup_bytes = 4096;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nm_cpu_counts);
} cpu_counts SEC(".maps");

/*
 * A preallocated HASH, not an LRU: sampling events overflow in NMI context, and a
 * preallocated hash's freelist and bucket locks are NMI-safe (insertion fails with -EBUSY
 * instead of deadlocking), while the LRU's list locks are not. The loader sizes it
 * (`max_owners`); when it is full, calls are counted as `untracked` and userspace prunes
 * exited owners.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct nm_owner);
} owners SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16384);
} events SEC(".maps");

enum nm_kind {
	NM_BPF_OUTPUT,
	NM_SAMPLE_OUTPUT,
	NM_WAKEUP,
};

/* The kernel marks in-kernel counters' owner with TASK_TOMBSTONE ((void *)-1). */
#define NM_TASK_TOMBSTONE ((struct task_struct *)-1L)

static __always_inline void emit(struct nm_cpu_counts *c, __u32 kind, __u32 tgid,
				 const char *comm, __u64 value)
{
	struct nm_event *e;
	__u64 flags = BPF_RB_NO_WAKEUP;

	c->events_emitted++;
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		c->events_dropped++;
		return;
	}
	e->kind = kind;
	e->tgid = tgid;
	e->cpu = bpf_get_smp_processor_id();
	e->_pad = 0;
	e->ts_ns = bpf_ktime_get_ns();
	e->value = value;
	__builtin_memcpy(e->comm, comm, sizeof(e->comm));
	if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= ringbuf_wakeup_bytes)
		flags = BPF_RB_FORCE_WAKEUP;
	bpf_ringbuf_submit(e, flags);
}

/*
 * `direct` is a compile-time constant after inlining: fentry arguments are BTF pointers the
 * verifier lets us dereference (CO-RE-relocated loads, faults caught), kprobe arguments are
 * plain integers that must go through bpf_probe_read_kernel().
 */
static __always_inline void account(struct perf_event *event, enum nm_kind kind, const bool direct)
{
	__u32 zero = 0;
	struct nm_cpu_counts *c = bpf_map_lookup_elem(&cpu_counts, &zero);
	struct task_struct *owner;
	struct perf_event *parent;
	struct nm_owner *o;
	__u32 tgid = 0;

	if (!c)
		return;
	if (kind == NM_BPF_OUTPUT)
		c->bpf_outputs++;
	else if (kind == NM_SAMPLE_OUTPUT)
		c->sample_outputs++;
	else
		c->wakeups++;

	/* An inherited (child) event has no owner of its own: its parent's opener owns it. */
	if (direct) {
		parent = event->parent;
		owner = parent ? parent->owner : event->owner;
	} else {
		parent = BPF_CORE_READ(event, parent);
		owner = parent ? BPF_CORE_READ(parent, owner) : BPF_CORE_READ(event, owner);
	}
	if (owner && owner != NM_TASK_TOMBSTONE)
		tgid = direct ? owner->tgid : BPF_CORE_READ(owner, tgid);

	o = bpf_map_lookup_elem(&owners, &tgid);
	if (!o) {
		struct nm_owner fresh = {};

		if (tgid != 0)
			bpf_core_read_str(fresh.comm, sizeof(fresh.comm), &owner->comm);
		else
			__builtin_memcpy(fresh.comm, "[kernel]", 9);
		/* NOEXIST: two CPUs racing on a new owner insert it once and report it once. */
		if (bpf_map_update_elem(&owners, &tgid, &fresh, BPF_NOEXIST) == 0)
			emit(c, NM_EVENT_NEW_OWNER, tgid, fresh.comm, 0);
		o = bpf_map_lookup_elem(&owners, &tgid);
		if (!o) {
			c->untracked++;
			return;
		}
	}
	if (kind == NM_BPF_OUTPUT)
		__sync_fetch_and_add(&o->bpf_outputs, 1);
	else if (kind == NM_SAMPLE_OUTPUT)
		__sync_fetch_and_add(&o->sample_outputs, 1);
	else
		__sync_fetch_and_add(&o->wakeups, 1);

	/*
	 * Storm start, reading the clock once per `storm_wakeups_per_cpu_sec` wakeups, not per
	 * call: reaching the threshold within one second is a storming window; taking longer
	 * ends the storm. A storm after a quiet spell is reported within two windows.
	 */
	if (kind == NM_WAKEUP && storm_wakeups_per_cpu_sec) {
		if (++c->window_wakeups >= storm_wakeups_per_cpu_sec) {
			__u64 now = bpf_ktime_get_ns();
			bool fast = now - c->window_start_ns <= 1000000000ULL;

			if (fast && !c->storming)
				emit(c, NM_EVENT_STORM_START, tgid, o->comm, c->window_wakeups);
			c->storming = fast;
			c->window_start_ns = now;
			c->window_wakeups = 0;
		}
	}
}

SEC("fentry/perf_event_output")
int BPF_PROG(fentry_perf_event_output, struct perf_event *event)
{
	account(event, NM_BPF_OUTPUT, true);
	return 0;
}

SEC("fentry/perf_event_output_forward")
int BPF_PROG(fentry_perf_event_output_forward, struct perf_event *event)
{
	account(event, NM_SAMPLE_OUTPUT, true);
	return 0;
}

SEC("fentry/perf_event_output_backward")
int BPF_PROG(fentry_perf_event_output_backward, struct perf_event *event)
{
	account(event, NM_SAMPLE_OUTPUT, true);
	return 0;
}

SEC("fentry/perf_event_wakeup")
int BPF_PROG(fentry_perf_event_wakeup, struct perf_event *event)
{
	account(event, NM_WAKEUP, true);
	return 0;
}

/*
 * A kprobe's first argument, on x86-64 (`di`) or arm64 (`regs[0]`), read through CO-RE: the
 * type-exists test is a constant once loaded, so the verifier drops the other architecture's
 * branch (whose unresolvable relocation the loader has poisoned). libbpf's PT_REGS_PARM1 would
 * bake the architecture into the object at build time.
 */
static __always_inline struct perf_event *kprobe_first_arg(struct pt_regs *ctx)
{
	if (bpf_core_type_exists(struct user_pt_regs))
		return (struct perf_event *)BPF_CORE_READ((struct user_pt_regs *)ctx, regs[0]);
	return (struct perf_event *)BPF_CORE_READ((struct pt_regs___x86 *)ctx, di);
}

SEC("kprobe/perf_event_output")
int kprobe_perf_event_output(struct pt_regs *ctx)
{
	account(kprobe_first_arg(ctx), NM_BPF_OUTPUT, false);
	return 0;
}

SEC("kprobe/perf_event_output_forward")
int kprobe_perf_event_output_forward(struct pt_regs *ctx)
{
	account(kprobe_first_arg(ctx), NM_SAMPLE_OUTPUT, false);
	return 0;
}

SEC("kprobe/perf_event_output_backward")
int kprobe_perf_event_output_backward(struct pt_regs *ctx)
{
	account(kprobe_first_arg(ctx), NM_SAMPLE_OUTPUT, false);
	return 0;
}

SEC("kprobe/perf_event_wakeup")
int kprobe_perf_event_wakeup(struct pt_regs *ctx)
{
	account(kprobe_first_arg(ctx), NM_WAKEUP, false);
	return 0;
}
