//! The one child-process harness of the Rust test suites (included by each suite's `common`
//! module with `#[path]`): a test whose body must run in a process of its own (the CUDA test
//! driver reads its settings once per process, an illegal address it detects makes the context's
//! error sticky for the rest of that process, a host read of device memory must crash) reruns the
//! test binary on that one test, with extra environment variables.
//!
//! The including `common` module says when such a test may run here (`common::may_run`) and how
//! its child process is prepared (`common::prepare_child`, e.g. which `libcuda.so.1` it loads).

use std::process::{Command, Output};

/// Set in the child process: the test's body runs there.
const CHILD: &str = "DEVBUF_TEST_CHILD";

/// Whether this process is the child that runs a test's body.
pub fn is_child() -> bool {
    std::env::var_os(CHILD).is_some()
}

/// The test binary, on test `name` alone, in the child's role, with `variables` set.
pub fn command(name: &str, variables: &[(&str, &str)]) -> Command {
    let mut command = Command::new(std::env::current_exe().expect("the test executable"));
    command
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .envs(variables.iter().copied());
    command
}

/// Runs `command` and returns what it did.
pub fn output(mut command: Command) -> Output {
    command
        .output()
        .expect("running the test in a child process")
}

/// Panics with the child's output unless test `name` passed in it.
pub fn assert_passed(name: &str, output: &Output) {
    assert!(
        output.status.success(),
        "{name} failed in its child process ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Declares a test whose body runs in a child process with the given environment, where
/// `common::may_run` allows it and, after `needs`, where `common::has` finds what the test needs
/// (e.g. a second device; otherwise it is skipped, saying what is missing).
#[macro_export]
macro_rules! child_test {
    ($name:ident $([$($key:literal = $value:literal),* $(,)?])? $(needs $($need:expr),+;)? $body:block) => {
        #[test]
        fn $name() {
            if common::child::is_child() {
                $body
            } else if common::may_run(stringify!($name))
                $($(&& common::has(stringify!($name), $need))+)?
            {
                let output = common::run_child(stringify!($name), &[$($(($key, $value)),*)?]);
                common::child::assert_passed(stringify!($name), &output);
            }
        }
    };
}
