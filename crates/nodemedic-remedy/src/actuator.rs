//! Actuators: carry out a decided step. They never decide and never parse more than the
//! answer to their own call.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nodemedic_kernel::CpuSet;
use zbus::zvariant::{OwnedObjectPath, OwnedValue};

use crate::config::{IrqbalanceMethod, IrqbalanceStep};
use crate::dpkg;
use crate::policy::{IrqbalanceState, Outcome, Step, Target};
use crate::spread;

const SYSTEMD: &str = "org.freedesktop.systemd1";
const SYSTEMD_PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";
const UNIT: &str = "org.freedesktop.systemd1.Unit";
const DBUS_TIMEOUT: Duration = Duration::from_secs(10);

/// Talks to systemd about irqbalance, over the system D-Bus.
pub struct Systemd {
    cfg: IrqbalanceStep,
    rootfs: PathBuf,
}

impl Systemd {
    pub fn new(cfg: IrqbalanceStep, rootfs: impl Into<PathBuf>) -> Self {
        Self {
            cfg,
            rootfs: rootfs.into(),
        }
    }

    async fn connect(&self) -> zbus::Result<zbus::Connection> {
        let address = format!("unix:path={}", self.cfg.dbus_socket);
        tokio::time::timeout(
            DBUS_TIMEOUT,
            zbus::connection::Builder::address(address.as_str())?.build(),
        )
        .await
        .map_err(|_| zbus::Error::Failure("timed out connecting to the system bus".into()))?
    }

    async fn call<B>(
        &self,
        conn: &zbus::Connection,
        path: &str,
        iface: &str,
        method: &str,
        body: &B,
    ) -> zbus::Result<zbus::Message>
    where
        B: serde::Serialize + zbus::zvariant::DynamicType,
    {
        tokio::time::timeout(
            DBUS_TIMEOUT,
            conn.call_method(Some(SYSTEMD), path, Some(iface), method, body),
        )
        .await
        .map_err(|_| zbus::Error::Failure(format!("{method}: timed out")))?
    }

    async fn unit_property(
        &self,
        conn: &zbus::Connection,
        unit: &OwnedObjectPath,
        name: &str,
    ) -> zbus::Result<String> {
        let reply = self
            .call(
                conn,
                unit.as_str(),
                "org.freedesktop.DBus.Properties",
                "Get",
                &(UNIT, name),
            )
            .await?;
        let value: OwnedValue = reply.body().deserialize()?;
        String::try_from(value).map_err(zbus::Error::from)
    }

    /// irqbalance's state: installed (per dpkg under the root filesystem, or systemd knowing
    /// the unit), running, or stopped on purpose; and its version.
    pub async fn irqbalance_state(&self) -> IrqbalanceState {
        let version = std::fs::read_to_string(self.rootfs.join("var/lib/dpkg/status"))
            .ok()
            .and_then(|s| dpkg::installed_version(&s, "irqbalance"));
        let conn = match self.connect().await {
            Ok(c) => c,
            Err(e) => {
                return IrqbalanceState::Unknown {
                    detail: format!("system bus at {}: {e}", self.cfg.dbus_socket),
                }
            }
        };
        let unit = match self
            .call(
                &conn,
                SYSTEMD_PATH,
                MANAGER,
                "LoadUnit",
                &(self.cfg.unit.as_str(),),
            )
            .await
        {
            Ok(reply) => match reply.body().deserialize::<OwnedObjectPath>() {
                Ok(p) => p,
                Err(e) => {
                    return IrqbalanceState::Unknown {
                        detail: format!("LoadUnit reply: {e}"),
                    }
                }
            },
            Err(e) => {
                return IrqbalanceState::Unknown {
                    detail: format!("LoadUnit({}): {e}", self.cfg.unit),
                }
            }
        };
        let load = self
            .unit_property(&conn, &unit, "LoadState")
            .await
            .unwrap_or_default();
        let active = self
            .unit_property(&conn, &unit, "ActiveState")
            .await
            .unwrap_or_default();
        let file = self
            .unit_property(&conn, &unit, "UnitFileState")
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
            let conn = self.connect().await?;
            match self.cfg.method {
                IrqbalanceMethod::TryRestart => {
                    let reply = self
                        .call(
                            &conn,
                            SYSTEMD_PATH,
                            MANAGER,
                            "TryRestartUnit",
                            &(self.cfg.unit.as_str(), "replace"),
                        )
                        .await?;
                    let job: OwnedObjectPath = reply.body().deserialize()?;
                    Ok::<String, zbus::Error>(format!(
                        "TryRestartUnit({}) queued job {}",
                        self.cfg.unit,
                        job.as_str()
                    ))
                }
                IrqbalanceMethod::Sighup => {
                    self.call(
                        &conn,
                        SYSTEMD_PATH,
                        MANAGER,
                        "KillUnit",
                        &(self.cfg.unit.as_str(), "main", 1i32),
                    )
                    .await?;
                    Ok(format!("KillUnit({}, main, SIGHUP)", self.cfg.unit))
                }
            }
        };
        match via_dbus.await {
            Ok(detail) => Outcome::Done(detail),
            Err(e) if self.cfg.systemctl_fallback => {
                let out = tokio::process::Command::new("systemctl")
                    .args(["try-restart", &self.cfg.unit])
                    .output()
                    .await;
                match out {
                    Ok(o) if o.status.success() => Outcome::Done(format!(
                        "D-Bus failed ({e}); `systemctl try-restart {}` succeeded",
                        self.cfg.unit
                    )),
                    Ok(o) => Outcome::Failed(format!(
                        "D-Bus failed ({e}); systemctl exited {}: {}",
                        o.status,
                        String::from_utf8_lossy(&o.stderr).trim()
                    )),
                    Err(e2) => Outcome::Failed(format!("D-Bus failed ({e}); systemctl: {e2}")),
                }
            }
            Err(e) => Outcome::Failed(format!("D-Bus: {e}")),
        }
    }
}

/// Writes `smp_affinity` under a procfs root.
pub struct AffinityWriter {
    procfs: PathBuf,
}

impl AffinityWriter {
    pub fn new(procfs: impl Into<PathBuf>) -> Self {
        Self {
            procfs: procfs.into(),
        }
    }

    /// Spreads each target's IRQs over its eligible CPUs. IRQs the kernel manages itself
    /// refuse the write (EIO); they are skipped and reported. Fails only when nothing could
    /// be written.
    pub fn spread(&self, targets: &[Target]) -> Outcome {
        let mut written = Vec::new();
        let mut skipped = Vec::new();
        for t in targets {
            for (irq, cpu) in spread::plan(&t.irqs, &t.eligible_cpus, &t.effective_cpus) {
                match write_affinity(&self.procfs, irq, &CpuSet::from_cpus([cpu])) {
                    Ok(()) => written.push(format!("{irq}->{cpu}")),
                    Err(e) if e.raw_os_error() == Some(5) => {
                        skipped.push(format!("{irq} (kernel-managed, EIO)"))
                    }
                    Err(e) => skipped.push(format!("{irq} ({e})")),
                }
            }
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
            Outcome::Failed(detail)
        } else {
            Outcome::Done(detail)
        }
    }
}

fn write_affinity(procfs: &Path, irq: u32, cpus: &CpuSet) -> std::io::Result<()> {
    std::fs::write(
        procfs.join(format!("irq/{irq}/smp_affinity")),
        cpus.to_mask_string(),
    )
}

/// Carries out a step with the right actuator.
pub async fn execute(step: &Step, systemd: &Systemd, writer: &AffinityWriter) -> Outcome {
    match step.kind {
        crate::ActionKind::IrqbalanceRestart => systemd.rebalance().await,
        crate::ActionKind::NativeRebalance => {
            let targets = step.targets.clone();
            let w = AffinityWriter::new(writer.procfs.clone());
            tokio::task::spawn_blocking(move || w.spread(&targets))
                .await
                .unwrap_or_else(|e| Outcome::Failed(format!("writer task: {e}")))
        }
    }
}
