//! What a load of the eBPF probes leaves behind: on this machine they fail to attach after the
//! loader has parsed the kernel's BTF (megabytes of small allocations), and the daemon must
//! not keep that memory for as long as it runs (issue 25: glibc kept 15 MiB of it). The probes
//! on and off, same binary, same files, side by side: resident memory within 2 MiB.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

mod common;

use common::{start_nodemedic_on_this_machine, wait_for_samples, Server};

fn daemon(probes: bool) -> Server {
    start_nodemedic_on_this_machine(&format!(
        "sample_interval = \"200ms\"\n[remediation]\nmode = \"off\"\n[probes]\nenabled = {probes}\n"
    ))
}

fn status_kib(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"))
}

#[test]
fn a_probe_load_leaves_no_memory_behind() {
    let has_btf = std::path::Path::new("/sys/kernel/btf/vmlinux").exists();
    let mut on = daemon(true);
    let mut off = daemon(false);
    for server in [&mut on, &mut off] {
        wait_for_samples(server, 3);
        assert_eq!(server.get("/metrics").status, 200);
    }
    let (rss_on, rss_off) = (
        status_kib(on.pid(), "VmRSS"),
        status_kib(off.pid(), "VmRSS"),
    );
    let (anon_on, anon_off) = (
        status_kib(on.pid(), "RssAnon"),
        status_kib(off.pid(), "RssAnon"),
    );
    let peak_on = status_kib(on.pid(), "VmHWM");
    eprintln!(
        "VmRSS probes on {rss_on} KiB, off {rss_off} KiB; RssAnon on {anon_on}, off {anon_off}; \
         VmHWM probes on {peak_on} KiB"
    );
    if has_btf {
        // The load parsed the BTF: the peak shows it, so the comparison below is not vacuous.
        assert!(
            peak_on > rss_on + 8 * 1024,
            "the BTF parse should raise the peak well above the steady RSS: {peak_on} vs {rss_on} KiB"
        );
    }
    // Anonymous memory is what a kept parse costs; the loader's code pages (file-backed, clean,
    // larger in this debug build than in a release one) are the rest of the difference. The
    // issue allows 2 MiB of RSS; in glibc's heap with a trim the load still kept 0.7 MiB here
    // (3,128 against 2,428 KiB), in its own heap 0.1: half a MiB tells them apart.
    assert!(
        anon_on <= anon_off + 512,
        "probes on {anon_on} KiB anonymous against off {anon_off} KiB: the load kept more than \
         512 KiB (is it still run in nodemedic_heap::OwnHeap?)"
    );
}

/// Where transparent huge pages are `always`, khugepaged makes a 2 MiB huge page of any range
/// of the heap holding one live page (the QEMU guest: 2.0 MiB more RSS, glibc and musl alike):
/// the daemon turns them off for itself. This machine's THP mode is `madvise`, where the flag
/// still shows in the process's status.
#[test]
fn the_daemon_runs_without_transparent_huge_pages() {
    let mut server = daemon(false);
    wait_for_samples(&mut server, 1);
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid())).unwrap();
    let Some(line) = status.lines().find(|l| l.starts_with("THP_enabled:")) else {
        // Kernels before 5.0 do not report it.
        eprintln!("no THP_enabled in /proc/PID/status: kernel too old to check");
        return;
    };
    assert_eq!(line.split_whitespace().nth(1), Some("0"), "{line}");
}
