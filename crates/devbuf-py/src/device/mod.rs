//! `Device`'s Python methods and `set_default_device` (what a Device holds is
//! `crate::objects::device`).

pub(crate) mod methods;
