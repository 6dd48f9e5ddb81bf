//! The Python objects every other module works with, in layers (no module names one above it):
//! what a `Device` and a `Stream` (`Queue`) hold and the queue each device shares (`device`,
//! `queue`); what an `Event`, an `Array` and a `Buffer` hold (`event`, `array`; an Array's hold on
//! its memory is `crate::gil_as_lock::HeldArray`, with the other types that use the GIL as their
//! lock); the default device (`default_device`) and the current stream of `with stream:`
//! (`current_stream`); the queues other libraries' objects and streams name (`foreign_objects`,
//! `streams`); then the Device's and the Stream's Python methods, which reach all of these
//! (`device_methods`, `queue_methods`). Array's and Buffer's methods reach every protocol, so they
//! sit above the protocols' modules, in `array_methods` and `buffer_methods`. `python_owner`: what
//! Python objects keep imported memory alive, and how the garbage collector sees them.

pub(crate) mod array;
pub(crate) mod current_stream;
pub(crate) mod default_device;
pub(crate) mod device;
pub(crate) mod device_methods;
pub(crate) mod event;
pub(crate) mod foreign_objects;
pub(crate) mod python_owner;
pub(crate) mod queue;
pub(crate) mod queue_methods;
pub(crate) mod streams;
