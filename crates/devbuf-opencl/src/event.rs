//! [`OpenClEvent`]: a point in an OpenCL queue's work.

use std::any::Any;
use std::sync::Arc;

use cl3::error_codes::error_text;
use devbuf_core::{Error, QueueEvent, Result};
use opencl3::event::CL_COMPLETE;
use opencl3::event::Event as ClEvent;

use crate::device::OPENCL;

/// A point in an OpenCL queue's work: the event of its last command.
#[derive(Debug)]
pub struct OpenClEvent {
    pub(crate) event: Arc<ClEvent>,
    /// The identity of the [`OpenClQueue`] that recorded it.
    pub(crate) recorded_by: Arc<()>,
}

impl QueueEvent for OpenClEvent {
    fn wait(&self) -> Result<()> {
        self.event
            .wait()
            .map_err(|err| Error::runtime(OPENCL, "clWaitForEvents", err.to_string()))
    }

    fn is_complete(&self) -> Result<bool> {
        let status = self
            .event
            .command_execution_status()
            .map_err(|err| Error::runtime(OPENCL, "clGetEventInfo", err.to_string()))?;
        match status.0 {
            CL_COMPLETE => Ok(true),
            failed if failed < 0 => Err(Error::runtime(
                OPENCL,
                "clGetEventInfo",
                format!("the command failed: {}", error_text(failed)),
            )),
            _ => Ok(false),
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
