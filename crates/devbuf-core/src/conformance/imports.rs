//! The checks imports rely on: the queue does not claim memory that is not its own, the extent
//! check bounds an import by the allocation that holds it, and a foreign deleter runs once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::kit::{Outcome, alloc, ctx, expect_bytes, for_each_kind, outcome, pattern};
use crate::extent::check_extent;
use crate::interface::ForeignLayout;
use crate::interop::Holder;
use crate::{Buffer, DType, HostQueue, Layout, MemKind, Owner, Queue};

pub(super) fn classifies_foreign_pointers(queue: &Arc<dyn Queue>) -> Outcome {
    let on_stack = [0u8; 64];
    let on_heap = vec![0u8; 4096];
    let mut misclassified = vec![];
    for (what, ptr) in [
        ("a stack pointer", on_stack.as_ptr()),
        ("a heap pointer", on_heap.as_ptr()),
        ("the null pointer", std::ptr::null()),
    ] {
        let kind = queue.kind_of(ptr);
        if kind != MemKind::Unknown {
            misclassified.push(format!("{what} classified as {kind}"));
        }
    }
    let host = HostQueue::shared();
    if !Arc::ptr_eq(queue, &host) {
        // Another queue's allocations are foreign to this one (a private host queue's too).
        let other = Buffer::alloc(&host, MemKind::Device, 64).expect("host allocation");
        let kind = queue.kind_of(other.ptr());
        if kind != MemKind::Unknown {
            misclassified.push(format!("a host-backend allocation classified as {kind}"));
        }
    }
    if misclassified.is_empty() {
        Outcome::Pass
    } else {
        Outcome::Fail(misclassified.join("; "))
    }
}

/// The queue answers which allocation holds a pointer into its own memory (what an import checks
/// a descriptor's whole extent against): the allocation, covering the buffer, or at least the
/// kind; and where it names the allocation, a span one byte past its end is refused.
pub(super) fn bounds_own_allocations(queue: &Arc<dyn Queue>) -> Outcome {
    for_each_kind(queue, |kind| {
        let buffer = alloc(queue, kind, 4096)?;
        let base = buffer.ptr() as usize;
        let holder = |address: usize| {
            ctx(queue.interop().holder_of(address as *const u8), || {
                format!("asking which allocation holds {address:#x}")
            })
        };
        for offset in [0, 1, 2048, 4095] {
            match holder(base + offset)? {
                Holder::Allocation { kind: found, range }
                    if found == kind && range.start <= base && base + 4096 <= range.end => {}
                Holder::Unbounded { kind: found, .. } if found == kind => {}
                other => {
                    return Err(format!(
                        "the {kind} allocation at {base:#x} (+{offset}) is held by {other:?}"
                    ));
                }
            }
        }
        let Holder::Allocation { range, .. } = holder(base)? else {
            return Ok(());
        };
        let span = |len: usize| ForeignLayout {
            base,
            len,
            layout: Layout::contiguous(DType::UINT8, &[len], 0).expect("a byte layout"),
        };
        let fits = range.end - base;
        match check_extent(&**queue, &span(fits), "data") {
            Ok(found) if found == kind => {}
            other => {
                return Err(format!(
                    "{fits} bytes up to the allocation's end: {other:?}"
                ));
            }
        }
        if check_extent(&**queue, &span(fits + 1), "data").is_ok() {
            return Err(format!(
                "{} bytes at {base:#x} were accepted, one past the allocation {range:?}",
                fits + 1
            ));
        }
        Ok(())
    })
}

pub(super) fn deleter_runs_once(queue: &Arc<dyn Queue>) -> Outcome {
    outcome((|| {
        let runs = Arc::new(AtomicUsize::new(0));
        let mut memory = pattern(256, 3).into_boxed_slice();
        let ptr = memory.as_mut_ptr();
        let counter = Arc::clone(&runs);
        // SAFETY: `memory` is leaked into the deleter, which frees it once; it stays valid until then.
        let foreign = unsafe {
            Buffer::from_foreign(
                Arc::clone(queue),
                ptr,
                256,
                MemKind::Unknown,
                Owner::deleter(move || {
                    drop(memory);
                    counter.fetch_add(1, Ordering::SeqCst);
                }),
            )
        };
        if foreign.is_owned() {
            return Err("a foreign buffer reports itself as owned".into());
        }
        let clone = foreign.clone();
        let part = ctx(foreign.slice(16..48), || "slicing".into())?;
        expect_bytes(&part, &pattern(256, 3)[16..48], "foreign sub-view")?;
        drop(foreign);
        drop(clone);
        if runs.load(Ordering::SeqCst) != 0 {
            return Err("the deleter ran while a sub-view was alive".into());
        }
        drop(part);
        match runs.load(Ordering::SeqCst) {
            1 => {}
            n => return Err(format!("the deleter ran {n} times after the last view")),
        }
        // A keep-alive owner is released with the last view too.
        let owner = Arc::new(());
        let mut memory = vec![0u8; 16];
        // SAFETY: `memory` outlives the buffer, which is dropped below.
        let kept = unsafe {
            Buffer::from_foreign(
                Arc::clone(queue),
                memory.as_mut_ptr(),
                16,
                MemKind::Unknown,
                Owner::keep_alive(Arc::clone(&owner)),
            )
        };
        let strong = Arc::strong_count(&owner);
        drop(kept);
        if strong != 2 || Arc::strong_count(&owner) != 1 {
            return Err("a keep-alive owner was not held exactly as long as its buffer".into());
        }
        Ok(())
    })())
}
