//! `devbuf.mr`: memory resources with RMM's names.

mod debug_log;
pub(crate) mod kind_resources;
pub(crate) mod memory_resource;
mod python_resource;
pub(crate) mod resources;
mod rmm_resources;
