//! Kubernetes against a real kube-apiserver (tests/k8s: v1.33 on etcd, loopback only).
//! - The shipped manifests (deploy/kubernetes/nodemedic.yaml, the Helm chart rendered) apply,
//!   and Pod Security admission admits their pod in the namespace as labelled and rejects it
//!   under "baseline".
//! - nodemedic runs with a ServiceAccount token bound to exactly the ClusterRole shipped
//!   there: the condition, label and Events land; a verb outside the role is forbidden; pod
//!   names resolve from one watch; the pause annotation stops remediation decisions.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{render, start_server, workspace_root, Server};
use nodemedic_testkit::{fixture, poll_until};
use serde_json::Value;

const NODE: &str = "nm-test-node";
/// The namespace of deploy/kubernetes/nodemedic.yaml.
const NAMESPACE: &str = "nodemedic";
const MANIFESTS: &str = "deploy/kubernetes/nodemedic.yaml";

struct Cluster {
    dir: tempfile::TempDir,
    kubectl: PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(workspace_root().join("tests/k8s/stop-apiserver.sh"))
            .arg(self.dir.path())
            .status();
    }
}

impl Cluster {
    fn start() -> Cluster {
        let root = workspace_root();
        let build = Command::new("bash")
            .arg(root.join("tests/k8s/build-apiserver.sh"))
            .status()
            .expect("running tests/k8s/build-apiserver.sh");
        assert!(
            build.success(),
            "building kube-apiserver failed (tests/k8s/build-apiserver.sh)"
        );
        let dir = tempfile::tempdir().unwrap();
        let start = Command::new("bash")
            .arg(root.join("tests/k8s/start-apiserver.sh"))
            .arg(dir.path())
            .stdin(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(
            start.success(),
            "starting kube-apiserver failed; logs in {}",
            dir.path().display()
        );
        let cache = std::env::var("NODEMEDIC_K8S_CACHE")
            .unwrap_or_else(|_| "/var/cache/nodemedic-k8s".into());
        Cluster {
            dir,
            kubectl: PathBuf::from(cache).join("bin/kubectl"),
        }
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("admin.kubeconfig")
    }

    fn env(&self, key: &str) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("env")).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("{key} not in env"))
            .to_string()
    }

    /// Runs kubectl with the given kubeconfig; returns (success, stdout, stderr).
    fn kubectl_as(
        &self,
        kubeconfig: &Path,
        args: &[&str],
        stdin: Option<&str>,
    ) -> (bool, String, String) {
        let mut cmd = Command::new(&self.kubectl);
        cmd.arg("--kubeconfig").arg(kubeconfig).args(args);
        cmd.stdin(if stdin.is_some() {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        });
        cmd.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().expect("kubectl");
        if let Some(input) = stdin {
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
        }
        let out = child.wait_with_output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn kubectl(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.kubectl_as(&self.kubeconfig(), args, None);
        assert!(ok, "kubectl {args:?}: {err}");
        out
    }

    /// Applies the shipped manifests for real (no kubelet runs, so the DaemonSet stays inert).
    fn apply_manifests(&self) {
        let path = workspace_root().join(MANIFESTS);
        let path = path.to_str().unwrap();
        self.kubectl(&["apply", "--server-side", "-f", path]);
    }

    fn node(&self) -> Value {
        serde_json::from_str(&self.kubectl(&[
            "get",
            "node",
            NODE,
            "-o",
            "json",
            "--show-managed-fields",
        ]))
        .unwrap()
    }

    fn event_reasons(&self) -> Vec<String> {
        let v: Value = serde_json::from_str(&self.kubectl(&[
            "get",
            "events.events.k8s.io",
            "-n",
            "default",
            "-o",
            "json",
        ]))
        .unwrap();
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["regarding"]["name"] == NODE)
            .map(|e| e["reason"].as_str().unwrap_or("").to_string())
            .collect()
    }

    /// A kubeconfig that authenticates as the nodemedic ServiceAccount.
    fn service_account_kubeconfig(&self) -> PathBuf {
        let token = self.kubectl(&[
            "create",
            "token",
            "nodemedic",
            "-n",
            NAMESPACE,
            "--duration",
            "1h",
        ]);
        let path = self.dir.path().join("nodemedic.kubeconfig");
        let config = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: nodemedic\n  user:\n    token: {}\ncontexts:\n- name: test\n  context: {{cluster: test, user: nodemedic}}\ncurrent-context: test\n",
            self.env("APISERVER_URL"),
            self.env("CA_FILE"),
            token.trim()
        );
        std::fs::write(&path, config).unwrap();
        path
    }
}

/// A pod bound to `node` (no kubelet runs, so it stays Pending).
/// A containerd container ID (64 hex digits), as in the pod's status and the scope's name.
const CONTAINER: &str = "c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00";

fn create_pod(cluster: &Cluster, namespace: &str, name: &str, node: &str) {
    // The ServiceAccount admission plugin wants the namespace's default account, which no
    // controller-manager creates here.
    let _ = cluster.kubectl_as(
        &cluster.kubeconfig(),
        &["create", "namespace", namespace],
        None,
    );
    let _ = cluster.kubectl_as(
        &cluster.kubeconfig(),
        &["create", "serviceaccount", "default", "-n", namespace],
        None,
    );
    let pod = format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"{namespace}"}},"spec":{{"nodeName":"{node}","automountServiceAccountToken":false,"containers":[{{"name":"app","image":"registry.invalid/app"}}]}}}}"#
    );
    let (ok, _, err) =
        cluster.kubectl_as(&cluster.kubeconfig(), &["create", "-f", "-"], Some(&pod));
    assert!(ok, "creating pod {namespace}/{name}: {err}");
}

/// A cgroup v2 tree (systemd driver) holding one best-effort pod and its container.
fn pod_cgroups(dir: &Path, uid: &str, container_id: &str) {
    let pod = dir.join(format!(
        "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice",
        uid.replace('-', "_")
    ));
    let scope = pod.join(format!("cri-containerd-{container_id}.scope"));
    std::fs::create_dir_all(&scope).unwrap();
    std::fs::write(dir.join("cgroup.controllers"), "cpu io memory pids\n").unwrap();
    for d in [&pod, &scope] {
        std::fs::write(d.join("cpu.max"), "max 100000\n").unwrap();
        std::fs::write(
            d.join("cpu.stat"),
            "usage_usec 5000\nuser_usec 4000\nsystem_usec 1000\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\n",
        )
        .unwrap();
        for r in ["cpu", "memory", "io"] {
            std::fs::write(
                d.join(format!("{r}.pressure")),
                "some avg10=0.00 avg60=0.00 avg300=0.00 total=100\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
            )
            .unwrap();
        }
    }
}

fn start_nodemedic(kubeconfig: &Path, cgroupfs: &Path) -> Server {
    let tree = fixture("8cpu-collapsed");
    let config = format!(
        r#"sample_interval = "200ms"
[detector.collapse]
raise_after = 2
[remediation]
mode = "dry-run"
{remediation}[kubernetes]
enabled = "always"
node_name = "{NODE}"
label = true
events_per_minute = 60
[cgroups]
containers = true
"#,
        remediation = common::FAST_NATIVE_REMEDIATION
    );
    let kubeconfig = kubeconfig.to_path_buf();
    let cgroupfs = cgroupfs.to_path_buf();
    start_server("nodemedic", "/healthz", move |port, dir| {
        let cfg = dir.join("nodemedic.toml");
        std::fs::write(&cfg, &config).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_nodemedic"));
        cmd.arg("--config")
            .arg(&cfg)
            .arg("--host-root")
            .arg(&tree)
            .arg("--path.cgroupfs")
            .arg(&cgroupfs)
            .arg("--web.listen-address")
            .arg(format!("127.0.0.1:{port}"))
            .arg("run")
            .env("KUBECONFIG", &kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env("RUST_LOG", "info");
        cmd
    })
}

fn status(s: &Server) -> Value {
    serde_json::from_str(&s.get("/status").body).unwrap()
}

fn dry_runs(s: &Server) -> usize {
    status(s)["remediation"]["audit"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["result"] == "dry_run")
        .count()
}

#[test]
fn condition_label_events_rbac_and_pause_on_a_real_apiserver() {
    let cluster = Cluster::start();
    cluster.apply_manifests();
    // Labelling the node is opt-in (the chart's features.nodeLabel adds "patch" on nodes);
    // this test sets kubernetes.label = true, so it grants that one verb more.
    cluster.kubectl(&[
        "create",
        "clusterrole",
        "nodemedic-label",
        "--verb=patch",
        "--resource=nodes",
    ]);
    cluster.kubectl(&[
        "create",
        "clusterrolebinding",
        "nodemedic-label",
        "--clusterrole",
        "nodemedic-label",
        "--serviceaccount",
        &format!("{NAMESPACE}:nodemedic"),
    ]);
    let node = format!(
        "{{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{{\"name\":\"{NODE}\",\"annotations\":{{\"nodemedic.io/pause\":\"true\"}}}}}}"
    );
    let (ok, _, err) =
        cluster.kubectl_as(&cluster.kubeconfig(), &["create", "-f", "-"], Some(&node));
    assert!(ok, "creating the node: {err}");
    let sa = cluster.service_account_kubeconfig();

    // The role is minimal: verbs outside it are forbidden to nodemedic's identity.
    poll_until(
        Instant::now() + Duration::from_secs(30),
        "RBAC for the new binding",
        || {
            let (ok, out, _) =
                cluster.kubectl_as(&sa, &["auth", "can-i", "patch", "nodes/status"], None);
            if ok && out.trim() == "yes" {
                Ok(())
            } else {
                Err(out)
            }
        },
    );
    for forbidden in [
        vec!["delete", "node", NODE],
        vec!["get", "secrets", "-n", "kube-system"],
        vec!["get", "configmaps", "-A"],
    ] {
        let (ok, _, err) = cluster.kubectl_as(&sa, &forbidden, None);
        assert!(
            !ok && err.contains("Forbidden"),
            "{forbidden:?} must be forbidden: {err}"
        );
    }
    let can = |verb: &str, what: &str| {
        let (_, out, _) = cluster.kubectl_as(&sa, &["auth", "can-i", verb, what, "-A"], None);
        out.trim().to_string()
    };
    assert_eq!(can("list", "nodes"), "no");
    // Pod names: list and watch, nothing else on pods.
    assert_eq!(
        (can("list", "pods"), can("watch", "pods")),
        ("yes".into(), "yes".into())
    );
    for verb in ["get", "delete", "create", "patch"] {
        assert_eq!(can(verb, "pods"), "no", "{verb} pods");
    }
    assert_eq!(can("get", "pods/log"), "no");

    // A pod bound to this node, with a started container, and one on another node.
    for (name, node) in [("web-0", NODE), ("elsewhere-0", "another-node")] {
        create_pod(&cluster, "shop", name, node);
    }
    cluster.kubectl(&[
        "patch",
        "pod",
        "web-0",
        "-n",
        "shop",
        "--subresource=status",
        "--type=merge",
        "-p",
        &format!(r#"{{"status":{{"containerStatuses":[{{"name":"app","containerID":"containerd://{CONTAINER}","image":"registry.invalid/app","imageID":"","ready":true,"restartCount":0}}]}}}}"#),
    ]);
    // The pod's cgroups, as kubelet's systemd driver names them, under the UID the API gave it.
    let uid = cluster.kubectl(&[
        "get",
        "pod",
        "web-0",
        "-n",
        "shop",
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    let cgroupfs = tempfile::tempdir().unwrap();
    pod_cgroups(cgroupfs.path(), uid.trim(), CONTAINER);

    // Paused by annotation from the start: detection and reporting run, decisions do not.
    let mut s = start_nodemedic(&sa, cgroupfs.path());
    let cond = poll_until(
        Instant::now() + Duration::from_secs(60),
        "the IRQAffinityCollapsed condition",
        || {
            let n = cluster.node();
            n["status"]["conditions"]
                .as_array()
                .and_then(|c| {
                    c.iter()
                        .find(|c| c["type"] == "IRQAffinityCollapsed")
                        .cloned()
                })
                .filter(|c| c["status"] == "True")
                .ok_or_else(|| format!("{}", n["status"]))
        },
    );
    assert_eq!(cond["reason"], "IRQsCollapsed");
    assert!(
        cond["message"].as_str().unwrap().contains("virtio2"),
        "{cond}"
    );
    assert!(cond["lastTransitionTime"].is_string() && cond["lastHeartbeatTime"].is_string());
    // The label is a second API call, made after the condition's: poll for it too.
    poll_until(
        Instant::now() + Duration::from_secs(30),
        "the nodemedic.io/irq-collapsed=true label",
        || {
            let labels = cluster.node()["metadata"]["labels"].clone();
            if labels["nodemedic.io/irq-collapsed"] == "true" {
                Ok(())
            } else {
                Err(format!("{labels}"))
            }
        },
    );
    poll_until(
        Instant::now() + Duration::from_secs(30),
        "an IRQCollapsed event",
        || {
            let r = cluster.event_reasons();
            if r.iter().any(|x| x == "IRQCollapsed") {
                Ok(())
            } else {
                Err(format!("{r:?}"))
            }
        },
    );
    // One watch resolved this node's pod, and only it.
    s.poll("this node's pod names", Duration::from_secs(30), |s| {
        let st = status(s);
        if st["pods_named"] == 1 {
            Ok(())
        } else {
            Err(format!("{} {}", st["pods_named"], st["collectors"]))
        }
    });
    let st = status(&s);
    let pods = st["collectors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "kube_pods")
        .cloned()
        .unwrap();
    assert_eq!(pods["state"], "active", "{pods}");
    assert_eq!(pods["warnings"], serde_json::json!([]), "{pods}");
    // The per-cgroup series carry kubelet's names, resolved from the watch: pod UID ->
    // namespace/pod, container ID -> container.
    let uid = uid.trim();
    let pod_line = format!(
        "nodemedic_cgroup_cpu_usage_seconds_total{{namespace=\"shop\",pod=\"web-0\",pod_uid=\"{uid}\",qos=\"besteffort\"}} 0.005"
    );
    let container_line = format!(
        "nodemedic_cgroup_cpu_usage_seconds_total{{namespace=\"shop\",pod=\"web-0\",pod_uid=\"{uid}\",qos=\"besteffort\",container=\"app\",container_id=\"{CONTAINER}\"}} 0.005"
    );
    s.poll("named cgroup series", Duration::from_secs(30), |s| {
        let body = s.get("/metrics").body;
        if body.lines().any(|l| l == pod_line) && body.lines().any(|l| l == container_line) {
            Ok(())
        } else {
            Err(body
                .lines()
                .filter(|l| l.starts_with("nodemedic_cgroup_cpu_usage"))
                .collect::<Vec<_>>()
                .join("\n"))
        }
    });
    // `check` names the pods too, from one list of the API (it cannot wait for a watch).
    let check = Command::new(env!("CARGO_BIN_EXE_nodemedic"))
        .arg("--config")
        .arg(s.dir.path().join("nodemedic.toml"))
        .arg("--host-root")
        .arg(fixture("8cpu-collapsed"))
        .arg("--path.cgroupfs")
        .arg(cgroupfs.path())
        .args(["check", "--interval", "200ms", "--format", "json"])
        .env("KUBECONFIG", &sa)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    assert_eq!(
        check.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let report: Value = serde_json::from_slice(&check.stdout).unwrap();
    let named: Vec<(&str, &str)> = report["pressure"]["cgroups"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| Some((c["namespace"].as_str()?, c["pod"].as_str()?)))
        .collect();
    assert!(named.contains(&("shop", "web-0")), "{named:?}");
    assert_eq!(st["kubernetes"]["state"], "active", "{}", st["kubernetes"]);
    assert_eq!(st["kubernetes"]["paused_by_annotation"], true);
    assert_eq!(st["remediation"]["paused"], true);
    // Fifteen more samples of a latched collapse while paused: no decision.
    let seen = st["samples_total"].as_u64().unwrap();
    s.poll("15 more samples", Duration::from_secs(30), |s| {
        let n = status(s)["samples_total"].as_u64().unwrap_or(0);
        if n >= seen + 15 {
            Ok(())
        } else {
            Err(format!("{n} samples"))
        }
    });
    assert_eq!(dry_runs(&s), 0, "{}", status(&s)["remediation"]);

    // Unpause: the next decision comes (dry-run: decided, audited, reported; nothing written).
    cluster.kubectl(&[
        "annotate",
        "node",
        NODE,
        "nodemedic.io/pause=false",
        "--overwrite",
    ]);
    s.poll(
        "a dry-run decision after unpausing",
        Duration::from_secs(60),
        |s| {
            if dry_runs(s) > 0 {
                Ok(())
            } else {
                Err(format!("{}", status(s)["remediation"]))
            }
        },
    );
    poll_until(
        Instant::now() + Duration::from_secs(30),
        "a DryRunNativeRebalance event",
        || {
            let r = cluster.event_reasons();
            if r.iter().any(|x| x == "DryRunNativeRebalance") {
                Ok(())
            } else {
                Err(format!("{r:?}"))
            }
        },
    );
    let audit = status(&s)["remediation"]["audit"].clone();
    let pauses: Vec<&str> = audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["action"] == "pause")
        .map(|d| d["result"].as_str().unwrap())
        .collect();
    assert_eq!(pauses, vec!["paused", "resumed"], "{audit}");
    // Events are de-duplicated: one IRQCollapsed event however many samples saw it.
    let collapsed_events = cluster
        .event_reasons()
        .iter()
        .filter(|r| *r == "IRQCollapsed")
        .count();
    assert_eq!(collapsed_events, 1);

    // SIGTERM: the condition nodemedic maintained turns Unknown, written by its own field
    // manager, instead of claiming a collapse with a frozen heartbeat.
    let term = Command::new("kill")
        .args(["-TERM", &s.pid().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    assert!(s
        .wait_exit(Duration::from_secs(30))
        .is_some_and(|st| st.success()));
    let n = cluster.node();
    let cond = n["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "IRQAffinityCollapsed")
        .cloned()
        .unwrap();
    assert_eq!(
        (cond["status"].as_str(), cond["reason"].as_str()),
        (Some("Unknown"), Some("NodemedicStopped")),
        "{cond}"
    );
    let managers: Vec<&str> = n["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["subresource"] == "status")
        .filter_map(|f| f["manager"].as_str())
        .collect();
    assert!(managers.contains(&"nodemedic"), "{managers:?}");
    assert!(!managers.contains(&"unknown"), "{managers:?}");
}

/// The DaemonSet's pod, as its controller would create it, in `namespace`.
fn daemonset_pod(cluster: &Cluster, namespace: &str) -> String {
    let ds: Value = serde_json::from_str(&cluster.kubectl(&[
        "get",
        "daemonset",
        "nodemedic",
        "-n",
        NAMESPACE,
        "-o",
        "json",
    ]))
    .unwrap();
    let mut template = ds["spec"]["template"].clone();
    template["metadata"]["name"] = Value::from("nodemedic-psa-probe");
    template["metadata"]["namespace"] = Value::from(namespace);
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": template["metadata"],
        "spec": template["spec"],
    })
    .to_string()
}

#[test]
fn shipped_manifests_apply_and_pod_security_admits_them_only_as_labelled() {
    let cluster = Cluster::start();
    cluster.apply_manifests();
    // Applying again, as a server-side dry run, changes nothing and is accepted.
    let path = workspace_root().join(MANIFESTS);
    let out = cluster.kubectl(&[
        "apply",
        "--server-side",
        "--dry-run=server",
        "-f",
        path.to_str().unwrap(),
    ]);
    for kind in [
        "namespace/",
        "daemonset.apps/",
        "clusterrole.rbac",
        "serviceaccount/",
        "service/",
        "configmap/",
    ] {
        assert!(out.contains(kind), "{kind} missing from: {out}");
    }
    let ns: Value =
        serde_json::from_str(&cluster.kubectl(&["get", "namespace", NAMESPACE, "-o", "json"]))
            .unwrap();
    let level = ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"].clone();
    assert_eq!(level, "privileged", "{ns}");

    // The pod the DaemonSet would create: admitted where the chart put it...
    let pod = daemonset_pod(&cluster, NAMESPACE);
    let (ok, _, err) = cluster.kubectl_as(
        &cluster.kubeconfig(),
        &["create", "--dry-run=server", "-f", "-"],
        Some(&pod),
    );
    assert!(ok, "the pod is rejected in its own namespace: {err}");
    // ...and rejected under "baseline", for its hostPath volumes and added capabilities.
    cluster.kubectl(&["create", "namespace", "baseline-only"]);
    // The ServiceAccount admission plugin runs first; give it the account so that the
    // answer comes from Pod Security.
    cluster.kubectl(&[
        "create",
        "serviceaccount",
        "nodemedic",
        "-n",
        "baseline-only",
    ]);
    cluster.kubectl(&[
        "label",
        "namespace",
        "baseline-only",
        "pod-security.kubernetes.io/enforce=baseline",
    ]);
    let pod = daemonset_pod(&cluster, "baseline-only");
    let (ok, _, err) = cluster.kubectl_as(
        &cluster.kubeconfig(),
        &["create", "--dry-run=server", "-f", "-"],
        Some(&pod),
    );
    assert!(!ok, "baseline admitted a pod with host mounts");
    assert!(
        err.contains("violates PodSecurity \"baseline:latest\"") && err.contains("hostPath"),
        "{err}"
    );

    // The chart with the endpoint's web configuration from a Secret, each probe kind: the
    // DaemonSet (Secret volume, the extra arguments, HTTPS or TCP checks) is valid to the API
    // server and admitted in the chart's namespace.
    for probe in ["https", "tcp"] {
        let all = render(&[
            "webConfig.secretName=nodemedic-web",
            &format!("webConfig.probe={probe}"),
        ]);
        let ds = all
            .split("\n---")
            .find(|d| d.lines().any(|l| l == "kind: DaemonSet"))
            .expect("a DaemonSet in the chart");
        let (ok, out, err) = cluster.kubectl_as(
            &cluster.kubeconfig(),
            &["apply", "--server-side", "--dry-run=server", "-f", "-"],
            Some(ds),
        );
        assert!(
            ok && out.contains("daemonset.apps/nodemedic"),
            "{probe}: {out} {err}"
        );
    }
}
