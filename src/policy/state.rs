//! `requestState` sealing and opening: HMAC-SHA256 over a base64url JSON payload, with a key id.
//!
//! Token form: `s1.<key id>.<payload, base64url>.<tag, base64url>`, tag = `HMAC-SHA256(key, "s1.<key id>.<payload>")`.
//! The tag is checked (in constant time, by `hmac`'s `verify_slice`) before the payload is even decoded,
//! so a forged payload is never parsed. Keys rotate: the ring signs with one key and verifies with every key
//! it still holds; retiring a key makes the states it signed fail closed.
//!
//! The payload binds the state to the authenticated principal, the method, the tool, a digest of the
//! canonical arguments, the candidate ids shown to the user and the phase; it expires (`expiresAt <= now` is
//! expired) and carries a one-time nonce that the shared replay store consumes.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::collections::BTreeMap;

type HmacSha256 = Hmac<Sha256>;

const FORMAT: &str = "s1";
/// Prefixes the bytes an arguments digest covers, so no digest is ever a valid state tag or the reverse.
const ARGUMENTS_DIGEST_DOMAIN: &[u8] = b"mcpsim arguments digest v1\0";
/// HKDF's salt for keys derived from the ring ([`KeyRing::derive`]): a derived key is never a ring key.
const DERIVED_KEY_SALT: &[u8] = b"mcpsim derived key v1";
/// Longest `requestState` we will look at.
pub const STATE_CHARS_MAX: usize = 8192;
/// How long a sealed state may be answered unless a deployment says otherwise: five minutes, for every server
/// (the notes server, the gateway, the conformance fixture), so a user has time to read a form.
pub const DEFAULT_STATE_TTL_MS: u64 = 300_000;
pub(crate) const KEY_ID_CHARS_MAX: usize = 32;
pub(crate) const KEY_BYTES_MIN: usize = 32;

/// What a sealed state asserts. Field names are the JSON payload's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StateClaims {
    pub principal: String,
    pub method: String,
    pub tool: String,
    /// Lower-case hex HMAC-SHA256 of the canonical `arguments` object under the key that sealed the state
    /// (`KeyRing::arguments_digest`): keyed, so holding a state does not let anyone test guessed arguments
    /// (a title, a query) against it.
    pub arguments_digest: String,
    /// Ids offered to the user in the form; a choice outside this set is refused.
    pub candidates: Vec<String>,
    /// The revision of each candidate as the form showed it (`Note::revision`), in `candidates` order; empty
    /// (and absent from the payload) when no candidate has one, so states of revision-less stores are unchanged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub revisions: Vec<String>,
    /// Which question this state continues (e.g. `delete_choice`).
    pub phase: String,
    pub issued_at_ms: u64,
    pub expires_at_ms: u64,
    /// One-time nonce, base64url; consumed in the shared replay store.
    pub nonce: String,
}

impl StateClaims {
    pub(crate) fn is_expired(&self, now_ms: u64) -> bool {
        self.expires_at_ms <= now_ms
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    #[error("the state is not a well-formed sealed state")]
    Malformed,
    #[error("the state's signature does not verify, or its key is not held by this instance")]
    Signature,
    #[error("the state has expired")]
    Expired,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("a key id is 1 to 32 characters of A-Z a-z 0-9 _ -")]
    Id,
    #[error("a key must be at least 32 bytes")]
    TooShort,
    #[error("the signing key cannot be retired; rotate first")]
    RetiringSigningKey,
    #[error("no key with that id is held")]
    Unknown,
}

/// Signing key plus verify-only keys, by id. `Debug` never prints key bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyRing {
    signing_key_id: String,
    keys: BTreeMap<String, Key>,
}

/// A key and the HMAC state that has absorbed it: each tag starts from a copy of that state instead of
/// hashing the padded key again (two of the four SHA-256 blocks of a state's tag). Compared by key bytes.
#[derive(Clone)]
struct Key {
    bytes: Vec<u8>,
    keyed: HmacSha256,
}

impl Key {
    fn new(bytes: Vec<u8>) -> Key {
        let keyed = HmacSha256::new_from_slice(&bytes).expect("HMAC accepts keys of any length");
        Key { bytes, keyed }
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.bytes == other.bytes
    }
}

impl Eq for Key {}

impl std::fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyRing")
            .field("signing_key_id", &self.signing_key_id)
            .field("key_ids", &self.keys.keys().collect::<Vec<_>>())
            .finish()
    }
}

fn check_key(id: &str, key: &[u8]) -> Result<(), KeyError> {
    if id.is_empty() || id.len() > KEY_ID_CHARS_MAX || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
        return Err(KeyError::Id);
    }
    if key.len() < KEY_BYTES_MIN {
        return Err(KeyError::TooShort);
    }
    Ok(())
}

impl KeyRing {
    pub fn new(signing_key_id: &str, key: Vec<u8>) -> Result<KeyRing, KeyError> {
        check_key(signing_key_id, &key)?;
        Ok(KeyRing { signing_key_id: signing_key_id.to_string(), keys: BTreeMap::from([(signing_key_id.to_string(), Key::new(key))]) })
    }

    /// Adds a key that verifies but does not sign.
    pub(crate) fn add_verify_only(&mut self, id: &str, key: Vec<u8>) -> Result<(), KeyError> {
        check_key(id, &key)?;
        self.keys.insert(id.to_string(), Key::new(key));
        Ok(())
    }

    /// Makes `id` the signing key; the previous signing key stays as verify-only until retired.
    pub fn rotate(&mut self, id: &str, key: Vec<u8>) -> Result<(), KeyError> {
        check_key(id, &key)?;
        self.keys.insert(id.to_string(), Key::new(key));
        self.signing_key_id = id.to_string();
        Ok(())
    }

    /// Forgets a verify-only key: states it signed no longer open anywhere this ring is used.
    pub fn retire(&mut self, id: &str) -> Result<(), KeyError> {
        if id == self.signing_key_id {
            return Err(KeyError::RetiringSigningKey);
        }
        self.keys.remove(id).map(|_| ()).ok_or(KeyError::Unknown)
    }

    pub fn signing_key_id(&self) -> &str {
        &self.signing_key_id
    }

    pub(crate) fn key_ids(&self) -> impl Iterator<Item = &str> {
        self.keys.keys().map(String::as_str)
    }

    fn mac(key: &Key, signed_part: &str) -> HmacSha256 {
        let mut mac = key.keyed.clone();
        mac.update(signed_part.as_bytes());
        mac
    }

    pub fn seal(&self, claims: &StateClaims) -> String {
        self.seal_claims(claims)
    }

    /// The digest of canonical `arguments` bytes a state sealed with key `key_id` carries: HMAC-SHA256 under
    /// that key, domain-separated from state tags. `None` if the ring does not hold the key.
    pub(crate) fn arguments_digest(&self, key_id: &str, arguments: &[u8]) -> Option<String> {
        let mut mac = self.keys.get(key_id)?.keyed.clone();
        mac.update(ARGUMENTS_DIGEST_DOMAIN);
        mac.update(arguments);
        Some(crate::wire::canonical::hex(&mac.finalize().into_bytes()))
    }

    /// A ring for another purpose, derived from this one: the same key ids and the same signing key id, each key
    /// HKDF-SHA256 of the ring's key with a fixed salt and `label` as its info (RFC 5869, one 32-byte block,
    /// written out with `hmac`: extract `PRK = HMAC(salt, key)`, expand `HMAC(PRK, label ‖ 0x01)`). So every
    /// process holding the same ring derives the same keys, a rotation of the ring rotates them (a value the
    /// previous key signed still verifies while that key is in the ring), and the derived ring's tags are
    /// never valid under the ring's own keys, nor under another label's.
    pub fn derive(&self, label: &str) -> KeyRing {
        let derive_one = |key: &Key| {
            let mut extract = HmacSha256::new_from_slice(DERIVED_KEY_SALT).expect("HMAC accepts keys of any length");
            extract.update(&key.bytes);
            let pseudo_random_key = extract.finalize().into_bytes();
            let mut expand = HmacSha256::new_from_slice(&pseudo_random_key).expect("HMAC accepts keys of any length");
            expand.update(label.as_bytes());
            expand.update(&[1]);
            Key::new(expand.finalize().into_bytes().to_vec())
        };
        KeyRing {
            signing_key_id: self.signing_key_id.clone(),
            keys: self.keys.iter().map(|(id, key)| (id.clone(), derive_one(key))).collect(),
        }
    }

    /// HMAC-SHA256 of `parts` (each after its length, so no two lists of parts share their bytes) under the key
    /// `key_id`, base64url; `None` if the ring does not hold that key. For values bound to a sealed one (the
    /// page's CSRF tokens), under the key that sealed it.
    #[cfg_attr(not(feature = "http"), allow(dead_code))] // the out-of-band page's CSRF tokens
    pub(crate) fn tag(&self, key_id: &str, parts: &[&str]) -> Option<String> {
        let mut mac = self.keys.get(key_id)?.keyed.clone();
        for part in parts {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part.as_bytes());
        }
        Some(URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes()))
    }

    /// [`KeyRing::arguments_digest`] under the signing key: what a state sealed now carries.
    pub(crate) fn signing_arguments_digest(&self, arguments: &[u8]) -> String {
        self.arguments_digest(&self.signing_key_id, arguments).expect("the ring holds its signing key")
    }

    /// Seals any claims type in the same token format with the same keys. Each claims type must refuse
    /// the others' payloads (`deny_unknown_fields` and distinct required fields), so a state issued for
    /// one flow never opens as another's.
    pub(crate) fn seal_claims<C: Serialize>(&self, claims: &C) -> String {
        let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(claims).expect("claims serialize"));
        let signed_part = format!("{FORMAT}.{}.{payload}", self.signing_key_id);
        let tag = Self::mac(&self.keys[&self.signing_key_id], &signed_part).finalize().into_bytes();
        format!("{signed_part}.{}", URL_SAFE_NO_PAD.encode(tag))
    }

    /// Verifies the tag, then decodes, then checks expiry. Binding checks are the caller's (see [`StateClaims`]).
    pub fn open(&self, token: &str, now_ms: u64) -> Result<StateClaims, OpenError> {
        let claims = self.verify(token)?;
        if claims.is_expired(now_ms) {
            return Err(OpenError::Expired);
        }
        Ok(claims)
    }

    /// Verifies the tag and decodes, without looking at the clock.
    pub fn verify(&self, token: &str) -> Result<StateClaims, OpenError> {
        self.verify_claims(token)
    }

    /// [`KeyRing::verify`] for any claims type sealed with [`KeyRing::seal_claims`]. Expiry is the caller's.
    pub(crate) fn verify_claims<C: DeserializeOwned>(&self, token: &str) -> Result<C, OpenError> {
        if token.len() > STATE_CHARS_MAX {
            return Err(OpenError::Malformed);
        }
        let mut parts = token.split('.');
        let (Some(format), Some(key_id), Some(payload), Some(tag), None) =
            (parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(OpenError::Malformed);
        };
        if format != FORMAT || key_id.is_empty() || payload.is_empty() {
            return Err(OpenError::Malformed);
        }
        let tag = URL_SAFE_NO_PAD.decode(tag).map_err(|_| OpenError::Malformed)?;
        let key = self.keys.get(key_id).ok_or(OpenError::Signature)?;
        let signed_part = &token[..token.len() - tag_len(token)];
        Self::mac(key, signed_part).verify_slice(&tag).map_err(|_| OpenError::Signature)?;
        let bytes = URL_SAFE_NO_PAD.decode(payload).map_err(|_| OpenError::Malformed)?;
        serde_json::from_slice(&bytes).map_err(|_| OpenError::Malformed)
    }
}

/// A token's claims decoded without verifying its tag: what a server that trusts unsigned state would read.
/// For the zoo's deliberately broken servers only; nothing that decides anything may call it.
pub fn read_unverified(token: &str) -> Option<StateClaims> {
    let payload = token.split('.').nth(2)?;
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()
}

/// The key id a token names (unverified: call after the token has been opened).
pub(crate) fn key_id_of(token: &str) -> Option<&str> {
    token.split('.').nth(1)
}

/// The secret of a key a scenario declares without one (and of a key a fault plan rotates to): derived from
/// its id, so scenarios need no secrets. Only for simulation: real deployments configure random keys. Here,
/// below both the scenario parser and the simulated cluster, so neither imports the other for it.
pub(crate) fn derived_key_secret(id: &str) -> Vec<u8> {
    <Sha256 as sha2::Digest>::digest(format!("mcpsim scenario key {id}").as_bytes()).to_vec()
}

/// Length of `.<tag>` at the end of the token.
fn tag_len(token: &str) -> usize {
    token.len() - token.rfind('.').expect("checked: four parts")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ring() -> KeyRing {
        KeyRing::new("k1", vec![7u8; 32]).unwrap()
    }

    fn claims() -> StateClaims {
        StateClaims {
            principal: "alice".into(),
            method: "tools/call".into(),
            tool: "notes_delete".into(),
            arguments_digest: "ab".repeat(32),
            candidates: vec!["note-3".into(), "note-7".into()],
            revisions: Vec::new(),
            phase: "delete_choice".into(),
            issued_at_ms: 1_000,
            expires_at_ms: 301_000,
            nonce: "bm9uY2Vub25jZW5vbmNl".into(),
        }
    }

    #[test]
    fn arguments_digests_are_keyed_by_the_sealing_key() {
        let mut r = ring();
        let arguments = br#"{"title":"TPS report"}"#;
        let digest = r.signing_arguments_digest(arguments);
        assert_eq!(digest.len(), 64);
        assert_ne!(digest, crate::wire::canonical::hex(&<Sha256 as sha2::Digest>::digest(arguments)), "not the plain SHA-256");
        assert_ne!(digest, r.signing_arguments_digest(br#"{"title":"TPS report 2024"}"#));
        let other = KeyRing::new("k1", vec![8u8; 32]).unwrap();
        assert_ne!(digest, other.signing_arguments_digest(arguments), "another key, another digest");
        r.rotate("k2", vec![9u8; 32]).unwrap();
        assert_eq!(r.arguments_digest("k1", arguments), Some(digest), "an old key still digests its states' arguments");
        assert_eq!(r.arguments_digest("k9", arguments), None);
    }

    #[test]
    fn seal_then_open_round_trips_until_expiry() {
        let token = ring().seal(&claims());
        assert!(token.starts_with("s1.k1."));
        assert_eq!(ring().open(&token, 300_999), Ok(claims()));
        assert_eq!(ring().open(&token, 301_000), Err(OpenError::Expired), "expiresAt <= now is expired");
    }

    #[test]
    fn foreign_or_retired_keys_fail_closed() {
        let token = ring().seal(&claims());
        let other = KeyRing::new("k1", vec![8u8; 32]).unwrap();
        assert_eq!(other.open(&token, 0), Err(OpenError::Signature));
        let unknown_id = KeyRing::new("k9", vec![7u8; 32]).unwrap();
        assert_eq!(unknown_id.open(&token, 0), Err(OpenError::Signature));
    }

    #[test]
    fn rotation_keeps_old_states_verifiable_until_retired() {
        let mut r = ring();
        let old = r.seal(&claims());
        r.rotate("k2", vec![9u8; 32]).unwrap();
        let new = r.seal(&claims());
        assert!(new.starts_with("s1.k2."));
        assert!(r.open(&old, 0).is_ok());
        assert_eq!(r.retire("k2"), Err(KeyError::RetiringSigningKey));
        r.retire("k1").unwrap();
        assert_eq!(r.open(&old, 0), Err(OpenError::Signature));
        assert!(r.open(&new, 0).is_ok());
    }

    #[test]
    fn derived_rings_follow_the_ring_and_never_equal_it() {
        let mut r = ring();
        let page = r.derive("page");
        assert_eq!(page, ring().derive("page"), "the same ring derives the same keys in every process");
        assert_eq!(page.signing_key_id(), "k1");
        assert_ne!(page.keys["k1"].bytes, r.keys["k1"].bytes, "a derived key is never the ring's own");
        assert_ne!(page, r.derive("other"), "labels separate purposes");
        assert_eq!(r.open(&page.seal(&claims()), 0), Err(OpenError::Signature), "a derived ring's seal is no state");
        let old = page.seal(&claims());
        r.rotate("k2", vec![9u8; 32]).unwrap();
        let rotated = r.derive("page");
        assert!(rotated.seal(&claims()).starts_with("s1.k2."), "the derived ring signs with the new key");
        assert!(rotated.open(&old, 0).is_ok(), "the previous key still verifies");
        r.retire("k1").unwrap();
        assert_eq!(r.derive("page").open(&old, 0), Err(OpenError::Signature), "until it is retired");
        assert_eq!(page.tag("k1", &["a", "b"]), ring().derive("page").tag("k1", &["a", "b"]));
        assert_ne!(page.tag("k1", &["a", "b"]), page.tag("k1", &["a\nb"]));
        assert_eq!(page.tag("k9", &["a"]), None);
    }

    #[test]
    fn weak_keys_and_bad_ids_are_refused() {
        assert_eq!(KeyRing::new("k1", vec![1; 31]).unwrap_err(), KeyError::TooShort);
        assert_eq!(KeyRing::new("k.1", vec![1; 32]).unwrap_err(), KeyError::Id);
        assert_eq!(KeyRing::new("", vec![1; 32]).unwrap_err(), KeyError::Id);
        assert!(!format!("{:?}", ring()).contains('7'), "Debug must not print key bytes");
    }

    #[test]
    fn unsigned_base64_state_is_refused() {
        let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims()).unwrap());
        assert_eq!(ring().open(&payload, 0), Err(OpenError::Malformed));
        assert_eq!(ring().open(&format!("s1.k1.{payload}.AAAA"), 0), Err(OpenError::Signature));
        assert_eq!(ring().open(&format!("s1.k1.{payload}."), 0), Err(OpenError::Signature));
        assert_eq!(ring().open("", 0), Err(OpenError::Malformed));
        assert_eq!(ring().open(&"a".repeat(STATE_CHARS_MAX + 1), 0), Err(OpenError::Malformed));
    }

    #[test]
    fn a_state_is_exactly_four_dot_separated_parts() {
        let token = ring().seal(&claims());
        let (signed, tag) = token.rsplit_once('.').unwrap();
        assert!(ring().open(&token, 0).is_ok());
        // Three parts, five parts, an extra dot anywhere, an empty key or payload: malformed before any MAC.
        assert_eq!(ring().open(signed, 0), Err(OpenError::Malformed));
        assert_eq!(ring().open(&format!("{token}.{tag}"), 0), Err(OpenError::Malformed));
        assert_eq!(ring().open(&format!(".{token}"), 0), Err(OpenError::Malformed));
        assert_eq!(ring().open(&token.replacen('.', "..", 1), 0), Err(OpenError::Malformed));
        let payload = signed.split('.').nth(2).unwrap();
        assert_eq!(ring().open(&format!("s1..{payload}.{tag}"), 0), Err(OpenError::Malformed));
        assert_eq!(ring().open(&format!("s1.k1..{tag}"), 0), Err(OpenError::Malformed));
        assert_eq!(ring().open(&format!("s2.k1.{payload}.{tag}"), 0), Err(OpenError::Malformed));
        // The signed part is everything before the last dot: moving that dot one place left breaks the MAC, not
        // the parse.
        let mut shifted = token.clone();
        let last_dot = shifted.rfind('.').unwrap();
        shifted.remove(last_dot);
        shifted.insert(last_dot - 1, '.');
        assert_eq!(ring().open(&shifted, 0), Err(OpenError::Signature));
    }

    proptest! {
        #[test]
        fn any_single_character_change_is_rejected(position in 0usize..400, replacement in proptest::char::range('!', '~')) {
            let token = ring().seal(&claims());
            let position = position % token.len();
            let mut bytes: Vec<char> = token.chars().collect();
            prop_assume!(bytes[position] != replacement);
            bytes[position] = replacement;
            let mutated: String = bytes.into_iter().collect();
            prop_assert!(ring().open(&mutated, 0).is_err());
        }

        #[test]
        fn any_truncation_or_extension_is_rejected(cut in 0usize..400, extra in "[A-Za-z0-9_.-]{1,4}") {
            let token = ring().seal(&claims());
            let cut = cut % token.len();
            prop_assert!(ring().open(&token[..cut], 0).is_err());
            let extended = format!("{token}{extra}");
            prop_assert!(ring().open(&extended, 0).is_err());
        }

        #[test]
        fn open_never_panics(input in ".{0,300}") {
            let _ = ring().open(&input, 0);
        }

        #[test]
        fn changed_claims_under_the_same_tag_are_rejected(principal in "[a-z]{1,8}") {
            prop_assume!(principal != "alice");
            let token = ring().seal(&claims());
            let tag = token.rsplit('.').next().unwrap();
            let mut forged = claims();
            forged.principal = principal;
            let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&forged).unwrap());
            prop_assert_eq!(ring().open(&format!("s1.k1.{payload}.{tag}"), 0), Err(OpenError::Signature));
        }
    }
}
