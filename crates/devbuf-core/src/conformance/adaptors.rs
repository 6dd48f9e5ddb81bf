//! The kit through the memory resource adaptors: every check again with the kit's allocations
//! made through a pool, a binning resource (fixed-size bins), a fixed-size resource, a limiting,
//! a statistics, a tracking, a logging, a prefetch and a failure-callback adaptor in turn, and
//! the pool's own promises (a block is handed out again only when nothing may still touch it),
//! which fixed-size blocks keep too. The adaptors serve the kit's checks only, not the device's
//! current resource: other tests running meanwhile on the same queue must not see them.

use std::sync::Arc;

use super::kit::{
    Check, CheckResult, KIT_RESOURCES, Outcome, ctx, expect_bytes, for_each_kind, pattern, run_one,
    supported_kinds,
};

use crate::mr::{
    BinningResource, FailureCallbackResource, FixedSizeResource, LimitingResource, LogSink,
    LoggingResource, MemoryResource, OneKindResource, PoolOptions, PoolResource, PrefetchResource,
    QueueResource, StatisticsResource, TrackingResource,
};
use crate::{Buffer, DEFAULT_ALIGNMENT, MemKind, Queue};

fn pool(queue: &Arc<dyn Queue>) -> Arc<dyn MemoryResource> {
    PoolResource::new(
        QueueResource::new(Arc::clone(queue)),
        PoolOptions::default(),
    )
}

fn alloc_from(pool: &Arc<dyn MemoryResource>, kind: MemKind, len: usize) -> Result<Buffer, String> {
    ctx(
        Buffer::alloc_from(pool, kind, len, DEFAULT_ALIGNMENT),
        || format!("allocating {len} bytes of {kind} from a pool"),
    )
}

/// A log that checks each line has the columns of its header, and keeps none.
#[derive(Debug)]
struct CheckedLog;

impl LogSink for CheckedLog {
    fn write_line(&self, line: &str) -> std::io::Result<()> {
        let columns = crate::mr::LOG_HEADER.split(',').count();
        if line.split(',').count() == columns {
            Ok(())
        } else {
            Err(std::io::Error::other(format!(
                "{line:?} has not {columns} columns"
            )))
        }
    }

    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The largest allocation of the kit's checks: a fixed-size resource's blocks hold it.
const LARGEST_CHECK_ALLOCATION: usize = 32 << 20;

/// The memory resource adaptors, each around `queue` (the pool's own upstream is the queue), as
/// RMM's tests run every resource: `(name, resource)`.
fn adaptors(queue: &Arc<dyn Queue>) -> Vec<(&'static str, Arc<dyn MemoryResource>)> {
    let upstream = || -> Arc<dyn MemoryResource> { QueueResource::new(Arc::clone(queue)) };
    let binning =
        BinningResource::with_exponents(upstream(), 8, 20).expect("8 to 20 are ordered exponents");
    let logging = LoggingResource::new(upstream(), Arc::new(CheckedLog))
        .expect("the checked log takes its header");
    vec![
        ("a pool", pool(queue)),
        ("a binning resource", binning),
        (
            "a fixed-size resource",
            FixedSizeResource::new(upstream(), LARGEST_CHECK_ALLOCATION, 2)
                .expect("two blocks of the largest check allocation fit any address space"),
        ),
        ("a logging adaptor", logging),
        ("a prefetch adaptor", PrefetchResource::new(upstream())),
        (
            "a failure-callback adaptor",
            // Declines to retry: the kit's out-of-memory check must still see its error.
            FailureCallbackResource::new(upstream(), |_, _, _| Ok(false)),
        ),
        (
            "a limiting adaptor",
            LimitingResource::new(upstream(), usize::MAX),
        ),
        ("a statistics adaptor", StatisticsResource::new(upstream())),
        (
            "a tracking adaptor",
            TrackingResource::new(upstream(), false),
        ),
    ]
}

/// Every check of `groups` (the device and exchange halves) again, allocating through each memory
/// resource adaptor on `queue` in turn.
pub(super) fn every_check_through_each_adaptor(
    queue: &Arc<dyn Queue>,
    groups: &[&[Check]],
) -> Outcome {
    if let Err(skip) = supported_kinds(queue) {
        return skip;
    }
    let mut failures: Vec<String> = Vec::new();
    for (name, resource) in adaptors(queue) {
        KIT_RESOURCES.lock().push(Arc::clone(&resource));
        failures.extend(
            groups
                .concat()
                .iter()
                .filter_map(|check| match run_one(check, queue) {
                    Outcome::Fail(why) => Some(format!("{} through {name}: {why}", check.name)),
                    Outcome::Pass | Outcome::Skip(_) => None,
                }),
        );
        KIT_RESOURCES
            .lock()
            .retain(|kit| !Arc::ptr_eq(kit, &resource));
        let logging = resource.as_any().downcast_ref::<LoggingResource>();
        if let Some(Err(err)) = logging.map(LoggingResource::flush) {
            failures.push(format!("{name} wrote a line unlike its header: {err}"));
        }
    }
    if failures.is_empty() {
        Outcome::Pass
    } else {
        Outcome::Fail(failures.join("; "))
    }
}

/// Hands `ours` (from `resource`) to a consumer, which keeps a view of it as an export does (a
/// DLPack capsule, a CAI/SUAI owner), lets devbuf's own go, and checks that `others` allocations
/// of its size made meanwhile never return its address. Returns the address and the consumer's
/// view, which keeps the block exported until dropped.
fn export_and_allocate_around(
    resource: &Arc<dyn MemoryResource>,
    ours: Buffer,
    others: usize,
    what: &str,
) -> Result<(*mut u8, Buffer), String> {
    let (kind, len) = (ours.kind(), ours.len());
    let consumers = ctx(ours.slice(0..len), || "slicing".into())?;
    consumers.mark_exported();
    let exported = ours.ptr();
    drop(ours);
    let others = (0..others)
        .map(|_| alloc_from(resource, kind, len))
        .collect::<Result<Vec<_>, _>>()?;
    if others.iter().any(|other| other.ptr() == exported) {
        return Err(format!(
            "{kind}: {what} handed out {exported:p} while a consumer still held it"
        ));
    }
    Ok((exported, consumers))
}

/// A block exported to a consumer and let go by devbuf while the consumer still holds it is not
/// handed out again until the consumer lets go; where devbuf cannot wait for every queue the
/// consumer may use ([`crate::Interop::wait_device_covers_every_queue`]), never: its upstream block goes
/// back to the runtime, whose free waits for them (here, on release).
pub(super) fn exported_block_is_not_reused(queue: &Arc<dyn Queue>) -> Outcome {
    let reused_once_let_go = queue.interop().wait_device_covers_every_queue();
    for_each_kind(queue, |kind| {
        let pool = PoolResource::new(
            QueueResource::new(Arc::clone(queue)),
            PoolOptions::default(),
        );
        let resource: Arc<dyn MemoryResource> = pool.clone();
        const LEN: usize = 4096;
        let ours = alloc_from(&resource, kind, LEN)?;
        // In the same upstream block, kept until the end: the block cannot go back upstream, so
        // a block handed out at the exported address would come from the pool, not the runtime.
        let keeper = alloc_from(&resource, kind, LEN)?;
        let (exported, consumers) = export_and_allocate_around(&resource, ours, 8, "the pool")?;
        drop(consumers);
        // On a stream-ordered queue the release waits for the work recorded on the block.
        ctx(queue.wait(), || "waiting for the queue".into())?;
        // Once the consumer let go, the block is free again (after the work recorded on it, on
        // stream-ordered queues): the pool hands it out before it has to grow.
        let mut again = Vec::new();
        while again.len() <= (1 << 20) / LEN {
            again.push(alloc_from(&resource, kind, LEN)?);
            if again.last().is_some_and(|buffer| buffer.ptr() == exported) {
                return if reused_once_let_go {
                    Ok(())
                } else {
                    Err(format!(
                        "{kind}: the pool handed out {exported:p} again, which another library \
                         was given and may still use on a queue devbuf cannot wait for"
                    ))
                };
            }
        }
        if reused_once_let_go {
            return Err(format!(
                "{kind}: the pool did not reuse {exported:p} once it was free: this check would \
                 prove nothing"
            ));
        }
        drop((again, keeper));
        pool.release();
        if pool.pool_size() != 0 {
            return Err(format!(
                "{kind}: the pool kept the block of {exported:p} on release, instead of giving it \
                 back to the runtime"
            ));
        }
        Ok(())
    })
}

/// The pool's promise, kept by a fixed-size resource (a binning resource's bins): a block exported
/// to a consumer is handed out again only once the consumer lets go, and never where devbuf cannot
/// wait for the consumer's queues.
pub(super) fn exported_fixed_size_block_is_not_reused(queue: &Arc<dyn Queue>) -> Outcome {
    let reused_once_let_go = queue.interop().wait_device_covers_every_queue();
    for_each_kind(queue, |kind| {
        const LEN: usize = 4096;
        let resource: Arc<dyn MemoryResource> =
            FixedSizeResource::new(QueueResource::new(Arc::clone(queue)), LEN, 16)
                .expect("16 blocks of 4 KiB fit any address space");
        let ours = alloc_from(&resource, kind, LEN)?;
        let keeper = alloc_from(&resource, kind, LEN)?;
        let (exported, consumers) =
            export_and_allocate_around(&resource, ours, 32, "the fixed-size resource")?;
        drop(consumers);
        ctx(queue.wait(), || "waiting for the queue".into())?;
        let again = (0..64)
            .map(|_| alloc_from(&resource, kind, LEN))
            .collect::<Result<Vec<_>, _>>()?;
        let reused = again.iter().any(|buffer| buffer.ptr() == exported);
        drop((again, keeper));
        match (reused, reused_once_let_go) {
            (true, false) => Err(format!(
                "{kind}: the fixed-size resource handed out {exported:p} again, which another \
                 library was given and may still use on a queue devbuf cannot wait for"
            )),
            (false, true) => Err(format!(
                "{kind}: the fixed-size resource did not reuse {exported:p} once it was free: \
                 this check would prove nothing"
            )),
            _ => Ok(()),
        }
    })
}

/// Blocks freed while a fill on them is still running: memory handed out next holds exactly
/// what is written to it.
pub(super) fn busy_block_is_reused_after_its_work(queue: &Arc<dyn Queue>) -> Outcome {
    const LEN: usize = 8 << 20;
    for_each_kind(queue, |kind| -> CheckResult {
        let pool = pool(queue);
        for round in 0..4u8 {
            let busy = alloc_from(&pool, kind, LEN)?;
            ctx(busy.enqueue_fill(round), || format!("filling {kind}"))?;
            drop(busy);
            let bytes = pattern(LEN, 7 + round);
            let fresh = alloc_from(&pool, kind, LEN)?;
            ctx(fresh.copy_from_host(&bytes), || format!("writing {kind}"))?;
            expect_bytes(
                &fresh,
                &bytes,
                &format!("{kind} from a pool after a busy free"),
            )?;
        }
        Ok(())
    })
}

/// RMM's resources of one kind each ([`OneKindResource`]: `CudaMemoryResource`,
/// `ManagedMemoryResource`, `PinnedHostMemoryResource`), for every kind the device has: whatever
/// kind is asked, the buffer is of the resource's kind, classifies as it where the runtime can
/// tell, and holds its bytes; a pool over one serves that kind too.
pub(super) fn one_kind_resources_serve_their_kind(queue: &Arc<dyn Queue>) -> Outcome {
    let kinds = match supported_kinds(queue) {
        Ok(kinds) => kinds,
        Err(outcome) => return outcome,
    };
    for_each_kind(queue, |kind| {
        let one_kind: Arc<dyn MemoryResource> = ctx(
            OneKindResource::new(QueueResource::new(Arc::clone(queue)), kind),
            || format!("a resource of {kind} memory"),
        )?;
        let pooled: Arc<dyn MemoryResource> =
            PoolResource::new(Arc::clone(&one_kind), PoolOptions::default());
        for (what, resource) in [("the resource", &one_kind), ("a pool over it", &pooled)] {
            for &asked in &kinds {
                const LEN: usize = 4096;
                let buffer = ctx(
                    Buffer::alloc_from(resource, asked, LEN, DEFAULT_ALIGNMENT),
                    || format!("{what} of {kind} memory, asked for {asked}"),
                )?;
                if buffer.kind() != kind {
                    return Err(format!(
                        "{what} of {kind} memory, asked for {asked}, made a {} buffer",
                        buffer.kind()
                    ));
                }
                // Every backend classifies its own allocations (the kit's `kind_of` check).
                let classified = queue.kind_of(buffer.ptr());
                if classified != kind {
                    return Err(format!(
                        "{what} of {kind} memory handed out {:p}, which the runtime calls {classified}",
                        buffer.ptr()
                    ));
                }
                let bytes = pattern(LEN, 5);
                ctx(buffer.copy_from_host(&bytes), || {
                    format!("writing {what}'s {kind} memory")
                })?;
                expect_bytes(&buffer, &bytes, &format!("{what}'s {kind} memory"))?;
            }
        }
        Ok(())
    })
}
