//! `Array`'s Python methods (what an Array holds is `crate::objects::array`): plain attributes and
//! each protocol's entry (`methods`), views and copies (`views`), writes (`writes`), what it refuses
//! (`refusals`), transfers to NumPy (`host_transfer`) and pickling (`pickle`).

pub(crate) mod host_transfer;
pub(crate) mod methods;
pub(crate) mod pickle;
pub(crate) mod refusals;
pub(crate) mod views;
pub(crate) mod writes;
