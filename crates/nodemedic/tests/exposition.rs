//! End to end: `nodemedic run` against fixture trees, its /metrics compared to golden files
//! (`tests/golden/<fixture>.prom`), linted by `promtool check metrics`, and served as
//! OpenMetrics when asked.
//!
//! Regenerate the golden files after an intended change of the exposition with
//! `UPDATE_GOLDEN=1 cargo test -p nodemedic --test exposition`, then review the diff.

// Test helpers outside #[test] fns are meant to panic on failure.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Command, Stdio};

use common::*;

const VOLATILE: &str = "<volatile>";

/// Families whose values change from scrape to scrape (or from machine to machine).
fn is_volatile(name: &str) -> bool {
    matches!(
        name,
        "nodemedic_scrape_collector_duration_seconds"
            | "nodemedic_samples_total"
            | "nodemedic_last_sample_timestamp_seconds"
    ) || name.starts_with("process_")
}

/// Replaces volatile values with `<volatile>`, keeping every series line so the set of series
/// is still compared. The build's facts are replaced too (their names kept), so a version
/// bump, a commit or another compiler does not churn the golden files (tests/build_info.rs
/// checks their values).
fn normalise(body: &str) -> String {
    let mut out = String::with_capacity(body.len());
    for line in body.lines() {
        if !line.starts_with('#') && !line.is_empty() {
            let name = metric_name(line);
            if is_volatile(name) {
                let (series, _) = line.rsplit_once(' ').unwrap_or((line, ""));
                out.push_str(series);
                out.push(' ');
                out.push_str(VOLATILE);
                out.push('\n');
                continue;
            }
            if name == "nodemedic_build_info" {
                out.push_str(&build_info_placeholders(line));
                out.push('\n');
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// `nodemedic_build_info{version="0.2.0",revision="…",…} 1` with every label's value
/// replaced by `<label>`.
fn build_info_placeholders(line: &str) -> String {
    let Some((head, rest)) = line.split_once('{') else {
        return line.to_string();
    };
    let Some((labels, tail)) = rest.rsplit_once('}') else {
        return line.to_string();
    };
    let names: Vec<String> = labels
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, _)| format!("{k}=\"<{k}>\""))
        .collect();
    format!("{head}{{{}}}{tail}", names.join(","))
}

/// A unified diff (three lines of context, at most 80 lines shown) by the `similar` crate.
fn short_diff(expected: &str, actual: &str) -> String {
    let diff = similar::TextDiff::from_lines(expected, actual);
    let text = diff
        .unified_diff()
        .context_radius(3)
        .header("golden", "scrape")
        .to_string();
    let total = text.lines().count();
    let mut out: String = text.lines().take(80).map(|l| format!("{l}\n")).collect();
    if total > 80 {
        out.push_str(&format!("… {} more diff lines\n", total - 80));
    }
    out
}

fn check_golden(fixture: &str, normalised: &str) {
    let path = golden_dir().join(format!("{fixture}.prom"));
    if std::env::var("UPDATE_GOLDEN").as_deref() == Ok("1") {
        std::fs::create_dir_all(golden_dir()).expect("creating tests/golden");
        std::fs::write(&path, normalised).expect("writing the golden file");
        eprintln!("UPDATE_GOLDEN=1: wrote {}", path.display());
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "reading {}: {e}\nGenerate it with: UPDATE_GOLDEN=1 cargo test -p nodemedic --test exposition",
            path.display()
        )
    });
    if expected != normalised {
        panic!(
            "/metrics for fixture {fixture} differs from {} (- golden, + actual):\n{}\n\
             If the change is intended: UPDATE_GOLDEN=1 cargo test -p nodemedic --test exposition",
            path.display(),
            short_diff(&expected, normalised)
        );
    }
}

/// `promtool check metrics` on the raw scrape: exit 0 and nothing to say.
fn promtool_check(fixture: &str, raw: &str) {
    let Some(promtool) =
        prometheus_tool("promtool", "linting /metrics with `promtool check metrics`")
    else {
        return;
    };
    let mut child = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running {}: {e}", promtool.display()));
    {
        let mut stdin = child.stdin.take().expect("promtool stdin");
        stdin.write_all(raw.as_bytes()).expect("feeding promtool");
    }
    let out = child.wait_with_output().expect("waiting for promtool");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.trim().is_empty() && stderr.trim().is_empty(),
        "promtool check metrics on {fixture}: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
}

/// OpenMetrics on request: content type, `# EOF`, counters' metadata named without `_total`
/// while their samples keep it, and the same series and values as the text format.
fn check_openmetrics(server: &Server, fixture: &str, text_normalised: &str) {
    let r = server.get_with(
        "/metrics",
        &[("Accept", "application/openmetrics-text; version=1.0.0")],
    );
    assert_eq!(r.status, 200, "{fixture}: OpenMetrics /metrics status");
    let ct = r.header("content-type").unwrap_or("");
    assert!(
        ct.starts_with("application/openmetrics-text") && ct.contains("version=1.0.0"),
        "{fixture}: content-type {ct:?} is not OpenMetrics 1.0.0"
    );
    let body = &r.body;
    assert!(
        body.ends_with("# EOF\n"),
        "{fixture}: OpenMetrics body does not end with '# EOF\\n'"
    );
    assert_eq!(
        body.matches("# EOF").count(),
        1,
        "{fixture}: more than one # EOF"
    );

    let mut counters = 0;
    let mut current_counter: Option<String> = None;
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("# TYPE name kind");
            if kind == "counter" {
                counters += 1;
                assert!(
                    !name.ends_with("_total"),
                    "{fixture}: OpenMetrics counter family {name} must be named without _total"
                );
                current_counter = Some(name.to_string());
            } else {
                current_counter = None;
            }
        } else if !line.starts_with('#') {
            if let Some(family) = &current_counter {
                assert_eq!(
                    metric_name(line),
                    format!("{family}_total"),
                    "{fixture}: sample of counter {family} must be named {family}_total"
                );
            }
        }
    }
    assert!(
        counters > 0,
        "{fixture}: no counter families in the OpenMetrics exposition"
    );

    let text: BTreeSet<&str> = sample_lines(text_normalised).collect();
    let om_normalised = normalise(body);
    let om: BTreeSet<&str> = sample_lines(&om_normalised).collect();
    let only_text: Vec<_> = text.difference(&om).take(10).collect();
    let only_om: Vec<_> = om.difference(&text).take(10).collect();
    assert!(
        only_text.is_empty() && only_om.is_empty(),
        "{fixture}: text and OpenMetrics expositions differ in series or values\n\
         only in text: {only_text:#?}\nonly in OpenMetrics: {only_om:#?}"
    );
}

/// Groups with `nodemedic_irq_collapsed{group=...} 1`.
fn collapsed_groups(raw: &str) -> BTreeSet<String> {
    sample_lines(raw)
        .filter(|l| metric_name(l) == "nodemedic_irq_collapsed" && l.ends_with(" 1"))
        .map(|l| {
            l.split_once("group=\"")
                .and_then(|(_, rest)| rest.split_once('"'))
                .map(|(g, _)| g.to_string())
                .unwrap_or_else(|| l.to_string())
        })
        .collect()
}

/// `label="value"` of a series line.
fn label<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let (_, rest) = line.split_once(&format!("{name}=\""))?;
    rest.split_once('"').map(|(v, _)| v)
}

fn value(line: &str) -> f64 {
    line.rsplit_once(' ')
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or_else(|| panic!("no value in {line:?}"))
}

/// The damaged trees, for which the generator writes no `expected.json`: what survives of
/// them is the reliability tests' business (tests/fixtures/generate.py, `write_expected`).
const WITHOUT_EXPECTATIONS: [&str; 3] = ["truncated", "empty", "missing"];

/// The golden files were written by the code they test. This checks the exposition against
/// what the fixture generator wrote into the tree (`expected.json`): every IRQ's count, the
/// online CPUs, the pods. A tree without the file fails unless it is one of
/// [`WITHOUT_EXPECTATIONS`].
fn check_against_generator(fixture: &str, raw: &str) {
    let path = nodemedic_testkit::fixture(fixture).join("expected.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(_) if WITHOUT_EXPECTATIONS.contains(&fixture) => return,
        Err(e) => panic!(
            "{}: {e}: the exposition of {fixture} cannot be checked against the generator \
             (rerun python3 tests/fixtures/generate.py, or name a damaged tree in \
             WITHOUT_EXPECTATIONS)",
            path.display()
        ),
    };
    let exp: serde_json::Value = serde_json::from_str(&text).expect("expected.json");
    let irqs: std::collections::BTreeMap<String, u64> = sample_lines(raw)
        .filter(|l| metric_name(l) == "nodemedic_irq_interrupts_total")
        .map(|l| (label(l, "irq").unwrap_or("?").to_string(), value(l) as u64))
        .collect();
    let expected: std::collections::BTreeMap<String, u64> = exp["irq_interrupts"]
        .as_object()
        .expect("irq_interrupts")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().expect("a count")))
        .collect();
    assert_eq!(
        irqs, expected,
        "{fixture}: interrupts per IRQ against the generator"
    );
    let online = sample_lines(raw)
        .find(|l| metric_name(l) == "nodemedic_cpus" && label(l, "state") == Some("online"))
        .map(value);
    assert_eq!(
        online,
        exp["online_cpus"].as_f64(),
        "{fixture}: online CPUs against the generator"
    );
    if let Some(pods) = exp["pods_with_cpu_usage"].as_u64() {
        let usage = |key: &str| -> BTreeSet<String> {
            sample_lines(raw)
                .filter(|l| metric_name(l) == "nodemedic_cgroup_cpu_usage_seconds_total")
                .filter_map(|l| label(l, key))
                .map(str::to_string)
                .collect()
        };
        assert_eq!(
            usage("pod_uid").len() as u64,
            pods,
            "{fixture}: pods with CPU usage against the generator"
        );
        let services: BTreeSet<String> = exp["services"]
            .as_array()
            .expect("services")
            .iter()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect();
        assert_eq!(
            usage("unit"),
            services,
            "{fixture}: services against the generator"
        );
    }
}

/// Runs the whole check for one fixture and returns the raw text exposition.
fn exposition(fixture: &str, expect_collapsed: &[&str]) -> String {
    let mut server = start_nodemedic(fixture, FAST_CONFIG);
    wait_for_samples(&mut server, 3);

    let r = server.get("/metrics");
    assert_eq!(r.status, 200, "{fixture}: /metrics status");
    let ct = r.header("content-type").unwrap_or("");
    assert!(
        ct.starts_with("text/plain; version=0.0.4"),
        "{fixture}: content-type {ct:?}"
    );
    let raw = r.body;

    let samples: u64 = sample_lines(&raw)
        .find(|l| metric_name(l) == "nodemedic_samples_total")
        .and_then(|l| l.rsplit_once(' '))
        .and_then(|(_, v)| v.parse().ok())
        .expect("nodemedic_samples_total sample");
    assert!(
        samples >= 3,
        "{fixture}: nodemedic_samples_total = {samples}, expected >= 3"
    );

    let collapsed = collapsed_groups(&raw);
    let expected: BTreeSet<String> = expect_collapsed.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        collapsed, expected,
        "{fixture}: groups with nodemedic_irq_collapsed 1"
    );

    check_against_generator(fixture, &raw);
    let normalised = normalise(&raw);
    check_golden(fixture, &normalised);
    promtool_check(fixture, &raw);
    check_openmetrics(&server, fixture, &normalised);
    raw
}

/// Every fixture tree has the generator's expectations, but the damaged trees named in
/// [`WITHOUT_EXPECTATIONS`], which have none: a tree that lost its file, or an exempt tree
/// that gained one, fails here rather than being skipped or exempted in silence.
#[test]
fn every_fixture_tree_has_expectations_or_is_exempt_by_name() {
    let root = nodemedic_testkit::fixtures_dir();
    let mut wrong = Vec::new();
    let mut trees = 0;
    for entry in std::fs::read_dir(&root).expect("listing tests/fixtures") {
        let entry = entry.expect("a directory entry");
        if !entry.file_type().expect("its type").is_dir() {
            continue;
        }
        trees += 1;
        let name = entry.file_name().to_string_lossy().into_owned();
        let has = entry.path().join("expected.json").is_file();
        let exempt = WITHOUT_EXPECTATIONS.contains(&name.as_str());
        if has == exempt {
            wrong.push(format!(
                "{name}: {}",
                if has {
                    "exempt, yet it has expected.json"
                } else {
                    "no expected.json"
                }
            ));
        }
    }
    assert!(trees > WITHOUT_EXPECTATIONS.len(), "{trees} trees");
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn exposition_8cpu_collapsed() {
    let raw = exposition("8cpu-collapsed", &["virtio2"]);
    assert!(
        raw.lines()
            .any(|l| l == "nodemedic_irq_collapsed{group=\"virtio2\"} 1"),
        "no `nodemedic_irq_collapsed{{group=\"virtio2\"}} 1` line"
    );
}

#[test]
fn exposition_96cpu_collapsed() {
    exposition("96cpu-collapsed", &["mlx5_core 0000:3b:00.0"]);
}

#[test]
fn exposition_256cpu_healthy() {
    let raw = exposition("256cpu-healthy", &[]);
    let series = sample_lines(&raw).count();
    assert!(
        series < 10_000,
        "256cpu-healthy exposes {series} series; the budget is < 10,000"
    );
    let bad: Vec<&str> = sample_lines(&raw)
        .filter(|l| l.starts_with("nodemedic_irq_collapsed{") && l.ends_with(" 1"))
        .collect();
    assert!(
        bad.is_empty(),
        "256cpu-healthy has collapsed groups: {bad:?}"
    );
}

#[test]
fn exposition_aarch64() {
    exposition("aarch64", &[]);
}

/// The tree a real arm64 kernel wrote (6.12 on QEMU's virt, GICv3 and ITS; tests/fixtures/
/// README.md): every IRQ's count as awk summed it from the captured `/proc/interrupts`, and
/// no group collapsed under irqbalance's placement.
#[test]
fn exposition_captured_arm64_virt() {
    exposition("captured-arm64-virt", &[]);
    exposition("captured-arm64-virt-collapsed", &["virtio1"]);
}

/// A Kubernetes node (systemd cgroup driver, cgroup v2): node PSI and per-pod quota,
/// throttling and pressure series carry pod_uid and qos; `max` exports no quota; a garbled
/// cpu.max loses only that series, and the collector says so.
#[test]
fn exposition_k8s_systemd_v2() {
    let raw = exposition("k8s-systemd-v2", &[]);
    let hpc = "pod_uid=\"8f14e45f-ceea-467f-a0e6-4f1a2b3c4d5e\",qos=\"guaranteed\"";
    for line in [
        format!("nodemedic_cgroup_cpu_quota_cores{{{hpc}}} 10"),
        format!("nodemedic_cgroup_cpu_period_seconds{{{hpc}}} 0.1"),
        "nodemedic_pressure_avg_ratio{resource=\"cpu\",kind=\"some\",window=\"10s\"} 0.1204"
            .to_string(),
        "nodemedic_cgroups_watched 9".to_string(),
        "nodemedic_scrape_collector_warnings{collector=\"cgroups\"} 2".to_string(),
    ] {
        assert!(raw.lines().any(|l| l == line), "no `{line}` line");
    }
    assert!(
        raw.lines()
            .any(|l| l.starts_with("nodemedic_pressure_cpu_waiting_seconds_total ")),
        "node PSI"
    );
    assert!(
        !raw.lines()
            .any(|l| l.starts_with("nodemedic_cgroup_cpu_quota_cores{") && l.contains("45c48cce")),
        "a best-effort pod with cpu.max `max` has no quota series"
    );
    assert!(
        raw.lines()
            .any(|l| l
                .starts_with("nodemedic_cgroup_cpu_usage_seconds_total{unit=\"kubelet.service\"}")),
        "services by unit"
    );
}

#[test]
fn exposition_8cpu_offline() {
    exposition("8cpu-offline", &[]);
}

/// The tuning audit on a host whose NIC receives on 1 of its 8 channels with rings at 256 of
/// 4096 (`tests/fixtures/README.md`): channels and rings as the driver reports them (the
/// fixture's `ethtool/` file), queues, drop counters, IOMMU groups, cpufreq policies, and each
/// info finding the audit makes of that tree, one series each.
#[test]
fn exposition_tuning_nic_channels() {
    let raw = exposition("tuning-nic-channels", &[]);
    for line in [
        "nodemedic_net_channels{interface=\"ens1f0\",kind=\"combined\",limit=\"current\"} 1",
        "nodemedic_net_channels{interface=\"ens1f0\",kind=\"combined\",limit=\"max\"} 8",
        "nodemedic_net_channels{interface=\"ens1f0\",kind=\"other\",limit=\"max\"} 1",
        "nodemedic_net_ring_entries{interface=\"ens1f0\",direction=\"rx\",limit=\"current\"} 256",
        "nodemedic_net_ring_entries{interface=\"ens1f0\",direction=\"rx\",limit=\"max\"} 4096",
        "nodemedic_net_queues{interface=\"ens1f0\",direction=\"rx\"} 1",
        "nodemedic_iommu_groups{type=\"lazy\"} 3",
        "nodemedic_cpufreq_policies{governor=\"powersave\",driver=\"amd-pstate-epp\"} 16",
        "nodemedic_tuning_finding{rule=\"nic_channels\",subject=\"ens1f0\",severity=\"info\"} 1",
        "nodemedic_tuning_finding{rule=\"nic_rings\",subject=\"ens1f0\",severity=\"info\"} 1",
    ] {
        assert!(raw.lines().any(|l| l == line), "no `{line}` line");
    }
    let findings: BTreeSet<(&str, &str)> = sample_lines(&raw)
        .filter(|l| metric_name(l) == "nodemedic_tuning_finding")
        .map(|l| {
            (
                label(l, "rule").unwrap_or("?"),
                label(l, "severity").unwrap_or("?"),
            )
        })
        .collect();
    // The tree is static: no counter rises, so every finding is a setting alone.
    assert_eq!(
        findings,
        BTreeSet::from([
            ("cpufreq_governor", "info"),
            ("nic_channels", "info"),
            ("nic_rings", "info"),
            ("srso", "info"),
        ]),
        "the audit's findings on tuning-nic-channels"
    );
}

/// Strict IOMMU domains (`iommu.strict=1`): counted by type, and the NIC's and the NVMe
/// drive's groups each an `iommu_strict` finding.
#[test]
fn exposition_tuning_iommu_strict() {
    let raw = exposition("tuning-iommu-strict", &[]);
    for line in [
        "nodemedic_iommu_groups{type=\"strict\"} 3",
        "nodemedic_net_channels{interface=\"ens1f0\",kind=\"combined\",limit=\"current\"} 8",
        "nodemedic_cpufreq_policies{governor=\"powersave\",driver=\"intel_pstate\"} 16",
    ] {
        assert!(raw.lines().any(|l| l == line), "no `{line}` line");
    }
    let strict: BTreeSet<&str> = sample_lines(&raw)
        .filter(|l| {
            metric_name(l) == "nodemedic_tuning_finding" && label(l, "rule") == Some("iommu_strict")
        })
        .filter_map(|l| label(l, "subject"))
        .collect();
    assert_eq!(
        strict,
        BTreeSet::from(["ens1f0", "nvme0"]),
        "iommu_strict on the NIC and the NVMe drive"
    );
}

/// The disk commit probe, enabled, on a real directory: its histogram is exposed with etcd's
/// buckets, passes promtool, and its file is removed when the daemon stops on SIGTERM.
#[test]
fn disk_commit_probe_histogram() {
    let probe_dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let config = format!(
        "{FAST_CONFIG}\n[disk_probe]\nenabled = true\ndirectory = \"{}\"\ninterval = \"100ms\"\n",
        probe_dir.path().display()
    );
    let mut server = start_nodemedic("8cpu-collapsed", &config);
    server.poll("commits in /metrics", DEADLINE, |s| {
        let r = http_get(s.addr(), "/metrics", &[])?;
        let count = sample_lines(&r.body)
            .find(|l| metric_name(l) == "nodemedic_disk_commit_duration_seconds_count")
            .and_then(|l| l.rsplit_once(' '))
            .and_then(|(_, v)| v.parse::<f64>().ok())
            .ok_or("no nodemedic_disk_commit_duration_seconds_count")?;
        if count >= 3.0 {
            Ok(())
        } else {
            Err(format!("{count} commits"))
        }
    });
    let raw = server.get("/metrics").body;
    let dir = probe_dir.path().display().to_string();
    let buckets: Vec<&str> = raw
        .lines()
        .filter(|l| l.starts_with("nodemedic_disk_commit_duration_seconds_bucket{"))
        .collect();
    assert_eq!(buckets.len(), 15, "14 etcd buckets and +Inf: {buckets:?}");
    assert!(
        buckets[0].starts_with(&format!(
            "nodemedic_disk_commit_duration_seconds_bucket{{directory=\"{dir}\",le=\"0.001\"}}"
        )),
        "{}",
        buckets[0]
    );
    assert!(buckets[13].contains("le=\"8.192\""), "{}", buckets[13]);
    assert!(raw.contains("# TYPE nodemedic_disk_commit_duration_seconds histogram"));
    promtool_check("disk_commit", &raw);
    let status: serde_json::Value = serde_json::from_str(&server.get("/status").body).unwrap();
    let collector = status["collectors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "disk_commit")
        .cloned()
        .unwrap_or_default();
    assert_eq!(collector["state"], "active", "{collector}");

    let files: Vec<_> = std::fs::read_dir(probe_dir.path())
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(files.len(), 1, "one probe file while running");
    let pid = server.pid();
    let killed = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = server.wait_exit(DEADLINE);
    assert!(status.is_some(), "nodemedic did not exit on SIGTERM");
    assert_eq!(
        std::fs::read_dir(probe_dir.path()).unwrap().count(),
        0,
        "the probe removes its file when the daemon stops"
    );
}

/// The eBPF probes' families, rendered from a snapshot shaped like the incident (one agent
/// owning per-CPU perf buffers, ~70% of its outputs waking a reader), since the probes cannot
/// attach on this machine's kernel (the VM test attaches them for real): golden file and
/// `promtool check metrics`. The alert rules and the dashboard are checked against it.
#[test]
fn exposition_perf_probes() {
    use nodemedic_export::{render, ExportInput, Format, MetricsOptions};
    // The probes' collector renders their series through its registration, in
    // nodemedic-probe: linked here, as in the binary.
    assert!(
        nodemedic_collect::registry::find(nodemedic_probe::PERF_PROBES.as_str())
            .is_some_and(|d| d.render.is_some()),
        "the probes' collector is not registered with its rendering"
    );
    use nodemedic_sample::perf::{
        PerfCounters, PerfHook, PerfOwner, PerfOwnerRate, PerfProbes, PerfProgramStats, PerfRates,
        PerfRing,
    };
    let hook = |f: &str| PerfHook {
        function: f.into(),
        up: true,
        error: None,
    };
    let perf = PerfProbes {
        method: Some("fentry".into()),
        hooks: vec![
            hook("perf_event_output"),
            hook("perf_event_output_forward"),
            hook("perf_event_output_backward"),
            hook("perf_event_wakeup"),
        ],
        down_reason: None,
        totals: PerfCounters {
            bpf_outputs: 9_000_000,
            sample_outputs: 12_000,
            wakeups: 6_300_000,
            untracked: 0,
        },
        per_cpu: vec![
            (
                0,
                PerfCounters {
                    bpf_outputs: 4_500_000,
                    sample_outputs: 6_000,
                    wakeups: 3_150_000,
                    untracked: 0,
                },
            ),
            (
                1,
                PerfCounters {
                    bpf_outputs: 4_500_000,
                    sample_outputs: 6_000,
                    wakeups: 3_150_000,
                    untracked: 0,
                },
            ),
        ],
        owners: vec![
            PerfOwner {
                pid: 4242,
                comm: "net-agent".into(),
                bpf_outputs: 9_000_000,
                sample_outputs: 0,
                wakeups: 6_298_000,
            },
            PerfOwner {
                pid: 777,
                comm: "perf".into(),
                bpf_outputs: 0,
                sample_outputs: 12_000,
                wakeups: 2_000,
            },
        ],
        owners_tracked: 2,
        rates: Some(PerfRates {
            interval_seconds: 5.0,
            outputs_per_second: 90_000.0,
            wakeups_per_second: 63_000.0,
            wakeup_ratio: 0.7,
            owners: vec![PerfOwnerRate {
                pid: 4242,
                comm: "net-agent".into(),
                outputs_per_second: 90_000.0,
                wakeups_per_second: 63_000.0,
            }],
        }),
        programs: vec![PerfProgramStats {
            function: "perf_event_output".into(),
            run_count: 9_000_000,
            run_time_ns: 450_000_000,
        }],
        ring: PerfRing {
            emitted: 12,
            dropped: 0,
            read: 12,
            storms: 2,
        },
    };
    let mut snapshot = nodemedic_sample::Snapshot {
        timestamp: 1_735_689_600.0,
        ..Default::default()
    };
    snapshot.put(perf);
    let input = ExportInput {
        snapshot: Some(&snapshot),
        verdicts: &[],
        collectors: &[],
        samples_total: 2,
        process: None,
        remediation: None,
        pressure: None,
        host: None,
    };
    let (raw, _) = render(&input, &MetricsOptions::default(), Format::Text);
    for line in [
        "nodemedic_perf_event_wakeup_ratio 0.7",
        "nodemedic_perf_event_owner_wakeups_total{pid=\"4242\",comm=\"net-agent\"} 6298000",
        "nodemedic_probe_up{probe=\"perf_event_wakeup\"} 1",
    ] {
        assert!(raw.lines().any(|l| l == line), "no `{line}` in\n{raw}");
    }
    check_golden("perf-probes", &normalise(&raw));
    promtool_check("perf-probes", &raw);
}
