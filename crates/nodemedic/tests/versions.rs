//! One version everywhere a user reads it: the crate's (`Cargo.toml`'s `[workspace.package]`,
//! what `nodemedic --version` and `nodemedic_build_info` say), the chart's `appVersion` (and so
//! the image the rendered manifests run), the tag deploy/container/build-image.sh gives the
//! image, the `.deb`'s version (cargo-deb's, from the crate's unless overridden), and the
//! newest entry of CHANGELOG.md. tests/image.sh checks the built image and `.deb` themselves.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::process::Command;

use common::{changelog_newest_version, workspace_root};

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn read(path: &str) -> String {
    std::fs::read_to_string(workspace_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn toml_file(path: &str) -> toml::Value {
    toml::from_str(&read(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn the_crate_chart_image_deb_and_changelog_name_one_version() {
    let workspace = toml_file("Cargo.toml");
    assert_eq!(
        workspace["workspace"]["package"]["version"].as_str(),
        Some(VERSION),
        "Cargo.toml's [workspace.package] version"
    );

    let chart: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&read("deploy/helm/nodemedic/Chart.yaml")).unwrap();
    assert_eq!(
        chart["appVersion"].as_str(),
        Some(VERSION),
        "Chart.yaml's appVersion is not the crate's version"
    );
    // The image the chart runs by default: values.yaml leaves the tag to appVersion, and the
    // committed rendering (deploy.rs keeps it equal to `helm template`) names it.
    let values: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&read("deploy/helm/nodemedic/values.yaml")).unwrap();
    let tag = values["image"]["tag"].as_str().unwrap_or("");
    assert!(
        tag.is_empty() || tag == VERSION,
        "values.yaml's image.tag {tag:?} is neither empty (appVersion) nor {VERSION}"
    );
    let image = format!("image: \"localhost/nodemedic:{VERSION}\"");
    assert!(
        read("deploy/kubernetes/nodemedic.yaml")
            .lines()
            .any(|l| l.trim() == image),
        "deploy/kubernetes/nodemedic.yaml does not run {image}"
    );

    // The tag build-image.sh and tests/image.sh use: bootstrap.sh's nodemedic_version.
    let out = Command::new("bash")
        .arg("-c")
        .arg(". deploy/bootstrap.sh && nodemedic_version")
        .current_dir(workspace_root())
        .output()
        .unwrap();
    assert!(out.status.success(), "nodemedic_version failed");
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        VERSION,
        "the image tag (bootstrap.sh's nodemedic_version)"
    );

    // cargo-deb takes the package's version unless [package.metadata.deb] overrides it.
    let package = toml_file("crates/nodemedic/Cargo.toml");
    let deb = &package["package"]["metadata"]["deb"];
    if let Some(v) = deb.get("version") {
        assert_eq!(v.as_str(), Some(VERSION), "[package.metadata.deb] version");
    }
    assert_eq!(
        package["package"]["version"].get("workspace"),
        Some(&toml::Value::Boolean(true)),
        "the nodemedic crate's version is not the workspace's"
    );

    // The newest changelog entry is this version.
    let changelog = read("CHANGELOG.md");
    let newest = changelog_newest_version(&changelog);
    assert_eq!(newest, VERSION, "CHANGELOG.md's newest version");
}
