use super::*;

const ALL: [DType; 15] = [
    DType::BOOL,
    DType::INT8,
    DType::INT16,
    DType::INT32,
    DType::INT64,
    DType::UINT8,
    DType::UINT16,
    DType::UINT32,
    DType::UINT64,
    DType::FLOAT16,
    DType::FLOAT32,
    DType::FLOAT64,
    DType::BFLOAT16,
    DType::COMPLEX64,
    DType::COMPLEX128,
];

#[test]
fn typestrs_round_trip_for_every_numpy_type() {
    for dtype in ALL.into_iter().filter(|d| d.kind() != ScalarKind::BFloat) {
        let typestr = dtype.typestr().unwrap();
        assert_eq!(DType::from_typestr(typestr).unwrap(), dtype, "{typestr}");
        assert_eq!(DType::parse(dtype.name()).unwrap(), dtype);
    }
    let swapped = DType::from_typestr(">f8").unwrap();
    assert!(!swapped.is_native());
    assert_eq!(swapped.typestr().unwrap(), ">f8");
    assert!(swapped.to_dlpack().is_err());
    assert_eq!(DType::from_typestr("<u1").unwrap(), DType::UINT8);
    // dpctl's and dpnp's typestrs: '|' on a multi-byte type is native order, as in NumPy.
    assert_eq!(DType::from_typestr("|f4").unwrap(), DType::FLOAT32);
    assert_eq!(DType::from_typestr("|i8").unwrap(), DType::INT64);
    assert_eq!(DType::parse("f4").unwrap(), DType::FLOAT32);
}

#[test]
fn dlpack_codes_round_trip_including_bfloat16() {
    for dtype in ALL {
        let dl = dtype.to_dlpack().unwrap();
        assert_eq!(DType::from_dlpack(dl).unwrap(), dtype);
    }
    let bf16 = DType::BFLOAT16.to_dlpack().unwrap();
    assert_eq!(
        (bf16.code, bf16.bits, bf16.lanes),
        (DLDataTypeCode::BFLOAT, 16, 1)
    );
    assert!(DType::BFLOAT16.typestr().is_err());
}

#[test]
fn typestr_sizes_read_as_usize_reads_them() {
    // The one- and two-digit sizes are read without `FromStr`: the same answers, and the same
    // errors, for every size text.
    for size in [
        "1", "4", "04", "+4", "004", "8", "16", "99", "", "x", "4 ", "\u{661}", "-4",
    ] {
        let expected = size
            .parse::<usize>()
            .ok()
            .map(|n| DType::new(ScalarKind::Complex, n, ByteOrder::Little));
        let typestr = format!("<c{size}");
        match (DType::from_typestr(&typestr), expected) {
            (Ok(dtype), Some(Some(expected))) => assert_eq!(dtype, expected, "{typestr}"),
            (Err(err), Some(None)) => assert!(err.to_string().ends_with("type code"), "{err}"),
            (Err(err), None) => assert!(err.to_string().ends_with("item size"), "{err}"),
            (read, expected) => panic!("{typestr}: {read:?}, expected {expected:?}"),
        }
    }
    for (typestr, why) in [("", "byte order"), ("<", "type code"), ("<f", "item size")] {
        let err = DType::from_typestr(typestr).unwrap_err().to_string();
        assert!(err.contains(why), "{typestr:?}: {err}");
    }
}

#[test]
fn bad_types_name_their_key() {
    for bad in ["f4", "<x4", "<f3", "<f", "|f3", "<c4", "<b2", "|b2", ""] {
        let err = DType::from_typestr(bad).unwrap_err();
        assert!(err.to_string().starts_with("typestr: "), "{bad}: {err}");
    }
    let err = DType::from_dlpack(DLDataType {
        code: DLDataTypeCode::FLOAT,
        bits: 32,
        lanes: 4,
    })
    .unwrap_err();
    assert!(err.to_string().starts_with("dtype: "), "{err}");
    let err = DType::from_dlpack(DLDataType {
        code: DLDataTypeCode::FLOAT8_E4M3,
        bits: 8,
        lanes: 1,
    })
    .unwrap_err();
    assert!(err.to_string().contains("type code 8"), "{err}");
    assert!(DType::parse("float128").is_err());
}

#[test]
fn buffer_formats_parse_with_their_item_size() {
    for dtype in ALL.into_iter().filter(|d| d.kind() != ScalarKind::BFloat) {
        let format = dtype.buffer_format().unwrap().to_str().unwrap();
        assert_eq!(
            DType::from_buffer_format(Some(format), dtype.itemsize()).unwrap(),
            dtype
        );
    }
    assert!(DType::BFLOAT16.buffer_format().is_none());
    assert_eq!(DType::from_buffer_format(None, 1).unwrap(), DType::UINT8);
    assert_eq!(
        DType::from_buffer_format(Some("<l"), 8).unwrap(),
        DType::INT64
    );
    assert!(
        !DType::from_buffer_format(Some(">d"), 8)
            .unwrap()
            .is_native()
    );
    let err = DType::from_buffer_format(Some("T{i:x:}"), 4).unwrap_err();
    assert!(err.to_string().starts_with("format: "), "{err}");
}

#[test]
fn alignment_of_complex_is_its_component() {
    assert_eq!(DType::COMPLEX128.alignment(), 8);
    assert_eq!(DType::FLOAT64.alignment(), 8);
    assert_eq!(DType::BOOL.alignment(), 1);
}
