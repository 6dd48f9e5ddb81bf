//! The conformance kit: what every backend must do, checked the same way for each.
//!
//! Backends run it from their tests with [`conformance_tests!`](crate::conformance_tests) (one
//! `#[test]` per check) and `ci/matrix` runs [`run_all`] for every backend present. The last
//! checks run the kit again through a memory pool, and check the pool's own promises.

use std::sync::Arc;

mod checks;
mod pooled;

use crate::{Buffer, DEFAULT_ALIGNMENT, MemKind, Queue};

/// The result of one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The backend behaved as the model requires.
    Pass,
    /// It did not: what went wrong.
    Fail(String),
    /// The check does not apply to this device: why (a kind it lacks...).
    Skip(String),
}

/// One check of the kit.
pub struct Check {
    /// The check's name, a column of the conformance matrix.
    pub name: &'static str,
    /// Runs the check on a queue.
    pub run: fn(&Arc<dyn Queue>) -> Outcome,
}

/// Every check, in the order the matrix prints them.
pub const CHECKS: &[Check] = &[
    Check {
        name: "alloc",
        run: checks::alloc_each_kind,
    },
    Check {
        name: "align",
        run: checks::alignment_honoured,
    },
    Check {
        name: "copy",
        run: checks::copy_round_trips,
    },
    Check {
        name: "fill",
        run: checks::fill_patterns,
    },
    Check {
        name: "busy_free",
        run: checks::release_waits_for_enqueued_work,
    },
    Check {
        name: "kind_of",
        run: checks::classifies_own_pointers,
    },
    Check {
        name: "foreign",
        run: checks::classifies_foreign_pointers,
    },
    Check {
        name: "extent",
        run: checks::bounds_own_allocations,
    },
    Check {
        name: "deleter",
        run: checks::deleter_runs_once,
    },
    Check {
        name: "subview",
        run: checks::subview_keeps_parent_alive,
    },
    Check {
        name: "threads",
        run: checks::threads_allocate_copy_free,
    },
    Check {
        name: "oom",
        run: checks::impossible_allocation_fails,
    },
    Check {
        name: "events",
        run: checks::events_order_work,
    },
    Check {
        name: "cross",
        run: checks::copies_across_backends,
    },
    Check {
        name: "handed_out",
        run: checks::consumer_work_on_handed_out_memory_comes_first,
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
            alloc align copy fill busy_free kind_of foreign extent deleter subview threads oom events cross
            handed_out pool_export pool_busy pooled);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HostQueue;

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
