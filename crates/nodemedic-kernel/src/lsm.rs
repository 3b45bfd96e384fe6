//! Which Linux security module confines this process, from its own attributes, and the words
//! that name one as the cause of a refusal.
//!
//! A read, a write or a `bpf()` call that an LSM refuses fails with `EACCES` or `EPERM`, the
//! same errors a file's mode or a missing capability gives. What tells them apart here is
//! the process's own label: under an AppArmor profile in enforce mode or an SELinux type in
//! an enforcing policy, such a refusal is named as the LSM's, with the profile or label, so
//! that the fix (the profile, the policy) is the one an operator looks at. A process no LSM
//! confines (`unconfined`, no label, complain or permissive mode) keeps the plain words:
//! nothing claims an LSM it cannot see.
//!
//! The inputs are the texts of `/proc/self/attr/apparmor/current` (AppArmor on kernels that
//! give each LSM its directory), `/proc/self/attr/current` (AppArmor on older kernels, or
//! SELinux's context), `/sys/kernel/security/lsm` (the active LSMs) and
//! `/sys/fs/selinux/enforce`; the caller reads them once (they do not change while the
//! process runs) and passes what it could read.
//!
//! A D-Bus call is refused by the bus, not the kernel: dbus-daemon answers with
//! `org.freedesktop.DBus.Error.AccessDenied` and a message that names the policy
//! ([`dbus_refusal`]).

use serde::{Deserialize, Serialize};

/// `EPERM` and `EACCES`, the errors an LSM's refusal gives (the same numbers on every Linux
/// architecture nodemedic builds for).
pub const EPERM: i32 = 1;
pub const EACCES: i32 = 13;

/// A security module that can refuse what nodemedic does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Lsm {
    AppArmor,
    Selinux,
}

impl Lsm {
    /// The name as the module spells it.
    pub fn name(self) -> &'static str {
        match self {
            Lsm::AppArmor => "AppArmor",
            Lsm::Selinux => "SELinux",
        }
    }

    /// The name in `/sys/kernel/security/lsm`.
    pub fn id(self) -> &'static str {
        match self {
            Lsm::AppArmor => "apparmor",
            Lsm::Selinux => "selinux",
        }
    }
}

/// One module's label on this process, as the kernel gives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Label {
    pub lsm: Lsm,
    /// AppArmor: the profile, or a stack of them (`a//&b`), or `unconfined`; SELinux: the
    /// whole context (`system_u:system_r:container_t:s0:c12,c34`).
    pub label: String,
    /// AppArmor: the mode the kernel shows after the profile (`enforce`, `complain`, `kill`,
    /// `mixed`…); SELinux: `enforcing` or `permissive` from selinuxfs, when it was readable.
    pub mode: Option<String>,
}

/// `AppArmor cri-containerd.apparmor.d (enforce)`, `SELinux system_u:system_r:spc_t:s0
/// (enforcing)`: the module's name, the label, and its mode where known.
impl std::fmt::Display for Label {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.lsm.name(), self.label)?;
        match &self.mode {
            Some(mode) => write!(f, " ({mode})"),
            None => Ok(()),
        }
    }
}

/// AppArmor modes in which a profile refuses what it does not allow. `mixed` is a stack of
/// profiles in different modes, of which at least one is not complaining.
const APPARMOR_REFUSING_MODES: [&str; 4] = ["enforce", "kill", "mixed", "prompt"];

impl Label {
    /// Whether a refusal of this process may be this module's: an AppArmor profile in a
    /// refusing mode (not `unconfined`, not `complain`), an SELinux context unless the policy
    /// is known to be permissive.
    pub fn refuses(&self) -> bool {
        match self.lsm {
            Lsm::AppArmor => self
                .mode
                .as_deref()
                .is_some_and(|m| APPARMOR_REFUSING_MODES.contains(&m)),
            Lsm::Selinux => self.mode.as_deref() != Some("permissive"),
        }
    }

    /// `denied by AppArmor (profile cri-containerd.apparmor.d, enforce mode)`, `denied by
    /// SELinux (label system_u:system_r:container_t:s0:c12,c34)`.
    pub fn denied_by(&self) -> String {
        match (self.lsm, &self.mode) {
            (Lsm::AppArmor, Some(mode)) => {
                format!("denied by AppArmor (profile {}, {mode} mode)", self.label)
            }
            (Lsm::AppArmor, None) => format!("denied by AppArmor (profile {})", self.label),
            (Lsm::Selinux, _) => format!("denied by SELinux (label {})", self.label),
        }
    }
}

/// What the process's attributes say, read once at start.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LsmContext {
    /// The active modules in the kernel's order (`/sys/kernel/security/lsm`); `None` when it
    /// could not be read (a container without securityfs).
    pub active: Option<Vec<String>>,
    /// The labels found, whether they confine the process or not (`unconfined` is shown).
    pub labels: Vec<Label>,
}

/// The texts [`LsmContext::from_files`] reads, each `None` when the file could not be read.
#[derive(Debug, Clone, Copy, Default)]
pub struct LsmFiles<'a> {
    /// `/proc/self/attr/apparmor/current`.
    pub apparmor_current: Option<&'a str>,
    /// `/proc/self/attr/current`.
    pub current: Option<&'a str>,
    /// `/sys/kernel/security/lsm`.
    pub lsm: Option<&'a str>,
    /// `/sys/fs/selinux/enforce`.
    pub selinux_enforce: Option<&'a str>,
}

impl LsmContext {
    /// The labels as a reader is told them, `AppArmor nodemedic (enforce), …`; `None` for
    /// no label at all.
    pub fn labels_text(&self) -> Option<String> {
        (!self.labels.is_empty()).then(|| {
            let labels: Vec<String> = self.labels.iter().map(ToString::to_string).collect();
            labels.join(", ")
        })
    }

    /// The context the files give. A label counts only for a module the active list names
    /// (when the list was readable); `/proc/self/attr/current` is read as AppArmor's when it
    /// has AppArmor's shape (`profile (mode)`, `unconfined`) and no `apparmor/` directory
    /// gave the label already, else as SELinux's when it has a context's shape
    /// (`user:role:type[:level]`), else not at all.
    pub fn from_files(files: &LsmFiles<'_>) -> Self {
        let active = files.lsm.map(parse_lsm_list);
        let may_be = |lsm: Lsm| {
            active
                .as_ref()
                .is_none_or(|a| a.iter().any(|m| m == lsm.id()))
        };
        let mut labels = Vec::new();
        let own_apparmor = files
            .apparmor_current
            .and_then(parse_apparmor)
            .filter(|_| may_be(Lsm::AppArmor));
        let had_apparmor = own_apparmor.is_some();
        labels.extend(own_apparmor);
        if let Some(current) = files.current {
            let apparmor = (!had_apparmor)
                .then(|| parse_apparmor(current))
                .flatten()
                .filter(|_| may_be(Lsm::AppArmor));
            match apparmor {
                Some(l) => labels.push(l),
                None => {
                    if let Some(mut l) = parse_selinux(current).filter(|_| may_be(Lsm::Selinux)) {
                        l.mode = files.selinux_enforce.and_then(selinux_mode);
                        labels.push(l);
                    }
                }
            }
        }
        Self { active, labels }
    }

    /// The label that may have refused an operation that failed with `errno`: the first that
    /// refuses ([`Label::refuses`]), for `EACCES` and `EPERM` only.
    pub fn refusing(&self, errno: Option<i32>) -> Option<&Label> {
        if !matches!(errno, Some(EACCES | EPERM)) {
            return None;
        }
        self.labels.iter().find(|l| l.refuses())
    }

    /// `"{operation} denied by AppArmor (profile …, enforce mode)"` when an operation that
    /// failed with `errno` may have been refused by a module confining this process (see
    /// [`LsmContext::refusing`]); `None` otherwise, and the caller keeps its own words.
    pub fn denial(&self, operation: &str, errno: Option<i32>) -> Option<String> {
        self.refusing(errno)
            .map(|l| format!("{operation} {}", l.denied_by()))
    }

    /// This module's label on the process, if it has one.
    pub fn label(&self, lsm: Lsm) -> Option<&Label> {
        self.labels.iter().find(|l| l.lsm == lsm)
    }
}

/// The names of `/sys/kernel/security/lsm` (`lockdown,capability,landlock,yama,apparmor`).
pub fn parse_lsm_list(text: &str) -> Vec<String> {
    text.trim_matches(|c: char| c == '\0' || c.is_whitespace())
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The text of an attribute file without the end the kernel gives it: AppArmor ends its with
/// a newline, SELinux with a NUL.
fn attr_text(text: &str) -> &str {
    text.trim_matches(|c: char| c == '\0' || c.is_whitespace())
}

/// An AppArmor label: `unconfined`, or `profile (mode)` (the profile may be a stack,
/// `a//&b`, or a namespaced `:ns:profile`). `None` for anything else.
pub fn parse_apparmor(text: &str) -> Option<Label> {
    let text = attr_text(text);
    if text == "unconfined" {
        return Some(Label {
            lsm: Lsm::AppArmor,
            label: text.to_owned(),
            mode: None,
        });
    }
    let (label, mode) = text.strip_suffix(')')?.rsplit_once(" (")?;
    let label = label.trim();
    let ok_mode = !mode.is_empty() && mode.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if label.is_empty() || !ok_mode || label.contains('\n') {
        return None;
    }
    Some(Label {
        lsm: Lsm::AppArmor,
        label: label.to_owned(),
        mode: Some(mode.to_owned()),
    })
}

/// An SELinux context: `user:role:type` and an optional MLS/MCS level or range, which may
/// hold colons of its own (`s0:c12,c34`, `s0-s0:c0.c1023`). `None` for anything else.
pub fn parse_selinux(text: &str) -> Option<Label> {
    let text = attr_text(text);
    let mut parts = text.splitn(4, ':');
    let (user, role, kind) = (parts.next()?, parts.next()?, parts.next()?);
    let word = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-')
    };
    if !(word(user) && word(role) && word(kind)) {
        return None;
    }
    if parts.next().is_some_and(|level| {
        level.is_empty() || level.chars().any(|c| c.is_whitespace() || c.is_control())
    }) {
        return None;
    }
    Some(Label {
        lsm: Lsm::Selinux,
        label: text.to_owned(),
        mode: None,
    })
}

/// `/sys/fs/selinux/enforce`: `1` enforcing, `0` permissive.
fn selinux_mode(text: &str) -> Option<String> {
    match text.trim() {
        "1" => Some("enforcing".to_owned()),
        "0" => Some("permissive".to_owned()),
        _ => None,
    }
}

/// The D-Bus error a bus answers a refused call with.
pub const DBUS_ACCESS_DENIED: &str = "org.freedesktop.DBus.Error.AccessDenied";

/// A D-Bus call the bus's AppArmor or SELinux mediation refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbusRefusal {
    pub lsm: Lsm,
    /// The sender's label as the bus logged it (dbus-daemon's AppArmor message carries it:
    /// `sender=":1.40" (uid=0 pid=… comm="…" label="… (enforce)")`).
    pub sender_label: Option<String>,
}

/// Which module refused a D-Bus call, from the error's name and message: dbus-daemon answers
/// `org.freedesktop.DBus.Error.AccessDenied` with "An AppArmor policy prevents this sender
/// from sending this message to this recipient; type=…" or "An SELinux policy prevents this
/// sender …". Any other error, or an `AccessDenied` of the bus's own XML policy, is `None`.
pub fn dbus_refusal(error_name: &str, message: &str) -> Option<DbusRefusal> {
    if error_name != DBUS_ACCESS_DENIED {
        return None;
    }
    let lower = message.to_ascii_lowercase();
    let lsm = if lower.contains("apparmor") {
        Lsm::AppArmor
    } else if lower.contains("selinux") {
        Lsm::Selinux
    } else {
        return None;
    };
    Some(DbusRefusal {
        lsm,
        sender_label: sender_label(message),
    })
}

/// The `label="…"` of the sender's part of a dbus-daemon complaint (before `destination=`,
/// whose part names the recipient's label).
fn sender_label(message: &str) -> Option<String> {
    let from = message.find("sender=")?;
    let rest = message.get(from..)?;
    let rest = rest.get(..rest.find(" destination=").unwrap_or(rest.len()))?;
    let start = rest.find(" label=\"")? + " label=\"".len();
    let value = rest.get(start..)?;
    let end = value.find('"')?;
    let label = value.get(..end)?;
    (!label.is_empty()).then(|| label.to_owned())
}

impl DbusRefusal {
    /// `"{call} denied by AppArmor (profile …, enforce mode)"`: the profile or label from this
    /// process's own context when it has one of that module, else the one the bus logged for
    /// the sender, else the module alone.
    pub fn denial(&self, call: &str, context: &LsmContext) -> String {
        let own = context.label(self.lsm).filter(|l| l.label != "unconfined");
        let logged = || {
            let text = self.sender_label.as_deref()?;
            match self.lsm {
                Lsm::AppArmor => parse_apparmor(text),
                Lsm::Selinux => parse_selinux(text),
            }
        };
        match own.cloned().or_else(logged) {
            Some(l) => format!("{call} {}", l.denied_by()),
            None => format!("{call} denied by {}", self.lsm.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn files<'a>(
        apparmor_current: Option<&'a str>,
        current: Option<&'a str>,
        lsm: Option<&'a str>,
    ) -> LsmFiles<'a> {
        LsmFiles {
            apparmor_current,
            current,
            lsm,
            selinux_enforce: None,
        }
    }

    /// Texts as the kernel gives them: AppArmor's end in a newline, SELinux's in a NUL.
    const NODEMEDIC: &str = "nodemedic (enforce)\n";
    const CONTAINERD: &str = "cri-containerd.apparmor.d (enforce)\n";
    const CONTAINER_T: &str = "system_u:system_r:container_t:s0:c12,c34\0";
    /// Debian 13's /sys/kernel/security/lsm with AppArmor; a RHEL 9 node's with SELinux.
    const DEBIAN_LSMS: &str = "lockdown,capability,landlock,yama,apparmor,tomoyo,bpf,ipe,ima,evm";
    const RHEL_LSMS: &str = "lockdown,capability,yama,selinux,bpf";

    #[test]
    fn apparmor_from_its_own_directory_on_newer_kernels() {
        let c = LsmContext::from_files(&files(
            Some(CONTAINERD),
            Some(CONTAINERD),
            Some(DEBIAN_LSMS),
        ));
        assert_eq!(
            c.labels,
            vec![Label {
                lsm: Lsm::AppArmor,
                label: "cri-containerd.apparmor.d".into(),
                mode: Some("enforce".into()),
            }],
            "attr/current repeats AppArmor's label: one label, not two"
        );
        assert_eq!(c.active.as_ref().map(Vec::len), Some(10));
        assert_eq!(
            c.denial("read of /host/proc/interrupts", Some(EACCES)).as_deref(),
            Some("read of /host/proc/interrupts denied by AppArmor (profile cri-containerd.apparmor.d, enforce mode)")
        );
        assert!(c.denial("read", Some(EPERM)).is_some());
        // Another error is not a refusal.
        assert_eq!(c.denial("read", Some(2)), None);
        assert_eq!(c.denial("read", None), None);
    }

    #[test]
    fn apparmor_from_attr_current_on_older_kernels() {
        let c = LsmContext::from_files(&files(None, Some(NODEMEDIC), None));
        assert_eq!(
            c.refusing(Some(EACCES)).map(Label::denied_by).as_deref(),
            Some("denied by AppArmor (profile nodemedic, enforce mode)")
        );
        // A stack, and a profile in a namespace, as the kernel shows them.
        let stacked =
            parse_apparmor("cri-containerd.apparmor.d//&:ns:nodemedic (mixed)\n").unwrap();
        assert_eq!(stacked.label, "cri-containerd.apparmor.d//&:ns:nodemedic");
        assert!(stacked.refuses());
        assert!(parse_apparmor("nodemedic (kill)").unwrap().refuses());
    }

    /// Nothing claims an LSM that does not refuse: unconfined, complain mode, a permissive
    /// SELinux, or no LSM at all (this machine: `/proc/self/attr/current` is EINVAL).
    #[test]
    fn unconfined_complain_permissive_and_none_are_not_named() {
        for text in [
            "unconfined\n",
            "nodemedic (complain)\n",
            "nodemedic (unconfined)\n",
        ] {
            let c = LsmContext::from_files(&files(Some(text), Some(text), Some(DEBIAN_LSMS)));
            assert_eq!(c.labels.len(), 1, "{text:?}");
            assert_eq!(c.denial("read", Some(EACCES)), None, "{text:?}");
        }
        let permissive = LsmContext::from_files(&LsmFiles {
            current: Some(CONTAINER_T),
            lsm: Some(RHEL_LSMS),
            selinux_enforce: Some("0"),
            ..Default::default()
        });
        assert_eq!(permissive.labels[0].mode.as_deref(), Some("permissive"));
        assert_eq!(permissive.denial("read", Some(EACCES)), None);
        let none = LsmContext::from_files(&LsmFiles::default());
        assert_eq!(none, LsmContext::default());
        assert_eq!(none.denial("read", Some(EACCES)), None);
    }

    #[test]
    fn selinux_context_from_attr_current() {
        let c = LsmContext::from_files(&LsmFiles {
            current: Some(CONTAINER_T),
            lsm: Some(RHEL_LSMS),
            selinux_enforce: Some("1\n"),
            ..Default::default()
        });
        assert_eq!(
            c.labels,
            vec![Label {
                lsm: Lsm::Selinux,
                label: "system_u:system_r:container_t:s0:c12,c34".into(),
                mode: Some("enforcing".into()),
            }]
        );
        assert_eq!(
            c.denial("bpf(BPF_PROG_LOAD)", Some(EACCES)).as_deref(),
            Some("bpf(BPF_PROG_LOAD) denied by SELinux (label system_u:system_r:container_t:s0:c12,c34)")
        );
        // Without selinuxfs the mode is unknown, and a refusal may be SELinux's.
        let c = LsmContext::from_files(&files(None, Some("system_u:system_r:spc_t:s0\0"), None));
        assert!(c.refusing(Some(EPERM)).is_some());
        // MLS ranges keep their colons.
        let l = parse_selinux("unconfined_u:unconfined_r:unconfined_t:s0-s0:c0.c1023").unwrap();
        assert_eq!(
            l.label,
            "unconfined_u:unconfined_r:unconfined_t:s0-s0:c0.c1023"
        );
    }

    /// A label counts only for a module the kernel says is active, and a text of neither
    /// shape (Smack's `_`, garbage) for none.
    #[test]
    fn shapes_and_the_active_list() {
        let c = LsmContext::from_files(&files(None, Some(CONTAINER_T), Some(DEBIAN_LSMS)));
        assert!(c.labels.is_empty(), "{c:?}");
        let c = LsmContext::from_files(&files(None, Some(NODEMEDIC), Some(RHEL_LSMS)));
        assert!(c.labels.is_empty(), "{c:?}");
        for text in [
            "_",
            "",
            "\0",
            "a:b",
            "a::c",
            "nodemedic (enforce",
            "nodemedic ()",
            " (enforce)",
            "a:b:c d",
        ] {
            let c = LsmContext::from_files(&files(None, Some(text), None));
            assert!(c.labels.is_empty(), "{text:?}: {c:?}");
        }
        assert_eq!(
            parse_lsm_list("capability,,yama\n"),
            vec!["capability", "yama"]
        );
    }

    /// dbus-daemon's AppArmor refusal, as captured from a snap on Ubuntu (kiwix-desktop asking
    /// NetworkManager), and the same complaint for nodemedic's TryRestartUnit in its shape.
    const APPARMOR_DBUS_CAPTURED: &str = "An AppArmor policy prevents this sender from sending this message to this recipient; type=\"method_call\", sender=\":1.4002\" (uid=1000 pid=21585 comm=\"/snap/kiwix-desktop/x3/usr/local/bin/kiwix-desktop\" label=\"snap.kiwix-desktop.kiwix-desktop (enforce)\") interface=\"org.freedesktop.DBus.Properties\" member=\"GetAll\" error name=\"(unset)\" requested_reply=\"0\" destination=\"org.freedesktop.NetworkManager\" (uid=0 pid=5819 comm=\"/usr/sbin/NetworkManager --no-daemon \" label=\"unconfined\")";
    const APPARMOR_DBUS_NODEMEDIC: &str = "An AppArmor policy prevents this sender from sending this message to this recipient; type=\"method_call\", sender=\":1.57\" (uid=0 pid=4242 comm=\"nodemedic run\" label=\"cri-containerd.apparmor.d (enforce)\") interface=\"org.freedesktop.systemd1.Manager\" member=\"TryRestartUnit\" error name=\"(unset)\" requested_reply=\"0\" destination=\"org.freedesktop.systemd1\" (uid=0 pid=1 comm=\"/sbin/init\" label=\"unconfined\")";
    /// dbus-daemon's SELinux refusal as captured (its log names no label).
    const SELINUX_DBUS_CAPTURED: &str = "An SELinux policy prevents this sender from sending this message to this recipient. 0 matched rules; type=\"method_call\", sender=\":1.17\" (uid=0 pid=6738 comm=\"\") interface=\"org.freedesktop.DBus.Introspectable\" member=\"Introspect\" error name=\"(unset)\" requested_reply=\"0\" destination=\"uk.org.thekelleys.dnsmasq\" (uid=0 pid=6635 comm=\"\")";

    #[test]
    fn dbus_refusals_are_recognised_by_name_and_message() {
        let r = dbus_refusal(DBUS_ACCESS_DENIED, APPARMOR_DBUS_CAPTURED).unwrap();
        assert_eq!(r.lsm, Lsm::AppArmor);
        assert_eq!(
            r.sender_label.as_deref(),
            Some("snap.kiwix-desktop.kiwix-desktop (enforce)")
        );
        // The label the bus logged, when this process's own is not known.
        let r = dbus_refusal(DBUS_ACCESS_DENIED, APPARMOR_DBUS_NODEMEDIC).unwrap();
        assert_eq!(
            r.denial("TryRestartUnit(irqbalance.service)", &LsmContext::default()),
            "TryRestartUnit(irqbalance.service) denied by AppArmor (profile cri-containerd.apparmor.d, enforce mode)"
        );
        // This process's own label first.
        let own = LsmContext::from_files(&files(Some(NODEMEDIC), None, None));
        assert_eq!(
            r.denial("TryRestartUnit(irqbalance.service)", &own),
            "TryRestartUnit(irqbalance.service) denied by AppArmor (profile nodemedic, enforce mode)"
        );
        let r = dbus_refusal(DBUS_ACCESS_DENIED, SELINUX_DBUS_CAPTURED).unwrap();
        assert_eq!((r.lsm, r.sender_label.as_deref()), (Lsm::Selinux, None));
        assert_eq!(
            r.denial("LoadUnit(irqbalance.service)", &LsmContext::default()),
            "LoadUnit(irqbalance.service) denied by SELinux"
        );
        let selinux = LsmContext::from_files(&files(None, Some(CONTAINER_T), Some(RHEL_LSMS)));
        assert_eq!(
            r.denial("LoadUnit(irqbalance.service)", &selinux),
            "LoadUnit(irqbalance.service) denied by SELinux (label system_u:system_r:container_t:s0:c12,c34)"
        );
        // The bus's own XML policy, polkit, and other errors are not an LSM's.
        assert_eq!(
            dbus_refusal(
                DBUS_ACCESS_DENIED,
                "Rejected send message, 2 matched rules; type=\"method_call\", sender=\":1.9\""
            ),
            None
        );
        assert_eq!(
            dbus_refusal(
                "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired",
                "Interactive authentication required."
            ),
            None
        );
        assert_eq!(
            dbus_refusal("org.freedesktop.systemd1.NoSuchUnit", "apparmor"),
            None
        );
    }

    #[test]
    fn odd_texts_never_panic() {
        for text in [
            "",
            "(",
            ")",
            " ()",
            "sender=",
            "sender= label=\"",
            "sender=\u{e9} label=\"\u{e9}\"",
            "label=\"x\" sender=",
        ] {
            let _ = parse_apparmor(text);
            let _ = parse_selinux(text);
            let _ = sender_label(text);
            let _ = dbus_refusal(DBUS_ACCESS_DENIED, &format!("AppArmor {text}"));
        }
    }
}
