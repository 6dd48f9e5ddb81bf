//! Int arguments that are sizes, counts and addresses, read so that an error names the argument:
//! pyo3's generic conversion raises `OverflowError: can't convert negative int to unsigned`
//! without saying which argument. Each converter is a function named after its argument, for
//! `#[pyo3(from_py_with = int_args::name)]`.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors::wrong_type;

/// `value` as a `usize`: a TypeError naming `key` for a non-int, a ValueError for a negative int
/// or one past what a `usize` holds. Ints by `__index__` (NumPy's) are taken.
pub(crate) fn count(value: &Bound<'_, PyAny>, key: &str) -> PyResult<usize> {
    if let Ok(n) = value.extract::<usize>() {
        return Ok(n);
    }
    match value.extract::<i128>() {
        Ok(n) if n < 0 => Err(PyValueError::new_err(format!("{key}: {n} is negative"))),
        Ok(n) => Err(PyValueError::new_err(format!(
            "{key}: {n} is more than any address space holds"
        ))),
        Err(_) => Err(wrong_type(value, key, "an int")),
    }
}

/// `value` as an `i32` (an exponent, where RMM's -1 means none): a TypeError naming `key` for a
/// non-int, a ValueError for an int an `i32` does not hold.
pub(crate) fn exponent(value: &Bound<'_, PyAny>, key: &str) -> PyResult<i32> {
    if let Ok(n) = value.extract::<i32>() {
        return Ok(n);
    }
    match value.extract::<i128>() {
        Ok(n) => Err(PyValueError::new_err(format!(
            "{key}: {n} is not an exponent of a size in bytes"
        ))),
        Err(_) => Err(wrong_type(value, key, "an int")),
    }
}

macro_rules! count_args {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("The `", stringify!($name), "` argument (see [`count`]).")]
        pub(crate) fn $name(value: &Bound<'_, PyAny>) -> PyResult<usize> {
            count(value, stringify!($name))
        }
    )*};
}

macro_rules! exponent_args {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("The `", stringify!($name), "` argument (see [`exponent`]).")]
        pub(crate) fn $name(value: &Bound<'_, PyAny>) -> PyResult<i32> {
            exponent(value, stringify!($name))
        }
    )*};
}

count_args!(
    allocation_limit,
    allocation_size,
    block_size,
    blocks_to_preallocate,
    handle,
    nbytes,
    ptr,
);

exponent_args!(min_size_exponent, max_size_exponent);
