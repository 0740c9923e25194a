//! Reading one setting: the environment as a lookup of names, and the parsers every setting
//! shares (a flag, a ratio, a bounded number, a URL), each failing with the setting's name.

use crate::edge::error::ApiError;
use crate::llm::error::decimal;

/// Reads one variable; empty values count as unset.
pub(crate) type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

pub(crate) fn flag(get: Lookup, name: &str) -> Result<bool, ApiError> {
    match get(name).as_deref().map(str::trim) {
        None => Ok(false),
        Some("true" | "1" | "yes") => Ok(true),
        Some("false" | "0" | "no") => Ok(false),
        Some(other) => Err(ApiError::config(
            name,
            format!("`{other}` is not true or false"),
        )),
    }
}

pub(crate) fn ratio(get: Lookup, name: &str, default: f64) -> Result<f64, ApiError> {
    let Some(raw) = get(name) else {
        return Ok(default);
    };
    match decimal(&raw) {
        Some(r) if r > 0.0 && r <= 1.0 => Ok(r),
        _ => Err(ApiError::config(
            name,
            format!("`{raw}` is not a number above 0 and at most 1"),
        )),
    }
}

pub(crate) fn number<T: std::str::FromStr + PartialOrd + std::fmt::Display>(
    get: Lookup,
    name: &str,
    default: T,
    range: std::ops::RangeInclusive<T>,
) -> Result<T, ApiError> {
    let Some(raw) = get(name) else {
        return Ok(default);
    };
    match raw.trim().parse::<T>() {
        Ok(n) if range.contains(&n) => Ok(n),
        _ => Err(ApiError::config(
            name,
            format!(
                "`{raw}` is not a whole number from {} to {}",
                range.start(),
                range.end()
            ),
        )),
    }
}

pub(crate) fn url(get: Lookup, name: &str) -> Result<Option<String>, ApiError> {
    match get(name) {
        Some(v) if v.starts_with("http://") || v.starts_with("https://") => Ok(Some(v)),
        Some(v) => Err(ApiError::config(
            name,
            format!("`{v}` is not an http(s) URL"),
        )),
        None => Ok(None),
    }
}
