//! The offline analyzer: the [`crate::analysis`] core driven over recorded files, and the
//! report of what it found.

pub mod replay;
pub mod report;
pub mod source;
