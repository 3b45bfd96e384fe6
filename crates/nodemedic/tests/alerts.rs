//! The shipped rules (deploy/prometheus: the per-node alerts, and the fleet's recording rules
//! and alert): valid (`promtool check rules`), unit-tested with synthetic series (`promtool
//! test rules`), built only on metrics nodemedic really exports (every metric an expression or
//! an annotation's query names is declared in a golden exposition or recorded by a shipped
//! rule), each alert with a runbook section, and each file shipped by the Helm chart.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::process::Command;

use common::promql::{
    annotation_hints, annotation_queries, dashboard_exprs, families, metric_names, recorded_names,
    shipped_rules, PROMETHEUS_SERIES, RULE_FILES,
};
use common::{golden_dir, prometheus_tool, workspace_root};

const RULE_TESTS: [&str; 2] = [
    "deploy/prometheus/nodemedic-alerts.test.yml",
    "deploy/prometheus/nodemedic-fleet-rules.test.yml",
];

fn promtool(args: &[&str]) {
    let Some(promtool) = prometheus_tool("promtool", "checking the alerting rules") else {
        return;
    };
    let out = Command::new(promtool)
        .args(args)
        .current_dir(workspace_root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn rules_are_valid_and_their_unit_tests_pass() {
    for rules in RULE_FILES {
        promtool(&["check", "rules", rules]);
    }
    for tests in RULE_TESTS {
        promtool(&["test", "rules", tests]);
    }
}

/// Every family declared in a golden exposition.
fn exported_families() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for entry in std::fs::read_dir(golden_dir()).unwrap() {
        names.extend(families(
            &std::fs::read_to_string(entry.unwrap().path()).unwrap(),
        ));
    }
    names
}

/// The names in `query` that are neither exported, nor recorded, nor Prometheus' own.
fn unknown_names(
    query: &str,
    exported: &BTreeSet<String>,
    recorded: &BTreeSet<String>,
) -> Vec<String> {
    metric_names(query)
        .into_iter()
        .filter(|n| {
            !exported.contains(n)
                && !recorded.contains(n)
                && !PROMETHEUS_SERIES.contains(&n.as_str())
        })
        .collect()
}

#[test]
fn every_rule_uses_exported_metrics_and_has_a_runbook_section() {
    let exported = exported_families();
    let recorded = recorded_names();
    let rules = shipped_rules();
    let mut checked = 0;
    for rule in &rules {
        let name = rule.alert.as_ref().or(rule.record.as_ref()).unwrap();
        // The annotations' template queries and PromQL hints too: a misspelt name there
        // leaves a description with an empty list or a hint that returns nothing.
        let mut queries = vec![rule.expr.clone()];
        for text in rule.annotations.values() {
            queries.extend(annotation_queries(text));
            queries.extend(annotation_hints(text));
        }
        for q in &queries {
            assert!(!metric_names(q).is_empty(), "{name}: names no metric: {q}");
            let unknown = unknown_names(q, &exported, &recorded);
            assert!(
                unknown.is_empty(),
                "{name}: {q}\nnames series nodemedic does not export and no shipped rule records: {unknown:?}"
            );
            checked += 1;
        }
    }
    assert!(
        checked > rules.len(),
        "{checked} queries in {} rules",
        rules.len()
    );

    // Recording rules are named level:metric:operations, and the metric is nodemedic's.
    for name in &recorded {
        let parts: Vec<&str> = name.split(':').collect();
        assert!(
            parts.len() == 3 && parts[1].starts_with("nodemedic_") && !parts[2].is_empty(),
            "recording rule {name} is not level:nodemedic_…:operations"
        );
    }

    let runbook = std::fs::read_to_string(workspace_root().join("docs/runbook.md")).unwrap();
    let alerts: Vec<&common::promql::Rule> = rules.iter().filter(|r| r.alert.is_some()).collect();
    assert!(alerts.len() >= 5, "{alerts:?}");
    for rule in alerts {
        let alert = rule.alert.as_deref().unwrap();
        assert!(
            runbook.lines().any(|l| l.trim() == format!("## {alert}")),
            "docs/runbook.md has no section `## {alert}`"
        );
        let anchor = format!(
            "https://example.invalid/nodemedic/docs/runbook.md#{}",
            alert.to_lowercase()
        );
        assert_eq!(
            rule.annotations.get("runbook_url"),
            Some(&anchor),
            "{alert} does not link its runbook section"
        );
    }
}

/// The chart ships every rule file there is, as it is: `files/` links each one, and the
/// PrometheusRule template reads each of them.
#[test]
fn the_chart_ships_every_rule_file() {
    let root = workspace_root();
    let mut on_disk: Vec<String> = std::fs::read_dir(root.join("deploy/prometheus"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yml") && !n.ends_with(".test.yml"))
        .map(|n| format!("deploy/prometheus/{n}"))
        .collect();
    on_disk.sort();
    let mut listed = RULE_FILES.to_vec();
    listed.sort();
    assert_eq!(on_disk, listed, "RULE_FILES vs deploy/prometheus");
    let template =
        std::fs::read_to_string(root.join("deploy/helm/nodemedic/templates/monitoring.yaml"))
            .unwrap();
    for path in RULE_FILES {
        let file = path.rsplit('/').next().unwrap();
        let shipped = root.join("deploy/helm/nodemedic/files").join(file);
        assert_eq!(
            std::fs::read_to_string(&shipped)
                .unwrap_or_else(|e| panic!("{}: {e}", shipped.display())),
            std::fs::read_to_string(root.join(path)).unwrap(),
            "{} differs from {path}",
            shipped.display()
        );
        assert!(
            template.contains(&format!(".Files.Get \"files/{file}\"")),
            "monitoring.yaml does not read files/{file}"
        );
    }
}

#[test]
fn metric_names_are_extracted_whole() {
    let cases: [(&str, &[&str]); 8] = [
        (
            "max by (g) (nodemedic_irq_collapsed) == 1 and rate(nodemedic_x_total[5m]) > x_nodemedic_no",
            &["nodemedic_irq_collapsed", "nodemedic_x_total", "x_nodemedic_no"],
        ),
        (
            "sum by (state, version) ((instance:nodemedic_irq_collapsed_groups:count > bool 0) * on (job, instance) group_left (state, version) nodemedic_irqbalance_info)",
            &["instance:nodemedic_irq_collapsed_groups:count", "nodemedic_irqbalance_info"],
        ),
        (
            "sum by (cpu) (rate(nodemedic_softirqs_total{instance=~\"$instance\",type=\"NET_RX\"}[$__rate_interval]))",
            &["nodemedic_softirqs_total"],
        ),
        ("up{job=~\".*nodemedic.*\"} == 0", &["up"]),
        (
            "topk(3, rate(nodemedic_perf_event_owner_wakeups_total[5m])) offset 1h",
            &["nodemedic_perf_event_owner_wakeups_total"],
        ),
        ("sum without (cpu) (a) / ignoring (x) b or vector(0)", &["a", "b"]),
        ("1.5e3 * foo + 0.1 * $var * ${other}", &["foo"]),
        (
            "state_version:nodemedic_nodes:count{state=%q,version=%q}",
            &["state_version:nodemedic_nodes:count"],
        ),
    ];
    for (expr, want) in cases {
        let got: Vec<String> = metric_names(expr).into_iter().collect();
        assert_eq!(got, want, "{expr}");
    }
    assert_eq!(
        annotation_queries(
            r#"a {{ range query "sort_desc(x > 0)" }}{{ with printf "y{s=%q}" .L | query }}{{ end }}{{ end }}"#
        ),
        ["sort_desc(x > 0)", "y{s=%q}"]
    );
    assert_eq!(
        annotation_hints("run `nodemedic check` or `topk(3, nodemedic_a)`"),
        ["topk(3, nodemedic_a)"]
    );
}

#[test]
fn the_dashboard_queries_only_exported_metrics() {
    let path = workspace_root().join("deploy/grafana/nodemedic.json");
    let dash: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .expect("the dashboard is valid JSON");
    let mut exprs = Vec::new();
    dashboard_exprs(&dash, &mut exprs);
    assert!(exprs.len() >= 10, "{} queries", exprs.len());
    let exported = exported_families();
    let recorded = recorded_names();
    for e in &exprs {
        assert!(!metric_names(e).is_empty(), "query names no metric: {e}");
        let unknown = unknown_names(e, &exported, &recorded);
        assert!(
            unknown.is_empty(),
            "{e}: not exported nor recorded: {unknown:?}"
        );
    }
    // The template variable lists nodes from a metric every nodemedic exports.
    let templ = dash["templating"]["list"].to_string();
    assert!(templ.contains("nodemedic_build_info"), "{templ}");
}
