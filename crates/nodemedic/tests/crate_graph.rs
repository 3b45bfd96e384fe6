//! The shape docs/architecture.md draws, checked against the `Cargo.toml`s: the sample flows
//! down once, every output is a sibling, and the toolkits stand alone. A dependency that
//! breaks the picture fails here, not in a reader's head.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each workspace crate and the nodemedic crates in its `[dependencies]` (dev-dependencies
/// are test wiring, not the shape).
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut graph = BTreeMap::new();
    for entry in std::fs::read_dir(&crates).unwrap() {
        let manifest = entry.unwrap().path().join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        let doc: toml::Table = text.parse().unwrap();
        let name = doc["package"]["name"].as_str().unwrap().to_string();
        let deps = doc
            .get("dependencies")
            .and_then(|d| d.as_table())
            .map(|d| {
                d.keys()
                    .filter(|k| k.starts_with("nodemedic"))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        graph.insert(name, deps);
    }
    graph
}

fn depth(graph: &BTreeMap<String, BTreeSet<String>>, name: &str) -> usize {
    1 + graph[name]
        .iter()
        .map(|d| depth(graph, d))
        .max()
        .unwrap_or(0)
}

/// The outputs: each reads the sample and never another output.
const OUTPUTS: [&str; 3] = ["nodemedic-export", "nodemedic-remedy", "nodemedic-kube"];

#[test]
fn the_graph_is_at_most_six_levels_deep() {
    let g = graph();
    assert!(g.len() >= 12, "found only {:?}", g.keys());
    for name in g.keys() {
        let d = depth(&g, name);
        assert!(d <= 6, "{name} is {d} levels deep: {g:#?}");
    }
    assert_eq!(depth(&g, "nodemedic"), 6, "the binary sits on top");
    // A collector's types live in its module: the detectors read them from the collectors,
    // one level up, and the collectors know no detector.
    assert!(g["nodemedic-detect"].contains("nodemedic-collect"));
    assert_eq!(
        depth(&g, "nodemedic-detect"),
        depth(&g, "nodemedic-collect") + 1
    );
}

#[test]
fn outputs_are_siblings() {
    let g = graph();
    for out in OUTPUTS {
        let deps = &g[out];
        for other in OUTPUTS.iter().chain(&["nodemedic-engine", "nodemedic"]) {
            assert!(!deps.contains(*other), "{out} imports {other}: {deps:?}");
        }
        assert!(
            deps.contains("nodemedic-sample"),
            "{out} reads the sample: {deps:?}"
        );
    }
    // Only the binary wires the engine to the outputs.
    let users: Vec<&String> = g
        .iter()
        .filter(|(_, deps)| deps.contains("nodemedic-engine"))
        .map(|(name, _)| name)
        .collect();
    assert_eq!(users, ["nodemedic"]);
}

#[test]
fn toolkits_and_parsers_stand_alone() {
    let g = graph();
    for alone in [
        "nodemedic-kernel",
        "nodemedic-heap",
        "nodemedic-webkit",
        "nodemedic-exposition",
    ] {
        assert!(g[alone].is_empty(), "{alone} imports {:?}", g[alone]);
    }
    assert_eq!(
        g["nodemedic-sample"],
        BTreeSet::from(["nodemedic-kernel".to_string()]),
        "the sample's types need only the shared vocabulary (CPU sets, PSI resources, workloads)"
    );
    for below_outputs in ["nodemedic-collect", "nodemedic-detect"] {
        for out in OUTPUTS {
            assert!(
                !g[below_outputs].contains(out),
                "{below_outputs} imports {out}"
            );
        }
    }
}
