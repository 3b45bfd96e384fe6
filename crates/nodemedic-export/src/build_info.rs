//! What this binary is: its version, the commit it was built from, the compiler and the
//! target (build.rs says where each comes from). `nodemedic_build_info` exports them and
//! `nodemedic --version` prints them, from these constants, so the two cannot disagree.

/// The facts, as `nodemedic_build_info`'s labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuildInfo {
    pub version: &'static str,
    pub revision: &'static str,
    pub rustc: &'static str,
    pub target: &'static str,
}

impl BuildInfo {
    /// The labels in the order they are exported.
    pub fn labels(&self) -> [(&'static str, &'static str); 4] {
        [
            ("version", self.version),
            ("revision", self.revision),
            ("rustc", self.rustc),
            ("target", self.target),
        ]
    }
}

pub const BUILD_INFO: BuildInfo = BuildInfo {
    version: env!("CARGO_PKG_VERSION"),
    revision: env!("NODEMEDIC_REVISION"),
    rustc: env!("NODEMEDIC_RUSTC"),
    target: env!("NODEMEDIC_TARGET"),
};

/// `--version`'s text after the program's name: the same four facts.
pub const VERSION_LINE: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (revision ",
    env!("NODEMEDIC_REVISION"),
    ", rustc ",
    env!("NODEMEDIC_RUSTC"),
    ", target ",
    env!("NODEMEDIC_TARGET"),
    ")"
);
