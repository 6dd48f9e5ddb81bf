//! One value as the bytes of an element: what `devbuf.full(shape, fill_value, dtype)` fills an
//! array with. The conversions are NumPy's for a Python scalar (`np.full`): a bool is 0 or 1,
//! a float into an integer type truncates toward zero, any nonzero value is `True`; an integer
//! that does not fit, a non-finite float into an integer type and a complex value into a real
//! type are refused rather than wrapped or dropped.

#![allow(
    clippy::arithmetic_side_effects,
    reason = "values, not addresses: a scalar's bits encoded for its type, every shift and sum \
              bounded by the formats' own widths (at most 64 bits of integer, 16 of float)"
)]

use super::{ByteOrder, DType, ScalarKind};
use crate::{Error, Result};

/// A scalar as Python has it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    /// `True` / `False`.
    Bool(bool),
    /// An integer (Python's are unbounded; wider than any element type is refused).
    Int(i128),
    /// A float.
    Float(f64),
    /// A complex number: real and imaginary parts.
    Complex(f64, f64),
}

impl Scalar {
    /// The element type NumPy gives an array filled with this value when no dtype is named:
    /// bool, int64, float64 or complex128.
    pub fn default_dtype(self) -> DType {
        match self {
            Scalar::Bool(_) => DType::BOOL,
            Scalar::Int(_) => DType::INT64,
            Scalar::Float(_) => DType::FLOAT64,
            Scalar::Complex(..) => DType::COMPLEX128,
        }
    }
}

impl DType {
    /// The bytes of one element of this type holding `value`, in this type's byte order.
    ///
    /// ```
    /// use devbuf_core::{DType, Scalar};
    ///
    /// assert_eq!(DType::UINT16.encode(Scalar::Int(258))?, 258u16.to_ne_bytes());
    /// assert_eq!(DType::FLOAT16.encode(Scalar::Float(1.5))?, 0x3e00u16.to_ne_bytes());
    /// assert!(DType::UINT8.encode(Scalar::Int(256)).is_err());
    /// # Ok::<(), devbuf_core::Error>(())
    /// ```
    pub fn encode(self, value: Scalar) -> Result<Vec<u8>> {
        self.encode_as(value, "fill_value")
    }

    /// [`DType::encode`], its errors naming `key` (the argument that carried the value:
    /// `value` for `x[...] = value` and `x.fill(value)`, `obj` for `asarray(obj)`).
    pub fn encode_as(self, value: Scalar, key: &'static str) -> Result<Vec<u8>> {
        let size = self.itemsize();
        let mut bytes = match self.kind() {
            ScalarKind::Bool => vec![u8::from(value.is_nonzero())],
            ScalarKind::Int | ScalarKind::UInt => {
                let n = self.integer(value, key)?;
                n.to_le_bytes()[..size].to_vec()
            }
            ScalarKind::Float | ScalarKind::BFloat => {
                let x = self.real(value, key)?;
                float_bytes(self.kind(), size, x)
            }
            ScalarKind::Complex => {
                let (re, im) = match value {
                    Scalar::Complex(re, im) => (re, im),
                    other => (other.as_f64(), 0.0),
                };
                let half = size / 2;
                let mut bytes = float_bytes(ScalarKind::Float, half, re);
                bytes.extend(float_bytes(ScalarKind::Float, half, im));
                bytes
            }
        };
        // Little-endian so far; each part turned around for big-endian types.
        if self.order == ByteOrder::Big {
            let part = if self.kind() == ScalarKind::Complex {
                size / 2
            } else {
                size
            };
            bytes.chunks_mut(part).for_each(<[u8]>::reverse);
        }
        Ok(bytes)
    }

    fn integer(self, value: Scalar, key: &'static str) -> Result<i128> {
        let n = match value {
            Scalar::Bool(b) => i128::from(b),
            Scalar::Int(n) => n,
            Scalar::Float(x) if x.is_finite() => x.trunc() as i128,
            Scalar::Float(x) => {
                return Err(Error::invalid(
                    key,
                    format!("{x} cannot be converted to {self}"),
                ));
            }
            Scalar::Complex(..) => return Err(self.no_complex(key)),
        };
        let bits = 8 * self.itemsize() as u32;
        let (low, high) = if self.kind() == ScalarKind::Int {
            (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
        } else {
            (0, (1i128 << bits) - 1)
        };
        if n < low || n > high {
            return Err(Error::invalid(
                key,
                format!("{n} is out of range for {self} ({low} to {high})"),
            ));
        }
        Ok(n)
    }

    fn real(self, value: Scalar, key: &'static str) -> Result<f64> {
        match value {
            Scalar::Complex(..) => Err(self.no_complex(key)),
            other => Ok(other.as_f64()),
        }
    }

    fn no_complex(self, key: &'static str) -> Error {
        Error::wrong_type(
            key,
            format!("a complex value cannot fill a {self} array (take its .real first)"),
        )
    }
}

impl Scalar {
    fn is_nonzero(self) -> bool {
        match self {
            Scalar::Bool(b) => b,
            Scalar::Int(n) => n != 0,
            Scalar::Float(x) => x != 0.0,
            Scalar::Complex(re, im) => re != 0.0 || im != 0.0,
        }
    }

    fn as_f64(self) -> f64 {
        match self {
            Scalar::Bool(b) => f64::from(u8::from(b)),
            Scalar::Int(n) => n as f64,
            Scalar::Float(x) | Scalar::Complex(x, _) => x,
        }
    }
}

/// `x` as a little-endian IEEE float of `size` bytes (bfloat16 for [`ScalarKind::BFloat`]),
/// rounded to nearest, ties to even.
fn float_bytes(kind: ScalarKind, size: usize, x: f64) -> Vec<u8> {
    match (kind, size) {
        (ScalarKind::BFloat, _) => narrow_float(x, 7, 8).to_le_bytes().to_vec(),
        (_, 2) => narrow_float(x, 10, 5).to_le_bytes().to_vec(),
        (_, 4) => (x as f32).to_le_bytes().to_vec(),
        _ => x.to_le_bytes().to_vec(),
    }
}

/// `x` rounded to a 16-bit float with `mantissa` and `exponent` bits (IEEE binary16: 10 and 5;
/// bfloat16: 7 and 8), straight from the double (rounding through f32 first could round twice).
fn narrow_float(x: f64, mantissa: u32, exponent: u32) -> u16 {
    let bias = (1i32 << (exponent - 1)) - 1;
    let sign = if x.is_sign_negative() {
        1u16 << (mantissa + exponent)
    } else {
        0
    };
    let infinity = ((1u16 << exponent) - 1) << mantissa;
    if x.is_nan() {
        return sign | infinity | (1 << (mantissa - 1));
    }
    let a = x.abs();
    if a < 2f64.powi(1 - bias) {
        // Subnormal (or zero): a multiple of the smallest subnormal; 2^mantissa of them rounds
        // up to the smallest normal number, whose encoding is exactly that.
        let units = (a / 2f64.powi(1 - bias - mantissa as i32)).round_ties_even();
        return sign | units as u16;
    }
    // A double's own exponent: exact where log2 is not.
    let mut e = ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023;
    let fraction = a / 2f64.powi(e) - 1.0;
    let mut units = (fraction * 2f64.powi(mantissa as i32)).round_ties_even() as u32;
    if units == 1 << mantissa {
        units = 0;
        e += 1;
    }
    if e > bias {
        return sign | infinity;
    }
    sign | (((e + bias) as u16) << mantissa) | units as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f16(x: f64) -> u16 {
        narrow_float(x, 10, 5)
    }

    fn bf16(x: f64) -> u16 {
        narrow_float(x, 7, 8)
    }

    #[test]
    fn half_and_bfloat16_round_to_nearest_even() {
        // Values from IEEE 754 binary16's table.
        assert_eq!(f16(1.0), 0x3c00);
        assert_eq!(f16(-2.0), 0xc000);
        assert_eq!(f16(65504.0), 0x7bff);
        assert_eq!(f16(65520.0), 0x7c00);
        assert_eq!(f16(f64::INFINITY), 0x7c00);
        assert_eq!(f16(2f64.powi(-14)), 0x0400);
        assert_eq!(f16(2f64.powi(-24)), 0x0001);
        assert_eq!(f16(2f64.powi(-25)), 0x0000);
        assert_eq!(f16(1.0 + 2f64.powi(-11)), 0x3c00);
        assert_eq!(f16(1.0 + 3.0 * 2f64.powi(-11)), 0x3c02);
        assert_eq!(f16(-0.0), 0x8000);
        assert_eq!(f16(f64::NAN) & 0x7e00, 0x7e00);
        assert_eq!(f16(1.0 / 3.0), 0x3555);
        assert_eq!(bf16(1.0), 0x3f80);
        assert_eq!(bf16(-3.0), 0xc040);
        assert_eq!(bf16(std::f64::consts::PI), 0x4049);
        assert_eq!(bf16(f64::MAX), 0x7f80);
    }

    #[test]
    fn numpy_conversions_and_refusals() {
        assert_eq!(DType::INT8.encode(Scalar::Int(-1)).unwrap(), [0xff]);
        assert_eq!(
            DType::INT32.encode(Scalar::Float(-2.9)).unwrap(),
            (-2i32).to_ne_bytes()
        );
        assert_eq!(DType::BOOL.encode(Scalar::Float(0.5)).unwrap(), [1]);
        assert_eq!(
            DType::FLOAT64.encode(Scalar::Bool(true)).unwrap(),
            1f64.to_ne_bytes()
        );
        let c = DType::COMPLEX64.encode(Scalar::Complex(1.0, -2.0)).unwrap();
        assert_eq!(&c[..4], 1f32.to_le_bytes());
        assert_eq!(&c[4..], (-2f32).to_le_bytes());
        let big = DType::from_typestr(">u2").unwrap();
        assert_eq!(big.encode(Scalar::Int(1)).unwrap(), [0, 1]);
        let err = DType::UINT8.encode(Scalar::Int(-1)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "fill_value: -1 is out of range for uint8 (0 to 255)"
        );
        let err = DType::INT64.encode(Scalar::Float(f64::NAN)).unwrap_err();
        assert!(
            err.to_string().starts_with("fill_value: NaN cannot"),
            "{err}"
        );
        let err = DType::FLOAT32
            .encode(Scalar::Complex(1.0, 1.0))
            .unwrap_err();
        assert!(matches!(err, Error::InvalidType { .. }), "{err}");
        assert_eq!(Scalar::Int(3).default_dtype(), DType::INT64);
    }
}
