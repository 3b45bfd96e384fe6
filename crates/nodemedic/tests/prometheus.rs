//! A real Prometheus (Debian's `prometheus` package) scrapes `nodemedic run` on the
//! `8cpu-collapsed` fixture, and its query API sees the collapse.
//!
//! Prometheus 2.x asks for OpenMetrics first, so this also proves its OpenMetrics parser
//! accepts nodemedic's exposition. Needs /usr/bin/prometheus; set NODEMEDIC_SKIP_PROMETHEUS=1
//! to skip (loudly) where it cannot be installed.

// Test helpers outside #[test] fns are meant to panic on failure.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::*;

/// Prometheus applies new targets on a 5 s reload tick, then scrapes: allow generously.
const FIRST_SCRAPE_DEADLINE: Duration = Duration::from_secs(60);

/// The value of the single series a query returns, as Prometheus prints it ("1", "8", …).
fn single_value(prom: &mut Server, q: &str, target: &str) -> String {
    let q = q.to_string();
    let target = target.to_string();
    prom.poll(&format!("a result for {q}"), DEADLINE, move |p| {
        let result = query(p, &q)?;
        match result.as_slice() {
            [] => Err("empty result".into()),
            [one] => {
                assert_eq!(one["metric"]["job"], "nodemedic", "{q}: job label in {one}");
                assert_eq!(
                    one["metric"]["instance"],
                    target.as_str(),
                    "{q}: instance label in {one}"
                );
                one["value"][1]
                    .as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("no value in {one}"))
            }
            many => panic!("{q}: expected one series, got {}: {many:?}", many.len()),
        }
    })
}

#[test]
fn prometheus_scrapes_the_collapse() {
    let Some(prometheus) = prometheus_tool("prometheus", "the real-Prometheus scrape test") else {
        return;
    };

    let mut nodemedic = start_nodemedic("8cpu-collapsed", FAST_CONFIG);
    wait_for_samples(&mut nodemedic, 3);
    let target = format!("127.0.0.1:{}", nodemedic.port);
    // A second node: Kubernetes pods with CPU quotas and pressure.
    let mut k8s = start_nodemedic("k8s-systemd-v2", FAST_CONFIG);
    wait_for_samples(&mut k8s, 2);
    let k8s_target = format!("127.0.0.1:{}", k8s.port);
    // What Prometheus should ingest per scrape: every sample line (the set is stable).
    let expected_samples = sample_lines(&nodemedic.get("/metrics").body).count();

    let mut prom = start_prometheus(
        &prometheus,
        &format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: nodemedic\n    static_configs:\n      - targets: ['{target}', '{k8s_target}']\n"
        ),
    );

    prom.poll("up{job=\"nodemedic\"} == 1", FIRST_SCRAPE_DEADLINE, |p| {
        let result = query(p, "min(up{job=\"nodemedic\"})")?;
        match result.first().and_then(|s| s["value"][1].as_str()) {
            Some("1") => Ok(()),
            other => Err(format!("up = {other:?}; targets: {}", target_state(p))),
        }
    });

    assert_eq!(
        single_value(
            &mut prom,
            &format!("nodemedic_irq_collapsed{{group=\"virtio2\",instance=\"{target}\"}}"),
            &target
        ),
        "1",
        "virtio2 should be reported collapsed"
    );
    assert_eq!(
        single_value(
            &mut prom,
            &format!(
                "nodemedic_irq_group_effective_cpus{{group=\"virtio2\",instance=\"{target}\"}}"
            ),
            &target
        ),
        "2",
        "virtio2's IRQs are delivered to CPUs 4-5"
    );
    assert_eq!(
        single_value(
            &mut prom,
            &format!(
                "nodemedic_irq_group_eligible_cpus{{group=\"virtio2\",instance=\"{target}\"}}"
            ),
            &target
        ),
        "8",
        "all 8 CPUs are eligible (no NUMA, none isolated)"
    );
    // Nothing dropped on the way in: Prometheus ingested every sample nodemedic exposes.
    let scraped = single_value(
        &mut prom,
        &format!("scrape_samples_scraped{{job=\"nodemedic\",instance=\"{target}\"}}"),
        &target,
    );
    assert_eq!(
        scraped,
        expected_samples.to_string(),
        "scrape_samples_scraped vs the sample lines of /metrics"
    );
    // The pressure families arrive too: the HPC pod's hidden 10-CPU quota, by pod UID and QoS.
    let hpc = "pod_uid=\"8f14e45f-ceea-467f-a0e6-4f1a2b3c4d5e\",qos=\"guaranteed\"";
    assert_eq!(
        single_value(
            &mut prom,
            &format!("nodemedic_cgroup_cpu_quota_cores{{{hpc}}}"),
            &k8s_target
        ),
        "10"
    );
    assert_eq!(
        single_value(
            &mut prom,
            &format!("nodemedic_pressure_avg_ratio{{instance=\"{k8s_target}\",resource=\"cpu\",kind=\"some\",window=\"10s\"}}"),
            &k8s_target
        ),
        "0.1204"
    );
    // `prom` then `nodemedic` are killed here by their guards.
}
