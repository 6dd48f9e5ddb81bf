//! Python scalars and nested sequences of them as array elements: what `asarray([[1, 2], [3,
//! 4]])` and `x[...] = [1.5, 2.5]` hold. The shape is the nesting's (every sequence at one depth
//! of one length), the default element type the array API's (bool, then the default integer,
//! float and complex types, by the highest kind present), and the values are converted as
//! [`DType::encode_as`] converts a scalar.

use super::{Array, Dims, Layout, MAX_NDIM, python_shape};
use crate::{Buffer, DType, Error, HostQueue, MemKind, Result, Scalar};

/// A scalar or a sequence of literals, as a Python value nests them.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    /// One value.
    Scalar(Scalar),
    /// A list or tuple.
    Sequence(Vec<Literal>),
}

impl Literal {
    /// The shape the nesting has: one extent per depth of sequences, which must all be as long
    /// at one depth and all hold scalars or all sequences (`key: ...` otherwise, as NumPy
    /// refuses an inhomogeneous shape).
    pub fn shape(&self, key: &'static str) -> Result<Dims<usize>> {
        let mut shape = Dims::new();
        let mut level = vec![self];
        loop {
            let first = level[0].len();
            if let Some(other) = level.iter().map(|entry| entry.len()).find(|&n| n != first) {
                let detail = match (first, other) {
                    (Some(n), Some(m)) => format!("sequences of lengths {n} and {m}"),
                    _ => "scalars and sequences at one depth".into(),
                };
                return Err(Error::invalid(
                    key,
                    format!(
                        "the nested sequence has an inhomogeneous shape after {} dimensions \
                         (detected shape {}): {detail}",
                        shape.len(),
                        python_shape(&shape)
                    ),
                ));
            }
            let Some(n) = first else {
                return Ok(shape);
            };
            if shape.len() == MAX_NDIM {
                return Err(Error::invalid(
                    key,
                    format!("sequences nested more than {MAX_NDIM} deep"),
                ));
            }
            shape.push(n);
            level = level.iter().flat_map(|entry| entry.items()).collect();
            if level.is_empty() {
                return Ok(shape);
            }
        }
    }

    /// The element type the array API gives these values when none is asked for: bool when
    /// all are bools; the default integer type (int64) when all are ints or bools; the default
    /// complex type (complex128) when any is complex; else the default real floating-point type
    /// (float64), which an empty sequence has too.
    ///
    /// ```
    /// use devbuf_core::{DType, Literal, Scalar};
    ///
    /// let row = |values: &[Scalar]| Literal::Sequence(values.iter().copied().map(Literal::Scalar).collect());
    /// assert_eq!(row(&[Scalar::Bool(true), Scalar::Int(2)]).default_dtype(), DType::INT64);
    /// assert_eq!(row(&[Scalar::Int(1), Scalar::Float(2.5)]).default_dtype(), DType::FLOAT64);
    /// assert_eq!(row(&[]).default_dtype(), DType::FLOAT64);
    /// assert_eq!(Literal::Scalar(Scalar::Bool(false)).default_dtype(), DType::BOOL);
    /// ```
    pub fn default_dtype(&self) -> DType {
        // The kinds in the array API's order of precedence; an empty nesting is float's.
        let rank = |value: &Scalar| match value {
            Scalar::Bool(_) => 0,
            Scalar::Int(_) => 1,
            Scalar::Float(_) => 2,
            Scalar::Complex(..) => 3,
        };
        let mut highest = None;
        self.for_each_scalar(&mut |value| {
            highest = highest.max(Some(rank(value)));
            Ok(())
        })
        .expect("the visitor never fails");
        match highest {
            Some(0) => DType::BOOL,
            Some(1) => DType::INT64,
            Some(3) => DType::COMPLEX128,
            _ => DType::FLOAT64,
        }
    }

    /// The values as `dtype` elements in C order, each converted as [`DType::encode_as`]
    /// converts it (errors naming `key`).
    pub fn encode(&self, dtype: DType, key: &'static str) -> Result<Vec<u8>> {
        let mut bytes = Vec::new();
        self.for_each_scalar(&mut |value| {
            bytes.extend(dtype.encode_as(*value, key)?);
            Ok(())
        })?;
        Ok(bytes)
    }

    /// The values as a C-contiguous `dtype` array of their shape in host memory of the host
    /// backend (which every queue's copies read): the source of `x[...] = [...]`.
    pub fn to_host_array(&self, dtype: DType, key: &'static str) -> Result<Array> {
        let shape = self.shape(key)?;
        let bytes = self.encode(dtype, key)?;
        let buffer = Buffer::alloc(&HostQueue::shared(), MemKind::Host, bytes.len())?;
        buffer.copy_from_host(&bytes)?;
        Array::new(buffer, Layout::contiguous(dtype, &shape, 0)?)
    }

    /// How many entries a sequence has; `None` for a scalar.
    fn len(&self) -> Option<usize> {
        match self {
            Literal::Scalar(_) => None,
            Literal::Sequence(items) => Some(items.len()),
        }
    }

    /// A sequence's entries (none for a scalar).
    fn items(&self) -> &[Literal] {
        match self {
            Literal::Scalar(_) => &[],
            Literal::Sequence(items) => items,
        }
    }

    fn for_each_scalar(&self, visit: &mut dyn FnMut(&Scalar) -> Result<()>) -> Result<()> {
        match self {
            Literal::Scalar(value) => visit(value),
            Literal::Sequence(items) => items
                .iter()
                .try_for_each(|item| item.for_each_scalar(visit)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(rows: &[&[i128]]) -> Literal {
        Literal::Sequence(
            rows.iter()
                .map(|row| {
                    Literal::Sequence(
                        row.iter()
                            .map(|&n| Literal::Scalar(Scalar::Int(n)))
                            .collect(),
                    )
                })
                .collect(),
        )
    }

    #[test]
    fn shapes_follow_the_nesting() {
        assert_eq!(
            Literal::Scalar(Scalar::Int(1))
                .shape("obj")
                .unwrap()
                .as_slice(),
            &[] as &[usize]
        );
        assert_eq!(
            ints(&[&[1, 2, 3], &[4, 5, 6]])
                .shape("obj")
                .unwrap()
                .as_slice(),
            &[2, 3]
        );
        assert_eq!(ints(&[&[], &[]]).shape("obj").unwrap().as_slice(), &[2, 0]);
        assert_eq!(
            Literal::Sequence(vec![]).shape("obj").unwrap().as_slice(),
            &[0]
        );
        let err = ints(&[&[1, 2], &[3]]).shape("obj").unwrap_err();
        assert_eq!(
            err.to_string(),
            "obj: the nested sequence has an inhomogeneous shape after 1 dimensions (detected \
             shape (2,)): sequences of lengths 2 and 1"
        );
        let mixed = Literal::Sequence(vec![Literal::Scalar(Scalar::Int(1)), ints(&[&[2]])]);
        let err = mixed.shape("value").unwrap_err();
        assert!(
            err.to_string().starts_with("value: ")
                && err
                    .to_string()
                    .ends_with("scalars and sequences at one depth"),
            "{err}"
        );
        let mut deep = Literal::Scalar(Scalar::Int(0));
        for _ in 0..=MAX_NDIM {
            deep = Literal::Sequence(vec![deep]);
        }
        assert!(
            deep.shape("obj")
                .unwrap_err()
                .to_string()
                .contains("nested more than 64 deep")
        );
    }

    #[test]
    fn values_are_encoded_in_c_order_as_the_dtype() {
        let grid = ints(&[&[1, 2], &[3, 4]]);
        assert_eq!(grid.default_dtype(), DType::INT64);
        let bytes = grid.encode(DType::FLOAT32, "obj").unwrap();
        let floats: Vec<f32> = bytes
            .chunks(4)
            .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(floats, [1.0, 2.0, 3.0, 4.0]);
        let err = ints(&[&[1, 300]])
            .encode(DType::UINT8, "value")
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "value: 300 is out of range for uint8 (0 to 255)"
        );
        let complex = Literal::Sequence(vec![
            Literal::Scalar(Scalar::Float(1.0)),
            Literal::Scalar(Scalar::Complex(0.0, 1.0)),
        ]);
        assert_eq!(complex.default_dtype(), DType::COMPLEX128);
        let array = grid.to_host_array(DType::UINT16, "obj").unwrap();
        assert_eq!(array.layout().shape(), &[2, 2]);
        let expected: Vec<u8> = [1u16, 2, 3, 4]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        assert_eq!(array.buffer().to_vec().unwrap(), expected);
    }
}
