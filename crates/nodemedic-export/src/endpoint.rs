//! nodemedic's endpoint: `/metrics` (rendered once per sample, gzip when asked), `/status`
//! (JSON), `/healthz` (alive) and `/readyz` (first sample in, samples still coming). The
//! daemon publishes each sample here; the handlers only read.

use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use nodemedic_collect::commit_timer::CommitLatency;
use nodemedic_collect::sources::irqbalance::IrqbalanceConfig;
use nodemedic_sample::kube::KubeStatus;
use nodemedic_sample::perf::PerfProbes;
use nodemedic_sample::remedy::RemedyState;
use nodemedic_sample::snapshot::Pods;
use nodemedic_sample::Sample;
use nodemedic_webkit::server::{web_stats, SharedWebStats, WebStats};
use nodemedic_webkit::{WebConfigStatus, WebConfigWatch};
use serde::Serialize;
use tokio::sync::watch;

use crate::metrics::{render_with_tuning_into, RenderScratch};
use crate::report::{shown_groups, GroupReport, PressureReport, TuningReport};
use crate::{ExportInput, Format, MetricsOptions, ProcessStats};

/// What the endpoint needs of the configuration.
#[derive(Debug, Clone)]
pub struct EndpointConfig {
    pub sample_interval: Duration,
    /// `/metrics` waits for the first sample at most half of this.
    pub request_timeout: Duration,
    pub metrics: MetricsOptions,
}

/// The state the handlers answer from.
pub struct Endpoint {
    config: EndpointConfig,
    started: Instant,
    latest: RwLock<Option<Arc<Sample>>>,
    /// The daemon's own CPU and memory, read with the latest sample.
    process: Mutex<Option<ProcessStats>>,
    last_sample_at: RwLock<Option<Instant>>,
    /// True once the first sample is in: `/readyz` and `/metrics` wait for it.
    first_sample: tokio::sync::watch::Sender<bool>,
    /// The remediator's state after its latest sample, as it publishes it.
    remedy: watch::Receiver<RemedyState>,
    /// The Kubernetes reporter's state, as it publishes it.
    kube: watch::Receiver<KubeStatus>,
    /// The endpoint's connection counters, for /status.
    web: SharedWebStats,
    /// The web configuration file's state (TLS, users, last reload), for /status.
    web_config: Arc<WebConfigWatch>,
    /// `/metrics` rendered once per sample and shared by every scrape of it.
    render: RenderCache,
    /// The compressor of gzip renderings, kept between them.
    gzip: Gzip,
}

impl Endpoint {
    pub fn new(
        config: EndpointConfig,
        remedy: watch::Receiver<RemedyState>,
        kube: watch::Receiver<KubeStatus>,
        web_config: Arc<WebConfigWatch>,
    ) -> Self {
        Self {
            config,
            started: Instant::now(),
            latest: RwLock::new(None),
            process: Mutex::new(None),
            last_sample_at: RwLock::new(None),
            first_sample: tokio::sync::watch::Sender::new(false),
            remedy,
            kube,
            web: Default::default(),
            web_config,
            render: RenderCache::default(),
            gzip: Gzip::default(),
        }
    }

    /// The connection counters [`nodemedic_webkit::serve`] keeps.
    pub fn web_stats(&self) -> SharedWebStats {
        self.web.clone()
    }

    /// How long since the endpoint was made (the daemon's start).
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// Makes `sample` the one every request answers from. `true` for the first sample: the
    /// endpoint is ready from now on.
    pub fn publish(&self, sample: Arc<Sample>, process: Option<ProcessStats>) -> bool {
        if let Ok(mut p) = self.process.lock() {
            *p = process;
        }
        if let Ok(mut latest) = self.latest.write() {
            *latest = Some(sample);
        }
        if let Ok(mut at) = self.last_sample_at.write() {
            *at = Some(Instant::now());
        }
        if *self.first_sample.borrow() {
            return false;
        }
        self.first_sample.send_replace(true);
        true
    }

    /// The routes, answering from `self`.
    pub fn router(self: Arc<Self>) -> Router {
        Router::new()
            .route("/", get(index))
            .route("/metrics", get(metrics))
            .route("/status", get(status))
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .with_state(self)
    }
}

fn latest(shared: &Endpoint) -> Option<Arc<Sample>> {
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

/// The last rendering per format (text, OpenMetrics), and the buffers of renderings it no
/// longer holds, rendered into again.
///
/// A rendering of 256 CPUs is 250 KB. Given back to musl's allocator (the shipped build's),
/// a block that size is unmapped, and the next rendering maps it again and faults in its
/// pages: 18 `mmap`/`munmap` pairs a second, and a quarter of the extra CPU the musl build
/// spent over a glibc build of the same code (BENCHMARKS.md, "The shipped build against
/// glibc"). So the text of a gzip rendering, and a stale rendering once no response holds
/// it any more, are kept to write the next one into.
#[derive(Default)]
struct RenderCache {
    done: Mutex<Vec<(RenderKey, Format, bool, axum::body::Bytes)>>,
    /// A buffer for the next text, and one for the next gzip member.
    spare_text: Mutex<Vec<u8>>,
    spare_gzip: Mutex<Vec<u8>>,
    /// The lists a rendering builds besides its text (the IRQs' labels).
    scratch: Mutex<RenderScratch>,
}

impl RenderCache {
    fn get(&self, key: &RenderKey, format: Format, gzipped: bool) -> Option<axum::body::Bytes> {
        let done = self.done.lock().ok()?;
        done.iter()
            .find(|(k, f, z, _)| k == key && *f == format && *z == gzipped)
            .map(|(_, _, _, b)| b.clone())
    }

    /// Drops every rendering that is not of `key`, and the one of `key` in this format,
    /// keeping the buffer of each that no response still holds.
    fn evict(&self, key: &RenderKey, format: Format, gzipped: bool) {
        let Ok(mut done) = self.done.lock() else {
            return;
        };
        let mut i = 0;
        while i < done.len() {
            let (k, f, z, _) = &done[i];
            if k == key && !(*f == format && *z == gzipped) {
                i += 1;
                continue;
            }
            let (_, _, z, body) = done.swap_remove(i);
            // `Err`: a response still sends it; it is freed with the last of them.
            if let Ok(mut body) = body.try_into_mut() {
                // Emptied before it becomes a `Vec`, which would move its bytes otherwise.
                body.clear();
                self.keep(
                    if z {
                        &self.spare_gzip
                    } else {
                        &self.spare_text
                    },
                    body.into(),
                );
            }
        }
    }

    fn insert(&self, key: RenderKey, format: Format, gzipped: bool, body: axum::body::Bytes) {
        if let Ok(mut done) = self.done.lock() {
            done.push((key, format, gzipped, body));
        }
    }

    /// `buf` emptied, as the spare of `slot` unless that one is larger.
    fn keep(&self, slot: &Mutex<Vec<u8>>, mut buf: Vec<u8>) {
        buf.clear();
        if let Ok(mut spare) = slot.lock() {
            if buf.capacity() > spare.capacity() {
                *spare = buf;
            }
        }
    }

    fn take(slot: &Mutex<Vec<u8>>) -> Vec<u8> {
        slot.lock()
            .map(|mut s| std::mem::take(&mut *s))
            .unwrap_or_default()
    }
}

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
///
/// The compressor is kept from one rendering to the next: its state (the window and hash
/// tables, about 300 KiB) was allocated, zeroed and freed for every rendering, and the C
/// library maps a block that size on its own, so each scrape also paid the page faults of
/// touching it again. Scrapes that compress at once each take their own; one is kept.
/// Public for the allocation bench (`nodemedic-engine/benches/allocations.rs`), which
/// counts what a scrape costs.
#[derive(Default)]
pub struct Gzip {
    kept: Mutex<Option<Box<flate2::Compress>>>,
}

impl Gzip {
    /// `body` as a gzip member (RFC 1952): a fixed header, the raw deflate stream, then
    /// the CRC-32 and length of `body`. `None` if the compressor failed.
    pub fn compress(&self, body: &[u8]) -> Option<Vec<u8>> {
        self.compress_into(body, Vec::new())
    }

    /// [`Gzip::compress`] into `out` (emptied first), a buffer of a past member.
    pub fn compress_into(&self, body: &[u8], mut out: Vec<u8>) -> Option<Vec<u8>> {
        use flate2::{Compress, Compression, FlushCompress, Status};
        // ID1 ID2, deflate, no flags, no modification time, no extra flags, OS unknown.
        const HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
        let kept = self.kept.lock().ok().and_then(|mut k| k.take());
        let mut deflate = match kept {
            Some(mut d) => {
                d.reset();
                d
            }
            None => Box::new(Compress::new(Compression::fast(), false)),
        };
        out.clear();
        out.reserve(HEADER.len() + body.len() / 6 + 64);
        out.extend_from_slice(&HEADER);
        loop {
            let read = usize::try_from(deflate.total_in()).ok()?;
            let rest = body.get(read..)?;
            // compress_vec writes into the spare capacity only: grow it when it is used up.
            if out.capacity() - out.len() < 64 {
                out.reserve(out.capacity() / 2 + 64);
            }
            match deflate.compress_vec(rest, &mut out, FlushCompress::Finish) {
                Ok(Status::StreamEnd) => break,
                Ok(Status::Ok | Status::BufError) => {}
                Err(_) => return None,
            }
        }
        let mut crc = flate2::Crc::new();
        crc.update(body);
        out.extend_from_slice(&crc.sum().to_le_bytes());
        out.extend_from_slice(&crc.amount().to_le_bytes());
        if let Ok(mut k) = self.kept.lock() {
            *k = Some(deflate);
        }
        Some(out)
    }
}

/// Waits for the first sample, at most half the request timeout. `Err` with the answer to
/// give when it is still not in.
async fn first_sample(shared: &Endpoint) -> Result<Arc<Sample>, Response> {
    if let Some(s) = latest(shared) {
        return Ok(s);
    }
    let wait = shared.config.request_timeout / 2;
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

async fn metrics(State(shared): State<Arc<Endpoint>>, headers: HeaderMap) -> Response {
    let format = Format::from_accept(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    let gzipped = wants_gzip(&headers);
    let sample = match first_sample(&shared).await {
        Ok(s) => Some(s),
        Err(unavailable) => return unavailable,
    };
    let key = {
        let remedy = shared.remedy.borrow();
        RenderKey {
            samples_total: sample.as_ref().map(|s| s.samples_total).unwrap_or(0),
            decisions: remedy.counts.values().sum(),
            paused: remedy.paused,
            last_action: remedy.last_action_timestamp,
        }
    };
    let cache = &shared.render;
    let body = match cache.get(&key, format, gzipped) {
        Some(body) => body,
        None => {
            cache.evict(&key, format, gzipped);
            let process = shared.process.lock().ok().and_then(|p| *p);
            let buf = RenderCache::take(&cache.spare_text);
            let text = render_body(&shared, sample.as_deref(), process, format, buf);
            let body = if gzipped {
                let out = RenderCache::take(&cache.spare_gzip);
                match shared.gzip.compress_into(text.as_bytes(), out) {
                    Some(z) => {
                        cache.keep(&cache.spare_text, text.into_bytes());
                        axum::body::Bytes::from(z)
                    }
                    None => {
                        return ([(header::CONTENT_TYPE, format.content_type())], text)
                            .into_response()
                    }
                }
            } else {
                axum::body::Bytes::from(text)
            };
            cache.insert(key, format, gzipped, body.clone());
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
    shared: &Endpoint,
    sample: Option<&Sample>,
    process: Option<ProcessStats>,
    format: Format,
    buf: Vec<u8>,
) -> String {
    let remedy = shared.remedy.borrow();
    // The kept lists, unless another rendering has them now (then this one's are new).
    let mut kept = shared.render.scratch.try_lock();
    let mut own = RenderScratch::default();
    let scratch = match kept.as_deref_mut() {
        Ok(s) => s,
        Err(_) => &mut own,
    };
    render_sample_into(
        sample,
        process,
        &remedy,
        &shared.config.metrics,
        format,
        buf,
        scratch,
    )
}

/// `/metrics` of `sample` (none yet: the daemon's own series only) with the remediator's
/// state, as the endpoint renders it once per sample. Public for the allocation bench
/// (`nodemedic-engine/benches/allocations.rs`), which counts this very path.
pub fn render_sample(
    sample: Option<&Sample>,
    process: Option<ProcessStats>,
    remedy: &RemedyState,
    metrics: &MetricsOptions,
    format: Format,
) -> String {
    render_sample_into(
        sample,
        process,
        remedy,
        metrics,
        format,
        Vec::new(),
        &mut RenderScratch::default(),
    )
}

/// [`render_sample`] written into `buf` (emptied first), a buffer of a past rendering, with
/// the lists of a past rendering in `scratch`: no allocation for either once they are as
/// large.
pub fn render_sample_into(
    sample: Option<&Sample>,
    process: Option<ProcessStats>,
    remedy: &RemedyState,
    metrics: &MetricsOptions,
    format: Format,
    buf: Vec<u8>,
    scratch: &mut RenderScratch,
) -> String {
    let input = ExportInput {
        snapshot: sample.map(|s| &s.snapshot),
        verdicts: sample.map(|s| s.verdicts.as_slice()).unwrap_or(&[]),
        collectors: sample.map(|s| s.collectors.as_slice()).unwrap_or(&[]),
        samples_total: sample.map(|s| s.samples_total).unwrap_or(0),
        process,
        pressure: sample.and_then(|s| s.pressure.as_ref()),
        remediation: Some(remedy),
        host: sample.map(|s| &*s.host),
    };
    render_with_tuning_into(
        &input,
        sample.and_then(|s| s.tuning.as_ref()),
        metrics,
        format,
        buf,
        scratch,
    )
    .0
}

#[derive(Serialize)]
struct StatusBody<'a> {
    version: &'static str,
    uptime_seconds: f64,
    sample_interval_seconds: f64,
    samples_total: u64,
    last_sample_timestamp: Option<f64>,
    last_sample_duration_seconds: Option<f64>,
    collectors: &'a [nodemedic_sample::CollectorStatus],
    /// How many of this node's pods have names resolved (absent outside Kubernetes).
    pods_named: Option<usize>,
    /// The read layer: backend (and why io_uring fell back), kept-open files, fallbacks.
    reader: Option<&'a nodemedic_sample::ReaderStatus>,
    /// The disk commit probe (when on): its backend and why io_uring fell back, if it did.
    disk_commit: Option<&'a nodemedic_collect::commit_timer::CommitLatency>,
    groups: Vec<GroupReport>,
    findings: Vec<nodemedic_sample::Finding>,
    /// The eBPF probes: attach method, each hook up or down with the reason, rates, top
    /// owners, ring buffer counts (absent when switched off).
    perf_probes: Option<&'a nodemedic_sample::perf::PerfProbes>,
    wakeup_storm: Option<&'a nodemedic_sample::StormVerdict>,
    /// Node PSI over the last interval, where the cgroup hierarchies were found, and which
    /// cgroups are quota-bound or starved.
    pressure: Option<PressureReport>,
    /// The tuning audit's findings, each with its evidence, cost and fix.
    tuning: Option<TuningReport>,
    /// The LSM labels nodemedic runs under (a refusal names them) and the host mounts its
    /// container can write.
    host_access: Option<&'a nodemedic_sample::host::HostAccess>,
    /// Open connections, the cap, and connections evicted or refused to stay under it.
    web: WebStats,
    web_config: WebConfigStatus,
    /// irqbalance's package version, or why it is unknown (`nodemedic_irqbalance_info`'s
    /// version; its state is systemd's, under `remediation.irqbalance`).
    irqbalance_package: Option<&'a nodemedic_collect::sources::irqbalance::IrqbalancePackage>,
    remediation: serde_json::Value,
    kubernetes: KubeStatus,
}

async fn status(State(shared): State<Arc<Endpoint>>) -> Response {
    let sample = latest(&shared);
    let (remediation, remedy_findings) = {
        let r = shared.remedy.borrow();
        (
            serde_json::to_value(&*r).unwrap_or_default(),
            r.findings.clone(),
        )
    };
    let mut findings: Vec<nodemedic_sample::Finding> = sample
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
            .and_then(|s| s.snapshot.get::<Pods>())
            .map(|p| p.len()),
        reader: sample.as_ref().map(|s| &s.reader),
        disk_commit: sample
            .as_ref()
            .and_then(|s| s.snapshot.get::<CommitLatency>()),
        groups: sample
            .as_ref()
            .map(|s| shown_groups(&s.verdicts))
            .unwrap_or_default(),
        findings,
        perf_probes: sample.as_ref().and_then(|s| s.snapshot.get::<PerfProbes>()),
        wakeup_storm: sample.as_ref().and_then(|s| s.storm.as_ref()),
        pressure: sample.as_ref().map(|s| PressureReport::of(s, false)),
        tuning: sample.as_ref().map(|s| TuningReport::of(s, false)),
        host_access: sample.as_ref().map(|s| &*s.host),
        web: web_stats(&shared.web),
        web_config: shared.web_config.status(),
        irqbalance_package: sample
            .as_ref()
            .and_then(|s| s.snapshot.get::<IrqbalanceConfig>())
            .map(|c| &c.package),
        remediation,
        kubernetes: shared.kube.borrow().clone(),
    };
    match serde_json::to_string_pretty(&body) {
        Ok(json) => ([(header::CONTENT_TYPE, "application/json")], json).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// Alive while samples keep coming: a sampler stuck for three intervals (plus slack) is not.
/// The liveness check: it gives the first sample the same slack, so a slow start is not
/// restarted.
async fn healthz(State(shared): State<Arc<Endpoint>>) -> Response {
    match freshness(&shared) {
        Freshness::Fresh | Freshness::NoSampleYet => (StatusCode::OK, "ok\n").into_response(),
        Freshness::Stale(age) => stale(age),
    }
}

/// Ready once the first sample is in, and while samples keep coming: the readiness check
/// (and what a rollout waits for).
async fn readyz(State(shared): State<Arc<Endpoint>>) -> Response {
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

fn freshness(shared: &Endpoint) -> Freshness {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::io::Read;

    use nodemedic_sample::remedy::RemedyState;

    use super::{render_sample, render_sample_into, Gzip, RenderCache, RenderKey};
    use crate::{Format, MetricsOptions};

    fn key(samples_total: u64) -> RenderKey {
        RenderKey {
            samples_total,
            decisions: 0,
            paused: false,
            last_action: None,
        }
    }

    /// A rendering of a past sample gives its buffer to the next rendering once no response
    /// holds it, and not before; what is rendered into it is the same text as a fresh one.
    #[test]
    fn a_stale_rendering_is_rendered_into_once_no_response_holds_it() {
        let cache = RenderCache::default();
        let body = |cap| {
            let mut v = Vec::with_capacity(cap);
            v.extend_from_slice(b"stale text of a past sample\n");
            axum::body::Bytes::from(v)
        };
        // A response is still sending the rendering of sample 1 when sample 2 is rendered.
        let sending = body(300_000);
        cache.insert(key(1), Format::Text, false, sending.clone());
        cache.evict(&key(2), Format::Text, false);
        assert!(cache.get(&key(1), Format::Text, false).is_none());
        assert_eq!(cache.spare_text.lock().unwrap().capacity(), 0);
        drop(sending);

        // Sample 2's, which nothing holds, and its gzip member, when sample 3 comes.
        cache.insert(key(2), Format::Text, false, body(300_000));
        cache.insert(key(2), Format::Text, true, body(50_000));
        cache.evict(&key(3), Format::Text, false);
        assert!(cache.done.lock().unwrap().is_empty());
        let spare = RenderCache::take(&cache.spare_text);
        assert!(spare.is_empty() && spare.capacity() >= 300_000);
        assert!(cache.spare_gzip.lock().unwrap().capacity() >= 50_000);

        let remedy = RemedyState::default();
        let metrics = MetricsOptions::default();
        let mut dirty = spare;
        dirty.extend_from_slice(b"left over");
        let text = render_sample_into(
            None,
            None,
            &remedy,
            &metrics,
            Format::Text,
            dirty,
            &mut Default::default(),
        );
        assert!(text.capacity() >= 300_000, "rendered into the spare buffer");
        assert_eq!(
            text,
            render_sample(None, None, &remedy, &metrics, Format::Text)
        );

        let gzip = Gzip::default();
        let out = RenderCache::take(&cache.spare_gzip);
        let z = gzip.compress_into(text.as_bytes(), out).unwrap();
        assert_eq!(gunzip(&z), text.as_bytes());
    }

    fn gunzip(z: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut d = flate2::read::GzDecoder::new(z);
        d.read_to_end(&mut out).unwrap();
        // One member, nothing after it.
        assert!(d.into_inner().is_empty());
        out
    }

    /// Bodies of every size the endpoint renders (empty, a small node's, a 1024-CPU node's
    /// half a megabyte, incompressible bytes that outgrow the first guess of the output's
    /// size), each compressed by the same kept compressor, decode to themselves.
    #[test]
    fn a_kept_compressor_gives_members_that_decode_to_the_body() {
        let gzip = Gzip::default();
        let text: Vec<u8> = (0..40_000)
            .flat_map(|i| {
                format!(
                    "nodemedic_irq_count{{irq=\"{i}\",cpu=\"{}\"}} {}\n",
                    i % 97,
                    i * 7919
                )
                .into_bytes()
            })
            .collect();
        let mut noise = Vec::with_capacity(200_000);
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            noise.push(x as u8);
        }
        for body in [
            &b""[..],
            b"# HELP a b\n# TYPE a gauge\na 1\n",
            &text,
            &noise,
            &text[..1000],
        ] {
            let z = gzip.compress(body).unwrap();
            assert_eq!(&z[..3], [0x1f, 0x8b, 8]);
            assert_eq!(gunzip(&z), body, "a body of {} bytes", body.len());
            assert!(
                gzip.kept.lock().unwrap().is_some(),
                "the compressor is kept"
            );
        }
        // As small as flate2's own gzip encoder makes it at that level (which feeds the
        // compressor in 32 KiB pieces, so its blocks and bytes differ a little).
        let mut reference = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut reference, &text).unwrap();
        let reference = reference.finish().unwrap().len();
        let ours = gzip.compress(&text).unwrap().len();
        assert!(
            ours <= reference + reference / 100,
            "{ours} bytes against {reference}"
        );
    }
}
