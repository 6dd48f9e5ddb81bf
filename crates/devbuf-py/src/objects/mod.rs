//! The Python objects every other module works with: `Device`, `Stream` (`Queue`) and `Event`
//! with their methods, the queue each device shares, the default device, the queues other
//! libraries' objects and streams name, and what an `Array` and a `Buffer` hold. Their methods reach every protocol, so they sit above
//! the protocols' modules, in `array_methods` and `buffer_methods` (and `Queue.alloc` makes
//! Buffers, so what a Buffer holds is here, beside the Queue).

pub(crate) mod array;
pub(crate) mod default_device;
pub(crate) mod device;
pub(crate) mod event;
pub(crate) mod foreign_objects;
pub(crate) mod held;
pub(crate) mod queue;
pub(crate) mod streams;
