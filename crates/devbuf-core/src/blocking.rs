//! Waits that may block the calling thread, run through a hook the embedding layer installs: the
//! Python layer releases the GIL there, so that a deallocator waiting for a device never stops
//! every other Python thread, and no thread waits inside a runtime holding a lock that runtime's
//! own threads need (docs/architecture.md, "Blocking calls and the GIL").

use std::cell::Cell;
use std::sync::OnceLock;

/// Runs the closure it is given (once, on the calling thread), around whatever the embedding
/// layer must do before blocking.
pub type BlockingHook = fn(&mut dyn FnMut());

static HOOK: OnceLock<BlockingHook> = OnceLock::new();

thread_local! {
    /// Whether this thread is inside the hook already: a wait nested in another (a release that
    /// submits a barrier) runs as it is, the embedding layer's preparation done once.
    static INSIDE_THE_HOOK: Cell<bool> = const { Cell::new(false) };
}

/// Installs the hook that every wait before releasing memory runs through. Only the first call
/// takes effect; it returns whether this one did.
pub fn set_blocking_hook(hook: BlockingHook) -> bool {
    HOOK.set(hook).is_ok()
}

/// Runs `wait`, a call that may block the calling thread (a backend waiting for its device before
/// it frees memory, or a submission that waits for its runtime's scheduler), through the installed
/// hook: directly when there is none, or when this thread is already inside it.
pub fn blocking<T>(wait: impl FnOnce() -> T) -> T {
    let Some(hook) = HOOK.get() else {
        return wait();
    };
    if INSIDE_THE_HOOK.get() {
        return wait();
    }
    /// Leaves the hook's mark as it found it, also when `wait` unwinds.
    struct Inside;
    impl Drop for Inside {
        fn drop(&mut self) {
            INSIDE_THE_HOOK.set(false);
        }
    }
    let mut wait = Some(wait);
    let mut outcome = None;
    hook(&mut || {
        if let Some(wait) = wait.take() {
            INSIDE_THE_HOOK.set(true);
            let _inside = Inside;
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
