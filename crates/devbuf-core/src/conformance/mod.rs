//! The conformance kit: what every backend must do, checked the same way for each.
//!
//! Backends run it from their tests with [`conformance_tests!`](crate::conformance_tests) (one
//! `#[test]` per check) and `ci/matrix` runs [`run_all`] for every backend present. The last
//! checks run the kit again through a memory pool, and check the pool's own promises.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

mod pooled;

use crate::{Buffer, DEFAULT_ALIGNMENT, Error, HostQueue, MemKind, Owner, Queue};

/// The result of one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    Fail(String),
    Skip(String),
}

/// One check of the kit.
pub struct Check {
    pub name: &'static str,
    pub run: fn(&Arc<dyn Queue>) -> Outcome,
}

/// Every check, in the order the matrix prints them.
pub const CHECKS: &[Check] = &[
    Check {
        name: "alloc",
        run: alloc_each_kind,
    },
    Check {
        name: "align",
        run: alignment_honoured,
    },
    Check {
        name: "copy",
        run: copy_round_trips,
    },
    Check {
        name: "fill",
        run: fill_patterns,
    },
    Check {
        name: "busy_free",
        run: release_waits_for_enqueued_work,
    },
    Check {
        name: "kind_of",
        run: classifies_own_pointers,
    },
    Check {
        name: "foreign",
        run: classifies_foreign_pointers,
    },
    Check {
        name: "deleter",
        run: deleter_runs_once,
    },
    Check {
        name: "subview",
        run: subview_keeps_parent_alive,
    },
    Check {
        name: "threads",
        run: threads_allocate_copy_free,
    },
    Check {
        name: "oom",
        run: impossible_allocation_fails,
    },
    Check {
        name: "events",
        run: events_order_work,
    },
    Check {
        name: "cross",
        run: copies_across_backends,
    },
    Check {
        name: "pool_export",
        run: pooled::exported_block_is_not_reused,
    },
    Check {
        name: "pool_busy",
        run: pooled::busy_block_is_reused_after_its_work,
    },
    Check {
        name: "pooled",
        run: pooled::every_check_through_a_pool,
    },
];

/// Runs every check against `queue`.
pub fn run_all(queue: &Arc<dyn Queue>) -> Vec<(&'static str, Outcome)> {
    CHECKS
        .iter()
        .map(|check| (check.name, run_one(check, queue)))
        .collect()
}

/// Runs one check; a panic inside it is a failure, not a crash of the whole kit.
pub fn run_one(check: &Check, queue: &Arc<dyn Queue>) -> Outcome {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (check.run)(queue))).unwrap_or_else(
        |panic| {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Outcome::Fail(format!("panicked: {message}"))
        },
    )
}

/// Runs the check named `name` for a test of `backend`: panics on failure; on a skip, prints the
/// reason, and panics too when the environment variable `DEVBUF_REQUIRE` lists the backend (CI
/// sets it so that a runtime it installed can never be silently skipped).
pub fn assert_check(name: &str, backend: &str, queue: &Result<Arc<dyn Queue>, String>) {
    let check = CHECKS
        .iter()
        .find(|check| check.name == name)
        .unwrap_or_else(|| panic!("no conformance check named {name:?}"));
    match queue {
        Ok(queue) => match run_one(check, queue) {
            Outcome::Pass => {}
            Outcome::Fail(why) => panic!("{name} failed on {}: {why}", queue.device()),
            Outcome::Skip(why) => skip(backend, name, &why),
        },
        Err(why) => skip(backend, name, why),
    }
}

fn skip(backend: &str, name: &str, why: &str) {
    let required = std::env::var("DEVBUF_REQUIRE").unwrap_or_default();
    let required = required.split(',').map(str::trim);
    if required.clone().any(|b| b == "all")
        || (!backend.is_empty() && required.clone().any(|b| b == backend))
    {
        panic!("{name} skipped but {backend} is required by DEVBUF_REQUIRE: {why}");
    }
    eprintln!("skip {name}: {why}");
}

/// Generates one `#[test]` per conformance check for `$backend` (its name, for `DEVBUF_REQUIRE`).
/// `$queue` is an expression of type `Result<Arc<dyn Queue>, String>` (the error is why the
/// backend is unavailable).
#[macro_export]
macro_rules! conformance_tests {
    ($backend:literal, $queue:expr) => {
        $crate::conformance_tests!(@tests $backend, $queue;
            alloc align copy fill busy_free kind_of foreign deleter subview threads oom events cross
            pool_export pool_busy pooled);
    };
    (@tests $backend:literal, $queue:expr; $($name:ident)*) => {
        $(
            #[test]
            fn $name() {
                $crate::conformance::assert_check(stringify!($name), $backend, &$queue);
            }
        )*
    };
}

type CheckResult = Result<(), String>;

fn outcome(result: CheckResult) -> Outcome {
    match result {
        Ok(()) => Outcome::Pass,
        Err(why) => Outcome::Fail(why),
    }
}

fn supported_kinds(queue: &Arc<dyn Queue>) -> Result<Vec<MemKind>, Outcome> {
    let kinds: Vec<_> = MemKind::ALLOCATABLE
        .into_iter()
        .filter(|&kind| queue.supports(kind))
        .collect();
    if kinds.is_empty() {
        let why = queue
            .device()
            .unusable_reason
            .clone()
            .unwrap_or_else(|| "the device supports no allocatable kind".into());
        return Err(Outcome::Skip(why));
    }
    Ok(kinds)
}

/// Runs `body` for each supported kind, skipping when there is none.
fn for_each_kind(queue: &Arc<dyn Queue>, body: impl Fn(MemKind) -> CheckResult) -> Outcome {
    match supported_kinds(queue) {
        Ok(kinds) => outcome(kinds.into_iter().try_for_each(body)),
        Err(skip) => skip,
    }
}

/// A byte pattern that differs between offsets and seeds, so misplaced bytes are caught.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(31)
                .wrapping_add(seed as u32 * 7 + (i >> 8) as u32) as u8
        })
        .collect()
}

fn ctx<T>(result: crate::Result<T>, what: impl FnOnce() -> String) -> Result<T, String> {
    result.map_err(|err| format!("{}: {err}", what()))
}

fn alloc(queue: &Arc<dyn Queue>, kind: MemKind, len: usize) -> Result<Buffer, String> {
    ctx(pooled::alloc(queue, kind, len, DEFAULT_ALIGNMENT), || {
        format!("allocating {len} bytes of {kind}")
    })
}

fn expect_bytes(buffer: &Buffer, expected: &[u8], what: &str) -> CheckResult {
    let actual = ctx(buffer.to_vec(), || format!("reading back {what}"))?;
    if actual != expected {
        let at = actual
            .iter()
            .zip(expected)
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        return Err(format!(
            "{what}: byte {at} is {:?}, expected {:?}",
            actual.get(at),
            expected.get(at)
        ));
    }
    Ok(())
}

fn alloc_each_kind(queue: &Arc<dyn Queue>) -> Outcome {
    let unsupported: Vec<_> = MemKind::ALLOCATABLE
        .into_iter()
        .filter(|&kind| !queue.supports(kind))
        .collect();
    for kind in unsupported {
        if pooled::alloc(queue, kind, 64, DEFAULT_ALIGNMENT).is_ok() {
            return Outcome::Fail(format!(
                "{kind} is not supported, yet allocating it succeeded"
            ));
        }
    }
    for_each_kind(queue, |kind| {
        for len in [0, 1, 3, 1000, 4097, 1 << 20] {
            let buffer = alloc(queue, kind, len)?;
            if buffer.len() != len || buffer.ptr().is_null() || buffer.kind() != kind {
                return Err(format!("{kind} allocation of {len} bytes gave {buffer:?}"));
            }
        }
        Ok(())
    })
}

fn alignment_honoured(queue: &Arc<dyn Queue>) -> Outcome {
    for_each_kind(queue, |kind| {
        for align in [1, 8, 64, 256, 4096] {
            for len in [1, 100, 4097] {
                let buffer = ctx(pooled::alloc(queue, kind, len, align), || {
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

fn copy_round_trips(queue: &Arc<dyn Queue>) -> Outcome {
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

fn fill_patterns(queue: &Arc<dyn Queue>) -> Outcome {
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

/// `deallocate` right after an asynchronous fill: the queue must release the memory only after
/// the fill (a fill still writing into freed memory corrupts the heap or another allocation).
fn release_waits_for_enqueued_work(queue: &Arc<dyn Queue>) -> Outcome {
    const LEN: usize = 8 << 20;
    for_each_kind(queue, |kind| {
        for round in 0..4u8 {
            let ptr = ctx(queue.allocate(kind, LEN, 256), || {
                format!("allocating {LEN} bytes of {kind}")
            })?;
            // SAFETY: our fresh allocation, released once, right after the fill is enqueued;
            // the queue's contract orders the release after it.
            unsafe {
                let filled = queue.fill(ptr.as_ptr(), round, LEN);
                queue.deallocate(ptr, kind, LEN, 256);
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

fn classifies_own_pointers(queue: &Arc<dyn Queue>) -> Outcome {
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

fn classifies_foreign_pointers(queue: &Arc<dyn Queue>) -> Outcome {
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
    if queue.device().backend != crate::host::HOST {
        // Another backend's allocations are foreign to this queue.
        let host = HostQueue::shared();
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

fn deleter_runs_once(queue: &Arc<dyn Queue>) -> Outcome {
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

fn subview_keeps_parent_alive(queue: &Arc<dyn Queue>) -> Outcome {
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

fn threads_allocate_copy_free(queue: &Arc<dyn Queue>) -> Outcome {
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

fn impossible_allocation_fails(queue: &Arc<dyn Queue>) -> Outcome {
    for_each_kind(queue, |kind| {
        match pooled::alloc(queue, kind, 1 << 60, DEFAULT_ALIGNMENT) {
            Ok(_) => Err(format!("a 2^60-byte {kind} allocation succeeded")),
            Err(Error::OutOfMemory { .. }) => Ok(()),
            Err(other) => Err(format!(
                "a 2^60-byte {kind} allocation failed with {other:?}, not OutOfMemory"
            )),
        }
    })
}

fn events_order_work(queue: &Arc<dyn Queue>) -> Outcome {
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

fn copies_across_backends(queue: &Arc<dyn Queue>) -> Outcome {
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

#[cfg(test)]
mod tests {
    use super::*;

    crate::conformance_tests!("host", Ok::<Arc<dyn Queue>, String>(HostQueue::shared()));

    #[test]
    fn a_private_host_queue_passes_every_check_and_does_not_know_the_shared_ones_pointers() {
        let private: Arc<dyn Queue> = Arc::new(HostQueue::new());
        for (name, result) in run_all(&private) {
            assert_eq!(result, Outcome::Pass, "{name}");
        }
        let shared = Buffer::alloc(&HostQueue::shared(), MemKind::Shared, 8).unwrap();
        assert_eq!(private.kind_of(shared.ptr()), MemKind::Unknown);
    }
}
