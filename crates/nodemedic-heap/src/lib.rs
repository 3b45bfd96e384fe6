//! The daemon's heap: no huge pages and glibc's tunables ([`tune_heap`]). The binary runs on
//! the C library's allocator (musl's in the shipped build).
//!
//! glibc's tunables have no safe wrapper in any library (`mallopt` is glibc's own, not a
//! system call): this crate allows unsafe code at its root for those two calls only, each with
//! a SAFETY comment. It needs no other nodemedic crate.
#![allow(unsafe_code)]

/// Tunes the heap for a small long-running daemon.
/// - No transparent huge pages, for either C library. Where THP is `always` (Debian's and
///   RHEL's kernels), khugepaged collapses any 2 MiB of anonymous memory that holds a single
///   resident page into a huge page (`max_ptes_none` 511 by default): a heap with a few live
///   blocks scattered through freed space grows by up to 2 MiB per collapse, at some time
///   after start and by a different amount each boot (BENCHMARKS.md, "A heap of its own for
///   the load, and no huge pages"). A 10 MiB daemon gains nothing from huge pages. The flag
///   is the process's, and its children's (the probes' loader).
///
/// And two for glibc's malloc, in a build from source on a glibc system (the shipped binary,
/// the image's and the `.deb`'s, is static musl, whose allocator has no arenas and unmaps free
/// pages itself), measured with bench/memory.py and tests/memory.rs (BENCHMARKS.md,
/// "Allocators, arenas, the mmap threshold and LTO"):
/// - Two arenas. glibc gives each thread that allocates under contention an arena of its own
///   and keeps freed memory there: with no cap a 1024-CPU tree held 53 MiB against 41.
/// - A fixed mmap threshold of 64 KiB. glibc raises its threshold to the size of every large
///   block freed (up to 32 MiB), after which large buffers come from the heap, where a freed
///   one stays: a fixed threshold keeps them mapped on their own and unmapped when freed.
pub fn tune_heap() {
    // Refused only by kernels before 3.15, where there is nothing to turn off.
    let _ = rustix::thread::disable_transparent_huge_pages(true);
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only changes an allocator tunable; it takes no pointers and is
        // safe to call at any time (glibc takes its own lock).
        let _ = unsafe { libc::mallopt(libc::M_ARENA_MAX, 2) };
        // SAFETY: as above.
        let _ = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 10) };
    }
}
