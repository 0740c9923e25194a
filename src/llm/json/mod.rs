//! Reading JSON into the crate's types, with little code per type.
//!
//! serde's derived readers are large: each struct's is its own copy of the reading loop, with a
//! check for every field given twice and a drop for every field on every way out, around calls
//! into `serde_json` made for that one type. With `serde_json` they were a fifth of the
//! Worker's wasm, and V8 compiles on a request's path all the code that path runs. Here the
//! parsing is done once, by the [`Reader`], which is not generic, and so is the loop over an
//! object's keys ([`Reader::object`]); what a struct adds is its list of keys and, for each
//! field, a call that reads it in place ([`json_struct!`](crate::json_struct); tagged enums are
//! read by hand through a flat struct). Texts are read as `serde_json` reads them, and refused
//! in its words, at its line and column (`tests.rs` checks both over the recorded provider
//! streams and their mutations). Writing JSON stays serde's, which costs far less.

mod impls;
mod read;

pub use read::{Error, Number, Reader, Result};

/// A type read from JSON by the [`Reader`].
pub trait FromJson<'a>: Sized {
    /// Reads one value of the type, the reader left after it.
    fn read(r: &mut Reader<'a>) -> Result<Self>;

    /// What a struct's field of this type is when its key is missing: nothing, so an error,
    /// except for an `Option`, which is `None` (as with serde).
    fn missing() -> Option<Self> {
        None
    }

    /// Reads a struct's field into its place: one copy of the moving and dropping for each
    /// field type, rather than one in every struct.
    #[inline(never)]
    fn read_into(r: &mut Reader<'a>, place: &mut Option<Self>) -> Result<()> {
        *place = Some(Self::read(r)?);
        Ok(())
    }
}

/// A type read from JSON that borrows nothing from the text.
pub trait FromJsonOwned: for<'a> FromJson<'a> {}
impl<T: for<'a> FromJson<'a>> FromJsonOwned for T {}

/// Reads a whole text as one `T`; the error says what and where.
/// A field read only when it is a string, skipped otherwise (`default_with(string_or_skip)`):
/// for what a peer may send in any shape and a reader can do without, such as an answer's id
/// kept for traces, so that an odd value never fails the message around it.
pub fn string_or_skip<'a, T: FromJson<'a>>(r: &mut Reader<'a>) -> Result<Option<T>> {
    if r.peek_kind()? == b'"' {
        T::read(r).map(Some)
    } else {
        r.skip().map(|_| None)
    }
}

pub fn read<'a, T: FromJson<'a>>(text: &'a str) -> Result<T> {
    let mut reader = Reader::new(text);
    let value = T::read(&mut reader)?;
    reader.end()?;
    Ok(value)
}

/// [`read`], for the callers that report `serde_json`'s errors: the same message, and where.
pub fn from_str<'a, T: FromJson<'a>>(text: &'a str) -> serde_json::Result<T> {
    read(text).map_err(serde_json::Error::from)
}

/// [`FromJson`] for a struct with named fields, from the JSON key of each:
///
/// ```ignore
/// json_struct!(Conversation {
///     "id" => id,                               // required: missing is an error
///     "title" => title,                         // an Option: missing or null is None
///     "metadata" => metadata: default_with(json_column), // missing: Default; read by json_column
///     "max" => max: default_to(ten),            // missing: ten()
///     "kind" | "type" => kind,                  // two keys for one field
/// });
/// ```
///
/// `with(f)` reads a required field by `f(reader)`. `#[deny_unknown_fields]` before the name
/// makes an unknown key an error, as serde's attribute of that name does. A key given twice
/// keeps its last value, as `JSON.parse` does (serde rejects it).
#[macro_export]
macro_rules! json_struct {
    ($(#[$strict:ident])? $ty:ident <$lt:lifetime> { $($body:tt)* }) => {
        $crate::json_struct!(@impl [$lt] [$ty<$lt>] $ty [$($strict)?] { $($body)* });
    };
    ($(#[$strict:ident])? $ty:ident { $($body:tt)* }) => {
        $crate::json_struct!(@impl ['de] [$ty] $ty [$($strict)?] { $($body)* });
    };
    (@impl [$lt:lifetime] [$self_ty:ty] $name:ident [$($strict:ident)?] { $($body:tt)* }) => {
        impl<$lt> $crate::llm::json::FromJson<$lt> for $self_ty {
            fn read(r: &mut $crate::llm::json::Reader<$lt>) -> $crate::llm::json::Result<Self> {
                Ok($crate::json_fields!(
                    r,
                    concat!("struct ", stringify!($name)),
                    $(#[$strict])? Self { $($body)* }
                ))
            }
        }
    };
    (@read $r:ident $field:ident) => {
        $crate::llm::json::FromJson::read_into($r, &mut $field)?
    };
    (@read $r:ident $field:ident default) => {
        $crate::llm::json::FromJson::read_into($r, &mut $field)?
    };
    (@read $r:ident $field:ident default_to($arg:expr)) => {
        $crate::llm::json::FromJson::read_into($r, &mut $field)?
    };
    (@read $r:ident $field:ident with($f:expr)) => { $field = Some($f($r)?) };
    (@read $r:ident $field:ident default_with($f:expr)) => { $field = Some($f($r)?) };
    (@finish $field:ident) => { $field.or_else($crate::llm::json::FromJson::missing) };
    (@finish $field:ident with($f:expr)) => { $field };
    (@finish $field:ident default) => { Some($field.unwrap_or_default()) };
    (@finish $field:ident default_with($f:expr)) => { Some($field.unwrap_or_default()) };
    (@finish $field:ident default_to($arg:expr)) => { Some($field.unwrap_or_else($arg)) };
    (@known [] [$($key:literal),*]) => { None };
    (@known [deny_unknown_fields] [$($key:literal),*]) => { Some(&[$($key),*]) };
}

/// Reads an object's fields, as [`json_struct!`](crate::json_struct) lists them, into a braced
/// constructor: a struct's (`Self`) or an enum variant's, whose fields are read in place rather
/// than through a struct of their own. `expected` names it in an error. For use in a function
/// returning [`Result`]: an error returns from it.
#[macro_export]
macro_rules! json_fields {
    ($r:ident, $expected:expr, $(#[$strict:ident])? $ctor:path {
        $($key:literal $(| $alias:literal)* => $field:ident $(: $mode:ident $(($arg:expr))?)?),* $(,)?
    }) => {{
        // Each field's number: its place in the list.
        #[allow(non_camel_case_types, dead_code, clippy::enum_variant_names)]
        enum Field { $($field),* }
        $(let mut $field = None;)*
        // The fields are read in a closure and checked after it, so that an error on the way
        // leaves by one path (a way out drops every field read so far).
        $r.object(
            $expected,
            &[$(($key, Field::$field as u8) $(, ($alias, Field::$field as u8))*),*],
            $crate::json_struct!(@known [$($strict)?] [$($key),*]),
            #[allow(unused_variables, unreachable_code)]
            &mut |r, n| {
                $(if n == Field::$field as u8 {
                    $crate::json_struct!(@read r $field $($mode $(($arg))?)?);
                    return Ok(());
                })*
                Ok(())
            },
        )?;
        $(let Some($field) = $crate::json_struct!(@finish $field $($mode $(($arg))?)?) else {
            return Err($r.missing($key));
        };)*
        $ctor { $($field),* }
    }};
}

/// [`FromJson`] for an enum of unit variants written as strings:
/// `json_enum!(Role { "user" => User, "assistant" => Assistant })`.
#[macro_export]
macro_rules! json_enum {
    ($ty:ident { $($key:literal => $variant:ident),* $(,)? }) => {
        impl<'de> $crate::llm::json::FromJson<'de> for $ty {
            fn read(r: &mut $crate::llm::json::Reader<'de>) -> $crate::llm::json::Result<Self> {
                let name = r.string()?;
                Ok(match &*name {
                    $($key => $ty::$variant,)*
                    other => return Err(r.unknown_name("variant", other, &[$($key),*])),
                })
            }
        }
    };
}

#[cfg(test)]
mod tests;
