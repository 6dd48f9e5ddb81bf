//! `devbuf.mr`: memory resources with RMM's names.

// Caller numbers become addresses here: every size, count, offset and alignment is checked
// (docs/architecture.md, "Untrusted numbers").
#![deny(clippy::arithmetic_side_effects)]

mod debug_log;
pub(crate) mod kind_resources;
pub(crate) mod memory_resource;
mod python_resource;
pub(crate) mod resources;
mod rmm_resources;
