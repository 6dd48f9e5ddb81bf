//! The registry derives from the descriptors, and each descriptor says what its backend does.

use std::collections::HashMap;

use super::*;

#[test]
fn backends_are_listed_in_the_default_order_with_the_host_last() {
    let ranks: Vec<_> = backends()
        .iter()
        .map(|backend| (backend.descriptor().default_rank, backend.name()))
        .collect();
    assert!(ranks.is_sorted(), "{ranks:?}");
    assert_eq!(default_order().last(), Some(&devbuf_core::host::HOST));
    let mut names = default_order();
    names.dedup();
    assert_eq!(names.len(), backends().len(), "one descriptor per name");
}

#[test]
fn the_default_order_is_the_descriptors_not_the_order_backends_are_compiled_in() {
    let mut reversed: Vec<Box<dyn Backend>> = vec![
        Box::new(Arena::new(&SECOND, false)),
        Box::new(Arena::new(&FIRST, false)),
    ];
    in_default_order(&mut reversed);
    let names: Vec<_> = reversed.iter().map(|backend| backend.name()).collect();
    assert_eq!(names, ["first", "second"]);
}

/// Each descriptor against its backend: the kinds its devices allocate, the DLPack device types
/// its memory is exported as, the device types it answers for, and whether it makes streams.
/// The descriptor checks each backend's own tests run (`devbuf_core::descriptor_tests!`), on
/// every backend compiled in.
#[test]
fn each_descriptor_says_what_its_backend_does() {
    for backend in backends() {
        for check in devbuf_core::conformance::DESCRIPTOR_CHECKS {
            devbuf_core::conformance::assert_descriptor_check(check.name, backend.as_ref());
        }
    }
}

#[test]
fn words_a_descriptor_claims_are_that_backends_selectors_as_they_stand() {
    for backend in backends() {
        for &word in backend.descriptor().selector_words {
            assert_eq!(split_selector(word), (backend.name(), word));
            let filter = format!("{word}:0");
            assert_eq!(split_selector(&filter), (backend.name(), filter.as_str()));
        }
    }
    #[cfg(feature = "sycl")]
    assert_eq!(
        split_selector("level_zero:gpu:0"),
        ("sycl", "level_zero:gpu:0")
    );
    assert_eq!(split_selector("opencl:0:1"), ("opencl", "0:1"));
    assert_eq!(split_selector("gpux"), ("gpux", ""));
}

#[test]
fn the_dlpack_allocation_table_is_the_descriptors() {
    let mut allocates: HashMap<u32, MemKind> = HashMap::new();
    for backend in backends() {
        for entry in backend.descriptor().dlpack_device_types {
            if let Some(kind) = entry.allocates {
                let earlier = allocates.insert(entry.device_type.0, kind);
                assert!(
                    earlier.is_none_or(|earlier| earlier == kind),
                    "two backends allocate different kinds for DLPack device type {}",
                    entry.device_type.0
                );
            }
        }
    }
    // A backend that lists a device type as not allocating has no say: the one that allocates
    // decides, and where none does, devbuf allocates nothing.
    for backend in backends() {
        for entry in backend.descriptor().dlpack_device_types {
            let expected = allocates.get(&entry.device_type.0).copied();
            assert_eq!(dlpack_kind_for(entry.device_type), expected);
        }
    }
    assert_eq!(dlpack_kind_for(DLDeviceType::CPU), Some(MemKind::Host));
    assert_eq!(dlpack_kind_for(DLDeviceType::VULKAN), None);
}

#[test]
fn a_protocol_asks_the_backends_its_descriptors_name() {
    for protocol in [Protocol::Suai, Protocol::Cai] {
        for backend in backends() {
            assert_eq!(
                speakers(protocol).any(|speaker| speaker.name() == backend.name()),
                backend.descriptor().protocols.contains(&protocol)
            );
        }
    }
    assert!(!HostBackend.speaks(Protocol::Cai) && !HostBackend.speaks(Protocol::Suai));
}

// -- Two backends that speak one protocol: the memory decides which answers.

const FIRST: BackendDescriptor = BackendDescriptor {
    name: "first",
    kinds: &MemKind::ALLOCATABLE,
    dlpack_device_types: &[DlpackDeviceType::not_allocating(DLDeviceType::VULKAN)],
    protocols: &[Protocol::Cai],
    selector_words: &[],
    makes_streams: false,
    may_be_default: true,
    default_rank: 0,
};

const SECOND: BackendDescriptor = BackendDescriptor {
    name: "second",
    default_rank: 1,
    ..FIRST
};

/// A host-like backend whose runtime is a host queue of its own: it recognises the memory that
/// queue allocated, and nothing else. `claims_everything` makes it the kind of backend that
/// answers for any pointer, as a registry that asked by compile order would let it. It lists one
/// device as DLPack device 0 of its descriptor's device type, or none.
struct Arena {
    descriptor: &'static BackendDescriptor,
    queue: Arc<dyn Queue>,
    claims_everything: bool,
    lists_a_device: bool,
}

impl Arena {
    fn new(descriptor: &'static BackendDescriptor, claims_everything: bool) -> Self {
        Arena {
            descriptor,
            queue: Arc::new(HostQueue::new()),
            claims_everything,
            lists_a_device: true,
        }
    }

    fn without_devices(descriptor: &'static BackendDescriptor) -> Self {
        Arena {
            lists_a_device: false,
            ..Arena::new(descriptor, false)
        }
    }
}

impl Backend for Arena {
    fn descriptor(&self) -> &'static BackendDescriptor {
        self.descriptor
    }

    fn availability(&self) -> Availability {
        Availability::Available
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        Ok(vec![self.queue.device().clone()])
    }

    fn open(&self, _spec: &str) -> Result<Arc<dyn Queue>> {
        Ok(Arc::clone(&self.queue))
    }

    fn queue_for_dlpack_device(
        &self,
        device: dlpark::ffi::DLDevice,
    ) -> Option<Result<Arc<dyn Queue>>> {
        if !self.descriptor.has_dlpack_device_type(device.device_type) {
            return None;
        }
        Some(match (self.lists_a_device, device.device_id) {
            (true, 0) => Ok(Arc::clone(&self.queue)),
            _ => Err(Error::DeviceNotFound {
                selector: format!("{}:{}", self.name(), device.device_id),
                reason: format!("{} lists no such device", self.name()),
            }),
        })
    }

    fn claim_dlpack_pointer(
        &self,
        _device: dlpark::ffi::DLDevice,
        ptr: usize,
    ) -> Claim<Arc<dyn Queue>> {
        self.claim_pointer(Protocol::Cai, ptr)
    }

    fn claim_pointer(&self, _protocol: Protocol, ptr: usize) -> Claim<Arc<dyn Queue>> {
        if self.claims_everything || self.queue.kind_of(ptr as *const u8) != MemKind::Unknown {
            return Claim::Recognised(Ok(Arc::clone(&self.queue)));
        }
        Claim::Unrecognised(Error::invalid(
            "data",
            format!("{ptr:#x} is not {} memory", self.name()),
        ))
    }
}

/// Which backend answers for `ptr` when `backends` are asked in that order.
fn answer(backends: &[&Arena], ptr: usize) -> Result<Arc<dyn Queue>> {
    claim_pointer(
        backends.iter().map(|backend| *backend as &dyn Backend),
        Protocol::Cai,
        ptr,
    )
}

#[test]
fn the_backend_that_recognises_the_memory_answers_in_either_order() {
    let first = Arena::new(&FIRST, false);
    let second = Arena::new(&SECOND, false);
    let memory = Buffer::alloc(&second.queue, MemKind::Device, 64).unwrap();
    let ptr = memory.ptr() as usize;
    for order in [[&first, &second], [&second, &first]] {
        let queue = answer(&order, ptr).unwrap();
        assert!(
            Arc::ptr_eq(&queue, &second.queue),
            "order {:?}",
            order.map(|b| b.name())
        );
    }
}

#[test]
fn a_backend_that_recognises_everything_answers_only_for_memory_no_earlier_one_recognises() {
    // The claim is asked in the default order, so a backend that claims too much must rank
    // after those that classify their pointers; the memory of a classifying backend goes to it.
    let classifying = Arena::new(&FIRST, false);
    let greedy = Arena::new(&SECOND, true);
    let memory = Buffer::alloc(&classifying.queue, MemKind::Host, 64).unwrap();
    let queue = answer(&[&classifying, &greedy], memory.ptr() as usize).unwrap();
    assert!(Arc::ptr_eq(&queue, &classifying.queue));
    let elsewhere = answer(&[&classifying, &greedy], 0x1000).unwrap();
    assert!(Arc::ptr_eq(&elsewhere, &greedy.queue));
}

#[test]
fn memory_no_speaker_recognises_is_refused_with_each_ones_reason() {
    let first = Arena::new(&FIRST, false);
    let second = Arena::new(&SECOND, false);
    match answer(&[&first, &second], 0x1000) {
        Err(Error::InvalidDescriptor { key, message }) => {
            assert_eq!(key, "data");
            assert!(
                message.contains("first: ") && message.contains("0x1000 is not second memory"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    // One speaker: its own error, as it said it.
    match answer(&[&first], 0x1000) {
        Err(Error::InvalidDescriptor { message, .. }) => {
            assert_eq!(message, "0x1000 is not first memory")
        }
        other => panic!("{other:?}"),
    }
    match answer(&[], 0x1000) {
        Err(Error::InvalidDescriptor { message, .. }) => {
            assert!(
                message.contains("no backend compiled into devbuf speaks it"),
                "{message}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_shared_dlpack_device_type_goes_to_the_backend_that_has_the_device_in_either_order() {
    let without = Arena::without_devices(&FIRST);
    let with = Arena::new(&SECOND, false);
    let device = dlpark::ffi::DLDevice {
        device_type: DLDeviceType::VULKAN,
        device_id: 0,
    };
    for order in [[&without, &with], [&with, &without]] {
        let queue =
            queue_for_dlpack_device_among(order.map(|b| b as &dyn Backend).into_iter(), device)
                .unwrap();
        assert!(Arc::ptr_eq(&queue, &with.queue));
    }
    // No backend has device 1: the first one's reason.
    let missing = dlpark::ffi::DLDevice {
        device_id: 1,
        ..device
    };
    match queue_for_dlpack_device_among([&without as &dyn Backend, &with].into_iter(), missing) {
        Err(Error::DeviceNotFound { reason, .. }) => {
            assert_eq!(reason, "first lists no such device")
        }
        other => panic!("{other:?}"),
    }
    // A device type no descriptor lists is not asked of anyone.
    let cpu = dlpark::ffi::DLDevice {
        device_type: DLDeviceType::CPU,
        device_id: 0,
    };
    assert!(queue_for_dlpack_device_among([&with as &dyn Backend].into_iter(), cpu).is_err());
}

// -- Roles the descriptor states.

const NEVER_DEFAULT: BackendDescriptor = BackendDescriptor {
    name: "never-default",
    may_be_default: false,
    ..FIRST
};

/// A backend that allocates every kind and ranks first is still not the default device when its
/// descriptor says it never is; the same backend that may be is.
#[test]
fn a_backend_that_may_not_be_the_default_device_is_skipped_wherever_it_ranks() {
    let never = Arena::new(&NEVER_DEFAULT, false);
    let why = crate::selection::backend_default(&never).unwrap_err();
    assert!(why.contains("never the default device"), "{why}");
    let may = Arena::new(&FIRST, false);
    assert!(Arc::ptr_eq(
        &crate::selection::backend_default(&may).unwrap(),
        &may.queue
    ));
}

const ALLOCATES_VULKAN: BackendDescriptor = BackendDescriptor {
    name: "allocating",
    dlpack_device_types: &[DlpackDeviceType::allocating(
        DLDeviceType::VULKAN,
        MemKind::Device,
    )],
    ..FIRST
};

/// Two backends list one DLPack device type, one allocating for it and one not (both valid): the
/// allocating one decides, in either order.
#[test]
fn a_backend_that_does_not_allocate_for_a_shared_device_type_has_no_say() {
    let (allocating, not) = (
        Arena::new(&ALLOCATES_VULKAN, false),
        Arena::new(&FIRST, false),
    );
    for order in [[&allocating, &not], [&not, &allocating]] {
        let listed = order.iter().map(|arena| *arena as &dyn Backend);
        assert_eq!(
            dlpack_kind_among(listed, DLDeviceType::VULKAN),
            Some(MemKind::Device)
        );
    }
    let alone = [&not].map(|arena| arena as &dyn Backend);
    assert_eq!(
        dlpack_kind_among(alone.into_iter(), DLDeviceType::VULKAN),
        None
    );
}

/// Two host-like backends list one DLPack device type: each one's memory is imported onto its own
/// queue whichever the device chose, in either order, and memory neither recognises stays with
/// the queue chosen for the device; a type one backend alone lists asks nobody.
#[test]
fn dlpack_memory_of_a_shared_device_type_goes_to_the_backend_that_recognises_it() {
    let (first, second) = (Arena::new(&FIRST, false), Arena::new(&SECOND, false));
    let device = dlpark::ffi::DLDevice {
        device_type: DLDeviceType::VULKAN,
        device_id: 0,
    };
    let ours = |arena: &Arena| Buffer::alloc(&arena.queue, MemKind::Host, 64).unwrap();
    let (in_first, in_second) = (ours(&first), ours(&second));
    for order in [[&first, &second], [&second, &first]] {
        let among = || order.iter().map(|arena| *arena as &dyn Backend);
        for (buffer, owner) in [(&in_first, &first), (&in_second, &second)] {
            let routed = queue_for_dlpack_memory_among(among(), device, buffer.ptr() as usize);
            assert!(Arc::ptr_eq(&routed.unwrap().unwrap(), &owner.queue));
        }
        let numpy_like = [0u8; 64];
        assert!(
            queue_for_dlpack_memory_among(among(), device, numpy_like.as_ptr() as usize).is_none()
        );
    }
    let alone = [&first].map(|arena| arena as &dyn Backend);
    let ptr = in_first.ptr() as usize;
    assert!(queue_for_dlpack_memory_among(alone.into_iter(), device, ptr).is_none());
}
