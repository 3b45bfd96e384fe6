//! The allocator on heaps of its own (the tests' global allocator stays the C library's):
//! where blocks land, what stays resident after a run (`mincore`), and a long random
//! sequence of allocations, resizes and frees whose contents are checked throughout.

use super::*;

const MIB: usize = 1 << 20;

fn layout(size: usize, align: usize) -> Layout {
    Layout::from_size_align(size, align).unwrap_or_else(|e| unreachable!("{e}"))
}

fn page() -> usize {
    // SAFETY: sysconf reads a constant.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// Whether the page holding `p` is resident.
fn resident(p: *const u8) -> bool {
    let page = page();
    let start = (p as usize) & !(page - 1);
    let mut vec = [0u8; 1];
    // SAFETY: one page of a mapping of this process; mincore writes one byte.
    let r = unsafe { libc::mincore(start as *mut libc::c_void, page, vec.as_mut_ptr()) };
    assert_eq!(r, 0, "mincore: {}", std::io::Error::last_os_error());
    vec[0] & 1 == 1
}

fn fill(p: *mut u8, len: usize, seed: u8) {
    for i in 0..len {
        // SAFETY: the test owns `len` bytes at `p`.
        unsafe { *p.add(i) = seed.wrapping_add(i as u8) };
    }
}

fn holds(p: *const u8, len: usize, seed: u8) -> bool {
    // SAFETY: the test owns `len` bytes at `p`.
    (0..len).all(|i| unsafe { *p.add(i) } == seed.wrapping_add(i as u8))
}

#[test]
fn inside_a_run_small_blocks_come_from_the_region_and_the_rest_from_the_c_library() {
    let heap = OwnHeap::with_reserve(4 * MIB);
    let ((small, large), report) = heap.run(|| {
        // SAFETY: nonzero sizes; freed below.
        unsafe { (heap.alloc(layout(100, 8)), heap.alloc(layout(SMALL, 8))) }
    });
    assert!(report.own);
    assert!(
        heap.contains(small),
        "a small block inside a run is the region's"
    );
    assert!(
        !heap.contains(large),
        "a block of SMALL bytes is the C library's"
    );
    // SAFETY: outside the run now; freed below.
    let outside = unsafe { heap.alloc(layout(100, 8)) };
    assert!(
        !heap.contains(outside),
        "outside a run every block is the C library's"
    );
    // SAFETY: each block with the layout it was allocated with.
    unsafe {
        heap.dealloc(small, layout(100, 8));
        heap.dealloc(large, layout(SMALL, 8));
        heap.dealloc(outside, layout(100, 8));
    }
    assert_eq!(heap.live_pages(), 0);
}

#[test]
fn after_a_run_only_pages_with_a_live_block_stay_resident() {
    let page = page();
    let heap = OwnHeap::with_reserve(16 * MIB);
    let (kept, report) = heap.run(|| {
        // A parse: 2 MiB of small blocks, every 64th kept.
        let mut kept = Vec::new();
        let mut freed = Vec::new();
        for i in 0..(2 * MIB / 512) {
            // SAFETY: nonzero size; freed or kept below.
            let p = unsafe { heap.alloc(layout(512, 16)) };
            assert!(!p.is_null());
            fill(p, 512, i as u8);
            if i % 64 == 0 {
                kept.push((p, i as u8));
            } else {
                freed.push(p);
            }
        }
        for p in freed {
            // SAFETY: allocated above with this layout.
            unsafe { heap.dealloc(p, layout(512, 16)) };
        }
        kept
    });
    assert!(report.own);
    assert!(report.spanned >= 2 * MIB, "{report:?}");
    assert_eq!(report.overflowed, 0);
    // One kept block per 32 KiB, none across a page: one page in 8 stays (4 KiB pages).
    if page <= 32 << 10 {
        assert_eq!(heap.live_pages(), kept.len());
    }
    assert_eq!(report.kept, heap.live_pages() * page);
    for &(p, seed) in &kept {
        assert!(resident(p), "a page with a live block was given back");
        assert!(holds(p, 512, seed), "a live block lost its contents");
    }
    let base = heap.base.load(Ordering::Relaxed);
    let empty = (base..base + 2 * MIB)
        .step_by(page)
        .filter(|&a| heap.counter((a - base) / page).load(Ordering::Relaxed) == 0)
        .collect::<Vec<_>>();
    assert!(!empty.is_empty());
    for a in empty {
        assert!(!resident(a as *const u8), "an empty page stayed resident");
    }
    // Freeing a kept block later gives its page back.
    let (p, _) = kept[1];
    // SAFETY: allocated in the run with this layout.
    unsafe { heap.dealloc(p, layout(512, 16)) };
    assert!(
        !resident(p),
        "the page of the last block freed after the run stayed resident"
    );
    for &(p, seed) in &kept[2..] {
        assert!(
            holds(p, 512, seed),
            "freeing a neighbour changed a live block"
        );
    }
}

#[test]
fn the_last_block_grows_in_place_and_its_space_is_reused_once_freed() {
    let heap = OwnHeap::with_reserve(4 * MIB);
    let ((), report) = heap.run(|| {
        // SAFETY: every block is used within its size and freed with its layout.
        unsafe {
            let a = heap.alloc(layout(64, 8));
            fill(a, 64, 1);
            let b = heap.realloc(a, layout(64, 8), 4096);
            assert_eq!(a, b, "the last block did not grow in place");
            assert!(holds(b, 64, 1));
            let c = heap.alloc(layout(32, 8));
            let d = heap.realloc(b, layout(4096, 8), 8192);
            assert_ne!(d, b, "a block that is not the last one grew in place");
            assert!(holds(d, 64, 1), "a moved block lost its contents");
            heap.dealloc(d, layout(8192, 8));
            let e = heap.alloc(layout(8192, 8));
            assert_eq!(e, d, "the freed last block's space was not reused");
            heap.dealloc(e, layout(8192, 8));
            heap.dealloc(c, layout(32, 8));
        }
    });
    assert_eq!(heap.live_pages(), 0);
    assert!(report.spanned < 4 * 4096 + 64, "{report:?}");
}

#[test]
fn a_block_that_outgrows_small_moves_to_the_c_library_with_its_contents() {
    let heap = OwnHeap::with_reserve(4 * MIB);
    let (p, _) = heap.run(|| {
        // SAFETY: used within its size; moved by realloc.
        unsafe {
            let a = heap.alloc(layout(1000, 8));
            fill(a, 1000, 7);
            heap.realloc(a, layout(1000, 8), 2 * SMALL)
        }
    });
    assert!(!heap.contains(p));
    assert!(holds(p, 1000, 7));
    assert_eq!(heap.live_pages(), 0);
    // SAFETY: the C library's block, with its layout.
    unsafe { heap.dealloc(p, layout(2 * SMALL, 8)) };
}

#[test]
fn a_full_region_falls_back_to_the_c_library() {
    let heap = OwnHeap::with_reserve(64 << 10);
    let (blocks, report) = heap.run(|| {
        // SAFETY: nonzero sizes; freed below.
        (0..40)
            .map(|_| unsafe { heap.alloc(layout(4000, 8)) })
            .collect::<Vec<_>>()
    });
    let in_region = blocks.iter().filter(|&&p| heap.contains(p)).count();
    assert_eq!(in_region, 16, "64 KiB hold 16 blocks of 4000 bytes");
    assert_eq!(report.overflowed, 24);
    for p in blocks {
        assert!(!p.is_null());
        // SAFETY: each with its layout.
        unsafe { heap.dealloc(p, layout(4000, 8)) };
    }
    assert_eq!(heap.live_pages(), 0);
}

#[test]
fn other_threads_and_nested_runs_use_the_c_library() {
    let heap = OwnHeap::with_reserve(4 * MIB);
    let ((from_thread, nested), _) = heap.run(|| {
        let from_thread = std::thread::scope(|s| {
            // SAFETY: nonzero size; freed below.
            s.spawn(|| unsafe { heap.alloc(layout(100, 8)) } as usize)
                .join()
                .unwrap_or_else(|_| unreachable!())
        });
        let (nested, report) = heap.run(|| 0);
        assert!(!report.own, "a nested run claimed the region");
        (from_thread, nested)
    });
    assert_eq!(nested, 0);
    assert!(!heap.contains(from_thread as *mut u8));
    // SAFETY: the C library's block, with its layout.
    unsafe { heap.dealloc(from_thread as *mut u8, layout(100, 8)) };
}

#[test]
fn a_panic_inside_a_run_ends_it() {
    let heap = OwnHeap::with_reserve(4 * MIB);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        heap.run(|| {
            #[allow(clippy::panic)]
            {
                panic!("inside the run")
            }
        })
    }));
    assert!(caught.is_err());
    assert_eq!(run_of(), 0, "the thread still counts as inside a run");
    // SAFETY: nonzero size; freed below.
    let p = unsafe { heap.alloc(layout(100, 8)) };
    assert!(!heap.contains(p));
    // SAFETY: the C library's block, with its layout.
    unsafe { heap.dealloc(p, layout(100, 8)) };
}

/// A deterministic random sequence, as a parse and its consumers make them: allocations of
/// many sizes and alignments, zeroed ones, grows and shrinks, frees in any order, some of
/// them from another thread after the run; every live block's contents checked at the end.
#[test]
fn a_random_sequence_keeps_every_block_intact_and_gives_every_page_back_at_the_end() {
    let heap = OwnHeap::with_reserve(32 * MIB);
    let mut rng = nodemedic_testkit::XorShift64::new(0x2545_f491_4f6c_dd1d);
    let mut next = move || rng.next_u64();
    let (live, report) = heap.run(|| {
        let mut live: Vec<(usize, Layout, u8)> = Vec::new();
        for round in 0..20_000u32 {
            let seed = round as u8;
            match next() % 8 {
                0..=3 => {
                    let size = 1 + (next() % 3000) as usize;
                    let l = layout(size, 1 << (next() % 7));
                    // SAFETY: nonzero size.
                    let p = unsafe {
                        if round % 5 == 0 {
                            heap.alloc_zeroed(l)
                        } else {
                            heap.alloc(l)
                        }
                    };
                    assert!(!p.is_null());
                    if round % 5 == 0 {
                        // SAFETY: `size` bytes just allocated.
                        assert!((0..size).all(|i| unsafe { *p.add(i) } == 0), "not zeroed");
                    }
                    fill(p, size, seed);
                    live.push((p as usize, l, seed));
                }
                4 | 5 if !live.is_empty() => {
                    let i = (next() % live.len() as u64) as usize;
                    let (p, l, seed) = live.swap_remove(i);
                    assert!(
                        holds(p as *const u8, l.size(), seed),
                        "a block lost its contents"
                    );
                    // SAFETY: allocated with `l`.
                    unsafe { heap.dealloc(p as *mut u8, l) };
                }
                6 | 7 if !live.is_empty() => {
                    let i = (next() % live.len() as u64) as usize;
                    let (p, l, seed) = live[i];
                    let new = 1 + (next() % 6000) as usize;
                    // SAFETY: allocated with `l`; `new` is nonzero.
                    let q = unsafe { heap.realloc(p as *mut u8, l, new) };
                    assert!(!q.is_null());
                    assert!(
                        holds(q, l.size().min(new), seed),
                        "a resize lost the contents"
                    );
                    fill(q, new, seed);
                    live[i] = (q as usize, layout(new, l.align()), seed);
                }
                _ => {}
            }
        }
        live
    });
    assert!(report.own);
    let in_region = live
        .iter()
        .filter(|(p, ..)| heap.contains(*p as *mut u8))
        .count();
    assert!(
        in_region > 100,
        "only {in_region} live blocks in the region"
    );
    // Half freed from another thread after the run, half here.
    let (theirs, ours) = live.split_at(live.len() / 2);
    let theirs = theirs.to_vec();
    std::thread::scope(|s| {
        s.spawn(|| {
            for (p, l, seed) in theirs {
                assert!(holds(p as *const u8, l.size(), seed));
                // SAFETY: allocated with `l`.
                unsafe { heap.dealloc(p as *mut u8, l) };
            }
        });
    });
    for &(p, l, seed) in ours {
        assert!(holds(p as *const u8, l.size(), seed));
        // SAFETY: allocated with `l`.
        unsafe { heap.dealloc(p as *mut u8, l) };
    }
    assert_eq!(heap.live_pages(), 0, "a page still counts a block");
    let page = page();
    let base = heap.base.load(Ordering::Relaxed);
    let below = (heap.next.load(Ordering::Relaxed) - base) / page;
    let resident_pages = (0..below)
        .filter(|i| resident((base + i * page) as *const u8))
        .count();
    assert_eq!(
        resident_pages, 0,
        "pages of the region stayed resident after every free"
    );
}
