//! A refusal by a security module is named by the remediation (issue 52, point 5): the call
//! or the write, the unit or the path, the module, and the profile or label.
//!
//! D-Bus: this machine has no AppArmor or SELinux to mediate a bus, so a fake system bus on
//! a Unix socket answers as dbus-daemon does under one: the handshake, a unique name for
//! `Hello`, and `org.freedesktop.DBus.Error.AccessDenied` with dbus-daemon's words for every
//! call it refuses. The client is the real one (zbus, the actuator's calls, timeouts and
//! error classes). Writes: an immutable file (`chattr +i`) makes the kernel refuse
//! `smp_affinity`'s write for real (EPERM), under an injected LSM context.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::num::NonZeroU32;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use nodemedic_kernel::lsm::{LsmContext, LsmFiles};
use nodemedic_kernel::CpuSet;
use nodemedic_remedy::actuator::{AffinityWriter, Systemd};
use nodemedic_remedy::config::IrqbalanceStep;
use nodemedic_remedy::policy::Target;
use nodemedic_remedy::{FailureClass, IrqbalanceState, Outcome};

/// dbus-daemon's AppArmor refusal of nodemedic's TryRestartUnit, in the shape of a captured
/// one (nodemedic-kernel's lsm tests hold the capture).
const APPARMOR: &str = "An AppArmor policy prevents this sender from sending this message to this recipient; type=\"method_call\", sender=\":1.42\" (uid=0 pid=4242 comm=\"nodemedic run\" label=\"cri-containerd.apparmor.d (enforce)\") interface=\"org.freedesktop.systemd1.Manager\" member=\"TryRestartUnit\" error name=\"(unset)\" requested_reply=\"0\" destination=\"org.freedesktop.systemd1\" (uid=0 pid=1 comm=\"/sbin/init\" label=\"unconfined\")";
/// dbus-daemon's SELinux refusal, as captured (no label in it).
const SELINUX: &str = "An SELinux policy prevents this sender from sending this message to this recipient. 0 matched rules; type=\"method_call\", sender=\":1.17\" (uid=0 pid=6738 comm=\"\") interface=\"org.freedesktop.DBus\" member=\"Hello\" error name=\"(unset)\" requested_reply=\"0\" destination=\"org.freedesktop.DBus\" (uid=0 pid=1 comm=\"\")";
/// The bus's own XML policy refusing: not a security module's.
const XML_POLICY: &str = "Rejected send message, 2 matched rules; type=\"method_call\", sender=\":1.42\" (uid=0 pid=4242 comm=\"nodemedic run\") interface=\"org.freedesktop.systemd1.Manager\" member=\"TryRestartUnit\" error name=\"(unset)\" requested_reply=\"0\" destination=\"org.freedesktop.systemd1\" (uid=0 pid=1 comm=\"/sbin/init\")";

const ACCESS_DENIED: &str = "org.freedesktop.DBus.Error.AccessDenied";

/// A system bus that accepts one client, answers `Hello` with a unique name unless
/// `refuse_hello`, and every other call with AccessDenied and `words`.
fn fake_bus(socket: &Path, refuse_hello: bool, words: &'static str) -> std::thread::JoinHandle<()> {
    let listener = UnixListener::bind(socket).unwrap();
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        serve(stream, refuse_hello, words);
    })
}

fn serve(stream: UnixStream, refuse_hello: bool, words: &str) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    // The handshake: a NUL byte, then text commands until BEGIN.
    loop {
        let mut line = Vec::new();
        if reader.read_until(b'\n', &mut line).unwrap() == 0 {
            return;
        }
        let line = String::from_utf8_lossy(&line);
        let command = line.trim_start_matches('\0').trim_end();
        if command.starts_with("AUTH") {
            writer
                .write_all(b"OK 0123456789abcdef0123456789abcdef\r\n")
                .unwrap();
        } else if command == "NEGOTIATE_UNIX_FD" {
            writer.write_all(b"AGREE_UNIX_FD\r\n").unwrap();
        } else if command.ends_with("BEGIN") || command.contains("BEGIN") {
            break;
        }
    }
    // Messages: each call gets its answer; the client hangs up when it is done.
    loop {
        let mut head = [0u8; 16];
        if reader.read_exact(&mut head).is_err() {
            return;
        }
        assert_eq!(head[0], b'l', "a little-endian message");
        let word = |at: usize| u32::from_le_bytes(head[at..at + 4].try_into().unwrap());
        let (body, serial, fields) = (word(4) as usize, word(8), word(12) as usize);
        let mut rest = vec![0u8; fields.div_ceil(8) * 8 + body];
        reader.read_exact(&mut rest).unwrap();
        // What was called, enough to tell Hello from the rest.
        let hello = rest.windows(5).any(|w| w == b"Hello");
        let call = zbus::Message::method_call("/", "Call")
            .unwrap()
            .serial(NonZeroU32::new(serial).unwrap())
            .build(&())
            .unwrap();
        let reply = if hello && !refuse_hello {
            zbus::Message::method_return(&call.header())
                .unwrap()
                .build(&(":1.42",))
                .unwrap()
        } else {
            zbus::Message::error(&call.header(), ACCESS_DENIED)
                .unwrap()
                .build(&(words,))
                .unwrap()
        };
        if writer.write_all(reply.data()).is_err() {
            return;
        }
    }
}

fn step(socket: &Path) -> IrqbalanceStep {
    IrqbalanceStep {
        dbus_socket: socket.display().to_string(),
        systemctl_fallback: false,
        ..Default::default()
    }
}

fn apparmor(label: &str) -> LsmContext {
    LsmContext::from_files(&LsmFiles {
        apparmor_current: Some(label),
        ..Default::default()
    })
}

fn failed(outcome: Outcome) -> (FailureClass, String) {
    match outcome {
        Outcome::Failed(f) => (f.class, f.detail),
        Outcome::Done(d) => panic!("done: {d}"),
    }
}

/// TryRestartUnit refused by AppArmor: named with this process's own profile, or the one the
/// bus logged when its own is unknown; the class is the AccessDenied's, as before.
#[tokio::test]
async fn a_restart_the_bus_refuses_for_apparmor_names_the_profile() {
    let dir = tempfile::tempdir().unwrap();
    for (lsm, profile) in [
        (apparmor("nodemedic (enforce)\n"), "nodemedic"),
        (LsmContext::default(), "cri-containerd.apparmor.d"),
    ] {
        let socket = dir.path().join(format!("bus-{profile}"));
        let bus = fake_bus(&socket, false, APPARMOR);
        let (class, detail) = failed(Systemd::under(step(&socket), lsm).rebalance().await);
        assert_eq!(class, FailureClass::Permission);
        assert_eq!(
            detail,
            format!(
                "D-Bus: TryRestartUnit(irqbalance.service) denied by AppArmor (profile \
                 {profile}, enforce mode): {ACCESS_DENIED}: {APPARMOR}"
            )
        );
        bus.join().unwrap();
    }
}

/// irqbalance's state asked over a bus that refuses LoadUnit: unknown, with the denial.
#[tokio::test]
async fn a_state_the_bus_refuses_to_tell_is_unknown_with_the_denial() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("bus");
    // The bus's own socket must exist before the state is asked (it is checked first).
    let bus = fake_bus(&socket, false, APPARMOR);
    let state = Systemd::under(step(&socket), apparmor("nodemedic (enforce)\n"))
        .irqbalance_state()
        .await;
    let IrqbalanceState::Unknown { detail, .. } = state else {
        panic!("{state:?}");
    };
    assert_eq!(
        detail,
        format!(
            "LoadUnit(irqbalance.service) denied by AppArmor (profile nodemedic, enforce \
             mode): {ACCESS_DENIED}: {APPARMOR}"
        )
    );
    bus.join().unwrap();
}

/// The connection's Hello refused by SELinux (whose message names no label): this process's
/// label names it; without one, the module alone.
#[tokio::test]
async fn a_hello_the_bus_refuses_for_selinux_names_the_label() {
    let dir = tempfile::tempdir().unwrap();
    let container_t = LsmContext::from_files(&LsmFiles {
        current: Some("system_u:system_r:container_t:s0:c12,c34\0"),
        selinux_enforce: Some("1\n"),
        ..Default::default()
    });
    for (lsm, said) in [
        (
            container_t,
            " (label system_u:system_r:container_t:s0:c12,c34)",
        ),
        (LsmContext::default(), ""),
    ] {
        let socket = dir.path().join(format!("bus{}", said.len()));
        let bus = fake_bus(&socket, true, SELINUX);
        let (class, detail) = failed(Systemd::under(step(&socket), lsm).rebalance().await);
        assert_eq!(class, FailureClass::Permission);
        assert_eq!(
            detail,
            format!(
                "D-Bus: Hello (connecting to the system bus) denied by SELinux{said}: \
                 {ACCESS_DENIED}: {SELINUX}"
            )
        );
        bus.join().unwrap();
    }
}

/// An AccessDenied of the bus's own policy is not an LSM's, whatever confines the process:
/// the words are as they were.
#[tokio::test]
async fn the_bus_policy_refusing_is_not_named_an_lsm() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("bus");
    let bus = fake_bus(&socket, false, XML_POLICY);
    let (class, detail) = failed(
        Systemd::under(step(&socket), apparmor("nodemedic (enforce)\n"))
            .rebalance()
            .await,
    );
    assert_eq!(class, FailureClass::Permission);
    assert_eq!(detail, format!("D-Bus: {ACCESS_DENIED}: {XML_POLICY}"));
    bus.join().unwrap();
}

/// An immutable `smp_affinity` under `procfs`, which the kernel refuses to write (EPERM) even
/// to root. Made mutable again when dropped.
struct Immutable(PathBuf);

impl Immutable {
    fn new(procfs: &Path, irq: u32) -> Self {
        let dir = procfs.join(format!("irq/{irq}"));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("smp_affinity");
        std::fs::write(&file, "ff\n").unwrap();
        let ok = std::process::Command::new("chattr")
            .arg("+i")
            .arg(&file)
            .status()
            .unwrap()
            .success();
        assert!(ok, "chattr +i {} (needs root and ext4)", file.display());
        Self(file)
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = std::process::Command::new("chattr")
            .arg("-i")
            .arg(&self.0)
            .status();
    }
}

fn target(irqs: Vec<u32>) -> Target {
    Target {
        key: "dev:nic".into(),
        name: "nic".into(),
        irqs,
        effective_cpus: CpuSet::parse_list("0").unwrap(),
        eligible_cpus: CpuSet::parse_list("0-3").unwrap(),
    }
}

/// Native rebalancing's writes refused by the kernel: under a confining profile the path and
/// the profile are named, once for all the IRQs; unconfined, each IRQ says the errno as
/// before. The class is the same.
#[test]
fn refused_affinity_writes_name_the_lsm() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let procfs = dir.path();
    let _files = [Immutable::new(procfs, 24), Immutable::new(procfs, 25)];
    let lsm = apparmor("nodemedic (enforce)\n");
    let (class, detail) =
        failed(AffinityWriter::under(procfs, lsm.clone()).spread(&[target(vec![24])]));
    assert_eq!(class, FailureClass::Permission);
    assert_eq!(
        detail,
        format!(
            "wrote smp_affinity ; skipped 24 (write of {}/irq/24/smp_affinity denied by \
             AppArmor (profile nodemedic, enforce mode))",
            procfs.display()
        )
    );
    let (class, detail) =
        failed(AffinityWriter::under(procfs, lsm).spread(&[target(vec![24, 25])]));
    assert_eq!(class, FailureClass::Permission);
    assert_eq!(
        detail,
        format!(
            "wrote smp_affinity ; skipped 24, 25 (writes of {}/irq/N/smp_affinity denied by \
             AppArmor (profile nodemedic, enforce mode))",
            procfs.display()
        )
    );
    let (class, detail) = failed(AffinityWriter::new(procfs).spread(&[target(vec![24, 25])]));
    assert_eq!(class, FailureClass::Permission);
    assert_eq!(
        detail,
        "wrote smp_affinity ; skipped 24 (Operation not permitted (os error 1)), 25 \
         (Operation not permitted (os error 1))"
    );
}
