//! What each Python object holds, the layer every other module works with, in layers (no module
//! names one above it): what a `Device` and a `Stream` (`Queue`) hold and the queue each device
//! shares (`device`, `queue`); what an `Event`, an `Array` and a `Buffer` hold (`event`, `array`;
//! an Array's hold on its memory is `crate::gil_as_lock::HeldArray`, with the other types that use
//! the GIL as their lock); the default device (`default_device`) and the current stream of
//! `with stream:` (`current_stream`); the queues other libraries' objects and streams name
//! (`foreign_objects`, `streams`). A class's Python methods that reach beyond this layer sit in a
//! folder named after the class, above it (`crate::array`, `crate::buffer`, `crate::device`,
//! `crate::stream`; an `Event`'s and a `BackendInfo`'s need nothing more and stay beside what
//! they hold). `python_owner`: what Python objects keep imported memory alive, and how the
//! garbage collector sees them.

pub(crate) mod array;
pub(crate) mod current_stream;
pub(crate) mod default_device;
pub(crate) mod device;
pub(crate) mod event;
pub(crate) mod foreign_objects;
pub(crate) mod python_owner;
pub(crate) mod queue;
pub(crate) mod streams;
