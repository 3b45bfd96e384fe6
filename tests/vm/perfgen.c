// SPDX-License-Identifier: Apache-2.0
/*
 * perfgen: a perf-event traffic generator for nodemedic's probe tests and benchmarks.
 * Plain syscalls, no libbpf: it must not share code with what it checks.
 *
 *   perfgen bpf RATE SECONDS BATCH     outputs from a BPF program into a perf event array at
 *                                      RATE/s (BPF_PROG_TEST_RUN of a tc program calling
 *                                      bpf_perf_event_output, BATCH calls per syscall)
 *   perfgen sample PERIOD_US SECONDS   a sampling perf event (task clock, one sample per
 *                                      PERIOD_US of CPU time, wakeup_events=1) on a busy loop
 *   perfgen flood OWNERS GROUP         OWNERS short-lived processes, each opening its own
 *                                      event and emitting one output, GROUP at a time
 *   perfgen bench SECONDS BATCH        bpf mode flat out: prints outputs per second
 *
 * Each mode sets its comm ("perfgen-bpf", ...), prints `pid=N` first and, at the end, one
 * line of key=value results; a consumer thread-free loop drains the ring so it never fills.
 * With PERFGEN_HOLD=1 the process then sleeps until killed, so its owner entry stays alive
 * while a test scrapes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/bpf.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RING_PAGES 64 /* data pages per event ring (power of two) */

static void die(const char *what)
{
	fprintf(stderr, "perfgen: %s: %s\n", what, strerror(errno));
	exit(1);
}

static long sys_bpf(int cmd, union bpf_attr *attr)
{
	return syscall(__NR_bpf, cmd, attr, sizeof(*attr));
}

static int perf_open(struct perf_event_attr *attr)
{
	return (int)syscall(__NR_perf_event_open, attr, 0 /* this task */, -1 /* any cpu */, -1, 0);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int map_create(unsigned entries)
{
	union bpf_attr a;
	memset(&a, 0, sizeof(a));
	a.map_type = BPF_MAP_TYPE_PERF_EVENT_ARRAY;
	a.key_size = 4;
	a.value_size = 4;
	a.max_entries = entries;
	int fd = (int)sys_bpf(BPF_MAP_CREATE, &a);
	if (fd < 0)
		die("BPF_MAP_CREATE perf event array");
	return fd;
}

/*
 * A tc (sched_cls) program: bpf_perf_event_output(skb, map, index = skb->mark, &zero, 8),
 * returning the helper's result so the caller sees whether each output happened.
 */
static int prog_load(int map_fd)
{
	struct bpf_insn insns[] = {
		/* r6 = ctx */
		{ .code = BPF_ALU64 | BPF_MOV | BPF_X, .dst_reg = 6, .src_reg = 1 },
		/* r3 = skb->mark (the array index) */
		{ .code = BPF_LDX | BPF_MEM | BPF_W, .dst_reg = 3, .src_reg = 6,
		  .off = offsetof(struct __sk_buff, mark) },
		/* *(u64 *)(r10 - 8) = 0 */
		{ .code = BPF_ST | BPF_MEM | BPF_DW, .dst_reg = 10, .off = -8, .imm = 0 },
		/* r2 = map (ld_imm64 with a map fd) */
		{ .code = BPF_LD | BPF_DW | BPF_IMM, .dst_reg = 2, .src_reg = BPF_PSEUDO_MAP_FD,
		  .imm = map_fd },
		{ 0 },
		/* r1 = ctx; r4 = r10 - 8; r5 = 8 */
		{ .code = BPF_ALU64 | BPF_MOV | BPF_X, .dst_reg = 1, .src_reg = 6 },
		{ .code = BPF_ALU64 | BPF_MOV | BPF_X, .dst_reg = 4, .src_reg = 10 },
		{ .code = BPF_ALU64 | BPF_ADD | BPF_K, .dst_reg = 4, .imm = -8 },
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = 5, .imm = 8 },
		{ .code = BPF_JMP | BPF_CALL, .imm = BPF_FUNC_perf_event_output },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	static char log[65536];
	union bpf_attr a;
	memset(&a, 0, sizeof(a));
	a.prog_type = BPF_PROG_TYPE_SCHED_CLS;
	a.insns = (uintptr_t)insns;
	a.insn_cnt = sizeof(insns) / sizeof(insns[0]);
	a.license = (uintptr_t) "GPL";
	a.log_buf = (uintptr_t)log;
	a.log_size = sizeof(log);
	a.log_level = 1;
	int fd = (int)sys_bpf(BPF_PROG_LOAD, &a);
	if (fd < 0) {
		fprintf(stderr, "%s\n", log);
		die("BPF_PROG_LOAD");
	}
	return fd;
}

struct ring {
	int fd;
	struct perf_event_mmap_page *meta;
	unsigned char *data;
	uint64_t size;
	uint64_t samples, lost;
};

static void ring_open(struct ring *r, struct perf_event_attr *attr, unsigned pages)
{
	long page = sysconf(_SC_PAGESIZE);
	r->fd = perf_open(attr);
	if (r->fd < 0)
		die("perf_event_open");
	r->size = (uint64_t)pages * page;
	r->meta = mmap(NULL, page + r->size, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
	if (r->meta == MAP_FAILED)
		die("mmap perf ring");
	r->data = (unsigned char *)r->meta + page;
	r->samples = r->lost = 0;
}

/* Consumes every record: a reader that keeps up, as a healthy agent's would. */
static void ring_drain(struct ring *r)
{
	uint64_t head = __atomic_load_n(&r->meta->data_head, __ATOMIC_ACQUIRE);
	uint64_t tail = r->meta->data_tail;
	while (tail < head) {
		struct perf_event_header h;
		uint64_t off = tail % r->size;
		unsigned char *p = (unsigned char *)&h;
		for (size_t i = 0; i < sizeof(h); i++)
			p[i] = r->data[(off + i) % r->size];
		if (h.type == PERF_RECORD_SAMPLE) {
			r->samples++;
		} else if (h.type == PERF_RECORD_LOST) {
			uint64_t lost = 0;
			unsigned char *q = (unsigned char *)&lost;
			for (size_t i = 0; i < 8; i++) /* after the header: u64 id, u64 lost */
				q[i] = r->data[(off + sizeof(h) + 8 + i) % r->size];
			r->lost += lost;
		}
		if (h.size == 0)
			break;
		tail += h.size;
	}
	__atomic_store_n(&r->meta->data_tail, head, __ATOMIC_RELEASE);
}

static void bpf_output_attr(struct perf_event_attr *attr)
{
	memset(attr, 0, sizeof(*attr));
	attr->size = sizeof(*attr);
	attr->type = PERF_TYPE_SOFTWARE;
	attr->config = PERF_COUNT_SW_BPF_OUTPUT;
	attr->sample_type = PERF_SAMPLE_RAW;
	attr->sample_period = 1;
	attr->wakeup_events = 1; /* the costly setting the probes exist to find */
}

/* BATCH outputs in one BPF_PROG_TEST_RUN; returns how many happened (0 or batch). */
static uint64_t run_batch(int prog_fd, uint32_t index, uint32_t batch)
{
	unsigned char pkt[64] = { 0 };
	struct __sk_buff ctx;
	union bpf_attr a;
	memset(&ctx, 0, sizeof(ctx));
	ctx.mark = index;
	memset(&a, 0, sizeof(a));
	a.test.prog_fd = prog_fd;
	a.test.data_in = (uintptr_t)pkt;
	a.test.data_size_in = sizeof(pkt);
	a.test.ctx_in = (uintptr_t)&ctx;
	a.test.ctx_size_in = sizeof(ctx);
	a.test.repeat = batch;
	if (sys_bpf(BPF_PROG_TEST_RUN, &a) < 0)
		die("BPF_PROG_TEST_RUN");
	if (a.test.retval != 0) {
		fprintf(stderr, "perfgen: bpf_perf_event_output returned %d\n", (int)a.test.retval);
		exit(1);
	}
	return batch;
}

static void hold(void)
{
	const char *h = getenv("PERFGEN_HOLD");
	if (h && strcmp(h, "1") == 0)
		for (;;)
			pause();
}

static int mode_bpf(double rate, double seconds, uint32_t batch, int bench)
{
	struct perf_event_attr attr;
	struct ring r;
	prctl(PR_SET_NAME, bench ? "perfgen-bench" : "perfgen-bpf");
	printf("pid=%d\n", getpid());
	fflush(stdout);
	int map_fd = map_create(1);
	int prog_fd = prog_load(map_fd);
	bpf_output_attr(&attr);
	ring_open(&r, &attr, RING_PAGES);
	union bpf_attr u;
	uint32_t key = 0, val = (uint32_t)r.fd;
	memset(&u, 0, sizeof(u));
	u.map_fd = map_fd;
	u.key = (uintptr_t)&key;
	u.value = (uintptr_t)&val;
	if (sys_bpf(BPF_MAP_UPDATE_ELEM, &u) < 0)
		die("BPF_MAP_UPDATE_ELEM");

	uint64_t emitted = 0;
	double start = now_s(), end = start + seconds;
	for (;;) {
		double t = now_s();
		if (t >= end)
			break;
		if (!bench) {
			/* Pace: never ahead of RATE, batch by batch. */
			double due = start + (double)(emitted + batch) / rate;
			if (due > end)
				break;
			if (due > t) {
				struct timespec ts = { (time_t)(due - t), (long)((due - t - (time_t)(due - t)) * 1e9) };
				nanosleep(&ts, NULL);
			}
		}
		emitted += run_batch(prog_fd, 0, batch);
		ring_drain(&r);
	}
	double took = now_s() - start;
	ring_drain(&r);
	printf("mode=%s emitted=%llu seconds=%.3f rate=%.0f ring_samples=%llu ring_lost=%llu\n",
	       bench ? "bench" : "bpf", (unsigned long long)emitted, took, emitted / took,
	       (unsigned long long)r.samples, (unsigned long long)r.lost);
	fflush(stdout);
	hold();
	return 0;
}

static int mode_sample(double period_us, double seconds)
{
	struct perf_event_attr attr;
	struct ring r;
	prctl(PR_SET_NAME, "perfgen-sample");
	printf("pid=%d\n", getpid());
	fflush(stdout);
	memset(&attr, 0, sizeof(attr));
	attr.size = sizeof(attr);
	attr.type = PERF_TYPE_SOFTWARE;
	attr.config = PERF_COUNT_SW_TASK_CLOCK;
	attr.sample_period = (uint64_t)(period_us * 1000);
	attr.sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_TIME;
	attr.wakeup_events = 1;
	ring_open(&r, &attr, RING_PAGES);
	double start = now_s(), end = start + seconds;
	volatile uint64_t spin = 0;
	while (now_s() < end) {
		for (int i = 0; i < 100000; i++)
			spin++;
		ring_drain(&r);
	}
	ioctl(r.fd, PERF_EVENT_IOC_DISABLE, 0);
	ring_drain(&r);
	printf("mode=sample outputs=%llu samples=%llu lost=%llu seconds=%.3f\n",
	       (unsigned long long)(r.samples + r.lost), (unsigned long long)r.samples,
	       (unsigned long long)r.lost, now_s() - start);
	fflush(stdout);
	hold();
	return 0;
}

static int mode_flood(unsigned owners, unsigned group)
{
	prctl(PR_SET_NAME, "perfgen-flood");
	printf("pid=%d\n", getpid());
	fflush(stdout);
	int map_fd = map_create(group);
	int prog_fd = prog_load(map_fd);
	unsigned done = 0, ok = 0;
	double start = now_s();
	while (done < owners) {
		unsigned n = owners - done < group ? owners - done : group;
		int go[2];
		if (pipe(go) < 0)
			die("pipe");
		for (unsigned i = 0; i < n; i++) {
			pid_t pid = fork();
			if (pid < 0)
				die("fork");
			if (pid == 0) {
				struct perf_event_attr attr;
				struct ring r;
				char c;
				close(go[1]);
				prctl(PR_SET_NAME, "perfgen-owner");
				bpf_output_attr(&attr);
				ring_open(&r, &attr, 1);
				int fd = r.fd;
				union bpf_attr u;
				uint32_t key = i, val = (uint32_t)fd;
				memset(&u, 0, sizeof(u));
				u.map_fd = map_fd;
				u.key = (uintptr_t)&key;
				u.value = (uintptr_t)&val;
				if (sys_bpf(BPF_MAP_UPDATE_ELEM, &u) < 0)
					_exit(3);
				/* Everyone in the group emits at once: a burst of new owners. */
				if (read(go[0], &c, 1) < 0)
					_exit(4);
				run_batch(prog_fd, i, 1);
				_exit(0);
			}
		}
		close(go[0]);
		usleep(200000); /* let the group open its events */
		close(go[1]);
		for (unsigned i = 0; i < n; i++) {
			int st;
			if (wait(&st) > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0)
				ok++;
		}
		done += n;
	}
	printf("mode=flood owners=%u emitted=%u seconds=%.3f\n", owners, ok, now_s() - start);
	fflush(stdout);
	hold();
	return ok == owners ? 0 : 1;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 5 && strcmp(argv[1], "bpf") == 0)
		return mode_bpf(atof(argv[2]), atof(argv[3]), (uint32_t)atoi(argv[4]), 0);
	if (argc == 4 && strcmp(argv[1], "sample") == 0)
		return mode_sample(atof(argv[2]), atof(argv[3]));
	if (argc == 4 && strcmp(argv[1], "flood") == 0)
		return mode_flood((unsigned)atoi(argv[2]), (unsigned)atoi(argv[3]));
	if (argc == 4 && strcmp(argv[1], "bench") == 0)
		return mode_bpf(1, atof(argv[2]), (uint32_t)atoi(argv[3]), 1);
	fprintf(stderr, "usage: perfgen bpf RATE SECONDS BATCH | sample PERIOD_US SECONDS | "
			"flood OWNERS GROUP | bench SECONDS BATCH\n");
	return 2;
}
