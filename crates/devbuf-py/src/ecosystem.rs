//! Where the consumers of a backend's memory keep their default queue for a device, asked of
//! Python (`devbuf._ecosystem`, which asks dpctl) for core's [`devbuf::ecosystem`]: the queue a
//! device's default queue hands its memory out on.

use devbuf::ecosystem::DefaultQueueSource;
use devbuf::{ForeignObject, Protocol};
use pyo3::intern;
use pyo3::prelude::*;

use crate::objects::foreign_objects::ask;

/// The source `devbuf._ecosystem.default_queue` answers for.
pub(crate) struct PythonDefaultQueues;

impl DefaultQueueSource for PythonDefaultQueues {
    fn with_default_queue(
        &self,
        protocol: Protocol,
        native_selector: &str,
        adopt: &mut dyn FnMut(&ForeignObject<'_>),
    ) {
        // Past the interpreter's end nothing can be asked: the backend makes a queue of its own.
        let _ = Python::try_attach(|py| {
            let found = py
                .import(intern!(py, "devbuf._ecosystem"))
                .and_then(|module| {
                    module.call_method1(
                        intern!(py, "default_queue"),
                        (protocol.to_string(), native_selector),
                    )
                })
                .and_then(|queue| match queue.is_none() {
                    true => Ok(()),
                    false => ask(&queue, |object| adopt(object)),
                });
            // Nothing to raise to: the caller is making a queue, and goes on with one of its own.
            if let Err(err) = found {
                err.write_unraisable(py, None);
            }
        });
    }
}
