//! Loading the probes in a short-lived child process, so that the load's memory ends with it.
//!
//! A load parses the kernel's BTF (`/sys/kernel/btf/vmlinux`, 5-6 MB, hundreds of thousands
//! of small allocations) for the CO-RE relocations and fentry's attach points, then drops it,
//! attached or not. Done in the daemon, that parse was its peak (VmHWM 38 MiB against a steady
//! 10) and left pieces of its heap behind. So the daemon re-executes itself as the loader
//! ([`serve`]): a process that loads and attaches the probes, answers in one message over a
//! socket pair, and exits. The message carries:
//! - a description of the outcome (serde JSON): the attach method and every hook's status, or
//!   the one reason the probes are down, the same [`ProbeError`] an in-process load gives;
//! - with SCM_RIGHTS, the fds that are the probes: the three maps, one program per attached
//!   hook (for its run-time counters), the BPF_ENABLE_STATS fd when asked for, and the links
//!   (bpf links, or perf events before Linux 5.15) that keep the programs attached.
//!
//! The daemon ([`load_in_child`]) rebuilds aya's maps from their fds and keeps the links open
//! for as long as it holds the probes; the kernel detaches a program when its last link fd
//! closes. It waits for the answer with a deadline: a child that crashes, hangs or answers
//! nonsense leaves the probes down with a reason that says so, and the daemon goes on.
//!
//! No unsafe code: the child names its link fds by number (aya keeps them private; the child
//! finds them in `/proc/self/fd`), which nix's `sendmsg` takes as they are; the daemon
//! receives owned fds from rustix's `recvmsg`.

use std::fs;
use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use aya::maps::{HashMap, IterableMap, Map, MapData, PerCpuArray, RingBuf};
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendFlags,
    SocketFlags, SocketType,
};
use serde::{Deserialize, Serialize};

use crate::probe::{map_err, Attachments, HookStatus, Method, PerfProbes, ProbeError, HOOKS};
use crate::ProbeOptions;

/// The most fds one answer carries: 3 maps, 4 programs, the stats fd and 4 links take 12.
const MAX_FDS: usize = 32;
/// The largest answer: a verifier's rejection is the longest reason, and only its last lines
/// are kept.
const MAX_ANSWER_BYTES: usize = 64 << 10;
const MAX_REQUEST_BYTES: usize = 4 << 10;
/// How long the child has to exit once it answered (or its socket closed), before it is
/// killed.
const EXIT_GRACE: Duration = Duration::from_secs(5);

/// The child's one message.
#[derive(Debug, Serialize, Deserialize)]
struct Answer {
    outcome: Result<Handed, ProbeError>,
    /// The child's own peak (VmHWM, KiB) just before it answered: what the load cost.
    peak_kib: Option<u64>,
}

/// The probes as handed over. The fds follow in this order: the maps `cpu_counts`, `owners`
/// and `events`, one per entry of `programs`, the stats fd if `stats`, then `links` fds.
#[derive(Debug, Serialize, Deserialize)]
struct Handed {
    method: Method,
    hooks: Vec<HandedHook>,
    programs: Vec<String>,
    stats: bool,
    stats_error: Option<String>,
    links: usize,
}

#[derive(Debug, Serialize, Deserialize)]
struct HandedHook {
    function: String,
    method: Option<Method>,
    error: Option<String>,
}

fn loader_error(detail: impl Into<String>) -> ProbeError {
    ProbeError::Loader {
        detail: detail.into(),
    }
}

/// Loads the probes in the child that `command` starts (the binary re-executed as its loader,
/// which runs [`serve`] on its stdin), waiting at most `timeout` for its answer. The child's
/// stdin is the daemon's end of the socket pair; its stdout goes nowhere; its stderr is the
/// daemon's, so its log lines land in the same log.
pub fn load_in_child(
    mut command: Command,
    opts: &ProbeOptions,
    timeout: Duration,
) -> Result<PerfProbes, ProbeError> {
    let started = Instant::now();
    let program = command.get_program().to_string_lossy().into_owned();
    let (mine, theirs) = rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| loader_error(format!("could not be started: socketpair: {e}")))?;
    command.stdin(Stdio::from(theirs)).stdout(Stdio::null());
    let mut child = command
        .spawn()
        .map_err(|e| loader_error(format!("could not be started ({program}): {e}")))?;
    // The command holds our copy of the child's end: closed now, the child's exit closes the
    // socket and ends our wait for an answer.
    drop(command);

    let answer = exchange(&mine, opts, timeout);
    let status = reap(&mut child, matches!(answer, Err(Exchange::Timeout)));
    let answer = match answer {
        Ok(answer) => answer,
        Err(Exchange::Timeout) => {
            return Err(loader_error(format!(
                "did not answer within {}; it was killed",
                humanize(timeout)
            )))
        }
        Err(Exchange::Closed) => {
            return Err(loader_error(format!(
                "exited without answering ({}); its own messages, if any, are in the log",
                describe_status(status.as_ref())
            )))
        }
        Err(Exchange::Failed(detail)) => return Err(loader_error(detail)),
    };
    let (answer, fds) = answer;
    tracing::info!(
        peak_kib = answer.peak_kib,
        elapsed_ms = started.elapsed().as_millis() as u64,
        attached = answer.outcome.is_ok(),
        "the eBPF probes' loader (a child process) answered; its peak memory ended with it"
    );
    match answer.outcome {
        Ok(handed) => rebuild(handed, fds),
        Err(reason) => Err(reason),
    }
}

enum Exchange {
    Timeout,
    Closed,
    Failed(String),
}

/// Sends the request and receives the answer with its fds.
fn exchange(
    socket: &OwnedFd,
    opts: &ProbeOptions,
    timeout: Duration,
) -> Result<(Answer, Vec<OwnedFd>), Exchange> {
    let request = serde_json::to_vec(opts)
        .map_err(|e| Exchange::Failed(format!("could not be asked: {e}")))?;
    if let Err(e) = rustix::net::send(socket, &request, SendFlags::NOSIGNAL) {
        // A child that died at once: its status says more than EPIPE.
        return Err(
            if e == rustix::io::Errno::PIPE || e == rustix::io::Errno::CONNRESET {
                Exchange::Closed
            } else {
                Exchange::Failed(format!("could not be asked: send: {e}"))
            },
        );
    }
    rustix::net::sockopt::set_socket_timeout(
        socket,
        rustix::net::sockopt::Timeout::Recv,
        Some(timeout.max(Duration::from_millis(1))),
    )
    .map_err(|e| Exchange::Failed(format!("could not be waited for: SO_RCVTIMEO: {e}")))?;

    let mut bytes = vec![0u8; MAX_ANSWER_BYTES];
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let deadline = Instant::now() + timeout;
    let received = loop {
        match rustix::net::recvmsg(
            socket,
            &mut [IoSliceMut::new(&mut bytes)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Err(e) if e == rustix::io::Errno::INTR && Instant::now() < deadline => continue,
            Err(e) if e == rustix::io::Errno::AGAIN || e == rustix::io::Errno::INTR => {
                return Err(Exchange::Timeout)
            }
            // A child that exits without reading the request resets the connection.
            Err(e) if e == rustix::io::Errno::CONNRESET => return Err(Exchange::Closed),
            Err(e) => return Err(Exchange::Failed(format!("answer unreadable: recvmsg: {e}"))),
            Ok(r) => break r,
        }
    };
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = message {
            fds.extend(rights);
        }
    }
    if received.bytes == 0 {
        return Err(Exchange::Closed);
    }
    if received
        .flags
        .intersects(ReturnFlags::TRUNC | ReturnFlags::CTRUNC)
    {
        return Err(Exchange::Failed(format!(
            "answered more than {MAX_ANSWER_BYTES} bytes or {MAX_FDS} fds"
        )));
    }
    let answer: Answer = serde_json::from_slice(&bytes[..received.bytes])
        .map_err(|e| Exchange::Failed(format!("answered something unreadable: {e}")))?;
    Ok((answer, fds))
}

/// Waits for the child to exit, killing it if `kill` or if it outlives the grace period.
fn reap(child: &mut Child, kill: bool) -> Option<ExitStatus> {
    if kill {
        let _ = child.kill();
        return child.wait().ok();
    }
    let deadline = Instant::now() + EXIT_GRACE;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                tracing::warn!(
                    pid = child.id(),
                    "the eBPF probes' loader did not exit after answering; killed"
                );
                let _ = child.kill();
                return child.wait().ok();
            }
            Err(e) => {
                tracing::debug!(error = %e, "waiting for the eBPF probes' loader");
                return None;
            }
        }
    }
}

fn describe_status(status: Option<&ExitStatus>) -> String {
    match status {
        Some(s) => s.to_string(),
        None => "exit status unknown".to_owned(),
    }
}

fn humanize(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// The probes from the child's description and fds.
fn rebuild(handed: Handed, fds: Vec<OwnedFd>) -> Result<PerfProbes, ProbeError> {
    let expected = 3 + handed.programs.len() + usize::from(handed.stats) + handed.links;
    if fds.len() != expected {
        return Err(loader_error(format!(
            "handed over {} fds where its description names {expected}",
            fds.len()
        )));
    }
    let known = |function: &str| -> Result<&'static str, ProbeError> {
        HOOKS
            .iter()
            .find(|h| h.function == function)
            .map(|h| h.function)
            .ok_or_else(|| {
                loader_error(format!(
                    "named a hook this binary does not know: {function}"
                ))
            })
    };
    let mut fds = fds.into_iter();
    // The count is checked above: every next() below has its fd.
    let mut next = || {
        fds.next()
            .ok_or_else(|| loader_error("handed over too few fds"))
    };
    let cpu_counts = map_from(next()?, "cpu_counts")
        .and_then(|m| PerCpuArray::try_from(m).map_err(|e| map_err("cpu_counts", &e)))?;
    let owners = map_from(next()?, "owners")
        .and_then(|m| HashMap::try_from(m).map_err(|e| map_err("owners", &e)))?;
    let ring = map_from(next()?, "events")
        .and_then(|m| RingBuf::try_from(m).map_err(|e| map_err("events", &e)))?;
    let mut programs = Vec::with_capacity(handed.programs.len());
    for function in &handed.programs {
        programs.push((known(function)?, next()?));
    }
    let stats = if handed.stats { Some(next()?) } else { None };
    let links = (0..handed.links)
        .map(|_| next())
        .collect::<Result<Vec<_>, _>>()?;
    let hooks = handed
        .hooks
        .iter()
        .map(|h| {
            Ok(HookStatus {
                function: known(&h.function)?,
                method: h.method,
                error: h.error.clone(),
            })
        })
        .collect::<Result<Vec<_>, ProbeError>>()?;
    Ok(PerfProbes {
        attachments: Attachments::Handed(links),
        cpu_counts,
        owners,
        ring: Some(ring),
        programs,
        hooks,
        method: handed.method,
        stats,
        stats_error: handed.stats_error,
    })
}

fn map_from(fd: OwnedFd, name: &str) -> Result<Map, ProbeError> {
    MapData::from_fd(fd)
        .and_then(Map::from_map_data)
        .map_err(|e| map_err(name, &e))
}

/// The loader's side, the whole of the child's work: reads the request from `socket`, loads
/// and attaches the probes in this process, and answers with their fds. The process must
/// exit when this returns: the loaded probes are not dropped (see the end), and a daemon
/// waits for the exit.
pub fn serve(socket: OwnedFd) -> io::Result<()> {
    let mut request = vec![0u8; MAX_REQUEST_BYTES];
    let (n, _) = rustix::net::recv(&socket, &mut request[..], rustix::net::RecvFlags::empty())?;
    let loaded = match serde_json::from_slice::<ProbeOptions>(&request[..n]) {
        Ok(opts) => PerfProbes::load(&opts),
        Err(e) => Err(loader_error(format!("could not read its request: {e}"))),
    };
    let (outcome, fds, keep) = match loaded {
        Ok(probes) => match hand_over(&probes) {
            Ok((handed, fds)) => (Ok(handed), fds, Some(probes)),
            Err(e) => (Err(e), Vec::new(), None),
        },
        Err(e) => (Err(e), Vec::new(), None),
    };
    let answer = Answer {
        outcome,
        peak_kib: own_peak_kib(),
    };
    let bytes = serde_json::to_vec(&answer).map_err(io::Error::other)?;
    let rights = [nix::sys::socket::ControlMessage::ScmRights(&fds)];
    let cmsgs: &[nix::sys::socket::ControlMessage<'_>] = if fds.is_empty() { &[] } else { &rights };
    nix::sys::socket::sendmsg::<()>(
        socket.as_raw_fd(),
        &[IoSlice::new(&bytes)],
        cmsgs,
        nix::sys::socket::MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map_err(io::Error::from)?;
    // The daemon now holds the probes' fds, so the exit that follows leaves them attached.
    // Dropping aya's object instead would detach them: on kernels before 5.15 a kprobe's link
    // is its perf event, which aya disables (PERF_EVENT_IOC_DISABLE) on the event the daemon
    // now shares.
    std::mem::forget(keep);
    Ok(())
}

/// The fds to hand over, in [`Handed`]'s order, with their description.
fn hand_over(probes: &PerfProbes) -> Result<(Handed, Vec<RawFd>), ProbeError> {
    let ring = probes.ring.as_ref().ok_or_else(|| ProbeError::Other {
        what: "map events".to_owned(),
        detail: "the ring buffer was taken before the hand-over".to_owned(),
    })?;
    let mut fds = vec![
        IterableMap::map(&probes.cpu_counts)
            .fd()
            .as_fd()
            .as_raw_fd(),
        IterableMap::map(&probes.owners).fd().as_fd().as_raw_fd(),
        ring.as_raw_fd(),
    ];
    fds.extend(probes.programs.iter().map(|(_, fd)| fd.as_raw_fd()));
    fds.extend(probes.stats.iter().map(|fd| fd.as_raw_fd()));
    let links = link_fds().map_err(|e| ProbeError::Other {
        what: "finding the probes' links in /proc/self/fd".to_owned(),
        detail: e.to_string(),
    })?;
    let attached = probes.hooks.iter().filter(|h| h.method.is_some()).count();
    if links.len() < attached {
        return Err(ProbeError::Other {
            what: "finding the probes' links in /proc/self/fd".to_owned(),
            detail: format!("{} links for {attached} attached hooks", links.len()),
        });
    }
    fds.extend(&links);
    if fds.len() > MAX_FDS {
        return Err(ProbeError::Other {
            what: "handing the probes over".to_owned(),
            detail: format!("{} fds, more than {MAX_FDS}", fds.len()),
        });
    }
    let handed = Handed {
        method: probes.method,
        hooks: probes
            .hooks
            .iter()
            .map(|h| HandedHook {
                function: h.function.to_owned(),
                method: h.method,
                error: h.error.clone(),
            })
            .collect(),
        programs: probes
            .programs
            .iter()
            .map(|(f, _)| (*f).to_owned())
            .collect(),
        stats: probes.stats.is_some(),
        stats_error: probes.stats_error.clone(),
        links: links.len(),
    };
    Ok((handed, fds))
}

/// This process's fds that keep a program attached. aya keeps its links' fds to itself, but
/// in the loader nothing else opens a link or a perf event.
fn link_fds() -> io::Result<Vec<RawFd>> {
    let mut fds = Vec::new();
    for entry in fs::read_dir("/proc/self/fd")? {
        let entry = entry?;
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<RawFd>().ok())
        else {
            continue;
        };
        // The directory's own fd is closed by the time its entry is read: skipped here.
        let Ok(target) = fs::read_link(entry.path()) else {
            continue;
        };
        if holds_attachment(&target.to_string_lossy()) {
            fds.push(fd);
        }
    }
    fds.sort_unstable();
    Ok(fds)
}

/// Whether an fd's `/proc/self/fd` target is one that keeps a program attached: a bpf link
/// (fentry since 5.7, kprobes since 5.15), a raw tracepoint of 5.5-5.6 (fentry), or a perf
/// event (kprobes before 5.15).
pub(crate) fn holds_attachment(target: &str) -> bool {
    matches!(
        target,
        "anon_inode:bpf_link" | "anon_inode:bpf-raw-tracepoint" | "anon_inode:[perf_event]"
    )
}

fn own_peak_kib() -> Option<u64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_links_and_perf_events_hold_an_attachment() {
        for target in [
            "anon_inode:bpf_link",
            "anon_inode:bpf-raw-tracepoint",
            "anon_inode:[perf_event]",
        ] {
            assert!(holds_attachment(target), "{target}");
        }
        for target in [
            "anon_inode:bpf-prog",
            "anon_inode:bpf-map",
            "anon_inode:btf",
            "socket:[1234]",
            "/proc/1/fd",
            "/dev/null",
            "",
        ] {
            assert!(!holds_attachment(target), "{target}");
        }
    }

    fn sh(script: &str) -> Command {
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(script);
        cmd
    }

    fn reason(r: Result<PerfProbes, ProbeError>) -> String {
        match r {
            Ok(p) => panic!("a broken loader handed over probes: {p:?}"),
            Err(e) => e.to_string(),
        }
    }

    /// The reason a load through `loader` fails with, given 20 s.
    fn reason_of(loader: Command) -> String {
        reason(load_in_child(
            loader,
            &ProbeOptions::default(),
            Duration::from_secs(20),
        ))
    }

    #[test]
    fn a_loader_that_hangs_is_killed_at_the_deadline() {
        let started = Instant::now();
        let r = load_in_child(
            sh("exec sleep 30"),
            &ProbeOptions::default(),
            Duration::from_millis(300),
        );
        let reason = reason(r);
        assert_eq!(
            reason,
            "the probes' loader (a child process) did not answer within 300ms; it was killed"
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn a_loader_that_crashes_is_named_with_its_signal() {
        let reason = reason_of(sh("kill -SEGV $$"));
        assert!(
            reason.starts_with(
                "the probes' loader (a child process) exited without answering (signal: 11"
            ),
            "{reason}"
        );
    }

    #[test]
    fn a_loader_that_exits_or_cannot_start_says_so() {
        let exited = reason_of(sh("exit 3"));
        assert!(
            exited.contains("exited without answering (exit status: 3)"),
            "{exited}"
        );
        let missing = reason_of(Command::new("/nonexistent/nodemedic"));
        assert!(
            missing.starts_with(
                "the probes' loader (a child process) could not be started (/nonexistent/nodemedic): "
            ),
            "{missing}"
        );
    }

    #[test]
    fn a_loader_that_answers_nonsense_is_refused() {
        // The request is read from stdin; the answer goes back on it (fd 0 is the socket).
        let reason = reason_of(sh("head -c 1 >/dev/null; printf 'not json' >&0; sleep 0.1"));
        assert!(
            reason.starts_with(
                "the probes' loader (a child process) answered something unreadable: "
            ),
            "{reason}"
        );
    }

    #[test]
    fn a_refusal_comes_back_as_the_same_reason() {
        let refused = Answer {
            outcome: Err(ProbeError::Attach {
                function: "perf-event probes".to_owned(),
                detail: "fentry: x; kprobe: y".to_owned(),
            }),
            peak_kib: Some(30_000),
        };
        let json = serde_json::to_string(&refused).unwrap_or_default();
        let back: Answer = match serde_json::from_str(&json) {
            Ok(a) => a,
            Err(e) => panic!("{e}: {json}"),
        };
        assert_eq!(back.peak_kib, Some(30_000));
        match back.outcome {
            Err(e) => assert_eq!(
                e.to_string(),
                "cannot attach perf-event probes: fentry: x; kprobe: y"
            ),
            Ok(h) => panic!("{h:?}"),
        }
    }

    #[test]
    fn a_description_that_does_not_match_its_fds_is_refused() {
        let handed = Handed {
            method: Method::Fentry,
            hooks: Vec::new(),
            programs: vec!["perf_event_output".to_owned()],
            stats: false,
            stats_error: None,
            links: 1,
        };
        let reason = reason(rebuild(handed, Vec::new()));
        assert_eq!(
            reason,
            "the probes' loader (a child process) handed over 0 fds where its description names 5"
        );
    }
}
