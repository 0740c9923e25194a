//! The reader against `serde_json`: the same values from the same texts, the same texts refused,
//! the same words in the errors.

use std::borrow::Cow;

use serde_json::Value;

use super::{from_str, read, FromJson};

#[derive(Debug, PartialEq, Default)]
struct Entry {
    name: String,
    tags: Vec<String>,
    inner: Option<Inner>,
    limit: u32,
}

fn seven() -> u32 {
    7
}

crate::json_struct!(Entry {
    "name" | "title" => name,
    "tags" => tags: default,
    "inner" => inner,
    "limit" => limit: default_to(seven),
});

#[derive(Debug, PartialEq)]
struct Inner {
    n: u32,
}

crate::json_struct!(#[deny_unknown_fields] Inner { "n" => n });

#[derive(Debug, PartialEq)]
struct Borrowed<'a> {
    text: Cow<'a, str>,
    plain: &'a str,
}

crate::json_struct!(Borrowed<'a> { "text" => text, "plain" => plain });

#[derive(Debug, PartialEq)]
enum Role {
    User,
    Assistant,
}

crate::json_enum!(Role { "user" => User, "assistant" => Assistant });

#[test]
fn structs_read_with_serde_s_rules_for_missing_fields() {
    let entry: Entry =
        read(r#"{"name": "a", "tags": ["x"], "inner": {"n": 2}, "extra": [1, {"b": null}]}"#)
            .unwrap();
    assert_eq!(
        entry,
        Entry {
            name: "a".into(),
            tags: vec!["x".into()],
            inner: Some(Inner { n: 2 }),
            limit: 7,
        }
    );
    // An Option missing or null is None; a default field missing is its default; an alias.
    let entry: Entry = read(r#"{"title": "b", "inner": null, "limit": 3}"#).unwrap();
    assert_eq!(
        (entry.name.as_str(), entry.inner, entry.limit),
        ("b", None, 3)
    );
    let e = read::<Entry>(r#"{"tags": []}"#).unwrap_err();
    assert_eq!(e.to_string(), "missing field `name` at line 1 column 11");
    let e = read::<Entry>(r#"{"name": "a", "inner": {"n": 1, "m": 2}}"#).unwrap_err();
    assert_eq!(
        e.to_string(),
        "unknown field `m`, expected `n` at line 1 column 34"
    );
}

#[test]
fn strings_borrow_unless_escaped() {
    let b: Borrowed = read(r#"{"text": "a\nb", "plain": "c"}"#).unwrap();
    assert!(matches!(b.text, Cow::Owned(_)));
    assert_eq!((&*b.text, b.plain), ("a\nb", "c"));
    let b: Borrowed = read(r#"{"text": "ab", "plain": "c"}"#).unwrap();
    assert!(matches!(b.text, Cow::Borrowed("ab")));
    let e = read::<Borrowed>(r#"{"text": "", "plain": "\t"}"#).unwrap_err();
    assert!(e.to_string().contains("expected a borrowed string"), "{e}");
}

#[test]
fn enums_name_the_variants_they_know() {
    assert_eq!(
        read::<Vec<Role>>(r#"["user","assistant"]"#).unwrap(),
        [Role::User, Role::Assistant]
    );
    let e = read::<Role>(r#""system""#).unwrap_err();
    assert_eq!(
        e.to_string(),
        "unknown variant `system`, expected `user` or `assistant` at line 1 column 8"
    );
}

/// Texts `serde_json` reads as a `Value`: ours reads the same `Value`.
const VALID: &[&str] = &[
    r#"{"a": [1, -2, 3.5, -0.25e3, 1E2, 18446744073709551615, -9223372036854775808], "b": null}"#,
    r#"[true, false, null, "", "\"\\\/\b\f\n\r\t", "\u00e9\ud83d\ude00", "é😀"]"#,
    " \n\t{ } ",
    "[[[[[]]]], {}]",
    "0",
    "-0",
    "1e400000000000000000000",
    "123456789012345678901234567890",
    r#"{"dup": 1, "dup": 2}"#,
    r#""\u0000""#,
];

/// Texts `serde_json` refuses: ours refuses them too.
const INVALID: &[&str] = &[
    "",
    " ",
    "{",
    "[",
    "[1,]",
    "{\"a\":1,}",
    "{\"a\" 1}",
    "{1: 2}",
    "[1 2]",
    "01",
    "1.",
    ".5",
    "1e",
    "-",
    "+1",
    "tru",
    "nul",
    "\"abc",
    "\"\\x\"",
    "\"\\u12\"",
    "\"\\ud800\"",
    "\"\\udc00\"",
    "\"a\u{1}b\"",
    "[1] x",
    "{\"a\":}",
    "[,1]",
    "{,}",
    "NaN",
    "[\"a\",]",
];

#[test]
fn values_read_as_serde_json_reads_them() {
    for text in VALID {
        let ours = read::<Value>(text);
        match serde_json::from_str::<Value>(text) {
            Ok(theirs) => assert_eq!(ours.unwrap(), theirs, "{text}"),
            // serde_json refuses a number too large for f64; so do we, in its words.
            Err(e) => assert!(
                ours.unwrap_err()
                    .to_string()
                    .starts_with("number out of range")
                    && e.to_string().starts_with("number out of range"),
                "{text}"
            ),
        }
    }
    for text in INVALID {
        assert!(serde_json::from_str::<Value>(text).is_err(), "{text}");
        assert!(read::<Value>(text).is_err(), "{text}");
    }
    let deep = "[".repeat(200) + &"]".repeat(200);
    assert!(read::<Value>(&deep)
        .unwrap_err()
        .to_string()
        .starts_with("recursion limit exceeded"));
}

#[test]
fn errors_say_what_serde_json_says_where_it_says_it() {
    fn both<T: for<'a> FromJson<'a> + serde::de::DeserializeOwned + std::fmt::Debug>(text: &str) {
        let ours = read::<T>(text).unwrap_err().to_string();
        let theirs = serde_json::from_str::<T>(text).unwrap_err().to_string();
        assert_eq!(ours, theirs, "{text}");
    }
    both::<String>("3");
    both::<String>("\n [1]");
    both::<u32>("-1");
    both::<u32>("4294967296");
    both::<u8>("1.5");
    both::<i64>("\"7\"");
    both::<bool>("null");
    both::<Vec<u32>>("[1, true]");
    both::<Vec<u32>>("{}");
    both::<Value>("[1,]");
    both::<Value>("{\"a\" 1}");
    both::<Value>("\"abc");
    both::<Value>("[1] x");
    both::<Value>("tru");
    both::<Value>("{1: 2}");
    both::<Value>("01");
    let e = read::<Entry>("{\n \"name\": 3}").unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid type: integer `3`, expected a string at line 2 column 10"
    );
    assert_eq!((e.line(), e.column()), (2, 10));
    // A struct is read only from an object.
    let e = read::<Inner>("[2]").unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid type: sequence, expected struct Inner at line 1 column 0"
    );
    // The callers that report serde_json's errors get the same text.
    let e = from_str::<Inner>("[2]").unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid type: sequence, expected struct Inner at line 1 column 0"
    );
}

/// Every JSON document of the recorded provider streams, and texts made from each by cutting it
/// short or by putting a JSON-significant byte in place of one of its bytes: each is read as
/// `serde_json` reads it (the same value), or refused as it refuses it (in the same words, at
/// the same line and column).
#[test]
fn recorded_documents_and_their_mutations_read_as_serde_json_reads_them() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
    let mut documents = Vec::new();
    for provider in std::fs::read_dir(dir).unwrap() {
        let provider = provider.unwrap().path();
        if !provider.is_dir() {
            continue;
        }
        for file in std::fs::read_dir(provider).unwrap() {
            let text = std::fs::read_to_string(file.unwrap().path()).unwrap();
            for line in text.lines() {
                let line = line.strip_prefix("data:").unwrap_or(line).trim();
                if line.starts_with('{') && serde_json::from_str::<Value>(line).is_ok() {
                    documents.push(line.to_string());
                }
            }
        }
    }
    assert!(documents.len() > 50, "{} documents", documents.len());
    let mut checked = 0;
    let mut check = |text: &str| {
        checked += 1;
        match (read::<Value>(text), serde_json::from_str::<Value>(text)) {
            (Ok(ours), Ok(theirs)) => assert_eq!(ours, theirs, "{text}"),
            (Err(ours), Err(theirs)) => assert_eq!(ours.to_string(), theirs.to_string(), "{text}"),
            (ours, theirs) => panic!("{text}: ours {ours:?}, serde_json's {theirs:?}"),
        }
    };
    for doc in &documents {
        check(doc);
        let step = (doc.len() / 60).max(1);
        for at in (0..doc.len())
            .step_by(step)
            .filter(|&at| doc.is_char_boundary(at))
        {
            check(&doc[..at]);
            let rest = doc[at..].chars().next().map_or(0, char::len_utf8);
            for byte in [
                "\"", "\\", ",", "}", "]", ":", "0", "-", " ", "x", "\u{1}", "{", "[",
            ] {
                check(&format!("{}{byte}{}", &doc[..at], &doc[at + rest..]));
            }
        }
    }
    assert!(checked > 10_000, "{checked}");
}
