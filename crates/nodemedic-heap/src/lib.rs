//! The daemon's heap: no huge pages and glibc's tunables ([`tune_heap`]), giving freed
//! memory back ([`release_free_memory`]), and a heap of its own for work whose memory should
//! end with it ([`OwnHeap`], the binary's global allocator, used for the eBPF probes' load).
//!
//! An allocator is nothing but unsafe code: this crate allows it at its root, and every
//! block says why it is sound. It needs no other nodemedic crate.
#![allow(unsafe_code)]

mod own_heap;

pub use own_heap::{OwnHeap, OwnHeapReport};

/// Tunes the heap for a small long-running daemon.
/// - No transparent huge pages, for either C library. Where THP is `always` (Debian's and
///   RHEL's kernels), khugepaged collapses any 2 MiB of anonymous memory that holds a single
///   resident page into a huge page (`max_ptes_none` 511 by default): a heap with a few live
///   blocks scattered through freed space grows by up to 2 MiB per collapse, at some time
///   after start and by a different amount each boot (BENCHMARKS.md, "A heap of its own for
///   the load, and no huge pages"). A 10 MiB daemon gains nothing from huge pages.
///
/// And two for glibc's malloc, in a build from source on a glibc system (the shipped binary,
/// the image's and the `.deb`'s, is static musl, whose allocator has no arenas and unmaps free
/// pages itself), measured with bench/memory.py and tests/memory.rs (BENCHMARKS.md,
/// "Allocators, arenas, the mmap threshold and LTO"):
/// - Two arenas. glibc gives each thread that allocates under contention an arena of its own
///   and keeps freed memory there: with no cap a 1024-CPU tree held 53 MiB against 41. One
///   arena saves another 1-2 MiB on big trees, but the probes' load then leaves 2.0-2.3 MiB of
///   its parse in the heap against 0.7 with two (likely because the sampler's allocations,
///   on their own thread, then land between the parse's).
/// - A fixed mmap threshold of 64 KiB. glibc raises its threshold to the size of every large
///   block freed (up to 32 MiB): after the probes' loader frees the kernel's BTF (5.5 MB on
///   Debian's kernel), every later large buffer came from the heap, where a freed one stays.
///   A fixed threshold keeps large buffers mapped on their own and unmapped when freed: the
///   load's leftover fell from 1.6 to 0.7 MiB and the peak (VmHWM) by 3-4 MiB.
pub fn tune_heap() {
    // SAFETY: prctl with PR_SET_THP_DISABLE takes integers only; it sets a flag of this
    // process (inherited by its children: `systemctl`, when the D-Bus path is unavailable).
    let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only changes an allocator tunable; it takes no pointers and is
        // safe to call at any time (glibc takes its own lock).
        let _ = unsafe { libc::mallopt(libc::M_ARENA_MAX, 2) };
        // SAFETY: as above.
        let _ = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 10) };
    }
}

/// Gives the allocator's free memory back to the system (glibc's `malloc_trim`). For a
/// one-off burst that is freed at once: loading the eBPF probes parses the kernel's BTF (5.5 MB
/// of it on a Debian kernel, tens of thousands of small allocations) and drops it whether the
/// probes attach or not. glibc keeps freed chunks in its heap for reuse and only returns the top
/// of it, so without this the `.deb`'s build held the parse for as long as it ran (27.5 against
/// 8.8 MiB for the image's musl build, whose allocator unmaps free pages itself: a no-op there).
/// `malloc_trim` also releases whole free pages inside the heap (`MADV_DONTNEED`), which is
/// what a fragmented heap needs.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim takes no pointers; it walks glibc's own arenas under their locks
        // and is safe to call from any thread at any time.
        let _ = unsafe { libc::malloc_trim(0) };
    }
}
