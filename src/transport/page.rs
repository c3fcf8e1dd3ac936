//! The out-of-band page of URL-mode elicitation over HTTP (GUARANTEES.md §2.7), on the same listener as the
//! MCP endpoint: `GET /connect/{reference}` shows it, `POST /connect/{reference}/sign-in` signs the browser in,
//! `POST /connect/{reference}` submits it. Every decision (is this the flow's principal, is it still open) is
//! the service's ([`Service::page`], the same handler the simulator's browsers reach); this module only proves
//! who the browser user is and speaks HTML.
//!
//! * **Where**: every page route first checks the request is addressed to the page (a DNS-rebinding defence,
//!   as `/mcp`'s): one `Host`, naming the configured public URL's host (`serve --public-url`), or without one
//!   (loopback binds only) a loopback host; an origin-form target; and an `Origin`, when sent, that is exactly
//!   the page's own (the public URL's, or `http://` + the loopback `Host`), so `Origin: null` is refused.
//! * **Sign-in** proves the principal with the principal's own token (what the MCP client authenticates with),
//!   typed into the page: the link itself proves nothing. The form carries a CSRF token bound to a signed
//!   pre-session cookie the page set and to the reference (double submit): a sign-in posted from anywhere
//!   else (login CSRF) signs nobody in and sets nothing. It sets a session cookie: the principal and an
//!   expiry, sealed with the page's keys, `HttpOnly`, `SameSite=Strict`, `Path=/connect/` (and `Secure` under
//!   an `https` public URL). No session is kept on the server. A browser signed in as someone other than the
//!   link's principal is shown the sign-in form again, so a planted session never locks the user out.
//! * **Keys**: the page's keys are derived from the fleet's signing key ring ([`KeyRing::derive`] with
//!   [`PAGE_KEY_LABEL`]), never the ring's own keys: every process of a fleet accepts every other's cookies,
//!   they rotate with the ring, and a cookie is never a `requestState` nor the reverse.
//! * **CSRF**: the submit carries a token that is the HMAC of the session cookie and the reference, so a form
//!   posted from anywhere else fails even where a browser would send the cookie.
//! * **Pages** are self-contained HTML (one inline stylesheet, no script, no external resource) under a
//!   Content-Security-Policy that admits nothing else; every value shown is escaped.
//! * **Guessing is throttled**: sign-in attempts are counted per client address and per flow reference
//!   ([`SignInThrottle`]); past either's allowance the attempt is answered `429` with `Retry-After`, before
//!   the token is even looked at.
//! * **Logged** like `/mcp`: each request gets one line (route without its reference, principal when known,
//!   status, outcome), written by the listener ([`crate::transport::http`]); never a token or a cookie.

use crate::framework::out_of_band::{PageAction, PageAnswer, PageRequest};
use crate::framework::ports::{Clock, NonceSource};
use crate::framework::Service;
use crate::policy::origin::{is_loopback_authority, names_public_url, normalize_origin};
use crate::policy::state::{key_id_of, KeyRing};
use crate::servers::notes::publish::PAGE_PATH;
use crate::stores::system::{OsNonces, SystemClock};
use crate::transport::http::{target_and_host, with_route_log, ClientAddress, RouteLog, Tokens};
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Extension;
use axum::{Form, Router};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "mcpsim_page_session";
/// The pre-session cookie the sign-in form's CSRF token is bound to.
pub const SIGN_IN_COOKIE: &str = "mcpsim_page_sign_in";
/// How long a page session lasts.
pub const SESSION_TTL_MS: u64 = 15 * 60 * 1000;
/// How long a sign-in form (its pre-session cookie) may be submitted after it was first shown.
pub const SIGN_IN_TTL_MS: u64 = 15 * 60 * 1000;
/// The label the page's keys are derived from the fleet's signing key ring with ([`KeyRing::derive`]).
pub const PAGE_KEY_LABEL: &str = "mcpsim out-of-band page sessions v1";
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

/// Where the page is served: what its links start with and what its `Host` and `Origin` checks require.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PageBase {
    /// `http://ADDR` of a loopback listener: `Host` must name a loopback host, `Origin` be `http://` + that Host.
    Loopback(String),
    /// A configured public URL (`serve --public-url`, as [`normalize_origin`] writes it): `Host` must name its
    /// host and port, `Origin` be exactly it.
    Public(String),
}

impl PageBase {
    /// What the page's URLs start with.
    pub fn url(&self) -> &str {
        match self {
            PageBase::Loopback(base) | PageBase::Public(base) => base,
        }
    }
}

/// The claims of a session cookie (its own type: it never opens as a pre-session cookie, nor as a state).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SessionClaims {
    signed_in: String,
    session_expires_at_ms: u64,
}

/// The claims of a pre-session cookie: a fresh random value, so each browser's sign-in tokens are its own.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SignInClaims {
    sign_in: String,
    sign_in_expires_at_ms: u64,
}

struct PageState {
    service: Arc<dyn Service>,
    tokens: Tokens,
    per_client: SignInThrottle,
    per_reference: SignInThrottle,
    /// Derived from the fleet's key ring with [`PAGE_KEY_LABEL`].
    keys: KeyRing,
    base: PageBase,
}

/// The page's routes for `service` (whose notes server issues URLs starting with `base`), sealing sessions
/// with `keys` (the fleet's ring derived with [`PAGE_KEY_LABEL`]) and proving principals with `tokens`,
/// allowing sign-in attempts at one per `sign_in_interval_ms` after their bursts ([`SIGN_IN_INTERVAL_MS`]
/// unless a test says otherwise). Merge it into the listener's router: every route checks `Host` and `Origin`
/// first.
pub fn page_router(service: Arc<dyn Service>, tokens: Tokens, keys: KeyRing, base: PageBase, sign_in_interval_ms: u64) -> Router {
    let base = match base {
        PageBase::Loopback(url) => PageBase::Loopback(url.trim_end_matches('/').to_string()),
        PageBase::Public(url) => PageBase::Public(url.trim_end_matches('/').to_string()),
    };
    let state = Arc::new(PageState {
        service,
        tokens,
        per_client: SignInThrottle::new(SIGN_IN_BURST_PER_CLIENT, sign_in_interval_ms),
        per_reference: SignInThrottle::new(SIGN_IN_BURST_PER_REFERENCE, sign_in_interval_ms),
        keys,
        base,
    });
    Router::new()
        .route("/connect/{reference}", get(show).post(submit))
        .route("/connect/{reference}/sign-in", post(sign_in))
        .layer(axum::middleware::from_fn_with_state(state.clone(), addressed_here))
        .with_state(state)
}

fn constant_time_eq(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

/// The value of the first cookie named `name` the request carries.
fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    let cookies = headers.get_all(header::COOKIE).iter().filter_map(|value| value.to_str().ok());
    cookies.flat_map(|line| line.split(';')).find_map(|pair| {
        let (found, value) = pair.trim().split_once('=')?;
        (found == name).then_some(value)
    })
}

impl PageState {
    fn url(&self, reference: &str) -> String {
        format!("{}{PAGE_PATH}{reference}", self.base.url())
    }

    fn set_cookie(&self, name: &str, value: &str, max_age_ms: u64) -> Option<HeaderValue> {
        let secure = if self.base.url().starts_with("https://") { "; Secure" } else { "" };
        let cookie = format!("{name}={value}; Path={PAGE_PATH}; HttpOnly; SameSite=Strict; Max-Age={}{secure}", max_age_ms / 1000);
        HeaderValue::from_str(&cookie).ok()
    }

    /// A session cookie's value for `principal`, sealed with the page's signing key.
    fn session_value(&self, principal: &str, now_ms: u64) -> String {
        let claims = SessionClaims { signed_in: principal.to_string(), session_expires_at_ms: now_ms.saturating_add(SESSION_TTL_MS) };
        self.keys.seal_claims(&claims)
    }

    /// The signed-in principal and the cookie's value, if the request carries a valid, unexpired session cookie.
    fn session(&self, headers: &HeaderMap, now_ms: u64) -> Option<(String, String)> {
        let value = cookie(headers, SESSION_COOKIE)?;
        let claims: SessionClaims = self.keys.verify_claims(value).ok()?;
        (claims.session_expires_at_ms > now_ms).then(|| (claims.signed_in, value.to_string()))
    }

    /// The request's valid, unexpired pre-session cookie, if it carries one.
    fn sign_in_cookie<'h>(&self, headers: &'h HeaderMap, now_ms: u64) -> Option<&'h str> {
        let value = cookie(headers, SIGN_IN_COOKIE)?;
        let claims: SignInClaims = self.keys.verify_claims(value).ok()?;
        (claims.sign_in_expires_at_ms > now_ms).then_some(value)
    }

    fn fresh_sign_in_cookie(&self, now_ms: u64) -> String {
        let claims = SignInClaims {
            sign_in: URL_SAFE_NO_PAD.encode(OsNonces.nonce()),
            sign_in_expires_at_ms: now_ms.saturating_add(SIGN_IN_TTL_MS),
        };
        self.keys.seal_claims(&claims)
    }

    /// A token bound to a sealed cookie and the page, under the key that sealed the cookie (so it verifies on
    /// every process, and after a rotation while that key is in the ring). `None` for a cookie of no key held.
    fn bound_token(&self, purpose: &str, sealed: &str, reference: &str) -> Option<String> {
        self.keys.tag(key_id_of(sealed)?, &[purpose, sealed, reference])
    }

    fn bound_token_matches(&self, purpose: &str, sealed: &str, reference: &str, given: Option<&String>) -> bool {
        match (given, self.bound_token(purpose, sealed, reference)) {
            (Some(given), Some(expected)) => constant_time_eq(given, &expected),
            _ => false,
        }
    }

    /// Why a request is not addressed to this page, if it is not: `(status, outcome, sentence)`.
    fn misaddressed(&self, request: &Request) -> Option<(u16, &'static str, String)> {
        let host = match target_and_host(request) {
            Ok(host) => host.to_str().unwrap_or("").trim().to_ascii_lowercase(),
            Err(refused) => {
                let says = refused.says();
                return Some((400, "bad_request", format!("{}{}.", says[..1].to_ascii_uppercase(), &says[1..])));
            }
        };
        let headers = request.headers();
        let origin = match &self.base {
            PageBase::Public(public) => {
                if !names_public_url(public, &host) {
                    return Some((403, "wrong_host", "This page is not served under that host name. Nothing was done.".into()));
                }
                public.clone()
            }
            PageBase::Loopback(_) => {
                let own = normalize_origin(&format!("http://{host}")).filter(|_| is_loopback_authority(&host));
                let Some(own) = own else {
                    return Some((
                        403,
                        "wrong_host",
                        "This page only answers requests addressed to this machine (localhost). Nothing was done.".into(),
                    ));
                };
                own
            }
        };
        let origins: Vec<&HeaderValue> = headers.get_all(header::ORIGIN).iter().collect();
        let same_origin = match origins.as_slice() {
            [] => true,
            [given] => given.to_str().ok().and_then(normalize_origin).is_some_and(|given| given == origin),
            _ => false,
        };
        if !same_origin {
            return Some((
                403,
                "foreign_origin",
                "This request came from another site (or from no site: Origin null). Nothing was done.".into(),
            ));
        }
        None
    }
}

/// Runs before every page route, before any body is read: the request must be addressed to this page.
async fn addressed_here(State(state): State<Arc<PageState>>, request: Request, next: Next) -> Response {
    match state.misaddressed(&request) {
        Some((status, outcome, says)) => html(status, outcome, "Not authorized", &says, ""),
        None => next.run(request).await,
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
    // `same-origin`, not `no-referrer`: under `no-referrer` a browser sends `Origin: null` with the page's own
    // form posts (Fetch, "serializing a request origin"), which the page refuses as any null origin; under
    // `same-origin` its own posts carry its origin, and no link's reference leaves in a Referer to another site.
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
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

/// The sign-in form of `reference`, its CSRF token bound to the pre-session cookie `sign_in_cookie`.
fn sign_in_form(state: &PageState, reference: &str, sign_in_cookie: &str) -> String {
    let csrf = state.bound_token("sign-in", sign_in_cookie, reference).unwrap_or_default();
    format!(
        "<form method=\"post\" action=\"{PAGE_PATH}{reference}/sign-in\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
         <label for=\"token\">Your access token</label>\
         <input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"off\" required><button id=\"sign-in\" type=\"submit\">Sign in</button></form>",
        reference = escape(reference),
        csrf = escape(&csrf),
    )
}

/// `page` with the sign-in form of `reference` in it: the request's pre-session cookie if it is valid, else a
/// fresh one, set on the response.
fn with_sign_in(state: &PageState, headers: &HeaderMap, reference: &str, now_ms: u64, page: impl FnOnce(String) -> Response) -> Response {
    let (sign_in_cookie, fresh) = match state.sign_in_cookie(headers, now_ms) {
        Some(value) => (value.to_string(), false),
        None => (state.fresh_sign_in_cookie(now_ms), true),
    };
    let mut response = page(sign_in_form(state, reference, &sign_in_cookie));
    if fresh {
        if let Some(cookie) = state.set_cookie(SIGN_IN_COOKIE, &sign_in_cookie, SIGN_IN_TTL_MS) {
            response.headers_mut().append(header::SET_COOKIE, cookie);
        }
    }
    response
}

fn sign_in_page(state: &PageState, headers: &HeaderMap, reference: &str, now_ms: u64, status: u16, says: &str) -> Response {
    with_sign_in(state, headers, reference, now_ms, |form| html(status, "sign_in", "Sign in to continue", says, &form))
}

async fn show(State(state): State<Arc<PageState>>, Path(reference): Path<String>, headers: HeaderMap) -> Response {
    let now_ms = SystemClock.now_ms();
    let Some((principal, session)) = state.session(&headers, now_ms) else {
        let says = "Sign in as yourself, with your own access token, to see what is asked of you.";
        return sign_in_page(&state, &headers, &reference, now_ms, 200, says);
    };
    let answer = state.service.page(&principal, &PageRequest { action: PageAction::Open, url: state.url(&reference) }).await;
    match answer.outcome {
        "ready" => {
            let form = format!(
                "<form method=\"post\" action=\"{PAGE_PATH}{reference}\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
                 <button id=\"authorize\" type=\"submit\">Authorize</button></form>",
                reference = escape(&reference),
                csrf = escape(&state.bound_token("csrf", &session, &reference).unwrap_or_default())
            );
            logged_as(answer_page(&answer, &form), &principal)
        }
        // Signed in as someone else (perhaps by another site's doing): the user can sign in as themselves here.
        "wrong_user" => {
            let page = with_sign_in(&state, &headers, &reference, now_ms, |form| {
                let answer = PageAnswer {
                    says: format!(
                        "{} This browser is signed in as {principal}. If you are not {principal}, sign in again as yourself.",
                        answer.says
                    ),
                    ..answer
                };
                answer_page(&answer, &form)
            });
            logged_as(page, &principal)
        }
        _ => logged_as(answer_page(&answer, ""), &principal),
    }
}

async fn sign_in(
    State(state): State<Arc<PageState>>,
    Path(reference): Path<String>,
    client: Option<Extension<ClientAddress>>,
    headers: HeaderMap,
    Form(form): Form<BTreeMap<String, String>>,
) -> Response {
    // Counted before anything is looked at (the form's CSRF binding, the token): a guess over the allowance
    // learns nothing, and a fresh form (a new pre-session cookie) for every guess does not reset it.
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
    let bound = state
        .sign_in_cookie(&headers, now_ms)
        .is_some_and(|sign_in_cookie| state.bound_token_matches("sign-in", sign_in_cookie, &reference, form.get("csrf")));
    if !bound {
        return html(
            403,
            "csrf",
            "Not authorized",
            "This sign-in did not come from this page's own form (its CSRF token is missing, wrong or expired). Nobody was signed in; open the link again to sign in.",
            "",
        );
    }
    let Some(principal) = form.get("token").and_then(|token| state.tokens.principal(token.trim())) else {
        return sign_in_page(
            &state,
            &headers,
            &reference,
            now_ms,
            401,
            "That token is not one this server knows. Nothing was done; try again.",
        );
    };
    let mut response = (StatusCode::SEE_OTHER, "").into_response();
    let location = format!("{PAGE_PATH}{}", escape(&reference));
    if let (Ok(location), Some(cookie)) =
        (HeaderValue::from_str(&location), state.set_cookie(SESSION_COOKIE, &state.session_value(principal, now_ms), SESSION_TTL_MS))
    {
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
    let Some((principal, session)) = state.session(&headers, now_ms) else {
        let says = "Your session has ended or was never started: sign in again. Nothing was authorized.";
        return sign_in_page(&state, &headers, &reference, now_ms, 401, says);
    };
    if !state.bound_token_matches("csrf", &session, &reference, form.get("csrf")) {
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

    fn state(keys: KeyRing) -> PageState {
        PageState {
            service: Arc::new(crate::assembly::demo_notes_server()),
            tokens: Tokens::default(),
            per_client: SignInThrottle::new(1, 1),
            per_reference: SignInThrottle::new(1, 1),
            keys,
            base: PageBase::Loopback("http://127.0.0.1:1".into()),
        }
    }

    #[test]
    fn sessions_verify_only_with_their_tag_and_before_expiry() {
        let ring = KeyRing::new("k1", vec![7; 32]).unwrap();
        let state = state(ring.derive(PAGE_KEY_LABEL));
        let value = state.session_value("alice", 1_000);
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, HeaderValue::from_str(&format!("other=1; {SESSION_COOKIE}={value}")).unwrap());
        assert_eq!(state.session(&headers, 1_000).map(|(who, _)| who), Some("alice".to_string()));
        assert!(state.session(&headers, 1_000 + SESSION_TTL_MS).is_none(), "expired");
        let parts: Vec<&str> = value.split('.').collect();
        let claims = String::from_utf8(URL_SAFE_NO_PAD.decode(parts[2]).unwrap()).unwrap();
        assert!(claims.contains("\"alice\""), "{claims}");
        let renamed = URL_SAFE_NO_PAD.encode(claims.replace("\"alice\"", "\"bob\""));
        let forged = [parts[0], parts[1], &renamed, parts[3]].join(".");
        headers.insert(header::COOKIE, HeaderValue::from_str(&format!("{SESSION_COOKIE}={forged}")).unwrap());
        assert!(state.session(&headers, 1_000).is_none(), "a renamed session fails its tag");
        let sign_in = state.fresh_sign_in_cookie(1_000);
        headers.insert(header::COOKIE, HeaderValue::from_str(&format!("{SESSION_COOKIE}={sign_in}")).unwrap());
        assert!(state.session(&headers, 1_000).is_none(), "a pre-session cookie is no session");
        headers.insert(header::COOKIE, HeaderValue::from_str(&format!("{SIGN_IN_COOKIE}={value}")).unwrap());
        assert!(state.sign_in_cookie(&headers, 1_000).is_none(), "nor a session a pre-session cookie");
        let raw = self::state(ring);
        headers.insert(header::COOKIE, HeaderValue::from_str(&format!("{SESSION_COOKIE}={}", raw.session_value("alice", 1_000))).unwrap());
        assert!(state.session(&headers, 1_000).is_none(), "a session sealed with the ring's own key is refused");
        assert_ne!(state.bound_token("csrf", &value, "r1"), state.bound_token("csrf", &value, "r2"), "a CSRF token is per page");
        assert_ne!(state.bound_token("csrf", &value, "r1"), state.bound_token("sign-in", &value, "r1"), "and per purpose");
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
