//! The descriptor checks: a backend's [`crate::BackendDescriptor`] held to what the backend
//! does, so that each backend's own tests ([`crate::descriptor_tests!`], beside
//! [`crate::conformance_tests!`]) fail where its descriptor says something else. The rules
//! between backends (two backends that list one DLPack device type allocate the same kind for
//! it) need every backend compiled in: `devbuf`'s registry tests hold those.

use dlpark::ffi::{DLDevice, DLDeviceType};

use super::kit::{Outcome, skip};
use crate::{Availability, Backend, split_selector};

/// Every DLPack device type DLPack 1.3 names: a backend answers for none it does not list.
const DLPACK_DEVICE_TYPES: [DLDeviceType; 16] = [
    DLDeviceType::CPU,
    DLDeviceType::CUDA,
    DLDeviceType::CUDAHOST,
    DLDeviceType::OPENCL,
    DLDeviceType::VULKAN,
    DLDeviceType::METAL,
    DLDeviceType::VPI,
    DLDeviceType::ROCM,
    DLDeviceType::ROCMHOST,
    DLDeviceType::EXTDEV,
    DLDeviceType::CUDAMANAGED,
    DLDeviceType::ONEAPI,
    DLDeviceType::WEBGPU,
    DLDeviceType::HEXAGON,
    DLDeviceType::MAIA,
    DLDeviceType::TRN,
];

/// One descriptor check: its name and what runs it.
pub struct DescriptorCheck {
    /// The check's name, also its test's.
    pub name: &'static str,
    /// Runs the check against a backend.
    pub run: fn(&dyn Backend) -> Outcome,
}

/// Every descriptor check, in the order [`crate::descriptor_tests!`] names its tests.
pub const DESCRIPTOR_CHECKS: &[DescriptorCheck] = &[
    DescriptorCheck {
        name: "descriptor_kinds",
        run: kinds_cover_its_devices,
    },
    DescriptorCheck {
        name: "descriptor_dlpack_device_types",
        run: dlpack_device_types_are_the_ones_it_answers_for,
    },
    DescriptorCheck {
        name: "descriptor_streams",
        run: makes_streams_is_what_open_stream_does,
    },
    DescriptorCheck {
        name: "descriptor_rank",
        run: only_the_host_ranks_last,
    },
];

/// Its devices carry its name and allocate only kinds it lists; what it allocates for a DLPack
/// device type is one of them.
fn kinds_cover_its_devices(backend: &dyn Backend) -> Outcome {
    let descriptor = backend.descriptor();
    for entry in descriptor.dlpack_device_types {
        if let Some(kind) = entry.allocates
            && !descriptor.kinds.contains(&kind)
        {
            return Outcome::Fail(format!(
                "it allocates {kind} memory for DLPack device type {}, a kind it does not list",
                entry.device_type.0
            ));
        }
    }
    let devices = match devices(backend) {
        Ok(devices) => devices,
        Err(skip) => return skip,
    };
    for device in devices {
        if device.backend != descriptor.name {
            return Outcome::Fail(format!(
                "{} says its backend is {:?}, the descriptor {:?}",
                device.selector, device.backend, descriptor.name
            ));
        }
        if let Some(kind) = device.kinds.iter().find(|k| !descriptor.kinds.contains(k)) {
            return Outcome::Fail(format!(
                "{} allocates {kind} memory, a kind the descriptor does not list",
                device.selector
            ));
        }
    }
    Outcome::Pass
}

/// It answers `queue_for_dlpack_device` for no DLPack device type it does not list, and its
/// queues export each kind of memory as a type it lists.
fn dlpack_device_types_are_the_ones_it_answers_for(backend: &dyn Backend) -> Outcome {
    let descriptor = backend.descriptor();
    for device_type in DLPACK_DEVICE_TYPES {
        if !descriptor.has_dlpack_device_type(device_type) {
            let device = DLDevice {
                device_type,
                device_id: 0,
            };
            if backend.queue_for_dlpack_device(device).is_some() {
                return Outcome::Fail(format!(
                    "it answers for DLPack device type {}, which its descriptor does not list",
                    device_type.0
                ));
            }
        }
    }
    let devices = match devices(backend) {
        Ok(devices) => devices,
        Err(skip) => return skip,
    };
    for device in devices.iter().filter(|d| d.unusable_reason.is_none()) {
        let queue = match backend.open(split_selector(&device.selector).1) {
            Ok(queue) => queue,
            Err(err) => return Outcome::Fail(format!("opening {}: {err}", device.selector)),
        };
        for &kind in &device.kinds {
            let exported = queue.interop().dlpack_device(kind).device_type;
            if !descriptor.has_dlpack_device_type(exported) {
                return Outcome::Fail(format!(
                    "{} exports {kind} memory as DLPack device type {}, which its descriptor \
                     does not list",
                    device.selector, exported.0
                ));
            }
        }
    }
    Outcome::Pass
}

/// `open_stream` makes a stream exactly where the descriptor says it makes streams.
fn makes_streams_is_what_open_stream_does(backend: &dyn Backend) -> Outcome {
    if let Err(skip) = devices(backend) {
        return skip;
    }
    let descriptor = backend.descriptor();
    match backend.open_stream("", Default::default()) {
        Ok(_) if !descriptor.makes_streams => {
            Outcome::Fail("it makes a stream, but its descriptor says it makes none".into())
        }
        Err(err) if descriptor.makes_streams => Outcome::Fail(format!(
            "its descriptor says it makes streams, but open_stream fails: {err}"
        )),
        _ => Outcome::Pass,
    }
}

/// The host backend ranks last in the default order, as the last resort for the default device;
/// every other backend ranks ahead of it.
fn only_the_host_ranks_last(backend: &dyn Backend) -> Outcome {
    let descriptor = backend.descriptor();
    let is_host = *descriptor == crate::host::DESCRIPTOR;
    match (is_host, descriptor.default_rank == u8::MAX) {
        (true, false) => Outcome::Fail("the host backend must rank last (u8::MAX)".into()),
        (false, true) => Outcome::Fail(
            "default_rank u8::MAX is the host backend's, the last resort: rank below it".into(),
        ),
        _ => Outcome::Pass,
    }
}

/// The backend's devices, or a skip saying why it has none here.
fn devices(backend: &dyn Backend) -> Result<Vec<crate::DeviceInfo>, Outcome> {
    if let Availability::Unavailable(why) = backend.availability() {
        return Err(Outcome::Skip(why));
    }
    backend
        .devices()
        .map_err(|err| Outcome::Fail(format!("devices(): {err}")))
}

/// Runs the descriptor check named `name` on `backend` for a test: panics on failure; a skip is
/// handled as the conformance checks' are (`DEVBUF_REQUIRE`).
pub fn assert_descriptor_check(name: &str, backend: &dyn Backend) {
    let check = DESCRIPTOR_CHECKS
        .iter()
        .find(|check| check.name == name)
        .unwrap_or_else(|| panic!("no descriptor check named {name:?}"));
    match (check.run)(backend) {
        Outcome::Pass => {}
        Outcome::Fail(why) => panic!("{name} failed on {}: {why}", backend.name()),
        Outcome::Skip(why) => skip(backend.name(), name, &why),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::descriptor::DlpackDeviceType;
    use crate::{BackendDescriptor, DeviceInfo, HostBackend, HostQueue, MemKind, Queue, Result};

    crate::descriptor_tests!(HostBackend);

    /// The host backend with another descriptor: what each check catches.
    struct Misdescribed(&'static BackendDescriptor);

    impl Backend for Misdescribed {
        fn descriptor(&self) -> &'static BackendDescriptor {
            self.0
        }
        fn availability(&self) -> Availability {
            Availability::Available
        }
        fn devices(&self) -> Result<Vec<DeviceInfo>> {
            HostBackend.devices()
        }
        fn open(&self, spec: &str) -> Result<Arc<dyn Queue>> {
            HostBackend.open(spec)
        }
        fn open_stream(&self, spec: &str, options: crate::StreamOptions) -> Result<Arc<dyn Queue>> {
            HostBackend.open_stream(spec, options)
        }
        fn queue_for_dlpack_device(&self, device: DLDevice) -> Option<Result<Arc<dyn Queue>>> {
            (device.device_type == DLDeviceType::CPU).then(|| Ok(HostQueue::shared()))
        }
    }

    const FEWER_KINDS: BackendDescriptor = BackendDescriptor {
        kinds: &[MemKind::Host],
        ..crate::host::DESCRIPTOR
    };
    const OTHER_TYPE: BackendDescriptor = BackendDescriptor {
        dlpack_device_types: &[DlpackDeviceType::not_allocating(DLDeviceType::VULKAN)],
        ..crate::host::DESCRIPTOR
    };
    const NO_STREAMS: BackendDescriptor = BackendDescriptor {
        makes_streams: false,
        ..crate::host::DESCRIPTOR
    };
    const RANKED_LAST: BackendDescriptor = BackendDescriptor {
        name: "mirror",
        ..crate::host::DESCRIPTOR
    };

    #[test]
    fn each_check_catches_a_descriptor_that_says_otherwise() {
        let fails = |name: &str, descriptor: &'static BackendDescriptor| {
            let check = DESCRIPTOR_CHECKS.iter().find(|c| c.name == name).unwrap();
            match (check.run)(&Misdescribed(descriptor)) {
                Outcome::Fail(_) => {}
                other => panic!("{name} on {descriptor:?}: {other:?}"),
            }
        };
        fails("descriptor_kinds", &FEWER_KINDS);
        fails("descriptor_dlpack_device_types", &OTHER_TYPE);
        fails("descriptor_streams", &NO_STREAMS);
        fails("descriptor_rank", &RANKED_LAST);
    }
}
