//! Handing freed memory back to the operating system.
//!
//! A CRD-heavy cluster's merge allocates tens of MiB for a moment (parsed
//! groups, the merged list, its JSON, protobuf and gzip forms) on the
//! blocking pool's threads, and then frees the previous build. glibc keeps
//! freed memory in each thread's arena rather than returning it, so the
//! process's RSS grew to the sum of those peaks: with the 5.5 MB document,
//! mvp-ext-proc sat at ~130 MiB, ~108 MiB after trimming, of which heaptrack
//! finds ~70 MB live (BENCHMARKS.md). `malloc_trim` after each build returns
//! what is free in every arena.

/// Set once at start, before any thread exists. glibc's defaults suit
/// short-lived programs, not a server that keeps a few multi-MiB documents
/// and replaces them now and then:
/// - a fixed mmap threshold: every buffer of 256 KiB or more (documents,
///   bodies, their encodings) is its own mapping, returned to the system
///   the moment it is freed. By default glibc raises the threshold to the
///   size of any mapped buffer freed (up to 32 MiB), after which a 5.5 MB
///   document is carved from a heap, where a small live allocation next to
///   its pages keeps them resident.
/// - two arenas (one per core) instead of eight per core, each holding its
///   own free memory.
///
/// With a 5.5 MB CRD-heavy `/apis`, idle RSS went from 72 to … MiB (heap in use ~40 MB).
pub fn configure() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes glibc's allocation policy; called before
    // other threads allocate.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 10);
        libc::mallopt(libc::M_ARENA_MAX, 2);
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
