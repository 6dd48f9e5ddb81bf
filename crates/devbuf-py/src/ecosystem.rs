//! What the consumers of a backend's memory keep for themselves, asked of Python
//! (`devbuf._ecosystem`, which asks dpctl) for core's [`devbuf::ecosystem`]: the queue a device's
//! default queue hands its memory out on, and their record of the work on a queue, which devbuf's
//! commands join.

use devbuf::ecosystem::Ecosystem;
use devbuf::{ExportedHandle, ForeignObject, Protocol};
use pyo3::intern;
use pyo3::prelude::*;

use crate::objects::foreign_objects::ask;
use crate::objects::queue::handle_capsule;

/// The ecosystem `devbuf._ecosystem` answers for.
pub(crate) struct PythonEcosystem;

impl Ecosystem for PythonEcosystem {
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

    fn order_next_work_after(
        &self,
        protocol: Protocol,
        queue: ExportedHandle,
        event: ExportedHandle,
    ) -> bool {
        // Past the interpreter's end no consumer is left to tell: the caller waits instead.
        Python::try_attach(|py| {
            let told = (|| -> PyResult<bool> {
                let (queue, event) = (handle_capsule(py, queue)?, handle_capsule(py, event)?);
                py.import(intern!(py, "devbuf._ecosystem"))?
                    .call_method1(
                        intern!(py, "order_next_work_after"),
                        (protocol.to_string(), queue, event),
                    )?
                    .extract()
            })();
            told.unwrap_or_else(|err| {
                err.write_unraisable(py, None);
                false
            })
        })
        .unwrap_or(false)
    }
}
