//! `nodemedic run`: sample on an interval, detect, serve.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use nodemedic_engine::Engine;
use nodemedic_export::{Endpoint, EndpointConfig};
use nodemedic_remedy::RealActuators;
use nodemedic_sample::kube::KubeStatus;
use nodemedic_sample::remedy::{Pause, PauseFlag, RemedyState};
use nodemedic_sample::Sample;
use nodemedic_webkit::{FileLimit, Limits, Listener, WebConfigWatch};

use crate::config::Config;

/// Faults a test can inject into the daemon.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    pub hang_sampler_after: Option<u64>,
    /// The task (`sampler`, `remediator`, `kubernetes`) that panics a second after start.
    pub panic_task: Option<String>,
}

/// `task`, or a panic in its place when the faults say so.
async fn with_fault(
    name: &'static str,
    faults: &Faults,
    task: impl std::future::Future<Output = ()>,
) {
    if faults.panic_task.as_deref() == Some(name) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        // The point of this fault is a real panic, caught by nothing but the supervisor.
        #[allow(clippy::panic)]
        {
            panic!("fault injection: the {name} task panics");
        }
    }
    task.await
}

/// `files`: the process's file limit, raised once; the read layer and the server each get
/// their share of it.
pub fn run(config: Config, faults: Faults, files: FileLimit) -> anyhow::Result<()> {
    nodemedic_heap::tune_heap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(2)
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(serve(config, faults, files))
}

async fn serve(config: Config, faults: Faults, files: FileLimit) -> anyhow::Result<()> {
    for note in config.adjusted() {
        tracing::warn!("configuration: {note}");
    }
    let web = bind(&config, &files).await?;
    let registry = crate::collectors::registry(&config, crate::collectors::For::Daemon);
    let mut engine_config = config.engine_config(&files);
    engine_config.host = Arc::new(config.host_access());
    let engine = Engine::with_registry(engine_config, registry);
    let listening: Vec<String> = web.listeners.iter().map(Listener::local).collect();
    tracing::info!(
        listen = %listening.join(","),
        tls = web.security.current().tls.is_some(),
        basic_auth = web.security.current().needs_auth(),
        procfs = %engine.paths().procfs.display(),
        sysfs = %engine.paths().sysfs.display(),
        rootfs = %engine.paths().rootfs.display(),
        interval = %humantime::format_duration(config.sample_interval),
        lsm = %engine.host().lsm.labels_text().as_deref().unwrap_or("none"),
        "nodemedic started"
    );
    let (samples, _) = tokio::sync::watch::channel(None);
    let mut outputs = start_outputs(&config, &engine, &samples, &faults, &web.security);
    let interval = config.sample_interval;
    let serving = format!("serving on {}", listening.join(", "));
    let (sample_thread, sampler_thread) =
        start_sampler(engine, interval, faults.clone()).context("starting the sampler thread")?;
    let mut sampler = tokio::spawn({
        let f = faults.clone();
        let task = sample_loop(sample_thread, outputs.endpoint.clone(), samples, serving);
        async move { with_fault("sampler", &f, task).await }
    });
    crate::systemd::check_watchdog(interval);
    let server = web.serve(outputs.endpoint.clone());
    // Supervision: the sampler, remediator and Kubernetes tasks live as long as the daemon.
    // One that ends (a panic, or a bug that returns) would leave nodemedic serving stale or
    // partial answers, so the daemon exits non-zero and systemd or the kubelet restarts it.
    // Biased, the sampler first: when it dies, the remediator and the Kubernetes task see
    // its channel close and return too, and the report must name the cause, not a symptom.
    let died = tokio::select! {
        biased;
        r = &mut sampler => Some(("sampler", ended(r))),
        r = &mut outputs.remediator => Some(("remediator", ended(r))),
        r = &mut outputs.kubernetes => Some(("kubernetes", ended(r))),
        () = server => None,
    };
    crate::systemd::stopping();
    if let Some((task, how)) = died {
        tracing::error!(task, how = %how, "a nodemedic task ended; exiting so that it is restarted");
        sampler.abort();
        outputs.remediator.abort();
        outputs.kubernetes.abort();
        // (The aborted sample loop is dropped by the runtime while this waits, which closes
        // the thread's channel; the task that died was already awaited above.)
        join_sampler(sampler_thread).await;
        anyhow::bail!(
            "the {task} task {how}; exiting so that systemd or the kubelet restarts nodemedic"
        );
    }
    // SIGTERM: no new sample, so the remediator takes no new decision.
    sampler.abort();
    let _ = (&mut sampler).await;
    join_sampler(sampler_thread).await;
    outputs.stop().await;
    tracing::info!("nodemedic stopped");
    Ok(())
}

/// The endpoint's side of the web toolkit: its configuration file (watched for changes), the
/// request limits from the process's share of open files, and the bound listeners.
struct Web {
    security: Arc<WebConfigWatch>,
    limits: Limits,
    listeners: Vec<Listener>,
}

/// Loads the web configuration and binds every listen address; an error here stops the
/// start, before any task runs.
async fn bind(config: &Config, files: &FileLimit) -> anyhow::Result<Web> {
    let security = Arc::new(
        WebConfigWatch::new(config.web.config_file.as_deref())
            .context("loading --web.config.file")?,
    );
    tokio::spawn(security.clone().watch());
    let limits = Limits {
        header_read_timeout: config.web.header_read_timeout,
        request_timeout: config.web.request_timeout,
        max_connections: nodemedic_webkit::connection_cap(config.web.max_connections, files),
        max_requests: config.web.max_requests,
    };
    tracing::info!(
        nofile = files.soft,
        nofile_hard = files.hard,
        max_connections = limits.max_connections,
        max_requests = limits.max_requests,
        "endpoint limits"
    );
    let mut listeners = Vec::new();
    for addr in &config.web.listen_address.0 {
        listeners.push(
            Listener::bind(addr)
                .await
                .with_context(|| format!("binding {addr}"))?,
        );
    }
    Ok(Web {
        security,
        limits,
        listeners,
    })
}

impl Web {
    /// Serves `endpoint`'s routes until SIGTERM or SIGINT.
    async fn serve(self, endpoint: Arc<Endpoint>) {
        let web_stats = endpoint.web_stats();
        nodemedic_webkit::serve(
            self.listeners,
            endpoint.router(),
            self.limits,
            web_stats,
            self.security,
            shutdown_signal(),
        )
        .await;
    }
}

/// The three outputs of the samples, siblings that never call each other.
struct Outputs {
    endpoint: Arc<Endpoint>,
    remediator: tokio::task::JoinHandle<()>,
    kubernetes: tokio::task::JoinHandle<()>,
}

/// Starts the remediator and the Kubernetes reporter on `samples` and builds the endpoint.
/// This is all the wiring there is: the sample reaches each output on its watch channel,
/// the remediator's decisions reach the reporter on a queue, the pause annotation the
/// reporter reads reaches the remediator through a flag, and what the remediator and the
/// reporter publish reaches the endpoint on watch channels of their own.
fn start_outputs(
    config: &Config,
    engine: &Engine,
    samples: &tokio::sync::watch::Sender<Option<Arc<Sample>>>,
    faults: &Faults,
    security: &Arc<WebConfigWatch>,
) -> Outputs {
    let (remedy_tx, remedy_rx) = tokio::sync::watch::channel(RemedyState {
        mode: Some(config.remediation.mode),
        ..RemedyState::default()
    });
    let (kube_tx, kube_rx) = tokio::sync::watch::channel(KubeStatus::default());
    let pause = PauseFlag::new(Pause::Unknown);
    let (decisions_tx, decisions_rx) = tokio::sync::mpsc::channel(256);
    let remediator = tokio::spawn({
        let faults = faults.clone();
        let task = nodemedic_remedy::task::run(
            config.remediation.clone(),
            RealActuators::new(&config.remediation, engine.paths(), &engine.host().lsm),
            samples.subscribe(),
            remedy_tx,
            pause.clone(),
            decisions_tx,
        );
        async move { with_fault("remediator", &faults, task).await }
    });
    let kubernetes = tokio::spawn({
        let faults = faults.clone();
        let task = nodemedic_kube::task::run(
            config.kubernetes.clone(),
            samples.subscribe(),
            decisions_rx,
            pause,
            kube_tx,
        );
        async move { with_fault("kubernetes", &faults, task).await }
    });
    let endpoint = Arc::new(Endpoint::new(
        EndpointConfig {
            sample_interval: config.sample_interval,
            request_timeout: config.web.request_timeout,
            metrics: config.metrics.clone(),
        },
        remedy_rx,
        kube_rx,
        security.clone(),
    ));
    Outputs {
        endpoint,
        remediator,
        kubernetes,
    }
}

impl Outputs {
    /// After the samples ended: a remediation step in flight gets [`STOP_GRACE`] to finish
    /// (its outcome is audited), else it is recorded as interrupted; meanwhile the Kubernetes
    /// task, whose samples ended too, marks the node condition it maintained as stopped.
    async fn stop(mut self) {
        let remediation = async {
            if tokio::time::timeout(STOP_GRACE, &mut self.remediator)
                .await
                .is_err()
            {
                tracing::warn!(
                    target: "nodemedic::audit",
                    result = "interrupted",
                    "remediation step in flight interrupted by shutdown after {STOP_GRACE:?}"
                );
                self.remediator.abort();
            }
        };
        let kubernetes = async {
            if tokio::time::timeout(KUBE_STOP, &mut self.kubernetes)
                .await
                .is_err()
            {
                tracing::warn!("the node condition was not handed over within {KUBE_STOP:?}");
                self.kubernetes.abort();
            }
        };
        tokio::join!(remediation, kubernetes);
    }
}

/// How long SIGTERM waits for a remediation step in flight: with [`SAMPLER_STOP`], below the
/// unit's `TimeoutStopSec=20s` (deploy/systemd) and the kubelet's default 30 s grace period, so
/// the `interrupted` audit line is written before a SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(15);

/// How long stopping waits for the Kubernetes task to mark the node condition stopped (one
/// API call; the API may be down).
const KUBE_STOP: Duration = Duration::from_secs(5);

/// How long stopping waits for the sampler thread to finish its sample and drop the engine.
const SAMPLER_STOP: Duration = Duration::from_secs(3);

/// Waits (up to [`SAMPLER_STOP`]) for the sampler thread, which ends once its request channel
/// is closed (the sample loop is gone). Dropping the engine there stops what it owns: the disk
/// commit probe's thread ends and its file is removed. Without the wait the process could exit
/// mid-drop and leave the file behind.
async fn join_sampler(thread: std::thread::JoinHandle<()>) {
    let deadline = Instant::now() + SAMPLER_STOP;
    while !thread.is_finished() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if thread.is_finished() {
        let _ = thread.join();
    } else {
        tracing::warn!("the sampler thread did not stop within {SAMPLER_STOP:?}; exiting anyway");
    }
}

/// How a task that should never end ended.
fn ended(r: Result<(), tokio::task::JoinError>) -> String {
    match r {
        Ok(()) => "returned".into(),
        Err(e) if e.is_panic() => format!(
            "panicked: {}",
            nodemedic_collect::panic_message(&*e.into_panic())
        ),
        Err(e) => format!("was cancelled: {e}"),
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {},
                    _ = term.recv() => {},
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// A sample, and the daemon's own resource use read right after it.
type Sampled = (Sample, Option<nodemedic_export::ProcessStats>);

/// The runtime's end of the sampler thread: the samples; the way back for a sample nothing
/// holds any more, whose lists the engine fills again ([`Engine::recycle`]); and a handle
/// whose drop stops the thread between samples (it sleeps on it).
struct Sampler {
    samples: tokio::sync::mpsc::Receiver<Sampled>,
    recycled: std::sync::mpsc::Sender<Sample>,
    _stop: std::sync::mpsc::Sender<()>,
}

/// How late a sample may start before the next one is due an interval after it, not an
/// interval after the one it missed (tokio's `MissedTickBehavior::Delay`, which the sample
/// loop used, allows the same 5 ms).
const LATE: Duration = Duration::from_millis(5);

/// When the sample after one due at `due` and started at `started` is due: an interval after
/// `due`, so that samples keep their cadence, unless this one started more than [`LATE`] late
/// (a slow sample, a suspended VM), when it is an interval after `started`: late samples are
/// not made up for with a burst.
fn next_due(due: Instant, started: Instant, interval: Duration) -> Instant {
    if started > due + LATE {
        started + interval
    } else {
        due + interval
    }
}

/// The engine on a thread of its own, which keeps the interval itself: every sample allocates
/// on the same thread, so its memory is reused from one sample to the next (tokio's blocking
/// pool would move samples between threads, and glibc keeps a heap per thread: on a 1024-CPU
/// tree that cost 12 MiB of RSS, BENCHMARKS.md "Scale"). The thread sleeps until the next
/// sample is due and hands the sample to the runtime, which wakes once per sample. When the
/// runtime asked for each sample on its own timer, a sample cost four wakeups of a thread
/// instead of two (the timer, which tokio's wheel fires twice, the request, the reply):
/// BENCHMARKS.md, "Fewer wakeups, kept lists".
fn start_sampler(
    engine: Engine,
    interval: Duration,
    faults: Faults,
) -> std::io::Result<(Sampler, std::thread::JoinHandle<()>)> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Sampled>(1);
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let (recycled_tx, recycled) = std::sync::mpsc::channel::<Sample>();
    let mut engine = engine;
    // The process_* metrics are read here, once per sample, not on each scrape.
    let mut self_stats = nodemedic_collect::SelfStats::new();
    let thread = std::thread::Builder::new()
        .name("nodemedic-sampler".into())
        .spawn(move || {
            let mut due = Instant::now();
            loop {
                // Nothing is ever sent: the wait ends at the deadline, or at once when the
                // runtime's end is dropped (shutdown).
                let wait = due.saturating_duration_since(Instant::now());
                if let Err(std::sync::mpsc::RecvTimeoutError::Disconnected) =
                    stop_rx.recv_timeout(wait)
                {
                    return;
                }
                due = next_due(due, Instant::now(), interval);
                // Read without waiting: a sample given back does not wake this thread.
                while let Ok(old) = recycled.try_recv() {
                    engine.recycle(old);
                }
                // The engine contains its collectors' and detectors' panics; one that escapes
                // it (a bug) costs this sample, not the thread.
                let sample = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    engine.sample()
                })) {
                    Ok(s) => s,
                    Err(_) => {
                        tracing::error!(
                            "sampling failed unexpectedly (a bug); retrying next interval"
                        );
                        continue;
                    }
                };
                if faults
                    .hang_sampler_after
                    .is_some_and(|n| sample.samples_total >= n)
                {
                    tracing::error!("fault injection: the sampler hangs now");
                    loop {
                        std::thread::sleep(Duration::from_secs(3600));
                    }
                }
                // Waits while the runtime still handles the last sample; fails once it is gone.
                if tx.blocking_send((sample, self_stats.read())).is_err() {
                    return;
                }
            }
        })?;
    Ok((
        Sampler {
            samples: rx,
            recycled: recycled_tx,
            _stop: stop_tx,
        },
        thread,
    ))
}

/// Hands each sample of the sampler thread to the remediator and the Kubernetes reporter
/// (`outputs`) and to the endpoint. After the first sample, systemd is told the service is ready
/// (`READY=1`, with `serving`), as `/readyz` and `/metrics` are: before it, a scrape would get
/// no series and an `absent()` alert would fire.
async fn sample_loop(
    mut sampler: Sampler,
    endpoint: Arc<Endpoint>,
    outputs: tokio::sync::watch::Sender<Option<Arc<Sample>>>,
    serving: String,
) {
    while let Some((sample, process)) = sampler.samples.recv().await {
        log_changes(&sample);
        crate::systemd::sampled(&format!(
            "{} samples; {} findings",
            sample.samples_total,
            sample.findings.len()
        ));
        let sample = Arc::new(sample);
        let previous = outputs.send_replace(Some(sample.clone()));
        if endpoint.publish(sample, process) {
            tracing::info!(took = ?endpoint.uptime(), "first sample in: ready");
            crate::systemd::ready(&serving);
        }
        // The endpoint has let go of the previous sample too; if the remediator and the
        // Kubernetes task have as well, it goes back to the sampler thread to be refilled.
        if let Some(old) = previous.and_then(|s| Arc::try_unwrap(s).ok()) {
            let _ = sampler.recycled.send(old);
        }
    }
    tracing::error!("the sampler thread is gone (a bug)");
}

/// One structured log line per verdict change, so the journal tells the story on its own.
fn log_changes(sample: &Sample) {
    for v in sample.verdicts.iter().filter(|v| v.changed) {
        let g = &v.group;
        tracing::warn!(
            group = %g.name,
            collapsed = v.collapsed,
            hurting = v.hurting,
            irqs = g.irqs.len(),
            effective_cpus = %g.effective_cpus,
            eligible_cpus = g.eligible_cpus.len(),
            hottest_cpu = ?v.evidence.hottest_cpu,
            hottest_share = ?v.evidence.hottest_share,
            "IRQ verdict changed"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_keep_their_cadence_and_a_late_one_moves_it_without_a_burst() {
        let t0 = Instant::now();
        let second = Duration::from_secs(1);
        // On time, or a little late (a wakeup's jitter): the cadence holds.
        assert_eq!(next_due(t0, t0, second), t0 + second);
        assert_eq!(
            next_due(t0, t0 + Duration::from_millis(4), second),
            t0 + second
        );
        // Three seconds late: the next sample is a second after this one, not at once.
        let late = t0 + Duration::from_secs(3);
        assert_eq!(next_due(t0, late, second), late + second);
    }
}
