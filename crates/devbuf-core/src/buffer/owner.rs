//! [`Owner`]: what keeps foreign memory alive, or frees it.

use std::any::Any;
use std::fmt;

/// What keeps foreign memory alive, or frees it.
pub enum Owner {
    /// An object that keeps the memory alive while held (a Python producer, an Arc of a runtime
    /// allocation...). It is dropped after the last view.
    KeepAlive(Box<dyn Any + Send + Sync>),
    /// A deleter run exactly once, after the last view.
    Deleter(RunOnDrop),
}

/// A deleter that runs when dropped: after the last view of a buffer, or, for an owner that never
/// reached a buffer (an import refused after it took ownership), right away instead of leaking.
pub struct RunOnDrop(Option<Box<dyn FnOnce() + Send>>);

// SAFETY: a `RunOnDrop` offers nothing through a shared reference (no method takes `&self`): it
// is only ever run, by value, when dropped. Sharing one between threads can therefore not call
// its deleter from two of them, and an allocation that holds one may be shared.
unsafe impl Sync for RunOnDrop {}

impl Drop for RunOnDrop {
    fn drop(&mut self) {
        if let Some(delete) = self.0.take() {
            delete();
        }
    }
}

impl Owner {
    /// Keeps `owner` alive as long as the memory is viewed.
    pub fn keep_alive(owner: impl Any + Send + Sync) -> Self {
        Owner::KeepAlive(Box::new(owner))
    }

    /// Runs `deleter` once, after the last view.
    pub fn deleter(deleter: impl FnOnce() + Send + 'static) -> Self {
        Owner::Deleter(RunOnDrop(Some(Box::new(deleter))))
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Owner::KeepAlive(_) => "KeepAlive",
            Owner::Deleter(_) => "Deleter",
        })
    }
}
