//! The Helm chart (deploy/helm/nodemedic): deploy/kubernetes/nodemedic.yaml is exactly its
//! rendering with default values, the privileges, mounts and RBAC follow the enabled
//! features and nothing else, and the configuration it generates is one nodemedic accepts.
//! Helm is built from the Go module proxy by tests/k8s/build-helm.sh (cached).
//! The manifests on a real kube-apiserver with Pod Security admission: tests/kubernetes.rs.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::process::Command;

use common::{helm, nodemedic_bin, render, workspace_root};

const RENDERED: &str = "deploy/kubernetes/nodemedic.yaml";

/// The YAML document of `kind`.
fn doc<'a>(all: &'a str, kind: &str) -> &'a str {
    all.split("\n---")
        .find(|d| d.lines().any(|l| l == format!("kind: {kind}")))
        .unwrap_or_else(|| panic!("no {kind} in:\n{all}"))
}

/// The nodemedic.toml block of the ConfigMap.
fn config_toml(all: &str) -> String {
    let cm = doc(all, "ConfigMap");
    let start = cm.find("nodemedic.toml: |").unwrap();
    cm[start..]
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("    ") || l.is_empty())
        .map(|l| l.strip_prefix("    ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_plain_manifests_are_the_chart_rendered_with_defaults() {
    let rendered = render(&[]);
    let path = workspace_root().join(RENDERED);
    if std::env::var("UPDATE_GOLDEN").as_deref() == Ok("1") {
        std::fs::write(&path, &rendered).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap();
    if committed != rendered {
        let diff = similar::TextDiff::from_lines(&committed, &rendered);
        panic!(
            "{RENDERED} differs from `helm template` of deploy/helm/nodemedic (UPDATE_GOLDEN=1 rewrites it):\n{}",
            diff.unified_diff().header(RENDERED, "helm template")
        );
    }
}

#[test]
fn privileges_mounts_and_rbac_follow_the_features() {
    let default = render(&[]);
    let ds = doc(&default, "DaemonSet");
    for want in [
        "hostPID: false",
        "privileged: false",
        "readOnlyRootFilesystem: true",
        "allowPrivilegeEscalation: false",
        "drop: [\"ALL\"]",
        "- BPF",
        "- PERFMON",
        "runAsUser: 0",
        "path: /run/dbus/system_bus_socket",
        "priorityClassName: system-node-critical",
        "fieldPath: spec.nodeName",
    ] {
        assert!(ds.contains(want), "default DaemonSet lacks {want:?}:\n{ds}");
    }
    assert!(
        !ds.contains("SYS_RESOURCE") && !ds.contains("SYS_ADMIN"),
        "{ds}"
    );
    // Requests equal limits (a guaranteed pod).
    let res = &ds[ds.find("resources:").unwrap()..];
    let requests = &res[res.find("requests:").unwrap()..res.find("limits:").unwrap()];
    let limits = &res[res.find("limits:").unwrap()..res.find("securityContext").unwrap()];
    assert_eq!(
        requests.replace("requests:", "").trim(),
        limits.replace("limits:", "").trim()
    );
    let proc_mount = &ds[ds.find("mountPath: /host/proc").unwrap()..];
    assert!(proc_mount
        .lines()
        .nth(1)
        .unwrap()
        .contains("readOnly: true"));
    let ns = doc(&default, "Namespace");
    assert!(
        ns.contains("pod-security.kubernetes.io/enforce: privileged"),
        "{ns}"
    );
    let role = doc(&default, "ClusterRole");
    assert!(role.contains(r#"verbs: ["get"]"#), "{role}");
    assert!(role.contains(r#"resources: ["pods"]"#), "{role}");

    let label = render(&["features.nodeLabel=true"]);
    assert!(doc(&label, "ClusterRole").contains(r#"verbs: ["get", "patch"]"#));

    let native = render(&["features.nativeRebalance=true"]);
    let ds = doc(&native, "DaemonSet");
    let proc_mount = &ds[ds.find("mountPath: /host/proc").unwrap()..];
    assert!(proc_mount
        .lines()
        .nth(1)
        .unwrap()
        .contains("readOnly: false"));

    let observe_only = render(&[
        "features.probes=false",
        "features.irqbalanceRestart=false",
        "features.podNames=false",
    ]);
    let ds = doc(&observe_only, "DaemonSet");
    assert!(
        ds.contains("runAsNonRoot: true") && ds.contains("runAsUser: 65534"),
        "{ds}"
    );
    assert!(!ds.contains("add:") && !ds.contains("dbus"), "{ds}");
    assert!(!doc(&observe_only, "ClusterRole").contains("pods"));

    let memlock = render(&["features.probesMemlock=true"]);
    assert!(doc(&memlock, "DaemonSet").contains("- SYS_RESOURCE"));
}

#[test]
fn the_generated_configuration_is_accepted_by_nodemedic() {
    for set in [
        vec![],
        vec!["features.nativeRebalance=true", "features.podNames=false"],
        vec![
            "features.irqbalanceRestart=false",
            "features.nodeLabel=true",
        ],
        vec!["features.probes=false"],
    ] {
        let toml = config_toml(&render(&set));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nodemedic.toml");
        std::fs::write(&path, &toml).unwrap();
        let out = Command::new(nodemedic_bin())
            .arg("--config")
            .arg(&path)
            .arg("config")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{set:?}: nodemedic rejects the chart's configuration:\n{toml}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let effective = String::from_utf8_lossy(&out.stdout);
        assert!(effective.contains("host_root = \"/host\""), "{effective}");
        let native = set.contains(&"features.nativeRebalance=true");
        assert!(
            effective.contains(&format!("[remediation.native]\nenabled = {native}")),
            "{effective}"
        );
        // The probes run exactly when the chart grants their capabilities.
        let probes = !set.contains(&"features.probes=false");
        assert!(
            effective.contains(&format!("[probes]\nenabled = {probes}")),
            "{effective}"
        );
    }
}

#[test]
fn the_man_page_is_generated_from_the_command_line_definitions() {
    let out = Command::new(nodemedic_bin()).arg("man").output().unwrap();
    assert!(out.status.success());
    let roff = String::from_utf8(out.stdout).unwrap();
    assert!(roff.contains(".TH nodemedic 1"), "{roff}");
    for word in ["check", "run", "\\-\\-host\\-root", "\\-\\-path.procfs"] {
        assert!(roff.contains(word), "{word} missing from the man page");
    }
    // Hidden test and packaging commands stay out of the user's manual.
    assert!(!roff.contains("hang") && !roff.contains("Print the man page"));
}

/// `webConfig.secretName`: the Secret is mounted read-only at /etc/nodemedic/web and passed
/// as `--web.config.file`; the kubelet's checks follow `webConfig.probe` (HTTPS, or a TCP
/// connection when the endpoint wants credentials); anything else is refused at render time.
/// `scrapeEndpoint` reaches the ServiceMonitor and PodMonitor. (The Secret's file layout and
/// its update: web_config.rs, `a_secret_volume_update_swapping_data_is_served_without_a_restart`.)
#[test]
fn web_config_secret_is_mounted_passed_and_probed_accordingly() {
    let plain = render(&[]);
    let ds = doc(&plain, "DaemonSet");
    assert!(
        !ds.contains("web.config.file") && !ds.contains("web-config"),
        "{ds}"
    );
    assert!(
        !ds.contains("scheme: HTTPS") && !ds.contains("tcpSocket"),
        "{ds}"
    );

    let tls = render(&["webConfig.secretName=nodemedic-web"]);
    let ds = doc(&tls, "DaemonSet");
    assert!(
        ds.contains(r#""--web.config.file", "/etc/nodemedic/web/web-config.yml"]"#),
        "{ds}"
    );
    let mount = &ds[ds
        .find("- name: web-config\n              mountPath:")
        .unwrap()..];
    assert!(
        mount
            .lines()
            .take(3)
            .collect::<Vec<_>>()
            .join("\n")
            .contains("mountPath: /etc/nodemedic/web\n              readOnly: true"),
        "{mount}"
    );
    assert!(
        ds.contains("secret:\n            secretName: nodemedic-web"),
        "{ds}"
    );
    assert_eq!(ds.matches("scheme: HTTPS").count(), 2, "{ds}");

    let tcp = render(&["webConfig.secretName=nodemedic-web", "webConfig.probe=tcp"]);
    let ds = doc(&tcp, "DaemonSet");
    assert_eq!(ds.matches("tcpSocket:").count(), 2, "{ds}");
    assert!(!ds.contains("httpGet"), "{ds}");

    let out = Command::new(helm())
        .args(["template", "nodemedic", "deploy/helm/nodemedic"])
        .args([
            "--set",
            "webConfig.secretName=x",
            "--set",
            "webConfig.probe=http",
        ])
        .current_dir(workspace_root())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("webConfig.probe must be https or tcp"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let monitors = render(&[
        "serviceMonitor.enabled=true",
        "podMonitor.enabled=true",
        "scrapeEndpoint.scheme=https",
        "scrapeEndpoint.tlsConfig.insecureSkipVerify=true",
    ]);
    for kind in ["ServiceMonitor", "PodMonitor"] {
        let m = doc(&monitors, kind);
        assert!(
            m.contains("scheme: https\n      tlsConfig:\n        insecureSkipVerify: true"),
            "{m}"
        );
    }
}
