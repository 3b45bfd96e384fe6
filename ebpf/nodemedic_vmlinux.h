/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/*
 * The few kernel types nodemedic's probes read, declared by hand instead of a vmlinux.h
 * generated from the build host's BTF: the build then depends on no running kernel, and every
 * field access below is a CO-RE relocation (preserve_access_index) that libbpf/aya resolve
 * against the *target* kernel's BTF at load time. Only the fields we read are declared; their
 * offsets here are irrelevant, their names and types must match the kernel's.
 */
#ifndef NODEMEDIC_VMLINUX_H
#define NODEMEDIC_VMLINUX_H

/* bpf_tracing.h picks kernel register names (di, si, ...) when this is defined. */
#define __VMLINUX_H__

typedef signed char __s8;
typedef unsigned char __u8;
typedef short __s16;
typedef unsigned short __u16;
typedef int __s32;
typedef unsigned int __u32;
typedef long long __s64;
typedef unsigned long long __u64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef _Bool bool;
#define true 1
#define false 0

/* UAPI constants from linux/bpf.h (stable ABI). */
enum {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_RINGBUF = 27,
};
enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
};
enum {
	BPF_RB_NO_WAKEUP = 1,
	BPF_RB_FORCE_WAKEUP = 2,
};
enum {
	BPF_RB_AVAIL_DATA = 0,
};

struct task_struct {
	int tgid;
	char comm[16];
} __attribute__((preserve_access_index));

struct perf_event {
	struct perf_event *parent;
	struct task_struct *owner;
} __attribute__((preserve_access_index));

/*
 * A kprobe's registers, for x86-64 and arm64 alike: one object serves both. Which of the two
 * applies is decided at load time by the kernel's BTF, not at build time: only arm64's has a
 * `struct user_pt_regs` (the start of its pt_regs); x86-64's pt_regs has `di`, matched through
 * the `___x86` flavour (CO-RE ignores the suffix).
 */
struct pt_regs;
struct pt_regs___x86 {
	unsigned long di;
} __attribute__((preserve_access_index));
struct user_pt_regs {
	__u64 regs[31];
} __attribute__((preserve_access_index));

#endif /* NODEMEDIC_VMLINUX_H */
