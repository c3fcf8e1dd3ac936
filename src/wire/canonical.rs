//! Canonical JSON (sorted keys, compact separators) and SHA-256 digests over it.
//!
//! `serde_json::Value` objects are `BTreeMap`s in this crate (the `preserve_order` feature is off), so plain
//! compact serialization already sorts keys at every depth: two values that differ only in key order have
//! identical canonical bytes.

use serde_json::Value;
use sha2::{Digest, Sha256};

pub(crate) fn canonical_bytes(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).expect("serializing a serde_json::Value cannot fail")
}

/// A message's bytes: the `exact` ones when it has them, else the compact serialization of its `value` (a
/// message a client built), made here, where something reads them; none when it has neither.
pub(crate) fn exact_or_compact<'a>(exact: Option<&'a [u8]>, value: Option<&Value>) -> std::borrow::Cow<'a, [u8]> {
    match (exact, value) {
        (Some(bytes), _) => std::borrow::Cow::Borrowed(bytes),
        (None, Some(value)) => std::borrow::Cow::Owned(canonical_bytes(value)),
        (None, None) => std::borrow::Cow::Borrowed(&[]),
    }
}

/// [`canonical_bytes`] of the object holding `members`, without building that object.
pub(crate) fn canonical_object_bytes(members: &serde_json::Map<String, Value>) -> Vec<u8> {
    serde_json::to_vec(members).expect("serializing a serde_json::Map cannot fail")
}

/// How many bytes [`canonical_bytes`] would make of `value`, without making them (serialized into a counter).
pub(crate) fn canonical_len(value: &Value) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    serde_json::to_writer(&mut counter, value).expect("serializing a serde_json::Value cannot fail");
    counter.0
}

/// A bound on [`canonical_len`] that reads only the sizes of the value's parts, never formats anything: a
/// string of `n` bytes takes at most `2 + 6n` (every byte a `\u00XX` escape), a number at most 24 characters
/// (ryu's longest `f64`; an `i64` or `u64` takes at most 20).
pub(crate) fn canonical_len_bound(value: &Value) -> usize {
    const NUMBER_CHARS_MAX: usize = 24;
    let string = |text: &str| 2 + 6 * text.len();
    match value {
        Value::Null => 4,
        Value::Bool(_) => 5,
        Value::Number(_) => NUMBER_CHARS_MAX,
        Value::String(text) => string(text),
        // Brackets, and one comma fewer than items.
        Value::Array(items) => 2 + items.len().saturating_sub(1) + items.iter().map(canonical_len_bound).sum::<usize>(),
        // Braces, commas, and a colon per member.
        Value::Object(members) => {
            2 + members.len().saturating_sub(1)
                + members.iter().map(|(key, value)| string(key) + 1 + canonical_len_bound(value)).sum::<usize>()
        }
    }
}

pub(crate) fn canonical_string(value: &Value) -> String {
    String::from_utf8(canonical_bytes(value)).expect("serde_json emits UTF-8")
}

/// Lower-case hex SHA-256 of the canonical bytes.
pub fn digest_hex(value: &Value) -> String {
    hex(&Sha256::digest(canonical_bytes(value)))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(DIGITS[(byte >> 4) as usize] as char);
        out.push(DIGITS[(byte & 0xf) as usize] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_order_does_not_change_the_digest() {
        let a: Value = serde_json::from_str(r#"{"b":1,"a":{"y":[1,2],"x":"s"}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":{"x":"s","y":[1,2]},"b":1}"#).unwrap();
        assert_eq!(canonical_string(&a), r#"{"a":{"x":"s","y":[1,2]},"b":1}"#);
        assert_eq!(digest_hex(&a), digest_hex(&b));
    }

    #[test]
    fn an_object_is_the_same_bytes_as_its_members() {
        let value = serde_json::json!({"b": [1, {"z": null, "a": "é\u{1}"}], "a": true});
        assert_eq!(canonical_object_bytes(value.as_object().unwrap()), canonical_bytes(&value));
    }

    #[test]
    fn the_length_is_that_of_the_bytes() {
        for text in [r#"{}"#, r#"{"b":"\u0001é\"\\","a":[1.5,-2,null,true,{"x":"\ud83d\ude00"}]}"#, r#""text""#, "[]"] {
            let value: Value = serde_json::from_str(text).unwrap();
            assert_eq!(canonical_len(&value), canonical_bytes(&value).len(), "{text}");
        }
    }

    proptest::proptest! {
        /// The bound is never below the length, whatever the value (escapes, numbers at their longest).
        #[test]
        fn the_bound_is_never_below_the_length(value in arbitrary_json()) {
            proptest::prop_assert!(canonical_len_bound(&value) >= canonical_len(&value));
        }
    }

    fn arbitrary_json() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
            "[\\u{0}-\\u{1f}\"\\\\a-zé😀]{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::btree_map("[\\u{0}-\\u{1f}\"a-z]{0,6}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    #[test]
    fn digest_is_pinned() {
        // Golden value: a change here silently invalidates every pin and every sealed state.
        assert_eq!(digest_hex(&serde_json::json!({})), "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a");
    }
}
