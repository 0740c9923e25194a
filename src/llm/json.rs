//! Reading JSON into the crate's types: `serde_json`, except that a struct is read only from a
//! JSON object.
//!
//! `serde_json` also accepts an array for a struct (`["a", 1]` for `{name, n}`), so every derived
//! struct carries a second reader, by position, for each of its fields. No input of ours is
//! meant to be such an array, and those readers were about 4% of the Worker's wasm. Reading
//! through [`Strict`] asks for a map wherever a struct is wanted, so they are never compiled.
//! Everything else, errors (with their line and column) included, is `serde_json`'s own.
//!
//! Every reader in the crate goes through [`from_str`]: a type read both here and by
//! `serde_json::from_str` directly would be compiled twice.

use serde::de::{
    self, Deserialize, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess,
    VariantAccess, Visitor,
};

/// `serde_json::from_str`, reading structs only from objects.
pub fn from_str<'a, T: Deserialize<'a>>(text: &'a str) -> serde_json::Result<T> {
    let mut reader = serde_json::Deserializer::from_str(text);
    let value = T::deserialize(Strict(&mut reader))?;
    reader.end()?;
    Ok(value)
}

/// A deserializer that hands everything to the one it wraps, wrapping whatever that gives back
/// (visitors, maps, sequences, enums), and reads a struct as a map.
pub struct Strict<D>(pub D);

/// A visitor whose nested deserializers and accessors are wrapped in turn.
struct Wrap<V>(V);

/// A seed that deserializes through [`Strict`].
struct Seed<S>(S);

/// A struct variant's fields, read as a map.
struct StructSeed<V>(V);

macro_rules! forward_deserialize {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
            self.0.$method(Wrap(visitor))
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Strict<D> {
    type Error = D::Error;

    forward_deserialize! {
        deserialize_any deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32
        deserialize_i64 deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32
        deserialize_u64 deserialize_u128 deserialize_f32 deserialize_f64 deserialize_char
        deserialize_str deserialize_string deserialize_bytes deserialize_byte_buf
        deserialize_option deserialize_unit deserialize_seq deserialize_map
        deserialize_identifier deserialize_ignored_any
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_unit_struct(name, Wrap(visitor))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_newtype_struct(name, Wrap(visitor))
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_tuple(len, Wrap(visitor))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_tuple_struct(name, len, Wrap(visitor))
    }

    /// The point of the wrapper: a struct is a map, never a sequence.
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_map(Wrap(visitor))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_enum(name, variants, Wrap(visitor))
    }

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

macro_rules! forward_visit {
    ($($method:ident: $ty:ty)*) => {$(
        fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
            self.0.$method(v)
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Wrap<V> {
    type Value = V::Value;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        self.0.expecting(formatter)
    }

    forward_visit! {
        visit_bool: bool visit_i8: i8 visit_i16: i16 visit_i32: i32 visit_i64: i64
        visit_i128: i128 visit_u8: u8 visit_u16: u16 visit_u32: u32 visit_u64: u64
        visit_u128: u128 visit_f32: f32 visit_f64: f64 visit_char: char visit_str: &str
        visit_borrowed_str: &'de str visit_string: String visit_bytes: &[u8]
        visit_borrowed_bytes: &'de [u8] visit_byte_buf: Vec<u8>
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.0.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.0.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.0.visit_some(Strict(d))
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.0.visit_newtype_struct(Strict(d))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.0.visit_seq(Wrap(seq))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.0.visit_map(Wrap(map))
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.0.visit_enum(Wrap(data))
    }
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Wrap<A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        self.0.next_element_seed(Seed(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Wrap<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.0.next_key_seed(Seed(seed))
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, A::Error> {
        self.0.next_value_seed(Seed(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

impl<'de, A: EnumAccess<'de>> EnumAccess<'de> for Wrap<A> {
    type Error = A::Error;
    type Variant = Wrap<A::Variant>;

    fn variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<(T::Value, Self::Variant), A::Error> {
        let (value, variant) = self.0.variant_seed(Seed(seed))?;
        Ok((value, Wrap(variant)))
    }
}

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for Wrap<A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.0.unit_variant()
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, A::Error> {
        self.0.newtype_variant_seed(Seed(seed))
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        self.0.tuple_variant(len, Wrap(visitor))
    }

    /// `serde_json` reads a struct variant's fields with `deserialize_struct`; reading them as
    /// the variant's one value, a map, is the same for JSON and keeps the by-position reader out.
    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        self.0.newtype_variant_seed(StructSeed(visitor))
    }
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Seed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(Strict(d))
    }
}

impl<'de, V: Visitor<'de>> DeserializeSeed<'de> for StructSeed<V> {
    type Value = V::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        d.deserialize_map(Wrap(self.0))
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, PartialEq, Deserialize)]
    struct Entry {
        name: String,
        #[serde(default)]
        tags: Vec<String>,
        inner: Option<Inner>,
    }

    #[derive(Debug, PartialEq, Deserialize)]
    struct Inner {
        n: u32,
    }

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Shape {
        Dot,
        Circle(u32),
        Rect { w: u32, h: u32 },
    }

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    enum Tagged {
        Text { text: String },
    }

    #[test]
    fn objects_read_as_serde_json_reads_them() {
        let entry: Entry =
            super::from_str(r#"{"name": "a", "tags": ["x"], "inner": {"n": 2}}"#).unwrap();
        assert_eq!(
            entry,
            Entry {
                name: "a".into(),
                tags: vec!["x".into()],
                inner: Some(Inner { n: 2 })
            }
        );
        let shapes: Vec<Shape> =
            super::from_str(r#"["dot", {"circle": 3}, {"rect": {"w": 1, "h": 2}}]"#).unwrap();
        assert_eq!(
            shapes,
            [Shape::Dot, Shape::Circle(3), Shape::Rect { w: 1, h: 2 }]
        );
        let tagged: Tagged = super::from_str(r#"{"type": "text", "text": "hi"}"#).unwrap();
        assert_eq!(tagged, Tagged::Text { text: "hi".into() });
        let value: serde_json::Value = super::from_str(r#"{"a": [1, {"b": null}]}"#).unwrap();
        assert_eq!(value, json!({"a": [1, {"b": null}]}));
    }

    #[test]
    fn a_struct_is_not_read_from_an_array_and_errors_keep_their_position() {
        assert!(serde_json::from_str::<Inner>("[2]").is_ok());
        let e = super::from_str::<Inner>("[2]").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid type: sequence, expected struct Inner at line 1 column 0"
        );
        let e = super::from_str::<Entry>(r#"{"name": "a", "inner": [2]}"#).unwrap_err();
        assert!(e.to_string().starts_with("invalid type: sequence"), "{e}");
        let e = super::from_str::<Shape>(r#"{"rect": [1, 2]}"#).unwrap_err();
        assert!(e.to_string().starts_with("invalid type: sequence"), "{e}");
        let e = super::from_str::<Entry>("{\n \"name\": 3}").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid type: integer `3`, expected a string at line 2 column 10"
        );
        assert!(super::from_str::<Inner>(r#"{"n": 1} x"#).is_err());
    }
}
