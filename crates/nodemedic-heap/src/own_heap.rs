//! A heap of its own for work whose memory should end with it.
//!
//! Loading the eBPF probes parses the kernel's BTF (4-6 MB) into tens of thousands of small
//! allocations and drops almost all of them when the load ends. In glibc's heap the few
//! objects the load keeps (the programs, the maps, the links) stay scattered through the space
//! the parse used: `malloc_trim` gives the free pages back, but the samples that follow
//! allocate into the gaps between those objects and make the pages resident again, 0.5 to 4
//! MiB of them, a different amount each boot (BENCHMARKS.md, "Where the probes attach").
//!
//! [`OwnHeap::run`] runs a closure with the small allocations of its thread taken from a
//! region of their own, by bumping a pointer. Each page of the region counts the live
//! allocations that overlap it. When the closure returns, every page that holds none goes back
//! to the kernel (`MADV_DONTNEED`), and a page whose last allocation is freed later goes back
//! then. Nothing outside a `run` allocates in the region, so what was given back stays given
//! back, whatever the C library's allocator does.
//!
//! Everything else goes to the C library's allocator ([`System`]): other threads, allocations
//! of [`SMALL`] bytes or more (glibc maps those on their own with `tune_heap`'s threshold,
//! musl from 128 KiB, and both unmap them when freed), and whatever no longer fits in the
//! region. Inside a `run` freed memory is reused only when it is the last block (the common
//! case of a temporary string or a growing vector); the rest waits for the end of the `run`.
//! On this machine the probes' load handed out 6.6 MiB of small blocks over 4.6 MiB of region
//! and kept 4 KiB (the debug log line "own heap of the probes' load").

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ops::Range;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicUsize, Ordering};

/// Allocations of this size and more never go to the region.
pub const SMALL: usize = 64 << 10;

/// The region's default size: address space only (`MAP_NORESERVE`), pages become memory when
/// they are touched.
const DEFAULT_RESERVE: usize = 64 << 20;

thread_local! {
    /// The address of the heap this thread is in a [`OwnHeap::run`] of; 0 outside a run.
    static IN_RUN: Cell<usize> = const { Cell::new(0) };
}

fn run_of() -> usize {
    // During a thread's teardown the slot may be gone: that thread is in no run.
    IN_RUN.try_with(Cell::get).unwrap_or(0)
}

/// The global allocator: the C library's, except inside [`OwnHeap::run`].
pub struct OwnHeap {
    reserve: usize,
    /// Held by the one thread inside a `run`; the region allocates for that thread only.
    claimed: AtomicBool,
    /// Start of the region (page-aligned); 0 until the first `run` maps it.
    base: AtomicUsize,
    end: AtomicUsize,
    /// The bump pointer. Only the claiming thread moves it.
    next: AtomicUsize,
    /// The highest the bump pointer went: pages above `next` up to here were touched.
    high: AtomicUsize,
    /// One counter per page of the region: the live allocations that overlap it.
    counts: AtomicPtr<AtomicU32>,
    page: AtomicUsize,
    /// The current run's bytes handed out and allocations that did not fit (its report).
    allocated: AtomicUsize,
    overflowed: AtomicUsize,
}

/// What a [`OwnHeap::run`] used and what it kept, for a log line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OwnHeapReport {
    /// Whether the run had the region (false: another run held it, or it could not be mapped;
    /// the closure then ran on the C library's allocator).
    pub own: bool,
    /// Bytes the region handed out during the run, reuse of a freed last block included.
    pub allocated: usize,
    /// The region's high-water mark after the run, from its start: what the run touched.
    pub spanned: usize,
    /// Bytes of pages still holding live allocations after the run: what stays resident.
    pub kept: usize,
    /// Allocations that did not fit in the region and went to the C library instead.
    pub overflowed: usize,
}

impl OwnHeap {
    /// The binary's allocator: `#[global_allocator] static HEAP: OwnHeap = OwnHeap::new();`.
    pub const fn new() -> Self {
        Self::with_reserve(DEFAULT_RESERVE)
    }

    /// An allocator whose region is `reserve` bytes of address space (tests use small ones).
    pub const fn with_reserve(reserve: usize) -> Self {
        OwnHeap {
            reserve,
            claimed: AtomicBool::new(false),
            base: AtomicUsize::new(0),
            end: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            high: AtomicUsize::new(0),
            counts: AtomicPtr::new(ptr::null_mut()),
            page: AtomicUsize::new(0),
            allocated: AtomicUsize::new(0),
            overflowed: AtomicUsize::new(0),
        }
    }

    /// Runs `f` with the small allocations of this thread taken from the region, then gives
    /// back every page of the region that holds no live allocation. If another thread is in a
    /// `run`, or the region cannot be mapped, `f` runs on the C library's allocator; so does
    /// a `run` nested in another.
    pub fn run<R>(&self, f: impl FnOnce() -> R) -> (R, OwnHeapReport) {
        if run_of() != 0 || !self.claim() {
            return (f(), OwnHeapReport::default());
        }
        self.allocated.store(0, Ordering::Relaxed);
        self.overflowed.store(0, Ordering::Relaxed);
        let result = {
            let _in = InRun::enter(self);
            f()
        };
        self.release_empty_pages();
        let base = self.base.load(Ordering::Relaxed);
        let report = OwnHeapReport {
            own: true,
            allocated: self.allocated.load(Ordering::Relaxed),
            spanned: self.high.load(Ordering::Relaxed) - base,
            kept: self.live_pages() * self.page.load(Ordering::Relaxed),
            overflowed: self.overflowed.load(Ordering::Relaxed),
        };
        self.claimed.store(false, Ordering::Release);
        (result, report)
    }

    /// Takes the region for this thread's run, mapping it on first use; false if another
    /// run holds it or it cannot be mapped.
    fn claim(&self) -> bool {
        if self
            .claimed
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        if !self.map() {
            self.claimed.store(false, Ordering::Release);
            return false;
        }
        true
    }

    /// Maps the region and its page counters on first use. Called by the claiming thread only.
    fn map(&self) -> bool {
        if self.base.load(Ordering::Acquire) != 0 {
            return true;
        }
        // SAFETY: sysconf reads a constant of the system; no pointers.
        let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
            p if p > 0 => p as usize,
            _ => return false,
        };
        let reserve = self.reserve.div_ceil(page) * page;
        let pages = reserve / page;
        let Some(data) = map_anonymous(reserve) else {
            return false;
        };
        let Some(counts) = map_anonymous(pages * std::mem::size_of::<AtomicU32>()) else {
            // SAFETY: `data` was mapped just above with this length and nothing uses it.
            unsafe { libc::munmap(data.cast(), reserve) };
            return false;
        };
        // Never a huge page: khugepaged would make a 2 MiB range around one kept page
        // resident again (`tune_heap` says the same for the whole process; this holds without
        // it). Advice only: a kernel without THP refuses it, harmlessly.
        // SAFETY: advice on a mapping made just above, whole pages.
        unsafe { libc::madvise(data.cast(), reserve, libc::MADV_NOHUGEPAGE) };
        self.page.store(page, Ordering::Relaxed);
        // Zero-filled anonymous memory is a valid array of AtomicU32 set to 0.
        self.counts.store(counts.cast(), Ordering::Relaxed);
        self.next.store(data as usize, Ordering::Relaxed);
        self.high.store(data as usize, Ordering::Relaxed);
        self.end.store(data as usize + reserve, Ordering::Relaxed);
        // Release: a thread that sees `base` sees the rest.
        self.base.store(data as usize, Ordering::Release);
        true
    }

    /// Whether this thread is in a run of this heap (and so holds its claim).
    fn in_run(&self) -> bool {
        run_of() == self as *const Self as usize
    }

    fn contains(&self, p: *mut u8) -> bool {
        let base = self.base.load(Ordering::Acquire);
        let p = p as usize;
        base != 0 && p >= base && p < self.end.load(Ordering::Relaxed)
    }

    /// The indices of the pages that `[start, stop)` overlaps (`stop > start`).
    fn pages(&self, start: usize, stop: usize) -> Range<usize> {
        let base = self.base.load(Ordering::Relaxed);
        let page = self.page.load(Ordering::Relaxed);
        (start - base) / page..(stop - 1 - base) / page + 1
    }

    fn counter(&self, index: usize) -> &AtomicU32 {
        // SAFETY: `index` comes from `pages` of an address inside the region, so it is below
        // the number of counters mapped in `map`; the counters live as long as `self` (the
        // region is never unmapped).
        unsafe { &*self.counts.load(Ordering::Relaxed).add(index) }
    }

    fn count(&self, pages: Range<usize>) {
        for i in pages {
            self.counter(i).fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Takes one allocation off `pages`; returns the pages that now hold none (they are
    /// contiguous: only the first and last can hold another allocation).
    fn uncount(&self, pages: Range<usize>) -> Range<usize> {
        let mut emptied = pages.end..pages.end;
        for i in pages {
            if self.counter(i).fetch_sub(1, Ordering::AcqRel) == 1 {
                if emptied.is_empty() {
                    emptied.start = i;
                }
                emptied.end = i + 1;
            }
        }
        emptied
    }

    /// Bump allocation for the thread in the run; null when the region is full.
    #[cold]
    fn bump(&self, layout: Layout) -> *mut u8 {
        let next = self.next.load(Ordering::Relaxed);
        let start = (next + layout.align() - 1) & !(layout.align() - 1);
        let stop = match start.checked_add(layout.size().max(1)) {
            Some(stop) if stop <= self.end.load(Ordering::Relaxed) => stop,
            _ => {
                self.overflowed.fetch_add(1, Ordering::Relaxed);
                return ptr::null_mut();
            }
        };
        self.count(self.pages(start, stop));
        self.advance(stop);
        self.allocated.fetch_add(stop - start, Ordering::Relaxed);
        start as *mut u8
    }

    #[cold]
    fn free(&self, p: *mut u8, size: usize) {
        let start = p as usize;
        let stop = start + size.max(1);
        let emptied = self.uncount(self.pages(start, stop));
        if self.in_run() && self.next.load(Ordering::Relaxed) == stop {
            // The last block of the run's thread: the next allocation reuses its space.
            self.next.store(start, Ordering::Release);
        } else {
            self.give_back(emptied);
        }
    }

    /// Resizes a block of the region where it is: any shrink, and a grow of the run's last
    /// block while it fits. None: the caller moves it.
    #[cold]
    fn resize_in_place(&self, p: *mut u8, old: usize, new: usize) -> Option<*mut u8> {
        if new >= SMALL {
            return None;
        }
        let start = p as usize;
        let old_stop = start + old.max(1);
        let new_stop = start + new.max(1);
        let last = self.in_run() && self.next.load(Ordering::Relaxed) == old_stop;
        let (old_pages, new_pages) = (self.pages(start, old_stop), self.pages(start, new_stop));
        if new_stop <= old_stop {
            let emptied = self.uncount(new_pages.end..old_pages.end);
            if last {
                self.next.store(new_stop, Ordering::Release);
            } else {
                self.give_back(emptied);
            }
            return Some(p);
        }
        if !last || new_stop > self.end.load(Ordering::Relaxed) {
            return None;
        }
        self.count(old_pages.end..new_pages.end);
        self.advance(new_stop);
        self.allocated
            .fetch_add(new_stop - old_stop, Ordering::Relaxed);
        Some(p)
    }

    fn advance(&self, next: usize) {
        self.next.store(next, Ordering::Release);
        if next > self.high.load(Ordering::Relaxed) {
            self.high.store(next, Ordering::Relaxed);
        }
    }

    /// Gives `pages` back to the kernel if no run can allocate in them again: outside a run,
    /// and wholly below the bump pointer (a page holding no allocation below it never gets
    /// one again: the pointer only moves back over a live block). Inside a run, the run's end
    /// gives back what is empty.
    fn give_back(&self, pages: Range<usize>) {
        if pages.is_empty() || self.claimed.load(Ordering::Acquire) {
            return;
        }
        let page = self.page.load(Ordering::Relaxed);
        let base = self.base.load(Ordering::Relaxed);
        let below = (self.next.load(Ordering::Acquire) - base) / page;
        let pages = pages.start..pages.end.min(below);
        if !pages.is_empty() {
            self.advise_free(pages);
        }
    }

    /// At the end of a run, before its claim is let go (nothing can allocate in the region):
    /// gives back every page the run touched that holds no allocation, in runs of neighbouring
    /// pages (one system call each).
    fn release_empty_pages(&self) {
        let touched = self.touched_pages();
        let mut start = None;
        for i in 0..=touched {
            let empty = i < touched && self.counter(i).load(Ordering::Acquire) == 0;
            match (empty, start) {
                (true, None) => start = Some(i),
                (false, Some(s)) => {
                    self.advise_free(s..i);
                    start = None;
                }
                _ => {}
            }
        }
    }

    fn advise_free(&self, pages: Range<usize>) {
        let page = self.page.load(Ordering::Relaxed);
        let base = self.base.load(Ordering::Relaxed);
        // SAFETY: the range is whole pages inside the region, which this allocator mapped
        // private and anonymous; no live allocation overlaps them (their counters are 0), so
        // nothing reads what MADV_DONTNEED zeroes. It only fails for bad arguments.
        unsafe {
            libc::madvise(
                (base + pages.start * page) as *mut libc::c_void,
                pages.len() * page,
                libc::MADV_DONTNEED,
            )
        };
    }

    /// How many pages from the region's start any run touched.
    fn touched_pages(&self) -> usize {
        let base = self.base.load(Ordering::Acquire);
        if base == 0 {
            return 0;
        }
        let page = self.page.load(Ordering::Relaxed);
        (self.high.load(Ordering::Relaxed) - base).div_ceil(page)
    }

    /// Pages of the region that hold a live allocation.
    fn live_pages(&self) -> usize {
        (0..self.touched_pages())
            .filter(|&i| self.counter(i).load(Ordering::Relaxed) > 0)
            .count()
    }
}

impl Default for OwnHeap {
    fn default() -> Self {
        Self::new()
    }
}

fn map_anonymous(len: usize) -> Option<*mut u8> {
    // SAFETY: a new private anonymous mapping at an address the kernel picks; it aliases
    // nothing. MAP_NORESERVE: address space only until pages are touched.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p.cast())
}

/// Sets [`IN_RUN`] for a scope, and clears it even if the closure panics.
struct InRun;

impl InRun {
    fn enter(heap: &OwnHeap) -> Self {
        IN_RUN.with(|r| r.set(heap as *const OwnHeap as usize));
        InRun
    }
}

impl Drop for InRun {
    fn drop(&mut self) {
        let _ = IN_RUN.try_with(|r| r.set(0));
    }
}

// Each method is one function, called from Rust's allocation shims: inlined into every
// allocation site, the run's check grew the binary's text by 1 MB (8%).
// SAFETY: every method returns memory that is either the C library's (System, with the same
// layout rules) or a block of the region: `size` bytes at `align`, inside a private mapping
// that lives as long as the process, handed out once until it is freed (the bump pointer
// only moves back over the block just freed, which was the last one). A region block is
// freed, resized or moved here only, by address; System's blocks never lie in the region.
unsafe impl GlobalAlloc for OwnHeap {
    #[inline(never)]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() < SMALL && self.in_run() {
            let p = self.bump(layout);
            if !p.is_null() {
                return p;
            }
        }
        // SAFETY: the caller's layout, passed on.
        unsafe { System.alloc(layout) }
    }

    #[inline(never)]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() < SMALL && self.in_run() {
            let p = self.bump(layout);
            if !p.is_null() {
                // SAFETY: the block is `layout.size()` bytes of the region, now owned by the
                // caller; space reused after a free is not zero.
                unsafe { ptr::write_bytes(p, 0, layout.size()) };
                return p;
            }
        }
        // SAFETY: the caller's layout, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    #[inline(never)]
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        if self.contains(p) {
            self.free(p, layout.size());
        } else {
            // SAFETY: not in the region, so System allocated it, with this layout.
            unsafe { System.dealloc(p, layout) }
        }
    }

    #[inline(never)]
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !self.contains(p) {
            // SAFETY: System's block, with the caller's layout and size.
            return unsafe { System.realloc(p, layout, new_size) };
        }
        if let Some(q) = self.resize_in_place(p, layout.size(), new_size) {
            return q;
        }
        // SAFETY: the caller guarantees `new_size` rounded up to `align` does not overflow,
        // which is what a layout needs.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: a nonzero size (GlobalAlloc's contract for realloc).
        let q = unsafe { self.alloc(new_layout) };
        if !q.is_null() {
            // SAFETY: both blocks are live, distinct, and at least this long.
            unsafe { ptr::copy_nonoverlapping(p, q, layout.size().min(new_size)) };
            self.free(p, layout.size());
        }
        q
    }
}

#[cfg(test)]
mod tests;
