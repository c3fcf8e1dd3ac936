//! The out-of-band page of URL-mode elicitation over HTTP (GUARANTEES.md §2.7), on the same listener as the
//! MCP endpoint: `GET /connect/{reference}` shows it, `POST /connect/{reference}/sign-in` signs the browser in,
//! `POST /connect/{reference}` submits it. Every decision (is this the flow's principal, is it still open) is
//! the service's ([`Service::page`], the same handler the simulator's browsers reach); this module only proves
//! who the browser user is and speaks HTML.
//!
//! * **Sign-in** proves the principal with the principal's own token (what the MCP client authenticates with),
//!   typed into the page: the link itself proves nothing. It sets a session cookie: the principal and an expiry,
//!   HMAC-signed with this process's key, `HttpOnly`, `SameSite=Strict`, `Path=/connect/`. No session is kept
//!   on the server.
//! * **CSRF**: the submit carries a token that is the HMAC of the session cookie and the reference, so a form
//!   posted from anywhere else fails even where a browser would send the cookie; a cross-origin `Origin` is
//!   refused outright.
//! * **Pages** are self-contained HTML (one inline stylesheet, no script, no external resource) under a
//!   Content-Security-Policy that admits nothing else; every value shown is escaped.
//! * **Guessing is throttled**: sign-in attempts are counted per client address and per flow reference
//!   ([`SignInThrottle`]); past either's allowance the attempt is answered `429` with `Retry-After`, before
//!   the token is even looked at.
//! * **Logged** like `/mcp`: each request gets one line (route without its reference, principal when known,
//!   status, outcome), written by the listener ([`crate::transport::http`]); never a token or a cookie.

use crate::framework::out_of_band::{PageAction, PageAnswer, PageRequest};
use crate::framework::ports::Clock;
use crate::framework::Service;
use crate::servers::notes::publish::PAGE_PATH;
use crate::stores::system::SystemClock;
use crate::transport::http::{with_route_log, ClientAddress, RouteLog, Tokens};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Extension;
use axum::{Form, Router};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "mcpsim_page_session";
/// How long a page session lasts.
pub const SESSION_TTL_MS: u64 = 15 * 60 * 1000;
const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Sign-in attempts one client address may make in a burst; then one more per [`SIGN_IN_INTERVAL_MS`].
pub const SIGN_IN_BURST_PER_CLIENT: u64 = 5;
/// Sign-in attempts on one flow reference (from any address) in a burst; then one more per interval.
pub const SIGN_IN_BURST_PER_REFERENCE: u64 = 10;
/// The sustained rate of sign-in attempts each client address and each reference is allowed: one per this.
pub const SIGN_IN_INTERVAL_MS: u64 = 1_000;
/// Client addresses and references the throttle remembers at once (each 8 bytes of time and its key); when
/// all are still counting, a new one is refused until one has recovered (fail closed).
const THROTTLE_KEYS_MAX: usize = 4096;

/// Sign-in attempts, bounded per key as a token bucket (GCRA): a burst, then one per interval. A key is
/// forgotten once its bucket is full again, so it costs nothing at rest.
#[derive(Debug)]
pub struct SignInThrottle {
    burst: u64,
    interval_ms: u64,
    /// Per key: when its bucket will be full again (the theoretical arrival time of the next attempt).
    full_at: std::sync::Mutex<BTreeMap<String, u64>>,
}

impl SignInThrottle {
    pub fn new(burst: u64, interval_ms: u64) -> SignInThrottle {
        SignInThrottle { burst: burst.max(1), interval_ms: interval_ms.max(1), full_at: std::sync::Mutex::default() }
    }

    /// Counts an attempt under `key` at `now_ms`; `Err(ms)` when it is over the allowance, with how long until
    /// the next one is allowed.
    pub fn attempt(&self, key: &str, now_ms: u64) -> Result<(), u64> {
        let mut full_at = self.full_at.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let tolerance = (self.burst - 1).saturating_mul(self.interval_ms);
        let arrival = full_at.get(key).copied().unwrap_or(0).max(now_ms);
        if arrival - now_ms > tolerance {
            return Err(arrival - now_ms - tolerance);
        }
        if !full_at.contains_key(key) && full_at.len() >= THROTTLE_KEYS_MAX {
            full_at.retain(|_, at| *at > now_ms);
            if full_at.len() >= THROTTLE_KEYS_MAX {
                return Err(self.interval_ms);
            }
        }
        full_at.insert(key.to_string(), arrival + self.interval_ms);
        Ok(())
    }
}

/// Milliseconds since the process first asked: the throttle's time, which a wall-clock step cannot move back
/// (a clock set back an hour would otherwise hold every counted client off for that hour).
fn monotonic_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    #[allow(clippy::disallowed_methods)] // Real transport only: a rate limit of real requests, never in a transcript.
    let start = START.get_or_init(std::time::Instant::now);
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

struct PageState {
    service: Arc<dyn Service>,
    tokens: Tokens,
    per_client: SignInThrottle,
    per_reference: SignInThrottle,
    key: Vec<u8>,
    /// `http://HOST:PORT`: what the URLs this listener's server issues start with.
    base: String,
}

/// The page's routes for `service` (whose notes server issues URLs starting with `base`), signing sessions
/// with `key` and proving principals with `tokens`, allowing sign-in attempts at one per
/// `sign_in_interval_ms` after their bursts ([`SIGN_IN_INTERVAL_MS`] unless a test says otherwise). Merge it
/// into the listener's router.
pub fn page_router(service: Arc<dyn Service>, tokens: Tokens, key: Vec<u8>, base: String, sign_in_interval_ms: u64) -> Router {
    let state = Arc::new(PageState {
        service,
        tokens,
        per_client: SignInThrottle::new(SIGN_IN_BURST_PER_CLIENT, sign_in_interval_ms),
        per_reference: SignInThrottle::new(SIGN_IN_BURST_PER_REFERENCE, sign_in_interval_ms),
        key,
        base: base.trim_end_matches('/').to_string(),
    });
    Router::new()
        .route("/connect/{reference}", get(show).post(submit))
        .route("/connect/{reference}/sign-in", post(sign_in))
        .with_state(state)
}

type Hmac256 = Hmac<Sha256>;

fn mac(key: &[u8], parts: &[&str]) -> String {
    let mut mac = Hmac256::new_from_slice(key).expect("HMAC takes any key");
    for part in parts {
        mac.update(part.as_bytes());
        mac.update(b"\n");
    }
    URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
}

fn constant_time_eq(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

impl PageState {
    fn url(&self, reference: &str) -> String {
        format!("{}{PAGE_PATH}{reference}", self.base)
    }

    /// `principal.expires.tag`, the principal base64url-encoded.
    fn session_value(&self, principal: &str, now_ms: u64) -> String {
        let who = URL_SAFE_NO_PAD.encode(principal);
        let expires = now_ms.saturating_add(SESSION_TTL_MS).to_string();
        let tag = mac(&self.key, &["session", &who, &expires]);
        format!("{who}.{expires}.{tag}")
    }

    /// The signed-in principal, if the request carries a valid, unexpired session cookie.
    fn session(&self, headers: &HeaderMap, now_ms: u64) -> Option<(String, String)> {
        let cookies = headers.get_all(header::COOKIE).iter().filter_map(|value| value.to_str().ok());
        let value = cookies.flat_map(|line| line.split(';')).find_map(|pair| {
            let (name, value) = pair.trim().split_once('=')?;
            (name == SESSION_COOKIE).then(|| value.to_string())
        })?;
        let mut parts = value.split('.');
        let (Some(who), Some(expires), Some(tag), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else { return None };
        if !constant_time_eq(tag, &mac(&self.key, &["session", who, expires])) || expires.parse::<u64>().ok()? <= now_ms {
            return None;
        }
        let principal = String::from_utf8(URL_SAFE_NO_PAD.decode(who).ok()?).ok()?;
        Some((principal, value))
    }

    fn csrf(&self, session: &str, reference: &str) -> String {
        mac(&self.key, &["csrf", session, reference])
    }

    /// A cross-origin form post is refused before anything else (the `Origin` header, when a browser sends one).
    fn foreign_origin(&self, headers: &HeaderMap) -> bool {
        headers.get(header::ORIGIN).and_then(|value| value.to_str().ok()).is_some_and(|origin| origin != self.base && origin != "null")
    }
}

fn escape(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '&' => "&amp;".to_string(),
            '<' => "&lt;".to_string(),
            '>' => "&gt;".to_string(),
            '"' => "&quot;".to_string(),
            '\'' => "&#39;".to_string(),
            c => c.to_string(),
        })
        .collect()
}

/// A whole page: the heading, the sentence, and an optional form (already-escaped HTML).
fn html(status: u16, outcome: &str, heading: &str, says: &str, form: &str) -> Response {
    let body = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\">\
         <title>{heading} · mcpsim</title><style>body{{font:16px/1.5 system-ui,sans-serif;max-width:34rem;margin:3rem auto;padding:0 1rem;color:#222}}\
         h1{{font-size:1.4rem}}.outcome{{color:#666;font-size:.85rem}}input{{font:inherit;padding:.4rem;width:100%;box-sizing:border-box}}\
         button{{font:inherit;padding:.5rem 1.2rem;margin-top:.8rem}}</style></head>\
         <body><main data-outcome=\"{outcome}\"><h1>{heading}</h1><p id=\"says\">{says}</p>{form}<p class=\"outcome\">{outcome}</p></main></body></html>\n",
        heading = escape(heading),
        says = escape(says),
        outcome = escape(outcome),
    );
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    with_route_log(response, None, outcome)
}

/// Names the principal the request acted for in its log line.
fn logged_as(mut response: Response, principal: &str) -> Response {
    if let Some(log) = response.extensions_mut().get_mut::<RouteLog>() {
        log.principal = Some(principal.to_string());
    }
    response
}

fn answer_page(answer: &PageAnswer, form: &str) -> Response {
    let heading = match answer.outcome {
        "ready" => "Authorize publishing",
        "completed" => "Authorized",
        _ => "Not authorized",
    };
    let says = match &answer.flow {
        Some((tool, subject)) if answer.outcome == "ready" => format!("{} ({tool} of {subject})", answer.says),
        _ => answer.says.clone(),
    };
    html(answer.status, answer.outcome, heading, &says, form)
}

fn sign_in_page(reference: &str, status: u16, says: &str) -> Response {
    let form = format!(
        "<form method=\"post\" action=\"{PAGE_PATH}{reference}/sign-in\"><label for=\"token\">Your access token</label>\
         <input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"off\" required><button id=\"sign-in\" type=\"submit\">Sign in</button></form>",
        reference = escape(reference)
    );
    html(status, "sign_in", "Sign in to continue", says, &form)
}

async fn show(State(state): State<Arc<PageState>>, Path(reference): Path<String>, headers: HeaderMap) -> Response {
    let now_ms = SystemClock.now_ms();
    let Some((principal, session)) = state.session(&headers, now_ms) else {
        return sign_in_page(&reference, 200, "Sign in as yourself, with your own access token, to see what is asked of you.");
    };
    let answer = state.service.page(&principal, &PageRequest { action: PageAction::Open, url: state.url(&reference) }).await;
    let form = if answer.outcome == "ready" {
        format!(
            "<form method=\"post\" action=\"{PAGE_PATH}{reference}\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
             <button id=\"authorize\" type=\"submit\">Authorize</button></form>",
            reference = escape(&reference),
            csrf = escape(&state.csrf(&session, &reference))
        )
    } else {
        String::new()
    };
    logged_as(answer_page(&answer, &form), &principal)
}

async fn sign_in(
    State(state): State<Arc<PageState>>,
    Path(reference): Path<String>,
    client: Option<Extension<ClientAddress>>,
    headers: HeaderMap,
    Form(form): Form<BTreeMap<String, String>>,
) -> Response {
    if state.foreign_origin(&headers) {
        return html(403, "foreign_origin", "Not authorized", "This sign-in was posted from another site. Nothing was done.", "");
    }
    // Counted before the token is looked at: a guess over the allowance learns nothing.
    let now_ms = SystemClock.now_ms();
    let elapsed_ms = monotonic_ms();
    let client = client.map_or_else(|| "unknown".to_string(), |Extension(ClientAddress(address))| address.to_string());
    // A genuine reference is 22 characters; a longer one is counted by its first 64 (it names no flow anyway).
    let reference_key: String = reference.chars().take(64).collect();
    let throttled = state.per_client.attempt(&client, elapsed_ms).and_then(|()| state.per_reference.attempt(&reference_key, elapsed_ms));
    if let Err(wait_ms) = throttled {
        let seconds = wait_ms.div_ceil(1000).max(1);
        let says = format!("Too many sign-in attempts from here or for this page. Nothing was checked; try again in {seconds} s.");
        let mut response = html(429, "sign_in_throttled", "Slow down", &says, "");
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        return response;
    }
    let Some(principal) = form.get("token").and_then(|token| state.tokens.principal(token.trim())) else {
        return sign_in_page(&reference, 401, "That token is not one this server knows. Nothing was done; try again.");
    };
    let cookie = format!(
        "{SESSION_COOKIE}={}; Path={PAGE_PATH}; HttpOnly; SameSite=Strict; Max-Age={}",
        state.session_value(principal, now_ms),
        SESSION_TTL_MS / 1000
    );
    let mut response = (StatusCode::SEE_OTHER, "").into_response();
    let location = format!("{PAGE_PATH}{}", escape(&reference));
    if let (Ok(location), Ok(cookie)) = (HeaderValue::from_str(&location), HeaderValue::from_str(&cookie)) {
        response.headers_mut().insert(header::LOCATION, location);
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    with_route_log(response, Some(principal), "signed_in")
}

async fn submit(
    State(state): State<Arc<PageState>>,
    Path(reference): Path<String>,
    headers: HeaderMap,
    Form(form): Form<BTreeMap<String, String>>,
) -> Response {
    let now_ms = SystemClock.now_ms();
    if state.foreign_origin(&headers) {
        return html(403, "foreign_origin", "Not authorized", "This form was posted from another site. Nothing was authorized.", "");
    }
    let Some((principal, session)) = state.session(&headers, now_ms) else {
        return sign_in_page(&reference, 401, "Your session has ended or was never started: sign in again. Nothing was authorized.");
    };
    let csrf_ok = form.get("csrf").is_some_and(|csrf| constant_time_eq(csrf, &state.csrf(&session, &reference)));
    if !csrf_ok {
        return html(
            403,
            "csrf",
            "Not authorized",
            "This form did not come from this page (its CSRF token is missing or wrong). Nothing was authorized.",
            "",
        );
    }
    let answer = state.service.page(&principal, &PageRequest { action: PageAction::Complete, url: state.url(&reference) }).await;
    logged_as(answer_page(&answer, ""), &principal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_verify_only_with_their_tag_and_before_expiry() {
        let state = PageState {
            service: Arc::new(crate::assembly::demo_notes_server()),
            tokens: Tokens::default(),
            per_client: SignInThrottle::new(1, 1),
            per_reference: SignInThrottle::new(1, 1),
            key: vec![7; 32],
            base: "http://h".into(),
        };
        let value = state.session_value("alice", 1_000);
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, HeaderValue::from_str(&format!("other=1; {SESSION_COOKIE}={value}")).unwrap());
        assert_eq!(state.session(&headers, 1_000).map(|(who, _)| who), Some("alice".to_string()));
        assert!(state.session(&headers, 1_000 + SESSION_TTL_MS).is_none(), "expired");
        let forged = value.replacen(&URL_SAFE_NO_PAD.encode("alice"), &URL_SAFE_NO_PAD.encode("bob"), 1);
        headers.insert(header::COOKIE, HeaderValue::from_str(&format!("{SESSION_COOKIE}={forged}")).unwrap());
        assert!(state.session(&headers, 1_000).is_none(), "a renamed session fails its tag");
        assert_ne!(state.csrf(&value, "r1"), state.csrf(&value, "r2"), "a CSRF token is per page");
        assert_eq!(escape("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
    }

    #[test]
    fn the_throttle_allows_a_burst_then_one_per_interval_per_key() {
        let throttle = SignInThrottle::new(3, 1_000);
        for _ in 0..3 {
            assert_eq!(throttle.attempt("a", 10_000), Ok(()));
        }
        assert_eq!(throttle.attempt("a", 10_000), Err(1_000), "the burst is spent: the next one in a second");
        assert_eq!(throttle.attempt("b", 10_000), Ok(()), "another key has its own allowance");
        assert_eq!(throttle.attempt("a", 10_999), Err(1));
        assert_eq!(throttle.attempt("a", 11_000), Ok(()));
        assert_eq!(throttle.attempt("a", 11_000), Err(1_000), "one per interval after the burst");
        assert_eq!(throttle.attempt("a", 20_000), Ok(()), "a rested key has its burst back");
        assert_eq!(throttle.attempt("a", 20_000), Ok(()));
    }
}
