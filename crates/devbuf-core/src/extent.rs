//! The whole extent an imported descriptor claims, checked against the allocation that holds it.
//!
//! A descriptor names a pointer and a layout; [`crate::interface`] works out once which bytes its
//! elements span (shape, strides, offset and item size, negative strides and empty arrays
//! included: a [`ForeignLayout`]). Which allocation holds a pointer is the runtime's to say, an
//! exchange-side question each backend answers through [`crate::Interop::holder_of`] as well as its
//! runtime allows. An import is refused unless every byte it claims lies in that one allocation,
//! so that no copy, fill or host view of it reaches past memory that exists.

// Caller numbers become addresses here: every size, count, offset and alignment is checked
// (docs/architecture.md, "Untrusted numbers").
#![deny(clippy::arithmetic_side_effects)]

use std::ops::Range;

use crate::interface::ForeignLayout;
use crate::interop::Holder;
use crate::{Error, MemKind, Queue, Result, host};

/// The kind of memory `foreign` is, once its whole extent is known to lie in one allocation of
/// `queue`'s runtime (as far as that runtime can tell: see [`Holder`]). Errors name the key at
/// fault: `pointer_key` (the descriptor's pointer, e.g. "data") when the runtime does not know
/// element 0, "strides" when the elements reach before the allocation, and "shape" (or
/// "strides", for a strided layout) when they reach past its end. An empty array claims no bytes
/// and is [`MemKind::Unknown`]. Memory the runtime cannot vouch for ([`Holder::Unchecked`]: host
/// memory of the host backend's) must at least lie in this process's user address space
/// ([`crate::host::user_address_limit`]).
pub fn check_extent(
    queue: &dyn Queue,
    foreign: &ForeignLayout,
    pointer_key: &'static str,
) -> Result<MemKind> {
    if foreign.len == 0 {
        return Ok(MemKind::Unknown);
    }
    // `interface` bounded the span inside the address space; checked all the same.
    let first = foreign.base;
    let (Some(end), Some(element0)) = (
        first.checked_add(foreign.len),
        first.checked_add(foreign.layout.offset()),
    ) else {
        return Err(past_user_space(foreign, pointer_key));
    };
    match queue.interop().holder_of(element0 as *const u8)? {
        Holder::Unknown => Err(unknown_pointer(queue, element0, pointer_key)),
        Holder::Unchecked if host::past_user_space(first, foreign.len) => {
            Err(past_user_space(foreign, pointer_key))
        }
        Holder::Unchecked => Ok(MemKind::Unknown),
        Holder::Allocation { kind, range } => {
            if first < range.start || end > range.end {
                return Err(outside_allocation(queue, foreign, &range));
            }
            Ok(kind)
        }
        unbounded @ Holder::Unbounded { kind, .. } => {
            // The runtime cannot say where the allocation ends: the first and the last byte must
            // at least be the same memory on the same device.
            // `len` is not 0: `end` is past `first`.
            for address in [first, end.saturating_sub(1)] {
                if address != element0
                    && queue.interop().holder_of(address as *const u8)? != unbounded
                {
                    return Err(other_memory(queue, foreign, address, kind));
                }
            }
            Ok(kind)
        }
    }
}

/// Checks what a memory resource handed out for `size` bytes of `kind` memory on `queue` (one
/// written in Python, whose addresses are untrusted input as import descriptors are): the span
/// must not wrap past the end of the address space, the runtime must classify `ptr` as `kind`
/// memory of the queue's device, and the whole span must lie in that one allocation, as far as
/// the runtime can tell ([`Holder`]; the host backend cannot tell foreign host memory from
/// garbage, and vouches for neither). The error's key is "ptr"; its message says what the
/// runtime answered.
pub fn check_handed_out(queue: &dyn Queue, ptr: usize, size: usize, kind: MemKind) -> Result<()> {
    let refused = |why: String| {
        Error::invalid(
            "ptr",
            format!(
                "{ptr:#x} for {size} bytes of {kind} memory on {:?}: {why}",
                queue.device().selector
            ),
        )
    };
    let Some(end) = ptr.checked_add(size) else {
        return Err(refused(
            "the span wraps past the end of the address space".into(),
        ));
    };
    if size == 0 {
        return Ok(());
    }
    match queue.interop().holder_of(ptr as *const u8)? {
        Holder::Unchecked if host::past_user_space(ptr, size) => Err(refused(format!(
            "the span ends past {:#x}, where this process's address space ends",
            host::user_address_limit()
        ))),
        Holder::Unchecked => Ok(()),
        Holder::Unknown => Err(refused("the runtime does not know the address".into())),
        Holder::Allocation { kind: found, .. } | Holder::Unbounded { kind: found, .. }
            if found != kind =>
        {
            Err(refused(format!(
                "the runtime classifies it as {found} memory"
            )))
        }
        Holder::Allocation { range, .. } if ptr < range.start || end > range.end => {
            Err(refused(format!(
                "it reaches past the end of the {}-byte allocation at {:#x} that holds it",
                range.len(),
                range.start
            )))
        }
        Holder::Allocation { .. } => Ok(()),
        unbounded @ Holder::Unbounded { .. } => {
            // The runtime cannot say where the allocation ends: the last byte must at least be
            // the same memory on the same device.
            // `size` is not 0: `end` is past `ptr`.
            let last = end.saturating_sub(1);
            if queue.interop().holder_of(last as *const u8)? != unbounded {
                return Err(refused(format!(
                    "its last byte at {last:#x} is not {kind} memory of the same device"
                )));
            }
            Ok(())
        }
    }
}

// `check_extent`'s errors, out of its hot code (an import's runtime queries evict it as it is).

/// The key for elements that reach past the end: "shape" for a C-contiguous layout, else
/// "strides".
fn reach_key(foreign: &ForeignLayout) -> &'static str {
    if foreign.layout.is_c_contiguous() {
        "shape"
    } else {
        "strides"
    }
}

/// What the descriptor claims, for the errors.
fn claim(foreign: &ForeignLayout) -> String {
    let first = foreign.base;
    let end = first.saturating_add(foreign.len);
    format!(
        "shape {:?} with byte strides {:?} spans {} bytes at {first:#x}..{end:#x}",
        foreign.layout.shape(),
        foreign.layout.strides(),
        foreign.len
    )
}

/// A span the host backend cannot vouch for that reaches past this process's address space:
/// the pointer's key when element 0 is already past it, else the key of what reaches.
#[cold]
#[inline(never)]
fn past_user_space(foreign: &ForeignLayout, pointer_key: &'static str) -> Error {
    let limit = host::user_address_limit();
    let element0 = foreign.base.saturating_add(foreign.layout.offset());
    let key = if host::past_user_space(element0, 1) {
        pointer_key
    } else {
        reach_key(foreign)
    };
    Error::invalid(
        key,
        format!(
            "{}: it reaches past {limit:#x}, where this process's address space ends, so no \
             memory lies there",
            claim(foreign)
        ),
    )
}

#[cold]
#[inline(never)]
fn unknown_pointer(queue: &dyn Queue, element0: usize, pointer_key: &'static str) -> Error {
    let device = &queue.device().selector;
    Error::invalid(
        pointer_key,
        format!("{element0:#x} is not memory of {device:?} (the runtime classifies it as unknown)"),
    )
}

#[cold]
#[inline(never)]
fn outside_allocation(queue: &dyn Queue, foreign: &ForeignLayout, range: &Range<usize>) -> Error {
    let allocation = format!(
        "the {}-byte allocation at {:#x} on {:?} that holds element 0",
        range.len(),
        range.start,
        queue.device().selector
    );
    if foreign.base < range.start {
        Error::invalid(
            "strides",
            format!("{}: it starts before {allocation}", claim(foreign)),
        )
    } else {
        Error::invalid(
            reach_key(foreign),
            format!(
                "{}: it reaches past the end of {allocation}",
                claim(foreign)
            ),
        )
    }
}

#[cold]
#[inline(never)]
fn other_memory(
    queue: &dyn Queue,
    foreign: &ForeignLayout,
    address: usize,
    kind: MemKind,
) -> Error {
    let key = if address == foreign.base {
        "strides"
    } else {
        reach_key(foreign)
    };
    Error::invalid(
        key,
        format!(
            "{}: its byte at {address:#x} is not {kind} memory of the device on {:?} that holds \
             element 0",
            claim(foreign),
            queue.device().selector
        ),
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::interface::{InterfaceDict, import_cai};
    use crate::interop::{Interop, IpcSharing};
    use crate::{Buffer, HostQueue, host};
    use dlpark::ffi::DLDevice;

    /// A host queue whose runtime knows the bounds of its allocations, or only the kind.
    #[derive(Debug)]
    struct Answering {
        inner: HostQueue,
        bounded: bool,
    }

    impl Answering {
        fn queue(bounded: bool) -> Arc<dyn Queue> {
            Arc::new(Answering {
                inner: HostQueue::new(),
                bounded,
            })
        }
    }

    impl Queue for Answering {
        fn device(&self) -> &crate::DeviceInfo {
            self.inner.device()
        }
        fn allocate(
            &self,
            kind: MemKind,
            size: usize,
            align: usize,
        ) -> Result<std::ptr::NonNull<u8>> {
            self.inner.allocate(kind, size, align)
        }
        unsafe fn deallocate(
            &self,
            ptr: std::ptr::NonNull<u8>,
            kind: MemKind,
            size: usize,
            align: usize,
        ) {
            // SAFETY: the caller's contract, passed on.
            unsafe { self.inner.deallocate(ptr, kind, size, align) }
        }
        unsafe fn copy(&self, dst: *mut u8, src: *const u8, len: usize) -> Result<()> {
            // SAFETY: the caller's contract, passed on.
            unsafe { self.inner.copy(dst, src, len) }
        }
        unsafe fn fill(&self, dst: *mut u8, byte: u8, len: usize) -> Result<()> {
            // SAFETY: the caller's contract, passed on.
            unsafe { self.inner.fill(dst, byte, len) }
        }
        fn wait(&self) -> Result<()> {
            Ok(())
        }
        fn record_event(&self) -> Result<crate::Event> {
            self.inner.record_event()
        }
        fn wait_event(&self, event: &crate::Event) -> Result<()> {
            event.wait()
        }
        fn kind_of(&self, ptr: *const u8) -> MemKind {
            self.inner.kind_of(ptr)
        }
        fn interop(&self) -> &dyn Interop {
            self
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    }

    /// The host queue's answers, but for what the runtime knows of an allocation's bounds.
    impl Interop for Answering {
        fn dlpack_device(&self, kind: MemKind) -> DLDevice {
            self.inner.dlpack_device(kind)
        }
        fn dlpack_export_refusal(&self) -> Option<String> {
            None
        }
        fn holder_of(&self, ptr: *const u8) -> Result<Holder> {
            Ok(match (self.inner.holder_of(ptr)?, self.bounded) {
                (Holder::Unchecked, _) => Holder::Unknown,
                (Holder::Allocation { kind, .. }, false) => Holder::Unbounded { kind, place: 7 },
                (answer, _) => answer,
            })
        }
        crate::hands_nothing_out!();
        fn ipc(&self) -> Result<&dyn IpcSharing> {
            self.inner.ipc()
        }
    }

    fn cai(shape: &[i64], strides: Option<&[i64]>, data: usize) -> ForeignLayout {
        import_cai(&InterfaceDict {
            version: 3,
            data: (data, false),
            shape,
            typestr: "<f4",
            strides,
            ..Default::default()
        })
        .unwrap()
    }

    fn key_of(result: Result<MemKind>) -> String {
        let err = result.unwrap_err().to_string();
        err.split_once(':').unwrap().0.to_string()
    }

    #[test]
    fn a_span_inside_its_allocation_passes_and_one_byte_past_either_end_names_its_key() {
        for bounded in [true, false] {
            let queue = Answering::queue(bounded);
            let buffer = Buffer::alloc(&queue, MemKind::Device, 4096).unwrap();
            let base = buffer.ptr() as usize;
            let check = |foreign: ForeignLayout| check_extent(&*queue, &foreign, "data");
            // The whole allocation, forwards and backwards, and an empty array anywhere.
            assert_eq!(check(cai(&[1024], None, base)).unwrap(), MemKind::Device);
            assert_eq!(
                check(cai(&[1024], Some(&[-4]), base + 4092)).unwrap(),
                MemKind::Device
            );
            assert_eq!(check(cai(&[0, 5], None, 0)).unwrap(), MemKind::Unknown);
            assert_eq!(
                check(cai(&[2, 0], Some(&[1 << 40, 4]), base)).unwrap(),
                MemKind::Unknown
            );
            // A 1 MiB claim at the start of a 4 KiB allocation; one float too many; a stride that
            // jumps out; negative strides that reach back before the allocation.
            assert_eq!(key_of(check(cai(&[1 << 18], None, base))), "shape");
            assert_eq!(key_of(check(cai(&[1025], None, base))), "shape");
            assert_eq!(key_of(check(cai(&[2], Some(&[4096]), base))), "strides");
            assert_eq!(key_of(check(cai(&[2], Some(&[-4]), base))), "strides");
            assert_eq!(
                key_of(check(cai(&[3, 2], Some(&[-8, 4]), base + 8))),
                "strides"
            );
            // Element 0 outside any allocation names the pointer's key.
            let elsewhere = [0f32; 4];
            let foreign = cai(&[4], None, elsewhere.as_ptr() as usize);
            assert_eq!(key_of(check_extent(&*queue, &foreign, "offset")), "offset");
        }
    }

    #[test]
    fn the_host_backend_bounds_its_own_allocations_and_trusts_other_host_memory() {
        let queue = HostQueue::shared();
        assert_eq!(queue.device().backend, host::HOST);
        let buffer = Buffer::alloc(&queue, MemKind::Shared, 64).unwrap();
        let base = buffer.ptr() as usize;
        let check = |foreign: ForeignLayout| check_extent(&*queue, &foreign, "data");
        assert_eq!(check(cai(&[16], None, base)).unwrap(), MemKind::Shared);
        assert_eq!(key_of(check(cai(&[17], None, base))), "shape");
        // Memory the host backend did not allocate cannot be bounded: taken as it comes.
        let theirs = [0f32; 4];
        let foreign = cai(&[4], None, theirs.as_ptr() as usize);
        assert_eq!(check(foreign).unwrap(), MemKind::Unknown);
    }

    #[test]
    fn memory_a_resource_hands_out_must_be_the_kind_asked_and_hold_the_whole_span() {
        for bounded in [true, false] {
            let queue = Answering::queue(bounded);
            let buffer = Buffer::alloc(&queue, MemKind::Device, 4096).unwrap();
            let base = buffer.ptr() as usize;
            let check = |ptr: usize, size: usize, kind: MemKind| {
                check_handed_out(&*queue, ptr, size, kind).map_err(|err| err.to_string())
            };
            check(base, 4096, MemKind::Device).unwrap();
            check(base + 4000, 96, MemKind::Device).unwrap();
            let wrong_kind = check(base, 4096, MemKind::Host).unwrap_err();
            assert!(
                wrong_kind.contains("classifies it as device memory"),
                "{wrong_kind}"
            );
            let too_long = check(base, 4097, MemKind::Device).unwrap_err();
            assert!(too_long.starts_with("ptr: "), "{too_long}");
            let elsewhere = [0u8; 64];
            let unknown = check(elsewhere.as_ptr() as usize, 64, MemKind::Device).unwrap_err();
            assert!(unknown.contains("does not know"), "{unknown}");
            let wraps = check(usize::MAX - 4095, 8192, MemKind::Device).unwrap_err();
            assert!(wraps.contains("wraps past the end"), "{wraps}");
        }
        // The host backend vouches for no foreign host memory, but never for a wrapping span.
        let host = HostQueue::shared();
        let theirs = [0u8; 64];
        check_handed_out(&*host, theirs.as_ptr() as usize, 64, MemKind::Host).unwrap();
        assert!(check_handed_out(&*host, usize::MAX - 4095, 8192, MemKind::Host).is_err());
    }
}
