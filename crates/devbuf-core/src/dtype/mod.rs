//! Element types, in the three spellings the protocols use: NumPy typestrs (CAI, SUAI, the
//! buffer protocol's neighbours), DLPack type codes, and the names users type.

// Caller numbers become addresses here: every size, count, offset and alignment is checked
// (docs/architecture.md, "Untrusted numbers").
#![deny(clippy::arithmetic_side_effects)]

use std::ffi::CStr;
use std::fmt;

use dlpark::ffi::{DLDataType, DLDataTypeCode};

use crate::{Error, Result};

/// The family of an element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScalarKind {
    /// Booleans (typestr `b`, DLPack kDLBool).
    Bool,
    /// Signed integers (`i`, kDLInt).
    Int,
    /// Unsigned integers (`u`, kDLUInt).
    UInt,
    /// IEEE floating point (`f`, kDLFloat).
    Float,
    /// bfloat16: DLPack has it, NumPy typestrs do not.
    BFloat,
    /// Complex numbers, two floats of half the item size (`c`, kDLComplex).
    Complex,
}

/// Byte order of multi-byte elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ByteOrder {
    /// Little-endian (typestr prefix `<`).
    Little,
    /// Big-endian (typestr prefix `>`).
    Big,
    /// One-byte elements (typestr prefix `|`).
    NotApplicable,
}

impl ByteOrder {
    /// The byte order of this machine.
    pub const NATIVE: ByteOrder = if cfg!(target_endian = "big") {
        ByteOrder::Big
    } else {
        ByteOrder::Little
    };
}

/// An element type: kind, size and byte order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DType {
    kind: ScalarKind,
    itemsize: u8,
    order: ByteOrder,
}

/// Buffer-protocol formats by [`ScalarKind`] (in declaration order) and log2 of the item size
/// (1 to 16 bytes); bfloat16 has none.
const BUFFER_FORMATS: [[Option<&CStr>; 5]; 6] = [
    [Some(c"?"), None, None, None, None],
    [Some(c"b"), Some(c"h"), Some(c"i"), Some(c"q"), None],
    [Some(c"B"), Some(c"H"), Some(c"I"), Some(c"Q"), None],
    [None, Some(c"e"), Some(c"f"), Some(c"d"), None],
    [None; 5],
    [None, None, None, Some(c"Zf"), Some(c"Zd")],
];

impl DType {
    /// NumPy `bool` (`|b1`).
    pub const BOOL: DType = DType::native(ScalarKind::Bool, 1);
    /// NumPy `int8`, native byte order.
    pub const INT8: DType = DType::native(ScalarKind::Int, 1);
    /// NumPy `int16`, native byte order.
    pub const INT16: DType = DType::native(ScalarKind::Int, 2);
    /// NumPy `int32`, native byte order.
    pub const INT32: DType = DType::native(ScalarKind::Int, 4);
    /// NumPy `int64`, native byte order.
    pub const INT64: DType = DType::native(ScalarKind::Int, 8);
    /// NumPy `uint8`, native byte order.
    pub const UINT8: DType = DType::native(ScalarKind::UInt, 1);
    /// NumPy `uint16`, native byte order.
    pub const UINT16: DType = DType::native(ScalarKind::UInt, 2);
    /// NumPy `uint32`, native byte order.
    pub const UINT32: DType = DType::native(ScalarKind::UInt, 4);
    /// NumPy `uint64`, native byte order.
    pub const UINT64: DType = DType::native(ScalarKind::UInt, 8);
    /// NumPy `float16`, native byte order.
    pub const FLOAT16: DType = DType::native(ScalarKind::Float, 2);
    /// NumPy `float32`, native byte order.
    pub const FLOAT32: DType = DType::native(ScalarKind::Float, 4);
    /// NumPy `float64`, native byte order.
    pub const FLOAT64: DType = DType::native(ScalarKind::Float, 8);
    /// bfloat16 (DLPack only: NumPy has no typestr for it).
    pub const BFLOAT16: DType = DType::native(ScalarKind::BFloat, 2);
    /// NumPy `complex64`, native byte order.
    pub const COMPLEX64: DType = DType::native(ScalarKind::Complex, 8);
    /// NumPy `complex128`, native byte order.
    pub const COMPLEX128: DType = DType::native(ScalarKind::Complex, 16);

    const fn native(kind: ScalarKind, itemsize: u8) -> DType {
        DType {
            kind,
            itemsize,
            order: if itemsize == 1 {
                ByteOrder::NotApplicable
            } else {
                ByteOrder::NATIVE
            },
        }
    }

    /// A type of `kind` and `itemsize` bytes, if devbuf supports that combination.
    pub fn new(kind: ScalarKind, itemsize: usize, order: ByteOrder) -> Option<DType> {
        let valid = match kind {
            ScalarKind::Bool => itemsize == 1,
            ScalarKind::Int | ScalarKind::UInt => matches!(itemsize, 1 | 2 | 4 | 8),
            ScalarKind::Float => matches!(itemsize, 2 | 4 | 8),
            ScalarKind::BFloat => itemsize == 2,
            ScalarKind::Complex => matches!(itemsize, 8 | 16),
        };
        valid.then_some(DType {
            kind,
            itemsize: itemsize as u8,
            order: if itemsize == 1 {
                ByteOrder::NotApplicable
            } else {
                order
            },
        })
    }

    /// The element type's family.
    pub fn kind(self) -> ScalarKind {
        self.kind
    }

    /// Size of one element in bytes.
    pub fn itemsize(self) -> usize {
        self.itemsize as usize
    }

    /// The alignment an element needs: its size, or its component's size for complex types.
    pub fn alignment(self) -> usize {
        match self.kind {
            ScalarKind::Complex => self.itemsize() / 2,
            _ => self.itemsize(),
        }
    }

    /// Whether elements are stored in this machine's byte order.
    pub fn is_native(self) -> bool {
        self.order != ByteOrder::opposite_of_native()
    }

    /// Parses a NumPy array-interface typestr such as `"<f4"`, `"|b1"` or `">i8"` (`"|f4"`, as
    /// NumPy reads it, is native order).
    pub fn from_typestr(typestr: &str) -> Result<DType> {
        let bytes = typestr.as_bytes();
        let order = match bytes.first() {
            Some(b'<') => ByteOrder::Little,
            Some(b'>') => ByteOrder::Big,
            // '|' ("not applicable") on a multi-byte type is read as native order, as NumPy
            // reads it: dpctl and dpnp write '|' for every type (`"|f4"`).
            Some(b'|' | b'=') => ByteOrder::NATIVE,
            _ => return Err(bad_typestr(typestr, NO_ORDER)),
        };
        let kind = match bytes.get(1) {
            Some(b'b') => ScalarKind::Bool,
            Some(b'i') => ScalarKind::Int,
            Some(b'u') => ScalarKind::UInt,
            Some(b'f') => ScalarKind::Float,
            Some(b'c') => ScalarKind::Complex,
            _ => return Err(bad_typestr(typestr, BAD_CODE)),
        };
        // The sizes typestrs carry (one or two digits) read directly; anything else as `usize`'s
        // `FromStr` reads it (the byte order and the type code are ASCII, so byte 2 starts a char).
        let itemsize = match bytes.get(2..).unwrap_or_default() {
            [digit @ b'0'..=b'9'] => digit_value(*digit),
            [tens @ b'0'..=b'9', ones @ b'0'..=b'9'] => digit_value(*tens)
                .saturating_mul(10)
                .saturating_add(digit_value(*ones)),
            _ => typestr
                .get(2..)
                .and_then(|size| size.parse().ok())
                .ok_or_else(|| bad_typestr(typestr, NO_SIZE))?,
        };
        DType::new(kind, itemsize, order).ok_or_else(|| bad_typestr(typestr, BAD_SIZE))
    }

    /// The NumPy typestr. bfloat16 has none.
    pub fn typestr(self) -> Result<&'static str> {
        use ByteOrder::*;
        use ScalarKind::*;
        Ok(match (self.kind, self.itemsize, self.order) {
            (Bool, 1, _) => "|b1",
            (Int, 1, _) => "|i1",
            (UInt, 1, _) => "|u1",
            (Int, 2, Little) => "<i2",
            (Int, 4, Little) => "<i4",
            (Int, 8, Little) => "<i8",
            (UInt, 2, Little) => "<u2",
            (UInt, 4, Little) => "<u4",
            (UInt, 8, Little) => "<u8",
            (Float, 2, Little) => "<f2",
            (Float, 4, Little) => "<f4",
            (Float, 8, Little) => "<f8",
            (Complex, 8, Little) => "<c8",
            (Complex, 16, Little) => "<c16",
            (Int, 2, Big) => ">i2",
            (Int, 4, Big) => ">i4",
            (Int, 8, Big) => ">i8",
            (UInt, 2, Big) => ">u2",
            (UInt, 4, Big) => ">u4",
            (UInt, 8, Big) => ">u8",
            (Float, 2, Big) => ">f2",
            (Float, 4, Big) => ">f4",
            (Float, 8, Big) => ">f8",
            (Complex, 8, Big) => ">c8",
            (Complex, 16, Big) => ">c16",
            _ => {
                return Err(Error::unexportable(format!(
                    "typestr: {self} has no NumPy typestr; export it through DLPack"
                )));
            }
        })
    }

    /// Parses a user's spelling: a typestr (`"<f4"`), its short form (`"f4"`), or a name
    /// (`"float32"`, `"bfloat16"`, `"bool"`).
    pub fn parse(name: &str) -> Result<DType> {
        let named = match name {
            "bool" | "?" => Some(DType::BOOL),
            "int8" => Some(DType::INT8),
            "int16" => Some(DType::INT16),
            "int32" => Some(DType::INT32),
            "int64" => Some(DType::INT64),
            "uint8" => Some(DType::UINT8),
            "uint16" => Some(DType::UINT16),
            "uint32" => Some(DType::UINT32),
            "uint64" => Some(DType::UINT64),
            "float16" => Some(DType::FLOAT16),
            "float32" => Some(DType::FLOAT32),
            "float64" => Some(DType::FLOAT64),
            "bfloat16" => Some(DType::BFLOAT16),
            "complex64" => Some(DType::COMPLEX64),
            "complex128" => Some(DType::COMPLEX128),
            _ => None,
        };
        if let Some(dtype) = named {
            return Ok(dtype);
        }
        let with_order = match name.chars().next() {
            Some('<' | '>' | '|' | '=') => DType::from_typestr(name),
            _ => DType::from_typestr(&format!("={name}")),
        };
        with_order.map_err(|_| {
            Error::invalid(
                "dtype",
                format!("{name:?} is not a supported dtype (e.g. \"float32\", \"<f4\", \"u1\")"),
            )
        })
    }

    /// Converts a DLPack data type. Only single-lane types devbuf knows are accepted.
    pub fn from_dlpack(dtype: DLDataType) -> Result<DType> {
        let bad = |why: String| Error::invalid("dtype", why);
        if dtype.lanes != 1 {
            return Err(bad(format!(
                "vector types ({} lanes) are not supported",
                dtype.lanes
            )));
        }
        let kind = match dtype.code {
            DLDataTypeCode::INT => ScalarKind::Int,
            DLDataTypeCode::UINT => ScalarKind::UInt,
            DLDataTypeCode::FLOAT => ScalarKind::Float,
            DLDataTypeCode::BFLOAT => ScalarKind::BFloat,
            DLDataTypeCode::COMPLEX => ScalarKind::Complex,
            DLDataTypeCode::BOOL => ScalarKind::Bool,
            other => {
                return Err(bad(format!(
                    "DLPack type code {} is not supported",
                    other.0
                )));
            }
        };
        if !dtype.bits.is_multiple_of(8) {
            return Err(bad(format!(
                "{} bits is not a whole number of bytes",
                dtype.bits
            )));
        }
        DType::new(kind, dtype.bits as usize / 8, ByteOrder::NATIVE).ok_or_else(|| {
            bad(format!(
                "{} bits is not supported for DLPack type code {}",
                dtype.bits, dtype.code.0
            ))
        })
    }

    /// The DLPack data type. DLPack has no byte order: non-native types cannot be exported.
    pub fn to_dlpack(self) -> Result<DLDataType> {
        if !self.is_native() {
            return Err(Error::unexportable(format!(
                "dtype: {self} is not in native byte order, which DLPack cannot describe"
            )));
        }
        let code = match self.kind {
            ScalarKind::Bool => DLDataTypeCode::BOOL,
            ScalarKind::Int => DLDataTypeCode::INT,
            ScalarKind::UInt => DLDataTypeCode::UINT,
            ScalarKind::Float => DLDataTypeCode::FLOAT,
            ScalarKind::BFloat => DLDataTypeCode::BFLOAT,
            ScalarKind::Complex => DLDataTypeCode::COMPLEX,
        };
        Ok(DLDataType {
            code,
            // At most 16 bytes: 128 bits.
            bits: self.itemsize.saturating_mul(8),
            lanes: 1,
        })
    }

    /// The Python buffer protocol (struct module) format, native order only, as the C string the
    /// protocol hands out.
    pub fn buffer_format(self) -> Option<&'static CStr> {
        // A table rather than a match: every buffer-protocol export asks, and the match compiled
        // to an indirect jump whose cost moved with the code around it (5% of `np.asarray`).
        if !self.is_native() || !self.itemsize.is_power_of_two() || self.itemsize > 16 {
            return None;
        }
        BUFFER_FORMATS[self.kind as usize][self.itemsize.trailing_zeros() as usize]
    }

    /// Parses a buffer-protocol (struct module) format of one element of `itemsize` bytes, as
    /// NumPy, `array`, `bytes` and `memoryview` produce them ("B", "<f", "=d", "Zf", "l"...).
    /// `None` (no format requested) means unsigned bytes.
    pub fn from_buffer_format(format: Option<&str>, itemsize: usize) -> Result<DType> {
        let format = format.unwrap_or("B");
        let bad = |why: &str| Error::invalid("format", format!("{format:?} {why}"));
        let (order, code) = match format.as_bytes() {
            [b'<', rest @ ..] => (ByteOrder::Little, rest),
            [b'>' | b'!', rest @ ..] => (ByteOrder::Big, rest),
            [b'@' | b'=', rest @ ..] => (ByteOrder::NATIVE, rest),
            rest => (ByteOrder::NATIVE, rest),
        };
        let kind = match code {
            b"?" => ScalarKind::Bool,
            b"b" | b"h" | b"i" | b"l" | b"q" | b"n" => ScalarKind::Int,
            b"B" | b"c" | b"H" | b"I" | b"L" | b"Q" | b"N" => ScalarKind::UInt,
            b"e" | b"f" | b"d" => ScalarKind::Float,
            b"Zf" | b"Zd" => ScalarKind::Complex,
            _ => return Err(bad("is not a supported element format")),
        };
        DType::new(kind, itemsize, order)
            .ok_or_else(|| bad(&format!("with item size {itemsize} is not supported")))
    }

    /// The canonical name, as NumPy spells it.
    pub fn name(self) -> &'static str {
        match (self.kind, self.itemsize) {
            (ScalarKind::Bool, _) => "bool",
            (ScalarKind::Int, 1) => "int8",
            (ScalarKind::Int, 2) => "int16",
            (ScalarKind::Int, 4) => "int32",
            (ScalarKind::Int, _) => "int64",
            (ScalarKind::UInt, 1) => "uint8",
            (ScalarKind::UInt, 2) => "uint16",
            (ScalarKind::UInt, 4) => "uint32",
            (ScalarKind::UInt, _) => "uint64",
            (ScalarKind::Float, 2) => "float16",
            (ScalarKind::Float, 4) => "float32",
            (ScalarKind::Float, _) => "float64",
            (ScalarKind::BFloat, _) => "bfloat16",
            (ScalarKind::Complex, 8) => "complex64",
            (ScalarKind::Complex, _) => "complex128",
        }
    }
}

impl ByteOrder {
    const fn opposite_of_native() -> ByteOrder {
        match ByteOrder::NATIVE {
            ByteOrder::Big => ByteOrder::Little,
            _ => ByteOrder::Big,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        if !self.is_native() {
            f.write_str(" (byte-swapped)")?;
        }
        Ok(())
    }
}

const NO_ORDER: &str = "does not start with a byte order ('<', '>', '|' or '=')";
const BAD_CODE: &str = "has a type code devbuf does not support (use b, i, u, f or c)";
const NO_SIZE: &str = "has no valid item size";
const BAD_SIZE: &str = "is not a supported size for its type code";

/// `from_typestr`'s error, out of its hot code.
#[cold]
#[inline(never)]
fn bad_typestr(typestr: &str, why: &str) -> Error {
    Error::invalid("typestr", format!("{typestr:?} {why}"))
}

mod scalar;

pub use scalar::Scalar;

/// The value of an ASCII digit.
fn digit_value(digit: u8) -> usize {
    usize::from(digit & 0x0f)
}

#[cfg(test)]
mod tests;
