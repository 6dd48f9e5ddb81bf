//! Python values as devbuf reads them, for every class and function: element types (`dtypes`),
//! elements and nested lists of them (`literals`), and int arguments (`int_args`, `exact_int`).

pub(crate) mod dtypes;
pub(crate) mod exact_int;
pub(crate) mod int_args;
pub(crate) mod literals;
