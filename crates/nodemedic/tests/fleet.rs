//! The dashboard's Fleet row against a real Prometheus: two `nodemedic run`s, one on a
//! collapsed fixture tree (`8cpu-collapsed`) and one on a healthy node with pods
//! (`k8s-systemd-v2`), scraped by Prometheus with the shipped rule files loaded.
//!
//! Every query of the row names only series the two daemons export (read from their
//! /metrics) or recording rules the shipped files define, so a renamed or misspelt series
//! fails here instead of drawing an empty panel; and every query returns data, with the node
//! counts of the two trees. Needs /usr/bin/prometheus for the second half; set
//! NODEMEDIC_SKIP_PROMETHEUS=1 to skip it (loudly) where it cannot be installed.

// Test helpers outside #[test] fns are meant to panic on failure.
#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::promql::{families, metric_names, recorded_names, rule_file, RULE_FILES};
use common::*;
use serde_json::Value;

/// Prometheus applies new targets on a 5 s reload tick, scrapes, then evaluates the rules.
const FIRST_RESULT_DEADLINE: Duration = Duration::from_secs(60);

const FLEET_RULES: &str = "deploy/prometheus/nodemedic-fleet-rules.yml";

/// The info series the fleet groups by: exactly one series per node, always.
const INFO_SERIES: [&str; 3] = [
    "nodemedic_build_info",
    "nodemedic_irqbalance_info",
    "nodemedic_node_info",
];

/// One query of the Fleet row.
struct Query {
    panel: String,
    legend: Option<String>,
    expr: String,
}

fn dashboard() -> Value {
    let path = workspace_root().join("deploy/grafana/nodemedic.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .expect("the dashboard is valid JSON")
}

/// The panels of the Fleet row: those after its row panel, up to the next row. The row is the
/// dashboard's first, since it is what an SRE opens first, and open, so that its panels follow
/// it in `panels` rather than sitting inside it.
fn fleet_panels(dash: &Value) -> Vec<&Value> {
    let panels = dash["panels"].as_array().expect("the dashboard has panels");
    let row = &panels[0];
    assert_eq!(
        (row["type"].as_str(), row["title"].as_str()),
        (Some("row"), Some("Fleet")),
        "the dashboard's first panel is not the Fleet row"
    );
    assert_eq!(row["collapsed"], false, "the Fleet row is collapsed");
    panels[1..]
        .iter()
        .take_while(|p| p["type"] != "row")
        .collect()
}

fn fleet_queries(dash: &Value) -> Vec<Query> {
    let mut out = Vec::new();
    for panel in fleet_panels(dash) {
        let title = panel["title"].as_str().unwrap_or("?").to_string();
        let targets = panel["targets"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        assert!(!targets.is_empty(), "panel {title:?} has no query");
        for t in targets {
            out.push(Query {
                panel: title.clone(),
                legend: t["legendFormat"].as_str().map(str::to_string),
                expr: t["expr"]
                    .as_str()
                    .unwrap_or_else(|| panic!("panel {title:?}: a target without expr"))
                    .to_string(),
            });
        }
    }
    out
}

/// A node's row in the node table opens the dashboard on that node: a data link that sets
/// the `instance` variable, which the per-node rows filter on.
fn assert_drill_down(dash: &Value) {
    let vars: Vec<&str> = dash["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert!(vars.contains(&"instance"), "no instance variable: {vars:?}");
    let links: Vec<String> = fleet_panels(dash)
        .iter()
        .flat_map(|p| {
            p["fieldConfig"]["overrides"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .flat_map(|o| o["properties"].as_array().cloned().unwrap_or_default())
        .filter(|prop| prop["id"] == "links")
        .flat_map(|prop| prop["value"].as_array().cloned().unwrap_or_default())
        .filter_map(|l| l["url"].as_str().map(str::to_string))
        .collect();
    assert!(
        links
            .iter()
            .any(|u| u.starts_with("/d/${__dashboard.uid}")
                && u.contains("var-instance=${__value.raw}")),
        "no Fleet-row link to this dashboard's per-node rows: {links:?}"
    );
    let per_node = dash["panels"]
        .as_array()
        .unwrap()
        .iter()
        .skip_while(|p| p["type"] != "row" || p["title"] == "Fleet")
        .filter(|p| p["type"] != "row")
        .count();
    assert!(per_node > 0, "no per-node rows after the Fleet row");
}

#[test]
fn the_fleet_row_queries_exported_series_and_each_returns_data() {
    let dash = dashboard();
    let queries = fleet_queries(&dash);
    assert!(queries.len() >= 10, "{} Fleet queries", queries.len());
    for q in &queries {
        // The row is about every node at once; the test sends the queries as they are.
        assert!(
            !q.expr.contains('$'),
            "{}: `{}` uses a dashboard variable",
            q.panel,
            q.expr
        );
    }
    assert_drill_down(&dash);

    let mut collapsed = start_nodemedic("8cpu-collapsed", FAST_CONFIG);
    let mut healthy = start_nodemedic("k8s-systemd-v2", FAST_CONFIG);
    wait_for_samples(&mut collapsed, 3);
    wait_for_samples(&mut healthy, 2);

    // What nodemedic exports is what these two daemons declare on /metrics.
    let mut exported = BTreeSet::new();
    for node in [&collapsed, &healthy] {
        let body = node.get("/metrics").body;
        exported.extend(families(&body));
        for info in INFO_SERIES {
            let n = sample_lines(&body)
                .filter(|l| metric_name(l) == info)
                .count();
            assert_eq!(
                n, 1,
                "nodemedic on port {} exports {n} {info} series, not exactly one",
                node.port
            );
        }
    }
    let recorded = recorded_names();
    let known = |n: &String| exported.contains(n) || recorded.contains(n);
    for q in &queries {
        let names = metric_names(&q.expr);
        assert!(
            !names.is_empty(),
            "{}: `{}` names no metric",
            q.panel,
            q.expr
        );
        let unknown: Vec<&String> = names.iter().filter(|n| !known(n)).collect();
        assert!(
            unknown.is_empty(),
            "{}: `{}` names series nodemedic does not export and no shipped rule records: {unknown:?}",
            q.panel,
            q.expr
        );
    }
    // The rules behind those queries read only what the daemons export, too.
    for rule in rule_file(FLEET_RULES).groups.iter().flat_map(|g| &g.rules) {
        let unknown: Vec<String> = metric_names(&rule.expr)
            .into_iter()
            .filter(|n| !known(n))
            .collect();
        assert!(
            unknown.is_empty(),
            "{FLEET_RULES}: `{}` names series nodemedic does not export: {unknown:?}",
            rule.expr
        );
    }

    let Some(prometheus) = prometheus_tool("prometheus", "the Fleet row's real-Prometheus test")
    else {
        return;
    };
    let targets = format!(
        "'127.0.0.1:{}', '127.0.0.1:{}'",
        collapsed.port, healthy.port
    );
    let rule_files: Vec<String> = RULE_FILES
        .iter()
        .map(|f| format!("  - '{}'\n", workspace_root().join(f).display()))
        .collect();
    let mut prom = start_prometheus(
        &prometheus,
        &format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n{}\
             scrape_configs:\n  - job_name: nodemedic\n    static_configs:\n      - targets: [{targets}]\n",
            rule_files.concat()
        ),
    );
    prom.poll("both targets up", FIRST_RESULT_DEADLINE, |p| {
        let result = query(p, "count(up{job=\"nodemedic\"} == 1)")?;
        match result.first().and_then(|s| s["value"][1].as_str()) {
            Some("2") => Ok(()),
            other => Err(format!("{other:?} up; targets: {}", target_state(p))),
        }
    });

    for q in &queries {
        let expr = q.expr.clone();
        let result = prom.poll(
            &format!("data for `{}` ({})", q.expr, q.panel),
            FIRST_RESULT_DEADLINE,
            move |p| match query(p, &expr)? {
                r if r.is_empty() => Err("empty result".into()),
                r => Ok(r),
            },
        );
        eprintln!("{} | {}: {} series", q.panel, q.expr, result.len());
    }

    // The node counts are those of the two trees: the collapsed one (virtio2) and the healthy
    // one, whose pods are neither quota-bound nor starved and which has no tuning warning.
    let by_state: Vec<&Query> = queries
        .iter()
        .filter(|q| q.panel == "Nodes by state")
        .collect();
    for (legend, want) in [
        ("nodes", "2"),
        ("healthy", "1"),
        ("collapsed", "1"),
        ("quota-bound pods", "0"),
        ("starved pods", "0"),
        ("tuning warnings", "0"),
    ] {
        let q = by_state
            .iter()
            .find(|q| q.legend.as_deref() == Some(legend))
            .unwrap_or_else(|| panic!("Nodes by state has no `{legend}` query"));
        let expr = q.expr.clone();
        prom.poll(
            &format!("{legend} = {want} (`{}`)", q.expr),
            FIRST_RESULT_DEADLINE,
            move |p| {
                let result = query(p, &expr)?;
                let got: Vec<&str> = result
                    .iter()
                    .filter_map(|s| s["value"][1].as_str())
                    .collect();
                if got == [want] {
                    Ok(())
                } else {
                    Err(format!("got {got:?}"))
                }
            },
        );
    }
    // The versions running: both daemons are this build, so one version on two nodes.
    let versions = queries
        .iter()
        .find(|q| q.panel == "nodemedic versions running")
        .expect("the Fleet row has no `nodemedic versions running` panel");
    let expr = versions.expr.clone();
    prom.poll(
        &format!(
            "two nodes on {} (`{}`)",
            env!("CARGO_PKG_VERSION"),
            versions.expr
        ),
        FIRST_RESULT_DEADLINE,
        move |p| {
            let result = query(p, &expr)?;
            let got: Vec<(&str, &str)> = result
                .iter()
                .filter_map(|s| Some((s["metric"]["version"].as_str()?, s["value"][1].as_str()?)))
                .collect();
            if got == [(env!("CARGO_PKG_VERSION"), "2")] {
                Ok(())
            } else {
                Err(format!("got {got:?}"))
            }
        },
    );
    // `prom` then the two daemons are killed here by their guards.
}
