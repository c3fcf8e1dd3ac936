//! DNS-rebinding protection for servers listening on a loopback address.
//!
//! A web page on `evil.example.com` can make a browser resolve that name to 127.0.0.1 and POST to a local
//! server; the browser still sends `Host: evil.example.com` and `Origin: http://evil.example.com`. A local
//! server therefore accepts a request only when its `Host` names a loopback host and its `Origin`, when
//! present, is an http(s) origin on a loopback host; anything else is refused with HTTP 403 before the body
//! is read (SPEC-SEC-10).
//!
//! Servers that authenticate every caller may allow other browser origins explicitly ([`OriginPolicy`]); the
//! `Host` rule for loopback binds stays.

use crate::wire::errors::RpcError;
use std::collections::BTreeSet;
use std::net::IpAddr;

/// Longest Host or Origin value looked at.
pub(crate) const HOST_CHARS_MAX: usize = 255;

/// `Ok` when `host` (the Host header) names a loopback host and `origin` (the Origin header), if sent, is
/// `http://` or `https://` on a loopback host. Otherwise `-32600` with HTTP 403 and what was refused.
pub fn check_local_request(host: Option<&str>, origin: Option<&str>) -> Result<(), RpcError> {
    let forbidden = |what: String| {
        RpcError::invalid_request(format!("{what}; this local server only answers requests addressed to localhost")).with_status(403)
    };
    let host = host.ok_or_else(|| forbidden("the Host header is missing".into()))?;
    if !is_loopback_authority(host) {
        return Err(forbidden(format!("Host {:?} is not a loopback host", truncate(host))));
    }
    if let Some(origin) = origin {
        if !is_loopback_origin(origin) {
            return Err(forbidden(format!("Origin {:?} is not a loopback origin", truncate(origin))));
        }
    }
    Ok(())
}

/// `http://` or `https://` followed by a loopback authority (and nothing else).
pub fn is_loopback_origin(origin: &str) -> bool {
    let authority = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://"));
    authority.is_some_and(is_loopback_authority)
}

/// Which browser origins may call a server. Requests without an `Origin` header (non-browser clients) are not
/// judged by it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OriginPolicy {
    /// The default: pages served from this machine ([`is_loopback_origin`]: localhost, 127.0.0.0/8, `[::1]`,
    /// any port, http or https).
    Loopback,
    /// Exactly these origins (as [`normalize_origin`] writes them), nothing else — not even loopback.
    Only(BTreeSet<String>),
}

/// A configured origin or public URL that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OriginError {
    /// An `--allow-origin` value, as given.
    #[error("{0:?} is not an origin: expected scheme://host[:port] with scheme http or https, e.g. https://app.example.com")]
    NotAnOrigin(String),
    /// A public base URL, its first 80 characters.
    #[error(
        "{0:?} is not a public base URL: expected http(s)://HOST[:PORT] with no path, query or credentials, e.g. https://notes.example.com (the address browsers reach this server at)"
    )]
    NotAPublicUrl(String),
}

impl OriginPolicy {
    /// The policy for a list of configured origins (e.g. `--allow-origin` values): empty means
    /// [`OriginPolicy::Loopback`]. A trailing `/` is forgiven; anything else that is not an origin is refused.
    // The HTTP transport's (`--allow-origin`); the rest of this module also serves the configuration.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn from_allowed(origins: &[String]) -> Result<OriginPolicy, OriginError> {
        if origins.is_empty() {
            return Ok(OriginPolicy::Loopback);
        }
        let mut allowed = BTreeSet::new();
        for origin in origins {
            let normalized =
                normalize_origin(origin.strip_suffix('/').unwrap_or(origin)).ok_or_else(|| OriginError::NotAnOrigin(origin.clone()))?;
            allowed.insert(normalized);
        }
        Ok(OriginPolicy::Only(allowed))
    }

    pub fn allows(&self, origin: &str) -> bool {
        match self {
            OriginPolicy::Loopback => is_loopback_origin(origin),
            OriginPolicy::Only(allowed) => normalize_origin(origin).is_some_and(|origin| allowed.contains(&origin)),
        }
    }
}

/// `scheme://host[:port]` with scheme `http` or `https`, lower-cased, the default port dropped; `None` for
/// anything else (a path, credentials, `null`, another scheme, a bad port).
pub fn normalize_origin(text: &str) -> Option<String> {
    if text.len() > HOST_CHARS_MAX + "https://".len() {
        return None;
    }
    let text = text.trim().to_ascii_lowercase();
    let (scheme, authority) = text.split_once("://")?;
    let default_port = match scheme {
        "http" => "80",
        "https" => "443",
        _ => return None,
    };
    if authority.is_empty() || authority.contains(['/', '?', '#', '@', ' ', '\\']) {
        return None;
    }
    let (host, port) = match authority.strip_prefix('[') {
        Some(rest) => {
            let (inside, after) = rest.split_once(']')?;
            let port = match after {
                "" => None,
                _ => Some(after.strip_prefix(':')?),
            };
            (format!("[{inside}]"), port)
        }
        None => match authority.rsplit_once(':') {
            Some((host, port)) => (host.to_string(), Some(port)),
            None => (authority.to_string(), None),
        },
    };
    if host.is_empty() || host == "[]" || (host.contains([':', '[', ']']) && !host.starts_with('[')) {
        return None;
    }
    match port {
        Some(port) if port.is_empty() || port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()) || port.parse::<u16>().is_err() => {
            None
        }
        Some(port) if port == default_port => Some(format!("{scheme}://{host}")),
        Some(port) => Some(format!("{scheme}://{host}:{port}")),
        None => Some(format!("{scheme}://{host}")),
    }
}

/// A public base URL (`serve --public-url`, `public_url` in a deployment): `http://` or `https://`, a host and
/// an optional port, nothing after them but an optional `/`; as [`normalize_origin`] writes it. The error says
/// what was expected, quoting at most 80 characters of `text`.
pub fn parse_public_url(text: &str) -> Result<String, OriginError> {
    let trimmed = text.trim();
    normalize_origin(trimmed.strip_suffix('/').unwrap_or(trimmed)).ok_or_else(|| OriginError::NotAPublicUrl(truncate(text)))
}

/// Whether `host` (a Host header) names the host and port of `public_url` (as [`parse_public_url`] writes it;
/// the scheme's default port may be left out or written).
pub fn names_public_url(public_url: &str, host: &str) -> bool {
    let scheme = if public_url.starts_with("https://") { "https" } else { "http" };
    let host = host.trim();
    !host.is_empty() && normalize_origin(&format!("{scheme}://{host}")).is_some_and(|origin| origin == public_url)
}

/// `host[:port]` where host is `localhost`, an IPv4 loopback address or `[::1]`, and port is 1 to 5 digits.
pub(crate) fn is_loopback_authority(authority: &str) -> bool {
    if authority.is_empty() || authority.len() > HOST_CHARS_MAX {
        return false;
    }
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let Some((inside, after)) = rest.split_once(']') else { return false };
        let port = match after {
            "" => None,
            _ => match after.strip_prefix(':') {
                Some(port) => Some(port),
                None => return false,
            },
        };
        (inside, port)
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if let Some(port) = port {
        if port.is_empty() || port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()) {
            return false;
        }
    }
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    let bracketed = authority.starts_with('[');
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(v4)) => !bracketed && v4.is_loopback(),
        Ok(IpAddr::V6(v6)) => bracketed && v6.is_loopback(),
        Err(_) => false,
    }
}

fn truncate(text: &str) -> String {
    text.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_urls_are_origins_written_one_way() {
        assert_eq!(parse_public_url("https://Notes.Example.com/").unwrap(), "https://notes.example.com");
        assert_eq!(parse_public_url("http://10.0.0.5:80").unwrap(), "http://10.0.0.5");
        assert_eq!(parse_public_url("http://[2001:db8::1]:8443").unwrap(), "http://[2001:db8::1]:8443");
        for bad in
            ["notes.example.com", "https://notes.example.com/mcp", "ftp://x", "https://u@x", "https://x?y", "null", "", "http://x:99999"]
        {
            let error = parse_public_url(bad).unwrap_err();
            assert_eq!(error, OriginError::NotAPublicUrl(bad.into()));
            assert!(error.to_string().contains("http(s)://HOST[:PORT]"), "{bad}");
        }
    }

    #[test]
    fn loopback_hosts_and_origins_are_accepted() {
        for host in ["localhost", "LOCALHOST:8080", "127.0.0.1", "127.0.0.1:3000", "127.1.2.3:1", "[::1]", "[::1]:65535"] {
            assert!(check_local_request(Some(host), None).is_ok(), "{host}");
            assert!(check_local_request(Some(host), Some(&format!("http://{host}"))).is_ok(), "{host}");
        }
        assert!(check_local_request(Some("127.0.0.1:9"), Some("https://localhost:9")).is_ok());
    }

    #[test]
    fn rebinding_attempts_are_refused_with_403() {
        let cases = [
            (Some("evil.example.com"), Some("http://evil.example.com")),
            (Some("evil.example.com"), None),
            (Some("127.0.0.1:3000"), Some("http://evil.example.com")),
            (Some("127.0.0.1:3000"), Some("null")),
            (Some("127.0.0.1:3000"), Some("file://localhost")),
            (Some("localhost.evil.example.com"), None),
            (Some("127.0.0.1.evil.example.com"), None),
            (Some("0.0.0.0"), None),
            (Some("10.0.0.1"), None),
            (Some("::1"), None),
            (Some("[::1"), None),
            (Some("[::2]"), None),
            (Some("localhost:"), None),
            (Some("localhost:123456"), None),
            (Some("localhost:80x"), None),
            (Some(""), None),
            (None, None),
        ];
        for (host, origin) in cases {
            let error = check_local_request(host, origin).unwrap_err();
            assert_eq!((error.code, error.http_status), (crate::wire::errors::INVALID_REQUEST, 403), "{host:?} {origin:?}");
        }
    }

    #[test]
    fn origins_normalize_to_scheme_host_port() {
        assert_eq!(normalize_origin("HTTPS://App.Example.com:443").as_deref(), Some("https://app.example.com"));
        assert_eq!(normalize_origin("http://localhost:6274").as_deref(), Some("http://localhost:6274"));
        assert_eq!(normalize_origin("http://[::1]:80").as_deref(), Some("http://[::1]"));
        for bad in [
            "null",
            "",
            "file://",
            "ftp://x",
            "http://",
            "http://a/b",
            "http://a:99999",
            "http://a:",
            "http://u@a",
            "http://[::1",
            "http://a:b:c",
        ] {
            assert_eq!(normalize_origin(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_loopback_policy_allows_only_this_machine() {
        let policy = OriginPolicy::Loopback;
        for allowed in ["http://localhost:6274", "http://127.0.0.1", "https://[::1]:8443", "http://LOCALHOST", "http://127.0.0.2:1"] {
            assert!(policy.allows(allowed), "{allowed}");
        }
        for refused in [
            "http://evil.example",
            "http://localhost.evil.example",
            "http://127.0.0.1.nip.io",
            "null",
            "http://[::2]",
            "http://localhost/x",
        ] {
            assert!(!policy.allows(refused), "{refused}");
        }
    }

    #[test]
    fn an_allowlist_replaces_the_loopback_default() {
        let policy = OriginPolicy::from_allowed(&["https://app.example.com/".into()]).unwrap();
        assert!(policy.allows("https://app.example.com"));
        assert!(policy.allows("https://APP.example.com:443"));
        assert!(!policy.allows("http://app.example.com"));
        assert!(!policy.allows("http://localhost"));
        let error = OriginPolicy::from_allowed(&["app.example.com".into()]).unwrap_err();
        assert_eq!(error, OriginError::NotAnOrigin("app.example.com".into()));
        assert!(error.to_string().contains("scheme://host"), "{error}");
    }

    proptest::proptest! {
        #[test]
        fn origin_policies_never_panic(origin in ".{0,60}") {
            let _ = normalize_origin(&origin);
            let _ = OriginPolicy::Loopback.allows(&origin);
            let _ = OriginPolicy::from_allowed(std::slice::from_ref(&origin));
        }
    }

    proptest::proptest! {
        #[test]
        fn never_panics(host in ".{0,40}", origin in proptest::option::of(".{0,40}")) {
            let _ = check_local_request(Some(&host), origin.as_deref());
        }
    }
}
