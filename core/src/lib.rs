//! Arbiter's compiled decision core: the generic checks of `commands.decide` over a partition batch in one call.
//!
//! The pure-Python domain (`commands/`) is the specification; this crate implements the part of it that holds
//! for untyped objects (under rules in force it names their version and nothing else changes) and hands every
//! other key back (`batch::Fallback`). The
//! differential test `tests/unit/test_core_differential.py` holds the two to the same bytes.

pub mod avro;
pub mod batch;
pub mod decide;
pub mod ids;
pub mod json;
pub mod model;

#[cfg(feature = "python")]
mod py;

/// What this build implements, for `app.native.core`'s status line.
pub const SPEC: &str = "generic decision of untyped objects (with or without rules in force), command v4, state v3, \
                        event v5, rejection v4";
