//! `nodemedic run`: sample on an interval, detect, serve.

use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use nodemedic_export::{render, ExportInput, Format, RemediationExport};
use serde::Serialize;

use crate::config::Config;
use crate::kube_task::{KubeStatus, SharedKube};
use crate::remediator::{PauseFlag, RemedyState, SharedRemedy};
use crate::report::{shown_groups, GroupReport};
use nodemedic_engine::{Engine, Sample};

struct Shared {
    config: Config,
    started: Instant,
    latest: RwLock<Option<Arc<Sample>>>,
    /// The daemon's own CPU and memory, read with the latest sample.
    process: Mutex<Option<nodemedic_export::ProcessStats>>,
    last_sample_at: RwLock<Option<Instant>>,
    /// True once the first sample is in: `/readyz` and `/metrics` wait for it.
    first_sample: tokio::sync::watch::Sender<bool>,
    remedy: SharedRemedy,
    kube: SharedKube,
    /// The endpoint's connection counters, for /status.
    web: crate::web::SharedWebStats,
    /// The web configuration file's state (TLS, users, last reload), for /status.
    web_config: Arc<crate::web_config::WebConfigWatch>,
    /// `/metrics` rendered once per sample and shared by every scrape of it.
    render: RenderCache,
}

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

pub fn run(config: Config, faults: Faults) -> anyhow::Result<()> {
    nodemedic_collect::cap_malloc_arenas();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(2)
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(serve(config, faults))
}

async fn serve(config: Config, faults: Faults) -> anyhow::Result<()> {
    let security = Arc::new(
        crate::web_config::WebConfigWatch::new(config.web.config_file.as_deref())
            .context("loading --web.config.file")?,
    );
    let (nofile, nofile_hard) = crate::web::raise_nofile();
    let limits = crate::web::Limits {
        header_read_timeout: config.web.header_read_timeout,
        request_timeout: config.web.request_timeout,
        max_connections: crate::web::connection_cap(config.web.max_connections, nofile),
        max_requests: config.web.max_requests,
    };
    tracing::info!(
        nofile,
        nofile_hard,
        max_connections = limits.max_connections,
        max_requests = limits.max_requests,
        "endpoint limits"
    );
    let mut listeners = Vec::new();
    for addr in &config.web.listen_address.0 {
        listeners.push(
            crate::web::Listener::bind(addr)
                .await
                .with_context(|| format!("binding {addr}"))?,
        );
    }
    let listening: Vec<String> = listeners.iter().map(crate::web::Listener::local).collect();
    let mut extra = kube_sources(&config);
    extra.extend(crate::probes::sources(&config, true));
    let engine = Engine::with_extra(config.engine_config(), extra);
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
    let remedy: SharedRemedy = Arc::new(Mutex::new(RemedyState::default()));
    let pause = PauseFlag::new(crate::remediator::Pause::Unknown);
    let (tx, rx) = tokio::sync::watch::channel(None);
    let (events_tx, events_rx) = tokio::sync::mpsc::channel(256);
    let kube: SharedKube = Arc::new(Mutex::new(KubeStatus::default()));
    let remediator = tokio::spawn({
        let faults = faults.clone();
        let task = crate::remediator::run(
            config.remediation.clone(),
            crate::remediator::RealActuators::new(&config.remediation, engine.paths()),
            rx,
            remedy.clone(),
            pause.clone(),
            events_tx,
        );
        async move { with_fault("remediator", &faults, task).await }
    });
    let kube_task = tokio::spawn({
        let faults = faults.clone();
        let task = crate::kube_task::run(
            config.kubernetes.clone(),
            tx.subscribe(),
            events_rx,
            pause.clone(),
            kube.clone(),
        );
        async move { with_fault("kubernetes", &faults, task).await }
    });
    let shared_interval = config.sample_interval;
    let shared = Arc::new(Shared {
        config,
        started: Instant::now(),
        latest: RwLock::new(None),
        process: Mutex::new(None),
        last_sample_at: RwLock::new(None),
        first_sample: tokio::sync::watch::Sender::new(false),
        remedy,
        kube,
        web: Default::default(),
        web_config: security.clone(),
        render: RenderCache::default(),
    });
    let serving = format!("serving on {}", listening.join(", "));
    let (sample_requests, sampler_thread) =
        start_sampler(engine, faults.clone()).context("starting the sampler thread")?;
    let mut sampler = tokio::spawn({
        let f = faults.clone();
        let task = sample_loop(sample_requests, shared.clone(), tx, serving);
        async move { with_fault("sampler", &f, task).await }
    });
    let mut remediator = remediator;
    let mut kube_task = kube_task;
    let web_stats = shared.web.clone();
    // The request limits outermost: a flood of bad credentials is bounded like any other.
    let app = crate::web::harden(
        crate::web::secured(
            Router::new()
                .route("/", get(index))
                .route("/metrics", get(metrics))
                .route("/status", get(status))
                .route("/healthz", get(healthz))
                .route("/readyz", get(readyz))
                .with_state(shared),
            security.clone(),
        ),
        &limits,
    );
    crate::systemd::check_watchdog(shared_interval);
    let server = async {
        crate::web::serve(
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
        Err(e) if e.is_panic() => {
            let p = e.into_panic();
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string payload".into());
            format!("panicked: {msg}")
        }
        Err(e) => format!("was cancelled: {e}"),
    }
}

/// Collectors fed from the Kubernetes API, when nodemedic runs in Kubernetes: this node's
/// pod names, from one watch started here.
fn kube_sources(config: &Config) -> Vec<Box<dyn nodemedic_collect::Collector>> {
    let Ok(Some(node)) = config.kubernetes.resolve() else {
        return Vec::new();
    };
    if !config.kubernetes.pod_names {
        return Vec::new();
    }
    let dir = nodemedic_kube::PodDirectory::new();
    tokio::spawn(nodemedic_kube::watch_pods(node, dir.clone()));
    vec![Box::new(nodemedic_kube::PodNamesCollector::new(dir))]
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
    let mut self_stats = crate::process::SelfStats::new();
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
    shared: Arc<Shared>,
    remediator: tokio::sync::watch::Sender<Option<Arc<Sample>>>,
    serving: String,
) {
    let mut ticker = tokio::time::interval(shared.config.sample_interval);
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
        if let Ok(mut p) = shared.process.lock() {
            *p = process;
        }
        remediator.send_replace(Some(sample.clone()));
        if let Ok(mut latest) = shared.latest.write() {
            *latest = Some(sample);
        }
        if let Ok(mut at) = shared.last_sample_at.write() {
            *at = Some(Instant::now());
        }
        if !*shared.first_sample.borrow() {
            shared.first_sample.send_replace(true);
            tracing::info!(took = ?shared.started.elapsed(), "first sample in: ready");
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

fn latest(shared: &Shared) -> Option<Arc<Sample>> {
    shared.latest.read().ok().and_then(|l| l.clone())
}

/// What a rendered exposition depends on besides its format: the sample and the
/// remediator's counters. Scrapes of the same sample share one rendering.
#[derive(Debug, Clone, PartialEq)]
struct RenderKey {
    samples_total: u64,
    decisions: u64,
    paused: bool,
    last_action: Option<f64>,
}

/// The last rendering per format (text, OpenMetrics).
#[derive(Default)]
pub(crate) struct RenderCache(Mutex<Vec<(RenderKey, Format, bool, axum::body::Bytes)>>);

/// Whether the client accepts gzip (`Accept-Encoding: gzip`, not `gzip;q=0`).
fn wants_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|enc| {
            let mut parts = enc.split(';').map(str::trim);
            let name = parts.next().unwrap_or("");
            let q_zero = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q == 0.0)
            });
            (name.eq_ignore_ascii_case("gzip") || name == "*") && !q_zero
        })
}

/// gzip at level 1: 8× smaller than the text for 0.5 ms on the 256-CPU exposition, where the
/// default level costs 3.6 ms for 9.5× (BENCHMARKS.md, "gzip").
fn gzip(body: &[u8]) -> Option<Vec<u8>> {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(
        Vec::with_capacity(body.len() / 6),
        flate2::Compression::fast(),
    );
    gz.write_all(body).ok()?;
    gz.finish().ok()
}

/// Waits for the first sample, at most half the request timeout. `Err` with the answer to
/// give when it is still not in.
async fn first_sample(shared: &Shared) -> Result<Arc<Sample>, Response> {
    if let Some(s) = latest(shared) {
        return Ok(s);
    }
    let wait = shared.config.web.request_timeout / 2;
    let mut rx = shared.first_sample.subscribe();
    let _ = tokio::time::timeout(wait, rx.wait_for(|ready| *ready)).await;
    latest(shared).ok_or_else(|| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "1")],
            format!(
                "no sample yet: the first sample has not finished {:.1}s after start\n",
                shared.started.elapsed().as_secs_f64()
            ),
        )
            .into_response()
    })
}

async fn metrics(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let format = Format::from_accept(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    let gzipped = wants_gzip(&headers);
    let sample = match first_sample(&shared).await {
        Ok(s) => Some(s),
        Err(unavailable) => return unavailable,
    };
    let key = {
        let remedy = shared.remedy.lock().ok();
        RenderKey {
            samples_total: sample.as_ref().map(|s| s.samples_total).unwrap_or(0),
            decisions: remedy
                .as_ref()
                .map(|r| r.counts.values().sum())
                .unwrap_or(0),
            paused: remedy.as_ref().is_some_and(|r| r.paused),
            last_action: remedy.as_ref().and_then(|r| r.last_action_timestamp),
        }
    };
    let cached = shared.render.0.lock().ok().and_then(|c| {
        c.iter()
            .find(|(k, f, z, _)| *k == key && *f == format && *z == gzipped)
            .map(|(_, _, _, b)| b.clone())
    });
    let body = match cached {
        Some(body) => body,
        None => {
            let process = shared.process.lock().ok().and_then(|p| *p);
            let text = render_body(&shared, sample.as_deref(), process, format);
            let body = if gzipped {
                match gzip(text.as_bytes()) {
                    Some(z) => axum::body::Bytes::from(z),
                    None => {
                        return ([(header::CONTENT_TYPE, format.content_type())], text)
                            .into_response()
                    }
                }
            } else {
                axum::body::Bytes::from(text)
            };
            if let Ok(mut c) = shared.render.0.lock() {
                c.retain(|(k, f, z, _)| *k == key && !(*f == format && *z == gzipped));
                c.push((key, format, gzipped, body.clone()));
            }
            body
        }
    };
    if gzipped {
        return (
            [
                (header::CONTENT_TYPE, format.content_type()),
                (header::CONTENT_ENCODING, "gzip"),
            ],
            body,
        )
            .into_response();
    }
    ([(header::CONTENT_TYPE, format.content_type())], body).into_response()
}

fn render_body(
    shared: &Shared,
    sample: Option<&Sample>,
    process: Option<nodemedic_export::ProcessStats>,
    format: Format,
) -> String {
    let remedy = shared.remedy.lock().ok();
    let decisions: Vec<((&str, &str), u64)> = remedy
        .as_ref()
        .map(|r| {
            r.counts
                .iter()
                .map(|((a, r), v)| ((a.as_str(), r.as_str()), *v))
                .collect()
        })
        .unwrap_or_default();
    let mode = shared.config.remediation.mode.as_str();
    let input = ExportInput {
        snapshot: sample.map(|s| &s.snapshot),
        verdicts: sample.map(|s| s.verdicts.as_slice()).unwrap_or(&[]),
        collectors: sample.map(|s| s.collectors.as_slice()).unwrap_or(&[]),
        samples_total: sample.map(|s| s.samples_total).unwrap_or(0),
        process,
        pressure: sample.and_then(|s| s.pressure.as_ref()),
        remediation: Some(RemediationExport {
            mode,
            paused: remedy.as_ref().is_some_and(|r| r.paused),
            decisions: &decisions,
            last_action_timestamp: remedy.as_ref().and_then(|r| r.last_action_timestamp),
        }),
    };
    render(&input, &shared.config.metrics, format).0
}

#[derive(Serialize)]
struct StatusBody<'a> {
    version: &'static str,
    uptime_seconds: f64,
    sample_interval_seconds: f64,
    samples_total: u64,
    last_sample_timestamp: Option<f64>,
    last_sample_duration_seconds: Option<f64>,
    collectors: &'a [nodemedic_collect::CollectorStatus],
    /// How many of this node's pods have names resolved (absent outside Kubernetes).
    pods_named: Option<usize>,
    /// The read layer: backend (and why io_uring fell back), kept-open files, fallbacks.
    reader: Option<&'a nodemedic_collect::ReaderStatus>,
    /// The disk commit probe (when on): its backend and why io_uring fell back, if it did.
    disk_commit: Option<&'a nodemedic_kernel::snapshot::CommitLatency>,
    groups: Vec<GroupReport>,
    findings: Vec<nodemedic_detect::Finding>,
    /// The eBPF probes: attach method, each hook up or down with the reason, rates, top
    /// owners, ring buffer counts (absent when switched off).
    perf_probes: Option<&'a nodemedic_kernel::perf::PerfProbes>,
    wakeup_storm: Option<&'a nodemedic_detect::StormVerdict>,
    /// Node PSI over the last interval, where the cgroup hierarchies were found, and which
    /// cgroups are quota-bound or starved.
    pressure: Option<serde_json::Value>,
    /// Open connections, the cap, and connections evicted or refused to stay under it.
    web: crate::web::WebStats,
    web_config: crate::web_config::WebConfigStatus,
    remediation: serde_json::Value,
    kubernetes: KubeStatus,
}

async fn status(State(shared): State<Arc<Shared>>) -> Response {
    let sample = latest(&shared);
    let (remediation, remedy_findings) = match shared.remedy.lock() {
        Ok(r) => (
            serde_json::to_value(&*r).unwrap_or_default(),
            r.findings.clone(),
        ),
        Err(_) => (serde_json::Value::Null, Vec::new()),
    };
    let mut findings: Vec<nodemedic_detect::Finding> = sample
        .as_ref()
        .map(|s| s.findings.clone())
        .unwrap_or_default();
    findings.extend(remedy_findings);
    let body = StatusBody {
        version: env!("CARGO_PKG_VERSION"),
        uptime_seconds: shared.started.elapsed().as_secs_f64(),
        sample_interval_seconds: shared.config.sample_interval.as_secs_f64(),
        samples_total: sample.as_ref().map(|s| s.samples_total).unwrap_or(0),
        last_sample_timestamp: sample.as_ref().map(|s| s.snapshot.timestamp),
        last_sample_duration_seconds: sample.as_ref().map(|s| s.duration.as_secs_f64()),
        collectors: sample
            .as_ref()
            .map(|s| s.collectors.as_slice())
            .unwrap_or(&[]),
        pods_named: sample
            .as_ref()
            .and_then(|s| s.snapshot.pods.as_ref())
            .map(|p| p.len()),
        reader: sample.as_ref().map(|s| &s.reader),
        disk_commit: sample
            .as_ref()
            .and_then(|s| s.snapshot.disk_commit.as_ref()),
        groups: sample
            .as_ref()
            .map(|s| shown_groups(&s.verdicts))
            .unwrap_or_default(),
        findings,
        perf_probes: sample.as_ref().and_then(|s| s.snapshot.perf.as_ref()),
        wakeup_storm: sample.as_ref().and_then(|s| s.storm.as_ref()),
        pressure: sample.as_ref().map(|s| pressure_status(s)),
        web: crate::web::web_stats(&shared.web),
        web_config: shared.web_config.status(),
        remediation,
        kubernetes: shared.kube.lock().map(|k| k.clone()).unwrap_or_default(),
    };
    match serde_json::to_string_pretty(&body) {
        Ok(json) => ([(header::CONTENT_TYPE, "application/json")], json).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

fn pressure_status(s: &Sample) -> serde_json::Value {
    let v = s.pressure.as_ref();
    let flagged = |pick: fn(&nodemedic_detect::pressure::CgroupRates) -> bool| -> Vec<&str> {
        v.map(|v| {
            v.cgroups
                .iter()
                .filter(|c| pick(c))
                .map(|c| c.name.as_str())
                .collect()
        })
        .unwrap_or_default()
    };
    serde_json::json!({
        "node": v.map(|v| &v.node),
        "node_saturated": v.map(|v| v.node_saturated),
        "cgroup_mounts": s.snapshot.cgroups.as_ref().map(|c| &c.mounts),
        "cgroup_mounts_from_mountinfo": s.snapshot.cgroups.as_ref().map(|c| c.from_mountinfo),
        "cgroups_watched": s.snapshot.cgroups.as_ref().map(|c| c.groups.len()),
        "quota_bound": flagged(|c| c.quota_bound),
        "starved": flagged(|c| c.starved),
    })
}

/// Alive while samples keep coming: a sampler stuck for three intervals (plus slack) is not.
/// The liveness check: it gives the first sample the same slack, so a slow start is not
/// restarted.
async fn healthz(State(shared): State<Arc<Shared>>) -> Response {
    match freshness(&shared) {
        Freshness::Fresh | Freshness::NoSampleYet => (StatusCode::OK, "ok\n").into_response(),
        Freshness::Stale(age) => stale(age),
    }
}

/// Ready once the first sample is in, and while samples keep coming: the readiness check
/// (and what a rollout waits for).
async fn readyz(State(shared): State<Arc<Shared>>) -> Response {
    match freshness(&shared) {
        Freshness::Fresh => (StatusCode::OK, "ok\n").into_response(),
        Freshness::NoSampleYet => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "not ready: no sample yet {:.1}s after start\n",
                shared.started.elapsed().as_secs_f64()
            ),
        )
            .into_response(),
        Freshness::Stale(age) => stale(age),
    }
}

enum Freshness {
    Fresh,
    /// Before the first sample, while it is not late yet.
    NoSampleYet,
    /// No sample for this long (or the first one is that late).
    Stale(Duration),
}

fn freshness(shared: &Shared) -> Freshness {
    let limit = shared.config.sample_interval * 3 + Duration::from_secs(10);
    let last = shared.last_sample_at.read().ok().and_then(|l| *l);
    let age = last
        .map(|t| t.elapsed())
        .unwrap_or_else(|| shared.started.elapsed());
    match last {
        _ if age > limit => Freshness::Stale(age),
        Some(_) => Freshness::Fresh,
        None => Freshness::NoSampleYet,
    }
}

fn stale(age: Duration) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        format!("stale: no sample for {:.1}s\n", age.as_secs_f64()),
    )
        .into_response()
}

async fn index() -> Html<&'static str> {
    Html(
        "<html><head><title>nodemedic</title></head><body><h1>nodemedic</h1>\
         <ul><li><a href=\"/metrics\">/metrics</a></li><li><a href=\"/status\">/status</a> (JSON)</li>\
         <li><a href=\"/healthz\">/healthz</a> (alive)</li>\
         <li><a href=\"/readyz\">/readyz</a> (first sample in)</li></ul></body></html>",
    )
}
