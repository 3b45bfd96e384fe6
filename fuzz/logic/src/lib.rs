//! Entry points shared by the one cargo-fuzz binary (`fuzz/fuzz_targets/parsers.rs`, which
//! runs the target [`selected`] names) and the corpus replay test (`tests/corpus.rs`, run by
//! `cargo test`). Each runs one parser (a collector's, in
//! `nodemedic_collect::sources`, or a shared one of nodemedic-kernel) on arbitrary bytes and checks invariants a correct result must keep; any panic, in the
//! parser or here, is a bug.

use nodemedic_collect::sources::cgroups as cgroup;
use nodemedic_collect::sources::interrupts::{self, device};
use nodemedic_collect::sources::pressure as psi;
use nodemedic_collect::sources::{irqbalance, softirqs, softnet, tuning};
use nodemedic_kernel::{cpuset::CpuSet, lsm, mounts, pid_stat};

/// A table with rows of both kinds, as the past table whose storage a parse fills again.
const PAST_INTERRUPTS: &str = "  CPU0 CPU1 CPU2\n  9:  1 0 2  IO-APIC 9-fasteoi acpi\nNMI: 1 2 3 Non-maskable interrupts\nLOC: 4 5 6 Local timer interrupts\nERR: 0\n";

pub fn interrupts(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let parsed = interrupts::parse(&text);
    // Into a past table's storage (the daemon's every sample), the table is the same.
    let past = interrupts::parse(PAST_INTERRUPTS);
    assert!(past.is_ok(), "the past table parses");
    let into = interrupts::Parser::reusing_in(&[], past.unwrap_or_default()).parse(&text);
    assert_eq!(into, parsed);
    if let Ok(p) = parsed {
        for irq in &p.irqs {
            let counts = p.counts(irq);
            assert!(counts.len() <= p.cpus.len());
            // Only non-zero counts are stored, in ascending columns within the row.
            let (cols, values) = counts.parts();
            assert!(values.iter().all(|v| *v != 0));
            assert!(cols.windows(2).all(|w| w[0] < w[1]));
            assert!(cols.iter().all(|c| (*c as usize) < counts.len()));
            assert_eq!(counts.dense().count(), counts.len());
            let _ = counts.total();
            let d = &irq.desc;
            let _ = device::classify(&d.chip, d.hwirq.as_deref(), &d.actions);
        }
        for arch in &p.arch {
            assert!(arch.counts.len() <= p.cpus.len());
        }
    }
}

pub fn softirqs(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let parsed = softirqs::parse(&text);
    // Into a past table's storage (the daemon's every sample), the table is the same.
    let past = softirqs::parse("  CPU0 CPU1 CPU2\n HI: 1 2 3\n NET_RX: 4 5 6\nx\n");
    assert!(past.is_ok(), "the past table parses");
    let mut into = past.unwrap_or_default();
    let again = softirqs::parse_into(&text, &mut into).map(|()| into);
    assert_eq!(again, parsed);
    if let Ok(p) = parsed {
        for row in &p.rows {
            assert!(row.counts.len() <= p.cpus.len());
        }
    }
}

pub fn softnet(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let p = softnet::parse(&text);
    let _ = softnet::assign_cpus(&p.rows, &[0, 1, 2, 3]);
}

pub fn pid_stat(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(stat) = pid_stat::parse(&text) {
        // The fields come after the last ')': text before it, the command, cannot change them.
        if let Some(end) = text.rfind(')') {
            let renamed = format!("1 (x){}", &text[end + 1..]);
            assert_eq!(pid_stat::parse(&renamed), Ok(stat));
        }
    }
}

pub fn cpuset(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(set) = CpuSet::parse_list(&text) {
        assert_eq!(
            CpuSet::parse_list(&set.to_list_string()).ok(),
            Some(set.clone())
        );
        assert_eq!(CpuSet::parse_mask(&set.to_mask_string()).ok(), Some(set));
    }
    if let Ok(set) = CpuSet::parse_mask(&text) {
        assert_eq!(CpuSet::parse_mask(&set.to_mask_string()).ok(), Some(set));
    }
}

pub fn irqbalance_env(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let env = irqbalance::parse_env_file(&text);
    let _ = irqbalance::banned_cpus(&env);
    // The same bytes as dpkg's status database: a version found is one of its lines' values.
    if let Some(v) = irqbalance::dpkg_installed_version(&text, "irqbalance") {
        assert!(text
            .lines()
            .filter_map(|l| l.strip_prefix("Version: "))
            .any(|rest| rest.trim() == v));
    }
}

pub fn psi(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    // What the byte-level reader takes, the line parser reads to the same bits.
    if let Some(exact) = psi::parse_exact(text.as_bytes()) {
        let bits = |p: &psi::Psi| {
            [p.some, p.full].map(|l| {
                l.map(|l| {
                    (
                        l.avg10.to_bits(),
                        l.avg60.to_bits(),
                        l.avg300.to_bits(),
                        l.total_us,
                    )
                })
            })
        };
        let lines = psi::parse_lines(&text);
        assert_eq!(
            Ok(bits(&exact)),
            lines.as_ref().map(bits),
            "the line parser reads an exact file otherwise"
        );
    }
    if let Ok(p) = psi::parse(&text) {
        assert!(p.some.is_some() || p.full.is_some());
        // Every total read is one the text spells out after `total=`.
        let totals: Vec<u64> = text
            .split("total=")
            .skip(1)
            .filter_map(|rest| {
                rest.split(|c: char| !c.is_ascii_digit())
                    .next()?
                    .parse()
                    .ok()
            })
            .collect();
        for line in [p.some, p.full].into_iter().flatten() {
            for avg in [line.avg10, line.avg60, line.avg300] {
                assert!(avg.is_finite() && avg >= 0.0, "{avg}");
            }
            assert!(
                totals.contains(&line.total_us),
                "{} not in {totals:?}",
                line.total_us
            );
        }
    }
}

/// `cpu.max`, v1 `cfs_quota_us`/`cfs_period_us` (the input split at its first NUL) and
/// `cpu.stat`.
pub fn cgroup_cpu(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(m) = cgroup::parse_cpu_max(&text) {
        assert!(m.period_us > 0);
        assert!(m.cores().is_none_or(|c| c.is_finite() && c >= 0.0));
    }
    let (quota, period) = text.split_once('\0').unwrap_or((&text, "100000\n"));
    if let Ok(m) = cgroup::parse_cfs(quota, period) {
        assert!(m.period_us > 0 && m.quota_us != Some(0));
    }
    // The plain-line shortcut of `cpu.stat` gives the words splitting at whitespace gives.
    for line in text.lines() {
        if let Some((key, value)) = cgroup::key_value(line) {
            let mut words = line.split_whitespace();
            assert_eq!(
                (words.next(), words.next(), words.next()),
                (Some(key), Some(value), None)
            );
        }
    }
    if let Ok(s) = cgroup::parse_cpu_stat(&text) {
        let r = s.throttled_ratio_since(&cgroup::CpuStat::default());
        assert!(r.is_none_or(|r| (0.0..=1.0).contains(&r)));
    }
    if let Ok(us) = cgroup::parse_cpuacct_usage(&text) {
        assert!(us <= u64::MAX / 1000);
    }
}

pub fn cgroup_path(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    match cgroup::classify(&text) {
        cgroup::Workload::Pod { uid, .. } | cgroup::Workload::Container { uid, .. } => {
            assert!(!uid.is_empty() && !uid.contains('_'));
        }
        cgroup::Workload::Service { unit } => assert!(unit.ends_with(".service")),
        cgroup::Workload::Other => {}
    }
}

pub fn mountinfo(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    // Whatever is chosen is a mount point of its kind that the text lists, under the root.
    let root = std::path::Path::new("/host");
    if let Ok(m) = mounts::cgroup_mounts_under(&text, root, true) {
        for (chosen, kind) in [
            (&m.unified, "cgroup2"),
            (&m.cpu, "cgroup"),
            (&m.cpuacct, "cgroup"),
        ] {
            if let Some(p) = chosen {
                assert!(p.starts_with(root), "{p:?}");
                assert!(
                    text.lines().any(|l| l.contains(&format!(" - {kind} "))),
                    "{p:?} chosen without a {kind} line"
                );
            }
        }
        // Every writable mount named is a cgroup mount under the root, read-write, named once.
        let w = &m.writable;
        for (i, p) in w.iter().enumerate() {
            assert!(p.starts_with(root), "{p:?}");
            assert!(!w[..i].contains(p), "{p:?} named twice");
            // `rw` as an option key of its own (items may be empty, `,rw`, or carry a value,
            // `rw=`; fields split on any blank; a root of `-` makes the ` - ` separator
            // ambiguous to find here).
            let read_write = |l: &str| {
                l.split([',', ' ', '\t'])
                    .any(|o| o.split('=').next() == Some("rw"))
            };
            assert!(
                text.lines()
                    .any(|l| read_write(l) && l.contains(" - cgroup")),
                "{p:?} named without a read-write cgroup line"
            );
        }
    }
    // The writable host mounts: under a root asked about, not one meant to be writable,
    // each mount point once; the text parses for both functions or for neither.
    let roots = [root.to_path_buf()];
    let meant = [root.join("proc/irq")];
    let writable = mounts::writable_mounts(&text, &roots, &meant);
    assert_eq!(
        writable.is_ok(),
        mounts::cgroup_mounts_under(&text, root, true).is_ok()
    );
    if let Ok(w) = writable {
        for (i, m) in w.iter().enumerate() {
            assert!(m.mount_point.starts_with(root), "{m:?}");
            assert!(!meant.contains(&m.mount_point), "{m:?}");
            assert!(
                !w[..i].iter().any(|o| o.mount_point == m.mount_point),
                "{m:?} named twice"
            );
        }
    }
}

/// `/proc/cmdline`: every argument kept is one the text spells out, and the IOMMU request
/// is read from them without panicking.
pub fn tuning_cmdline(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(c) = tuning::parse_cmdline(&text) {
        let unquoted = text.replace('"', "");
        for (k, v) in &c.args {
            assert!(!k.contains('"'), "{k:?}");
            assert!(unquoted.contains(k.as_str()), "{k:?}");
            assert!(v.as_ref().is_none_or(|v| !v.contains('"')));
            assert!(c.get(k).is_some());
        }
        let _ = c.iommu_request();
        let _ = c.spelled(&["iommu", "iommu.strict", "mitigations"]);
    }
}

/// The one-value files: words, counts, flags, IOMMU group types, vulnerability strings.
pub fn tuning_value(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(w) = tuning::parse_word(&text) {
        assert!(!w.is_empty() && !w.contains(char::is_whitespace), "{w:?}");
    }
    if let Ok(n) = tuning::parse_count(&text) {
        assert_eq!(tuning::parse_count(&format!("{n}\n")), Ok(n));
    }
    if let Ok(set) = tuning::parse_cpu_words(&text) {
        let words: Vec<String> = set.iter().map(|c| c.to_string()).collect();
        assert_eq!(
            tuning::parse_cpu_words(&format!("{}\n", words.join(" "))),
            Ok(set)
        );
    }
    if let Ok(f) = tuning::parse_flag(&text) {
        assert_eq!(text.trim(), if f { "1" } else { "0" });
    }
    if let Ok(d) = tuning::parse_iommu_group_type(&text) {
        // The kernel's word comes back as it was read.
        assert_eq!(
            tuning::parse_iommu_group_type(&format!("{}\n", d.kernel_name())),
            Ok(d.clone())
        );
        let _ = d.as_str();
    }
    if let Ok(v) = tuning::parse_vulnerability(&text) {
        assert!(!v.is_empty() && !v.contains('\n'));
        let state = tuning::SrsoState::classify(v);
        let _ = state.costs();
    }
}

/// Bracketed choice files (`always [madvise] never`): the selected one is among the choices
/// and the file renders back to the same choice.
pub fn tuning_choice(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(c) = tuning::parse_choice(&text) {
        assert!(c.choices.contains(&c.selected));
        let rendered: Vec<String> = c
            .choices
            .iter()
            .map(|w| {
                if *w == c.selected {
                    format!("[{w}]")
                } else {
                    w.clone()
                }
            })
            .collect();
        let again = tuning::parse_choice(&format!("{}\n", rendered.join(" ")));
        assert_eq!(again.as_ref().map(|a| &a.selected), Ok(&c.selected));
    }
}

/// Queue directory names (one per line) and RPS/XPS masks.
pub fn tuning_queue(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for line in text.lines() {
        if let Some(q) = tuning::parse_queue_name(line) {
            let again = match q {
                tuning::QueueName::Rx(n) => format!("rx-{n}"),
                tuning::QueueName::Tx(n) => format!("tx-{n}"),
            };
            assert_eq!(tuning::parse_queue_name(&again), Some(q));
        }
        let _ = tuning::parse_indexed(line, "policy");
    }
    if let Ok(set) = tuning::parse_queue_mask(&text) {
        assert_eq!(
            tuning::parse_queue_mask(&format!("{}\n", set.to_mask_string())).ok(),
            Some(set)
        );
    }
}

/// `/proc/cpuinfo`'s `hypervisor` flag: an answer only when a `flags` line exists.
pub fn cpuinfo(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Some(guest) = tuning::cpuinfo_hypervisor(&text) {
        assert!(text.contains("flags"));
        assert!(!guest || text.contains("hypervisor"));
    }
}

/// The process's LSM attributes (`/proc/self/attr/apparmor/current`, `/proc/self/attr/current`,
/// `/sys/kernel/security/lsm`, `/sys/fs/selinux/enforce`: the input's first four lines, and the
/// whole input as each of them) and a D-Bus error message (the whole input): every label
/// found is text of its file, a denial names it, and a D-Bus refusal is one the message names.
pub fn lsm(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let split = lsm::LsmFiles {
        apparmor_current: lines.next(),
        current: lines.next(),
        lsm: lines.next(),
        selinux_enforce: lines.next(),
    };
    let whole = lsm::LsmFiles {
        apparmor_current: Some(&text),
        current: Some(&text),
        lsm: Some(&text),
        selinux_enforce: Some(&text),
    };
    for files in [split, whole] {
        let c = lsm::LsmContext::from_files(&files);
        let sources = [files.apparmor_current, files.current];
        for l in &c.labels {
            assert!(!l.label.is_empty());
            assert!(
                sources.iter().flatten().any(|s| s.contains(&l.label)),
                "{l:?} is in no attribute file"
            );
            if let Some(active) = &c.active {
                assert!(active.iter().any(|a| a == l.lsm.id()), "{l:?} not active");
            }
        }
        for errno in [lsm::EACCES, lsm::EPERM, 2] {
            match c.denial("read of /x", Some(errno)) {
                Some(d) => {
                    assert!(errno != 2);
                    let l = c.refusing(Some(errno));
                    assert!(
                        l.is_some_and(|l| l.refuses() && d.contains(&l.label)),
                        "{d}"
                    );
                    assert!(d.starts_with("read of /x denied by "), "{d}");
                }
                None => assert!(errno == 2 || c.labels.iter().all(|l| !l.refuses())),
            }
        }
        if let Some(r) = lsm::dbus_refusal(lsm::DBUS_ACCESS_DENIED, &text) {
            assert!(text.to_ascii_lowercase().contains(r.lsm.id()));
            if let Some(s) = &r.sender_label {
                assert!(text.contains(&format!("label=\"{s}\"")), "{s:?}");
            }
            let d = r.denial("Call(x)", &c);
            assert!(d.starts_with("Call(x) denied by "), "{d}");
        }
    }
}

/// A fuzz entry point.
pub type Target = fn(&[u8]);

/// Every target, by the name its fuzz target and corpus directory use.
pub const TARGETS: &[(&str, Target)] = &[
    ("interrupts", interrupts),
    ("softirqs", softirqs),
    ("softnet", softnet),
    ("cpuset", cpuset),
    ("irqbalance_env", irqbalance_env),
    ("psi", psi),
    ("cgroup_cpu", cgroup_cpu),
    ("cgroup_path", cgroup_path),
    ("mountinfo", mountinfo),
    ("tuning_cmdline", tuning_cmdline),
    ("tuning_value", tuning_value),
    ("tuning_choice", tuning_choice),
    ("tuning_queue", tuning_queue),
    ("cpuinfo", cpuinfo),
    ("pid_stat", pid_stat),
    ("lsm", lsm),
];

/// The environment variable that names the target the fuzz binary runs (tests/fuzz.sh sets
/// it for each run, with that target's corpus).
pub const TARGET_ENV: &str = "NODEMEDIC_FUZZ_TARGET";

/// The entry point of the target named `name`, if there is one.
pub fn target(name: &str) -> Option<Target> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// The target [`TARGET_ENV`] names, looked up once. A missing or unknown name is a
/// misconfigured run, not a finding: it panics with the names it knows, so that the fuzz run
/// stops at once and says why.
#[allow(clippy::panic)]
pub fn selected() -> Target {
    static SELECTED: std::sync::OnceLock<Target> = std::sync::OnceLock::new();
    *SELECTED.get_or_init(|| {
        let name = std::env::var(TARGET_ENV).unwrap_or_default();
        target(&name).unwrap_or_else(|| {
            let names: Vec<&str> = TARGETS.iter().map(|(n, _)| *n).collect();
            panic!("{TARGET_ENV}={name:?} names no fuzz target; one of {names:?}")
        })
    })
}
