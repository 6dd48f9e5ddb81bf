//! Waits that may block the calling thread, run through a hook the embedding layer installs: the
//! Python layer releases the GIL there, so that a deallocator waiting for a device never stops
//! every other Python thread.

use std::sync::OnceLock;

/// Runs the closure it is given (once, on the calling thread), around whatever the embedding
/// layer must do before blocking.
pub type BlockingHook = fn(&mut dyn FnMut());

static HOOK: OnceLock<BlockingHook> = OnceLock::new();

/// Installs the hook that every wait before releasing memory runs through. Only the first call
/// takes effect; it returns whether this one did.
pub fn set_blocking_hook(hook: BlockingHook) -> bool {
    HOOK.set(hook).is_ok()
}

/// Runs `wait`, a call that may block the calling thread (a backend waiting for its device before
/// it frees memory), through the installed hook (directly when there is none).
pub fn blocking<T>(wait: impl FnOnce() -> T) -> T {
    let Some(hook) = HOOK.get() else {
        return wait();
    };
    let mut wait = Some(wait);
    let mut outcome = None;
    hook(&mut || {
        if let Some(wait) = wait.take() {
            outcome = Some(wait());
        }
    });
    // A hook that did not run the closure leaves it to us.
    match (outcome, wait) {
        (Some(outcome), _) => outcome,
        (None, Some(wait)) => wait(),
        (None, None) => unreachable!("the closure ran but returned nothing"),
    }
}
