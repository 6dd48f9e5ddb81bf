//! `__dlpack__`'s decision table: every branch of [`plan_export`], each case naming the answer it
//! expects, and the hot path's shortcut checked against the plan over every input it reads.

use super::*;

const GPU: DLDevice = DLDevice {
    device_type: DLDeviceType::CUDA,
    device_id: 0,
};
const OTHER_GPU: DLDevice = DLDevice {
    device_type: DLDeviceType::CUDA,
    device_id: 1,
};

/// Device memory on `GPU`: writable, unreadable by the host, exportable, no streamless rule.
fn device_array() -> ExportedArray<'static> {
    ExportedArray {
        own: GPU,
        kind: MemKind::Device,
        host_accessible: false,
        readonly: false,
        refusal: None,
        streamless_rule: false,
    }
}

fn versioned() -> ExportRequest {
    ExportRequest {
        versioned: true,
        ..ExportRequest::default()
    }
}

fn message(result: Result<ExportPlan>) -> String {
    match result {
        Err(Error::Unexportable(message)) => message,
        other => panic!("expected Unexportable, got {other:?}"),
    }
}

#[test]
fn no_arguments_export_own_memory_under_the_streamless_rule() {
    let plan = plan_export(&device_array(), &versioned()).unwrap();
    let ordering = ExportOrdering::Streamless;
    assert_eq!(
        plan,
        ExportPlan::ZeroCopy {
            target: GPU,
            ordering
        }
    );
}

#[test]
fn a_stream_or_a_backend_rule_orders_for_the_consumer() {
    let with_stream = ExportRequest {
        stream_given: true,
        ..versioned()
    };
    let ordering = ExportOrdering::ForConsumer;
    let expected = ExportPlan::ZeroCopy {
        target: GPU,
        ordering,
    };
    assert_eq!(
        plan_export(&device_array(), &with_stream).unwrap(),
        expected
    );
    let backend_rule = ExportedArray {
        streamless_rule: true,
        ..device_array()
    };
    assert_eq!(plan_export(&backend_rule, &versioned()).unwrap(), expected);
}

#[test]
fn host_readable_memory_goes_to_the_cpu_without_a_copy_ordered_for_the_consumer() {
    let shared = ExportedArray {
        kind: MemKind::Shared,
        host_accessible: true,
        ..device_array()
    };
    let to_cpu = ExportRequest {
        dl_device: Some(CPU),
        ..versioned()
    };
    let ordering = ExportOrdering::ForConsumer;
    let expected = ExportPlan::ZeroCopy {
        target: CPU,
        ordering,
    };
    assert_eq!(plan_export(&shared, &to_cpu).unwrap(), expected);
}

#[test]
fn device_memory_to_the_cpu_is_a_host_copy_unless_copy_is_false() {
    let to_cpu = ExportRequest {
        dl_device: Some(CPU),
        ..versioned()
    };
    let expected = ExportPlan::Copy {
        target: CPU,
        to: CopyTo::Host,
    };
    assert_eq!(plan_export(&device_array(), &to_cpu).unwrap(), expected);
    let never = ExportRequest {
        copy: Some(false),
        ..to_cpu
    };
    assert_eq!(
        message(plan_export(&device_array(), &never)),
        "dl_device: Device memory on DLPack device (2, 0) cannot be exported to (1, 0) without \
         a copy, and copy=False"
    );
}

#[test]
fn copy_true_copies_even_where_zero_copy_would_serve() {
    let always = ExportRequest {
        copy: Some(true),
        ..versioned()
    };
    let on_own = ExportPlan::Copy {
        target: GPU,
        to: CopyTo::OwnDevice,
    };
    assert_eq!(plan_export(&device_array(), &always).unwrap(), on_own);
    // Refused and read-only memory copies too: the rules below are the zero-copy export's.
    let refused = ExportedArray {
        refusal: Some("no address"),
        readonly: true,
        ..device_array()
    };
    let legacy = ExportRequest {
        versioned: false,
        ..always
    };
    assert_eq!(plan_export(&refused, &legacy).unwrap(), on_own);
    let shared = ExportedArray {
        host_accessible: true,
        ..device_array()
    };
    let to_cpu = ExportRequest {
        dl_device: Some(CPU),
        ..always
    };
    let on_host = ExportPlan::Copy {
        target: CPU,
        to: CopyTo::Host,
    };
    assert_eq!(plan_export(&shared, &to_cpu).unwrap(), on_host);
}

#[test]
fn another_device_is_refused_naming_both() {
    let elsewhere = ExportRequest {
        dl_device: Some(OTHER_GPU),
        ..versioned()
    };
    assert_eq!(
        message(plan_export(&device_array(), &elsewhere)),
        "dl_device: devbuf copies to the CPU (1, 0) or to the array's own device (2, 0), not to \
         (2, 1)"
    );
}

#[test]
fn a_refusal_holds_for_the_own_device_only() {
    let refused = ExportedArray {
        refusal: Some("an OpenCL buffer has no address"),
        host_accessible: true,
        ..device_array()
    };
    assert_eq!(
        message(plan_export(&refused, &versioned())),
        "__dlpack__: an OpenCL buffer has no address"
    );
    let to_cpu = ExportRequest {
        dl_device: Some(CPU),
        ..versioned()
    };
    let ordering = ExportOrdering::ForConsumer;
    let expected = ExportPlan::ZeroCopy {
        target: CPU,
        ordering,
    };
    assert_eq!(plan_export(&refused, &to_cpu).unwrap(), expected);
}

#[test]
fn read_only_memory_needs_a_versioned_capsule_or_a_copy() {
    let readonly = ExportedArray {
        readonly: true,
        ..device_array()
    };
    let legacy = ExportRequest::default();
    assert_eq!(
        message(plan_export(&readonly, &legacy)),
        "__dlpack__: the array is read-only and a legacy (unversioned) DLPack capsule cannot say \
         so; pass max_version=(1, 0) or later, or copy=True"
    );
    let ordering = ExportOrdering::Streamless;
    let expected = ExportPlan::ZeroCopy {
        target: GPU,
        ordering,
    };
    assert_eq!(plan_export(&readonly, &versioned()).unwrap(), expected);
    assert!(plan_export(&device_array(), &legacy).is_ok());
}

#[test]
fn the_hot_paths_shortcut_answers_as_the_plan_does() {
    for bits in 0..16u8 {
        let [refused, streamless_rule, versioned, readonly] = [1, 2, 4, 8].map(|b| bits & b != 0);
        let array = ExportedArray {
            refusal: refused.then_some("refused"),
            streamless_rule,
            readonly,
            ..device_array()
        };
        let request = ExportRequest {
            versioned,
            ..ExportRequest::default()
        };
        let streamless = ExportPlan::ZeroCopy {
            target: GPU,
            ordering: ExportOrdering::Streamless,
        };
        assert_eq!(
            plain_export_is_streamless_zero_copy(refused, streamless_rule, versioned, readonly),
            plan_export(&array, &request).ok() == Some(streamless),
            "refused {refused}, streamless_rule {streamless_rule}, versioned {versioned}, \
             readonly {readonly}"
        );
    }
}
