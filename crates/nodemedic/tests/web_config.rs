//! `--web.config.file`, the Prometheus exporter-toolkit web configuration, with real clients:
//! `curl` and `openssl s_client` over TLS with right, wrong and missing credentials; client
//! certificates checked against a CA; a certificate rotated on disk and served without a
//! restart; a real Prometheus scraping over TLS with basic auth; node_exporter (Debian's 1.5)
//! accepting the very same file; bad files refused at start naming the field; several
//! listen addresses and a unix socket.
//!
//! Needs `openssl`, `curl`, `/usr/bin/prometheus` and `/usr/bin/prometheus-node-exporter`
//! (installed by tests/run-all.sh). Certificates are made per test with the `openssl` CLI.

#![allow(clippy::panic, clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use nodemedic_testkit::{fixture, poll_until, ChildGuard};
use serde_json::Value;

const USER: &str = "prometheus";
const PASSWORD: &str = "correct horse battery staple";

fn run(cmd: &mut Command) -> std::process::Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {:?}: {e}", cmd.get_program()));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A CA, a server certificate for localhost/127.0.0.1 signed by it (`name` as CN), a client
/// certificate signed by it, and a self-signed client certificate no CA vouches for.
struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn new(dir: &Path) -> Self {
        let p = Self {
            dir: dir.to_path_buf(),
        };
        p.self_signed("ca", "nodemedic-test-ca", true);
        p.signed(
            "server",
            "server-1",
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        );
        p.signed(
            "client",
            "scraper",
            "subjectAltName=DNS:scraper.example\nextendedKeyUsage=clientAuth\n",
        );
        p.self_signed("rogue", "scraper", false);
        p
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn self_signed(&self, name: &str, cn: &str, ca: bool) {
        let mut cmd = Command::new("openssl");
        cmd.args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "2",
        ])
        .arg("-keyout")
        .arg(self.path(&format!("{name}.key")))
        .arg("-out")
        .arg(self.path(&format!("{name}.pem")))
        .arg("-subj")
        .arg(format!("/CN={cn}"));
        if !ca {
            cmd.args([
                "-addext",
                "basicConstraints=critical,CA:FALSE",
                "-addext",
                "extendedKeyUsage=clientAuth",
            ]);
        }
        run(&mut cmd);
    }

    /// Signs a new key for `cn` with the CA; writes `name.pem` and `name.key`.
    fn signed(&self, name: &str, cn: &str, ext: &str) {
        let ext_file = self.path(&format!("{name}.ext"));
        std::fs::write(&ext_file, ext).unwrap();
        let csr = self.path(&format!("{name}.csr"));
        run(Command::new("openssl")
            .args([
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
            ])
            .arg("-keyout")
            .arg(self.path(&format!("{name}.key")))
            .arg("-out")
            .arg(&csr)
            .arg("-subj")
            .arg(format!("/CN={cn}")));
        run(Command::new("openssl")
            .args(["x509", "-req", "-days", "2", "-CAcreateserial"])
            .arg("-in")
            .arg(&csr)
            .arg("-CA")
            .arg(self.path("ca.pem"))
            .arg("-CAkey")
            .arg(self.path("ca.key"))
            .arg("-extfile")
            .arg(&ext_file)
            .arg("-out")
            .arg(self.path(&format!("{name}.pem"))));
    }
}

/// The subject of the certificate the server on `port` presents now (a new connection).
fn served_subject(port: u16) -> String {
    let s = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl s_client -connect 127.0.0.1:{port} -servername localhost </dev/null 2>/dev/null | openssl x509 -noout -subject"
        ))
        .output()
        .unwrap();
    String::from_utf8_lossy(&s.stdout).to_string()
}

/// Waits (up to 15 s) until new connections to `port` get the certificate of `cn`.
fn wait_for_served(port: u16, cn: &str, nm: &Proc) {
    let what = format!("the certificate of {cn}, changed on disk, to be served");
    poll_until(Instant::now() + Duration::from_secs(15), &what, || {
        let served = served_subject(port);
        if served.contains(cn) {
            Ok(())
        } else {
            Err(format!("still serving {served}\n{}", nm.log()))
        }
    });
}

/// `/status`'s `web_config` object, over TLS with the password.
fn web_config_status(port: u16, ca: &str) -> Value {
    let (_, _, status) = curl(&[
        "--cacert",
        ca,
        "-u",
        &format!("{USER}:{PASSWORD}"),
        &format!("https://127.0.0.1:{port}/status"),
    ]);
    let v: Value = serde_json::from_str(&status).unwrap();
    v["web_config"].clone()
}

impl Pki {
    /// A new server certificate and key for `cn`, signed by this CA, in a new directory.
    fn next_server(&self, dir: &Path, cn: &str) -> Pki {
        std::fs::create_dir(dir).unwrap();
        let next = Pki {
            dir: dir.to_path_buf(),
        };
        for f in ["ca.pem", "ca.key"] {
            std::fs::copy(self.path(f), next.path(f)).unwrap();
        }
        next.signed(
            "server",
            cn,
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        );
        next
    }
}

fn bcrypt_hash(password: &str) -> String {
    // Cost 5: the lowest node_exporter and nodemedic both take, fast enough for tests.
    bcrypt::hash(password, 5).unwrap()
}

/// The web configuration file both nodemedic and node_exporter read.
fn web_config(pki: &Pki, client_auth: Option<&str>) -> String {
    let mut y = format!(
        "tls_server_config:\n  cert_file: {}\n  key_file: {}\n  min_version: TLS12\n  \
         cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256]\n  \
         curve_preferences: [X25519, CurveP256]\n",
        pki.path("server.pem").display(),
        pki.path("server.key").display()
    );
    if let Some(auth) = client_auth {
        y.push_str(&format!(
            "  client_auth_type: {auth}\n  client_ca_file: {}\n",
            pki.path("ca.pem").display()
        ));
    }
    y.push_str("http_server_config:\n  headers:\n    X-Frame-Options: deny\n");
    y.push_str(&format!(
        "basic_auth_users:\n  {USER}: '{}'\n",
        bcrypt_hash(PASSWORD)
    ));
    y
}

/// A child process killed on drop, and the file its stdout goes to.
struct Proc(ChildGuard, PathBuf);

impl Proc {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.1).unwrap_or_default()
    }
}

/// `curl` exit status, HTTP status and body.
fn curl(args: &[&str]) -> (i32, u16, String) {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "10", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("running curl");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (
        out.status.code().unwrap_or(-1),
        code.trim().parse().unwrap_or(0),
        body.to_string(),
    )
}

/// Starts nodemedic on the 8cpu-collapsed fixture with `args`, waiting until `ready`
/// (curl arguments) answers 200.
fn start(dir: &Path, args: &[String], ready: &[String]) -> Proc {
    start_with(dir, args, ready, "")
}

/// `start`, with `extra` appended to the TOML configuration.
fn start_with(dir: &Path, args: &[String], ready: &[String], extra: &str) -> Proc {
    let tree = fixture("8cpu-collapsed");
    let cfg = dir.join("nodemedic.toml");
    std::fs::write(
        &cfg,
        format!(
            "sample_interval = \"200ms\"\n[probes]\nenabled = false\n[remediation]\nmode = \"off\"\n{extra}"
        ),
    )
    .unwrap();
    let log = dir.join("nodemedic.log");
    let child = nodemedic_cmd(&[], &cfg, &tree, args, &[])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(dir.join("nodemedic.err")).unwrap())
        .spawn()
        .expect("spawning nodemedic");
    let mut p = Proc(ChildGuard::new(child), log);
    let args: Vec<&str> = ready.iter().map(String::as_str).collect();
    poll_until(Instant::now() + DEADLINE, "nodemedic to answer 200", || {
        if let Some(status) = p.0.exited() {
            panic!(
                "nodemedic exited ({status}): {}",
                std::fs::read_to_string(dir.join("nodemedic.err")).unwrap_or_default()
            );
        }
        match curl(&args).1 {
            200 => Ok(()),
            code => Err(format!("HTTP {code}: {}", p.log())),
        }
    });
    p
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// TLS and basic auth with curl; the configured header; a unix socket beside the TLS port
/// (auth applies there too, TLS does not); a rotated certificate served without a restart;
/// a real Prometheus scraping over TLS with basic auth; node_exporter taking the same file.
#[test]
fn tls_basic_auth_rotation_prometheus_and_node_exporter() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new(tmp.path());
    let file = tmp.path().join("web.yml");
    std::fs::write(&file, web_config(&pki, None)).unwrap();
    let port = free_port();
    let sock = tmp.path().join("nodemedic.sock");
    let url = format!("https://localhost:{port}/metrics");
    let ca = pki.path("ca.pem").display().to_string();
    let creds = format!("{USER}:{PASSWORD}");
    let tls = |extra: &[&str]| -> (i32, u16, String) {
        let mut a = vec!["--cacert", ca.as_str(), "--resolve"];
        let resolve = format!("localhost:{port}:127.0.0.1");
        a.push(&resolve);
        a.extend_from_slice(extra);
        a.push(&url);
        curl(&a)
    };
    let nm = start(
        tmp.path(),
        &[
            "--web.config.file".into(),
            file.display().to_string(),
            "--web.listen-address".into(),
            format!("127.0.0.1:{port}"),
            "--web.listen-address".into(),
            format!("unix:{}", sock.display()),
        ],
        &strings(&[
            "--cacert",
            &ca,
            "-u",
            &creds,
            &format!("https://127.0.0.1:{port}/healthz"),
        ]),
    );

    let (_, code, body) = tls(&["-u", &creds]);
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("nodemedic_irq_collapsed"), "{body}");
    let (_, code, _) = tls(&["-u", &format!("{USER}:wrong")]);
    assert_eq!(code, 401, "wrong password");
    let (_, code, _) = tls(&["-u", &format!("nobody:{PASSWORD}")]);
    assert_eq!(code, 401, "unknown user");
    let (_, code, _) = tls(&[]);
    assert_eq!(code, 401, "no credentials");
    let (_, code, head) = tls(&["-u", &creds, "-I"]);
    assert_eq!(code, 200);
    assert!(
        head.to_ascii_lowercase().contains("x-frame-options: deny"),
        "{head}"
    );
    let (_, code, _) = curl(&[&format!("http://127.0.0.1:{port}/metrics")]);
    assert_ne!(code, 200, "plain HTTP on the TLS port");
    // The unix socket: plain HTTP (its file mode guards it), basic auth still applies.
    let s = sock.display().to_string();
    assert_eq!(
        curl(&["--unix-socket", &s, "http://localhost/healthz"]).1,
        401
    );
    let (_, code, body) = curl(&[
        "--unix-socket",
        &s,
        "-u",
        &creds,
        "http://localhost/metrics",
    ]);
    assert_eq!(code, 200, "{body}");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&sock).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o660);

    // A real Prometheus over TLS with basic auth.
    if let Some(prometheus) = prometheus_tool("prometheus", "Prometheus over TLS") {
        let mut prom = start_server("prometheus", "/-/ready", |p, dir| {
            let config = dir.join("prometheus.yml");
            std::fs::write(
                &config,
                format!(
                    "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
                     scrape_configs:\n  - job_name: nodemedic\n    scheme: https\n    \
                     tls_config:\n      ca_file: {ca}\n      server_name: localhost\n    \
                     basic_auth:\n      username: {USER}\n      password: '{PASSWORD}'\n    \
                     static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
                ),
            )
            .unwrap();
            let mut cmd = Command::new(&prometheus);
            cmd.arg(format!("--config.file={}", config.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.join("data").display()
                ))
                .arg(format!("--web.listen-address=127.0.0.1:{p}"))
                .current_dir(dir);
            cmd
        });
        prom.poll("up == 1 over TLS", Duration::from_secs(60), |p| {
            let r = http_get(
                p.addr(),
                "/api/v1/query?query=up%7Bjob%3D%22nodemedic%22%7D",
                &[],
            )?;
            let v: Value = serde_json::from_str(&r.body).map_err(|e| e.to_string())?;
            match v["data"]["result"][0]["value"][1].as_str() {
                Some("1") => Ok(()),
                other => {
                    let t = http_get(p.addr(), "/api/v1/targets", &[])
                        .map(|r| r.body)
                        .unwrap_or_default();
                    Err(format!("up = {other:?}; targets: {t}"))
                }
            }
        });
    }

    // node_exporter reads the same file and enforces it the same way.
    if let Some(ne) = prometheus_tool(
        "prometheus-node-exporter",
        "node_exporter with the same web config",
    ) {
        let ne_port = free_port();
        let log = tmp.path().join("node_exporter.log");
        let child = Command::new(ne)
            .arg(format!("--web.config.file={}", file.display()))
            .arg(format!("--web.listen-address=127.0.0.1:{ne_port}"))
            .args(["--collector.disable-defaults", "--collector.loadavg"])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(tmp.path().join("node_exporter.err")).unwrap())
            .spawn()
            .expect("spawning node_exporter");
        let _ne = Proc(ChildGuard::new(child), log);
        let ne_url = format!("https://127.0.0.1:{ne_port}/metrics");
        let what = "node_exporter with nodemedic's web config to answer 200";
        let body = poll_until(Instant::now() + DEADLINE, what, || {
            match curl(&["--cacert", &ca, "-u", &creds, &ne_url]) {
                (_, 200, body) => Ok(body),
                (_, code, _) => Err(format!(
                    "HTTP {code}: {}",
                    std::fs::read_to_string(tmp.path().join("node_exporter.err"))
                        .unwrap_or_default()
                )),
            }
        });
        assert!(body.contains("node_load1"), "{body}");
        assert_eq!(curl(&["--cacert", &ca, &ne_url]).1, 401);
    }

    // Rotation: a new certificate and key replace the files; new connections get it.
    assert!(
        served_subject(port).contains("server-1"),
        "{}",
        served_subject(port)
    );
    let pki2 = pki.next_server(&tmp.path().join("next"), "server-2");
    std::fs::rename(pki2.path("server.key"), pki.path("server.key")).unwrap();
    std::fs::rename(pki2.path("server.pem"), pki.path("server.pem")).unwrap();
    wait_for_served(port, "server-2", &nm);
    let (_, code, _) = tls(&["-u", &creds]);
    assert_eq!(
        code, 200,
        "the rotated certificate verifies against the same CA"
    );
    let w = web_config_status(port, &ca);
    assert_eq!(w["reloads_total"], 1, "{w}");
    assert_eq!(w["tls"], true);
}

/// RequireAndVerifyClientCert: no certificate, or one no configured CA signed, fails the
/// handshake; the CA's client certificate gets in (with the password too).
#[test]
fn client_certificates_are_checked_against_the_ca() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new(tmp.path());
    let file = tmp.path().join("web.yml");
    std::fs::write(&file, web_config(&pki, Some("RequireAndVerifyClientCert"))).unwrap();
    let port = free_port();
    let ca = pki.path("ca.pem").display().to_string();
    let creds = format!("{USER}:{PASSWORD}");
    let url = format!("https://127.0.0.1:{port}/metrics");
    let cert = |name: &str| {
        vec![
            "--cert".to_string(),
            pki.path(&format!("{name}.pem")).display().to_string(),
            "--key".to_string(),
            pki.path(&format!("{name}.key")).display().to_string(),
        ]
    };
    let mut ready = strings(&["--cacert", &ca, "-u", &creds]);
    ready.extend(cert("client"));
    ready.push(url.clone());
    let _nm = start(
        tmp.path(),
        &[
            "--web.config.file".into(),
            file.display().to_string(),
            "--web.listen-address".into(),
            format!("127.0.0.1:{port}"),
        ],
        &ready,
    );
    let with = |name: Option<&str>| {
        let mut a = strings(&["--cacert", &ca, "-u", &creds]);
        if let Some(n) = name {
            a.extend(cert(n));
        }
        a.push(url.clone());
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        curl(&a)
    };
    let (_, code, body) = with(Some("client"));
    assert_eq!(code, 200, "{body}");
    let (exit, code, _) = with(None);
    assert!(
        code == 0 && exit != 0,
        "no client certificate: curl exit {exit}, HTTP {code}"
    );
    let (exit, code, _) = with(Some("rogue"));
    assert!(
        code == 0 && exit != 0,
        "self-signed client certificate: curl exit {exit}, HTTP {code}"
    );
}

/// A file nodemedic cannot use stops it at start, naming the field; nothing is served.
#[test]
fn a_bad_web_config_is_a_startup_error_naming_the_field() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new(tmp.path());
    let good = web_config(&pki, None);
    for (name, text, field) in [
        ("unknown key", format!("{good}colour: blue\n"), "colour"),
        (
            "bad client_auth_type",
            good.replace(
                "  min_version: TLS12\n",
                "  min_version: TLS12\n  client_auth_type: Sometimes\n",
            ),
            "client_auth_type",
        ),
        (
            "missing key file",
            good.replace("server.key", "missing.key"),
            "key_file",
        ),
        (
            "not a bcrypt hash",
            format!("basic_auth_users:\n  {USER}: plaintext\n"),
            "basic_auth_users",
        ),
        (
            "unsupported curve",
            good.replace("[X25519, CurveP256]", "[X25519, CurveP521]"),
            "curve_preferences",
        ),
        (
            "cipher suite rustls lacks",
            good.replace(
                "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
                "TLS_RSA_WITH_AES_128_CBC_SHA",
            ),
            "cipher_suites",
        ),
        (
            "header exporter-toolkit refuses",
            good.replace("X-Frame-Options", "X-Powered-By"),
            "headers",
        ),
    ] {
        let file = tmp.path().join("bad.yml");
        std::fs::write(&file, &text).unwrap();
        let out = Command::new(nodemedic_bin())
            .arg("--host-root")
            .arg(fixture("8cpu-collapsed"))
            .arg("--web.config.file")
            .arg(&file)
            .arg("--web.listen-address")
            .arg("127.0.0.1:0")
            .arg("run")
            .env_remove("NODEMEDIC_CONFIG")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}: started anyway");
        assert!(err.contains(field), "{name}: {field} not named in: {err}");
        assert!(
            !err.contains("duplicate"),
            "{name}: the test file is wrong: {err}"
        );
        assert!(
            err.contains("bad.yml"),
            "{name}: the file is not named in: {err}"
        );
    }
}

/// Several listen addresses, TCP and unix, without a web configuration file.
#[test]
fn several_listen_addresses_and_a_unix_socket() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (free_port(), free_port());
    let sock = tmp.path().join("s.sock");
    // A stale socket file from an earlier run is replaced.
    let _stale = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    drop(_stale);
    let _nm = start(
        tmp.path(),
        &[
            "--web.listen-address".into(),
            format!("127.0.0.1:{a}"),
            "--web.listen-address".into(),
            format!("127.0.0.1:{b}"),
            "--web.listen-address".into(),
            format!("unix:{}", sock.display()),
        ],
        &[format!("http://127.0.0.1:{a}/healthz")],
    );
    for port in [a, b] {
        let (_, code, body) = curl(&[&format!("http://127.0.0.1:{port}/metrics")]);
        assert_eq!(code, 200, "{port}: {body}");
        assert!(body.contains("nodemedic_irq_collapsed"));
    }
    let (_, code, body) = curl(&[
        "--unix-socket",
        &sock.display().to_string(),
        "http://localhost/status",
    ]);
    assert_eq!(code, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["web_config"]["tls"], false);
}

/// Curl arguments for `pki`'s certificate `name` (`name.pem`, `name.key`).
fn client_cert(pki: &Pki, name: &str) -> Vec<String> {
    vec![
        "--cert".to_string(),
        pki.path(&format!("{name}.pem")).display().to_string(),
        "--key".to_string(),
        pki.path(&format!("{name}.key")).display().to_string(),
    ]
}

/// Starts nodemedic with `yaml` as its web configuration, ready once `ready_cert` (or no
/// certificate) with the password gets /healthz; returns the process and the port.
fn start_tls(
    tmp: &Path,
    pki: &Pki,
    yaml: &str,
    ready_cert: Option<&str>,
    extra: &str,
) -> (Proc, u16) {
    let file = tmp.join("web.yml");
    std::fs::write(&file, yaml).unwrap();
    let port = free_port();
    let ca = pki.path("ca.pem").display().to_string();
    let mut ready = strings(&["--cacert", &ca, "-u", &format!("{USER}:{PASSWORD}")]);
    if let Some(c) = ready_cert {
        ready.extend(client_cert(pki, c));
    }
    ready.push(format!("https://127.0.0.1:{port}/healthz"));
    let p = start_with(
        tmp,
        &[
            "--web.config.file".into(),
            file.display().to_string(),
            "--web.listen-address".into(),
            format!("127.0.0.1:{port}"),
        ],
        &ready,
        extra,
    );
    (p, port)
}

/// `curl` with the CA, the password and optionally a client certificate.
fn curl_as(pki: &Pki, port: u16, cert: Option<&str>) -> (i32, u16, String) {
    let ca = pki.path("ca.pem").display().to_string();
    let mut a = strings(&["--cacert", &ca, "-u", &format!("{USER}:{PASSWORD}")]);
    if let Some(c) = cert {
        a.extend(client_cert(pki, c));
    }
    a.push(format!("https://127.0.0.1:{port}/metrics"));
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    curl(&a)
}

/// client_allowed_sans: the CA-signed client certificate (SAN `scraper.example`) is turned
/// away when only another name is allowed, and let in when its own name is.
#[test]
fn client_allowed_sans_picks_among_ca_signed_certificates() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new(tmp.path());
    let base = web_config(&pki, Some("RequireAndVerifyClientCert"));
    let with_sans = |sans: &str| {
        base.replace(
            "http_server_config:",
            &format!("  client_allowed_sans: {sans}\nhttp_server_config:"),
        )
    };
    let (nm, port) = start_tls(
        tmp.path(),
        &pki,
        &with_sans("[scraper.example, other.example]"),
        Some("client"),
        "",
    );
    let (_, code, body) = curl_as(&pki, port, Some("client"));
    assert_eq!(code, 200, "its own name allowed: {body}");

    // The same server, its file edited to allow another name only: re-read, and the
    // certificate is turned away.
    std::fs::write(tmp.path().join("web.yml"), with_sans("[other.example]")).unwrap();
    let what = "a certificate naming none of client_allowed_sans to be turned away";
    poll_until(Instant::now() + DEADLINE, what, || {
        match curl_as(&pki, port, Some("client")) {
            (exit, code, _) if code != 200 && exit != 0 => Ok(()),
            (_, code, _) => Err(format!("still HTTP {code}: {}", nm.log())),
        }
    });
}

/// RequireAnyClientCert, Go's meaning: some certificate is required, but no CA checks it
/// (a self-signed one gets in); none at all fails the handshake.
#[test]
fn require_any_client_cert_takes_any_certificate_but_not_none() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new(tmp.path());
    let yaml = web_config(&pki, None).replace(
        "http_server_config:",
        "  client_auth_type: RequireAnyClientCert\nhttp_server_config:",
    );
    let (_nm, port) = start_tls(tmp.path(), &pki, &yaml, Some("rogue"), "");
    let (_, code, body) = curl_as(&pki, port, Some("rogue"));
    assert_eq!(code, 200, "a self-signed client certificate: {body}");
    let (exit, code, _) = curl_as(&pki, port, None);
    assert!(
        code == 0 && exit != 0,
        "no client certificate: curl exit {exit}, HTTP {code}"
    );
}

/// A client that stalls in the middle of the TLS handshake is closed by the server within
/// the header timeout (the handshake runs in the connection's task, under that bound), and
/// the endpoint keeps serving.
#[test]
fn a_stalled_tls_handshake_is_closed_within_the_header_timeout() {
    use std::io::{Read, Write};
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new(tmp.path());
    let (_nm, port) = start_tls(
        tmp.path(),
        &pki,
        &web_config(&pki, None),
        None,
        "[web]\nheader_read_timeout = \"1s\"\n",
    );
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    // The first bytes of a TLS record header, then nothing.
    conn.write_all(&[0x16, 0x03, 0x01]).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
    let mut buf = [0u8; 64];
    match conn.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("a stalled handshake was not closed by the server: {other:?}"),
    }
    let (_, code, body) = curl_as(&pki, port, None);
    assert_eq!(code, 200, "{body}");
}

/// The `Basic` scheme is matched case-insensitively (RFC 7617), as Go's `BasicAuth` does for
/// node_exporter: a client sending `basic` is not refused.
#[test]
fn the_basic_scheme_is_case_insensitive() {
    use base64::Engine;
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new(tmp.path());
    let (_nm, port) = start_tls(tmp.path(), &pki, &web_config(&pki, None), None, "");
    let ca = pki.path("ca.pem").display().to_string();
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
    let url = format!("https://127.0.0.1:{port}/metrics");
    for scheme in ["basic", "BASIC"] {
        let h = format!("Authorization: {scheme} {token}");
        let (_, code, body) = curl(&["--cacert", &ca, "-H", &h, &url]);
        assert_eq!(code, 200, "{scheme}: {body}");
    }
    let wrong = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:nope"));
    let (_, code, _) = curl(&[
        "--cacert",
        &ca,
        "-H",
        &format!("Authorization: basic {wrong}"),
        &url,
    ]);
    assert_eq!(code, 401);
}

/// The TLS 1.2 cipher `openssl s_client` negotiates when it prefers ChaCha20 over AES-GCM.
fn negotiated_tls12_cipher(pki: &Pki, port: u16) -> String {
    let out = Command::new("openssl")
        .args([
            "s_client",
            "-tls1_2",
            "-connect",
            &format!("127.0.0.1:{port}"),
        ])
        .args([
            "-cipher",
            "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-ECDSA-AES128-GCM-SHA256",
        ])
        .arg("-CAfile")
        .arg(pki.path("ca.pem"))
        .stdin(Stdio::null())
        .output()
        .expect("running openssl s_client");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    text.lines()
        .find_map(|l| l.trim().strip_prefix("Cipher    : "))
        .unwrap_or_else(|| panic!("no cipher in s_client output: {text}"))
        .to_string()
}

/// prefer_server_cipher_suites (exporter-toolkit's default true): the file's cipher_suites
/// order wins over the client's; `false` lets the client's preference win.
#[test]
fn prefer_server_cipher_suites_decides_whose_order_wins() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new(tmp.path());
    // web_config lists AES-128-GCM before ChaCha20; the client asks for ChaCha20 first.
    let base = web_config(&pki, None);
    assert!(
        base.contains("[TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_ECDSA_WITH_CHACHA20")
    );
    for (setting, expected) in [
        ("", "ECDHE-ECDSA-AES128-GCM-SHA256"),
        (
            "  prefer_server_cipher_suites: false\n",
            "ECDHE-ECDSA-CHACHA20-POLY1305",
        ),
    ] {
        let yaml = base.replace(
            "http_server_config:",
            &format!("{setting}http_server_config:"),
        );
        let (_nm, port) = start_tls(tmp.path(), &pki, &yaml, None, "");
        assert_eq!(
            negotiated_tls12_cipher(&pki, port),
            expected,
            "with {setting:?}"
        );
    }
}

/// The Helm chart's `webConfig.secretName` (deploy/helm/nodemedic): the Secret's files as the
/// kubelet mounts them (a timestamped directory, `..data` pointing at it, each key a symlink
/// through `..data`), the file naming its certificate relatively, as docs/web-config.md shows.
/// An update of the Secret swaps `..data` to a new directory in one rename and deletes the
/// old one: the new certificate is served without a restart, and nothing fails meanwhile.
#[test]
fn a_secret_volume_update_swapping_data_is_served_without_a_restart() {
    use std::os::unix::fs::symlink;
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new(tmp.path());
    let mount = tmp.path().join("web");
    std::fs::create_dir(&mount).unwrap();
    let yaml = format!(
        "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\nbasic_auth_users:\n  {USER}: '{}'\n",
        bcrypt_hash(PASSWORD)
    );
    let version = |name: &str, pki: &Pki| {
        let dir = mount.join(name);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("web-config.yml"), &yaml).unwrap();
        std::fs::copy(pki.path("server.pem"), dir.join("tls.crt")).unwrap();
        std::fs::copy(pki.path("server.key"), dir.join("tls.key")).unwrap();
    };
    version("..2026_11_23_10_00_00.1", &pki);
    symlink("..2026_11_23_10_00_00.1", mount.join("..data")).unwrap();
    for key in ["web-config.yml", "tls.crt", "tls.key"] {
        symlink(format!("..data/{key}"), mount.join(key)).unwrap();
    }
    let port = free_port();
    let ca = pki.path("ca.pem").display().to_string();
    let creds = format!("{USER}:{PASSWORD}");
    let healthz = format!("https://127.0.0.1:{port}/healthz");
    let nm = start(
        tmp.path(),
        &[
            "--web.config.file".into(),
            mount.join("web-config.yml").display().to_string(),
            "--web.listen-address".into(),
            format!("127.0.0.1:{port}"),
        ],
        &strings(&["--cacert", &ca, "-u", &creds, &healthz]),
    );
    assert!(
        served_subject(port).contains("server-1"),
        "{}",
        served_subject(port)
    );

    // The kubelet's update: a new timestamped directory, `..data` renamed over, the old
    // directory removed.
    let pki2 = pki.next_server(&tmp.path().join("next"), "server-2");
    version("..2026_11_23_11_00_00.2", &pki2);
    symlink("..2026_11_23_11_00_00.2", mount.join("..data_tmp")).unwrap();
    std::fs::rename(mount.join("..data_tmp"), mount.join("..data")).unwrap();
    std::fs::remove_dir_all(mount.join("..2026_11_23_10_00_00.1")).unwrap();
    wait_for_served(port, "server-2", &nm);
    assert_eq!(curl(&["--cacert", &ca, "-u", &creds, &healthz]).1, 200);
    let w = web_config_status(port, &ca);
    assert_eq!(w["reloads_total"], 1, "{w}");
    assert!(w.get("last_error").is_some_and(Value::is_null), "{w}");
}
