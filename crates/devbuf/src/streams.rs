//! Users' streams: a new one on a device ([`open_stream`]) or another library's adopted
//! ([`adopt_stream`]), each a queue like the ones [`crate::open`] returns.

use std::sync::Arc;

use devbuf_core::{
    Availability, Error, HandleSource, Protocol, Queue, Result, StreamOptions, StreamOwner,
};

use crate::registry::{backend, backend_for, split_selector};
use crate::selection::default_queue;

/// A new queue with its own stream on the device `selector` names (`""`: the default device), in
/// the context of that device's [`crate::open`] queue: see [`devbuf_core::Backend::open_stream`].
///
/// ```
/// let stream = devbuf::open_stream("host", devbuf::StreamOptions::default())?;
/// assert_eq!(stream.device().selector, "host");
/// # Ok::<(), devbuf::Error>(())
/// ```
pub fn open_stream(selector: &str, options: StreamOptions) -> Result<Arc<dyn Queue>> {
    let selector = match selector {
        "" => default_queue()?.device().selector.clone(),
        selector => selector.to_owned(),
    };
    let (name, spec) = split_selector(&selector);
    let backend = backend(name)?;
    if let Availability::Unavailable(reason) = backend.availability() {
        return Err(Error::Unavailable {
            backend: backend.name(),
            reason,
        });
    }
    backend.open_stream(spec, options)
}

/// A queue on another library's stream, `handle` as `protocol`'s streams are numbered (a
/// `CUstream` for [`Protocol::Cai`]), on the device `selector` names or, for `None`, the device
/// the stream belongs to: see [`devbuf_core::Backend::adopt_stream`].
///
/// # Safety
/// `handle` names a live stream for as long as `owner` is alive.
pub unsafe fn adopt_stream(
    protocol: Protocol,
    selector: Option<&str>,
    handle: usize,
    source: HandleSource,
    owner: StreamOwner,
) -> Result<Arc<dyn Queue>> {
    let unsupported = || Error::Unsupported {
        device: selector.unwrap_or("").to_owned(),
        what: "adopting a stream".into(),
        reason: format!("no backend compiled into devbuf speaks {protocol}, whose stream it is"),
    };
    let backend = backend_for(protocol).ok_or_else(unsupported)?;
    let spec = match selector.map(split_selector) {
        None => None,
        Some((name, spec)) if name == backend.name() => Some(spec),
        // Only a device of the backend whose streams `protocol` numbers can own the handle.
        Some(_) => {
            return Err(Error::invalid(
                "device",
                format!(
                    "{:?} cannot own a {name} stream handle: name a {name} device (\"{name}\" or \
                     \"{name}:N\"), or leave device out for the stream's own device",
                    selector.unwrap_or_default(),
                    name = backend.name(),
                ),
            ));
        }
    };
    // SAFETY: the caller's promise.
    unsafe { backend.adopt_stream(spec, handle, source, owner) }.ok_or_else(unsupported)?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device that cannot own a CUDA stream is refused in the words the caller wrote, whether
    /// or not a CUDA runtime is loaded: never adopted on cuda:0, never renamed "cuda:...".
    #[cfg(feature = "cuda")]
    #[test]
    fn only_a_device_of_the_streams_backend_can_own_an_adopted_handle() {
        for selector in ["host", "sycl", "nope", "opencl:0:0", ""] {
            // SAFETY: refused before the handle is looked at.
            let adopted = unsafe {
                adopt_stream(
                    Protocol::Cai,
                    Some(selector),
                    1,
                    HandleSource::Bare,
                    Box::new(()),
                )
            };
            match adopted {
                Err(Error::InvalidDescriptor { key, message }) => {
                    assert_eq!(key, "device");
                    assert!(
                        message.starts_with(&format!("{selector:?} cannot own a cuda stream")),
                        "{message}"
                    );
                }
                other => panic!("{selector:?}: {other:?}"),
            }
        }
    }
}
