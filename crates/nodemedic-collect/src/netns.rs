//! Which network namespace a collector's files describe.
//!
//! `/proc/net` (a link to `/proc/self/net`) and `/proc/sys/net` show the namespace of the
//! process that reads them, whatever procfs mount they are read through: in a pod without
//! `hostNetwork` that is the pod's. A collector says in its declaration
//! ([`crate::Collector::network_namespace`]) whether it reads such files and what they hold
//! there; [`network_namespace`] tells whether nodemedic reads the host's. A collector whose
//! files would describe the pod's namespace is then `unavailable` with the reason, never the
//! pod's values reported as the node's.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use crate::Paths;

/// What a collector reads from a network namespace, in its declaration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetnsUse {
    /// Nothing network-namespaced.
    None,
    /// Files that every namespace lists with the node's content (`/proc/net/softnet_stat`: the
    /// per-CPU counters are not per namespace). Read in any namespace. The text names them.
    NodeWide(&'static str),
    /// Files whose content is the reader's namespace's (`nf_conntrack_count`, the namespace's
    /// sockets): outside the host's namespace the whole collector is `unavailable`. The text
    /// names them.
    Reader(&'static str),
    /// Some of its files are the reader's namespace's; the collector leaves those out itself
    /// outside the host's namespace, with the reason ([`crate::Ctx::netns`]). The text names
    /// them.
    Partly(&'static str),
}

/// Whose network namespace the files under the configured paths describe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetnsView {
    /// The host's, or a tree's that is not a live procfs (a fixture or a capture, whose files
    /// are the node's as they were written).
    Host,
    /// Another namespace than the host's, with how that was seen.
    Other(String),
}

impl NetnsView {
    /// The reason a collector of `use_` is unavailable in this view, if it is.
    pub fn refuses(&self, use_: NetnsUse) -> Option<String> {
        match (self, use_) {
            (NetnsView::Other(seen), NetnsUse::Reader(files)) => Some(format!(
                "{files} describe the reader's network namespace, and nodemedic runs in another \
                 one than the host's ({seen}): run it in the host's network namespace \
                 (hostNetwork: true)"
            )),
            _ => None,
        }
    }
}

/// Whether the network-namespaced files under `paths.procfs` are the host's.
///
/// Only a live procfs has namespaced files; a tree (a fixture) is the node's. On a live
/// procfs, this process's namespace (its `/proc/self/net/dev`) is compared with the host's
/// interfaces, listed under `paths.sysfs` (a sysfs mount lists the namespace it was mounted
/// in: the chart binds the host's `/sys` at `/host/sys` unless `hostNetwork` is on, and then
/// the container's own `/sys` is the host's namespace too). PID 1's `ns/net` link would say
/// it directly, but reading it takes ptrace access to PID 1, which a pod's AppArmor profile
/// refuses, with a denial logged.
pub fn network_namespace(paths: &Paths) -> NetnsView {
    if !is_live_procfs(&paths.procfs) {
        return NetnsView::Host;
    }
    let listed = paths.sysfs.join("class/net");
    // An interface made or removed between the two reads (a pod's veth on a busy node) makes
    // one comparison differ: another namespace differs every time.
    let mut view = NetnsView::Host;
    for _ in 0..3 {
        let Ok(text) = fs::read_to_string("/proc/self/net/dev") else {
            return NetnsView::Host;
        };
        let Ok(entries) = fs::read_dir(&listed) else {
            return NetnsView::Host;
        };
        let host: BTreeSet<String> = entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        view = compare_interfaces(&dev_interfaces(&text), &host, &listed);
        if view == NetnsView::Host {
            break;
        }
    }
    view
}

/// The verdict from the two interface lists: the same names, or which differ.
pub fn compare_interfaces(
    own: &BTreeSet<String>,
    host: &BTreeSet<String>,
    listed: &Path,
) -> NetnsView {
    if own == host || host.is_empty() {
        return NetnsView::Host;
    }
    let list = |s: &BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>().join(", ");
    NetnsView::Other(format!(
        "its namespace has {}; {} lists the host's {}",
        list(own),
        listed.display(),
        list(host)
    ))
}

/// The interface names of a `/proc/net/dev` text (two header lines, then `name: counters`).
pub fn dev_interfaces(text: &str) -> BTreeSet<String> {
    text.lines()
        .skip(2)
        .filter_map(|l| l.split_once(':'))
        .map(|(name, _)| name.trim().to_owned())
        .filter(|n| !n.is_empty())
        .collect()
}

fn is_live_procfs(path: &Path) -> bool {
    rustix::fs::statfs(path).is_ok_and(|s| s.f_type == rustix::fs::PROC_SUPER_MAGIC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interfaces_of_proc_net_dev() {
        let text = "Inter-|   Receive                                                |  Transmit\n \
                    face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
                    lo:    1234      12    0    0    0     0          0         0     1234      12    0    0    0     0       0          0\n  \
                    eth0: 5678 9 0 0 0 0 0 0 5678 9 0 0 0 0 0 0\n";
        let got: Vec<String> = dev_interfaces(text).into_iter().collect();
        assert_eq!(got, ["eth0", "lo"]);
        assert!(dev_interfaces("").is_empty());
        assert!(dev_interfaces("a\nb\n").is_empty());
    }

    #[test]
    fn another_namespace_is_named_and_refuses_reader_collectors() {
        let set = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        let listed = Path::new("/host/sys/class/net");
        let pod = set(&["eth0", "lo"]);
        let host = set(&["cni0", "eth0", "lo", "veth1"]);
        let view = compare_interfaces(&pod, &host, listed);
        assert_eq!(
            view,
            NetnsView::Other(
                "its namespace has eth0, lo; /host/sys/class/net lists the host's cni0, eth0, \
                 lo, veth1"
                    .into()
            )
        );
        let why = view
            .refuses(NetnsUse::Reader("/proc/net/nf_conntrack"))
            .unwrap_or_default();
        assert!(
            why.starts_with("/proc/net/nf_conntrack describe the reader's network namespace"),
            "{why}"
        );
        assert!(why.contains("hostNetwork: true"), "{why}");
        assert_eq!(view.refuses(NetnsUse::NodeWide("softnet_stat")), None);
        assert_eq!(view.refuses(NetnsUse::Partly("net.core")), None);
        assert_eq!(view.refuses(NetnsUse::None), None);
        assert_eq!(compare_interfaces(&host, &host, listed), NetnsView::Host);
        assert_eq!(NetnsView::Host.refuses(NetnsUse::Reader("x")), None);
    }

    /// A fixture tree is not a live procfs: its files are the node's. This machine's own
    /// /proc and /sys are one namespace's.
    #[test]
    fn a_tree_is_the_node_and_this_process_reads_its_own() {
        let tree = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        assert_eq!(
            network_namespace(&Paths::under(tree.path())),
            NetnsView::Host
        );
        assert_eq!(network_namespace(&Paths::under("/")), NetnsView::Host);
    }
}
