//! The static (musl) build's allocator: dlmalloc behind a spin lock. glibc
//! builds keep glibc's malloc (this module is built there only for its test).
//!
//! musl's own malloc maps and unmaps pages on nearly every allocation, a
//! tenth of a short run's time (0.23 ms of 2.2; see docs/benchmarks.md),
//! so the static build uses dlmalloc, as Rust's wasm targets do. The
//! `dlmalloc` crate's own global allocator guards it with a pthread mutex,
//! and musl's lock and unlock cost about 85 instructions a pair: 0.18 of
//! the 1.56 million instructions of a whole `-k K -- true` run (callgrind),
//! for a lock that is almost never contended (the main thread, and the
//! refresher thread a few times a lease). A spin lock costs a few.
//!
//! As with the mutex, nothing here is fork-aware: the keeper, a child of a
//! multithreaded process, allocates nothing from the fork on (see
//! child/keeper.rs), so a lock another thread held at the fork is never
//! waited for.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};

use dlmalloc::Dlmalloc;

pub struct Alloc {
    locked: AtomicBool,
    heap: UnsafeCell<Dlmalloc>,
}

// SAFETY: `heap` is only reached through `with`, under `locked`.
unsafe impl Sync for Alloc {}

impl Alloc {
    pub const fn new() -> Alloc {
        Alloc {
            locked: AtomicBool::new(false),
            heap: UnsafeCell::new(Dlmalloc::new()),
        }
    }

    /// Runs `f` on the heap with the lock held.
    #[inline]
    fn with<T>(&self, f: impl FnOnce(&mut Dlmalloc) -> T) -> T {
        let mut spins = 0u32;
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                // The holder may be a preempted thread on our core.
                std::thread::yield_now();
            }
        }
        // SAFETY: the lock is ours until the store below.
        let out = f(unsafe { &mut *self.heap.get() });
        self.locked.store(false, Ordering::Release);
        out
    }
}

// SAFETY: each call is dlmalloc's own, with the layout it was given, one
// at a time under the lock.
unsafe impl GlobalAlloc for Alloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.with(|heap| unsafe { heap.malloc(layout.size(), layout.align()) })
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        self.with(|heap| unsafe { heap.free(ptr, layout.size(), layout.align()) })
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        self.with(|heap| unsafe { heap.calloc(layout.size(), layout.align()) })
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        self.with(|heap| unsafe { heap.realloc(ptr, layout.size(), layout.align(), new_size) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four threads allocate, fill, grow and free blocks of one shared
    /// `Alloc` at once; a block that two of them were given, or that
    /// lost its bytes in a `realloc`, fails the check.
    #[test]
    fn threads_sharing_the_heap_never_get_the_same_block() {
        static HEAP: Alloc = Alloc::new();
        let workers: Vec<_> = (0..4u8)
            .map(|id| {
                std::thread::spawn(move || {
                    for round in 0..2000usize {
                        let size = 1 + (round * 37 + usize::from(id) * 11) % 700;
                        let layout = Layout::from_size_align(size, 8).unwrap();
                        // SAFETY: sizes are non-zero; each block is used
                        // within its layout and freed once.
                        unsafe {
                            let p = HEAP.alloc(layout);
                            assert!(!p.is_null());
                            p.write_bytes(id, size);
                            let p = HEAP.realloc(p, layout, size * 2);
                            assert!(!p.is_null());
                            let grown = Layout::from_size_align(size * 2, 8).unwrap();
                            std::thread::yield_now();
                            let bytes = std::slice::from_raw_parts(p, size);
                            assert!(bytes.iter().all(|&b| b == id), "block shared or lost");
                            HEAP.dealloc(p, grown);
                        }
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.join().unwrap();
        }
    }
}
