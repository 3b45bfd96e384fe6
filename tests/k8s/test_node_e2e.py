#!/usr/bin/env python3
"""node_e2e.py's judgements without a cluster: each fed what a broken node would give (a
failed collector, a scraper that missed the roll, a refusal while a pod serves, a kubectl that
cannot reach the API, a retry every 8 s, a process without seccomp, a throttled cgroup,
memory past its bound, a queried series gone after an upgrade) must fail, and what a working
node gives must pass.

    python3 tests/k8s/test_node_e2e.py        # stdlib only; tests/run-all.sh runs it
"""

import importlib.util
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import node_e2e as e2e  # noqa: E402

COLLECTORS = ["topology", "interrupts", "irq_affinity", "pci_devices", "softirqs", "softnet",
              "irqbalance_config", "pressure", "cgroups", "tuning", "kube_pods", "perf_probes"]


def exposition(success, extra=""):
    lines = ["# TYPE nodemedic_scrape_collector_success gauge"]
    lines += [f'nodemedic_scrape_collector_success{{collector="{c}"}} {v}' for c, v in success.items()]
    return "\n".join(lines) + "\n" + extra


class Collectors(unittest.TestCase):
    def test_every_collector_at_1_and_the_probes_as_the_kernel_allows(self):
        body = exposition({c: 0 if c == "perf_probes" else 1 for c in COLLECTORS})
        self.assertEqual(e2e.collectors_not_succeeding(COLLECTORS, body, probes_up=False), [])

    def test_a_failed_collector_with_its_series_present_fails(self):
        # The series exists, its value is 0: what the check used to count as present.
        body = exposition({c: 0 if c in ("perf_probes", "pressure") else 1 for c in COLLECTORS})
        self.assertEqual(e2e.collectors_not_succeeding(COLLECTORS, body, probes_up=False),
                         ["pressure: 0, want 1"])

    def test_the_probes_as_decided_first(self):
        up = exposition({c: 1 for c in COLLECTORS})
        self.assertEqual(e2e.collectors_not_succeeding(COLLECTORS, up, probes_up=False),
                         ["perf_probes: 1, want 0"])
        down = exposition({c: 0 if c == "perf_probes" else 1 for c in COLLECTORS})
        self.assertEqual(e2e.collectors_not_succeeding(COLLECTORS, down, probes_up=True),
                         ["perf_probes: 0, want 1"])

    def test_a_collector_without_series_fails(self):
        body = exposition({c: 1 for c in COLLECTORS if c != "tuning"})
        self.assertEqual(e2e.collectors_not_succeeding(["tuning"], body, probes_up=True),
                         ["tuning: no series"])

    def test_probes_outcome_from_the_kernel_or_the_override(self):
        missing = Path("/nonexistent/kprobe")
        self.assertFalse(e2e.probes_can_attach(env={}, kprobe_pmu=missing))
        self.assertTrue(e2e.probes_can_attach(env={}, kprobe_pmu=Path("/")))
        self.assertTrue(e2e.probes_can_attach(env={"NODEMEDIC_EXPECT_PROBES": "up"}, kprobe_pmu=missing))
        self.assertFalse(e2e.probes_can_attach(env={"NODEMEDIC_EXPECT_PROBES": "down"}, kprobe_pmu=Path("/")))


SERIES = 'process_start_time_seconds {start}\nnodemedic_irq_interrupts_total{{irq="24",cpu="0"}} 5\n'


class Hybrid(unittest.TestCase):
    MOUNTINFO = """\
25 1 253:0 / / rw,relatime - ext4 /dev/vda rw
30 25 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate
32 30 0:28 / /sys/fs/cgroup/systemd rw,nosuid - cgroup cgroup rw,xattr,name=systemd
33 30 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct
34 30 0:30 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
35 25 0:31 / /mnt/sys/fs/cgroup/cpu rw,nosuid - cgroup cgroup rw,cpu
"""

    def test_the_hierarchies_nodemedic_reads_under_sys_fs_cgroup(self):
        self.assertEqual(e2e.v1_hierarchies(self.MOUNTINFO), ["unified", "cpu,cpuacct"])
        self.assertEqual(e2e.v1_hierarchies("29 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"), [])

    def test_only_the_hidden_hierarchies_failure_counts(self):
        def st(state, reason):
            return {"collectors": [{"name": "pressure", "state": "active"},
                                   {"name": "cgroups", "state": state, "reason": reason}]}
        said = "/host/sys/fs/cgroup holds the empty mount points … list them in cgroupV1Hierarchies"
        self.assertEqual(e2e.hidden_v1_reason(st("failed", said)), said)
        self.assertIsNone(e2e.hidden_v1_reason(st("active", "")))
        self.assertIsNone(e2e.hidden_v1_reason(st("failed", "permission denied")))
        self.assertIsNone(e2e.hidden_v1_reason(st("unavailable", said)))


class Roll(unittest.TestCase):
    def test_scrape_kinds(self):
        self.assertEqual(e2e.scrape_kind(0, 200, SERIES.format(start=1)), "ok")
        self.assertEqual(e2e.scrape_kind(0, 200, "# HELP only\n"), "empty")
        self.assertEqual(e2e.scrape_kind(7, 0, "curl exit 7"), "refused")
        self.assertEqual(e2e.scrape_kind(0, 503, "no sample yet"), "unready")
        for curl_exit, code in [(28, 0), (52, 0), (56, 0), (0, 500), (0, 404)]:
            self.assertEqual(e2e.scrape_kind(curl_exit, code, ""), "broken", (curl_exit, code))
        self.assertEqual(e2e.process_start(SERIES.format(start=1700000000.5)), 1700000000.5)

    @staticmethod
    def roll(kinds, every=0.2, start=100.0):
        """A scrape every `every` s from `start`: kinds as a string, o old process, n new one,
        r refused, u 503, e empty, b broken."""
        out = []
        for i, k in enumerate(kinds):
            kind = {"o": "ok", "n": "ok", "r": "refused", "u": "unready", "e": "empty", "b": "broken"}[k]
            proc = {"o": 1.0, "n": 2.0}.get(k)
            out.append((start + i * every, kind, proc))
        return out

    def test_a_clean_roll_passes(self):
        s = self.roll("oooooooo" + "r" * 20 + "uu" + "n" * 30)
        # helm upgrade at the third scrape, the new pod seen Ready at the 40th.
        summary = e2e.judge_roll(s, started=s[2][0], ready=s[40][0])
        self.assertIn("s between the two processes", summary)

    def test_a_scraper_that_missed_the_roll_fails(self):
        # Scrapes before the upgrade and after Ready, none in between: the old check passed.
        s = self.roll("oooo") + self.roll("nnnn", start=120.0)
        with self.assertRaisesRegex(AssertionError, "not scraped through it"):
            e2e.judge_roll(s, started=100.7, ready=119.5)

    def test_too_few_successes_inside_the_roll_fail(self):
        s = self.roll("oo" + "r" * 50 + "n" * 10)
        with self.assertRaisesRegex(AssertionError, "successful scrapes between helm upgrade and Ready"):
            e2e.judge_roll(s, started=s[2][0], ready=s[52][0])

    def test_an_empty_exposition_fails(self):
        s = self.roll("oooooo" + "rrr" + "e" + "nnnnnn")
        with self.assertRaisesRegex(AssertionError, "neither a 200 with series"):
            e2e.judge_roll(s, started=s[1][0], ready=s[12][0])

    def test_a_broken_answer_fails(self):
        s = self.roll("oooooo" + "rbr" + "nnnnnn")
        with self.assertRaisesRegex(AssertionError, "neither a 200 with series"):
            e2e.judge_roll(s, started=s[1][0], ready=s[12][0])

    def test_a_refusal_while_a_process_serves_fails(self):
        s = self.roll("ooorooo" + "rrr" + "nnnnnn")
        with self.assertRaisesRegex(AssertionError, "refused or 503 while a process served"):
            e2e.judge_roll(s, started=s[1][0], ready=s[12][0])
        s = self.roll("oooooo" + "rrr" + "nnnrnn")
        with self.assertRaisesRegex(AssertionError, "refused or 503 while a process served"):
            e2e.judge_roll(s, started=s[1][0], ready=s[10][0])

    def test_a_restart_fails(self):
        s = self.roll("oooooo" + "rrr" + "nnn" + "r" + "nnn")
        s[-3:] = [(t, k, 3.0) for t, k, _ in s[-3:]]
        with self.assertRaisesRegex(AssertionError, "3 processes served"):
            e2e.judge_roll(s, started=s[1][0], ready=s[12][0])


class Uninstall(unittest.TestCase):
    def test_only_not_found_is_gone(self):
        self.assertTrue(e2e.kubectl_get_says_gone(
            1, 'Error from server (NotFound): namespaces "nodemedic" not found\n'))
        with self.assertRaisesRegex(e2e.Pending, "still there"):
            e2e.kubectl_get_says_gone(0, "")
        # The API unreachable: kubectl fails, and nothing is known to be gone.
        with self.assertRaisesRegex(e2e.Pending, "without NotFound"):
            e2e.kubectl_get_says_gone(
                1, "The connection to the server 10.213.0.2:6443 was refused - did you specify "
                   "the right host or port?\n")
        with self.assertRaisesRegex(e2e.Pending, "without NotFound"):
            e2e.kubectl_get_says_gone(
                1, 'Error from server (Forbidden): namespaces "nodemedic" is forbidden\n')


# The pod's log over a real outage (node_e2e.py check 5, 2026-11-25): the watch stream
# breaks when the API stops, and each reconnect hangs until kube's 30 s connect timeout.
REAL_OUTAGE = """\
2026-11-25T18:23:40.887200728Z stderr F 2026-11-25T18:23:40.886798Z  WARN nodemedic_kube::pods: watching this node's pods error=watch stream failed: Error reading events stream: ServiceError: error reading a body from connection retry_in=1.88860631s
2026-11-25T18:24:04.358235989Z stderr F 2026-11-25T18:24:04.357988Z  WARN nodemedic_kube::task: kubernetes reporting failed error=kubernetes API: ServiceError: client error (Connect) retry_in=1.201863363s
2026-11-25T18:24:12.778045871Z stderr F 2026-11-25T18:24:12.777866Z  WARN nodemedic_kube::pods: watching this node's pods error=failed to start watching object: ServiceError: client error (Connect) retry_in=2.508585751s
2026-11-25T18:24:39.359297019Z stderr F 2026-11-25T18:24:39.359114Z  WARN nodemedic_kube::task: kubernetes reporting failed error=kubernetes API: ServiceError: client error (Connect) retry_in=2.722521305s
2026-11-25T18:24:45.290728568Z stderr F 2026-11-25T18:24:45.289429Z  WARN nodemedic_kube::pods: watching this node's pods error=failed to start watching object: ServiceError: client error (Connect) retry_in=7.23779726s
2026-11-25T18:24:46.412569693Z stderr F 2026-11-25T18:24:46.412271Z  INFO nodemedic_kube::task: kubernetes reporting active again
"""
OUTAGE_START = 1795631015.0  # 18:23:35
OUTAGE_END = 1795631090.0  # 18:24:50


def watch_lines(offsets, retries, base=OUTAGE_START + 5):
    """Pod watch failures at OUTAGE_START+5+offset, each announcing its retry."""
    import datetime
    out = []
    for o, r in zip(offsets, retries):
        stamp = datetime.datetime.fromtimestamp(base + o, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")
        out.append(f"{stamp} stderr F {stamp[:26]}Z  WARN nodemedic_kube::pods: watching this node's pods "
                   f"error=failed to start watching object: ServiceError: client error (Connect) retry_in={r}")
    return "\n".join(out) + "\n"


class Backoff(unittest.TestCase):
    def test_cri_time(self):
        self.assertAlmostEqual(e2e.cri_time("2026-11-24T17:02:03.250000000Z stderr F x"),
                               1795539723.25, places=3)
        self.assertIsNone(e2e.cri_time("WARN not a CRI line"))

    def test_the_real_outage_passes(self):
        retries = e2e.pod_watch_retries(REAL_OUTAGE, OUTAGE_START, OUTAGE_END)
        self.assertEqual([round(t - OUTAGE_START, 1) for t, _ in retries], [5.9, 37.8, 70.3])
        self.assertEqual(e2e.judge_backoff(retries), [1.89, 2.51, 7.24])
        # Only what falls in the outage counts.
        self.assertEqual(len(e2e.pod_watch_retries(REAL_OUTAGE, OUTAGE_START, OUTAGE_START + 60)), 2)

    def test_fast_refusals_pass(self):
        # An API that refuses at once: the failures follow the delays.
        text = watch_lines([0, 1.6, 4.5, 10.4, 23.1, 48.0],
                           ["1.5s", "2.9s", "5.9s", "12.7s", "24.9s", "31.2s"])
        self.assertEqual(e2e.judge_backoff(e2e.pod_watch_retries(text, OUTAGE_START, OUTAGE_END)),
                         [1.5, 2.9, 5.9, 12.7, 24.9, 31.2])

    def test_a_constant_delay_fails(self):
        text = watch_lines([0, 38, 76], ["8s", "8s", "8s"])
        with self.assertRaisesRegex(AssertionError, "delay 1 is 8.0 s, not within 1-2 s"):
            e2e.judge_backoff(e2e.pod_watch_retries(text, OUTAGE_START, OUTAGE_END))

    def test_a_delay_that_does_not_grow_fails(self):
        text = watch_lines([0, 32, 64], ["1.9s", "1.9s", "1.9s"])
        with self.assertRaisesRegex(AssertionError, "delay 2 is 1.9 s, not within 2-4 s"):
            e2e.judge_backoff(e2e.pod_watch_retries(text, OUTAGE_START, OUTAGE_END))

    def test_a_back_off_that_did_not_start_over_fails(self):
        # Still at the previous outage's 16 s step.
        text = watch_lines([0, 50], ["20.1s", "30.5s"])
        with self.assertRaisesRegex(AssertionError, "delay 1 is 20.1 s"):
            e2e.judge_backoff(e2e.pod_watch_retries(text, OUTAGE_START, OUTAGE_END))

    def test_a_delay_announced_and_not_waited_fails(self):
        text = watch_lines([0, 0.3, 0.6], ["1.5s", "3.1s", "6.2s"])
        with self.assertRaisesRegex(AssertionError, "0.30 s after a failure announcing 1.50 s"):
            e2e.judge_backoff(e2e.pod_watch_retries(text, OUTAGE_START, OUTAGE_END))

    def test_too_few_retries_fail(self):
        with self.assertRaisesRegex(AssertionError, "1 pod watch retries"):
            e2e.judge_backoff(e2e.pod_watch_retries(watch_lines([0], ["1.5s"]), OUTAGE_START, OUTAGE_END))


STATUS = """Name:\tnodemedic
Umask:\t0022
State:\tS (sleeping)
VmHWM:\t   38812 kB
VmRSS:\t   11980 kB
NoNewPrivs:\t1
Seccomp:\t{mode}
Seccomp_filters:\t1
"""


class Process(unittest.TestCase):
    def test_seccomp_mode(self):
        self.assertEqual(e2e.status_field(STATUS.format(mode=2), "Seccomp"), e2e.SECCOMP_FILTER)
        self.assertNotEqual(e2e.status_field(STATUS.format(mode=0), "Seccomp"), e2e.SECCOMP_FILTER)
        self.assertEqual(e2e.status_field(STATUS.format(mode=2), "Seccomp_filters"), "1")

    def test_seccomp_profile_of_the_container_or_the_pod(self):
        pod = {"spec": {"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                        "containers": [{"securityContext": {}}]}}
        self.assertEqual(e2e.seccomp_profile(pod), "RuntimeDefault")
        pod["spec"]["containers"][0]["securityContext"]["seccompProfile"] = {"type": "Unconfined"}
        self.assertEqual(e2e.seccomp_profile(pod), "Unconfined")
        self.assertIsNone(e2e.seccomp_profile({"spec": {"containers": [{}]}}))

    def test_cpu_cgroup_of_hybrid_and_v2_hosts(self):
        hybrid = ("12:cpuset:/kubepods/burstable/pod1/c1\n3:cpu:/kubepods/burstable/pod1/c1\n"
                  "2:cpuacct:/kubepods/burstable/pod1/c1\n0::/kubepods/burstable/pod1/c1\n")
        d = e2e.cpu_cgroup_dir(hybrid, root=Path("/r"))
        self.assertEqual(d, Path("/r/cpu/kubepods/burstable/pod1/c1"))
        self.assertEqual(d.parent, Path("/r/cpu/kubepods/burstable/pod1"))
        joined = "4:cpu,cpuacct:/kubepods/pod1/c1\n"
        self.assertEqual(e2e.cpu_cgroup_dir(joined, root=Path("/r")), Path("/r/cpu,cpuacct/kubepods/pod1/c1"))
        self.assertEqual(e2e.cpu_cgroup_dir("0::/kubepods.slice/c1\n", root=Path("/r")),
                         Path("/r/kubepods.slice/c1"))
        with self.assertRaises(AssertionError):
            e2e.cpu_cgroup_dir("5:memory:/x\n")
        self.assertEqual(e2e.cpu_stat("nr_periods 120\nnr_throttled 7\nthrottled_time 9\n")["nr_throttled"], 7)

    def test_throttling_growth(self):
        before = {"/c": 0, "/p": 0}
        self.assertEqual(e2e.throttling_growth(before, {"/c": 0, "/p": 0}), {})
        # A CPU limit on the pod: its periods end throttled.
        self.assertEqual(e2e.throttling_growth(before, {"/c": 12, "/p": 14}), {"/c": 12, "/p": 14})

    def test_memory_bounds(self):
        mib = 1024
        self.assertIn("11.7 MiB probes on", e2e.judge_memory((int(11.7 * mib), 13 * mib), (11 * mib, 12 * mib)))
        # At the bound passes; 17 MiB, under the chart's limit and the old 48 MiB bound, fails.
        e2e.judge_memory((12 * mib, 16 * mib), (11 * mib, 12 * mib))
        cases = [
            (((30 * mib, 31 * mib), (29 * mib, 30 * mib)), "RSS .* with the probes on"),
            (((12 * mib, 17 * mib), (11 * mib, 12 * mib)), r"peak .* \(17\.0 MiB\) .* over the 16 MiB bound"),
            (((16 * mib, 16 * mib), (11 * mib, 12 * mib)), "the probes cost"),
            (((12 * mib, 13 * mib), (25 * mib, 26 * mib)), "with the probes off"),
        ]
        for (on, off), what in cases:
            with self.assertRaisesRegex(AssertionError, what):
                e2e.judge_memory(on, off)


CHANGELOG = """# Changelog

## [0.3.0] - unreleased

### Renamed series

- `nodemedic_irq_collapsed` → `nodemedic_irq_group_collapsed`
- `nodemedic_old_gauge` → removed

## [0.2.0] - 2026-12-01 (commit abcdef0)

### Renamed series

- `nodemedic_softirqs_total` → `nodemedic_softirq_total`
"""


class SeriesKept(unittest.TestCase):
    BEFORE = (
        "# TYPE nodemedic_irq_collapsed gauge\n"
        'nodemedic_irq_collapsed{group="virtio0"} 1\n'
        "# TYPE nodemedic_scrape_collector_duration_seconds histogram\n"
        'nodemedic_scrape_collector_duration_seconds_bucket{le="+Inf"} 3\n'
        "nodemedic_scrape_collector_duration_seconds_sum 0.1\n"
        "nodemedic_scrape_collector_duration_seconds_count 3\n"
        "# TYPE nodemedic_remediation_actions_total counter\n"
        "nodemedic_unqueried_total 4\n"
    )
    QUERIES = [
        "max by (node) (nodemedic_irq_collapsed) == 1",
        "histogram_quantile(0.99, rate(nodemedic_scrape_collector_duration_seconds_bucket[5m]))",
        'sum(increase(nodemedic_remediation_actions_total{result="failed"}[1h])) > 0',
    ]

    def judge(self, after, renamed=frozenset()):
        return e2e.judge_series_kept(self.BEFORE, after, self.QUERIES, set(renamed), min_queried=3)

    def test_names_of_families_samples_and_histograms(self):
        self.assertEqual(e2e.exposition_names(self.BEFORE), {
            "nodemedic_irq_collapsed", "nodemedic_scrape_collector_duration_seconds",
            "nodemedic_scrape_collector_duration_seconds_bucket",
            "nodemedic_scrape_collector_duration_seconds_sum",
            "nodemedic_scrape_collector_duration_seconds_count",
            "nodemedic_remediation_actions_total", "nodemedic_unqueried_total"})

    def test_the_same_series_pass_and_an_unqueried_one_may_go(self):
        after = self.BEFORE.replace("nodemedic_unqueried_total 4\n", "")
        queried, gone = self.judge(after)
        self.assertIn("nodemedic_scrape_collector_duration_seconds_bucket", queried)
        self.assertNotIn("nodemedic_unqueried_total", queried)
        self.assertEqual(gone, [])

    def test_a_queried_series_renamed_fails(self):
        after = self.BEFORE.replace("nodemedic_irq_collapsed", "nodemedic_irq_group_collapsed")
        with self.assertRaisesRegex(AssertionError, r"\['nodemedic_irq_collapsed'\]"):
            self.judge(after)

    def test_a_family_declared_without_samples_counts_as_exported(self):
        # The remediation counter has no sample before a decision, before or after.
        self.assertEqual(self.judge(self.BEFORE)[1], [])
        after = self.BEFORE.replace("# TYPE nodemedic_remediation_actions_total counter\n", "")
        with self.assertRaisesRegex(AssertionError, "nodemedic_remediation_actions_total"):
            self.judge(after)

    def test_a_rename_the_changelog_names_passes(self):
        after = self.BEFORE.replace("nodemedic_irq_collapsed", "nodemedic_irq_group_collapsed")
        renamed = e2e.renamed_in_changelog(CHANGELOG)
        self.assertEqual(self.judge(after, renamed)[1], ["nodemedic_irq_collapsed"])

    def test_only_the_newest_version_s_renames_count(self):
        self.assertEqual(e2e.renamed_in_changelog(CHANGELOG),
                         {"nodemedic_irq_collapsed", "nodemedic_old_gauge"})

    def test_too_few_queried_names_fail(self):
        with self.assertRaisesRegex(AssertionError, "only 0 names"):
            e2e.judge_series_kept(self.BEFORE, self.BEFORE, ["up == 0"], set(), min_queried=1)

    @unittest.skipUnless(importlib.util.find_spec("yaml"), "python3-yaml reads the rule files")
    def test_the_shipped_queries_read(self):
        queries = e2e.shipped_queries(Path(__file__).resolve().parents[2] / "deploy")
        self.assertGreater(len(queries), 50)
        self.assertTrue(any("nodemedic_irq_collapsed" in q for q in queries))


class Tidy(unittest.TestCase):
    """A run's directory goes after a run that passed, and never through a mount."""

    def test_kept_when_failed_named_or_mounted_removed_otherwise(self):
        d = Path(tempfile.mkdtemp(prefix="nodemedic-tidy-"))
        (d / "logs").mkdir()
        (d / "logs" / "kubelet.log").write_text("evidence\n")
        e2e.tidy(d, made_here=True, passed=False)
        self.assertTrue((d / "logs" / "kubelet.log").exists(), "a failed run keeps its logs")
        e2e.tidy(d, made_here=False, passed=True)
        self.assertTrue(d.exists(), "a directory the caller named is the caller's")
        held = d / "rootfs"
        held.mkdir()
        mounted = os.geteuid() == 0 and subprocess.run(
            ["mount", "-t", "tmpfs", "tmpfs", str(held)], capture_output=True).returncode == 0
        if mounted:
            try:
                (held / "host-file").write_text("not ours\n")
                e2e.tidy(d, made_here=True, passed=True)
                self.assertTrue((held / "host-file").exists(), "nothing removed through a mount")
            finally:
                subprocess.run(["umount", str(held)], check=True)
        e2e.tidy(d, made_here=True, passed=True)
        self.assertFalse(d.exists(), "a passed run's directory is removed")


if __name__ == "__main__":
    unittest.main()
