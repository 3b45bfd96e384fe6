//! The endpoint under hostile clients, with the real binary: a flood of half-sent requests
//! under the common `LimitNOFILE=1024`, 200 scrapers at once against a small
//! `web.max_requests`, and gzip for a client that asks for it.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;

use common::{http_get, nodemedic_cmd, start_server, wait_for_samples, Server};
use nodemedic_testkit::{fixture, poll_until};

fn start(config: &str, nofile: Option<u64>) -> Server {
    let tree = fixture("8cpu-collapsed");
    let config = config.to_string();
    // prlimit(1) sets both limits as systemd's LimitNOFILE=1024 would.
    let limit = nofile.map(|n| format!("--nofile={n}:{n}"));
    start_server("nodemedic", "/healthz", move |port, dir| {
        let cfg = dir.join("nodemedic.toml");
        std::fs::write(&cfg, &config).unwrap();
        let wrapper: Vec<&str> = match &limit {
            Some(l) => vec!["prlimit", l, "--"],
            None => Vec::new(),
        };
        nodemedic_cmd(
            &wrapper,
            &cfg,
            &tree,
            &["--web.listen-address".into(), format!("127.0.0.1:{port}")],
            &[],
        )
    })
}

const CONFIG: &str =
    "sample_interval = \"200ms\"\n[remediation]\nmode = \"off\"\n[probes]\nenabled = false\n";

/// 1,100 connections that each sent half a request line, under LimitNOFILE=1024: a normal
/// scrape still succeeds at once, no collector loses its files to EMFILE, and the idle
/// connections were closed to make room.
#[test]
fn half_sent_requests_under_limitnofile_1024_blind_nothing() {
    let mut server = start(CONFIG, Some(1024));
    let mut idle = Vec::new();
    for _ in 0..1100 {
        let mut s = TcpStream::connect(server.addr()).unwrap();
        s.write_all(b"GET /metr").unwrap();
        idle.push(s);
    }
    // Until the daemon has accepted them all (evicting the oldest idle ones to stay under
    // its cap) and sampled a few times while they hang.
    let samples_before = status_of(&server)["samples_total"].as_u64().unwrap();
    server.poll(
        "every connection accepted, 3 samples",
        common::DEADLINE,
        |s| {
            let st = status_of(s);
            let web = &st["web"];
            let cap = web["max_connections"].as_u64().unwrap_or(0);
            let evicted = web["evicted_idle_total"].as_u64().unwrap_or(0);
            let samples = st["samples_total"].as_u64().unwrap_or(0);
            if evicted + cap >= 1100 && samples >= samples_before + 3 {
                Ok(())
            } else {
                Err(format!("{web}, {samples} samples"))
            }
        },
    );
    let r = http_get(server.addr(), "/metrics", &[]).expect("a scrape during the flood");
    assert_eq!(r.status, 200);
    assert!(r
        .body
        .contains("nodemedic_irq_collapsed{group=\"virtio2\"} 1"));
    let st: serde_json::Value =
        serde_json::from_str(&http_get(server.addr(), "/status", &[]).unwrap().body).unwrap();
    let collectors = st["collectors"].as_array().unwrap();
    let failed: Vec<&serde_json::Value> = collectors
        .iter()
        .filter(|c| c["state"] == "failed")
        .collect();
    assert!(failed.is_empty(), "{failed:#?}");
    assert!(!st.to_string().contains("Too many open files"), "{st:#}");
    let web = &st["web"];
    let cap = web["max_connections"].as_u64().unwrap();
    assert!(cap <= (1024 - 256) / 4, "{web}");
    assert!(
        web["evicted_idle_total"].as_u64().unwrap() >= 1100 - cap,
        "{web}"
    );
    assert!(web["open_connections"].as_u64().unwrap() <= cap, "{web}");
    drop(idle);
}

fn status_of(server: &Server) -> serde_json::Value {
    serde_json::from_str(&http_get(server.addr(), "/status", &[]).unwrap().body).unwrap()
}

/// 200 scrapers at once against web.max_requests = 2: each gets 200 or a 503 that says why,
/// never a hang or a reset, and the daemon is healthy afterwards.
#[test]
fn two_hundred_parallel_scrapers_get_answers_or_503() {
    let server = start(&format!("{CONFIG}[web]\nmax_requests = 2\n"), None);
    let addr = server.addr();
    let handles: Vec<_> = (0..200)
        .map(|_| std::thread::spawn(move || http_get(addr, "/metrics", &[])))
        .collect();
    let mut ok = 0;
    let mut busy = 0;
    for h in handles {
        let r = h.join().unwrap().expect("every scraper gets an answer");
        match r.status {
            200 => ok += 1,
            503 => {
                assert!(r.body.contains("max_requests"), "{}", r.body);
                busy += 1;
            }
            s => panic!("status {s}: {}", r.body),
        }
    }
    assert!(ok >= 1);
    eprintln!("{ok} answered, {busy} told to retry");
    assert_eq!(http_get(addr, "/healthz", &[]).unwrap().status, 200);
}

/// `Accept-Encoding: gzip` (what Prometheus sends) gets a gzip body that decodes to the
/// exposition.
#[test]
fn gzip_when_asked() {
    let mut server = start(CONFIG, None);
    wait_for_samples(&mut server, 5);
    let mut s = TcpStream::connect(server.addr()).unwrap();
    s.write_all(
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    assert!(head.contains("content-encoding: gzip"), "{head}");
    let mut body = raw[split + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    let mut text = String::new();
    flate2::read::GzDecoder::new(&body[..])
        .read_to_string(&mut text)
        .expect("a gzip body");
    assert!(
        text.contains("# TYPE nodemedic_irq_collapsed gauge"),
        "{text}"
    );
    assert!(text.contains("nodemedic_irq_collapsed{group=\"virtio2\"} 1"));
    let plain = http_get(server.addr(), "/metrics", &[]).unwrap();
    assert!(plain.header("content-encoding").is_none());
    assert!(
        body.len() * 3 < plain.body.len(),
        "gzip should shrink the exposition"
    );
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let eol = data.windows(2).position(|w| w == b"\r\n").unwrap();
        let size =
            usize::from_str_radix(std::str::from_utf8(&data[..eol]).unwrap().trim(), 16).unwrap();
        data = &data[eol + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

/// Scrapes of one sample share one rendering: byte-identical bodies, even the daemon's own
/// CPU time, however many scrapers ask.
#[test]
fn one_rendering_per_sample() {
    let server = start(
        "sample_interval = \"1h\"\n[remediation]\nmode = \"off\"\n[probes]\nenabled = false\n",
        None,
    );
    let first = http_get(server.addr(), "/metrics", &[]).unwrap().body;
    assert!(first.contains("nodemedic_samples_total 1\n"), "{first}");
    // Work in between that would move the daemon's CPU time if it were read again.
    for _ in 0..50 {
        http_get(server.addr(), "/status", &[]).unwrap();
    }
    let again = http_get(server.addr(), "/metrics", &[]).unwrap().body;
    assert_eq!(first, again);
}

/// Starts the daemon on the 8-CPU fixture with `NOTIFY_SOCKET` pointing at a datagram socket
/// of the test's, and `run_args` after `run`.
fn start_notified(
    config: &str,
    run_args: &[&str],
) -> (Server, std::os::unix::net::UnixDatagram, tempfile::TempDir) {
    let tree = fixture("8cpu-collapsed");
    let sock_dir = tempfile::tempdir().unwrap();
    let sock_path = sock_dir.path().join("notify");
    let notify = std::os::unix::net::UnixDatagram::bind(&sock_path).unwrap();
    notify.set_nonblocking(true).unwrap();
    let config = config.to_string();
    let run: Vec<String> = run_args.iter().map(|s| s.to_string()).collect();
    let server = start_server("nodemedic", "/healthz", move |port, dir| {
        let cfg = dir.join("nodemedic.toml");
        std::fs::write(&cfg, &config).unwrap();
        let mut cmd = nodemedic_cmd(
            &[],
            &cfg,
            &tree,
            &["--web.listen-address".into(), format!("127.0.0.1:{port}")],
            &run,
        );
        cmd.env("NOTIFY_SOCKET", &sock_path);
        cmd
    });
    (server, notify, sock_dir)
}

/// Every datagram sent to the notify socket so far.
fn notifications(sock: &std::os::unix::net::UnixDatagram) -> Vec<String> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = sock.recv(&mut buf) {
        out.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    out
}

/// With `max_requests` requests in flight, the next one gets 503 at once with the reason.
/// Here two scrapes are held in flight deterministically: the first sample never finishes (a
/// fault), so /metrics waits for it; a third request must not queue behind them.
#[test]
fn requests_past_max_requests_get_503_at_once() {
    let (server, _notify, _dir) = start_notified(
        &format!("{CONFIG}[web]\nmax_requests = 2\nrequest_timeout = \"20s\"\n"),
        &["--fault.hang-sampler-after", "0"],
    );
    let addr = server.addr();
    let waiting: Vec<_> = (0..2)
        .map(|_| std::thread::spawn(move || http_get(addr, "/metrics", &[])))
        .collect();
    // The two are in flight once the endpoint refuses a third; until then, a third may
    // still have been served (then it is /readyz's quick 503).
    let deadline = std::time::Instant::now() + common::DEADLINE;
    let refused = poll_until(deadline, "/readyz to name max_requests", || {
        let r = http_get(addr, "/readyz", &[]).unwrap();
        if r.body.contains("max_requests") {
            Ok(r)
        } else {
            Err(format!("HTTP {}: {}", r.status, r.body.trim()))
        }
    });
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert!(refused.body.contains("max_requests"), "{}", refused.body);
    for w in waiting {
        let r = w.join().unwrap().unwrap();
        assert_eq!(r.status, 503, "{}", r.body);
        assert!(r.body.contains("no sample yet"), "{}", r.body);
    }
}

/// Until the first sample is in, nothing claims to be ready: here the first sample never
/// finishes (a fault: the sampler hangs before handing it over). `/readyz` and `/metrics`
/// answer 503 with the reason (`/metrics` after waiting half the request timeout), never
/// 200 with empty families, and systemd is never told READY=1. `/healthz`, the liveness
/// check, stays 200 within its slack so that a slow start is not restarted.
#[test]
fn nothing_is_ready_before_the_first_sample() {
    let (server, notify, _dir) = start_notified(
        &format!("{CONFIG}[web]\nrequest_timeout = \"2s\"\n"),
        &["--fault.hang-sampler-after", "0"],
    );
    let ready = http_get(server.addr(), "/readyz", &[]).unwrap();
    assert_eq!(ready.status, 503, "{}", ready.body);
    assert!(ready.body.contains("no sample yet"), "{}", ready.body);
    let metrics = http_get(server.addr(), "/metrics", &[]).unwrap();
    assert_eq!(metrics.status, 503, "{}", metrics.body);
    assert!(metrics.body.contains("no sample yet"), "{}", metrics.body);
    assert_eq!(
        http_get(server.addr(), "/healthz", &[]).unwrap().status,
        200
    );
    let sent = notifications(&notify);
    assert!(sent.iter().all(|m| !m.contains("READY=1")), "{sent:?}");
}

/// With a first sample, READY=1 is sent once it is in: by the time systemd hears it,
/// `/readyz` is 200 and `/metrics` has the sample's series.
#[test]
fn ready_follows_the_first_sample() {
    let (mut server, notify, _dir) = start_notified(CONFIG, &[]);
    let mut sent = Vec::new();
    let ready = server.poll("READY=1", common::DEADLINE, |_| {
        sent.extend(notifications(&notify));
        sent.iter()
            .find(|m| m.contains("READY=1"))
            .cloned()
            .ok_or_else(|| format!("{sent:?}"))
    });
    assert!(ready.contains("STATUS=serving on 127.0.0.1:"), "{ready}");
    assert_eq!(http_get(server.addr(), "/readyz", &[]).unwrap().status, 200);
    let metrics = http_get(server.addr(), "/metrics", &[]).unwrap();
    assert_eq!(metrics.status, 200);
    assert!(
        metrics
            .body
            .contains("nodemedic_irq_collapsed{group=\"virtio2\"}"),
        "{}",
        metrics.body
    );
}
