//! The kit through a memory pool: every check again with a pool as the device's current
//! resource, and the pool's own promises (a block is handed out again only when nothing may
//! still touch it).

use std::sync::Arc;

use super::{
    CHECKS, CheckResult, Outcome, ctx, expect_bytes, for_each_kind, pattern, run_one,
    supported_kinds,
};
use crate::mr::{self, MemoryResource, PoolOptions, PoolResource, QueueResource};
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

/// Every other check of the kit, with a pool as `queue`'s current resource for each kind.
pub(super) fn every_check_through_a_pool(queue: &Arc<dyn Queue>) -> Outcome {
    let kinds = match supported_kinds(queue) {
        Ok(kinds) => kinds,
        Err(skip) => return skip,
    };
    let pool = pool(queue);
    for &kind in &kinds {
        if let Err(err) = mr::set_current(kind, Arc::clone(&pool)) {
            return Outcome::Fail(format!("setting the current resource: {err}"));
        }
    }
    let failures: Vec<String> = CHECKS
        .iter()
        .filter(|check| check.name != "pooled")
        .filter_map(|check| match run_one(check, queue) {
            Outcome::Fail(why) => Some(format!("{} through a pool: {why}", check.name)),
            Outcome::Pass | Outcome::Skip(_) => None,
        })
        .collect();
    for &kind in &kinds {
        mr::reset_current(&queue.device().selector, kind);
    }
    if failures.is_empty() {
        Outcome::Pass
    } else {
        Outcome::Fail(failures.join("; "))
    }
}

/// A block exported to a consumer and let go by devbuf while the consumer still holds it is not
/// handed out again until the consumer lets go.
pub(super) fn exported_block_is_not_reused(queue: &Arc<dyn Queue>) -> Outcome {
    for_each_kind(queue, |kind| {
        let pool = pool(queue);
        const LEN: usize = 4096;
        let ours = alloc_from(&pool, kind, LEN)?;
        // What an export (a DLPack capsule, a CAI/SUAI owner) keeps: a view of the allocation.
        let consumers = ctx(ours.slice(0..LEN), || "slicing".into())?;
        consumers.mark_exported();
        let exported = ours.ptr();
        drop(ours);
        let others = (0..8)
            .map(|_| alloc_from(&pool, kind, LEN))
            .collect::<Result<Vec<_>, _>>()?;
        if others.iter().any(|other| other.ptr() == exported) {
            return Err(format!(
                "{kind}: the pool handed out {exported:p} while a consumer still held it"
            ));
        }
        drop(others);
        drop(consumers);
        // Once the consumer let go, the block is free again: the pool's first fit is it.
        let again = alloc_from(&pool, kind, LEN)?;
        if again.ptr() != exported {
            return Err(format!(
                "{kind}: the pool did not reuse {exported:p} once it was free (got {:p}): this \
                 check would prove nothing",
                again.ptr()
            ));
        }
        Ok(())
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
