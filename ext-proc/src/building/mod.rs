//! What the planes share to rebuild off the sync loop, and only when
//! something changed: [`unchanged`] (pointer equality says "nothing to
//! rebuild"), [`latest`] (a build on the blocking pool that takes the
//! newest inputs only), [`thread_cpu`] (a build's own cost beside its wall
//! time) and [`memory`] (what a build freed handed back to the system).

pub mod latest;
pub mod memory;
pub mod thread_cpu;
pub mod unchanged;
