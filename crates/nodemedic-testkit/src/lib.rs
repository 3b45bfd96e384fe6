//! What nodemedic's tests share: the fixture trees under `tests/fixtures` (their paths, copies a
//! test may damage, and, with the `collect` feature, snapshots read from them), polling until a
//! deadline, a child process that cannot outlive its test, a seeded random sequence, and the
//! guard of the tests that move this machine's real IRQs (one at a time, put back even when a
//! test dies).
//!
//! A dev-dependency only. It names no nodemedic crate unless the `collect` feature is on, so
//! that the crates below nodemedic-collect can use it in their own unit tests.

#![allow(clippy::panic, clippy::expect_used)]

mod child;
mod fixture;
mod poll;
mod real_irqs;
mod rng;

pub use child::ChildGuard;
pub use fixture::{copy_fixture, fixture, fixtures_dir, workspace_root};
#[cfg(feature = "collect")]
pub use fixture::{fixture_paths, fixture_snapshot, FixtureSnapshot};
pub use poll::poll_until;
pub use real_irqs::{RealIrqs, JOURNAL as REAL_IRQS_JOURNAL};
pub use rng::XorShift64;
