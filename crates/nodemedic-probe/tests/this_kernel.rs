//! The probes against this machine's real kernel: they either attach and count, or fail with
//! one reason that names the cause. (This repository's CI kernel has neither kprobes nor
//! fentry trampolines, so it exercises the failure path; tests/vm/probes-e2e.sh exercises the
//! attach path on Debian 12's kernel in QEMU.)

use nodemedic_probe::{AttachMode, PerfProbes, ProbeOptions, HOOKS};

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

#[test]
fn load_attaches_or_names_the_cause() {
    for attach in [AttachMode::Auto, AttachMode::Fentry, AttachMode::Kprobe] {
        let opts = ProbeOptions {
            attach,
            ..ProbeOptions::default()
        };
        match PerfProbes::load(&opts) {
            Ok(p) => {
                for hook in HOOKS.iter().filter(|h| h.required) {
                    let st = p.hooks().iter().find(|s| s.function == hook.function);
                    assert!(
                        st.is_some_and(|s| s.method.is_some()),
                        "{attach:?}: {} not attached",
                        hook.function
                    );
                }
                let r = p.read().unwrap_or_else(|e| panic!("read: {e}"));
                assert!(!r.per_cpu.is_empty());
            }
            Err(e) => {
                let reason = e.to_string();
                eprintln!("{attach:?}: {reason}");
                assert!(!reason.is_empty());
                if is_root() {
                    // As root, the reason is about the kernel (a hook, BTF, a kernel facility),
                    // never a bare errno without context.
                    assert!(
                        reason.contains("perf_event_output")
                            || reason.contains("BTF")
                            || reason.contains("kprobe")
                            || reason.contains("memlock"),
                        "{attach:?}: reason names no cause: {reason}"
                    );
                }
            }
        }
    }
}
