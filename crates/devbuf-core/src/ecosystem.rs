//! The queue the libraries that consume a backend's memory keep for a device by default (dpctl's
//! cached queue, on which dpnp makes its arrays): memory devbuf allocates on a device's default
//! queue is handed out on that very queue, so that the consumer's next line mixes it with its own
//! arrays (docs/architecture.md, "Where memory is handed out"). The embedding layer says where the
//! consumers keep it ([`set_default_queue_source`]: Python asks dpctl); without one (Rust alone)
//! a backend makes such a queue itself.

use std::sync::OnceLock;

use crate::{ForeignObject, Protocol};

/// Where the consumers of a protocol keep their default queue for a device.
pub trait DefaultQueueSource: Send + Sync {
    /// Calls `adopt` with the queue the libraries that speak `protocol` use by default for the
    /// device `native_selector` names (the device's selector in those libraries' own terms),
    /// while the handle stays alive; does not call it where they keep none or cannot be asked.
    fn with_default_queue(
        &self,
        protocol: Protocol,
        native_selector: &str,
        adopt: &mut dyn FnMut(&ForeignObject<'_>),
    );
}

static SOURCE: OnceLock<Box<dyn DefaultQueueSource>> = OnceLock::new();

/// Installs where the consumers' default queues are found. Only the first call takes effect; it
/// returns whether this one did.
pub fn set_default_queue_source(source: Box<dyn DefaultQueueSource>) -> bool {
    SOURCE.set(source).is_ok()
}

/// Calls `adopt` with the consumers' default queue for a device, as the installed source finds it
/// ([`DefaultQueueSource::with_default_queue`]); nothing without a source. A backend calls this
/// while it holds none of its own locks: the source may run the embedding language's code.
pub fn with_default_queue(
    protocol: Protocol,
    native_selector: &str,
    adopt: &mut dyn FnMut(&ForeignObject<'_>),
) {
    if let Some(source) = SOURCE.get() {
        source.with_default_queue(protocol, native_selector, adopt);
    }
}
