//! Helpers shared by the end-to-end tests: start the real `nodemedic` binary (and, for
//! `prometheus.rs`, a real Prometheus) on a free port, talk HTTP/1.1 to it with nothing but
//! `std::net::TcpStream`, poll with a deadline, and always kill what was started.

#![allow(dead_code)]

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub use nodemedic_testkit::workspace_root;
use nodemedic_testkit::{poll_until, ChildGuard};
use tempfile::TempDir;

pub mod history;
pub mod promql;

/// The newest version CHANGELOG.md names: its first `## [VERSION]` heading.
pub fn changelog_newest_version(changelog: &str) -> &str {
    changelog
        .lines()
        .find_map(|l| l.strip_prefix("## ["))
        .and_then(|l| l.split_once(']'))
        .map(|(v, _)| v)
        .expect("CHANGELOG.md has no `## [VERSION]` heading")
}

/// How long any single condition may take to become true before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// Set to `1` to skip (loudly) the parts that need Prometheus' own binaries.
pub const SKIP_ENV: &str = "NODEMEDIC_SKIP_PROMETHEUS";

/// `nodemedic --config CONFIG --host-root TREE GLOBAL… run RUN…` with the environment the
/// tests rely on (no inherited NODEMEDIC_CONFIG, info logs). `wrapper` runs it under another
/// command, e.g. `["prlimit", "--nofile=1024:1024", "--"]` for systemd's LimitNOFILE.
pub fn nodemedic_cmd(
    wrapper: &[&str],
    config: &Path,
    tree: &Path,
    global: &[String],
    run: &[String],
) -> Command {
    let mut cmd = match wrapper.split_first() {
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg(nodemedic_bin());
            c
        }
        None => Command::new(nodemedic_bin()),
    };
    cmd.arg("--config")
        .arg(config)
        .arg("--host-root")
        .arg(tree)
        .args(global)
        .arg("run")
        .args(run)
        .env_remove("NODEMEDIC_CONFIG")
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "info");
    cmd
}

pub fn nodemedic_bin() -> &'static str {
    env!("CARGO_BIN_EXE_nodemedic")
}

pub fn golden_dir() -> PathBuf {
    workspace_root().join("tests/golden")
}

/// The test config used against fixtures: fast sampling, collapse raised after two samples,
/// remediation off (fixtures are read-only evidence, and the remediator's timing would
/// make the golden exposition racy; remediation has its own tests), and the eBPF probes off
/// (they read the running kernel, not the fixture; tests/probes.rs covers them). The cgroups
/// are read every sample, not every 15 s, so that pressure verdicts (two readings) appear
/// within the tests' waits; the interval itself is tested in nodemedic-collect.
pub const FAST_CONFIG: &str = "sample_interval = \"200ms\"\n\n[detector.collapse]\nraise_after = 2\n\n[remediation]\nmode = \"off\"\n\n[probes]\nenabled = false\n\n[cgroups]\ninterval = \"0s\"\n\n[tuning]\nnic_limits = \"files\"\n";

// ---------------------------------------------------------------------------------------------
// Processes

/// A server process listening on 127.0.0.1:`port`, with its stdout+stderr in `log`.
/// Dropping it kills the process, then removes its temp dir; if the test is panicking, the
/// tail of the log is printed first.
pub struct Server {
    pub name: String,
    pub port: u16,
    // Field order matters: the child must be killed before its directory is removed.
    child: ChildGuard,
    log: PathBuf,
    pub dir: TempDir,
}

impl Server {
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits up to `timeout` for the process to exit (after a signal sent by the test).
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        self.child.wait_exit(timeout)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn get(&self, path: &str) -> Response {
        self.get_with(path, &[])
    }

    pub fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Response {
        match http_get(self.addr(), path, headers) {
            Ok(r) => r,
            Err(e) => panic!(
                "GET {path} from {}: {e}\n--- {} log ---\n{}",
                self.name,
                self.name,
                tail(&self.log(), 40)
            ),
        }
    }

    /// Polls `f` until it returns `Ok`, failing fast if the process dies and with the last
    /// `Err` (the reason it was not ready yet) once `timeout` passes; the server's log is
    /// printed when it is dropped during the panic.
    pub fn poll<T>(
        &mut self,
        what: &str,
        timeout: Duration,
        mut f: impl FnMut(&Server) -> Result<T, String>,
    ) -> T {
        let waiting_for = format!("{what} from {}", self.name);
        let mut last = String::from("never tried");
        poll_until(Instant::now() + timeout, &waiting_for, || {
            if let Some(status) = self.child.exited() {
                panic!(
                    "{} exited ({status}) while waiting for {what}; last: {last}",
                    self.name
                );
            }
            f(self).inspect_err(|e| last = e.clone())
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- {} (pid {}) log, last lines ---\n{}",
                self.name,
                self.child.id(),
                tail(&self.log(), 60)
            );
        }
    }
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A port that was free a moment ago: bind 127.0.0.1:0, read the port, drop the listener.
/// Racy by nature; `start_server` retries when the port got taken in between.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding 127.0.0.1:0");
    listener.local_addr().expect("local_addr").port()
}

/// Starts the command built by `make(port, dir)` on a free port, waiting until `ready_path`
/// answers 200. Retries with another port (up to 5 times) when the process dies because the
/// address was taken meanwhile.
pub fn start_server(
    name: &str,
    ready_path: &str,
    mut make: impl FnMut(u16, &Path) -> Command,
) -> Server {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let dir = tempfile::tempdir().expect("creating a temp dir");
        let port = free_port();
        let log = dir.path().join(format!("{name}.log"));
        let out = File::create(&log).expect("creating the log file");
        let err = out.try_clone().expect("cloning the log file handle");
        let mut cmd = make(port, dir.path());
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {name} ({:?}): {e}", cmd.get_program()));
        let mut server = Server {
            name: name.to_string(),
            port,
            child: ChildGuard::new(child),
            log,
            dir,
        };
        let what = format!("{name} to answer 200 on {ready_path} or exit");
        let ready = poll_until(Instant::now() + DEADLINE, &what, || {
            if server.child.exited().is_some() {
                return Ok(false);
            }
            match http_get(server.addr(), ready_path, &[]) {
                Ok(r) if r.status == 200 => Ok(true),
                Ok(r) => Err(format!("HTTP {}: {}", r.status, r.body.trim())),
                Err(e) => Err(e),
            }
        });
        if ready {
            return server;
        }
        let log_text = server.log();
        let in_use = log_text
            .to_ascii_lowercase()
            .contains("address already in use");
        if in_use && attempt < 5 {
            eprintln!(
                "{name}: port {port} was taken before it could bind; retrying on another port"
            );
            drop(server);
            continue;
        }
        panic!(
            "{name} exited before becoming ready (attempt {attempt})\n--- {name} log ---\n{}",
            tail(&log_text, 40)
        );
    }
}

/// Starts `nodemedic run` against a fixture tree with the given config file contents.
pub fn start_nodemedic(fixture: &str, config: &str) -> Server {
    let tree = nodemedic_testkit::fixture(fixture);
    start_server("nodemedic", "/healthz", |port, dir| {
        let cfg = dir.join("nodemedic.toml");
        std::fs::write(&cfg, config).expect("writing the config");
        let mut cmd = Command::new(nodemedic_bin());
        cmd.arg("--config")
            .arg(&cfg)
            .arg("--path.procfs")
            .arg(tree.join("proc"))
            .arg("--path.sysfs")
            .arg(tree.join("sys"))
            .arg("--path.cgroupfs")
            .arg(tree.join("sys/fs/cgroup"))
            .arg("--path.rootfs")
            .arg(&tree)
            .arg("--web.listen-address")
            .arg(format!("127.0.0.1:{port}"))
            .arg("run")
            .env_remove("NODEMEDIC_CONFIG")
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info");
        cmd
    })
}

/// Starts `nodemedic run` on this machine's own /proc and /sys with the given config.
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn start_nodemedic_on_this_machine(config: &str) -> Server {
    start_server("nodemedic", "/healthz", |port, dir| {
        let cfg = dir.join("nodemedic.toml");
        std::fs::write(&cfg, config).expect("writing the config");
        nodemedic_cmd(
            &[],
            &cfg,
            Path::new("/"),
            &["--web.listen-address".into(), format!("127.0.0.1:{port}")],
            &[],
        )
    })
}

/// Waits until the daemon's /status reports at least `n` samples.
pub fn wait_for_samples(server: &mut Server, n: u64) {
    server.poll(&format!("samples_total >= {n} in /status"), DEADLINE, |s| {
        let r = http_get(s.addr(), "/status", &[])?;
        if r.status != 200 {
            return Err(format!("HTTP {}", r.status));
        }
        let v: serde_json::Value =
            serde_json::from_str(&r.body).map_err(|e| format!("bad JSON: {e}"))?;
        let got = v["samples_total"]
            .as_u64()
            .ok_or("no samples_total in /status")?;
        if got >= n {
            Ok(())
        } else {
            Err(format!("samples_total = {got}"))
        }
    });
}

/// Finds one of Prometheus' binaries. Missing: panics with how to install it, unless
/// `NODEMEDIC_SKIP_PROMETHEUS=1`, in which case it prints a loud SKIPPED line and returns None.
pub fn prometheus_tool(name: &str, what: &str) -> Option<PathBuf> {
    let from_path = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(name))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let found = from_path
        .into_iter()
        .chain([PathBuf::from("/usr/bin").join(name)])
        .find(|p| p.is_file());
    if found.is_some() {
        return found;
    }
    if std::env::var(SKIP_ENV).as_deref() == Ok("1") {
        eprintln!(
            "\n********************************************************************\n\
             *** SKIPPED: {what}: `{name}` not found and {SKIP_ENV}=1\n\
             ********************************************************************\n"
        );
        return None;
    }
    panic!(
        "`{name}` not found on PATH or in /usr/bin; it is needed for {what}. Install it with \
         `apt-get install prometheus` (Debian/Ubuntu), or set {SKIP_ENV}=1 to skip this check."
    );
}

// ---------------------------------------------------------------------------------------------
// HTTP

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A minimal HTTP/1.1 GET (`Connection: close`, identity or chunked bodies).
pub fn http_get(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<Response, String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(15)))
        .map_err(|e| e.to_string())?;
    stream
        .set_write_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nUser-Agent: nodemedic-tests\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    stream
        .write_all(req.as_bytes())
        .map_err(|e| format!("sending request: {e}"))?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .map_err(|e| format!("reading response: {e}"))?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("no end of headers in {} bytes", raw.len()))?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut body = raw[split + 4..].to_vec();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked"));
    if chunked {
        body = dechunk(&body)?;
    } else if let Some(len) = headers.iter().find(|(k, _)| k == "content-length") {
        let len: usize = len
            .1
            .parse()
            .map_err(|_| format!("bad content-length {:?}", len.1))?;
        if body.len() != len {
            return Err(format!("content-length {len} but got {} bytes", body.len()));
        }
    }
    let body = String::from_utf8(body).map_err(|e| format!("body is not UTF-8: {e}"))?;
    Ok(Response {
        status,
        headers,
        body,
    })
}

fn dechunk(mut data: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let eol = data
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("truncated chunk size line")?;
        let size_text = String::from_utf8_lossy(&data[..eol]);
        let size_hex = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_hex, 16)
            .map_err(|_| format!("bad chunk size {size_hex:?}"))?;
        data = &data[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if data.len() < size + 2 {
            return Err("truncated chunk".into());
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

/// Percent-encodes a query-string value.
pub fn url_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(b))
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Prometheus

/// Starts Prometheus (`bin`, see `prometheus_tool`) with `config` as its prometheus.yml and
/// its TSDB in the server's temp dir, once /-/ready answers.
pub fn start_prometheus(bin: &Path, config: &str) -> Server {
    start_server("prometheus", "/-/ready", |port, dir| {
        let file = dir.join("prometheus.yml");
        std::fs::write(&file, config).expect("writing prometheus.yml");
        let mut cmd = Command::new(bin);
        cmd.arg(format!("--config.file={}", file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .current_dir(dir);
        cmd
    })
}

/// Runs an instant query; `Ok` with the result vector once the query succeeded.
pub fn query(prom: &Server, q: &str) -> Result<Vec<serde_json::Value>, String> {
    let path = format!("/api/v1/query?query={}", url_encode(q));
    let r = http_get(prom.addr(), &path, &[])?;
    let v: serde_json::Value = serde_json::from_str(&r.body)
        .map_err(|e| format!("HTTP {}, bad JSON ({e}): {}", r.status, r.body))?;
    if r.status != 200 || v["status"] != "success" {
        return Err(format!("query {q:?}: HTTP {}: {}", r.status, r.body));
    }
    v["data"]["result"]
        .as_array()
        .cloned()
        .ok_or_else(|| format!("query {q:?}: no data.result array: {}", r.body))
}

/// Why the targets are not up yet, from /api/v1/targets (for the timeout message).
pub fn target_state(prom: &Server) -> String {
    match http_get(prom.addr(), "/api/v1/targets", &[]) {
        Ok(r) => match serde_json::from_str::<serde_json::Value>(&r.body) {
            Ok(v) => v["data"]["activeTargets"]
                .as_array()
                .map(|ts| {
                    ts.iter()
                        .map(|t| {
                            format!(
                                "{} health={} lastError={}",
                                t["scrapeUrl"], t["health"], t["lastError"]
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("; ")
                })
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "no active targets yet".into()),
            Err(e) => format!("bad /api/v1/targets JSON: {e}"),
        },
        Err(e) => e,
    }
}

// ---------------------------------------------------------------------------------------------
// Exposition text

/// Sample lines (not comments, not blank).
pub fn sample_lines(body: &str) -> impl Iterator<Item = &str> {
    body.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}

/// The metric name of a sample line.
pub fn metric_name(line: &str) -> &str {
    let end = line.find(['{', ' ']).unwrap_or(line.len());
    &line[..end]
}

// ---------------------------------------------------------------------------------------------
// This machine's real IRQs
// ---------------------------------------------------------------------------------------------

/// Data-queue IRQs of this machine's virtio devices (`virtioN` → IRQs), read straight from
/// the kernel's /proc/interrupts with no nodemedic code involved, as an independent oracle.
pub fn virtio_queue_irqs() -> std::collections::BTreeMap<String, Vec<u32>> {
    let text = std::fs::read_to_string("/proc/interrupts").expect("reading /proc/interrupts");
    let mut out: std::collections::BTreeMap<String, Vec<u32>> = Default::default();
    for line in text.lines().skip(1) {
        let Some((irq, rest)) = line.split_once(':') else {
            continue;
        };
        let Ok(irq) = irq.trim().parse::<u32>() else {
            continue;
        };
        let Some(action) = rest.split_whitespace().last() else {
            continue;
        };
        if let Some(dev) = action
            .strip_prefix("virtio")
            .and_then(|r| r.split('-').next())
        {
            if !action.ends_with("-config") {
                out.entry(format!("virtio{dev}")).or_default().push(irq);
            }
        }
    }
    out
}

/// Takes the machine's real-IRQ guard, keeps the IRQs of each group that the kernel lets us
/// re-pin (kernel-managed IRQs refuse, so does a non-root user), and saves their masks. The masks
/// go back when the guard drops, or at the next guard if this process dies first.
pub fn save_pinnable(
    groups: std::collections::BTreeMap<String, Vec<u32>>,
) -> (
    nodemedic_testkit::RealIrqs,
    std::collections::BTreeMap<String, Vec<u32>>,
) {
    let mut guard = nodemedic_testkit::RealIrqs::lock();
    let groups: std::collections::BTreeMap<String, Vec<u32>> = groups
        .into_iter()
        .filter(|(_, irqs)| irqs.iter().all(|irq| guard.writable(*irq)))
        .collect();
    guard.save(groups.values().flatten().copied());
    (guard, groups)
}

/// Remediation settings for tests that must decide quickly without touching systemd: native
/// rebalance enabled without waiting for "hurting", short windows, no D-Bus, no systemctl.
pub const FAST_NATIVE_REMEDIATION: &str = r#"cooldown = "12s"
verify_after = "1s"
[remediation.irqbalance]
dbus_socket = "/nonexistent/system_bus_socket"
systemctl_fallback = false
[remediation.native]
enabled = true
require_hurting = false
"#;

/// Helm, built from the Go module proxy by tests/k8s/build-helm.sh (cached).
pub fn helm() -> &'static PathBuf {
    static HELM: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    HELM.get_or_init(|| {
        let out = Command::new("bash")
            .arg(workspace_root().join("tests/k8s/build-helm.sh"))
            .output()
            .expect("running tests/k8s/build-helm.sh");
        assert!(
            out.status.success(),
            "building helm failed (tests/k8s/build-helm.sh):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
}

/// `helm template nodemedic deploy/helm/nodemedic --set …`, run: its output, whatever it was.
pub fn helm_template(set: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(helm());
    cmd.args(["template", "nodemedic", "deploy/helm/nodemedic"])
        .current_dir(workspace_root());
    for s in set {
        cmd.args(["--set", s]);
    }
    cmd.output().unwrap()
}

/// `helm template nodemedic deploy/helm/nodemedic --set …`, which must render.
pub fn render(set: &[&str]) -> String {
    let out = helm_template(set);
    assert!(
        out.status.success(),
        "helm template {set:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}
