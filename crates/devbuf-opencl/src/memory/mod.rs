//! How an OpenCL queue reaches memory: one strategy per device, chosen when the queue opens.
//! Intel's USM extension where the device has it ([`usm`]), else SVM ([`svm`]), else none
//! ([`none`]: the queue reaches host memory only). Each strategy answers every memory
//! operation of the queue (allocate, free, copy, fill, what a pointer is) in one place.

mod none;
mod strategy;
mod svm;
mod usm;

pub(crate) use strategy::{MemoryStrategy, QueueAccess};

use crate::device::{DeviceEntry, Memory};
use none::NoMemory;
use svm::SvmMemory;
use usm::UsmMemory;

/// The strategy for `entry`'s device.
pub(crate) fn strategy_for(entry: &DeviceEntry) -> Box<dyn MemoryStrategy> {
    match entry.memory {
        Memory::Usm(api, free) => Box::new(UsmMemory::new(api, free)),
        Memory::Svm => Box::new(SvmMemory::new(&entry.device)),
        Memory::None => Box::new(NoMemory),
    }
}
