//! The Python objects every other module works with: `Device` and `Queue` with their methods,
//! the queue each device shares, the default device, the queues other libraries' objects name,
//! and what an `Array` and a `Buffer` hold (their methods, which reach every protocol, are in
//! `array_methods`, above the protocols' modules).

pub(crate) mod array;
pub(crate) mod default_device;
pub(crate) mod device;
pub(crate) mod foreign_objects;
pub(crate) mod queue;
