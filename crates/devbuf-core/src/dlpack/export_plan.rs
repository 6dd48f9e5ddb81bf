//! What `__dlpack__(max_version=, dl_device=, copy=, stream=)` does with an array, per the array
//! API and DLPack 1.3: a zero-copy export (to its own device, or to the CPU for memory the host
//! can read), a copy (to the CPU, or on its own device), or a BufferError saying why neither. The
//! Python crate reads the arguments and carries the plan out; the rule is here.

use dlpark::ffi::{DLDevice, DLDeviceType};

use crate::{Error, MemKind, Result};

/// DLPack's CPU device: host memory of the process.
pub const CPU: DLDevice = DLDevice {
    device_type: DLDeviceType::CPU,
    device_id: 0,
};

/// What the producer knows of the array an export is asked of.
#[derive(Debug, Clone, Copy)]
pub struct ExportedArray<'a> {
    /// The DLPack device of the array's memory.
    pub own: DLDevice,
    /// The memory's kind (named in an error).
    pub kind: MemKind,
    /// Whether the host can read the memory: it then goes to the CPU without a copy.
    pub host_accessible: bool,
    /// Whether the array is read-only, which a legacy capsule cannot say.
    pub readonly: bool,
    /// Why a zero-copy export to its own device is refused, if it is
    /// (`dlpack::pointer_refusal`, `Interop::dlpack_export_refusal`).
    pub refusal: Option<&'a str>,
    /// Whether the memory's backend orders a zero-copy export to its own device for a consumer
    /// that passes no stream (`Interop::dlpack_orders_streamless_export`).
    pub streamless_rule: bool,
}

/// The consumer's arguments, read.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExportRequest {
    /// A versioned capsule (`max_version` at least 1.0), else the legacy one.
    pub versioned: bool,
    /// `dl_device`, where given.
    pub dl_device: Option<DLDevice>,
    /// `copy`, where given: `Some(true)` always copies, `Some(false)` never does.
    pub copy: Option<bool>,
    /// Whether the consumer passed a `stream` (not None).
    pub stream_given: bool,
}

/// How a zero-copy export is ordered before the consumer reads the memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportOrdering {
    /// The generic rule for a consumer that passes no stream, without asking the backend
    /// (`exchange::prepare_streamless_dlpack_export`).
    Streamless,
    /// The backend's rule for the consumer's stream on the target device
    /// (`exchange::prepare_dlpack_export`).
    ForConsumer,
}

/// Where a copy is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyTo {
    /// Host memory of the process (DLPack's CPU device).
    Host,
    /// The array's own device, in memory of its kind.
    OwnDevice,
}

/// What the export does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportPlan {
    /// The array's own memory, described on `target`.
    ZeroCopy {
        /// The device the capsule names.
        target: DLDevice,
        /// How the export is ordered.
        ordering: ExportOrdering,
    },
    /// A copy, exported with DLPack's `IS_COPIED` flag.
    Copy {
        /// The device the capsule names.
        target: DLDevice,
        /// Where the copy is made.
        to: CopyTo,
    },
}

/// The plan for `request` of `array`, or why there is none (an [`Error::Unexportable`]).
pub fn plan_export(array: &ExportedArray<'_>, request: &ExportRequest) -> Result<ExportPlan> {
    let own = array.own;
    let target = request.dl_device.unwrap_or(own);
    let zero_copy =
        request.copy != Some(true) && (target == own || (target == CPU && array.host_accessible));
    if zero_copy {
        if target == own
            && let Some(refusal) = array.refusal
        {
            return Err(Error::Unexportable(format!("__dlpack__: {refusal}")));
        }
        // The legacy capsule has no read-only flag: its consumer would take the memory as writable.
        if !request.versioned && array.readonly {
            return Err(Error::Unexportable(
                "__dlpack__: the array is read-only and a legacy (unversioned) DLPack capsule \
                 cannot say so; pass max_version=(1, 0) or later, or copy=True"
                    .into(),
            ));
        }
        // No stream for the own device, where the backend has no rule for that (host memory,
        // SYCL): the generic rule without asking the backend (most calls).
        let ordering = if target == own && !array.streamless_rule && !request.stream_given {
            ExportOrdering::Streamless
        } else {
            ExportOrdering::ForConsumer
        };
        return Ok(ExportPlan::ZeroCopy { target, ordering });
    }
    if request.copy == Some(false) {
        return Err(Error::Unexportable(format!(
            "dl_device: {:?} memory on DLPack device {:?} cannot be exported to {:?} without a \
             copy, and copy=False",
            array.kind,
            (own.device_type.0, own.device_id),
            (target.device_type.0, target.device_id),
        )));
    }
    let to = if target == CPU {
        CopyTo::Host
    } else if target == own {
        CopyTo::OwnDevice
    } else {
        return Err(Error::Unexportable(format!(
            "dl_device: devbuf copies to the CPU (1, 0) or to the array's own device {:?}, not \
             to {:?}",
            (own.device_type.0, own.device_id),
            (target.device_type.0, target.device_id),
        )));
    };
    Ok(ExportPlan::Copy { target, to })
}

/// Whether `__dlpack__` with no `dl_device`, `copy` or `stream` exports the array's own memory
/// under the generic streamless rule: [`plan_export`]'s answer for that request, asked without
/// building it, since every `np.from_dlpack` asks it (the Python crate's in-place path).
#[inline]
pub fn plain_export_is_streamless_zero_copy(
    refused: bool,
    streamless_rule: bool,
    versioned: bool,
    readonly: bool,
) -> bool {
    !refused && !streamless_rule && (versioned || !readonly)
}

#[cfg(test)]
mod tests;
