//! What the libraries that consume a backend's memory keep for themselves, which devbuf follows:
//! the queue they use for a device by default (dpctl's cached queue, on which dpnp makes its
//! arrays), so that memory devbuf allocates on a device's default queue is handed out on that very
//! queue and the consumer's next line mixes it with its own arrays; and their own record of the
//! work on a queue (dpctl's `SequentialOrderManager`, which dpnp submits by), so that their next
//! work there follows devbuf's commands (docs/architecture.md, "Where memory is handed out"). The
//! embedding layer answers for them ([`set_ecosystem`]: Python asks dpctl); without it (Rust
//! alone) a backend makes such a queue itself and waits for its commands where it must.

use std::sync::OnceLock;

use crate::{ExportedHandle, ForeignObject, Protocol};

/// The consumers of a protocol, as the embedding layer can reach them.
pub trait Ecosystem: Send + Sync {
    /// Calls `adopt` with the queue the libraries that speak `protocol` use by default for the
    /// device `native_selector` names (the device's selector in those libraries' own terms),
    /// while the handle stays alive; does not call it where they keep none or cannot be asked.
    fn with_default_queue(
        &self,
        protocol: Protocol,
        native_selector: &str,
        adopt: &mut dyn FnMut(&ForeignObject<'_>),
    );

    /// Tells the libraries that speak `protocol` and order their work on `queue` by their own
    /// record of its events that their next work there must follow `event` (both handles of the
    /// protocol's runtime, given away); whether they could be told.
    fn order_next_work_after(
        &self,
        protocol: Protocol,
        queue: ExportedHandle,
        event: ExportedHandle,
    ) -> bool;
}

static ECOSYSTEM: OnceLock<Box<dyn Ecosystem>> = OnceLock::new();

/// Installs how the consumers are reached. Only the first call takes effect; it returns whether
/// this one did.
pub fn set_ecosystem(ecosystem: Box<dyn Ecosystem>) -> bool {
    ECOSYSTEM.set(ecosystem).is_ok()
}

/// Calls `adopt` with the consumers' default queue for a device ([`Ecosystem::with_default_queue`]);
/// nothing without an ecosystem. A backend calls this while it holds none of its own locks: the
/// embedding layer may run its language's code.
pub fn with_default_queue(
    protocol: Protocol,
    native_selector: &str,
    adopt: &mut dyn FnMut(&ForeignObject<'_>),
) {
    if let Some(ecosystem) = ECOSYSTEM.get() {
        ecosystem.with_default_queue(protocol, native_selector, adopt);
    }
}

/// [`Ecosystem::order_next_work_after`]; false without an ecosystem. Called with no lock held, as
/// [`with_default_queue`].
pub fn order_next_work_after(
    protocol: Protocol,
    queue: ExportedHandle,
    event: ExportedHandle,
) -> bool {
    ECOSYSTEM
        .get()
        .is_some_and(|ecosystem| ecosystem.order_next_work_after(protocol, queue, event))
}
