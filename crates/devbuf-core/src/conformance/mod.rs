//! The conformance kit: what every backend must do, checked the same way for each.
//!
//! Backends run it from their tests with [`conformance_tests!`](crate::conformance_tests) (one
//! `#[test]` per check) and `ci/matrix` runs [`run_all`] for every backend present. The last
//! checks ask the queue's exchange half ([`crate::Interop`]) and hold its answers against each
//! other and against the device half, and run the kit again through each memory resource adaptor
//! (pool, binning, fixed-size, limiting, statistics, tracking, logging, prefetch, failure
//! callback), checking the pool's own promises too.

use std::sync::{Arc, LazyLock};

mod adaptors;
mod checks;
mod hints;
mod imports;
mod interop;
mod kit;

pub use kit::{Check, Outcome, pattern, run_one};

use crate::Queue;

/// Every check, in the order the matrix prints them: the device operations, the hints about
/// shared memory, the exchange answers, then the memory resources around the queue.
pub static CHECKS: LazyLock<Vec<Check>> = LazyLock::new(|| {
    [
        checks::DEVICE,
        hints::HINTS,
        interop::INTEROP,
        adaptors::ADAPTORS,
    ]
    .concat()
});

/// Runs every check against `queue`.
pub fn run_all(queue: &Arc<dyn Queue>) -> Vec<(&'static str, Outcome)> {
    CHECKS
        .iter()
        .map(|check| (check.name, run_one(check, queue)))
        .collect()
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
            handed_out hints interop_memory interop_handles interop_streams pool_export pool_busy
            fixed_size_export adaptors);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Buffer, HostQueue, MemKind};

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
