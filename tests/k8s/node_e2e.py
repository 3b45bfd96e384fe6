#!/usr/bin/env python3
"""nodemedic's shipped DaemonSet on a real Kubernetes node (tests/k8s/cluster-up.sh): the
image from deploy/container/build-image.sh imported into containerd, the chart installed with
helm and its default values (image pull policy aside), the kubelet running it as shipped.

    tests/k8s/node_e2e.py [DIR]      # as root; DIR keeps the cluster's state and logs
    NODEMEDIC_IMAGE_ARCHIVE=FILE     # an archive of deploy/container/build-image.sh --oci-archive
                                     # instead of building one (tests/run-all.sh builds it once)
    NODEMEDIC_PREVIOUS_IMAGE_ARCHIVE=FILE   # the previous release's image for check 11, instead
                                     # of tests/previous-version.sh's (built once, cached)
    NODEMEDIC_PAUSE_PGID=PGID        # a process group to stop (SIGSTOP) while check 3 needs the
                                     # node idle (tests/run-all.sh's background fuzz run)
    NODEMEDIC_IDLE_DONE_FILE=FILE    # created once no check left needs an idle node

Each check prints one line; the last line is "k8s node: N passed, N failed". The cluster is
torn down at the end (KEEP=1 leaves it running). Where the real node disagrees with an
assumption made on fixtures, this test is where it shows.
"""

import contextlib
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "tests" / "k8s"
# The Kubernetes release the cluster runs: build-k8s.sh's, the one place it is named (or the
# one NODEMEDIC_K8S_VERSION asks it for).
KUBERNETES_VERSION = "v" + (os.environ.get("NODEMEDIC_K8S_VERSION") or re.search(
    r"^K8S_VERSION_DEFAULT=(\S+)$", (K8S / "build-k8s.sh").read_text(), re.M).group(1))
HELM = None
ENV = {}
NAMESPACE = "nodemedic"
WORKLOAD_NS = "shop"
PORT = 9847
RESULTS = []
# What check 1 measured of the pod it installed, for check 8 to compare with.
BASELINE = {}


class Pending(Exception):
    """What a poll is still waiting for."""


def log(msg):
    print(f"[node-e2e {time.strftime('%T')}] {msg}", flush=True)


def run(cmd, check=True, input=None, timeout=300, env=None):
    p = subprocess.run(
        [str(c) for c in cmd],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    if check and p.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, cmd))} exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
        )
    return p


def in_ns(cmd):
    return ["nsenter", f"--net=/run/netns/{ENV['NETNS']}"] + list(cmd)


def kubectl(*args, check=True, input=None, timeout=120):
    cmd = in_ns([ENV["KUBECTL"], "--kubeconfig", ENV["KUBECONFIG"], *args])
    return run(cmd, check=check, input=input, timeout=timeout)


def kjson(*args):
    return json.loads(kubectl(*args, "-o", "json").stdout)


def helm(*args, check=True):
    env = dict(os.environ, KUBECONFIG=ENV["KUBECONFIG"])
    return run(in_ns([HELM, *args]), check=check, env=env, timeout=300)


def poll(what, timeout, fn, every=0.5):
    start = time.time()
    last = "never tried"
    while True:
        try:
            return fn()
        except Pending as e:
            last = str(e)
        if time.time() - start > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last}")
        time.sleep(every)


def curl(path, timeout=25):
    """GET http://NODE_IP:9847/path from inside the cluster's network: (curl's exit status,
    HTTP status or 0, body or curl's complaint)."""
    p = run(
        in_ns(
            [
                "curl", "-s", "--max-time", str(timeout), "-o", "-", "-w", "\n%{http_code}",
                f"http://{ENV['NODE_IP']}:{PORT}{path}",
            ]
        ),
        check=False,
        timeout=timeout + 5,
    )
    if p.returncode != 0:
        return p.returncode, 0, f"curl exit {p.returncode}: {p.stderr}"
    body, _, code = p.stdout.rpartition("\n")
    return 0, int(code), body


def http(path, timeout=25):
    """GET http://NODE_IP:9847/path from inside the cluster's network: (status, body); status
    0 when curl got no answer."""
    _, code, body = curl(path, timeout)
    return code, body


def status():
    code, body = http("/status")
    if code != 200:
        raise Pending(f"/status {code}: {body[:200]}")
    return json.loads(body)


def samples(text):
    """(name, labels dict, value) of every sample line of an exposition."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)", line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out.append((m.group(1), labels, float(m.group(4))))
    return out


# ------------------------------------------------------------------ judgements
# What the checks conclude from what they recorded, as functions of that record alone: their
# failure cases are tested without a cluster in tests/k8s/test_node_e2e.py (run by
# tests/run-all.sh before this file).

KPROBE_PMU = Path("/sys/bus/event_source/devices/kprobe")


def probes_can_attach(env=None, kprobe_pmu=None):
    """Whether the eBPF probes attach on this kernel, decided before looking at nodemedic (as
    crates/nodemedic/tests/probes.rs does): a kernel without a kprobe PMU (this repository's
    CI kernel, CONFIG_KPROBES off) refuses fentry too. NODEMEDIC_EXPECT_PROBES=up|down
    overrides it for a kernel with fentry and no kprobes."""
    env = os.environ if env is None else env
    want = env.get("NODEMEDIC_EXPECT_PROBES")
    if want in ("up", "down"):
        return want == "up"
    return (KPROBE_PMU if kprobe_pmu is None else kprobe_pmu).exists()


def collectors_not_succeeding(names, body, probes_up):
    """Each collector of `names` (from /status) whose nodemedic_scrape_collector_success in
    `body` is missing or not what this node must give: 1 for every collector, and for
    perf_probes 1 where the probes can attach, else 0."""
    success = {l.get("collector"): v for n, l, v in samples(body) if n == "nodemedic_scrape_collector_success"}
    out = []
    for name in sorted(names):
        want = 0.0 if name == "perf_probes" and not probes_up else 1.0
        got = success.get(name)
        if got is None:
            out.append(f"{name}: no series")
        elif got != want:
            out.append(f"{name}: {got:g}, want {want:g}")
    return out


CURL_REFUSED = 7


def scrape_kind(curl_exit, code, body):
    """One scrape as the roll's judgement sees it: `ok` (200 with the IRQ families), `empty`
    (200 without them), `refused` (nothing listens: curl exit 7), `unready` (503 before the
    first sample), `broken` (anything else: a timeout, a reset, an empty reply, another
    status)."""
    if curl_exit == CURL_REFUSED:
        return "refused"
    if curl_exit != 0:
        return "broken"
    if code == 503:
        return "unready"
    if code != 200:
        return "broken"
    if any(n == "nodemedic_irq_interrupts_total" for n, _, _ in samples(body)):
        return "ok"
    return "empty"


def process_start(body):
    """process_start_time_seconds of an exposition: which process answered."""
    for n, _, v in samples(body):
        if n == "process_start_time_seconds":
            return v
    return None


# A scraper that stops for longer than this was not scraping through the roll: one scrape
# takes tens of milliseconds and a refused one less, so 3 s is a stall of the loop.
MAX_SCRAPE_HOLE = 3.0
# From `helm upgrade` to the new pod Ready the old process still serves while helm renders
# and patches (a second or more), and the new one serves from its first sample until the
# kubelet's readiness probe (every 5 s) sees it: at 5 scrapes a second, 3 successful ones is
# well below what either side gives alone, and 0 is what a scraper that missed the roll gets.
MIN_ROLL_OK = 3


def judge_roll(scrapes, started, ready, min_ok=MIN_ROLL_OK, max_hole=MAX_SCRAPE_HOLE):
    """The scrapes of a pod roll, [(time, kind, process start)] in time order from before
    `helm upgrade` (at `started`) until after the new pod was seen Ready (at `ready`). The
    old process serves until it stops and the new one from its first sample; between them,
    and only there, nothing listens (refused: hostNetwork, one node) or the new one has no
    sample yet (503). Never a 200 without series, never another failure, no restart.
    Returns a summary; raises AssertionError with what is wrong."""
    inside = [s for s in scrapes if started <= s[0] <= ready]
    times = [started] + [s[0] for s in inside] + [ready]
    hole = max(b - a for a, b in zip(times, times[1:]))
    assert hole <= max_hole, f"no scrape for {hole:.1f} s during the roll: not scraped through it"
    bad = [(round(t - started, 2), k) for t, k, _ in scrapes if k in ("empty", "broken")]
    assert not bad, f"scrapes that are neither a 200 with series nor a clean refusal: {bad}"
    served = sorted({p for _, k, p in scrapes if k == "ok"})
    assert len(served) == 2, f"{len(served)} processes served the scrapes (the old and the new one: 2)"
    old, new = served
    last_old = max(t for t, k, p in scrapes if k == "ok" and p == old)
    first_new = min(t for t, k, p in scrapes if k == "ok" and p == new)
    assert last_old < first_new, "the old process answered after the new one"
    stray = [(round(t - started, 2), k) for t, k, _ in scrapes
             if k in ("refused", "unready") and not last_old < t < first_new]
    assert not stray, f"refused or 503 while a process served: {stray}"
    ok_inside = sum(1 for _, k, _ in inside if k == "ok")
    assert ok_inside >= min_ok, (
        f"{ok_inside} successful scrapes between helm upgrade and Ready (at least {min_ok})")
    kinds = {}
    for _, k, _ in inside:
        kinds[k] = kinds.get(k, 0) + 1
    return (f"{len(inside)} scrapes in the {ready - started:.1f} s roll {kinds}; "
            f"{first_new - last_old:.1f} s between the two processes")


def release_gone():
    """For poll: every cluster-wide object of the release answers NotFound (its namespace with
    all it held, the ClusterRole and its binding), not just any failure."""
    left = []
    for kind in ("namespace/nodemedic", "clusterrole/nodemedic", "clusterrolebinding/nodemedic"):
        p = kubectl("get", kind, check=False)
        try:
            kubectl_get_says_gone(p.returncode, p.stderr)
        except Pending as e:
            left.append(f"{kind}: {e}")
    if left:
        raise Pending(f"left: {left}")
    return True


def kubectl_get_says_gone(returncode, stderr):
    """Whether a failed `kubectl get` says the object is gone: NotFound, not any failure (an
    unreachable or refusing API fails too). True when gone; raises Pending while it exists or
    when kubectl failed for another reason."""
    if returncode == 0:
        raise Pending("still there")
    if "(NotFound)" in stderr:
        return True
    raise Pending(f"kubectl failed without NotFound: {stderr.strip()[-300:]}")


def cri_time(line):
    """The kubelet's timestamp of a CRI log line (`2026-11-24T17:02:03.123456789Z stderr F
    ...`) as Unix time; None for another line."""
    stamp = line.split(" ", 1)[0]
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z", stamp)
    if not m:
        return None
    whole = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S").replace(
        tzinfo=datetime.timezone.utc)
    return whole.timestamp() + float(m.group(2) or 0)


DURATION_UNITS = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9}


def pod_watch_retries(log_text, since, until):
    """The pod watch's failed attempts between `since` and `until`, from the pod's CRI log:
    [(time, the delay it announced before the next, seconds)], in time order."""
    out = []
    for line in log_text.splitlines():
        if "watching this node's pods" not in line:
            continue
        m = re.search(r"retry_in=([0-9.]+)(s|ms|µs|us|ns)\b", line)
        t = cri_time(line)
        if m and t is not None and since <= t <= until:
            out.append((t, float(m.group(1)) * DURATION_UNITS[m.group(2)]))
    return sorted(out)


# The back-off (crates/nodemedic-kube/src/retry.rs): 1 s, doubling, at most 30 s before
# jitter, which adds up to as much again; back to 1 s after a success. The first failure of an
# outage waits 1-2 s, the second 2-4 s, the third 4-8 s: a delay that does not grow, or that
# did not start over, is outside. The pod reaches the API through the kubernetes Service's
# address, which drops connection attempts while the API is stopped (curl to 10.96.0.1:443
# times out where 10.213.0.2:6443 is refused at once), so each attempt waits for kube's 30 s
# connect timeout: a 60 s outage holds 2 or 3 failures, spaced by the delay plus that wait.
# The delays are read from the log, and the spacing must hold them. The tolerance is the
# log's own timing.
BACKOFF_FIRST = 1.0
BACKOFF_MAX = 30.0
MIN_WATCH_RETRIES = 2
BACKOFF_TOLERANCE = 0.05


def judge_backoff(retries, min_retries=MIN_WATCH_RETRIES, tolerance=BACKOFF_TOLERANCE):
    """The pod watch's failures over an outage, [(time, announced delay)]: at least
    `min_retries`, the i-th delay within the back-off's i-th step (so it grows: a constant
    delay fails), and each next failure no sooner than the delay before it. Returns the
    delays; raises AssertionError."""
    assert len(retries) >= min_retries, f"{len(retries)} pod watch retries in the outage (at least {min_retries})"
    delays = [round(d, 2) for _, d in retries]
    for i, d in enumerate(delays):
        base = min(BACKOFF_FIRST * 2 ** i, BACKOFF_MAX)
        assert base - tolerance <= d <= 2 * base + tolerance, (
            f"the pod watch's delay {i + 1} is {d} s, not within {base:g}-{2 * base:g} s: {delays}")
    for (t0, d), (t1, _) in zip(retries, retries[1:]):
        assert t1 - t0 >= d - tolerance, f"a retry {t1 - t0:.2f} s after a failure announcing {d:.2f} s"
    assert delays[-1] > delays[0], f"the pod watch's delay did not grow: {delays}"
    return delays


def status_field(status_text, name):
    """A field of /proc/PID/status, as text."""
    for line in status_text.splitlines():
        key, _, value = line.partition(":")
        if key == name:
            return value.strip()
    return None


# /proc/PID/status Seccomp: 0 none, 1 strict, 2 filter (a profile such as RuntimeDefault).
SECCOMP_FILTER = "2"


def cpu_cgroup_dir(cgroup_text, root=Path("/sys/fs/cgroup")):
    """The directory of the cgroup that accounts a process's CPU, from /proc/PID/cgroup: the
    v1 hierarchy with the cpu controller (hybrid hosts such as this one), else the v2 one."""
    v2 = None
    for line in cgroup_text.splitlines():
        hid, ctrls, path = line.split(":", 2)
        if "cpu" in ctrls.split(","):
            return root / ctrls / path.lstrip("/")
        if hid == "0" and ctrls == "":
            v2 = root / path.lstrip("/")
    if v2 is None:
        raise AssertionError(f"no cpu cgroup in {cgroup_text!r}")
    return v2


def cpu_stat(text):
    """cpu.stat as a dict of ints."""
    return {k: int(v) for k, v in (l.split() for l in text.splitlines() if l.strip())}


def nodemedic_throttling(pid):
    """nr_throttled of nodemedic's own cpu cgroup (its container's) and of its pod's, by
    directory."""
    own = cpu_cgroup_dir(Path(f"/proc/{pid}/cgroup").read_text())
    return {str(d): cpu_stat((d / "cpu.stat").read_text()).get("nr_throttled", 0)
            for d in (own, own.parent)}


def throttling_growth(before, now):
    """nr_throttled growth per cgroup directory between two nodemedic_throttling readings:
    empty when it did not grow."""
    return {d: n - before.get(d, 0) for d, n in now.items() if n != before.get(d, 0)}


def memory_kib(pid):
    """(VmRSS, VmHWM) of a process, KiB."""
    text = Path(f"/proc/{pid}/status").read_text()
    return tuple(int(status_field(text, f).split()[0]) for f in ("VmRSS", "VmHWM"))


# nodemedic's memory in its pod, with and without the eBPF probes (BENCHMARKS.md, "Today's
# figures": the image's build holds 9.5 MiB on this 2-CPU node). RSS is asserted
# at the chart's memory request (24 MiB, the steady RSS of a 1024-CPU node: twice what this
# node measures). The daemon's peak (VmHWM) with the probes on is held to the 16 MiB the memory
# work set (issue 35): the probes load in a child process, whose own peak (about 36 MiB) is
# not the daemon's, and the daemon's measured 9.9 MiB on this node's files and 12.9-13.3 MiB
# on the 256- and 1024-CPU trees (BENCHMARKS.md, "The probes' load in a child process" and
# "Sparse IRQ counts"). A peak over it means the BTF parse, or a per-row allocation, is back
# in the daemon. The probes' cost at the 2 MiB issue 25 holds them to: what the loader parses
# must be freed after it.
RSS_MAX_KIB = 24 * 1024
HWM_MAX_KIB = 16 * 1024
PROBES_RSS_MAX_KIB = 2 * 1024


def judge_memory(on, off):
    """(VmRSS, VmHWM) KiB of nodemedic with the probes on and off, each after its first
    samples: returns a summary; raises AssertionError."""
    (rss_on, hwm_on), (rss_off, _) = on, off
    assert rss_on <= RSS_MAX_KIB, f"RSS {rss_on} KiB with the probes on (at most {RSS_MAX_KIB})"
    assert rss_off <= RSS_MAX_KIB, f"RSS {rss_off} KiB with the probes off (at most {RSS_MAX_KIB})"
    assert hwm_on <= HWM_MAX_KIB, (
        f"peak (VmHWM) {hwm_on} KiB ({hwm_on / 1024:.1f} MiB) with the probes on, over the "
        f"{HWM_MAX_KIB // 1024} MiB bound (measured: 9-13 MiB, BENCHMARKS.md)")
    assert rss_on - rss_off <= PROBES_RSS_MAX_KIB, (
        f"the probes cost {rss_on - rss_off} KiB of RSS (on {rss_on}, off {rss_off}; at most {PROBES_RSS_MAX_KIB})")
    return f"RSS {rss_on / 1024:.1f} MiB probes on (peak {hwm_on / 1024:.1f}), {rss_off / 1024:.1f} MiB off"


# An upgrade from the previous release (check 11) loses no series that the shipped alerts,
# recording rules and dashboard query, read from the same files and with the same CHANGELOG.md
# rule as crates/nodemedic/tests/series_upgrade.rs (which checks the previous version's golden
# expositions statically); here the two live daemons' expositions are compared.
# The previous release's pod on the collapsed fixture answers about 25 of the queried names: a
# handful means the scrape or the reading of the queries broke.
MIN_QUERIED_SERIES = 15


def exposition_names(body):
    """The families an exposition declares (# TYPE) and the names of its samples, a histogram's
    _bucket, _sum and _count mapped to their family too."""
    names = set()
    for line in body.splitlines():
        if line.startswith("# TYPE "):
            name = line.split()[2]
        elif not line.strip() or line.startswith("#"):
            continue
        else:
            name = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0)
        names.add(name)
        for suffix in ("_bucket", "_sum", "_count"):
            if name.endswith(suffix):
                names.add(name[: -len(suffix)])
    return names


def shipped_queries(deploy):
    """Every PromQL expression of the rule files (not their promtool tests) and the dashboard
    under DEPLOY, a deploy/ directory of any version."""
    import yaml

    exprs = []
    for path in sorted((deploy / "prometheus").glob("*.yml")):
        if not path.name.endswith(".test.yml"):
            for group in yaml.safe_load(path.read_text())["groups"]:
                exprs += [rule["expr"] for rule in group["rules"]]

    def walk(v):
        if isinstance(v, dict):
            for k, x in v.items():
                if k == "expr" and isinstance(x, str):
                    exprs.append(x)
                else:
                    walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(json.loads((deploy / "grafana" / "nodemedic.json").read_text()))
    return exprs


def renamed_in_changelog(text):
    """The series CHANGELOG.md names under the newest version's "### Renamed series" heading:
    the backticked names before each line's arrow (`old` → `new`, or `old` → removed)."""
    out = set()
    versions = 0
    section = False
    for line in text.splitlines():
        if line.startswith("## ["):
            versions += 1
            section = False
        elif line.startswith("### "):
            section = versions == 1 and line.strip() == "### Renamed series"
        elif section and "→" in line:
            out.update(line.split("→")[0].split("`")[1::2])
    return out


def judge_series_kept(before, after, queries, renamed, min_queried=MIN_QUERIED_SERIES):
    """The names that the previous release's daemon exported (exposition BEFORE) and a query of
    QUERIES uses must all be exported by the new one (exposition AFTER), unless RENAMED (the
    CHANGELOG's) names them. Returns (queried, renamed ones that went); raises AssertionError
    with the lost names, or when fewer than MIN_QUERIED were queried at all."""
    words = set()
    for q in queries:
        words.update(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", q))
    queried = exposition_names(before) & words
    assert len(queried) >= min_queried, (
        f"only {len(queried)} names of the previous release's exposition are queried "
        f"(at least {min_queried}): {sorted(queried)}")
    gone = queried - exposition_names(after)
    lost = sorted(gone - renamed)
    assert not lost, (
        f"series the alerts, rules or dashboard query that the previous release exported and this "
        f"one does not, and CHANGELOG.md's Renamed series does not name: {lost}")
    return sorted(queried), sorted(gone)


def check(name):
    def wrap(fn):
        def run_check(*a, **kw):
            t0 = time.time()
            try:
                r = fn(*a, **kw)
            except Exception as e:  # a failed assertion or a broken step alike
                RESULTS.append((name, False, time.time() - t0))
                log(f"FAIL {name} ({time.time() - t0:.0f}s): {e}")
                raise
            RESULTS.append((name, True, time.time() - t0))
            log(f"ok   {name} ({time.time() - t0:.0f}s)")
            return r

        return run_check

    return wrap


def nodemedic_pod():
    pods = kjson("get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/name=nodemedic")["items"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    if len(live) != 1:
        raise Pending(f"{len(live)} nodemedic pods")
    return live[0]


def pod_ready(pod):
    conds = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


def wait_ready(timeout=180):
    def ready():
        p = nodemedic_pod()
        if not pod_ready(p):
            raise Pending(f"{p['metadata']['name']}: {p.get('status', {}).get('phase')}")
        return p

    return poll("the nodemedic pod Ready", timeout, ready)


def rolled_from(old_uid):
    """For poll: the nodemedic pod once it is another than OLD_UID's and Ready."""
    def rolled():
        p = nodemedic_pod()
        if p["metadata"]["uid"] == old_uid or not pod_ready(p):
            raise Pending("not rolled yet")
        return p

    return rolled


def host_pid():
    """The daemon's pid as the host sees it (the container shares the host's pid space view
    from outside)."""
    pod = nodemedic_pod()
    cid = pod["status"]["containerStatuses"][0]["containerID"].split("://")[-1]
    for cg in Path("/proc").glob("[0-9]*/cgroup"):
        try:
            text = cg.read_text()
        except OSError:
            continue
        if cid in text:
            pid = cg.parent.name
            try:
                if (Path("/proc") / pid / "comm").read_text().strip() == "nodemedic":
                    return int(pid)
            except OSError:
                continue
    raise Pending("no host process for the nodemedic container")


def seccomp_profile(pod):
    """The seccomp profile type the pod's container runs with: its own, else the pod's."""
    c = pod["spec"]["containers"][0].get("securityContext", {}).get("seccompProfile")
    p = pod["spec"].get("securityContext", {}).get("seccompProfile")
    return (c or p or {}).get("type")


def settled_memory(pid, n=3):
    """(VmRSS, VmHWM) KiB of the daemon once it has taken `n` samples (the probes' loader
    done, the first readings made)."""
    def sampled():
        got = status()["samples_total"]
        if got < n:
            raise Pending(f"{got} samples")
        return got

    poll(f"{n} samples", 60, sampled)
    return memory_kib(pid)


def failed_collectors():
    """Collectors that failed, but the eBPF probes on a kernel that cannot attach them
    (tests/k8s runs on a kernel without kprobes or fentry: they are down with that reason
    from the start, which check 1 shows)."""
    out = []
    for c in status()["collectors"]:
        if c["state"] != "failed":
            continue
        if c["name"] == "perf_probes" and "kprobe" in c.get("reason", ""):
            continue
        out.append(c)
    return out


# ------------------------------------------------------------------ the checks


def v1_hierarchies(mountinfo=None):
    """This node's cgroup hierarchy directories nodemedic reads (the v1 ones with cpu or
    cpuacct, and the unified one), as the chart's cgroupV1Hierarchies names them."""
    text = mountinfo if mountinfo is not None else Path("/proc/self/mountinfo").read_text()
    names = []
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        mp = left.split()[4]
        fstype, sup = right.split()[0], right.split()[2]
        if not mp.startswith("/sys/fs/cgroup/"):
            continue
        opts = sup.split(",")
        if fstype == "cgroup2" or (fstype == "cgroup" and ("cpu" in opts or "cpuacct" in opts)):
            names.append(mp[len("/sys/fs/cgroup/"):])
    return names


def hidden_v1_reason(st):
    """The cgroups collector's failure on a v1 or hybrid node installed with cgroupMount:
    subPath (the hierarchies are mounts below /sys/fs/cgroup, which a subPath binds without
    them), or None."""
    for c in st["collectors"]:
        if c["name"] == "cgroups" and c["state"] == "failed" and "cgroupV1Hierarchies" in c.get("reason", ""):
            return c["reason"]
    return None


@check("0. the node: kubelet, apiserver and kubectl of the release build-k8s.sh names, on containerd 2, the cgroupfs driver taken from the runtime (the kubelet's configuration names none)")
def the_node():
    node = kjson("get", "node", ENV["NODE_NAME"])
    info = node["status"]["nodeInfo"]
    assert info["kubeletVersion"] == KUBERNETES_VERSION, info
    assert info["kubeProxyVersion"] in ("", KUBERNETES_VERSION), info
    assert info["containerRuntimeVersion"].startswith("containerd://2."), info
    versions = json.loads(kubectl("version", "-o", "json").stdout)
    assert versions["serverVersion"]["gitVersion"] == KUBERNETES_VERSION, versions
    assert versions["clientVersion"]["gitVersion"] == KUBERNETES_VERSION, versions
    kubelet_yaml = (Path(ENV["DIR"]) / "etc" / "kubelet.yaml").read_text()
    assert not re.search(r"^cgroupDriver:", kubelet_yaml, re.M), "the kubelet's configuration names a driver"
    said = [l for l in (Path(ENV["DIR"]) / "logs" / "kubelet.log").read_text().splitlines()
            if "Using cgroup driver setting received from the CRI runtime" in l]
    assert said and 'cgroupDriver="cgroupfs"' in said[0], f"the kubelet did not take the driver from containerd: {said}"
    log(f"{ENV['NODE_NAME']}: kubelet {info['kubeletVersion']}, {info['containerRuntimeVersion']}, kernel {info['kernelVersion']}")


@check("1. the DaemonSet with the chart's defaults is Ready on the kubelet, the host's cgroup tree read-only with every hierarchy below it (recursiveReadOnly, containerd 2): on this hybrid node every collector succeeds with nothing to name; with cgroupMount: subPath (for runtimes without it) the cgroups collector says to name the v1 hierarchies")
def install():
    # cgroupMount: subPath first, what a runtime without recursive read-only mounts gets: the
    # host's /sys/fs/cgroup bound without the mounts below it, on this hybrid node the tmpfs
    # of the hierarchies' empty mount points. Nothing of the tree is writable (guest_e2e's G5
    # tries every mount), and nodemedic says why it reads no cgroup.
    helm(
        "install", "nodemedic", ROOT / "deploy/helm/nodemedic",
        "--set", "image.pullPolicy=Never", "--set", "cgroupMount=subPath",
    )
    pod = wait_ready()

    def hidden():
        st = status()
        reason = hidden_v1_reason(st)
        if not reason:
            raise Pending(f"collectors: {st['collectors']}")
        return reason

    log("cgroupMount: subPath on this hybrid node: cgroups: " + poll("the cgroups collector's reason", 60, hidden))
    code, body = http("/metrics")
    success = {l.get("collector"): v for n, l, v in samples(body) if n == "nodemedic_scrape_collector_success"}
    assert success.get("cgroups") == 0.0, success
    first = pod["metadata"]["uid"]
    # Then the chart's defaults, nothing else but the pull policy.
    helm("upgrade", "nodemedic", ROOT / "deploy/helm/nodemedic", "--reset-values",
         "--set", "image.pullPolicy=Never")
    pod = poll("the pod with the chart's defaults Ready", 180, rolled_from(first))
    cg = [m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["mountPath"] == "/host/sys/fs/cgroup"]
    assert len(cg) == 1 and cg[0].get("readOnly") is True and cg[0].get("recursiveReadOnly") == "IfPossible" \
        and "subPath" not in cg[0], cg
    # The kubelet reports what the mount became: on containerd 2, recursively read-only, not
    # merely read-only.
    statuses = pod["status"]["containerStatuses"][0].get("volumeMounts") or []
    rro = [m for m in statuses if m["mountPath"] == "/host/sys/fs/cgroup"]
    assert rro and rro[0].get("recursiveReadOnly") == "Enabled", statuses
    # Read back from the API: what the kubelet ran.
    spec = pod["spec"]
    c = spec["containers"][0]
    sec = c["securityContext"]
    assert spec.get("hostPID") in (False, None), spec
    assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", spec["securityContext"]
    assert sec["privileged"] is False and sec["allowPrivilegeEscalation"] is False, sec
    assert sec["readOnlyRootFilesystem"] is True, sec
    assert sec["capabilities"] == {"drop": ["ALL"], "add": ["BPF", "PERFMON"]}, sec["capabilities"]
    assert "cpu" not in c["resources"].get("limits", {}), c["resources"]
    # The first scrape after Ready: every collector succeeded (the probes as this kernel
    # allows, decided from the kernel first).
    code, body = http("/metrics")
    assert code == 200, (code, body[:300])
    st = status()
    names = {c["name"] for c in st["collectors"]}
    wrong = collectors_not_succeeding(names, body, probes_can_attach())
    assert not wrong, f"collectors: {wrong}; /status: {st['collectors']}"
    assert any(n == "nodemedic_irq_interrupts_total" for n, _, _ in samples(body))
    # No system D-Bus on this node: the pod started, and remediation says why it cannot ask.
    irqb = st["remediation"]["irqbalance"]
    assert irqb["state"] == "unknown" and "no system D-Bus socket" in irqb["detail"], irqb
    # What check 8 compares against: nodemedic's throttling from here on, and its memory
    # with the probes on after its first samples.
    pid = poll("the daemon's host pid", 30, host_pid)
    BASELINE["pid"] = pid
    BASELINE["throttled"] = nodemedic_throttling(pid)
    BASELINE["memory"] = settled_memory(pid)
    return pod


@check("2. from inside the pod nodemedic sees the host: its IRQs, node PSI, the cgroup layout from mountinfo")
def sees_the_host():
    host_irqs = sum(
        1 for l in Path("/proc/interrupts").read_text().splitlines()[1:]
        if l.split(":")[0].strip().isdigit()
    )
    _, body = http("/metrics")
    irqs = {l["irq"] for n, l, _ in samples(body) if n == "nodemedic_irq_interrupts_total"}
    assert len(irqs) == host_irqs, f"{len(irqs)} IRQs exported, the host has {host_irqs}"
    assert any(n == "nodemedic_pressure_cpu_waiting_seconds_total" for n, _, _ in samples(body)), "no node PSI"
    st = status()
    p = st["pressure"]
    assert p["cgroup_mounts_from_mountinfo"] is True, p
    mounts = p["cgroup_mounts"]
    assert mounts["cpu"] == "/host/sys/fs/cgroup/cpu", mounts
    assert mounts["unified"] == "/host/sys/fs/cgroup/unified", mounts


WORKLOAD = """
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: burner, namespace: shop}
spec:
  replicas: 1
  selector: {matchLabels: {app: burner}}
  template:
    metadata: {labels: {app: burner}}
    spec:
      containers:
      - name: burn
        image: localhost/nodemedic-test-busy:1
        imagePullPolicy: Never
        args: ["2"]
        resources:
          requests: {cpu: 100m}
          limits: {cpu: 100m}
"""


@contextlib.contextmanager
def machine_to_ourselves():
    """Stops the process group NODEMEDIC_PAUSE_PGID names, if any, while a check needs the node
    otherwise idle, and lets it go on after: tests/run-all.sh's fuzz run, which runs beside
    this script at the lowest priority but still takes every idle CPU cycle."""
    pgid = os.environ.get("NODEMEDIC_PAUSE_PGID")
    stopped = False
    if pgid:
        try:
            os.killpg(int(pgid), signal.SIGSTOP)
            stopped = True
            log(f"stopped process group {pgid} (NODEMEDIC_PAUSE_PGID) for this check")
        except ProcessLookupError:
            pass  # it has ended
    try:
        yield
    finally:
        if stopped:
            try:
                os.killpg(int(pgid), signal.SIGCONT)
            except ProcessLookupError:
                pass


@check("3. a workload capped at 100m with two busy loops is quota-bound: series, Pod Event, check in the pod; the idle node is not saturated")
def quota_bound():
    with machine_to_ourselves():
        name = quota_bound_on_an_idle_node()
    idle_checks_done()
    return name


def idle_checks_done():
    """Creates the file NODEMEDIC_IDLE_DONE_FILE names, if any, once no check left needs the node
    otherwise idle: tests/run-all.sh's fuzz run waits for it to start its targets."""
    done = os.environ.get("NODEMEDIC_IDLE_DONE_FILE")
    if done:
        Path(done).touch()
        log(f"the checks that need an idle node are done ({done})")


def quota_bound_on_an_idle_node():
    kubectl("apply", "-f", "-", input=WORKLOAD)

    def burner():
        pods = kjson("get", "pods", "-n", WORKLOAD_NS, "-l", "app=burner")["items"]
        running = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
        if not running:
            raise Pending("burner not running")
        return running[0]

    pod = poll("the burner pod", 120, burner)
    name = pod["metadata"]["name"]

    def bound():
        _, body = http("/metrics")
        for n, l, v in samples(body):
            if n == "nodemedic_cgroup_quota_bound" and l.get("pod") == name and l.get("namespace") == WORKLOAD_NS:
                if v == 1:
                    return body
                raise Pending(f"quota_bound {v}")
        raise Pending("no quota_bound series for the pod")

    body = poll("nodemedic_cgroup_quota_bound = 1", 120, bound)
    # The throttled workload makes node CPU pressure high on idle CPUs: not saturation. This
    # needs the node otherwise idle (nothing else running the test machine's CPUs).
    busy = [v for n, _, v in samples(body) if n == "nodemedic_node_cpu_busy_ratio"]
    assert not busy or busy[0] < 0.8, f"the node is not idle (busy {busy}): something else loads this machine"
    saturated = [v for n, _, v in samples(body) if n == "nodemedic_node_pressure_saturated"]
    assert saturated == [0.0], f"node_pressure_saturated {saturated} on an idle node (busy {busy})"

    def event():
        evs = kjson("get", "events.events.k8s.io", "-n", WORKLOAD_NS)["items"]
        for e in evs:
            r = e.get("regarding", {})
            if r.get("kind") == "Pod" and r.get("name") == name and e.get("reason") == "CPUQuotaBound":
                return e
        raise Pending(f"{[(e.get('reason'), e.get('regarding', {}).get('name')) for e in evs]}")

    ev = poll("a CPUQuotaBound Event on the Pod", 60, event)
    assert ev["type"] == "Warning", ev
    assert "throttled in" in ev["note"] and "raise or remove the CPU limit" in ev["note"], ev["note"]
    # kubectl exec of check in the shipped pod, no extra flags.
    nm = nodemedic_pod()["metadata"]["name"]
    p = kubectl("exec", "-n", NAMESPACE, nm, "--", "nodemedic", "check", "--format", "json", check=False, timeout=120)
    assert p.returncode == 1, f"check exited {p.returncode}: {p.stderr[-2000:]}"
    report = json.loads(p.stdout)
    hits = [c for c in report["pressure"]["cgroups"] if c.get("pod") == name]
    assert hits and hits[0]["namespace"] == WORKLOAD_NS and hits[0]["quota_bound"], hits
    return name


def apiserver(action):
    pidfile = Path(ENV["DIR"]) / "kube-apiserver.pid"
    if action == "stop":
        pid = int(pidfile.read_text())
        os.killpg(pid, 15)

        def gone():
            if Path(f"/proc/{pid}").exists():
                raise Pending("alive")
            return True

        try:
            poll("the apiserver gone", 10, gone)
        except AssertionError:
            os.killpg(pid, 9)  # graceful shutdown waits for watches; an outage need not
            poll("the apiserver killed", 10, gone)
    else:
        run([K8S / "lib.sh", "restart-apiserver", ENV["DIR"]], timeout=180)


PROM_CONFIG = """
global:
  scrape_interval: 5s
  evaluation_interval: 5s
rule_files:
  - {alerts}
  - {fast}
scrape_configs:
  - job_name: nodemedic
    kubernetes_sd_configs:
      - role: pod
        api_server: {api}
        tls_config: {{ca_file: {ca}, cert_file: {cert}, key_file: {key}}}
        namespaces: {{names: [nodemedic]}}
    relabel_configs:
      - source_labels: [__meta_kubernetes_pod_label_app_kubernetes_io_name]
        regex: nodemedic
        action: keep
      - source_labels: [__meta_kubernetes_pod_container_port_name]
        regex: metrics
        action: keep
      - source_labels: [__meta_kubernetes_pod_node_name]
        target_label: instance
"""


@check("7. Prometheus discovers the pod (kubernetes_sd_configs, role pod): up 1, the shipped rules load, CPUQuotaBound fires for the workload")
def prometheus(workload_pod):
    import yaml

    d = Path(ENV["DIR"]) / "prometheus"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    shipped = ROOT / "deploy/prometheus/nodemedic-alerts.yml"
    rules = yaml.safe_load(shipped.read_text())
    fast = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "CPUQuotaBound"]
    assert fast, "no CPUQuotaBound in the shipped rules"
    fast[0]["for"] = "5s"
    fast[0]["alert"] = "CPUQuotaBound"
    (d / "fast.yml").write_text(yaml.safe_dump({"groups": [{"name": "test-fast", "rules": fast}]}))
    pki = Path(ENV["CA_FILE"]).parent
    (d / "prometheus.yml").write_text(PROM_CONFIG.format(
        alerts=shipped, fast=d / "fast.yml", api=ENV["APISERVER_URL"], ca=ENV["CA_FILE"],
        cert=pki / "admin.crt", key=pki / "admin.key"))
    # Debian's prometheus is built without kubernetes_sd_configs: this one comes from the Go
    # module proxy (tests/k8s/build-prometheus.sh, cached).
    server = run([K8S / "build-prometheus.sh"], timeout=1800).stdout.strip()
    proc = subprocess.Popen(
        in_ns([server, f"--config.file={d / 'prometheus.yml'}", f"--storage.tsdb.path={d / 'data'}",
               "--web.listen-address=127.0.0.1:9090"]),
        stdout=open(d / "prometheus.log", "w"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def query(q):
            p = run(in_ns(["curl", "-sf", "--max-time", "5", "--data-urlencode", f"query={q}",
                           "http://127.0.0.1:9090/api/v1/query"]), check=False)
            if p.returncode != 0:
                raise Pending(f"prometheus: curl {p.returncode}")
            return json.loads(p.stdout)["data"]["result"]

        def up():
            r = query('up{job="nodemedic"}')
            if [x["value"][1] for x in r] != ["1"]:
                raise Pending(f"up {r}")
            return r

        poll("up == 1", 120, up, every=2)
        p = run(in_ns(["curl", "-sf", "http://127.0.0.1:9090/api/v1/rules"]))
        groups = json.loads(p.stdout)["data"]["groups"]
        loaded = {r["name"] for g in groups for r in g["rules"]}
        want = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
        assert want <= loaded, f"shipped rules not loaded: {want - loaded}"

        def firing():
            r = query('ALERTS{alertname="CPUQuotaBound",alertstate="firing"}')
            pods = [x["metric"].get("pod") for x in r]
            if workload_pod not in pods:
                raise Pending(f"firing for {pods}")
            return pods

        poll("CPUQuotaBound firing", 120, firing, every=2)
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)


class Scraper:
    """Scrapes /metrics on a thread of its own, one scrape every `every` seconds, until
    stopped: [(time, kind, process start)] as judge_roll takes them."""

    def __init__(self, every=0.2):
        self.every = every
        self.scrapes = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def loop(self):
        while not self.stopping.is_set():
            t = time.time()
            try:
                curl_exit, code, body = curl("/metrics", timeout=5)
                kind = scrape_kind(curl_exit, code, body)
            except Exception:  # curl itself hung past its own deadline: not a clean answer
                kind, body = "broken", ""
            self.scrapes.append((t, kind, process_start(body) if kind == "ok" else None))
            self.stopping.wait(max(0.0, self.every - (time.time() - t)))

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.stopping.set()
        self.thread.join(timeout=30)
        return list(self.scrapes)

    def ok_since(self, t):
        return [s for s in list(self.scrapes) if s[0] >= t and s[1] == "ok"]


@check("8. helm upgrade with a changed config (3 s, probes off) rolls the pod: scraped through the roll, every answer a 200 with series or a refusal between the two processes; nodemedic never throttled, the probes' memory bounded; helm uninstall leaves nothing behind")
def upgrade_and_uninstall():
    old = nodemedic_pod()["metadata"]["uid"]
    # nodemedic's own CPU throttling from check 1 to here, in the same process: the chart sets
    # no CPU limit, so that a busy node never delays its sampling.
    pid = poll("the daemon's host pid", 30, host_pid)
    assert pid == BASELINE["pid"], f"the daemon restarted since check 1 (pid {BASELINE['pid']}, now {pid})"
    grown = throttling_growth(BASELINE["throttled"], nodemedic_throttling(pid))
    assert not grown, f"nodemedic was throttled during the run (nr_throttled grew): {grown}"
    scraper = Scraper().start()
    try:
        def old_one_answers():
            if not scraper.ok_since(0):
                raise Pending("no 200 yet")
            return True

        poll("the old pod scraped", 30, old_one_answers)
        started = time.time()
        helm("upgrade", "nodemedic", ROOT / "deploy/helm/nodemedic", "--reuse-values",
             "--set", "sampleInterval=3s", "--set", "features.probes=false")
        pod = poll("the pod rolled", 180, rolled_from(old), every=0.3)
        ready = time.time()

        def new_one_answers():
            if len(scraper.ok_since(ready)) < 3:
                raise Pending("the new pod not scraped yet")
            return True

        poll("scrapes of the new pod", 60, new_one_answers)
    finally:
        scrapes = scraper.stop()
    log(judge_roll(scrapes, started, ready))
    caps = pod["spec"]["containers"][0]["securityContext"]["capabilities"]
    assert not caps.get("add"), f"probes off, yet the pod adds {caps}"
    off = settled_memory(poll("the new daemon's host pid", 30, host_pid))
    log(judge_memory(BASELINE["memory"], off))
    helm("uninstall", "nodemedic", "--wait")
    poll("nothing left", 180, release_gone, every=2)


def collapsed_values():
    """Values that point nodemedic at the collapsed fixture (sampling every second): it sets
    the IRQAffinityCollapsed condition. Understood by the previous release's chart too."""
    fixture = ROOT / "tests/fixtures/8cpu-collapsed"
    values = Path(ENV["DIR"]) / "collapsed-values.yaml"
    values.write_text(
        "image: {pullPolicy: Never}\n"
        "extraVolumes: [{name: fixture, hostPath: {path: %s, type: Directory}}]\n"
        "extraVolumeMounts: [{name: fixture, mountPath: /fixture, readOnly: true}]\n"
        "paths: {procfs: /fixture/proc, sysfs: /fixture/sys}\n"
        "sampleInterval: 1s\n" % fixture
    )
    return values


def collapsed_condition(since=None):
    """For poll: the node's IRQAffinityCollapsed condition once it is True (and, with SINCE, an
    RFC 3339 time, heartbeated at or after it)."""
    def collapsed():
        node = kjson("get", "node", ENV["NODE_NAME"])
        for c in node["status"].get("conditions", []):
            if c["type"] == "IRQAffinityCollapsed":
                if c["status"] != "True":
                    raise Pending(f"condition {c['status']} ({c.get('reason')})")
                if since and c["lastHeartbeatTime"] < since:
                    raise Pending(f"condition True, last heartbeat {c['lastHeartbeatTime']} before {since}")
                return c
        raise Pending("no condition")

    return collapsed


@check("6. the IRQAffinityCollapsed condition is set by the pod's service account (collapsed fixture) and turns Unknown when the DaemonSet goes")
def condition():
    helm("install", "nodemedic", ROOT / "deploy/helm/nodemedic", "-f", collapsed_values())
    wait_ready()
    poll("IRQAffinityCollapsed True", 120, collapsed_condition())
    node = json.loads(kubectl("get", "node", ENV["NODE_NAME"], "-o", "json", "--show-managed-fields").stdout)
    managers = {f["manager"] for f in node["metadata"]["managedFields"] if f.get("subresource") == "status"}
    assert "nodemedic" in managers, managers
    kubectl("delete", "daemonset", "-n", NAMESPACE, "nodemedic", "--wait=true", timeout=120)

    def unknown():
        node = kjson("get", "node", ENV["NODE_NAME"])
        c = [c for c in node["status"]["conditions"] if c["type"] == "IRQAffinityCollapsed"][0]
        if c["status"] != "Unknown":
            raise Pending(f"condition {c['status']}")
        return c

    c = poll("IRQAffinityCollapsed Unknown", 60, unknown)
    assert c["reason"] == "NodemedicStopped", c
    helm("uninstall", "nodemedic", "--wait")


@check("9. under containerd 2's RuntimeDefault seccomp, read back from the pod spec and the process: bpf() and perf_event_open() fail as on the host; io_uring is refused, and the read layer and the disk probe both fall back to plain syscalls with the reason on /status, no collector failed")
def seccomp():
    values = Path(ENV["DIR"]) / "seccomp-values.yaml"
    values.write_text(
        "image: {pullPolicy: Never}\n"
        "extraVolumes: [{name: probe-dir, emptyDir: {}}]\n"
        "extraVolumeMounts: [{name: probe-dir, mountPath: /var/lib/nodemedic}]\n"
        "extraConfig: |\n"
        "  [reader]\n"
        "  backend = \"io_uring\"\n"
        "  [disk_probe]\n"
        "  enabled = true\n"
    )
    helm("install", "nodemedic", ROOT / "deploy/helm/nodemedic", "-f", values)
    pod = wait_ready()
    # What the runtime applied, read back: the profile in the spec the kubelet ran, and a
    # seccomp filter on the daemon's process.
    profile = seccomp_profile(pod)
    assert profile == "RuntimeDefault", f"seccomp profile {profile}"
    pid = poll("the daemon's host pid", 30, host_pid)
    mode = status_field(Path(f"/proc/{pid}/status").read_text(), "Seccomp")
    assert mode == SECCOMP_FILTER, f"/proc/{pid}/status Seccomp: {mode} (2: a filter)"

    def probed():
        st = status()
        if not st.get("disk_commit"):
            raise Pending("no disk probe yet")
        return st

    st = poll("the disk probe's first commits", 60, probed)
    reader, disk = st["reader"], st["disk_commit"]
    # containerd 2's RuntimeDefault profile has no io_uring_* (containerd 1.6's had): the
    # kernel answers EPERM, and both users of io_uring say so and read with pread.
    assert_io_uring_refused(reader, disk)
    failed = {c["name"]: c.get("reason") for c in st["collectors"]
              if c["state"] == "failed" and c["name"] != "perf_probes"}
    assert not failed, f"collectors failed under RuntimeDefault: {failed}"
    # The probes: the pod's reason is the host's own (the kernel's limits), not the profile's.
    host = run([ROOT / "target/x86_64-unknown-linux-musl/release/nodemedic", "check",
                "--format", "json"], check=False)
    host_reason = json.loads(host.stdout)["perf"]["down_reason"]
    assert st["perf_probes"]["down_reason"] == host_reason, (st["perf_probes"]["down_reason"], host_reason)
    log(f"io_uring in the pod under RuntimeDefault: reader {reader['backend']}, disk probe {disk['backend']}")
    helm("uninstall", "nodemedic", "--wait")


def release_objects(helm_bin=None):
    """The release as the API has it: the DaemonSet's, ConfigMap's and pod's essentials, and
    helm's own view (revision, status) through HELM_BIN (default: Helm 4)."""
    ds = kjson("get", "daemonset", "nodemedic", "-n", NAMESPACE)
    cm = kjson("get", "configmap", "nodemedic", "-n", NAMESPACE)
    for kind in ("serviceaccount/nodemedic", "clusterrole/nodemedic", "clusterrolebinding/nodemedic",
                 "service/nodemedic"):
        kubectl("get", kind, *(["-n", NAMESPACE] if not kind.startswith("cluster") else []))
    interval = re.search(r'^sample_interval = "([^"]+)"', cm["data"]["nodemedic.toml"], re.M)
    env = dict(os.environ, KUBECONFIG=ENV["KUBECONFIG"])
    st = json.loads(run(in_ns([helm_bin or HELM, "status", "nodemedic", "-o", "json"]), env=env).stdout)
    return {
        "interval": interval and interval.group(1),
        "ready": ds["status"].get("numberReady"),
        "revision": st["version"],
        "status": st["info"]["status"],
    }


@check("10. Helm 4 is the client: install, upgrade, rollback and uninstall, the release's objects checked after each (the ConfigMap's interval, the DaemonSet Ready, the daemon's own /status); Helm 3 still installs and uninstalls the chart")
def helm_clients():
    chart = ROOT / "deploy/helm/nodemedic"
    version = run([HELM, "version", "--template", "{{.Version}}"]).stdout.strip()
    assert version.startswith("v4."), f"the tests' helm is {version}"

    def at(interval, revision):
        def settled():
            got = release_objects()
            st = status()
            if got["ready"] != 1 or st.get("sample_interval_seconds") != float(interval.rstrip("s")):
                raise Pending(f"{got}, the daemon's interval {st.get('sample_interval_seconds')}")
            return got

        got = poll(f"the release at revision {revision} ({interval})", 180, settled)
        assert got == {"interval": interval, "ready": 1, "revision": revision, "status": "deployed"}, got
        return got

    helm("install", "nodemedic", chart, "--set", "image.pullPolicy=Never", "--set", "sampleInterval=2s")
    wait_ready()
    at("2s", 1)
    old = nodemedic_pod()["metadata"]["uid"]
    helm("upgrade", "nodemedic", chart, "--reuse-values", "--set", "sampleInterval=3s")
    poll("the pod rolled by the upgrade", 180, rolled_from(old))
    at("3s", 2)
    old = nodemedic_pod()["metadata"]["uid"]
    helm("rollback", "nodemedic", "1", "--wait")
    poll("the pod rolled by the rollback", 180, rolled_from(old))
    at("2s", 3)
    helm("uninstall", "nodemedic", "--wait")
    poll("nothing left after Helm 4's uninstall", 180, release_gone, every=2)
    # Helm 3, still what many pipelines run: the same chart installs and uninstalls.
    helm3 = run([K8S / "build-helm.sh", "3"]).stdout.strip()
    env = dict(os.environ, KUBECONFIG=ENV["KUBECONFIG"])
    v3 = run([helm3, "version", "--template", "{{.Version}}"]).stdout.strip()
    assert v3.startswith("v3."), v3
    run(in_ns([helm3, "install", "nodemedic", chart, "--set", "image.pullPolicy=Never"]), env=env)
    wait_ready()
    got = release_objects(helm3)
    assert got["ready"] == 1 and got["revision"] == 1 and got["status"] == "deployed", got
    run(in_ns([helm3, "uninstall", "nodemedic", "--wait"]), env=env, timeout=300)
    poll("nothing left after Helm 3's uninstall", 180, release_gone, every=2)
    log(f"helm {version}: install, upgrade, rollback, uninstall; helm {v3}: install, uninstall")


def chart_version(chart):
    """A chart's appVersion: the version of the image it runs (localhost/nodemedic:VERSION)."""
    return re.search(r'^appVersion: "?([^"\s]+)"?$', (Path(chart) / "Chart.yaml").read_text(), re.M).group(1)


def exposition_of(version):
    """For poll: /metrics once the daemon that answers is VERSION (nodemedic_build_info)."""
    def answered():
        code, body = http("/metrics")
        if code != 200:
            raise Pending(f"/metrics {code}")
        versions = [l.get("version") for n, l, _ in samples(body) if n == "nodemedic_build_info"]
        if versions != [version]:
            raise Pending(f"nodemedic_build_info versions {versions}")
        return body

    return answered


@check("11. helm upgrade from the previous release's chart and image (tests/previous-version.sh) to this one's keeps the IRQAffinityCollapsed condition (set again by the new daemon, with the same reason) and every series that the alerts, rules and dashboard of either release query, unless CHANGELOG.md names it renamed")
def upgrade_from_previous():
    prev_tool = ROOT / "tests/previous-version.sh"
    image = os.environ.get("NODEMEDIC_PREVIOUS_IMAGE_ARCHIVE") or run(
        [prev_tool, "image"], timeout=3600).stdout.strip()
    run(["ctr", "--address", ENV["CONTAINERD_SOCK"], "-n", "k8s.io", "images", "import", image])
    previous_deploy = Path(ENV["DIR"]) / "previous"
    shutil.rmtree(previous_deploy, ignore_errors=True)
    previous_chart = Path(run([prev_tool, "chart", previous_deploy]).stdout.strip())
    chart = ROOT / "deploy/helm/nodemedic"
    previous, this = chart_version(previous_chart), chart_version(chart)
    assert previous != this, f"the previous release's chart is {this}, this one's too"
    values = collapsed_values()

    helm("install", "nodemedic", previous_chart, "-f", values)
    old = wait_ready()
    # Set by this pod: check 6 left the condition Unknown, and the node's own IRQs may differ.
    old_started = old["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
    before = poll(f"the condition set by nodemedic {previous}", 120, collapsed_condition(since=old_started))
    body_before = poll(f"nodemedic {previous} answering", 60, exposition_of(previous))
    # As a user upgrades: this release's chart, the same values file.
    helm("upgrade", "nodemedic", chart, "-f", values)
    pod = poll("the pod rolled to this release", 180, rolled_from(old["metadata"]["uid"]))
    started = pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
    after = poll(f"the condition set again by nodemedic {this}", 120, collapsed_condition(since=started))
    assert after["reason"] == before["reason"], f"reason {before['reason']} became {after['reason']}"

    queries = shipped_queries(ROOT / "deploy") + shipped_queries(previous_deploy / "deploy")
    renamed = renamed_in_changelog((ROOT / "CHANGELOG.md").read_text())

    def kept():
        body = exposition_of(this)()
        try:
            return judge_series_kept(body_before, body, queries, renamed)
        except AssertionError as e:
            raise Pending(str(e))

    # A family that appears with its first event (a remediation decision) has a few samples
    # to appear in.
    queried, gone = poll("every queried series of the previous release exported again", 60, kept)
    log(f"nodemedic {previous} -> {this}: condition {after['status']} ({after['reason']}) kept; "
        f"{len(queried)} queried series kept, renamed per CHANGELOG.md: {gone or 'none'}")
    # No uninstall: the cluster is torn down next.


def assert_io_uring_refused(reader, disk=None):
    """The read layer (and the disk probe, when given) asked for io_uring under a profile that
    refuses it: on plain syscalls, each with the reason naming io_uring_setup and seccomp."""
    users = [("reader", reader)] + ([("disk probe", disk)] if disk is not None else [])
    for what, st in users:
        reason = st.get("fallback_reason") or ""
        assert st["backend"] != "io_uring", f"{what} uses io_uring under the profile: {st}"
        assert "io_uring_setup" in reason and "seccomp" in reason, f"{what}: {st}"


def attach(d):
    """Points the helpers at the cluster of DIR (after cluster-up.sh)."""
    global HELM
    HELM = run([K8S / "build-helm.sh"]).stdout.strip()
    # ctr: containerd 2's, beside the runtime both nodes run (tests/k8s/build-containerd.sh).
    ctd = run([K8S / "build-containerd.sh"]).stdout.strip()
    if ctd not in os.environ["PATH"].split(":"):
        os.environ["PATH"] = f"{ctd}:{os.environ['PATH']}"
    for line in (Path(d) / "env").read_text().splitlines():
        k, _, v = line.partition("=")
        ENV[k] = v
    ENV["DIR"] = str(d)


# The checks main() runs. Checks 4 (churn) and 5 (the API down) are the two-node suite's G14 and
# G15 (tests/k8s/guest_e2e.py), which take the API down and churn pods on both nodes, this one
# among them: the single-node copies cost CI four more minutes and checked nothing G14 and G15
# do not.
CHECKS = 10


def tidy(d, made_here, passed):
    """Removes a run's directory (etcd, containerd, the kubelet's state, the logs: about 120 MB)
    after a run that passed, when this run made it. Kept when a check failed (its logs are the
    evidence), when the caller named it, with KEEP=1, and while anything is still mounted under
    it: removing through a mount would delete what the mount shows, a host path among them."""
    if not passed or not made_here or os.environ.get("KEEP") == "1":
        log(f"kept {d}")
        return
    under = str(Path(d).resolve()) + "/"
    with open("/proc/self/mountinfo") as f:
        held = [fields[4] for fields in (line.split() for line in f)
                if (fields[4] + "/").startswith(under)]
    if held:
        log(f"kept {d}: {len(held)} mount(s) still under it, e.g. {held[0]}")
        return
    shutil.rmtree(d, ignore_errors=True)
    log(f"removed {d} (the run passed)")


def main():
    made_here = len(sys.argv) <= 1
    d = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="nodemedic-node-"))
    d.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    image = os.environ.get("NODEMEDIC_IMAGE_ARCHIVE")
    if not image:
        image = d / "nodemedic-image.tar"
        log("building the image (deploy/container/build-image.sh)")
        run([ROOT / "deploy/container/build-image.sh", "--oci-archive", image], timeout=3600)
    log("bringing the cluster up (tests/k8s/cluster-up.sh)")
    run([K8S / "cluster-up.sh", d], timeout=3600)
    attach(d)
    run(["ctr", "--address", ENV["CONTAINERD_SOCK"], "-n", "k8s.io", "images", "import", image])
    log(f"cluster and image ready in {time.time() - t0:.0f}s")
    try:
        the_node()
    except Exception:
        pass  # recorded failed; the chart's checks still run
    try:
        install()
        sees_the_host()
        workload = quota_bound()
        prometheus(workload)
        upgrade_and_uninstall()
        condition()
        seccomp()
        helm_clients()
        upgrade_from_previous()
    except Exception:
        pass
    finally:
        if os.environ.get("KEEP") != "1":
            run([K8S / "cluster-down.sh", d], check=False)
    passed = sum(1 for _, ok, _ in RESULTS if ok)
    failed = sum(1 for _, ok, _ in RESULTS if not ok)
    log(f"total {time.time() - t0:.0f}s; logs in {d}/logs and {d}/pod-logs")
    ok = failed == 0 and passed == CHECKS
    tidy(d, made_here, ok)
    print(f"k8s node: {passed} passed, {failed} failed")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
