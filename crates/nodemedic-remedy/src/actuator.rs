//! Actuators: carry out a decided step. They never decide and never parse more than the
//! answer to their own call.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nodemedic_kernel::lsm::{dbus_refusal, LsmContext};
use nodemedic_kernel::CpuSet;
use zbus::zvariant::OwnedObjectPath;

use crate::config::{IrqbalanceMethod, IrqbalanceStep};
use crate::policy::{Outcome, Step, StepFailure, Target};
use crate::spread;
use crate::{FailureClass, IrqbalanceState};

const DBUS_TIMEOUT: Duration = Duration::from_secs(10);
/// `systemctl try-restart` waits for the restart job; irqbalance restarts in well under this.
const SYSTEMCTL_TIMEOUT: Duration = Duration::from_secs(30);

/// The part of systemd's manager interface nodemedic calls (org.freedesktop.systemd1(5)).
#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Manager",
    default_service = "org.freedesktop.systemd1",
    default_path = "/org/freedesktop/systemd1"
)]
trait Manager {
    fn load_unit(&self, name: &str) -> zbus::Result<OwnedObjectPath>;
    fn try_restart_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;
    fn kill_unit(&self, name: &str, whom: &str, signal: i32) -> zbus::Result<()>;
}

/// A unit's state properties.
#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Unit",
    default_service = "org.freedesktop.systemd1"
)]
trait Unit {
    #[zbus(property)]
    fn load_state(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn active_state(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn unit_file_state(&self) -> zbus::Result<String>;
}

/// A D-Bus call that failed or did not answer in time.
#[derive(Debug, thiserror::Error)]
pub enum DbusError {
    #[error("{0}: no answer within {DBUS_TIMEOUT:?}")]
    Timeout(&'static str),
    #[error(transparent)]
    Bus(#[from] zbus::Error),
    /// The bus refused the call for a security module's policy (dbus-daemon's AppArmor or
    /// SELinux mediation): `denial` names the call, the module and the profile or label;
    /// the bus's own words follow.
    #[error("{denial}: {source}")]
    Denied { denial: String, source: zbus::Error },
}

impl DbusError {
    /// The failure class, from the error's kind: the D-Bus error name of a method error, the
    /// io error of a broken connection.
    pub fn class(&self) -> FailureClass {
        let bus = match self {
            DbusError::Timeout(_) => return FailureClass::Timeout,
            // An AccessDenied, as any other: the same class.
            DbusError::Denied { .. } => return FailureClass::Permission,
            DbusError::Bus(e) => e,
        };
        match bus {
            zbus::Error::MethodError(name, _, _) => match name.as_str() {
                "org.freedesktop.DBus.Error.AccessDenied"
                | "org.freedesktop.DBus.Error.AuthFailed"
                | "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired" => {
                    FailureClass::Permission
                }
                "org.freedesktop.DBus.Error.ServiceUnknown"
                | "org.freedesktop.DBus.Error.NameHasNoOwner"
                | "org.freedesktop.systemd1.NoSuchUnit"
                | "org.freedesktop.systemd1.LoadFailed" => FailureClass::Unavailable,
                "org.freedesktop.DBus.Error.Timeout" | "org.freedesktop.DBus.Error.NoReply" => {
                    FailureClass::Timeout
                }
                _ => FailureClass::Other,
            },
            zbus::Error::InputOutput(io) | zbus::Error::Connection(io, _) => {
                FailureClass::of_io(io)
            }
            zbus::Error::Address(_) => FailureClass::Unavailable,
            _ => FailureClass::Other,
        }
    }
}

impl DbusError {
    /// The same error, naming `call` and the security module when the bus says one of its
    /// policies refused it (`TryRestartUnit(irqbalance.service) denied by AppArmor (profile
    /// …, enforce mode)`): the profile or label is this process's own from `lsm`, else the
    /// one the bus logged. Any other error is returned as it is.
    pub fn named(self, call: impl FnOnce() -> String, lsm: &LsmContext) -> Self {
        let DbusError::Bus(e) = self else {
            return self;
        };
        let refusal = method_error(&e).and_then(|(name, message)| dbus_refusal(&name, &message));
        match refusal {
            Some(r) => DbusError::Denied {
                denial: r.denial(&call(), lsm),
                source: e,
            },
            None => DbusError::Bus(e),
        }
    }
}

/// The D-Bus error name and message of a method's error reply (the bus's or the callee's).
fn method_error(e: &zbus::Error) -> Option<(String, String)> {
    use zbus::DBusError as _;
    match e {
        zbus::Error::MethodError(name, detail, _) => {
            Some((name.to_string(), detail.clone().unwrap_or_default()))
        }
        zbus::Error::FDO(fdo) => Some((
            fdo.name().to_string(),
            fdo.description().unwrap_or_default().to_owned(),
        )),
        _ => None,
    }
}

/// `f` with the D-Bus timeout: a wedged bus or systemd must not wedge remediation.
async fn bounded<T>(
    what: &'static str,
    f: impl std::future::Future<Output = zbus::Result<T>>,
) -> Result<T, DbusError> {
    Ok(tokio::time::timeout(DBUS_TIMEOUT, f)
        .await
        .map_err(|_| DbusError::Timeout(what))??)
}

fn failed(class: FailureClass, detail: String) -> Outcome {
    Outcome::Failed(StepFailure { class, detail })
}

/// Talks to systemd about irqbalance, over the system D-Bus.
pub struct Systemd {
    cfg: IrqbalanceStep,
    /// This process's LSM labels, which name a call the bus refuses for a policy.
    lsm: LsmContext,
}

impl Systemd {
    pub fn new(cfg: IrqbalanceStep) -> Self {
        Self::under(cfg, LsmContext::default())
    }

    /// A client for a process whose LSM labels are `lsm` (read once at start).
    pub fn under(cfg: IrqbalanceStep, lsm: LsmContext) -> Self {
        Self { cfg, lsm }
    }

    /// `e`, naming `call` on the unit when a security policy refused it.
    fn named(&self, e: DbusError, call: &str) -> DbusError {
        e.named(|| format!("{call}({})", self.cfg.unit), &self.lsm)
    }

    /// What a failed `call` on the unit says: `Call(unit): error`, or the denial alone,
    /// which names the call.
    fn failure(&self, e: DbusError, call: &str) -> String {
        match self.named(e, call) {
            d @ DbusError::Denied { .. } => d.to_string(),
            e => format!("{call}({}): {e}", self.cfg.unit),
        }
    }

    async fn manager(&self) -> Result<ManagerProxy<'static>, DbusError> {
        let address = format!("unix:path={}", self.cfg.dbus_socket);
        // The bus answers the connection's Hello: the first call a policy can refuse.
        let conn = bounded(
            "connecting to the system bus",
            zbus::connection::Builder::address(address.as_str())?.build(),
        )
        .await
        .map_err(|e| e.named(|| "Hello (connecting to the system bus)".into(), &self.lsm))?;
        bounded(
            "systemd manager proxy",
            ManagerProxy::builder(&conn)
                .cache_properties(zbus::proxy::CacheProperties::No)
                .build(),
        )
        .await
    }

    /// irqbalance's state, as systemd knows the unit: running, stopped on purpose, not
    /// installed, or unknown with the reason. The version is not systemd's to tell: the task
    /// adds the one the sample read from the package database.
    pub async fn irqbalance_state(&self) -> IrqbalanceState {
        let version = None;
        if !self.cfg.enabled {
            return IrqbalanceState::Unknown {
                detail: "not asked over D-Bus: [remediation.irqbalance] enabled = false".into(),
                version,
            };
        }
        if !std::path::Path::new(&self.cfg.dbus_socket).exists() {
            return IrqbalanceState::Unknown {
                detail: format!(
                    "no system D-Bus socket at {}: irqbalance cannot be asked or restarted \
                     from here",
                    self.cfg.dbus_socket
                ),
                version,
            };
        }
        let manager = match self.manager().await {
            Ok(m) => m,
            Err(e) => {
                return IrqbalanceState::Unknown {
                    detail: format!("system bus at {}: {e}", self.cfg.dbus_socket),
                    version,
                }
            }
        };
        let path = match bounded("LoadUnit", manager.load_unit(&self.cfg.unit)).await {
            Ok(p) => p,
            Err(e) => {
                return IrqbalanceState::Unknown {
                    detail: self.failure(e, "LoadUnit"),
                    version,
                }
            }
        };
        let unit = async {
            UnitProxy::builder(manager.inner().connection())
                .path(path)?
                .cache_properties(zbus::proxy::CacheProperties::No)
                .build()
                .await
        };
        let unit = match bounded("unit proxy", unit).await {
            Ok(u) => u,
            Err(e) => {
                return IrqbalanceState::Unknown {
                    detail: format!("{}: {e}", self.cfg.unit),
                    version,
                }
            }
        };
        // A state that cannot be read is unknown, not stopped: "stopped" means someone
        // stopped irqbalance on purpose, and steers remediation away from it.
        let states = async {
            let load = bounded("LoadState", unit.load_state()).await?;
            let active = bounded("ActiveState", unit.active_state()).await?;
            Ok::<_, DbusError>((load, active))
        };
        let (load, active) = match states.await {
            Ok(s) => s,
            Err(e) => {
                let detail = match self.named(e, "Properties.Get") {
                    d @ DbusError::Denied { .. } => d.to_string(),
                    e => format!("{}: {e}", self.cfg.unit),
                };
                return IrqbalanceState::Unknown { detail, version };
            }
        };
        let file = bounded("UnitFileState", unit.unit_file_state())
            .await
            .unwrap_or_default();
        match (load.as_str(), active.as_str()) {
            ("not-found", _) => IrqbalanceState::NotInstalled,
            (_, "active" | "reloading") => IrqbalanceState::Running { version },
            _ => IrqbalanceState::Stopped {
                detail: format!("{} is {load}/{active} (unit file {file})", self.cfg.unit),
                version,
            },
        }
    }

    /// Asks irqbalance to re-place every IRQ: TryRestartUnit or SIGHUP through systemd, with
    /// `systemctl try-restart` as the fallback when the bus fails.
    pub async fn rebalance(&self) -> Outcome {
        let via_dbus = async {
            let manager = self.manager().await?;
            match self.cfg.method {
                IrqbalanceMethod::TryRestart => {
                    let job = bounded(
                        "TryRestartUnit",
                        manager.try_restart_unit(&self.cfg.unit, "replace"),
                    )
                    .await
                    .map_err(|e| self.named(e, "TryRestartUnit"))?;
                    Ok::<String, DbusError>(format!(
                        "TryRestartUnit({}) queued job {}",
                        self.cfg.unit,
                        job.as_str()
                    ))
                }
                IrqbalanceMethod::Sighup => {
                    bounded(
                        "KillUnit",
                        manager.kill_unit(&self.cfg.unit, "main", SIGHUP),
                    )
                    .await
                    .map_err(|e| self.named(e, "KillUnit"))?;
                    Ok(format!("KillUnit({}, main, SIGHUP)", self.cfg.unit))
                }
            }
        };
        match via_dbus.await {
            Ok(detail) => Outcome::Done(detail),
            Err(e) if self.cfg.systemctl_fallback => {
                // Bounded like the D-Bus calls: a hung systemctl must not hang remediation
                // (the child is killed when the timeout drops it).
                let out = tokio::time::timeout(
                    SYSTEMCTL_TIMEOUT,
                    tokio::process::Command::new("systemctl")
                        .args(["try-restart", &self.cfg.unit])
                        .kill_on_drop(true)
                        .output(),
                )
                .await;
                let out = match out {
                    Ok(out) => out,
                    Err(_) => {
                        return failed(
                            FailureClass::Timeout,
                            format!(
                                "D-Bus failed ({e}); `systemctl try-restart {}` timed out after {SYSTEMCTL_TIMEOUT:?}",
                                self.cfg.unit
                            ),
                        )
                    }
                };
                match out {
                    Ok(o) if o.status.success() => Outcome::Done(format!(
                        "D-Bus failed ({e}); `systemctl try-restart {}` succeeded",
                        self.cfg.unit
                    )),
                    // systemctl's LSB exit codes: 4 insufficient privilege, 5 unit not loaded.
                    Ok(o) => failed(
                        match o.status.code() {
                            Some(4) => FailureClass::Permission,
                            Some(5) => FailureClass::Unavailable,
                            _ => e.class(),
                        },
                        format!(
                            "D-Bus failed ({e}); systemctl exited {}: {}",
                            o.status,
                            String::from_utf8_lossy(&o.stderr).trim()
                        ),
                    ),
                    Err(e2) => failed(e.class(), format!("D-Bus failed ({e}); systemctl: {e2}")),
                }
            }
            Err(e) => failed(e.class(), format!("D-Bus: {e}")),
        }
    }
}

/// SIGHUP makes irqbalance re-read its configuration and re-place every IRQ.
const SIGHUP: i32 = 1;

/// Writes `smp_affinity` under a procfs root.
pub struct AffinityWriter {
    procfs: PathBuf,
    /// This process's LSM labels, which name a write a policy refuses.
    lsm: LsmContext,
}

impl AffinityWriter {
    pub fn new(procfs: impl Into<PathBuf>) -> Self {
        Self::under(procfs, LsmContext::default())
    }

    /// A writer for a process whose LSM labels are `lsm` (read once at start).
    pub fn under(procfs: impl Into<PathBuf>, lsm: LsmContext) -> Self {
        Self {
            procfs: procfs.into(),
            lsm,
        }
    }

    /// Spreads each target's IRQs over its eligible CPUs. IRQs the kernel manages itself
    /// refuse the write (EIO); they are skipped and reported. Fails only when nothing could
    /// be written.
    pub fn spread(&self, targets: &[Target]) -> Outcome {
        let mut written = Vec::new();
        let mut skipped = Vec::new();
        // IRQs whose write a security module may have refused (and the first one's errno):
        // one entry, the words once.
        let mut denied: Vec<u32> = Vec::new();
        let mut denied_errno = None;
        // The class of the first refusal: all of them when nothing could be written.
        let mut class = FailureClass::Other;
        for t in targets {
            for (irq, cpu) in spread::plan(&t.irqs, &t.eligible_cpus, &t.effective_cpus) {
                match write_affinity(&self.procfs, irq, &CpuSet::from_cpus([cpu])) {
                    Ok(()) => written.push(format!("{irq}->{cpu}")),
                    Err(e) => {
                        if skipped.is_empty() && denied.is_empty() {
                            class = FailureClass::of_io(&e);
                        }
                        if e.raw_os_error() == Some(5) {
                            skipped.push(format!("{irq} (kernel-managed, EIO)"));
                        } else if self.lsm.refusing(e.raw_os_error()).is_some() {
                            denied_errno = denied_errno.or(e.raw_os_error());
                            denied.push(irq);
                        } else {
                            skipped.push(format!("{irq} ({e})"));
                        }
                    }
                }
            }
        }
        if let Some(words) = self.denied_writes(&denied, denied_errno) {
            skipped.push(words);
        }
        let detail = format!(
            "wrote smp_affinity {}{}",
            written.join(" "),
            if skipped.is_empty() {
                String::new()
            } else {
                format!("; skipped {}", skipped.join(", "))
            }
        );
        if written.is_empty() {
            failed(class, detail)
        } else {
            Outcome::Done(detail)
        }
    }
}

impl AffinityWriter {
    /// `24, 25 (writes of /host/proc/irq/N/smp_affinity denied by AppArmor (profile …, enforce
    /// mode))` for the IRQs whose write a module confining this process refused with `errno`;
    /// `None` for none.
    fn denied_writes(&self, irqs: &[u32], errno: Option<i32>) -> Option<String> {
        let first = *irqs.first()?;
        let list: Vec<String> = irqs.iter().map(u32::to_string).collect();
        let operation = if irqs.len() == 1 {
            format!("write of {}", affinity_path(&self.procfs, first).display())
        } else {
            format!("writes of {}", affinity_path(&self.procfs, "N").display())
        };
        let words = self.lsm.denial(&operation, errno)?;
        Some(format!("{} ({words})", list.join(", ")))
    }
}

fn affinity_path(procfs: &Path, irq: impl std::fmt::Display) -> PathBuf {
    procfs.join(format!("irq/{irq}/smp_affinity"))
}

fn write_affinity(procfs: &Path, irq: u32, cpus: &CpuSet) -> std::io::Result<()> {
    std::fs::write(affinity_path(procfs, irq), cpus.to_mask_string())
}

/// Carries out a step with the right actuator.
pub async fn execute(step: &Step, systemd: &Systemd, writer: &AffinityWriter) -> Outcome {
    match step.kind {
        crate::ActionKind::IrqbalanceRestart => systemd.rebalance().await,
        crate::ActionKind::NativeRebalance => {
            let targets = step.targets.clone();
            let w = AffinityWriter::under(writer.procfs.clone(), writer.lsm.clone());
            tokio::task::spawn_blocking(move || w.spread(&targets))
                .await
                .unwrap_or_else(|e| failed(FailureClass::Other, format!("writer task: {e}")))
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::panic)]

    use super::*;

    /// With the restart switched off, systemd is never asked (no D-Bus error on /status).
    #[tokio::test]
    async fn restart_off_does_not_ask_dbus() {
        let cfg = IrqbalanceStep {
            enabled: false,
            dbus_socket: "/nonexistent/system_bus_socket".into(),
            ..Default::default()
        };
        let state = Systemd::new(cfg).irqbalance_state().await;
        let IrqbalanceState::Unknown { detail, .. } = state else {
            panic!("{state:?}");
        };
        assert!(detail.contains("enabled = false"), "{detail}");
    }

    /// A node without a system bus (the pod starts without the socket): unknown, with the
    /// reason, and no connection attempt.
    #[tokio::test]
    async fn no_dbus_socket_is_unknown_with_the_reason() {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let cfg = IrqbalanceStep {
            dbus_socket: root
                .path()
                .join("run/dbus/system_bus_socket")
                .display()
                .to_string(),
            ..Default::default()
        };
        let state = Systemd::new(cfg).irqbalance_state().await;
        let IrqbalanceState::Unknown { detail, .. } = state else {
            panic!("{state:?}");
        };
        assert!(detail.contains("no system D-Bus socket at"), "{detail}");
    }

    /// Failures are classed by the error's kind, not its words.
    #[test]
    fn dbus_failures_are_classed_by_kind() {
        use std::io::{Error, ErrorKind};
        use std::sync::Arc;
        assert_eq!(DbusError::Timeout("x").class(), FailureClass::Timeout);
        let bus = |e| DbusError::Bus(e).class();
        assert_eq!(
            bus(zbus::Error::Address("bad".into())),
            FailureClass::Unavailable
        );
        assert_eq!(
            bus(zbus::Error::InputOutput(Arc::new(Error::from(
                ErrorKind::PermissionDenied
            )))),
            FailureClass::Permission
        );
        assert_eq!(
            bus(zbus::Error::Failure("timed out, permission denied".into())),
            FailureClass::Other,
            "words do not make a class"
        );
    }

    /// Asking irqbalance to re-place IRQs over a bus that is not there fails as unavailable,
    /// with the connection error in the detail.
    #[tokio::test]
    async fn a_missing_bus_fails_as_unavailable() {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let cfg = IrqbalanceStep {
            dbus_socket: root.path().join("no/such/socket").display().to_string(),
            systemctl_fallback: false,
            ..Default::default()
        };
        let Outcome::Failed(f) = Systemd::new(cfg).rebalance().await else {
            panic!("rebalanced without a bus");
        };
        assert_eq!(f.class, FailureClass::Unavailable, "{}", f.detail);
        assert!(f.detail.starts_with("D-Bus: "), "{}", f.detail);
    }
}
