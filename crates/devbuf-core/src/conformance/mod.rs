//! The conformance kit: what every backend must do, checked the same way for each.
//!
//! Backends run it from their tests with [`conformance_tests!`](crate::conformance_tests) (one
//! `#[test]` per check) and `ci/matrix` runs [`run_all`] for every backend present. The last
//! checks ask the queue's exchange half ([`crate::Interop`]) and hold its answers against each
//! other and against the device half, and run the kit again through each memory resource adaptor
//! (pool, binning, fixed-size, limiting, statistics, tracking, logging, prefetch, failure
//! callback), checking the pool's own promises too.
//!
//! Beside it, [`descriptor_tests!`](crate::descriptor_tests) holds a backend's descriptor to what
//! the backend does ([`DESCRIPTOR_CHECKS`]), in the backend's own tests.
//!
//! A new check is a function here and one line in the kit's list (`__conformance_checks!`): the
//! table the matrix runs ([`CHECKS`]) and every backend's `#[test]`s are both made from that list.

use std::sync::{Arc, LazyLock};

mod adaptors;
mod checks;
mod descriptor;
mod hints;
mod imports;
mod interop;
mod kit;

pub use descriptor::{DESCRIPTOR_CHECKS, DescriptorCheck, assert_descriptor_check};
use kit::skip;
pub use kit::{Check, Outcome, pattern, run_one};

use crate::Queue;

/// Every check of the kit, written once: its name and what runs it, in groups, in the order the
/// matrix prints them (the device operations, the hints about shared memory, the exchange answers,
/// then the memory resources around the queue). [`CHECKS`] and the tests of
/// [`conformance_tests!`](crate::conformance_tests) are both made from it, so a check cannot be in
/// one and not the other. Passes the list to the macro `$then` names, after `$args`.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_checks {
    ([$($then:tt)*] $args:tt) => {
        $($then)*! { $args
            DEVICE {
                alloc: checks::alloc_each_kind,
                align: checks::alignment_honoured,
                copy: checks::copy_round_trips,
                rows: checks::copy_rows_move_only_the_rows,
                fill: checks::fill_patterns,
                host_resident: checks::host_resident_memory_takes_strided_writes_in_order,
                busy_free: checks::release_waits_for_enqueued_work,
                kind_of: checks::classifies_own_pointers,
                foreign: imports::classifies_foreign_pointers,
                extent: imports::bounds_own_allocations,
                deleter: imports::deleter_runs_once,
                subview: checks::subview_keeps_parent_alive,
                threads: checks::threads_allocate_copy_free,
                oom: checks::impossible_allocation_fails,
                events: checks::events_order_work,
                cross: checks::copies_across_backends,
                handed_out: checks::consumer_work_on_handed_out_memory_comes_first,
            }
            HINTS {
                hints: hints::hints_keep_the_bytes,
            }
            INTEROP {
                interop_memory: interop::holders_agree_with_kinds,
                interop_handles: interop::handles_agree_with_foreign_work,
                interop_streams: interop::stream_rules_take_what_the_protocols_allow,
            }
            ADAPTORS {
                pool_export: adaptors::exported_block_is_not_reused,
                pool_busy: adaptors::busy_block_is_reused_after_its_work,
                fixed_size_export: adaptors::exported_fixed_size_block_is_not_reused,
                one_kind: adaptors::one_kind_resources_serve_their_kind,
                adaptors: |queue| adaptors::every_check_through_each_adaptor(queue, &[DEVICE, INTEROP]),
            }
        }
    };
}

/// Makes each group of [`__conformance_checks!`]'s list a table of [`Check`]s, and [`CHECKS`]
/// of them all.
macro_rules! check_tables {
    ([] $($group:ident { $($name:ident: $run:expr,)* })*) => {
        $(
            const $group: &[Check] = &[$(Check { name: stringify!($name), run: $run },)*];
        )*

        /// Every check, in the order the matrix prints them (see [`__conformance_checks!`]).
        pub static CHECKS: LazyLock<Vec<Check>> = LazyLock::new(|| [$($group),*].concat());
    };
}

__conformance_checks!([check_tables] []);

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

/// Generates one `#[test]` per descriptor check ([`DESCRIPTOR_CHECKS`]) on `$backend`, an
/// expression whose value implements [`crate::Backend`] (the backend itself, as `HostBackend` or
/// `devbuf_sycl::SyclBackend::new()`), and `every_descriptor_check_has_a_test`. Written beside
/// [`conformance_tests!`](crate::conformance_tests) in the backend's `tests/conformance.rs`, so that
/// the backend's own `cargo test` holds its descriptor to what it does.
#[macro_export]
macro_rules! descriptor_tests {
    ($backend:expr) => {
        $crate::descriptor_tests!(@each $backend;
            descriptor_kinds, descriptor_dlpack_device_types, descriptor_streams, descriptor_rank);
    };
    (@each $backend:expr; $($name:ident),*) => {
        $(
            #[test]
            fn $name() {
                let backend = $backend;
                $crate::conformance::assert_descriptor_check(stringify!($name), &backend);
            }
        )*

        #[test]
        fn every_descriptor_check_has_a_test() {
            let table: Vec<&str> =
                $crate::conformance::DESCRIPTOR_CHECKS.iter().map(|c| c.name).collect();
            assert_eq!(table, [$(stringify!($name)),*], "a descriptor check without its test");
        }
    };
}

/// Generates one `#[test]` per conformance check for `$backend` (its name, for `DEVBUF_REQUIRE`),
/// and `every_check_has_a_test`, which fails if [`CHECKS`] holds a check these tests do not run.
/// `$queue` is an expression of type `Result<Arc<dyn Queue>, String>` (the error is why the
/// backend is unavailable).
#[macro_export]
macro_rules! conformance_tests {
    ($backend:literal, $queue:expr) => {
        $crate::__conformance_checks!([$crate::conformance_tests] [$backend, $queue]);
    };
    ([$backend:literal, $queue:expr] $($group:ident { $($name:ident: $run:expr,)* })*) => {
        $($(
            #[test]
            fn $name() {
                $crate::conformance::assert_check(stringify!($name), $backend, &$queue);
            }
        )*)*

        #[test]
        fn every_check_has_a_test() {
            let tested = [$($(stringify!($name),)*)*];
            let table: Vec<&str> = $crate::conformance::CHECKS.iter().map(|c| c.name).collect();
            assert_eq!(table, tested, "a conformance check without its test");
        }
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
