//! The shipped alerting rules: valid (`promtool check rules`), unit-tested with synthetic
//! series (`promtool test rules`), built only on metrics nodemedic really exports (every
//! `nodemedic_*` name in an expression appears in a golden exposition), and each with a
//! runbook section.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::process::Command;

use common::{golden_dir, prometheus_tool, workspace_root};

const RULES: &str = "deploy/prometheus/nodemedic-alerts.yml";
const RULE_TESTS: &str = "deploy/prometheus/nodemedic-alerts.test.yml";

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
    promtool(&["check", "rules", RULES]);
    promtool(&["test", "rules", RULE_TESTS]);
}

/// `nodemedic_…` metric names in `text`, with the `_bucket`/`_sum`/`_count` of histograms
/// mapped to their family.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("nodemedic_") {
        let start = i + at;
        let boundary =
            start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        let end = text[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(text.len(), |n| start + n);
        if boundary {
            names.insert(text[start..end].to_string());
        }
        i = end;
    }
    names
}

fn exported_families() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for entry in std::fs::read_dir(golden_dir()).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for line in text.lines() {
            // A family is exported when it is declared, even with no sample in this tree
            // (remediation decisions, for one, appear only after a decision).
            let name = match line.strip_prefix("# TYPE ") {
                Some(rest) => rest.split_whitespace().next().unwrap_or(""),
                None if line.starts_with('#') => continue,
                None => common::metric_name(line),
            };
            names.insert(name.to_string());
            for suffix in ["_bucket", "_sum", "_count"] {
                if let Some(base) = name.strip_suffix(suffix) {
                    names.insert(base.to_string());
                }
            }
        }
    }
    names
}

#[test]
fn every_rule_uses_exported_metrics_and_has_a_runbook_section() {
    let root = workspace_root();
    let rules = std::fs::read_to_string(root.join(RULES)).unwrap();
    let exported = exported_families();
    let exprs: String = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("expr:"))
        .collect::<Vec<_>>()
        .join("\n");
    let used = metric_names(&exprs);
    assert!(!used.is_empty(), "no nodemedic metric in any expression");
    let unknown: Vec<&String> = used.difference(&exported).collect();
    assert!(
        unknown.is_empty(),
        "rules use metrics nodemedic does not export: {unknown:?}"
    );

    let runbook = std::fs::read_to_string(root.join("docs/runbook.md")).unwrap();
    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert:"))
        .map(str::trim)
        .collect();
    assert!(alerts.len() >= 4, "{alerts:?}");
    for alert in alerts {
        assert!(
            runbook.lines().any(|l| l.trim() == format!("## {alert}")),
            "docs/runbook.md has no section `## {alert}`"
        );
        let anchor = format!("runbook.md#{}", alert.to_lowercase());
        assert!(rules.contains(&anchor), "{alert} does not link {anchor}");
    }
}

#[test]
fn metric_names_are_extracted_whole() {
    let names = metric_names("max by (g) (nodemedic_irq_collapsed) == 1 and rate(nodemedic_x_total[5m]) > x_nodemedic_no");
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        vec!["nodemedic_irq_collapsed", "nodemedic_x_total"]
    );
}

/// Every PromQL expression in a Grafana dashboard (panel targets and annotations).
fn dashboard_exprs(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("expr", serde_json::Value::String(e)) => out.push(e.clone()),
                    _ => dashboard_exprs(v, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|i| dashboard_exprs(i, out)),
        _ => {}
    }
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
    for e in &exprs {
        let used = metric_names(e);
        assert!(
            !used.is_empty() || e.contains("process_"),
            "query names no metric: {e}"
        );
        let unknown: Vec<&String> = used.difference(&exported).collect();
        assert!(unknown.is_empty(), "{e}: not exported: {unknown:?}");
    }
    // The template variable lists nodes from a metric every nodemedic exports.
    let templ = dash["templating"]["list"].to_string();
    assert!(templ.contains("nodemedic_build_info"), "{templ}");
}
