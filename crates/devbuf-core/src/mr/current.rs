//! The current resource of each device and kind.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;

use super::MemoryResource;
use crate::debug_log::{LogLevel, debug_log};
use crate::{Error, MemKind, Result};

/// Device selector → the current resource of each allocatable kind.
type Registry = RwLock<HashMap<String, [Option<Arc<dyn MemoryResource>>; 3]>>;

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

/// Whether any current resource was ever set: allocations skip the lookup until then.
static ANY_SET: AtomicBool = AtomicBool::new(false);

fn slot(kind: MemKind) -> Result<usize> {
    MemKind::ALLOCATABLE
        .iter()
        .position(|k| *k == kind)
        .ok_or_else(|| Error::invalid("kind", format!("{kind} memory has no current resource")))
}

/// Makes `resource` the current resource for `kind` on its queue's device: every allocation of
/// `kind` on that device without an explicit resource goes through it. Returns the previous one.
pub fn set_current(
    kind: MemKind,
    resource: Arc<dyn MemoryResource>,
) -> Result<Option<Arc<dyn MemoryResource>>> {
    let slot = slot(kind)?;
    // Every allocation of `kind` on the device goes through it: refused if it reaches itself.
    super::check_depth(&resource, "mr", 0)?;
    let device = resource.queue().device().selector.clone();
    debug_log!(
        LogLevel::Debug,
        "current {kind} resource of {device}: the resource at {:p}",
        Arc::as_ptr(&resource).cast::<()>()
    );
    let mut registry = registry().write();
    ANY_SET.store(true, Ordering::Release);
    Ok(registry.entry(device).or_default()[slot].replace(resource))
}

/// Goes back to allocating `kind` on `device` (a selector) from the queue itself. Returns the
/// resource that was current.
pub fn reset_current(device: &str, kind: MemKind) -> Option<Arc<dyn MemoryResource>> {
    let slot = slot(kind).ok()?;
    debug_log!(
        LogLevel::Debug,
        "current {kind} resource of {device}: the queue's own allocator again"
    );
    registry().write().get_mut(device)?[slot].take()
}

/// The current resource for `kind` on `device` (a selector), if one was set.
#[inline]
pub fn current(device: &str, kind: MemKind) -> Option<Arc<dyn MemoryResource>> {
    // Inlined into every allocation: one load while no current resource was ever set.
    if !ANY_SET.load(Ordering::Acquire) {
        return None;
    }
    lookup(device, kind)
}

fn lookup(device: &str, kind: MemKind) -> Option<Arc<dyn MemoryResource>> {
    let slot = slot(kind).ok()?;
    registry().read().get(device)?[slot].clone()
}
