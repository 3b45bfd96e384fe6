//! Where the endpoint listens: `host:port` or `unix:/path`, as the command line and the
//! configuration file spell it.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Where the endpoint listens: `host:port`, or `unix:/path/to.sock`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// A listen address that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListenAddrError {
    #[error("{0:?}: a unix socket needs an absolute path (unix:/run/nodemedic.sock)")]
    RelativeSocket(String),
    #[error("{0:?} is neither host:port nor unix:/path ({1})")]
    Neither(String, std::net::AddrParseError),
}

impl std::str::FromStr for ListenAddr {
    type Err = ListenAddrError;
    fn from_str(s: &str) -> Result<Self, ListenAddrError> {
        if let Some(path) = s.strip_prefix("unix:") {
            if !path.starts_with('/') {
                return Err(ListenAddrError::RelativeSocket(s.to_string()));
            }
            return Ok(Self::Unix(PathBuf::from(path)));
        }
        s.parse::<SocketAddr>()
            .map(Self::Tcp)
            .map_err(|e| ListenAddrError::Neither(s.to_string(), e))
    }
}

impl std::fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Tcp(a) => write!(f, "{a}"),
            Self::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

impl Serialize for ListenAddr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ListenAddr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// One address or several (`listen_address = "…"` or `["…", "unix:/…"]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct ListenAddrs(pub Vec<ListenAddr>);

impl<'de> Deserialize<'de> for ListenAddrs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum OneOrMany {
            One(ListenAddr),
            Many(Vec<ListenAddr>),
        }
        Ok(Self(match OneOrMany::deserialize(d)? {
            OneOrMany::One(a) => vec![a],
            OneOrMany::Many(v) => v,
        }))
    }
}
