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
    let security = Arc::new(
        WebConfigWatch::new(config.web.config_file.as_deref())
            .context("loading --web.config.file")?,
    );
    tokio::spawn(security.clone().watch());
    let limits = Limits {
        header_read_timeout: config.web.header_read_timeout,
        request_timeout: config.web.request_timeout,
        max_connections: nodemedic_webkit::connection_cap(config.web.max_connections, &files),
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
    let listening: Vec<String> = listeners.iter().map(Listener::local).collect();
    let registry = crate::collectors::registry(&config, crate::collectors::For::Daemon);
    let engine = Engine::with_registry(config.engine_config(&files), registry);
    tracing::info!(
        listen = %listening.join(","),
        tls = security.current().tls.is_some(),
        basic_auth = security.current().needs_auth(),
        procfs = %engine.paths().procfs.display(),
        sysfs = %engine.paths().sysfs.display(),
        rootfs = %engine.paths().rootfs.display(),
        interval = %humantime::format_duration(config.sample_interval),
        "nodemedic started"
    );
    // The outputs never call each other: the sample goes to each on one channel, the
    // remediator's decisions to the Kubernetes reporter on another, and what the remediator
    // and the reporter publish reaches the endpoint on channels of their own.
    let (remedy_tx, remedy_rx) = tokio::sync::watch::channel(RemedyState {
        mode: Some(config.remediation.mode),
        ..RemedyState::default()
    });
    let pause = PauseFlag::new(Pause::Unknown);
    let (tx, rx) = tokio::sync::watch::channel(None);
    let (events_tx, events_rx) = tokio::sync::mpsc::channel(256);
    let (kube_tx, kube_rx) = tokio::sync::watch::channel(KubeStatus::default());
    let remediator = tokio::spawn({
        let faults = faults.clone();
        let task = nodemedic_remedy::task::run(
            config.remediation.clone(),
            RealActuators::new(&config.remediation, engine.paths()),
            rx,
            remedy_tx,
            pause.clone(),
            events_tx,
        );
        async move { with_fault("remediator", &faults, task).await }
    });
    let kube_task = tokio::spawn({
        let faults = faults.clone();
        let task = nodemedic_kube::task::run(
            config.kubernetes.clone(),
            tx.subscribe(),
            events_rx,
            pause.clone(),
            kube_tx,
        );
        async move { with_fault("kubernetes", &faults, task).await }
    });
    let interval = config.sample_interval;
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
    let serving = format!("serving on {}", listening.join(", "));
    let (sample_requests, sampler_thread) =
        start_sampler(engine, faults.clone()).context("starting the sampler thread")?;
    let mut sampler = tokio::spawn({
        let f = faults.clone();
        let task = sample_loop(sample_requests, interval, endpoint.clone(), tx, serving);
        async move { with_fault("sampler", &f, task).await }
    });
    let mut remediator = remediator;
    let mut kube_task = kube_task;
    let web_stats = endpoint.web_stats();
    // The request limits outermost: a flood of bad credentials is bounded like any other.
    let app = nodemedic_webkit::harden(
        nodemedic_webkit::secured(endpoint.router(), security.clone()),
        &limits,
    );
    crate::systemd::check_watchdog(interval);
    let server = async {
        nodemedic_webkit::serve(
            listeners,
            app,
            limits,
            web_stats,
            security,
            shutdown_signal(),
        )
        .await;
        Ok::<(), std::io::Error>(())
    };
    // Supervision: the sampler, remediator and Kubernetes tasks live as long as the daemon.
    // One that ends (a panic, or a bug that returns) would leave nodemedic serving stale or
    // partial answers, so the daemon exits non-zero and systemd or the kubelet restarts it.
    // Biased, the sampler first: when it dies, the remediator and the Kubernetes task see
    // its channel close and return too, and the report must name the cause, not a symptom.
    let died = tokio::select! {
        biased;
        r = &mut sampler => Some(("sampler", ended(r))),
        r = &mut remediator => Some(("remediator", ended(r))),
        r = &mut kube_task => Some(("kubernetes", ended(r))),
        r = server => {
            r.context("serving HTTP")?;
            None
        }
    };
    crate::systemd::stopping();
    if let Some((task, how)) = died {
        tracing::error!(task, how = %how, "a nodemedic task ended; exiting so that it is restarted");
        sampler.abort();
        remediator.abort();
        kube_task.abort();
        // (The aborted sample loop is dropped by the runtime while this waits, which closes
        // the thread's channel; the task that died was already awaited above.)
        join_sampler(sampler_thread).await;
        anyhow::bail!(
            "the {task} task {how}; exiting so that systemd or the kubelet restarts nodemedic"
        );
    }
    // SIGTERM: no new sample, so the remediator takes no new decision; a step in flight gets
    // STOP_GRACE to finish (its outcome is audited), else it is recorded as interrupted.
    sampler.abort();
    let _ = (&mut sampler).await;
    join_sampler(sampler_thread).await;
    // Meanwhile the Kubernetes task, whose samples ended too, marks the node condition it
    // maintained as stopped.
    let remediation = async {
        if tokio::time::timeout(STOP_GRACE, &mut remediator)
            .await
            .is_err()
        {
            tracing::warn!(
                target: "nodemedic::audit",
                result = "interrupted",
                "remediation step in flight interrupted by shutdown after {STOP_GRACE:?}"
            );
            remediator.abort();
        }
    };
    let kubernetes = async {
        if tokio::time::timeout(KUBE_STOP, &mut kube_task)
            .await
            .is_err()
        {
            tracing::warn!("the node condition was not handed over within {KUBE_STOP:?}");
            kube_task.abort();
        }
    };
    tokio::join!(remediation, kubernetes);
    tracing::info!("nodemedic stopped");
    Ok(())
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

/// The engine on a thread of its own: every sample allocates on the same thread, so its
/// memory is reused from one sample to the next (tokio's blocking pool would move samples
/// between threads, and glibc keeps a heap per thread: on a 1024-CPU tree that cost 12 MiB
/// of RSS, BENCHMARKS.md "Scale"). Requests carry the reply channel.
/// A sample, and the daemon's own resource use read right after it.
type Sampled = (Sample, Option<nodemedic_export::ProcessStats>);
type SampleRequests = tokio::sync::mpsc::Sender<tokio::sync::oneshot::Sender<Sampled>>;

fn start_sampler(
    engine: Engine,
    faults: Faults,
) -> std::io::Result<(SampleRequests, std::thread::JoinHandle<()>)> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<tokio::sync::oneshot::Sender<Sampled>>(1);
    let mut engine = engine;
    // The process_* metrics are read here, once per sample, not on each scrape.
    let mut self_stats = nodemedic_collect::SelfStats::new();
    let thread = std::thread::Builder::new()
        .name("nodemedic-sampler".into())
        .spawn(move || {
            while let Some(reply) = rx.blocking_recv() {
                // The engine contains its collectors' and detectors' panics; one that escapes
                // it (a bug) costs this sample, not the thread.
                let sample = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    engine.sample()
                })) {
                    Ok(s) => s,
                    Err(_) => continue,
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
                let _ = reply.send((sample, self_stats.read()));
            }
        })?;
    Ok((tx, thread))
}

/// Samples on the interval. After the first sample, systemd is told the service is ready
/// (`READY=1`, with `serving`), as `/readyz` and `/metrics` are: before it, a scrape would get
/// no series and an `absent()` alert would fire.
async fn sample_loop(
    sampler: SampleRequests,
    interval: Duration,
    endpoint: Arc<Endpoint>,
    remediator: tokio::sync::watch::Sender<Option<Arc<Sample>>>,
    serving: String,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let (reply, sample) = tokio::sync::oneshot::channel();
        if sampler.send(reply).await.is_err() {
            tracing::error!("the sampler thread is gone (a bug)");
            return;
        }
        let Ok((sample, process)) = sample.await else {
            tracing::error!("sampling failed unexpectedly (a bug); retrying next interval");
            continue;
        };
        log_changes(&sample);
        crate::systemd::sampled(&format!(
            "{} samples; {} findings",
            sample.samples_total,
            sample.findings.len()
        ));
        let sample = Arc::new(sample);
        remediator.send_replace(Some(sample.clone()));
        if endpoint.publish(sample, process) {
            tracing::info!(took = ?endpoint.uptime(), "first sample in: ready");
            crate::systemd::ready(&serving);
        }
    }
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
