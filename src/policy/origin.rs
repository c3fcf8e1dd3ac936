//! DNS-rebinding protection for servers listening on a loopback address.
//!
//! A web page on `evil.example.com` can make a browser resolve that name to 127.0.0.1 and POST to a local
//! server; the browser still sends `Host: evil.example.com` and `Origin: http://evil.example.com`. A local
//! server therefore accepts a request only when its `Host` names a loopback host and its `Origin`, when
//! present, is an http(s) origin on a loopback host; anything else is refused with HTTP 403 before the body
//! is read (SPEC-SEC-10).

use crate::wire::errors::RpcError;
use std::net::{IpAddr, SocketAddr};

/// Longest Host or Origin value looked at.
pub const HOST_CHARS_MAX: usize = 255;

/// Whether `address` is a loopback address (127.0.0.0/8 or ::1): the only binds an unauthenticated server accepts.
pub fn is_loopback_bind(address: &SocketAddr) -> bool {
    address.ip().is_loopback()
}

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
        let authority = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://"));
        if !authority.is_some_and(is_loopback_authority) {
            return Err(forbidden(format!("Origin {:?} is not a loopback origin", truncate(origin))));
        }
    }
    Ok(())
}

/// `host[:port]` where host is `localhost`, an IPv4 loopback address or `[::1]`, and port is 1 to 5 digits.
fn is_loopback_authority(authority: &str) -> bool {
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
    fn only_loopback_binds_count() {
        assert!(is_loopback_bind(&"127.0.0.1:0".parse().unwrap()));
        assert!(is_loopback_bind(&"[::1]:0".parse().unwrap()));
        assert!(!is_loopback_bind(&"0.0.0.0:0".parse().unwrap()));
        assert!(!is_loopback_bind(&"192.168.1.2:80".parse().unwrap()));
    }

    proptest::proptest! {
        #[test]
        fn never_panics(host in ".{0,40}", origin in proptest::option::of(".{0,40}")) {
            let _ = check_local_request(Some(&host), origin.as_deref());
        }
    }
}
