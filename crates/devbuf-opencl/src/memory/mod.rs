//! How an OpenCL queue allocates: Intel's USM extension where the device has it, else SVM, with
//! what each needs to tell its own memory.

use std::collections::BTreeMap;

use cl3::types::{cl_event, cl_int};
use devbuf_core::MemKind;
use opencl3::event::Event as ClEvent;
use parking_lot::Mutex;

use crate::usm::UsmApi;

/// How this queue allocates, with what that needs.
pub(crate) enum Allocator {
    Usm(UsmApi),
    Svm {
        /// SVM pointers carry no type the runtime can be asked for: devbuf keeps its own, by
        /// the address it handed out.
        allocations: Mutex<BTreeMap<usize, SvmAllocation>>,
        /// The largest alignment clSVMAlloc accepts (CL_DEVICE_MEM_BASE_ADDR_ALIGN; PoCL refuses
        /// more): larger ones are met by allocating more and handing out an aligned address.
        max_align: usize,
    },
    None,
}

/// One SVM allocation devbuf handed out.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SvmAllocation {
    /// What clSVMAlloc returned (at or before the address handed out).
    pub(crate) base: usize,
    pub(crate) len: usize,
    pub(crate) kind: MemKind,
}

/// The SVM allocation devbuf handed out that holds `ptr`, with the address it starts at.
pub(crate) fn svm_holding(
    allocations: &BTreeMap<usize, SvmAllocation>,
    ptr: *const u8,
) -> Option<(usize, SvmAllocation)> {
    let address = ptr as usize;
    allocations
        .range(..=address)
        .next_back()
        .filter(|(start, allocation)| address - **start < allocation.len)
        .map(|(&start, &allocation)| (start, allocation))
}

/// A USM command's event, made from what the extension function wrote.
pub(crate) fn usm_event(code: cl_int, event: cl_event) -> std::result::Result<ClEvent, cl_int> {
    match code {
        0 => Ok(ClEvent::new(event)),
        code => Err(code),
    }
}
