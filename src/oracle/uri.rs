//! The oracle's own reading of `file` URIs and of what lies inside what, written from RFC 3986 and
//! `GUARANTEES.md` §1.2, sharing no code with `policy::containment` (which it is tested against).
//!
//! A URI is read as a host and a list of path segments: the path percent-decoded once (so `%2f` is a `/` and
//! `%2e%2e` a `..`), then split, then dot segments resolved, empty segments dropped. The host is compared
//! case-insensitively, `localhost` being the empty host. What is not a `file` URI, or has a query, a fragment,
//! a bad escape or a NUL, lies inside nothing. `Location::contains` compares hosts and whole segments, never
//! strings, so `/notes-evil` is not inside `/notes`.

/// A `file` URI as the oracle reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub host: String,
    pub segments: Vec<String>,
}

/// The host and segments of a `file` URI, or `None` for anything else.
pub fn location(uri: &str) -> Option<Location> {
    let (scheme, rest) = uri.split_once(':')?;
    if !scheme.eq_ignore_ascii_case("file") {
        return None;
    }
    let rest = rest.strip_prefix("//")?;
    if rest.contains(['?', '#']) {
        return None;
    }
    let slash = rest.find('/')?;
    let host = rest[..slash].to_ascii_lowercase();
    let host = if host == "localhost" { String::new() } else { host };
    let path = percent_decode(&rest[slash..])?;
    if path.contains('\0') {
        return None;
    }
    let mut segments: Vec<String> = Vec::new();
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            _ => segments.push(segment.to_string()),
        }
    }
    Some(Location { host, segments })
}

impl Location {
    /// Whether `target` is this location or below it: the same host, and this location's segments its first.
    pub fn contains(&self, target: &Location) -> bool {
        // Hosts are nearly always empty, and comparing two empty strings with `==` can cost 100 ns or more:
        // glibc's AVX-512 `memcmp` reads zero bytes at an empty `String`'s dangling pointer with a masked
        // load, which AMD's AVX-512 CPUs (measured on a Zen 5 EPYC) complete with a microcode assist.
        let same_host = self.host.len() == target.host.len() && (self.host.is_empty() || self.host == target.host);
        same_host && target.segments.len() >= self.segments.len() && target.segments[..self.segments.len()] == self.segments[..]
    }
}

/// One round of `%XX` decoding; a malformed escape or invalid UTF-8 is `None`. Text without `%` is its own
/// decoding (the checker places every URI an answer shows).
fn percent_decode(text: &str) -> Option<std::borrow::Cow<'_, str>> {
    if !text.contains('%') {
        return Some(std::borrow::Cow::Borrowed(text));
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' {
            let high = hex(*bytes.get(index + 1)?)?;
            let low = hex(*bytes.get(index + 2)?)?;
            out.push(high * 16 + low);
            index += 3;
        } else {
            out.push(bytes[index]);
            index += 1;
        }
    }
    String::from_utf8(out).ok().map(std::borrow::Cow::Owned)
}

fn hex(byte: u8) -> Option<u8> {
    (byte as char).to_digit(16).map(|digit| digit as u8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::containment::FileUri;
    use proptest::prelude::*;

    const ROOT: &str = "file:///Users/alice/Documents/Notes";

    /// Whether `target` lies at or below `root`: the same host, and root's segments a prefix of target's.
    fn inside(root: &str, target: &str) -> bool {
        match (location(root), location(target)) {
            (Some(root), Some(target)) => root.contains(&target),
            _ => false,
        }
    }

    #[test]
    fn segments_not_strings_decide() {
        assert!(inside(ROOT, "file:///Users/alice/Documents/Notes/tps.md"));
        assert!(inside(ROOT, ROOT));
        assert!(inside(ROOT, "file://localhost/Users/alice/Documents/Notes/a/../b.md"));
        assert!(!inside(ROOT, "file:///Users/alice/Documents/Notes-evil/secret.md"), "a shared string prefix is not containment");
        assert!(!inside(ROOT, "file:///Users/alice/Documents/Notes/%2e%2e/private.md"), "encoded traversal climbs out");
        assert!(!inside(ROOT, "file:///Users/alice/Documents/Notes/%2E%2e/%2E%2E/x"));
        assert!(!inside(ROOT, "file:///Users/alice/Documents/Notes/../Notes-evil/x.md"));
        assert!(!inside(ROOT, "file://evil.example/Users/alice/Documents/Notes/x.md"), "another host is another file system");
        assert!(!inside(ROOT, "https:///Users/alice/Documents/Notes/x.md"));
        assert!(!inside(ROOT, "file:///Users/alice/Documents/Notes/x.md?raw"));
        assert!(inside(ROOT, "file:///Users/alice/Documents/Notes/a%2fb.md"), "an encoded slash separates like a slash");
        assert!(!inside(ROOT, "file:///Users/alice/Documents/Notes/%2e%2e%2fNotes-evil/x.md"), "and so climbs like one");
        assert!(!inside(ROOT, "file:///Users/alice/Documents/Notes/%zz"));
        assert!(!inside("not a uri", ROOT));
    }

    fn uri_strategy() -> impl Strategy<Value = String> {
        let segment = prop_oneof![
            Just("Notes".to_string()),
            Just("Notes-evil".to_string()),
            Just("a".to_string()),
            Just("b.md".to_string()),
            Just(".".to_string()),
            Just("..".to_string()),
            Just("%2e%2e".to_string()),
            Just("%2E".to_string()),
            Just("%2525".to_string()),
            Just("%41".to_string()),
            Just("%2f".to_string()),
            Just(String::new()),
            "[a-z]{1,3}",
        ];
        let host = prop_oneof![Just(""), Just("localhost"), Just("LOCALHOST"), Just("evil")];
        (host, proptest::collection::vec(segment, 0..6)).prop_map(|(host, segments)| format!("file://{host}/{}", segments.join("/")))
    }

    proptest! {
        /// The oracle and the server's policy agree wherever the policy accepts both URIs; where the policy
        /// refuses one, it is stricter, which is never unsafe. A disagreement is a finding about one of them.
        #[test]
        fn agrees_with_the_policy_on_what_it_accepts(root in uri_strategy(), target in uri_strategy()) {
            if let (Ok(policy_root), Ok(policy_target)) = (FileUri::parse(&root), FileUri::parse(&target)) {
                prop_assert_eq!(policy_root.contains(&policy_target), inside(&root, &target), "root {} target {}", root, target);
            }
        }

        #[test]
        fn whatever_the_policy_calls_inside_the_oracle_does_too(root in uri_strategy(), target in uri_strategy()) {
            let policy_inside = FileUri::parse(&root).ok().zip(FileUri::parse(&target).ok()).is_some_and(|(r, t)| r.contains(&t));
            prop_assert!(!policy_inside || inside(&root, &target), "the policy lets {} into {} but the oracle does not", target, root);
        }
    }
}
