//! The exchange half's checks: the answers of [`crate::Interop`] held against each other and
//! against the device half ([`Queue::kind_of`], [`Queue::wait_device`]), so that a backend cannot
//! pass the kit with answers that contradict what it does.

use std::sync::Arc;

use super::kit::{CheckResult, Outcome, alloc, ctx, for_each_kind, outcome, supported_kinds};
use crate::interop::{ForeignObject, Holder, ProducerStream};
use crate::{Error, MemKind, Queue};

/// What the runtime tells of the allocation holding a pointer agrees with the queue's
/// classification: the same kind at the first and the last byte of each allocation, an
/// allocation's bounds around the pointer where it gives them, and nothing known of memory the
/// queue does not know (a stack variable); the queue's memory has a DLPack device.
pub(super) fn holders_agree_with_kinds(queue: &Arc<dyn Queue>) -> Outcome {
    let interop = queue.interop();
    let local = 0u64;
    let foreign = (&raw const local).cast::<u8>();
    if queue.kind_of(foreign) == MemKind::Unknown {
        match interop.holder_of(foreign) {
            Ok(Holder::Unknown | Holder::Unchecked) => {}
            other => {
                return Outcome::Fail(format!(
                    "kind_of says a stack address is no memory of the queue's, holder_of says \
                     {other:?}"
                ));
            }
        }
    }
    for_each_kind(queue, |kind| {
        let buffer = alloc(queue, kind, 4096)?;
        let first = buffer.ptr();
        let last = first.wrapping_add(buffer.len() - 1);
        for ptr in [first, last] {
            let classified = queue.kind_of(ptr);
            let holder = ctx(interop.holder_of(ptr), || format!("holder_of({ptr:p})"))?;
            let agrees = match &holder {
                Holder::Allocation { kind: held, range } => {
                    *held == classified && range.contains(&(ptr as usize))
                }
                Holder::Unbounded { kind: held, .. } => *held == classified,
                Holder::Unchecked => true,
                Holder::Unknown => classified == MemKind::Unknown,
            };
            if !agrees {
                return Err(format!(
                    "{kind} memory at {ptr:p}: kind_of says {classified}, holder_of {holder:?}"
                ));
            }
        }
        let device = interop.dlpack_device(kind);
        if interop.dlpack_export_refusal().is_none() && device.device_id < 0 {
            return Err(format!(
                "{kind} memory may leave through DLPack, yet its DLPack device {device:?} has no id"
            ));
        }
        Ok(())
    })
}

/// A queue that hands other libraries a handle to its work says they may enqueue work devbuf
/// does not track; its events for them complete once its work has; without such work there is no
/// event to wait for; a device wait that cannot see every queue only matters where other
/// libraries work; memory it cannot share between processes says why as "unsupported".
pub(super) fn handles_agree_with_foreign_work(queue: &Arc<dyn Queue>) -> Outcome {
    match supported_kinds(queue) {
        Ok(kinds) => outcome(handles_agree(queue, kinds[0])),
        Err(skip) => skip,
    }
}

fn handles_agree(queue: &Arc<dyn Queue>, kind: MemKind) -> CheckResult {
    let interop = queue.interop();
    let native = interop.native_stream();
    let work_stream = interop.dlpack_work_stream();
    let handle = interop.export_handle();
    let foreign_work = interop.untracked_foreign_work();
    if (native.is_some() || work_stream.is_some() || handle.is_some()) && !foreign_work {
        return Err(format!(
            "it hands out a handle (native stream {native:?}, DLPack work stream {work_stream:?}, \
             exported handle {handle:?}) but says no other library enqueues work on it"
        ));
    }
    if let Some(native) = native
        && work_stream != Some(native.get())
    {
        return Err(format!(
            "its native stream is {native:?}, but DLPack's exchange API is told {work_stream:?}"
        ));
    }
    if !interop.wait_device_covers_every_queue() && !foreign_work {
        return Err(
            "its device wait does not cover every queue its memory is used on, though no other \
             library works on it"
                .into(),
        );
    }
    ctx(interop.order_after_foreign_work(), || {
        "order_after_foreign_work".into()
    })?;
    let buffer = alloc(queue, kind, 1 << 16)?;
    ctx(buffer.fill(3), || "filling".into())?;
    match ctx(interop.foreign_work_event(), || "foreign_work_event".into())? {
        Some(_) if !foreign_work => {
            return Err("no other library works on it, yet it has foreign work to wait for".into());
        }
        Some(event) => ctx(event.wait(), || "waiting for foreign_work_event".into())?,
        None => {}
    }
    let handed_out = ctx(interop.handed_out_event(), || "handed_out_event".into())?;
    ctx(handed_out.wait(), || "waiting for handed_out_event".into())?;
    if !ctx(handed_out.is_complete(), || "handed_out_event".into())? {
        return Err("handed_out_event does not say it completed after a wait for it".into());
    }
    ctx(queue.wait_device(), || "wait_device".into())?;
    match interop.ipc() {
        Ok(_) | Err(Error::Unsupported { .. }) => Ok(()),
        Err(other) => Err(format!("ipc() fails other than as unsupported: {other}")),
    }
}

/// The protocols' stream values every consumer and producer may pass are accepted by the
/// backend's stream rules (DLPack's `stream=None`, a CAI without a `stream` entry unsynchronized),
/// and what is no stream at all is refused as the wrong type, never taken for one; where the
/// queue names its stream as CAI does, CAI's ambiguous 0 is refused.
pub(super) fn stream_rules_take_what_the_protocols_allow(queue: &Arc<dyn Queue>) -> Outcome {
    let interop = queue.interop();
    let per_kind = for_each_kind(queue, |kind| {
        let device = interop.dlpack_device(kind);
        // SAFETY: neither object carries a handle.
        let (none, text) = unsafe {
            (
                interop.dlpack_consumer(device, &ForeignObject::Nothing),
                interop.dlpack_consumer(device, &ForeignObject::Text("not a stream")),
            )
        };
        if let Some(Err(err)) = &none {
            return Err(format!(
                "a DLPack export of {kind} memory refuses stream=None: {err}"
            ));
        }
        if none.is_some() != interop.dlpack_orders_streamless_export(device) {
            return Err(format!(
                "dlpack_orders_streamless_export says {} for {kind} memory, but dlpack_consumer \
                 {} a rule for stream=None",
                interop.dlpack_orders_streamless_export(device),
                if none.is_some() { "has" } else { "has no" }
            ));
        }
        match text {
            None | Some(Err(Error::InvalidType { key: "stream", .. })) => {}
            Some(Ok(order)) => {
                return Err(format!(
                    "a DLPack export of {kind} memory takes a string for a stream: {order:?}"
                ));
            }
            Some(Err(other)) => {
                return Err(format!(
                    "a DLPack export of {kind} memory refuses a string for a stream other than \
                     as the wrong type of `stream`: {other}"
                ));
            }
        }
        Ok(())
    });
    if per_kind != Outcome::Pass {
        return per_kind;
    }
    {
        // SAFETY: no stream handle is passed.
        let unsynchronized = unsafe {
            interop.order_after_producer(ProducerStream::CaiEntry(ForeignObject::Nothing), false)
        };
        match unsynchronized {
            Ok(work) if work.ordered.is_none() && work.hold_back.is_none() => {}
            Ok(work) => {
                return Outcome::Fail(format!(
                    "an unsynchronized import without a stream still orders work: {work:?}"
                ));
            }
            Err(err) => {
                return Outcome::Fail(format!(
                    "an unsynchronized import without a stream is refused: {err}"
                ));
            }
        }
        if interop.native_stream().is_some() {
            // SAFETY: 0 names no stream; it is refused before any use.
            let zero = unsafe {
                interop.order_after_producer(ProducerStream::CaiEntry(ForeignObject::Int(0)), false)
            };
            if zero.is_ok() {
                return Outcome::Fail("CAI's ambiguous stream 0 is accepted".into());
            }
        }
        Outcome::Pass
    }
}
