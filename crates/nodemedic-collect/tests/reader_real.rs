//! The read layer on this machine's real kernel files: kept-open fds see new values, drop
//! removed files, respect their bound, and io_uring falls back cleanly when the sysctl or a
//! seccomp filter forbids it.
//!
//! Needs root (writes `/proc/irq/*/smp_affinity`, creates cgroups under the v2 mount at
//! `/sys/fs/cgroup/unified`, flips `kernel.io_uring_disabled`) and python3-seccomp (installed
//! by tests/run-all.sh). Everything changed is restored, also when an assertion fails.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use nodemedic_collect::{Backend, Reader, ReaderConfig};
use nodemedic_testkit::poll_until;

/// Tests that flip `kernel.io_uring_disabled` or count io_uring fallbacks must not overlap.
static URING_SYSCTL: Mutex<()> = Mutex::new(());

fn reader(backend: Backend, max_open_files: usize) -> Reader {
    Reader::with_config(ReaderConfig {
        backend,
        max_open_files,
        file_limit_share: None,
    })
}

/// An IRQ whose `smp_affinity` accepts a write of its own mask (kernel-managed IRQs refuse),
/// saved under the machine's real-IRQ guard, which puts its mask back.
fn writable_irq() -> Option<(nodemedic_testkit::RealIrqs, PathBuf)> {
    let mut guard = nodemedic_testkit::RealIrqs::lock();
    let mut irqs: Vec<u32> = std::fs::read_dir("/proc/irq")
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    irqs.sort_unstable();
    let irq = irqs.into_iter().find(|irq| guard.writable(*irq))?;
    guard.save([irq]);
    Some((
        guard,
        PathBuf::from(format!("/proc/irq/{irq}/smp_affinity")),
    ))
}

#[test]
fn kept_open_pread_sees_a_new_smp_affinity() {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    assert_ne!(online.trim(), "0", "needs at least two CPUs");
    let (_restore, path) =
        writable_irq().expect("no IRQ with a writable smp_affinity (needs root)");
    let r = reader(Backend::Pread, 16);
    std::fs::write(&path, "1").unwrap();
    assert_eq!(r.read(&path).unwrap().trim(), "1");
    assert_eq!(
        r.status().open_files,
        1,
        "the fd is kept after the first read"
    );
    std::fs::write(&path, "2").unwrap();
    assert_eq!(
        r.read(&path).unwrap().trim(),
        "2",
        "pread at 0 regenerates the file"
    );
    std::fs::write(&path, "1").unwrap();
    assert_eq!(r.read(&path).unwrap().trim(), "1");
    let st = r.status();
    assert_eq!((st.open_files, st.dropped_files_total), (1, 0), "{st:?}");
}

#[test]
fn kept_open_pread_sees_proc_interrupts_move() {
    // /proc/interrupts counts timer interrupts (LOC) at least every few ms on an idle CPU.
    let r = reader(Backend::Pread, 16);
    let p = Path::new("/proc/interrupts");
    let first = r.read(p).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    poll_until(
        deadline,
        "/proc/interrupts to change through the kept fd",
        || {
            if r.read(p).unwrap() != first {
                Ok(())
            } else {
                Err("the same bytes as the first read".into())
            }
        },
    );
    assert_eq!(r.status().open_files, 1);
    assert!(first.contains("CPU0"), "{first}");
}

/// A cgroup directory removed on drop.
struct Cgroup(PathBuf);
impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn removed_cgroup_drops_its_fd_and_reads_as_missing() {
    let root = Path::new("/sys/fs/cgroup/unified");
    assert!(
        root.join("cgroup.controllers").exists(),
        "needs the cgroup v2 mount at {}",
        root.display()
    );
    let cg = Cgroup(root.join(format!("nodemedic-reader-test-{}", std::process::id())));
    std::fs::create_dir(&cg.0).expect("mkdir a cgroup (needs root)");
    let stat = cg.0.join("cpu.stat");
    let r = reader(Backend::Pread, 16);
    assert!(r.read(&stat).unwrap().contains("usage_usec"));
    assert_eq!(r.status().open_files, 1);
    std::fs::remove_dir(&cg.0).unwrap();
    let err = r.read(&stat).unwrap_err();
    assert!(err.is_missing(), "{err}");
    assert!(err.to_string().contains("cpu.stat"), "{err}");
    let st = r.status();
    assert_eq!((st.open_files, st.dropped_files_total), (0, 1), "{st:?}");
    assert_eq!(r.read_optional(&stat).unwrap(), None);
}

#[test]
fn fd_bound_falls_back_to_open_read_close() {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = (0..5)
        .map(|i| {
            let p = dir.path().join(format!("f{i}"));
            std::fs::write(&p, format!("value {i}\n")).unwrap();
            p
        })
        .collect();
    let r = reader(Backend::Pread, 2);
    for round in 0..2 {
        for (i, p) in paths.iter().enumerate() {
            assert_eq!(r.read(p).unwrap(), format!("value {i}\n"), "round {round}");
        }
    }
    let st = r.status();
    assert_eq!(st.open_files, 2, "{st:?}");
    assert_eq!(st.max_open_files, 2);
    assert_eq!(
        st.over_limit_reads_total, 6,
        "3 files over the bound, twice: {st:?}"
    );
    // A kept regular file replaced by a rename is reopened, not read stale.
    let tmp = dir.path().join("new");
    std::fs::write(&tmp, "replaced\n").unwrap();
    std::fs::rename(&tmp, &paths[0]).unwrap();
    assert_eq!(r.read(&paths[0]).unwrap(), "replaced\n");
    // Rewritten in place: the kept fd sees it.
    std::fs::write(&paths[1], "rewritten, and longer than before\n").unwrap();
    assert_eq!(
        r.read(&paths[1]).unwrap(),
        "rewritten, and longer than before\n"
    );
}

/// Within samples, a kept regular file is not `fstat`ed on every read: its directory is
/// watched with inotify, and any replacement (a rename over it, delete and create, the whole
/// directory removed and made again) is seen by the next sample's reads.
#[test]
fn replaced_regular_files_are_seen_at_the_next_sample() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("irq/24");
    std::fs::create_dir_all(&sub).unwrap();
    let f = sub.join("smp_affinity");
    let other = dir.path().join("untouched");
    std::fs::write(&f, "1\n").unwrap();
    std::fs::write(&other, "same\n").unwrap();
    let r = reader(Backend::Pread, 16);
    let sample = |want: &str, round: &str| {
        r.begin_sample(false);
        assert_eq!(r.read(&f).unwrap(), want, "{round}");
        assert_eq!(r.read(&other).unwrap(), "same\n", "{round}");
        r.end_sample();
    };
    sample("1\n", "first");
    sample("1\n", "unchanged");
    // Renamed over.
    let tmp = sub.join(".new");
    std::fs::write(&tmp, "2\n").unwrap();
    std::fs::rename(&tmp, &f).unwrap();
    sample("2\n", "renamed over");
    // Deleted and created again.
    std::fs::remove_file(&f).unwrap();
    std::fs::write(&f, "4\n").unwrap();
    sample("4\n", "deleted and created");
    // The directory removed and made again (a vanished and re-allocated IRQ).
    std::fs::remove_dir_all(&sub).unwrap();
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::write(&f, "8\n").unwrap();
    sample("8\n", "directory made again");
    // Removed for good: the next sample says so.
    std::fs::remove_dir_all(&sub).unwrap();
    r.begin_sample(false);
    assert!(r.read(&f).unwrap_err().is_missing());
    r.end_sample();
    // Rewritten in place: the same inode, read through the kept fd.
    std::fs::write(&other, "rewritten\n").unwrap();
    r.begin_sample(false);
    assert_eq!(r.read(&other).unwrap(), "rewritten\n");
    r.end_sample();
    assert!(r.status().dropped_files_total >= 3, "{:?}", r.status());
}

/// Reading a regular file through the reader leaves its access time alone (`O_NOATIME`),
/// where a plain read on the same filesystem updates it. Both files get an access time two
/// days old, which `relatime` updates on the next read.
#[test]
fn reads_leave_access_times_alone() {
    use std::fs::{File, FileTimes};
    use std::os::unix::fs::MetadataExt;
    use std::time::{Duration, SystemTime};

    let dir = tempfile::tempdir().unwrap();
    let old = SystemTime::now() - Duration::from_secs(2 * 86_400);
    let aged = |name: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, "1\n").unwrap();
        File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_times(FileTimes::new().set_accessed(old))
            .unwrap();
        (p.clone(), std::fs::metadata(&p).unwrap().atime())
    };
    let (control, control_before) = aged("control");
    std::fs::read(&control).unwrap();
    let control_after = std::fs::metadata(&control).unwrap().atime();
    assert!(
        control_after > control_before,
        "this filesystem does not update access times (mounted noatime?): the test cannot tell"
    );
    let (watched, before) = aged("watched");
    let r = reader(Backend::Pread, 16);
    r.begin_sample(false);
    assert_eq!(r.read(&watched).unwrap(), "1\n");
    assert_eq!(r.read(&watched).unwrap(), "1\n");
    r.end_sample();
    assert_eq!(std::fs::metadata(&watched).unwrap().atime(), before);
}

#[test]
fn files_not_read_between_rescans_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    let b = dir.path().join("b");
    std::fs::write(&a, "a").unwrap();
    std::fs::write(&b, "b").unwrap();
    let r = reader(Backend::Pread, 16);
    r.begin_sample(true);
    r.read(&a).unwrap();
    r.read(&b).unwrap();
    r.begin_sample(false);
    r.read(&a).unwrap();
    r.begin_sample(true);
    // b was read during the previous rescan interval: it stays open.
    assert_eq!(r.status().open_files, 2);
    r.read(&a).unwrap();
    r.begin_sample(true);
    assert_eq!(
        r.status().open_files,
        1,
        "b was not read since the last rescan"
    );
}

#[test]
fn large_proc_files_are_read_whole() {
    // Larger than the first buffer: the read grows until the file ends. /proc/cpuinfo is
    // several times the first buffer and its lines do not change while the test runs
    // (/proc/self/maps did: another test thread's stack added a line between two reads).
    let r = reader(Backend::Pread, 16);
    let p = Path::new("/proc/cpuinfo");
    let via_reader = r.read(p).unwrap();
    assert!(via_reader.len() > 4 * 512, "{}", via_reader.len());
    assert!(via_reader.ends_with('\n'));
    let via_std = std::fs::read_to_string(p).unwrap();
    assert_eq!(via_reader.lines().count(), via_std.lines().count());
    let again = r.read(p).unwrap();
    assert_eq!(via_reader.lines().count(), again.lines().count());
}

/// A kernel file of many records, larger than a seq_file's first buffer, read whole by both
/// backends. procfs's seq_files return at most their buffer (a page at first) per read, so a
/// short read is not the end of `/proc/net/softnet_stat` on a node of about 35 CPUs or more, or of
/// a node's `mountinfo`: the reader read the first page only, and this node's 2 CPUs and few
/// mounts never showed it. A python3 child maps 400 pages of alternating protections (so that
/// no two merge) and waits: its `maps` has 400 more lines and holds still while it is read.
#[test]
fn many_record_kernel_files_are_read_to_the_end() {
    let mut child = Command::new("python3")
        .args([
            "-c",
            "import mmap, sys, time\n\
             keep = [mmap.mmap(-1, 4096, prot=mmap.PROT_READ if i % 2 else\n\
                     mmap.PROT_READ | mmap.PROT_WRITE) for i in range(400)]\n\
             print('ready', flush=True)\n\
             time.sleep(120)\n",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let stdout = child.stdout.take().unwrap();
    let child = nodemedic_testkit::ChildGuard::new(child);
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    let maps = PathBuf::from(format!("/proc/{}/maps", child.id()));
    let want = std::fs::read_to_string(&maps).unwrap();
    assert!(want.lines().count() > 400, "{} lines", want.lines().count());
    assert!(want.len() > 4 * 4096, "{} bytes", want.len());
    for backend in [Backend::Pread, Backend::IoUring] {
        let r = reader(backend, 16);
        // Twice: the open, then the kept fd.
        for round in 0..2 {
            assert_eq!(r.read(&maps).unwrap(), want, "{backend:?}, read {round}");
            let mut got = Vec::new();
            r.read_batch(&[&maps], |_, res| got.push(res.map(str::to_owned)));
            assert_eq!(got.len(), 1);
            assert_eq!(
                got.pop().unwrap().unwrap(),
                want,
                "{backend:?}, batch {round}"
            );
        }
    }
}

fn irq_affinity_files() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc/irq").unwrap().flatten() {
        if e.file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
            .is_some()
        {
            out.push(e.path().join("smp_affinity"));
            out.push(e.path().join("effective_affinity"));
        }
    }
    out.sort();
    out
}

#[test]
fn io_uring_batch_reads_what_pread_reads() {
    let _g = URING_SYSCTL.lock().unwrap_or_else(|p| p.into_inner());
    let files = irq_affinity_files();
    assert!(files.len() >= 4, "{files:?}");
    let uring = reader(Backend::IoUring, 4096);
    assert_eq!(
        uring.backend(),
        Backend::IoUring,
        "io_uring should work on this kernel: {:?}",
        uring.status().fallback_reason
    );
    let plain = reader(Backend::Pread, 4096);
    for _ in 0..2 {
        let mut a = Vec::new();
        uring.read_batch(&files, |i, r| {
            a.push((i, r.map(str::to_owned).map_err(|e| e.to_string())))
        });
        let mut b = Vec::new();
        plain.read_batch(&files, |i, r| {
            b.push((i, r.map(str::to_owned).map_err(|e| e.to_string())))
        });
        assert_eq!(a, b);
        assert!(a.iter().all(|(_, r)| r.is_ok()), "{a:?}");
    }
    assert_eq!(uring.status().open_files, files.len());
}

/// Sets `kernel.io_uring_disabled` and restores it on drop.
struct Sysctl(String);
impl Sysctl {
    const PATH: &'static str = "/proc/sys/kernel/io_uring_disabled";
    fn set(v: &str) -> Self {
        let old = std::fs::read_to_string(Self::PATH).expect("kernel.io_uring_disabled exists");
        std::fs::write(Self::PATH, v).expect("writing kernel.io_uring_disabled (needs root)");
        Sysctl(old.trim().to_string())
    }
}
impl Drop for Sysctl {
    fn drop(&mut self) {
        let _ = std::fs::write(Self::PATH, &self.0);
    }
}

#[test]
fn io_uring_disabled_sysctl_falls_back_to_pread() {
    let _g = URING_SYSCTL.lock().unwrap_or_else(|p| p.into_inner());
    let files = irq_affinity_files();
    let r = {
        let _off = Sysctl::set("2");
        reader(Backend::IoUring, 4096)
    };
    assert_eq!(r.backend(), Backend::Pread);
    let reason = r.status().fallback_reason.unwrap_or_default();
    assert!(
        reason.contains("kernel.io_uring_disabled = 2"),
        "reason: {reason}"
    );
    let mut ok = 0;
    r.read_batch(&files, |_, res| ok += usize::from(res.is_ok()));
    assert_eq!(ok, files.len(), "the pread fallback still reads every file");
}

/// Child half of the seccomp test: prints the reader's backend and fallback reason. Ignored
/// on its own (it checks nothing); `child_under_seccomp` runs it with `--ignored`.
#[test]
#[ignore = "the child half of the seccomp tests, run by them"]
fn seccomp_child_report() {
    let r = reader(Backend::IoUring, 64);
    let st = r.status();
    let mut ok = 0;
    r.read_batch(&["/proc/interrupts", "/proc/softirqs"], |_, res| {
        ok += usize::from(res.is_ok())
    });
    println!(
        "CHILD backend={} reads_ok={ok} reason={}",
        st.backend.as_str(),
        st.fallback_reason.unwrap_or_default()
    );
}

/// Runs this test binary's `seccomp_child_report` under a seccomp filter (libseccomp's
/// Python binding) that answers `io_uring_setup` with `errno`, as a container runtime's
/// RuntimeDefault profile does (EPERM) or a kernel without io_uring would (ENOSYS).
fn child_under_seccomp(errno: &str) -> String {
    let _g = URING_SYSCTL.lock().unwrap_or_else(|p| p.into_inner());
    let exe = std::env::current_exe().unwrap();
    let script = format!(
        "import errno, os, sys, seccomp\n\
         f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)\n\
         f.add_rule(seccomp.ERRNO(errno.{errno}), 'io_uring_setup')\n\
         f.load()\n\
         os.execv(sys.argv[1], sys.argv[1:])\n"
    );
    // Debian's interpreter: python3-seccomp installs into its dist-packages, which a python3
    // earlier on PATH (pyenv, a venv) does not see.
    let out = Command::new("/usr/bin/python3")
        .args(["-c", &script])
        .arg(&exe)
        .args([
            "--exact",
            "seccomp_child_report",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .output()
        .expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "child failed (is python3-seccomp installed?): {stdout}\n{stderr}"
    );
    stdout
        .lines()
        .find_map(|l| l.find("CHILD ").map(|at| &l[at..]))
        .unwrap_or_else(|| panic!("no report from the child: {stdout}\n{stderr}"))
        .to_string()
}

#[test]
fn seccomp_denying_io_uring_falls_back_to_pread() {
    let report = child_under_seccomp("EPERM");
    assert!(report.contains("backend=pread"), "{report}");
    assert!(report.contains("reads_ok=2"), "{report}");
    assert!(report.contains("seccomp"), "{report}");
}

#[test]
fn kernel_without_io_uring_falls_back_to_pread() {
    // A kernel built without io_uring answers io_uring_setup with ENOSYS.
    let report = child_under_seccomp("ENOSYS");
    assert!(report.contains("backend=pread"), "{report}");
    assert!(report.contains("reads_ok=2"), "{report}");
    assert!(report.contains("ENOSYS"), "{report}");
}

/// Lines as `Reader::read_lines` streams them: (line, complete).
fn streamed(r: &Reader, path: &Path) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    r.read_lines(path, |l, complete| out.push((l.to_string(), complete)))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    out
}

/// Streaming gives the lines a whole read gives, across 64 KiB chunk boundaries, for lines
/// longer than a chunk, for a last line without its newline, and on this kernel's
/// `/proc/interrupts` read twice through the kept fd (seq_file restarts at offset 0).
#[test]
fn read_lines_streams_what_a_whole_read_holds() {
    let dir = tempfile::tempdir().unwrap();
    let r = reader(Backend::Pread, 64);
    let long = "x".repeat(200_000);
    let mut text = String::new();
    for i in 0..20_000 {
        text.push_str(&format!("{i:>11} row\n"));
    }
    text.push_str(&long);
    text.push('\n');
    text.push_str("cut 12");
    let path = dir.path().join("table");
    std::fs::write(&path, &text).unwrap();
    for _ in 0..2 {
        let got = streamed(&r, &path);
        assert_eq!(got.len(), 20_002);
        assert_eq!(got[0], (format!("{:>11} row", 0), true));
        assert_eq!(got[19_999], (format!("{:>11} row", 19_999), true));
        assert_eq!(got[20_000], (long.clone(), true));
        assert_eq!(got[20_001], ("cut 12".to_string(), false));
    }
    // A regular file replaced under the kept fd is read afresh, as `read` does.
    let next = dir.path().join("next");
    std::fs::write(&next, "a\nb\n").unwrap();
    std::fs::rename(&next, &path).unwrap();
    assert_eq!(
        streamed(&r, &path),
        [("a".to_string(), true), ("b".to_string(), true)]
    );
    let missing = dir.path().join("missing");
    let err = r.read_lines(&missing, |_, _| {}).unwrap_err();
    assert!(err.is_missing(), "{err}");

    let interrupts = Path::new("/proc/interrupts");
    for _ in 0..2 {
        let whole = r.read(interrupts).unwrap();
        let lines = streamed(&r, interrupts);
        // Counts move between the two reads; the row labels and the shape do not.
        assert_eq!(lines.len(), whole.lines().count());
        for ((l, complete), w) in lines.iter().zip(whole.lines()) {
            assert!(complete);
            assert_eq!(l.split(':').next(), w.split(':').next());
        }
    }
}
