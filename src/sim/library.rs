//! The scenario library, embedded in the binary so `mcpsim run` works from any directory.
//!
//! The files under `scenarios/` are the source; a test checks that this list matches the folder exactly.

/// (file name, contents), in file-name order.
pub const SCENARIOS: &[(&str, &str)] = &[];
