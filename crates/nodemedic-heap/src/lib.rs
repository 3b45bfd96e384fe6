//! The daemon's heap: no transparent huge pages ([`tune_heap`]). The binary runs on the C
//! library's allocator (musl's in the shipped build), untuned by code: this crate has no unsafe
//! code and needs no other nodemedic crate.
//!
//! glibc's two tunables that a build from source on a glibc system wants (two arenas, a fixed
//! 64 KiB mmap threshold; measured in BENCHMARKS.md, "Allocators, arenas, the mmap threshold and
//! LTO") were `mallopt` calls here, the only unsafe code outside the io_uring ring and the
//! probes' ring buffer. Both shipped binaries (the `.deb`'s and the image's) are static musl,
//! whose allocator has no arenas and unmaps free pages itself, so no user ran them. A glibc
//! build sets them where glibc reads them before `main`, the environment (README, "Bare metal
//! (systemd)"):
//! `GLIBC_TUNABLES=glibc.malloc.arena_max=2:glibc.malloc.mmap_threshold=65536`.
//! - `glibc.malloc.arena_max=2`: glibc gives each thread that allocates under contention an
//!   arena of its own and keeps freed memory there; with no cap a 1024-CPU tree held 53 MiB
//!   against 41.
//! - `glibc.malloc.mmap_threshold=65536`: glibc raises its threshold to the size of every large
//!   block freed (up to 32 MiB), after which large buffers come from the heap, where a freed one
//!   stays; a fixed threshold (setting it turns the raising off) keeps them mapped on their own
//!   and unmapped when freed.

/// Tunes the heap for a small long-running daemon: no transparent huge pages, for either C
/// library. Where THP is `always` (Debian's and RHEL's kernels), khugepaged collapses any 2 MiB
/// of anonymous memory that holds a single resident page into a huge page (`max_ptes_none` 511
/// by default): a heap with a few live blocks scattered through freed space grows by up to
/// 2 MiB per collapse, at some time after start and by a different amount each boot
/// (BENCHMARKS.md, "No transparent huge pages"). A 10 MiB daemon gains nothing from huge pages.
/// The flag is the process's, and its children's (the probes' loader).
pub fn tune_heap() {
    // Refused only by kernels before 3.15, where there is nothing to turn off.
    let _ = rustix::thread::disable_transparent_huge_pages(true);
}
