//! `Stream`'s (`Queue`'s) Python methods (what a stream holds is `crate::objects::queue`).

pub(crate) mod methods;
