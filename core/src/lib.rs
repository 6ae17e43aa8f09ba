//! Arbiter's compiled decision core: the generic checks of `commands.decide` over a partition batch in one call.
//!
//! The pure-Python domain (`commands/`) is the specification; this crate implements the generic checks and the
//! team's rules short of guards (`rules`) and hands every other key back (`batch::Fallback`). The
//! differential test `tests/unit/test_core_differential.py` holds the two to the same bytes.

pub mod avro;
pub mod batch;
pub mod decide;
pub mod ids;
pub mod json;
pub mod model;
pub mod pyjson;
pub mod rules;

#[cfg(feature = "python")]
mod py;

/// What this build implements, for `app.native.core`'s status line.
pub const SPEC: &str = "generic decision and the team's rules (schemas, tracked fields, transitions, modes; \
                        guards in Python), command v4, state v3, event v5, rejection v4";
