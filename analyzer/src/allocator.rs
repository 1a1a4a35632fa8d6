//! The global allocator of the analyzer's binaries.
//!
//! The analysis allocates and frees small strings and records for every event; with glibc's
//! malloc that churn was a quarter of the replay's time, and jemalloc takes 0.87 of glibc's
//! CPU time for `analyzer replay` with less peak memory (BENCHMARKS.md, "Build choices";
//! book/src/development/benchmark-history.md, "The allocator").
//! The binaries install [`Allocator`] with [`global_allocator!`](crate::global_allocator);
//! the library never does, so a program that links it keeps its own choice. Feature
//! `jemalloc` (default) or `mimalloc` picks it (jemalloc if both); with neither, the
//! binaries get the system allocator.

/// The allocator the binaries install: jemalloc.
#[cfg(feature = "jemalloc")]
pub type Allocator = tikv_jemallocator::Jemalloc;
/// The one value of [`Allocator`].
#[cfg(feature = "jemalloc")]
pub const ALLOCATOR: Allocator = tikv_jemallocator::Jemalloc;

/// The allocator the binaries install: mimalloc (feature `mimalloc` without `jemalloc`).
#[cfg(all(feature = "mimalloc", not(feature = "jemalloc")))]
pub type Allocator = mimalloc::MiMalloc;
/// The one value of [`Allocator`].
#[cfg(all(feature = "mimalloc", not(feature = "jemalloc")))]
pub const ALLOCATOR: Allocator = mimalloc::MiMalloc;

/// The allocator the binaries install: the system's (neither feature on).
#[cfg(not(any(feature = "mimalloc", feature = "jemalloc")))]
pub type Allocator = std::alloc::System;
/// The one value of [`Allocator`].
#[cfg(not(any(feature = "mimalloc", feature = "jemalloc")))]
pub const ALLOCATOR: Allocator = std::alloc::System;

/// Installs [`Allocator`] as the program's global allocator (once, in a binary's root).
#[macro_export]
macro_rules! global_allocator {
    () => {
        #[global_allocator]
        static GLOBAL: $crate::allocator::Allocator = $crate::allocator::ALLOCATOR;
    };
}
