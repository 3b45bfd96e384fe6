//! The Helm chart (deploy/helm/nodemedic): deploy/kubernetes/nodemedic.yaml is exactly its
//! rendering with default values, the privileges, mounts and RBAC follow the enabled
//! features and nothing else, and the configuration it generates is one nodemedic accepts.
//! Helm is built from the Go module proxy by tests/k8s/build-helm.sh (cached).
//! The manifests on a real kube-apiserver with Pod Security admission: tests/kubernetes.rs.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::process::Command;

use common::{helm_template, nodemedic_bin, render, workspace_root};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    Container, HostPathVolumeSource, Namespace, PodSpec, Probe, VolumeMount,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use serde::Deserialize;

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

/// The objects of a rendered chart, parsed.
fn objects(all: &str) -> Vec<serde_yaml_ng::Value> {
    serde_yaml_ng::Deserializer::from_str(all)
        .map(|d| serde_yaml_ng::Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// The one object of `kind`, as its typed Kubernetes API struct.
fn object<T: serde::de::DeserializeOwned>(all: &str, kind: &str) -> T {
    let mut found = objects(all)
        .into_iter()
        .filter(|o| o["kind"].as_str() == Some(kind));
    let one = found
        .next()
        .unwrap_or_else(|| panic!("no {kind} in:\n{all}"));
    assert!(found.next().is_none(), "more than one {kind}");
    serde_yaml_ng::from_value(one).unwrap()
}

fn daemonset(all: &str) -> (PodSpec, Container) {
    let ds: DaemonSet = object(all, "DaemonSet");
    let pod = ds.spec.unwrap().template.spec.unwrap();
    let mut containers = pod.containers.clone();
    assert_eq!(containers.len(), 1);
    (pod, containers.remove(0))
}

fn mount<'a>(c: &'a Container, path: &str) -> Option<&'a VolumeMount> {
    c.volume_mounts
        .iter()
        .flatten()
        .find(|m| m.mount_path == path)
}

fn host_path<'a>(pod: &'a PodSpec, volume: &str) -> Option<&'a HostPathVolumeSource> {
    pod.volumes
        .iter()
        .flatten()
        .find(|v| v.name == volume)
        .and_then(|v| v.host_path.as_ref())
}

fn capabilities(c: &Container) -> (Vec<String>, Vec<String>) {
    let caps = c
        .security_context
        .as_ref()
        .and_then(|s| s.capabilities.clone())
        .unwrap_or_default();
    (caps.add.unwrap_or_default(), caps.drop.unwrap_or_default())
}

fn rules(all: &str) -> Vec<PolicyRule> {
    let role: ClusterRole = object(all, "ClusterRole");
    role.rules.unwrap_or_default()
}

/// The verbs granted on `resource`, across the rules.
fn verbs(rules: &[PolicyRule], resource: &str) -> Vec<String> {
    rules
        .iter()
        .filter(|r| r.resources.iter().flatten().any(|x| x == resource))
        .flat_map(|r| r.verbs.clone())
        .collect()
}

#[test]
fn privileges_mounts_and_rbac_follow_the_features() {
    let default = render(&[]);
    let (pod, c) = daemonset(&default);
    assert_eq!(pod.host_pid, Some(false));
    assert_eq!(
        pod.priority_class_name.as_deref(),
        Some("system-node-critical")
    );
    let pod_sec = pod.security_context.clone().unwrap();
    assert_eq!(pod_sec.run_as_user, Some(0));
    assert_eq!(
        pod_sec.seccomp_profile.map(|p| p.type_).as_deref(),
        Some("RuntimeDefault")
    );
    let sec = c.security_context.clone().unwrap();
    assert_eq!(sec.privileged, Some(false));
    assert_eq!(sec.read_only_root_filesystem, Some(true));
    assert_eq!(sec.allow_privilege_escalation, Some(false));
    let (add, drop) = capabilities(&c);
    assert_eq!(
        (add, drop),
        (
            vec!["BPF".into(), "PERFMON".into()],
            vec!["ALL".to_string()]
        )
    );
    // The image is the fully qualified name the image archive carries.
    let chart: serde_yaml_ng::Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(workspace_root().join("deploy/helm/nodemedic/Chart.yaml"))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        c.image.as_deref(),
        Some(
            format!(
                "localhost/nodemedic:{}",
                chart["appVersion"].as_str().unwrap()
            )
            .as_str()
        )
    );
    // The D-Bus directory, not the socket: a node without a system bus still starts the pod.
    let dbus = host_path(&pod, "dbus").unwrap();
    assert_eq!(
        (dbus.path.as_str(), dbus.type_.as_deref()),
        ("/run/dbus", Some("DirectoryOrCreate"))
    );
    assert!(mount(&c, "/host/run/dbus").is_some());
    let env: Vec<(String, Option<String>, Option<String>)> = c
        .env
        .iter()
        .flatten()
        .map(|e| {
            (
                e.name.clone(),
                e.value.clone(),
                e.value_from
                    .as_ref()
                    .and_then(|v| v.field_ref.as_ref())
                    .map(|f| f.field_path.clone()),
            )
        })
        .collect();
    assert!(env.contains(&(
        "NODEMEDIC_CONFIG".into(),
        Some("/etc/nodemedic/nodemedic.toml".into()),
        None
    )));
    assert!(env.contains(&("NODE_NAME".into(), None, Some("spec.nodeName".into()))));
    // Ready after the first sample; alive while samples come.
    let path = |p: &Option<Probe>| {
        p.as_ref()
            .and_then(|p| p.http_get.as_ref())
            .and_then(|g| g.path.clone())
    };
    assert_eq!(path(&c.readiness_probe).as_deref(), Some("/readyz"));
    assert_eq!(path(&c.liveness_probe).as_deref(), Some("/healthz"));
    // Requests, a memory limit, and no CPU limit (a quota would throttle nodemedic itself).
    let res = c.resources.clone().unwrap();
    let requests = res.requests.unwrap_or_default();
    let limits = res.limits.unwrap_or_default();
    assert!(
        requests.contains_key("cpu") && requests.contains_key("memory"),
        "{requests:?}"
    );
    assert!(limits.contains_key("memory"), "{limits:?}");
    assert!(!limits.contains_key("cpu"), "{limits:?}");
    assert_eq!(mount(&c, "/host/proc").unwrap().read_only, Some(true));
    assert!(mount(&c, "/host/proc/irq").is_none());
    // The host's cgroup tree is mounted on its own, read-only (issue 23, defect 1): a
    // read-only bind of the host's /sys does not reach the filesystems below it (containerd
    // 1.x remounts only the top of a bind read-only: the cgroup filesystems, debugfs,
    // tracefs, bpffs), so with the node's network namespace the container's own /sys is read
    // instead, and the host's is not mounted at all.
    assert!(mount(&c, "/host/sys").is_none() && host_path(&pod, "sys").is_none());
    let conf = config_toml(&default);
    assert!(
        conf.contains("sysfs = \"/sys\"") && conf.contains("cgroupfs = \"/host/sys/fs/cgroup\""),
        "{conf}"
    );
    assert_eq!(mount(&c, "/host/run/dbus").unwrap().read_only, Some(true));
    // In the pod's own network namespace, the host's /sys (its interfaces), read-only.
    let podnet = render(&["hostNetwork=false"]);
    let (podnet_pod, podnet_c) = daemonset(&podnet);
    let sys = mount(&podnet_c, "/host/sys").unwrap();
    assert_eq!(
        (sys.read_only, sys.recursive_read_only.as_deref()),
        (Some(true), Some("IfPossible"))
    );
    assert_eq!(host_path(&podnet_pod, "sys").unwrap().path, "/sys");
    assert!(!config_toml(&podnet).contains("sysfs"));
    // A sysfs of the user's own wins, and is not written twice.
    let own = render(&["paths.sysfs=/mnt/sys"]);
    let conf = config_toml(&own);
    assert_eq!(conf.matches("sysfs =").count(), 1, "{conf}");
    assert!(
        conf.contains("sysfs = \"/mnt/sys\"") && !conf.contains("cgroupfs"),
        "{conf}"
    );
    // The host's /sys/fs/cgroup by default (issue 33): the tree with every mount below it (a
    // v1 or hybrid node's hierarchies), all read-only where the runtime can: recursiveReadOnly
    // IfPossible (issue 52), so that a runtime that cannot (containerd 1.7) still starts the
    // pod; there nodemedic names each writable hierarchy (the cgroups collector's
    // writable-mount check). No /sys/fs volume.
    let cg = mount(&c, "/host/sys/fs/cgroup").unwrap();
    assert_eq!(
        (
            cg.name.as_str(),
            cg.read_only,
            cg.recursive_read_only.as_deref(),
            cg.sub_path.as_deref(),
            cg.mount_propagation.as_deref()
        ),
        ("cgroup", Some(true), Some("IfPossible"), None, None)
    );
    let cg_vol = host_path(&pod, "cgroup").unwrap();
    assert_eq!(
        (cg_vol.path.as_str(), cg_vol.type_.as_deref()),
        ("/sys/fs/cgroup", Some("Directory"))
    );
    assert!(host_path(&pod, "sys-fs").is_none());
    // cgroupMount: subPath, for runtimes without recursive read-only mounts: the host's
    // /sys/fs/cgroup through a subPath of /sys/fs. The kubelet binds a subPath without the
    // mounts below it, so on a v1 or hybrid node (whose hierarchies are mounts below it) none
    // of them is in the pod, writable or not (containerd 1.x ignores recursiveReadOnly
    // IfPossible; a hybrid node's v1 hierarchies stayed writable).
    let sub = render(&["cgroupMount=subPath"]);
    let (sub_pod, sub_c) = daemonset(&sub);
    let cg = mount(&sub_c, "/host/sys/fs/cgroup").unwrap();
    assert_eq!(
        (
            cg.name.as_str(),
            cg.read_only,
            cg.sub_path.as_deref(),
            cg.recursive_read_only.as_deref()
        ),
        ("sys-fs", Some(true), Some("cgroup"), None)
    );
    let cg_vol = host_path(&sub_pod, "sys-fs").unwrap();
    assert_eq!(
        (cg_vol.path.as_str(), cg_vol.type_.as_deref()),
        ("/sys/fs", Some("Directory"))
    );
    assert!(host_path(&sub_pod, "cgroup").is_none());
    // Any other value is refused when rendering, not taken as one of the two.
    let bad = helm_template(&["cgroupMount=readOnly"]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr)
            .contains("cgroupMount must be recursiveReadOnly or subPath"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    // cgroup v1 nodes: each named hierarchy read-only on its own (a subPath is bound without
    // the mounts below it), over an empty directory that hides the rest of the tree.
    let v1 = render(&["cgroupV1Hierarchies={cpu,cpuacct,unified}"]);
    let (v1_pod, v1_c) = daemonset(&v1);
    assert_eq!(
        mount(&v1_c, "/host/sys/fs/cgroup").unwrap().name,
        "cgroup-v1-root"
    );
    for h in ["cpu", "cpuacct", "unified"] {
        let m = mount(&v1_c, &format!("/host/sys/fs/cgroup/{h}")).unwrap();
        assert_eq!(
            (m.name.as_str(), m.read_only, m.sub_path.as_deref()),
            ("sys-fs", Some(true), Some(format!("cgroup/{h}").as_str()))
        );
    }
    assert!(v1_pod
        .volumes
        .iter()
        .flatten()
        .any(|v| v.name == "cgroup-v1-root" && v.empty_dir.is_some()));
    mixed_fleet_gets_a_daemonset_per_kind(&pod, &c);
    // irqbalance's version in a pod (issue 23, defect 2): dpkg's database, read-only.
    let dpkg = mount(&c, "/host/var/lib/dpkg").unwrap();
    assert_eq!(dpkg.read_only, Some(true));
    assert_eq!(host_path(&pod, "dpkg").unwrap().path, "/var/lib/dpkg");
    let ns: Namespace = object(&default, "Namespace");
    assert_eq!(
        ns.metadata.labels.unwrap()["pod-security.kubernetes.io/enforce"],
        "privileged"
    );
    let r = rules(&default);
    assert_eq!(verbs(&r, "nodes"), vec!["get"]);
    assert_eq!(verbs(&r, "nodes/status"), vec!["patch"]);
    assert_eq!(verbs(&r, "pods"), vec!["list", "watch"]);
    assert_eq!(verbs(&r, "events"), vec!["create", "patch"]);

    let label = render(&["features.nodeLabel=true"]);
    assert_eq!(verbs(&rules(&label), "nodes"), vec!["get", "patch"]);

    // Native rebalancing writes /proc/irq, and nothing else of /proc.
    let native = render(&["features.nativeRebalance=true"]);
    let (native_pod, c) = daemonset(&native);
    assert_eq!(mount(&c, "/host/proc").unwrap().read_only, Some(true));
    assert_eq!(mount(&c, "/host/proc/irq").unwrap().read_only, None);
    assert_eq!(
        host_path(&native_pod, "proc-irq").unwrap().path,
        "/proc/irq"
    );

    let observe_only = render(&[
        "features.probes=false",
        "features.irqbalanceRestart=false",
        "features.podNames=false",
        "features.events=false",
    ]);
    let (pod, c) = daemonset(&observe_only);
    let pod_sec = pod.security_context.clone().unwrap();
    assert_eq!(
        (pod_sec.run_as_non_root, pod_sec.run_as_user),
        (Some(true), Some(65534))
    );
    assert_eq!(capabilities(&c).0, Vec::<String>::new());
    assert!(host_path(&pod, "dbus").is_none() && mount(&c, "/host/run/dbus").is_none());
    let r = rules(&observe_only);
    assert!(
        verbs(&r, "pods").is_empty() && verbs(&r, "events").is_empty(),
        "{r:?}"
    );

    // Pod Events alone still need to create Events.
    let pod_events_only = render(&["features.events=false"]);
    assert_eq!(
        verbs(&rules(&pod_events_only), "events"),
        vec!["create", "patch"]
    );

    let memlock = render(&["features.probesMemlock=true"]);
    assert!(capabilities(&daemonset(&memlock).1)
        .0
        .contains(&"SYS_RESOURCE".to_string()));
}

/// `helm upgrade --reuse-values` keeps the values of the release it upgrades, not the new
/// chart's defaults: a release made before `cgroupV1Nodes` and `seccompProfile` existed lacks
/// them. The chart renders as with its defaults (it failed on a nil `cgroupV1Nodes`, and a
/// missing `seccompProfile` gave the pod no profile at all).
#[test]
fn a_release_from_before_a_value_existed_renders_with_its_default() {
    assert_eq!(
        render(&[
            "cgroupV1Nodes=null",
            "seccompProfile=null",
            "appArmorProfile=null",
            "seLinuxOptions=null",
            "openshift=null",
            "dpkgDatabase=null",
        ]),
        render(&[])
    );
}

/// `helm template` with `set` that must fail: its stderr.
fn render_error(set: &[&str]) -> String {
    let out = helm_template(set);
    assert!(!out.status.success(), "{set:?} rendered");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn app_armor(c: &Container) -> Option<(String, Option<String>)> {
    c.security_context
        .as_ref()
        .and_then(|s| s.app_armor_profile.clone())
        .map(|p| (p.type_, p.localhost_profile))
}

/// The container's AppArmor profile and SELinux label (values.yaml, appArmorProfile and
/// seLinuxOptions; docs/where-it-runs.md). Unset, the profile is Unconfined while
/// irqbalanceRestart is on (the runtime's default has no dbus rule, and Ubuntu's dbus-daemon
/// refuses it) and not set otherwise; never RuntimeDefault or Localhost unasked, which the
/// kubelet refuses on a node without AppArmor. The label is the runtime's unless set.
#[test]
fn apparmor_profile_and_selinux_label_follow_the_values() {
    let (_, c) = daemonset(&render(&[]));
    assert_eq!(app_armor(&c), Some(("Unconfined".into(), None)));
    assert!(c
        .security_context
        .as_ref()
        .unwrap()
        .se_linux_options
        .is_none());

    let (_, c) = daemonset(&render(&["features.irqbalanceRestart=false"]));
    assert_eq!(app_armor(&c), None);

    let (_, c) = daemonset(&render(&[
        "appArmorProfile.type=Localhost",
        "appArmorProfile.localhostProfile=nodemedic",
    ]));
    assert_eq!(
        app_armor(&c),
        Some(("Localhost".into(), Some("nodemedic".into())))
    );
    let (_, c) = daemonset(&render(&[
        "appArmorProfile.type=RuntimeDefault",
        "features.irqbalanceRestart=false",
    ]));
    assert_eq!(app_armor(&c), Some(("RuntimeDefault".into(), None)));

    let (_, c) = daemonset(&render(&[
        "seLinuxOptions.type=spc_t",
        "seLinuxOptions.level=s0",
    ]));
    let se = c.security_context.unwrap().se_linux_options.unwrap();
    assert_eq!(
        (se.type_.as_deref(), se.level.as_deref(), se.user, se.role),
        (Some("spc_t"), Some("s0"), None, None)
    );

    for (set, says) in [
        (
            &["appArmorProfile.type=Bogus"][..],
            "appArmorProfile.type must be RuntimeDefault, Localhost or Unconfined",
        ),
        (
            &["appArmorProfile.type=Localhost"],
            "appArmorProfile.type Localhost needs localhostProfile",
        ),
        (
            &["appArmorProfile.localhostProfile=nodemedic"],
            "appArmorProfile.localhostProfile needs type: Localhost",
        ),
        (
            &[
                "appArmorProfile.type=Unconfined",
                "appArmorProfile.localhostProfile=nodemedic",
            ],
            "appArmorProfile.localhostProfile is for type Localhost",
        ),
        (
            &["appArmorProfile.profile=nodemedic"],
            "appArmorProfile: unknown key",
        ),
        (
            &["seLinuxOptions.kind=spc_t"],
            "seLinuxOptions: unknown key",
        ),
        (&["seLinuxOptions=spc_t"], "seLinuxOptions must be a map"),
    ] {
        let err = render_error(set);
        assert!(err.contains(says), "{set:?}: {err}");
    }
}

/// The host's dpkg database (values.yaml, dpkgDatabase): mounted read-only by default, for
/// irqbalance's version; `false` drops both the mount and the volume (RHEL and Bottlerocket
/// have no dpkg, and Debian's SELinux policy refuses the runtime that directory:
/// docs/selinux.md). Anything but a boolean fails the render.
#[test]
fn dpkg_database_mount_follows_its_value() {
    let (pod, c) = daemonset(&render(&[]));
    let dpkg = host_path(&pod, "dpkg").expect("the dpkg volume by default");
    assert_eq!(
        (dpkg.path.as_str(), dpkg.type_.as_deref()),
        ("/var/lib/dpkg", Some("DirectoryOrCreate"))
    );
    assert_eq!(
        mount(&c, "/host/var/lib/dpkg").and_then(|m| m.read_only),
        Some(true)
    );

    let off = render(&["dpkgDatabase=false"]);
    let (pod, c) = daemonset(&off);
    assert!(host_path(&pod, "dpkg").is_none());
    assert!(mount(&c, "/host/var/lib/dpkg").is_none());
    assert!(!off.contains("/var/lib/dpkg"), "{off}");
    // Nothing else changes: the other volumes are the default's.
    let names = |pod: &PodSpec| -> Vec<String> {
        pod.volumes
            .iter()
            .flatten()
            .map(|v| v.name.clone())
            .collect()
    };
    let mut default_names = names(&daemonset(&render(&[])).0);
    default_names.retain(|n| n != "dpkg");
    assert_eq!(names(&pod), default_names);

    let err = render_error(&["dpkgDatabase=maybe"]);
    assert!(err.contains("dpkgDatabase must be true or false"), "{err}");
}

/// The objects of `kind`, parsed.
fn all_of(all: &str, kind: &str) -> Vec<serde_yaml_ng::Value> {
    objects(all)
        .into_iter()
        .filter(|o| o["kind"].as_str() == Some(kind))
        .collect()
}

fn strings(v: &serde_yaml_ng::Value) -> Vec<String> {
    v.as_sequence()
        .map(|s| s.iter().map(|x| x.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

/// The volume types of a pod as an SCC names them (the VolumeSource's field), with the
/// ServiceAccount token's projected volume that admission adds.
fn volume_types(pod: &PodSpec) -> Vec<String> {
    let mut types: Vec<String> = pod
        .volumes
        .iter()
        .flatten()
        .map(|v| {
            let json = serde_json::to_value(v).unwrap();
            let keys: Vec<String> = json
                .as_object()
                .unwrap()
                .keys()
                .filter(|k| *k != "name")
                .cloned()
                .collect();
            assert_eq!(keys.len(), 1, "{json}");
            keys[0].clone()
        })
        .chain(["projected".to_string()])
        .collect();
    types.sort();
    types.dedup();
    types
}

/// openshift.scc.create: an SCC that admits the DaemonSet's pods as rendered and no more
/// (each field against the pod's own), usable by the chart's ServiceAccount only, in its
/// namespace. Off by default.
#[test]
fn the_openshift_scc_admits_exactly_the_pod() {
    assert!(all_of(&render(&[]), "SecurityContextConstraints").is_empty());
    assert!(!render(&[]).contains("nodemedic-scc"));

    for set in [
        vec![
            "openshift.scc.create=true",
            "seLinuxOptions.type=spc_t",
            "seLinuxOptions.level=s0",
        ],
        vec![
            "openshift.scc.create=true",
            "features.probes=false",
            "features.irqbalanceRestart=false",
            "features.podNames=false",
            "features.events=false",
            "webConfig.secretName=web",
            "cgroupV1Hierarchies={cpu,unified}",
            "seccompProfile.type=Localhost",
            "seccompProfile.localhostProfile=profiles/nodemedic.json",
        ],
        vec![
            "openshift.scc.create=true",
            "features.probesMemlock=true",
            "features.nativeRebalance=true",
            "hostNetwork=false",
        ],
    ] {
        let all = render(&set);
        let (pod, c) = daemonset(&all);
        let scc = &all_of(&all, "SecurityContextConstraints")[0];
        assert_eq!(
            scc["metadata"]["name"].as_str(),
            Some("nodemedic"),
            "{set:?}"
        );
        let mut added = capabilities(&c).0;
        added.sort();
        let mut allowed = strings(&scc["allowedCapabilities"]);
        allowed.sort();
        assert_eq!(allowed, added, "{set:?}");
        assert_eq!(strings(&scc["requiredDropCapabilities"]), ["ALL"]);
        assert_eq!(
            strings(&scc["defaultAddCapabilities"]),
            Vec::<String>::new()
        );
        let mut volumes = strings(&scc["volumes"]);
        volumes.sort();
        assert_eq!(volumes, volume_types(&pod), "{set:?}");
        assert_eq!(scc["allowHostDirVolumePlugin"].as_bool(), Some(true));
        let host_network = pod.host_network.unwrap_or(false);
        assert_eq!(scc["allowHostNetwork"].as_bool(), Some(host_network));
        assert_eq!(scc["allowHostPorts"].as_bool(), Some(host_network));
        for off in [
            "allowHostPID",
            "allowHostIPC",
            "allowPrivilegedContainer",
            "allowPrivilegeEscalation",
        ] {
            assert_eq!(scc[off].as_bool(), Some(false), "{off}");
        }
        let pod_sec = pod.security_context.clone().unwrap();
        assert_eq!(scc["runAsUser"]["type"].as_str(), Some("MustRunAs"));
        assert_eq!(scc["runAsUser"]["uid"].as_i64(), pod_sec.run_as_user);
        assert_eq!(scc["seLinuxContext"]["type"].as_str(), Some("MustRunAs"));
        let label = c.security_context.clone().unwrap().se_linux_options;
        // Without one, the SCC's is the namespace's MCS level and the runtime's type.
        let scc_label: Option<k8s_openapi::api::core::v1::SELinuxOptions> =
            match &scc["seLinuxContext"]["seLinuxOptions"] {
                serde_yaml_ng::Value::Null => None,
                options => Some(serde_yaml_ng::from_value(options.clone()).unwrap()),
            };
        assert_eq!(scc_label, label, "{set:?}");
        let seccomp = pod_sec.seccomp_profile.unwrap();
        let profile = match seccomp.type_.as_str() {
            "Localhost" => format!("localhost/{}", seccomp.localhost_profile.unwrap()),
            _ => "runtime/default".to_string(),
        };
        assert_eq!(strings(&scc["seccompProfiles"]), [profile]);
        assert!(strings(&scc["users"]).is_empty() && strings(&scc["groups"]).is_empty());

        // Only the chart's ServiceAccount, in its namespace, may use it.
        let role: ClusterRole = all_of(&all, "ClusterRole")
            .into_iter()
            .map(|r| serde_yaml_ng::from_value(r).unwrap())
            .find(|r: &ClusterRole| r.metadata.name.as_deref() == Some("nodemedic-scc"))
            .unwrap();
        let rules = role.rules.unwrap();
        assert_eq!(rules.len(), 1);
        assert_eq!(
            (
                rules[0].api_groups.clone().unwrap(),
                rules[0].resources.clone().unwrap(),
                rules[0].resource_names.clone().unwrap(),
                rules[0].verbs.clone(),
            ),
            (
                vec!["security.openshift.io".to_string()],
                vec!["securitycontextconstraints".to_string()],
                vec!["nodemedic".to_string()],
                vec!["use".to_string()],
            )
        );
        let binding: k8s_openapi::api::rbac::v1::RoleBinding = object(&all, "RoleBinding");
        assert_eq!(binding.role_ref.name, "nodemedic-scc");
        assert_eq!(binding.metadata.namespace.as_deref(), Some("nodemedic"));
        let subjects = binding.subjects.unwrap();
        assert_eq!(
            (
                subjects.len(),
                subjects[0].kind.as_str(),
                subjects[0].name.as_str(),
                subjects[0].namespace.as_deref()
            ),
            (1, "ServiceAccount", "nodemedic", Some("nodemedic"))
        );
    }

    // A label without a level would meet the namespace's MCS level in the SCC, not its own.
    let err = render_error(&["openshift.scc.create=true", "seLinuxOptions.type=spc_t"]);
    assert!(err.contains("seLinuxOptions needs a level too"), "{err}");
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
        vec!["sampleInterval=3s", "paths.procfs=/fixture/proc"],
        vec!["paths.sysfs=/mnt/sys", "paths.cgroupfs=/mnt/cg"],
        vec!["paths.cgroupfs=/mnt/cg"],
        vec!["hostNetwork=false"],
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
        if set.contains(&"sampleInterval=3s") {
            assert!(
                effective.contains("sample_interval = \"3s\""),
                "{effective}"
            );
            assert!(
                effective.contains("procfs = \"/fixture/proc\""),
                "{effective}"
            );
        }
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

    let out = helm_template(&["webConfig.secretName=x", "webConfig.probe=http"]);
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

/// With prometheusRule.enabled the chart renders one PrometheusRule per shipped rule file (the
/// per-node alerts, the fleet's recording rules and alert), each with the file's groups as
/// they are in deploy/prometheus.
#[test]
fn prometheus_rules_carry_every_shipped_rule_file() {
    let all = render(&["prometheusRule.enabled=true"]);
    let rendered: Vec<serde_yaml_ng::Value> = objects(&all)
        .into_iter()
        .filter(|o| o["kind"].as_str() == Some("PrometheusRule"))
        .map(|o| o["spec"].clone())
        .collect();
    let shipped: Vec<serde_yaml_ng::Value> = common::promql::RULE_FILES
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(workspace_root().join(f)).unwrap();
            serde_yaml_ng::from_str(&text).unwrap()
        })
        .collect();
    assert_eq!(rendered, shipped);
    assert!(!render(&[]).contains("kind: PrometheusRule"));
}

/// A fleet moving to cgroup v2 (cgroupV1Nodes): one release, two DaemonSets. The v1 nodes' one
/// mounts the named hierarchies; the other keeps the defaults and does not schedule there; the
/// Service (and so Prometheus) selects the pods of both.
fn mixed_fleet_gets_a_daemonset_per_kind(default_pod: &PodSpec, default_c: &Container) {
    let all = render(&[
        "cgroupV1Nodes.nodeSelector.node\\.example\\.com/cgroup=v1",
        "cgroupV1Nodes.hierarchies={cpu,unified}",
        "nodeSelector.pool=batch",
    ]);
    let sets: Vec<DaemonSet> = objects(&all)
        .into_iter()
        .filter(|o| o["kind"].as_str() == Some("DaemonSet"))
        .map(|o| serde_yaml_ng::from_value(o).unwrap())
        .collect();
    let names: Vec<_> = sets
        .iter()
        .map(|d| d.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["nodemedic", "nodemedic-cgroup-v1"]);
    let spec = |d: &DaemonSet| d.spec.clone().unwrap();
    let (v2, v1) = (spec(&sets[0]), spec(&sets[1]));
    let (v2_pod, v1_pod) = (v2.template.spec.unwrap(), v1.template.spec.unwrap());
    // The v2 nodes' DaemonSet is the default one but for its affinity.
    assert_eq!(v2_pod.containers, default_pod.containers);
    assert_eq!(&v2_pod.containers[0], default_c);
    let terms = v2_pod
        .affinity
        .and_then(|a| a.node_affinity)
        .and_then(|a| a.required_during_scheduling_ignored_during_execution)
        .unwrap()
        .node_selector_terms;
    let e = &terms[0].match_expressions.as_ref().unwrap()[0];
    assert_eq!(
        (e.key.as_str(), e.operator.as_str(), e.values.as_deref()),
        (
            "node.example.com/cgroup",
            "NotIn",
            Some(&["v1".to_string()][..])
        )
    );
    assert_eq!(v2_pod.node_selector.unwrap()["pool"], "batch");
    // The v1 nodes': their labels and the release's selector, each hierarchy on its own.
    let sel = v1_pod.node_selector.clone().unwrap();
    assert_eq!(
        (
            sel["node.example.com/cgroup"].as_str(),
            sel["pool"].as_str()
        ),
        ("v1", "batch")
    );
    assert!(v1_pod.affinity.is_none());
    let c = &v1_pod.containers[0];
    assert_eq!(
        mount(c, "/host/sys/fs/cgroup").unwrap().name,
        "cgroup-v1-root"
    );
    for h in ["cpu", "unified"] {
        let m = mount(c, &format!("/host/sys/fs/cgroup/{h}")).unwrap();
        assert_eq!(m.sub_path.as_deref(), Some(format!("cgroup/{h}").as_str()));
    }
    // Selectors: each DaemonSet's own pods; the Service's, both.
    let labels = |d: &DaemonSet| {
        d.spec
            .clone()
            .unwrap()
            .template
            .metadata
            .unwrap()
            .labels
            .unwrap()
    };
    let matches = |sel: &std::collections::BTreeMap<String, String>,
                   l: &std::collections::BTreeMap<String, String>| {
        sel.iter().all(|(k, v)| l.get(k) == Some(v))
    };
    let v1_sel = v1.selector.match_labels.unwrap();
    assert!(matches(&v1_sel, &labels(&sets[1])) && !matches(&v1_sel, &labels(&sets[0])));
    let svc: k8s_openapi::api::core::v1::Service = object(&all, "Service");
    let svc_sel = svc.spec.unwrap().selector.unwrap();
    assert!(sets.iter().all(|d| matches(&svc_sel, &labels(d))));
}
