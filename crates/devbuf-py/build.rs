//! Tells the crate which interpreter it is built for (pyo3's cfgs: `Py_GIL_DISABLED` among
//! them), so that `gil_as_lock` can refuse a free-threaded one; and which git commit it is built
//! from, for `devbuf.__git_commit__` (empty outside a git checkout, as from a source archive).
//! One `git rev-parse` call: a crate for it (vergen, built) would bring more than it saves.

use std::process::Command;

fn main() {
    pyo3_build_config::use_pyo3_cfgs();
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|out| out.status.success())
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .map(|text| text.trim().to_owned())
    };
    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_default();
    println!("cargo:rustc-env=DEVBUF_GIT_COMMIT={commit}");
    // Built again when HEAD moves: HEAD itself (a checkout) and the branch it names (a commit).
    let mut watched = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for path in watched {
        if let Some(path) = git(&["rev-parse", "--git-path", &path]) {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}
