//! The probes against this machine's real kernel, with the outcome decided first from the
//! kernel and the process (as crates/nodemedic/tests/probes.rs does), then asserted: they
//! attach and count, or fail with the one reason that names that cause. This repository's CI
//! kernel has neither kprobes nor fentry trampolines, so as root it takes the failure path;
//! tests/vm/probes-guest.sh takes the attach path on Debian 12's kernel in QEMU.

// Test helpers outside #[test] fns are meant to panic on failure.
#![allow(clippy::panic)]

use std::path::Path;

use nodemedic_probe::{AttachMode, Method, PerfProbes, ProbeError, ProbeOptions, HOOKS};

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Whether this process holds what loading and attaching takes: CAP_BPF and CAP_PERFMON, or
/// CAP_SYS_ADMIN (kernels before 5.8 know only that one).
fn privileged() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let caps = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    let has = |cap: u32| caps & (1 << cap) != 0;
    has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON))
}

/// What `load` must give in one attach mode.
#[derive(Debug, PartialEq)]
enum Expect {
    Attached,
    /// Refused, with every one of these in the reason.
    Refused(&'static [&'static str]),
}

/// The outcome of `mode` on this kernel, decided without loading anything. `fentry_works` is
/// the one fact that cannot be read off the kernel beforehand: whether `Auto` attached with
/// fentry (it tries fentry first, on the same kernel).
fn expect(mode: AttachMode, fentry_works: bool) -> Expect {
    if !Path::new("/sys/kernel/btf/vmlinux").exists() {
        return Expect::Refused(&["kernel BTF is missing"]);
    }
    if !privileged() {
        return Expect::Refused(&["permission denied", "CAP_BPF and CAP_PERFMON"]);
    }
    let kprobe_pmu = Path::new("/sys/bus/event_source/devices/kprobe").exists();
    // Without a kprobe PMU (CONFIG_KPROBES off, where fentry programs are refused too) the
    // probes are down; with one they attach. NODEMEDIC_EXPECT_PROBES=up|down overrides it
    // for a kernel that has fentry but no kprobes.
    let auto_up = match std::env::var("NODEMEDIC_EXPECT_PROBES").as_deref() {
        Ok("up") => true,
        Ok("down") => false,
        _ => kprobe_pmu,
    };
    match mode {
        AttachMode::Auto if auto_up => Expect::Attached,
        AttachMode::Auto => Expect::Refused(&["perf-event probes", "fentry: ", "; kprobe: "]),
        AttachMode::Kprobe if kprobe_pmu => Expect::Attached,
        AttachMode::Kprobe => Expect::Refused(&["cannot attach kprobe", "no kprobe PMU"]),
        AttachMode::Fentry if fentry_works => Expect::Attached,
        AttachMode::Fentry => Expect::Refused(&["fentry"]),
    }
}

/// Loads the probes in `mode` and asserts `want`; returns the attach method when attached.
fn load_as_expected(mode: AttachMode, want: &Expect) -> Option<Method> {
    let opts = ProbeOptions {
        attach: mode,
        ..ProbeOptions::default()
    };
    let outcome: Result<PerfProbes, ProbeError> = PerfProbes::load(&opts);
    match (outcome, want) {
        (Ok(p), Expect::Attached) => {
            for hook in HOOKS.iter().filter(|h| h.required) {
                let st = p.hooks().iter().find(|s| s.function == hook.function);
                assert!(
                    st.is_some_and(|s| s.method.is_some()),
                    "{mode:?}: {} not attached",
                    hook.function
                );
            }
            let r = p.read().unwrap_or_else(|e| panic!("{mode:?}: read: {e}"));
            assert!(!r.per_cpu.is_empty(), "{mode:?}: no per-CPU counters");
            Some(p.method())
        }
        (Ok(p), Expect::Refused(why)) => panic!(
            "{mode:?}: attached with {:?}, but this kernel and process must refuse it ({why:?})",
            p.method()
        ),
        (Err(e), Expect::Attached) => {
            panic!("{mode:?}: this kernel and process must attach the probes: {e}")
        }
        (Err(e), Expect::Refused(why)) => {
            let reason = e.to_string();
            eprintln!("{mode:?}: refused: {reason}");
            for part in *why {
                assert!(
                    reason.contains(part),
                    "{mode:?}: the reason does not name the cause ({part:?}): {reason}"
                );
            }
            None
        }
    }
}

#[test]
fn load_attaches_or_names_the_cause() {
    let auto = load_as_expected(AttachMode::Auto, &expect(AttachMode::Auto, false));
    let fentry_works = auto == Some(Method::Fentry);
    for mode in [AttachMode::Fentry, AttachMode::Kprobe] {
        load_as_expected(mode, &expect(mode, fentry_works));
    }
}

/// The probes loaded in a child whose `bpf()` calls the kernel refuses with EACCES (a seccomp
/// filter, python3-seccomp, as crates/nodemedic-collect/tests/reader_real.rs makes one), under
/// an injected SELinux context (this machine has no LSM): the reason is the load's own path
/// naming the module, the label and the call (issue 52, point 5); without the context it is
/// the plain one.
#[test]
fn a_refused_bpf_call_names_the_lsm() {
    if !Path::new("/sys/kernel/btf/vmlinux").exists() || !privileged() {
        panic!("needs kernel BTF and CAP_BPF/CAP_PERFMON (root): the refusal must be the seccomp filter's");
    }
    let run = |label: Option<&str>| -> String {
        let script = "import errno, os, sys, seccomp\n\
             f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)\n\
             f.add_rule(seccomp.ERRNO(errno.EACCES), 'bpf')\n\
             f.load()\n\
             os.execv(sys.argv[1], sys.argv[1:])\n";
        let mut child = std::process::Command::new("/usr/bin/python3");
        child.args(["-c", script]);
        child.arg(std::env::current_exe().unwrap_or_default());
        child.args([
            "--exact",
            "refused_bpf_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ]);
        if let Some(l) = label {
            child.env("NODEMEDIC_PROBE_CHILD_SELINUX", l);
        }
        let out = child.output().unwrap_or_else(|e| panic!("python3: {e}"));
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        stdout
            .lines()
            .find_map(|l| l.find("REASON ").map(|at| l[at + 7..].to_string()))
            .unwrap_or_else(|| {
                panic!(
                    "no reason from the child (is python3-seccomp installed?): {stdout}\n{}",
                    String::from_utf8_lossy(&out.stderr)
                )
            })
    };
    let named = run(Some("system_u:system_r:container_t:s0:c12,c34"));
    let want = "loading the BPF object (creating its maps): bpf() denied by SELinux (label \
                system_u:system_r:container_t:s0:c12,c34): ";
    assert!(named.starts_with(want), "{named}");
    assert!(named.contains("os error 13"), "{named}");
    let plain = run(None);
    assert!(
        plain.starts_with("loading the BPF object (creating its maps): ")
            && !plain.contains("SELinux"),
        "{plain}"
    );
}

/// Not a test: the child of [`a_refused_bpf_call_names_the_lsm`].
#[test]
#[ignore = "run by a_refused_bpf_call_names_the_lsm under a seccomp filter"]
fn refused_bpf_child() {
    let label = std::env::var("NODEMEDIC_PROBE_CHILD_SELINUX").ok();
    let lsm = nodemedic_kernel::lsm::LsmContext::from_files(&nodemedic_kernel::lsm::LsmFiles {
        current: label.as_deref(),
        selinux_enforce: label.as_ref().map(|_| "1"),
        ..Default::default()
    });
    let opts = ProbeOptions {
        lsm,
        ..ProbeOptions::default()
    };
    match PerfProbes::load(&opts) {
        Ok(_) => println!("REASON none: loaded"),
        Err(e) => println!("REASON {e}"),
    }
}
