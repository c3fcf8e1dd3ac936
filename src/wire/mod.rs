//! Wire layer: the bytes of MCP 2026-07-28 as plain types and pure functions.
//!
//! Nothing here knows about stores, keys, sockets or the simulator. Every function is total: any input
//! (hostile, truncated, deeply nested, huge) yields a value or a typed error, never a panic.

pub mod canonical;
pub mod errors;
pub mod headers;
pub mod jsonrpc;
pub mod meta;
pub mod result;

pub use errors::{Reason, RpcError};
pub use jsonrpc::RequestId;

/// A JSON object of these members, each moved in. `serde_json::json!` copies an embedded `Value` by
/// serializing it into a new tree; the answers and requests of every flow nest whole trees (a result in its
/// response, a form in its result), and those copies were a tenth of a simulated flow's CPU time.
/// Members are inserted one by one (a later duplicate key wins, as when collected): collecting a map gathers
/// the members in a vector and sorts it first, which costs more for these few members.
pub(crate) fn object<const N: usize>(members: [(&str, serde_json::Value); N]) -> serde_json::Value {
    let mut object = serde_json::Map::new();
    for (key, value) in members {
        object.insert(key.to_string(), value);
    }
    serde_json::Value::Object(object)
}

/// The one protocol revision this crate speaks.
pub(crate) const PROTOCOL_VERSION: &str = "2026-07-28";

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn an_object_holds_its_members_by_key_whatever_their_order_and_the_last_of_a_duplicate() {
        let object = super::object([("z", json!(1)), ("a", json!({"nested": [true]})), ("m", json!(null))]);
        assert_eq!(object, json!({"a": {"nested": [true]}, "m": null, "z": 1}));
        assert_eq!(serde_json::to_string(&object).unwrap(), r#"{"a":{"nested":[true]},"m":null,"z":1}"#);
        assert_eq!(super::object([("k", json!(1)), ("k", json!(2))]), json!({"k": 2}));
        assert_eq!(super::object([]), json!({}));
    }
}
