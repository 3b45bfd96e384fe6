//! What the shipped rules and the dashboard query: the metric names in a PromQL expression,
//! the families an exposition declares, and the shipped rule files (deploy/prometheus, also in
//! the Helm chart). Used to prove that every query names a series nodemedic exports or a
//! recording rule the shipped files define, so a renamed or misspelt series fails a test
//! instead of drawing an empty panel.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use super::workspace_root;

/// The rule files nodemedic ships (the chart's `files/` links to each).
pub const RULE_FILES: [&str; 2] = [
    "deploy/prometheus/nodemedic-alerts.yml",
    "deploy/prometheus/nodemedic-fleet-rules.yml",
];

/// Series Prometheus makes itself for every target, which a rule may use (NodemedicDown).
pub const PROMETHEUS_SERIES: [&str; 1] = ["up"];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleFile {
    pub groups: Vec<RuleGroup>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleGroup {
    pub name: String,
    pub rules: Vec<Rule>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub record: Option<String>,
    pub alert: Option<String>,
    pub expr: String,
    #[serde(rename = "for")]
    pub for_: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// A shipped rule file, parsed.
pub fn rule_file(path: &str) -> RuleFile {
    let text = std::fs::read_to_string(workspace_root().join(path))
        .unwrap_or_else(|e| panic!("reading {path}: {e}"));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("parsing {path}: {e}"))
}

/// Every rule of every shipped file.
pub fn shipped_rules() -> Vec<Rule> {
    RULE_FILES
        .iter()
        .flat_map(|f| rule_file(f).groups)
        .flat_map(|g| g.rules)
        .collect()
}

/// The names the shipped recording rules define.
pub fn recorded_names() -> BTreeSet<String> {
    shipped_rules()
        .into_iter()
        .filter_map(|r| r.record)
        .collect()
}

/// The families an exposition declares (`# TYPE`), and the names of its samples, with the
/// `_bucket`/`_sum`/`_count` of histograms mapped to their family too. A family counts as
/// exported when it is declared even with no sample (remediation decisions, for one, appear
/// only after a decision).
pub fn families(exposition: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in exposition.lines() {
        let name = match line.strip_prefix("# TYPE ") {
            Some(rest) => rest.split_whitespace().next().unwrap_or(""),
            None if line.starts_with('#') || line.trim().is_empty() => continue,
            None => super::metric_name(line),
        };
        names.insert(name.to_string());
        for suffix in ["_bucket", "_sum", "_count"] {
            if let Some(base) = name.strip_suffix(suffix) {
                names.insert(base.to_string());
            }
        }
    }
    names
}

const AGGREGATIONS: [&str; 14] = [
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];
/// Keywords followed by a parenthesised list of label names.
const LABEL_LISTS: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
const KEYWORDS: [&str; 9] = [
    "and", "or", "unless", "bool", "offset", "atan2", "inf", "nan", "NaN",
];

/// The metric names a PromQL expression selects: every identifier that is not a function or
/// aggregation, a keyword, a label name (in `{…}`, `by (…)`, `on (…)`, …), a string, a number
/// or duration, or a Grafana variable (`$instance`, `${__rate_interval}`). Recording rule
/// names (`level:metric:operations`) come out whole. Rough by design: it only has to be exact
/// on the queries this repository ships, which its unit test covers.
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    let b = expr.as_bytes();
    let mut names = BTreeSet::new();
    let mut i = 0;
    // Index just past the bracket that closes the one opened at `i`, skipping strings.
    let skip_group = |mut i: usize, open: u8, close: u8| -> usize {
        let mut depth = 0;
        while i < b.len() {
            match b[i] {
                q @ (b'"' | b'\'' | b'`') => i = skip_string(b, i, q),
                c if c == open => {
                    depth += 1;
                    i += 1;
                }
                c if c == close => {
                    depth -= 1;
                    i += 1;
                    if depth == 0 {
                        return i;
                    }
                }
                _ => i += 1,
            }
        }
        i
    };
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b':';
    while i < b.len() {
        match b[i] {
            q @ (b'"' | b'\'' | b'`') => i = skip_string(b, i, q),
            b'{' => i = skip_group(i, b'{', b'}'),
            b'[' => i = skip_group(i, b'[', b']'),
            b'#' => {
                i = b[i..]
                    .iter()
                    .position(|&c| c == b'\n')
                    .map_or(b.len(), |n| i + n)
            }
            b'$' => {
                i += 1;
                if b.get(i) == Some(&b'{') {
                    i = skip_group(i, b'{', b'}');
                } else {
                    while i < b.len() && ident(b[i]) {
                        i += 1;
                    }
                }
            }
            c if c.is_ascii_digit()
                || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) =>
            {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.') {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == b'_' || c == b':' => {
                let start = i;
                while i < b.len() && ident(b[i]) {
                    i += 1;
                }
                let word = &expr[start..i];
                let mut next = i;
                while next < b.len() && b[next].is_ascii_whitespace() {
                    next += 1;
                }
                let call = b.get(next) == Some(&b'(');
                if LABEL_LISTS.contains(&word) {
                    if call {
                        i = skip_group(next, b'(', b')');
                    }
                } else if !(call || AGGREGATIONS.contains(&word) || KEYWORDS.contains(&word)) {
                    names.insert(word.to_string());
                }
            }
            _ => i += 1,
        }
    }
    names
}

/// Index just past the string literal that starts at `i` with quote `q`.
fn skip_string(b: &[u8], mut i: usize, q: u8) -> usize {
    i += 1;
    while i < b.len() {
        match b[i] {
            b'\\' if q != b'`' => i += 2,
            c if c == q => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// The PromQL queries in a rule's annotations: the strings of `query "…"` template calls, and
/// the strings formatted into a query (`printf "…" … | query`; the `%q` verbs sit in label
/// matchers, which `metric_names` skips).
pub fn annotation_queries(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for marker in ["query \"", "printf \""] {
        let mut rest = text;
        while let Some(at) = rest.find(marker) {
            let body = &rest[at + marker.len()..];
            let end = body.find('"').unwrap_or(body.len());
            out.push(body[..end].to_string());
            rest = &body[end..];
        }
    }
    out
}

/// The PromQL shown between backticks in an annotation (hints such as
/// `` `count by (mode) (nodemedic_remediation_mode == 1)` ``) that names a nodemedic series.
pub fn annotation_hints(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| s.contains("nodemedic_"))
        .map(str::to_string)
        .collect()
}

/// Every PromQL expression in a Grafana dashboard (panel targets and annotations), appended to
/// `out`.
pub fn dashboard_exprs(v: &serde_json::Value, out: &mut Vec<String>) {
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
