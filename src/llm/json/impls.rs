//! [`FromJson`] for the standard types the crate's types are made of, and for `serde_json`'s
//! `Value` (tool arguments, metadata: JSON kept as JSON).

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::read::{Number, Reader, Result};
use super::FromJson;

impl<'a> FromJson<'a> for String {
    #[inline(never)]
    fn read(r: &mut Reader<'a>) -> Result<Self> {
        r.string().map(Cow::into_owned)
    }
}

impl<'a> FromJson<'a> for Cow<'a, str> {
    #[inline(never)]
    fn read(r: &mut Reader<'a>) -> Result<Self> {
        r.string()
    }
}

/// Only a string without escapes can be borrowed, as with serde.
impl<'a> FromJson<'a> for &'a str {
    #[inline(never)]
    fn read(r: &mut Reader<'a>) -> Result<Self> {
        match r.string()? {
            Cow::Borrowed(s) => Ok(s),
            Cow::Owned(s) => Err(r.error(format_args!(
                "invalid type: string {s:?}, expected a borrowed string"
            ))),
        }
    }
}

impl<'a> FromJson<'a> for bool {
    #[inline(never)]
    fn read(r: &mut Reader<'a>) -> Result<Self> {
        r.bool()
    }
}

/// Integers, read as serde reads them: a float or a number out of range is an error.
fn integer(r: &mut Reader<'_>, expected: &str, min: i128, max: i128) -> Result<i128> {
    if !r.peek_number() {
        return Err(r.invalid_type(expected));
    }
    let n = match r.number()? {
        Number::Unsigned(n) => i128::from(n),
        Number::Negative(n) => i128::from(n),
        float @ Number::Float(_) => {
            return Err(r.error(format_args!("invalid type: {float}, expected {expected}")))
        }
    };
    if n < min || n > max {
        return Err(r.error(format_args!(
            "invalid value: integer `{n}`, expected {expected}"
        )));
    }
    Ok(n)
}

macro_rules! integers {
    ($($ty:ty),*) => {$(
        impl<'a> FromJson<'a> for $ty {
            #[inline(never)]
            fn read(r: &mut Reader<'a>) -> Result<Self> {
                let n = integer(r, stringify!($ty), <$ty>::MIN as i128, <$ty>::MAX as i128)?;
                // In range: checked just above.
                Ok(n as $ty)
            }
        }
    )*};
}

integers!(u8, u16, u32, u64, usize, i8, i16, i32, i64);

impl<'a> FromJson<'a> for f64 {
    #[inline(never)]
    fn read(r: &mut Reader<'a>) -> Result<Self> {
        if !r.peek_number() {
            return Err(r.invalid_type("f64"));
        }
        Ok(match r.number()? {
            Number::Unsigned(n) => n as f64,
            Number::Negative(n) => n as f64,
            Number::Float(n) => n,
        })
    }
}

/// `null` is `None`; a missing field is `None` too (see `json_struct!`).
impl<'a, T: FromJson<'a>> FromJson<'a> for Option<T> {
    #[inline(never)]
    fn read(r: &mut Reader<'a>) -> Result<Self> {
        if r.null()? {
            return Ok(None);
        }
        T::read(r).map(Some)
    }

    fn missing() -> Option<Self> {
        Some(None)
    }
}

impl<'a, T: FromJson<'a>> FromJson<'a> for Vec<T> {
    #[inline(never)]
    fn read(r: &mut Reader<'a>) -> Result<Self> {
        r.begin_array("a sequence")?;
        let mut list = Vec::new();
        while r.next_element()? {
            list.push(T::read(r)?);
        }
        Ok(list)
    }
}

impl<'a> FromJson<'a> for Value {
    #[inline(never)]
    fn read(r: &mut Reader<'a>) -> Result<Self> {
        Ok(match r.peek_kind()? {
            b'{' => Value::Object(Map::read(r)?),
            b'[' => Value::Array(Vec::read(r)?),
            b'"' => Value::String(String::read(r)?),
            b't' | b'f' => Value::Bool(r.bool()?),
            b'n' => {
                r.null()?;
                Value::Null
            }
            _ => Value::Number(match r.number()? {
                Number::Unsigned(n) => n.into(),
                Number::Negative(n) => n.into(),
                // Finite: the reader accepts no other.
                Number::Float(n) => serde_json::Number::from_f64(n).unwrap_or_else(|| 0.into()),
            }),
        })
    }
}

impl<'a> FromJson<'a> for Map<String, Value> {
    #[inline(never)]
    fn read(r: &mut Reader<'a>) -> Result<Self> {
        r.begin_object("a map")?;
        let mut map = Map::new();
        while let Some(key) = r.next_key()? {
            let value = Value::read(r)?;
            map.insert(key.into_owned(), value);
        }
        Ok(map)
    }
}
