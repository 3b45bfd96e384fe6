//! The endpoint's security, from the Prometheus exporter-toolkit web configuration file
//! (`--web.config.file`, the same YAML node_exporter and Prometheus read): TLS with rustls,
//! client certificates, bcrypt basic auth and extra response headers.
//!
//! The file and the files it names are watched: a change is loaded for the next connection
//! (certificates rotate without a restart); a change that does not load keeps the last good
//! configuration, is logged and shown on `/status`. At start a bad file is an error naming the
//! field. What rustls cannot do that Go's TLS can (TLS 1.0/1.1, CBC and RSA key exchange
//! suites, P-521) is said in the error, or in a warning where the effective result is stricter
//! than asked (`min_version: TLS10`): docs/web-config.md.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use axum::http::{HeaderName, HeaderValue};
use rustls::crypto::ring as provider;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DistinguishedName, RootCertStore, ServerConfig, SupportedCipherSuite};
use serde::Deserialize;

/// A web configuration file that cannot be used, with the field it is about.
#[derive(Debug, thiserror::Error)]
pub enum WebConfigError {
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("{path}: {field}: {reason}")]
    Field {
        path: PathBuf,
        field: &'static str,
        reason: String,
    },
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    #[serde(default)]
    tls_server_config: Option<TlsFile>,
    #[serde(default)]
    http_server_config: Option<HttpFile>,
    #[serde(default)]
    basic_auth_users: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsFile {
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    /// Inline PEM (exporter-toolkit 0.10+).
    cert: Option<String>,
    key: Option<String>,
    client_auth_type: Option<String>,
    client_ca_file: Option<PathBuf>,
    #[serde(default)]
    client_allowed_sans: Vec<String>,
    min_version: Option<String>,
    max_version: Option<String>,
    #[serde(default)]
    cipher_suites: Vec<String>,
    /// Go's flag; rustls always prefers the server's order.
    #[allow(dead_code)]
    prefer_server_cipher_suites: Option<bool>,
    #[serde(default)]
    curve_preferences: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpFile {
    /// nodemedic serves HTTP/1.1 only; accepted for files shared with other exporters.
    #[allow(dead_code)]
    http2: Option<bool>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

/// The headers exporter-toolkit allows in `http_server_config.headers`; others are refused
/// there, so they are here too (a file must mean the same to both).
const ALLOWED_HEADERS: [&str; 5] = [
    "Strict-Transport-Security",
    "X-Content-Type-Options",
    "X-Frame-Options",
    "X-XSS-Protection",
    "Content-Security-Policy",
];

/// One loaded configuration.
pub struct WebSecurity {
    pub tls: Option<Arc<ServerConfig>>,
    /// Client certificates must name one of these (DNS or IP SAN) when not empty.
    pub allowed_sans: Vec<String>,
    pub users: BTreeMap<String, String>,
    /// A hash of the users' highest cost: an unknown user is checked against it, so that it
    /// takes as long as a known one.
    dummy_hash: String,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Credentials that verified, by a digest of (user, password, hash): bcrypt costs tens of
    /// milliseconds by design, and Prometheus sends the same credentials every scrape.
    verified: Mutex<HashSet<[u8; 32]>>,
}

impl std::fmt::Debug for WebSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebSecurity")
            .field("tls", &self.tls.is_some())
            .field("users", &self.users.len())
            .field("headers", &self.headers.len())
            .finish_non_exhaustive()
    }
}

/// At most this many verified credentials are remembered; the set is emptied when full.
const VERIFIED_CACHE: usize = 1024;

impl WebSecurity {
    /// No TLS, no auth, no headers: the endpoint without `--web.config.file`.
    pub fn open() -> Self {
        Self {
            tls: None,
            allowed_sans: Vec::new(),
            users: BTreeMap::new(),
            dummy_hash: String::new(),
            headers: Vec::new(),
            verified: Mutex::new(HashSet::new()),
        }
    }

    pub fn needs_auth(&self) -> bool {
        !self.users.is_empty()
    }

    /// Whether `user`/`password` may in. Runs bcrypt (blocking: call it off the runtime).
    pub fn check_password(&self, user: &str, password: &str) -> bool {
        let known = self.users.get(user);
        let hash = known.map_or(self.dummy_hash.as_str(), String::as_str);
        let key = {
            let mut d = ring::digest::Context::new(&ring::digest::SHA256);
            for part in [user, password, hash] {
                d.update(&(part.len() as u64).to_le_bytes());
                d.update(part.as_bytes());
            }
            let mut k = [0u8; 32];
            k.copy_from_slice(d.finish().as_ref());
            k
        };
        if known.is_some()
            && self
                .verified
                .lock()
                .map(|v| v.contains(&key))
                .unwrap_or(false)
        {
            return true;
        }
        // Verified even for an unknown user (against the dummy hash), then refused.
        let ok = bcrypt::verify(password, hash).unwrap_or(false) && known.is_some();
        if ok {
            if let Ok(mut v) = self.verified.lock() {
                if v.len() >= VERIFIED_CACHE {
                    v.clear();
                }
                v.insert(key);
            }
        }
        ok
    }
}

/// Loads `path`. Relative paths inside it are relative to its directory, as for
/// exporter-toolkit.
pub fn load(path: &Path) -> Result<WebSecurity, WebConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| WebConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let file: FileConfig = serde_yaml_ng::from_str(&text).map_err(|e| WebConfigError::Syntax {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    let field = |field: &'static str, reason: String| WebConfigError::Field {
        path: path.to_path_buf(),
        field,
        reason,
    };
    let base = path.parent().unwrap_or(Path::new("."));
    let tls = file
        .tls_server_config
        .as_ref()
        .map(|t| tls_config(t, base, &field))
        .transpose()?;
    let mut headers = Vec::new();
    for (name, value) in file
        .http_server_config
        .as_ref()
        .map(|h| &h.headers)
        .into_iter()
        .flatten()
    {
        if !ALLOWED_HEADERS.iter().any(|h| h.eq_ignore_ascii_case(name)) {
            return Err(field(
                "http_server_config.headers",
                format!(
                    "{name:?} is not one of the headers exporter-toolkit allows ({})",
                    ALLOWED_HEADERS.join(", ")
                ),
            ));
        }
        let n = HeaderName::try_from(name.as_str())
            .map_err(|e| field("http_server_config.headers", format!("{name:?}: {e}")))?;
        let v = HeaderValue::try_from(value.as_str())
            .map_err(|e| field("http_server_config.headers", format!("{name}: {e}")))?;
        headers.push((n, v));
    }
    let mut cost = 0;
    for (user, hash) in &file.basic_auth_users {
        // The crate's own parser (version, cost, 22-character salt, 31-character hash); it
        // skips empty fields, so the leading `$` is checked here.
        let c = hash
            .starts_with('$')
            .then(|| hash.parse::<bcrypt::HashParts>().ok())
            .flatten()
            .map(|p| p.get_cost());
        match c {
            Some(c) if (4..=31).contains(&c) => cost = cost.max(c),
            _ => {
                return Err(field(
                    "basic_auth_users",
                    format!("{user}: not a bcrypt hash (\"$2y$<cost>$…\", e.g. from `htpasswd -nBC 10 {user}`)"),
                ))
            }
        }
    }
    let dummy_hash = if file.basic_auth_users.is_empty() {
        String::new()
    } else {
        bcrypt::hash("nodemedic: no such user", cost).map_err(|e| {
            field(
                "basic_auth_users",
                format!("cannot hash at cost {cost}: {e}"),
            )
        })?
    };
    Ok(WebSecurity {
        allowed_sans: file
            .tls_server_config
            .map(|t| t.client_allowed_sans)
            .unwrap_or_default(),
        tls: tls.map(Arc::new),
        users: file.basic_auth_users,
        dummy_hash,
        headers,
        verified: Mutex::new(HashSet::new()),
    })
}

fn tls_config(
    t: &TlsFile,
    base: &Path,
    field: &impl Fn(&'static str, String) -> WebConfigError,
) -> Result<ServerConfig, WebConfigError> {
    let (certs, key) = certificate_and_key(t, base, field)?;
    let versions = versions(t, field)?;
    let provider = Arc::new(crypto_provider(t, field)?);
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| field("tls_server_config.cipher_suites", e.to_string()))?;
    let auth = t.client_auth_type.as_deref().unwrap_or("NoClientCert");
    let verifier = client_verifier(t, auth, base, provider, field)?;
    check_allowed_sans(t, auth, field)?;
    let builder = match verifier {
        Some(v) => builder.with_client_cert_verifier(v),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(certs, key).map_err(|e| {
        field(
            "tls_server_config.key_file",
            format!("does not match the certificate: {e}"),
        )
    })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    // Go's PreferServerCipherSuites, exporter-toolkit's default true. rustls follows the
    // client's order unless told otherwise.
    config.ignore_client_order = t.prefer_server_cipher_suites.unwrap_or(true);
    Ok(config)
}

/// Reads a file the configuration names, relative to the configuration's directory.
fn read_named(
    base: &Path,
    name: &'static str,
    p: &Path,
    field: &impl Fn(&'static str, String) -> WebConfigError,
) -> Result<Vec<u8>, WebConfigError> {
    let p = base.join(p);
    std::fs::read(&p).map_err(|e| field(name, format!("{}: {e}", p.display())))
}

/// The server's certificate chain and private key, each from a file or inline PEM
/// (exporter-toolkit 0.10+), exactly one of them.
fn certificate_and_key(
    t: &TlsFile,
    base: &Path,
    field: &impl Fn(&'static str, String) -> WebConfigError,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), WebConfigError> {
    let pem = |file_field: &'static str,
               inline_field: &'static str,
               file: &Option<PathBuf>,
               inline: &Option<String>| match (file, inline) {
        (Some(p), None) => read_named(base, file_field, p, field),
        (None, Some(text)) => Ok(text.clone().into_bytes()),
        (Some(_), Some(_)) => Err(field(
            inline_field,
            format!("set {file_field} or {inline_field}, not both"),
        )),
        (None, None) => Err(field(file_field, "required for TLS".into())),
    };
    let cert_pem = pem(
        "tls_server_config.cert_file",
        "tls_server_config.cert",
        &t.cert_file,
        &t.cert,
    )?;
    let key_pem = pem(
        "tls_server_config.key_file",
        "tls_server_config.key",
        &t.key_file,
        &t.key,
    )?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| field("tls_server_config.cert_file", format!("bad PEM: {e}")))?;
    if certs.is_empty() {
        return Err(field(
            "tls_server_config.cert_file",
            "no CERTIFICATE in it".into(),
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        field(
            "tls_server_config.key_file",
            format!("no usable private key: {e}"),
        )
    })?;
    Ok((certs, key))
}

/// ring's provider, narrowed to the configured cipher suites and curves.
fn crypto_provider(
    t: &TlsFile,
    field: &impl Fn(&'static str, String) -> WebConfigError,
) -> Result<CryptoProvider, WebConfigError> {
    let mut p = provider::default_provider();
    if !t.cipher_suites.is_empty() {
        p.cipher_suites = cipher_suites(&p.cipher_suites, &t.cipher_suites, field)?;
    }
    if !t.curve_preferences.is_empty() {
        let mut groups = Vec::new();
        for name in &t.curve_preferences {
            let g = match name.as_str() {
                "X25519" => provider::kx_group::X25519,
                "CurveP256" => provider::kx_group::SECP256R1,
                "CurveP384" => provider::kx_group::SECP384R1,
                other => {
                    return Err(field(
                        "tls_server_config.curve_preferences",
                        format!("{other} is not supported (X25519, CurveP256, CurveP384)"),
                    ))
                }
            };
            groups.push(g);
        }
        p.kx_groups = groups;
    }
    Ok(p)
}

/// The suites of `offered` that `names` picks, with every TLS 1.3 suite: Go applies
/// cipher_suites to TLS 1.2 only; TLS 1.3's suites are not configurable.
fn cipher_suites(
    offered: &[SupportedCipherSuite],
    names: &[String],
    field: &impl Fn(&'static str, String) -> WebConfigError,
) -> Result<Vec<SupportedCipherSuite>, WebConfigError> {
    let mut picked: Vec<SupportedCipherSuite> = offered
        .iter()
        .filter(|s| s.version() == &rustls::version::TLS13)
        .copied()
        .collect();
    for name in names {
        // Go spells the ChaCha suites with and without `_SHA256`; rustls with it.
        let s = offered
            .iter()
            .filter(|s| s.version() == &rustls::version::TLS12)
            .find(|s| {
                let n = format!("{:?}", s.suite());
                n == *name || n == format!("{name}_SHA256")
            })
            .ok_or_else(|| {
                field(
                    "tls_server_config.cipher_suites",
                    format!(
                        "{name} is not supported (rustls offers the ECDHE AEAD suites only: {})",
                        offered
                            .iter()
                            .filter(|s| s.version() == &rustls::version::TLS12)
                            .map(|s| format!("{:?}", s.suite()))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            })?;
        picked.push(*s);
    }
    Ok(picked)
}

/// The client CA certificates; `None` when no client CA is configured and `required` is
/// false.
fn client_roots(
    t: &TlsFile,
    auth: &str,
    required: bool,
    base: &Path,
    field: &impl Fn(&'static str, String) -> WebConfigError,
) -> Result<Option<RootCertStore>, WebConfigError> {
    let Some(ca) = &t.client_ca_file else {
        return if required {
            Err(field(
                "tls_server_config.client_ca_file",
                format!("client_auth_type {auth} needs a client CA"),
            ))
        } else {
            Ok(None)
        };
    };
    let pem = read_named(base, "tls_server_config.client_ca_file", ca, field)?;
    let mut store = RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(&pem) {
        let c =
            c.map_err(|e| field("tls_server_config.client_ca_file", format!("bad PEM: {e}")))?;
        store
            .add(c)
            .map_err(|e| field("tls_server_config.client_ca_file", e.to_string()))?;
    }
    if store.is_empty() {
        return Err(field(
            "tls_server_config.client_ca_file",
            "no CERTIFICATE in it".into(),
        ));
    }
    Ok(Some(store))
}

/// How client certificates are checked, by `client_auth_type` (Go's names); `None` when
/// none is asked for.
fn client_verifier(
    t: &TlsFile,
    auth: &str,
    base: &Path,
    provider: Arc<CryptoProvider>,
    field: &impl Fn(&'static str, String) -> WebConfigError,
) -> Result<Option<Arc<dyn ClientCertVerifier>>, WebConfigError> {
    match auth {
        "NoClientCert" => {
            if t.client_ca_file.is_some() {
                return Err(field(
                    "tls_server_config.client_auth_type",
                    "client_ca_file is set but NoClientCert verifies nothing; use RequireAndVerifyClientCert or VerifyClientCertIfGiven".into(),
                ));
            }
            Ok(None)
        }
        "RequestClientCert" | "RequireAnyClientCert" => Ok(Some(Arc::new(AnyClientCert {
            mandatory: auth == "RequireAnyClientCert",
            provider,
        }))),
        "VerifyClientCertIfGiven" | "RequireAndVerifyClientCert" => {
            let store = client_roots(t, auth, true, base, field)?.unwrap_or_else(RootCertStore::empty);
            let b = WebPkiClientVerifier::builder_with_provider(Arc::new(store), provider);
            let b = if auth == "VerifyClientCertIfGiven" {
                b.allow_unauthenticated()
            } else {
                b
            };
            Ok(Some(b.build().map_err(|e| {
                field("tls_server_config.client_ca_file", e.to_string())
            })?))
        }
        other => Err(field(
            "tls_server_config.client_auth_type",
            format!("{other:?} is not one of NoClientCert, RequestClientCert, RequireAnyClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert"),
        )),
    }
}

/// client_allowed_sans is checked on a CA-verified certificate; without one every
/// connection would be turned away after its handshake, silently. And only names webpki
/// can match (DNS names, IP addresses) can ever match: anything else is a typo or an
/// e-mail/URI SAN, refused here rather than never matching.
fn check_allowed_sans(
    t: &TlsFile,
    auth: &str,
    field: &impl Fn(&'static str, String) -> WebConfigError,
) -> Result<(), WebConfigError> {
    if t.client_allowed_sans.is_empty() {
        return Ok(());
    }
    if !matches!(
        auth,
        "VerifyClientCertIfGiven" | "RequireAndVerifyClientCert"
    ) {
        return Err(field(
            "tls_server_config.client_allowed_sans",
            format!("needs client_auth_type RequireAndVerifyClientCert or VerifyClientCertIfGiven (it is {auth})"),
        ));
    }
    for name in &t.client_allowed_sans {
        if rustls::pki_types::ServerName::try_from(name.as_str()).is_err() {
            return Err(field(
                "tls_server_config.client_allowed_sans",
                format!("{name:?}: only DNS names and IP addresses can be matched"),
            ));
        }
    }
    Ok(())
}

fn versions(
    t: &TlsFile,
    field: &impl Fn(&'static str, String) -> WebConfigError,
) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, WebConfigError> {
    let rank = |f: &'static str, v: &str| -> Result<u8, WebConfigError> {
        match v {
            "TLS10" => Ok(10),
            "TLS11" => Ok(11),
            "TLS12" => Ok(12),
            "TLS13" => Ok(13),
            other => Err(field(
                f,
                format!("{other:?} is not one of TLS10, TLS11, TLS12, TLS13"),
            )),
        }
    };
    let min = t
        .min_version
        .as_deref()
        .map(|v| rank("tls_server_config.min_version", v))
        .transpose()?
        .unwrap_or(12);
    let max = t
        .max_version
        .as_deref()
        .map(|v| rank("tls_server_config.max_version", v))
        .transpose()?
        .unwrap_or(13);
    if min < 12 {
        tracing::warn!(
            min_version = ?t.min_version,
            "rustls speaks TLS 1.2 and 1.3 only: the effective minimum is TLS12"
        );
    }
    if max < 12 {
        return Err(field(
            "tls_server_config.max_version",
            "rustls speaks TLS 1.2 and 1.3 only".into(),
        ));
    }
    if min.max(12) > max {
        return Err(field(
            "tls_server_config.min_version",
            "is above max_version".into(),
        ));
    }
    Ok(
        [(12, &rustls::version::TLS12), (13, &rustls::version::TLS13)]
            .into_iter()
            .filter(|(v, _)| *v >= min.max(12) && *v <= max)
            .map(|(_, v)| v)
            .collect(),
    )
}

/// Go's `RequestClientCert`/`RequireAnyClientCert`: a client certificate is asked for (and
/// required, for the second) but not checked against any CA; the handshake signature still
/// proves the client holds its key.
#[derive(Debug)]
struct AnyClientCert {
    mandatory: bool,
    provider: Arc<CryptoProvider>,
}

impl ClientCertVerifier for AnyClientCert {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Whether a verified client certificate names one of `allowed` (DNS or IP SAN).
pub fn san_allowed(cert: &CertificateDer<'_>, allowed: &[String]) -> bool {
    if allowed.is_empty() {
        return true;
    }
    let Ok(ee) = webpki::EndEntityCert::try_from(cert) else {
        return false;
    };
    allowed.iter().any(|name| {
        rustls::pki_types::ServerName::try_from(name.as_str())
            .is_ok_and(|n| ee.verify_is_valid_for_subject_name(&n).is_ok())
    })
}

/// (mtime, size, inode) of a file, `None` when it cannot be read.
type Stamp = Option<(SystemTime, u64, u64)>;

fn stamp(path: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len(), m.ino()))
}

/// The files a configuration depends on: the file itself and the PEM files it names.
fn dependencies(path: &Path) -> Vec<PathBuf> {
    let mut out = vec![path.to_path_buf()];
    let base = path.parent().unwrap_or(Path::new("."));
    if let Ok(text) = std::fs::read_to_string(path) {
        if let Ok(f) = serde_yaml_ng::from_str::<FileConfig>(&text) {
            if let Some(t) = f.tls_server_config {
                out.extend(
                    [t.cert_file, t.key_file, t.client_ca_file]
                        .into_iter()
                        .flatten()
                        .map(|p| base.join(p)),
                );
            }
        }
    }
    out
}

/// What `/status` shows about the web configuration.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct WebConfigStatus {
    pub file: Option<PathBuf>,
    pub tls: bool,
    pub basic_auth_users: usize,
    /// Unix time of the last successful load.
    pub loaded_at: Option<f64>,
    pub reloads_total: u64,
    /// Why the last change could not be loaded (the previous configuration is in use).
    pub last_error: Option<String>,
}

struct Watched {
    stamps: Vec<(PathBuf, Stamp)>,
    status: WebConfigStatus,
}

/// The current configuration, re-read when the file or a file it names changes.
pub struct WebConfigWatch {
    path: Option<PathBuf>,
    current: RwLock<Arc<WebSecurity>>,
    watched: Mutex<Watched>,
}

/// How often [`WebConfigWatch::watch`] looks for changes.
const CHECK_EVERY: Duration = Duration::from_secs(1);

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl WebConfigWatch {
    /// Loads `path` (none: an open endpoint). A file that does not load is an error.
    pub fn new(path: Option<&Path>) -> Result<Self, WebConfigError> {
        let security = match path {
            Some(p) => load(p)?,
            None => WebSecurity::open(),
        };
        let status = WebConfigStatus {
            file: path.map(Path::to_path_buf),
            tls: security.tls.is_some(),
            basic_auth_users: security.users.len(),
            loaded_at: path.map(|_| unix_now()),
            ..Default::default()
        };
        let stamps = path
            .map(|p| {
                dependencies(p)
                    .into_iter()
                    .map(|d| {
                        let s = stamp(&d);
                        (d, s)
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(Self {
            path: path.map(Path::to_path_buf),
            current: RwLock::new(Arc::new(security)),
            watched: Mutex::new(Watched { stamps, status }),
        })
    }

    pub fn status(&self) -> WebConfigStatus {
        self.watched
            .lock()
            .map(|w| w.status.clone())
            .unwrap_or_default()
    }

    /// The configuration for a new connection (the last one that loaded).
    pub fn current(&self) -> Arc<WebSecurity> {
        self.current
            .read()
            .map(|c| c.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// Reloads the file when it or a file it names changed, checked every [`CHECK_EVERY`]
    /// on the blocking pool: the `stat`s, the YAML, the certificates and the bcrypt of the
    /// dummy hash never run on the task that serves requests. Returns when the runtime
    /// shuts down; at once without a file.
    pub async fn watch(self: Arc<Self>) {
        let Some(path) = self.path.clone() else {
            return;
        };
        let mut every = tokio::time::interval(CHECK_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let (me, path) = (self.clone(), path.clone());
            if tokio::task::spawn_blocking(move || me.reload_if_changed(&path))
                .await
                .is_err()
            {
                return;
            }
        }
    }

    fn reload_if_changed(&self, path: &Path) {
        let Ok(mut w) = self.watched.lock() else {
            return;
        };
        if w.stamps.iter().all(|(p, s)| stamp(p) == *s) {
            return;
        }
        w.stamps = dependencies(path)
            .into_iter()
            .map(|d| {
                let s = stamp(&d);
                (d, s)
            })
            .collect();
        match load(path) {
            Ok(security) => {
                tracing::info!(file = %path.display(), tls = security.tls.is_some(), users = security.users.len(), "web configuration reloaded");
                w.status.tls = security.tls.is_some();
                w.status.basic_auth_users = security.users.len();
                w.status.loaded_at = Some(unix_now());
                w.status.reloads_total += 1;
                w.status.last_error = None;
                if let Ok(mut c) = self.current.write() {
                    *c = Arc::new(security);
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "web configuration changed but does not load; keeping the previous one");
                w.status.last_error = Some(e.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn users_file(dir: &Path, hashes: &[(&str, &str)]) -> PathBuf {
        let mut y = String::from("basic_auth_users:\n");
        for (u, h) in hashes {
            y.push_str(&format!("  {u}: '{h}'\n"));
        }
        let p = dir.join("web.yml");
        std::fs::write(&p, y).unwrap();
        p
    }

    #[test]
    fn client_allowed_sans_needs_a_verified_certificate_and_matchable_names() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let ok = std::process::Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
            ])
            .args(["-nodes", "-days", "1", "-subj", "/CN=t", "-keyout"])
            .arg(d.join("k.pem"))
            .arg("-out")
            .arg(d.join("c.pem"))
            .output()
            .unwrap()
            .status
            .success();
        assert!(ok, "openssl");
        std::fs::copy(d.join("c.pem"), d.join("ca.pem")).unwrap();
        let try_load = |extra: &str| {
            let p = d.join("web.yml");
            std::fs::write(
                &p,
                format!("tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n{extra}"),
            )
            .unwrap();
            load(&p).map(|_| ()).map_err(|e| e.to_string())
        };
        let e = try_load("  client_allowed_sans: [a.example]\n").unwrap_err();
        assert!(
            e.contains("client_allowed_sans") && e.contains("NoClientCert"),
            "{e}"
        );
        let e = try_load(
            "  client_auth_type: RequireAnyClientCert\n  client_allowed_sans: [a.example]\n",
        )
        .unwrap_err();
        assert!(e.contains("client_allowed_sans"), "{e}");
        let verify = "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n";
        let e = try_load(&format!(
            "{verify}  client_allowed_sans: [\"ops@example.com\"]\n"
        ))
        .unwrap_err();
        assert!(e.contains("ops@example.com"), "{e}");
        try_load(&format!(
            "{verify}  client_allowed_sans: [a.example, 10.0.0.1]\n"
        ))
        .unwrap();
    }

    /// An unknown user is checked against a hash of the highest cost among the users, so it
    /// costs as much bcrypt work as a wrong password of the slowest user; and a verified
    /// password is remembered only for the user it belongs to.
    #[test]
    fn unknown_users_cost_a_bcrypt_of_the_highest_cost_and_only_successes_are_cached() {
        let dir = tempfile::tempdir().unwrap();
        let fast = bcrypt::hash("a", 4).unwrap();
        let slow = bcrypt::hash("b", 6).unwrap();
        let sec = load(&users_file(dir.path(), &[("fast", &fast), ("slow", &slow)])).unwrap();
        assert!(sec.dummy_hash.starts_with("$2b$06$"), "{}", sec.dummy_hash);
        assert!(!sec.check_password("nobody", "a"));
        assert!(!sec.check_password("fast", "b"));
        assert!(
            sec.verified.lock().unwrap().is_empty(),
            "failures are not cached"
        );
        assert!(sec.check_password("fast", "a"));
        assert!(sec.check_password("slow", "b"));
        assert_eq!(sec.verified.lock().unwrap().len(), 2);
        assert!(
            !sec.check_password("slow", "a"),
            "fast's password is not slow's"
        );
        assert!(sec.check_password("fast", "a"), "cached");
    }

    #[test]
    fn go_version_and_suite_names_map_to_rustls_or_say_why_not() {
        let t = |min: &str, max: &str| TlsFile {
            min_version: Some(min.into()),
            max_version: Some(max.into()),
            ..Default::default()
        };
        let f = |field: &'static str, reason: String| WebConfigError::Field {
            path: PathBuf::from("web.yml"),
            field,
            reason,
        };
        assert_eq!(versions(&t("TLS10", "TLS13"), &f).unwrap().len(), 2);
        assert_eq!(
            versions(&t("TLS13", "TLS13"), &f).unwrap(),
            vec![&rustls::version::TLS13]
        );
        let e = versions(&t("TLS10", "TLS11"), &f).unwrap_err().to_string();
        assert!(e.contains("max_version"), "{e}");
        let e = versions(&t("SSL3", "TLS13"), &f).unwrap_err().to_string();
        assert!(e.contains("min_version") && e.contains("SSL3"), "{e}");
    }
}
