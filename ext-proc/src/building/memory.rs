//! Handing freed memory back to the operating system.
//!
//! A CRD-heavy cluster's change allocates tens of MiB for a moment (the new
//! parsed view beside the old one, the new document's bodies and gzip forms
//! beside the previous document's) and then frees the old. glibc keeps freed
//! memory rather than returning it; `malloc_trim` after each build returns
//! what is free, and [`configure`] keeps large buffers out of the heap.
//! With the 5.5 MB document (release): idle RSS ~40 MiB; ~41–44 MiB after
//! repeated one-CRD changes (each group is shared or shrunk as it is
//! parsed: `discover::aggregated`); after repeated changes of *every* CRD
//! group it settles at ~62–67 MiB: the heap then holds two views' worth
//! while the change is parsed, and freed pages with a live neighbour stay
//! resident. BENCHMARKS.md has the benchmark's figures.

/// Set once at start, before any thread exists. glibc's defaults suit
/// short-lived programs, not a server that keeps a few multi-MiB documents
/// and replaces them now and then:
/// - a fixed mmap threshold: every buffer of 256 KiB or more (documents,
///   bodies, their encodings) is its own mapping, returned to the system
///   the moment it is freed. By default glibc raises the threshold to the
///   size of any mapped buffer freed (up to 32 MiB), after which a 5.5 MB
///   document is carved from a heap, where a small live allocation next to
///   its pages keeps them resident.
/// - one arena: by default each thread that allocates while another holds
///   an arena gets its own (up to 8 per core), each keeping its own free
///   memory and fragments; the build on the blocking pool and the sync loop
///   on a worker then each held a share of the peaks. Small allocations
///   still go through glibc's per-thread cache without the arena's lock.
///
/// Idle RSS with a 5.5 MB CRD-heavy `/apis` beside v1.30 (release, four
/// starts each, before the compact capabilities): 64.8–66.8 MiB with glibc's
/// defaults, 52.0–63.5 with two arenas, 52.1–52.3 with one.
pub fn configure() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes glibc's allocation policy; called before
    // other threads allocate.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 10);
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Returns the memory the allocator holds but nothing uses. Costs a walk of
/// the heap (milliseconds), so it runs after a build, never per request.
pub fn release_freed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free pages of glibc's own heaps.
    unsafe {
        libc::malloc_trim(0);
    }
}
