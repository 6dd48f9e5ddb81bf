//! Tells the crate which interpreter it is built for (pyo3's cfgs: `Py_GIL_DISABLED` among
//! them), so that `gil_as_lock` can refuse a free-threaded one.

fn main() {
    pyo3_build_config::use_pyo3_cfgs();
}
