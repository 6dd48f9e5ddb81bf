//! The checks every backend must pass: allocation of each kind, alignment, copies and fills,
//! ordering of release after enqueued work, pointer classification, sub-views, threads,
//! allocation failure, events, and copies across backends (what imports rely on is in
//! [`super::imports`]).

use std::sync::Arc;

use super::kit::{
    CheckResult, Outcome, alloc, allocate, ctx, expect_bytes, for_each_kind, outcome, pattern,
    supported_kinds,
};
use crate::mr::FreeAfter;
use crate::{Buffer, DEFAULT_ALIGNMENT, Error, HostQueue, MemKind, Queue, Runs};

pub(super) fn alloc_each_kind(queue: &Arc<dyn Queue>) -> Outcome {
    let unsupported: Vec<_> = MemKind::ALLOCATABLE
        .into_iter()
        .filter(|&kind| !queue.supports(kind))
        .collect();
    for kind in unsupported {
        if allocate(queue, kind, 64, DEFAULT_ALIGNMENT).is_ok() {
            return Outcome::Fail(format!(
                "{kind} is not supported, yet allocating it succeeded"
            ));
        }
    }
    for_each_kind(queue, |kind| {
        for len in [0, 1, 3, 1000, 4097, 1 << 20] {
            let buffer = alloc(queue, kind, len)?;
            // Null exactly for an empty buffer of a queue whose empty buffers are null.
            let null = len == 0 && queue.empty_buffers_are_null();
            if buffer.len() != len || buffer.ptr().is_null() != null || buffer.kind() != kind {
                return Err(format!("{kind} allocation of {len} bytes gave {buffer:?}"));
            }
        }
        Ok(())
    })
}

pub(super) fn alignment_honoured(queue: &Arc<dyn Queue>) -> Outcome {
    for_each_kind(queue, |kind| {
        for align in [1, 8, 64, 256, 4096] {
            for len in [1, 100, 4097] {
                let buffer = ctx(allocate(queue, kind, len, align), || {
                    format!("allocating {len} bytes of {kind} aligned to {align}")
                })?;
                if !(buffer.ptr() as usize).is_multiple_of(align) {
                    return Err(format!(
                        "{kind} allocation {:p} is not aligned to {align}",
                        buffer.ptr()
                    ));
                }
            }
        }
        Ok(())
    })
}

pub(super) fn copy_round_trips(queue: &Arc<dyn Queue>) -> Outcome {
    let kinds = match supported_kinds(queue) {
        Ok(kinds) => kinds,
        Err(skip) => return skip,
    };
    let len = 4099;
    let bytes = pattern(len, 1);
    outcome((|| {
        for &from in &kinds {
            let src = alloc(queue, from, len)?;
            ctx(src.copy_from_host(&bytes), || format!("host -> {from}"))?;
            expect_bytes(&src, &bytes, &format!("host -> {from} -> host"))?;
            for &to in &kinds {
                let dst = alloc(queue, to, len)?;
                ctx(dst.copy_from(&src), || format!("{from} -> {to}"))?;
                expect_bytes(&dst, &bytes, &format!("{from} -> {to}"))?;
                // A copy between sub-ranges at odd offsets.
                let part = ctx(dst.slice(1..100), || "slicing".into())?;
                ctx(part.copy_from(&src.slice(7..106).unwrap()), || {
                    format!("{from}[7..106] -> {to}[1..100]")
                })?;
                let mut expected = bytes.clone();
                expected.copy_within(7..106, 1);
                expect_bytes(&dst, &expected, &format!("{from}[7..106] -> {to}[1..100]"))?;
            }
        }
        Ok(())
    })())
}

/// Runs a fixed step apart, the rows [`Queue::copy_rows`] takes (one 2-D copy or kernel where the
/// runtime has one), between every two kinds and from host-backend memory, with the source's rows
/// apart and packed (a fill's pattern), waited for and enqueued, and from every kind into host
/// memory with packed rows (`get()`): each row lands where it belongs and the bytes between the
/// rows stay as they were.
pub(super) fn copy_rows_move_only_the_rows(queue: &Arc<dyn Queue>) -> Outcome {
    const ROWS: usize = 37;
    const WIDTH: usize = 5;
    let kinds = match supported_kinds(queue) {
        Ok(kinds) => kinds,
        Err(skip) => return skip,
    };
    let rows = |dst_pitch: usize, src_pitch: usize| -> Vec<(usize, usize)> {
        (0..ROWS)
            .map(|row| (3 + row * dst_pitch, 1 + row * src_pitch))
            .collect()
    };
    let (apart, packed) = (rows(64, 11), rows(64, WIDTH));
    let (dst_len, src_len) = (ROWS * 64, ROWS * 64);
    let source_bytes = pattern(src_len, 3);
    let expect = |starts: &[(usize, usize)], len: usize| {
        let mut expected = vec![0x5A; len];
        for &(to, from) in starts {
            expected[to..to + WIDTH].copy_from_slice(&source_bytes[from..from + WIDTH]);
        }
        expected
    };
    outcome((|| {
        let host = ctx(
            Buffer::alloc(&HostQueue::shared(), MemKind::Host, src_len),
            || "allocating host-backend memory".into(),
        )?;
        let mut sources = vec![("host-backend memory".to_owned(), host)];
        for &from in &kinds {
            sources.push((from.to_string(), alloc(queue, from, src_len)?));
        }
        for (from, src) in &sources {
            ctx(src.copy_from_host(&source_bytes), || {
                format!("writing {from}")
            })?;
            for (source_rows, starts) in [("apart", &apart), ("packed", &packed)] {
                let runs = Runs { len: WIDTH, starts };
                let expected = expect(starts, dst_len);
                for &to in &kinds {
                    for enqueued in [false, true] {
                        let what = format!(
                            "{ROWS} rows of {WIDTH} bytes from {from} ({source_rows}) to {to}{}",
                            if enqueued { ", enqueued" } else { "" }
                        );
                        let dst = alloc(queue, to, dst_len)?;
                        ctx(dst.fill(0x5A), || format!("filling {to}"))?;
                        if enqueued {
                            let copied = ctx(dst.enqueue_copy_runs_from(src, runs, queue), || {
                                what.clone()
                            })?;
                            ctx(copied.wait(), || format!("waiting for {what}"))?;
                        } else {
                            ctx(dst.copy_runs_from(src, runs), || what.clone())?;
                        }
                        expect_bytes(&dst, &expected, &what)?;
                    }
                }
            }
            // Into host memory, the rows packed there: what `get()` of a column does.
            let gather: Vec<(usize, usize)> = apart
                .iter()
                .enumerate()
                .map(|(row, &(_, from))| (row * WIDTH, from))
                .collect();
            let runs = Runs {
                len: WIDTH,
                starts: &gather,
            };
            let mut got = vec![0x5A; ROWS * WIDTH];
            ctx(src.copy_runs_to_host_on(&mut got, runs, queue), || {
                format!("{ROWS} rows of {from} into packed host memory")
            })?;
            let mut expected = vec![0x5A; ROWS * WIDTH];
            for &(to, from) in &gather {
                expected[to..to + WIDTH].copy_from_slice(&source_bytes[from..from + WIDTH]);
            }
            if got != expected {
                return Err(format!(
                    "{ROWS} rows of {from} into packed host memory: got {got:?}, expected {expected:?}"
                ));
            }
        }
        Ok(())
    })())
}

pub(super) fn fill_patterns(queue: &Arc<dyn Queue>) -> Outcome {
    for_each_kind(queue, |kind| {
        let len = 1001;
        let buffer = alloc(queue, kind, len)?;
        ctx(buffer.fill(0xA5), || format!("filling {kind}"))?;
        ctx(buffer.slice(10..21).unwrap().fill(0x3C), || {
            format!("filling part of {kind}")
        })?;
        let mut expected = vec![0xA5; len];
        expected[10..21].fill(0x3C);
        expect_bytes(&buffer, &expected, &format!("{kind} fill"))
    })
}

/// Memory the queue calls the host's own ([`Queue::host_resident`]) is memory the host
/// dereferences, and a strided write into it, which then runs on the host, waits for the work
/// still pending on it first: a fill enqueued just before, which would otherwise overwrite the
/// written runs after the host wrote them.
pub(super) fn host_resident_memory_takes_strided_writes_in_order(
    queue: &Arc<dyn Queue>,
) -> Outcome {
    const LEN: usize = 8 << 20;
    const STEP: usize = 4096;
    for_each_kind(queue, |kind| {
        if !queue.host_resident(kind) {
            return Ok(());
        }
        if !queue.host_accessible(kind) {
            return Err(format!(
                "{kind} is the host's own memory (host_resident), yet not host-accessible"
            ));
        }
        let buffer = alloc(queue, kind, LEN)?;
        let source = ctx(
            Buffer::alloc(&HostQueue::shared(), MemKind::Host, LEN / STEP),
            || "allocating host-backend memory".into(),
        )?;
        ctx(source.copy_from_host(&vec![0xC3; LEN / STEP]), || {
            "writing the source".into()
        })?;
        let starts: Vec<(usize, usize)> = (0..LEN / STEP).map(|run| (run * STEP, run)).collect();
        let runs = Runs {
            len: 1,
            starts: &starts,
        };
        ctx(buffer.enqueue_fill_on(0, queue), || {
            format!("filling {kind}")
        })?;
        ctx(buffer.copy_runs_from(&source, runs), || {
            format!("writing every {STEP}th byte of {kind}")
        })?;
        let expected: Vec<u8> = (0..LEN)
            .map(|at| if at % STEP == 0 { 0xC3 } else { 0 })
            .collect();
        expect_bytes(
            &buffer,
            &expected,
            &format!("{kind} strided write after a fill"),
        )
    })
}

/// A release right after an asynchronous fill, as core releases memory
/// ([`crate::ordering::release_to_queue`], which waits where the queue does not free in stream
/// order: [`Queue::frees_in_order`]): the memory must go only after the fill (a fill still writing
/// into freed memory corrupts the heap or another allocation).
pub(super) fn release_waits_for_enqueued_work(queue: &Arc<dyn Queue>) -> Outcome {
    const LEN: usize = 8 << 20;
    for_each_kind(queue, |kind| {
        for round in 0..4u8 {
            let ptr = ctx(queue.allocate(kind, LEN, 256), || {
                format!("allocating {LEN} bytes of {kind}")
            })?;
            // SAFETY: our fresh allocation, released once, right after the fill is enqueued on
            // the queue itself, which the release orders it after.
            unsafe {
                let filled = queue.fill(ptr.as_ptr(), round, LEN);
                crate::ordering::release_to_queue(queue, ptr, kind, LEN, 256, FreeAfter::Now);
                ctx(filled, || format!("filling {kind}"))?;
            }
        }
        // Memory allocated next must hold exactly what is written to it.
        let bytes = pattern(LEN, 7);
        let fresh = alloc(queue, kind, LEN)?;
        ctx(fresh.copy_from_host(&bytes), || format!("writing {kind}"))?;
        expect_bytes(
            &fresh,
            &bytes,
            &format!("{kind} allocated after busy frees"),
        )
    })
}

pub(super) fn classifies_own_pointers(queue: &Arc<dyn Queue>) -> Outcome {
    for_each_kind(queue, |kind| {
        let buffer = alloc(queue, kind, 4096)?;
        for offset in [0, 1, 2048, 4095] {
            let ptr = buffer.ptr().wrapping_add(offset);
            let found = queue.kind_of(ptr);
            if found != kind {
                return Err(format!(
                    "{kind} allocation at +{offset} classified as {found}"
                ));
            }
        }
        Ok(())
    })
}

pub(super) fn subview_keeps_parent_alive(queue: &Arc<dyn Queue>) -> Outcome {
    for_each_kind(queue, |kind| {
        let bytes = pattern(8192, 5);
        let parent = alloc(queue, kind, bytes.len())?;
        ctx(parent.copy_from_host(&bytes), || format!("writing {kind}"))?;
        let view = ctx(parent.slice(4000..5000), || "slicing".into())?;
        drop(parent);
        // Allocate and fill more memory so that freed memory would likely be reused and clobbered.
        let scratch = alloc(queue, kind, 8192)?;
        ctx(scratch.fill(0), || "filling scratch".into())?;
        expect_bytes(
            &view,
            &bytes[4000..5000],
            &format!("{kind} sub-view after its parent was dropped"),
        )
    })
}

pub(super) fn threads_allocate_copy_free(queue: &Arc<dyn Queue>) -> Outcome {
    let kinds = match supported_kinds(queue) {
        Ok(kinds) => kinds,
        Err(skip) => return skip,
    };
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for thread in 0..8u8 {
            let (kinds, failures) = (&kinds, &failures);
            scope.spawn(move || {
                let result: CheckResult = (|| {
                    for round in 0..40usize {
                        let kind = kinds[(thread as usize + round) % kinds.len()];
                        let len = 1 + (thread as usize * 977 + round * 131) % 20_000;
                        let bytes = pattern(len, thread.wrapping_add(round as u8));
                        let a = alloc(queue, kind, len)?;
                        ctx(a.copy_from_host(&bytes), || {
                            format!("thread {thread} write")
                        })?;
                        let b = alloc(queue, kinds[round % kinds.len()], len)?;
                        ctx(b.copy_from(&a), || format!("thread {thread} copy"))?;
                        drop(a);
                        expect_bytes(&b, &bytes, &format!("thread {thread} round {round}"))?;
                    }
                    Ok(())
                })();
                if let Err(why) = result {
                    failures.lock().unwrap().push(why);
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    if failures.is_empty() {
        Outcome::Pass
    } else {
        Outcome::Fail(failures.join("; "))
    }
}

pub(super) fn impossible_allocation_fails(queue: &Arc<dyn Queue>) -> Outcome {
    for_each_kind(queue, |kind| {
        match allocate(queue, kind, 1 << 60, DEFAULT_ALIGNMENT) {
            Ok(_) => Err(format!("a 2^60-byte {kind} allocation succeeded")),
            Err(Error::OutOfMemory { .. }) => Ok(()),
            Err(other) => Err(format!(
                "a 2^60-byte {kind} allocation failed with {other:?}, not OutOfMemory"
            )),
        }
    })
}

pub(super) fn events_order_work(queue: &Arc<dyn Queue>) -> Outcome {
    let kinds = match supported_kinds(queue) {
        Ok(kinds) => kinds,
        Err(skip) => return skip,
    };
    outcome((|| {
        let buffer = alloc(queue, kinds[0], 1 << 16)?;
        ctx(
            // SAFETY: the buffer is alive and in range; we wait on the event before reading it.
            unsafe { queue.fill(buffer.ptr(), 0x42, buffer.len()) },
            || "enqueueing a fill".into(),
        )?;
        let event = ctx(queue.record_event(), || "recording an event".into())?;
        ctx(queue.wait_event(&event), || {
            "waiting on our own event on the queue".into()
        })?;
        ctx(event.wait(), || "waiting on the event".into())?;
        if !ctx(event.is_complete(), || "querying the event".into())? {
            return Err("an event was not complete after waiting on it".into());
        }
        expect_bytes(
            &buffer,
            &vec![0x42; 1 << 16],
            "fill ordered before the event",
        )
    })())
}

/// The reverse direction of ordering: once memory was handed out, work another library enqueued on
/// a queue this backend hands out (this very queue, through the handle a consumer was given;
/// here the queue's own fill, which the buffer does not record) comes before devbuf's next host
/// view and its next copy on another queue (the host backend's). A queue that says no other
/// library can enqueue on it must hand out no handle to it.
pub(super) fn consumer_work_on_handed_out_memory_comes_first(queue: &Arc<dyn Queue>) -> Outcome {
    let interop = queue.interop();
    if !interop.untracked_foreign_work() {
        let handed_out = interop.native_stream().is_some()
            || interop.dlpack_work_stream().is_some()
            || interop.export_handle().is_some();
        return match handed_out {
            false => Outcome::Pass,
            true => Outcome::Fail(
                "the queue hands out a handle other libraries enqueue on, yet says none can \
                 (untracked_foreign_work)"
                    .into(),
            ),
        };
    }
    const LEN: usize = 32 << 20;
    let kinds = match supported_kinds(queue) {
        Ok(kinds) => kinds,
        Err(skip) => return skip,
    };
    let host_views = kinds
        .into_iter()
        .filter(|&kind| queue.host_accessible(kind));
    outcome(host_views.into_iter().try_for_each(|kind| {
        let buffer = alloc(queue, kind, LEN)?;
        ctx(buffer.fill(0), || format!("clearing {kind}"))?;
        buffer.mark_exported();
        for (round, byte) in [7u8, 9].into_iter().enumerate() {
            // SAFETY: the buffer is alive and in range, and outlives the fill (its release waits
            // for the device, or leaves the memory to the runtime's free).
            ctx(unsafe { queue.fill(buffer.ptr(), byte, LEN) }, || {
                format!("the consumer's fill of {kind}")
            })?;
            let seen = if round == 0 {
                ctx(buffer.synchronize(), || format!("synchronizing {kind}"))?;
                // SAFETY: host-accessible memory of LEN bytes, with no work left on it.
                unsafe { std::slice::from_raw_parts(buffer.ptr(), LEN) }.to_vec()
            } else {
                let copy = ctx(
                    Buffer::alloc(&HostQueue::shared(), MemKind::Host, LEN),
                    || "allocating host-backend memory".into(),
                )?;
                ctx(copy.copy_from(&buffer), || {
                    format!("copying {kind} to the host")
                })?;
                ctx(copy.to_vec(), || "reading the copy".into())?
            };
            if let Some(at) = seen.iter().position(|&b| b != byte) {
                return Err(format!(
                    "{kind}: {} read byte {at} as {}, before the consumer's fill of {byte} on \
                     the queue it was handed",
                    ["a host view", "a copy on the host backend's queue"][round],
                    seen[at]
                ));
            }
        }
        Ok(())
    }))
}

pub(super) fn copies_across_backends(queue: &Arc<dyn Queue>) -> Outcome {
    for_each_kind(queue, |kind| {
        let host = HostQueue::shared();
        let bytes = pattern(3001, 9);
        let host_src = alloc(&host, MemKind::Host, bytes.len())?;
        ctx(host_src.copy_from_host(&bytes), || {
            "writing host memory".into()
        })?;
        let ours = alloc(queue, kind, bytes.len())?;
        ctx(ours.copy_from(&host_src), || {
            format!("host backend -> {kind}")
        })?;
        let host_dst = alloc(&host, MemKind::Device, bytes.len())?;
        ctx(host_dst.copy_from(&ours), || {
            format!("{kind} -> host backend")
        })?;
        expect_bytes(
            &host_dst,
            &bytes,
            &format!("host backend -> {kind} -> host backend"),
        )
    })
}
