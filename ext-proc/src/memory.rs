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

/// Returns the memory the allocator holds but nothing uses. Costs a walk of
/// the heap (milliseconds), so it runs after a build, never per request.
pub fn release_freed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free pages of glibc's own heaps.
    unsafe {
        libc::malloc_trim(0);
    }
}
