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

use crate::framework::out_of_band::{PageAction, PageAnswer, PageRequest};
use crate::framework::ports::Clock;
use crate::framework::Service;
use crate::servers::notes::publish::PAGE_PATH;
use crate::stores::system::SystemClock;
use crate::transport::http::Tokens;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
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

struct PageState {
    service: Arc<dyn Service>,
    tokens: Tokens,
    key: Vec<u8>,
    /// `http://HOST:PORT`: what the URLs this listener's server issues start with.
    base: String,
}

/// The page's routes for `service` (whose notes server issues URLs starting with `base`), signing sessions
/// with `key` and proving principals with `tokens`. Merge it into the listener's router.
pub fn page_router(service: Arc<dyn Service>, tokens: Tokens, key: Vec<u8>, base: String) -> Router {
    let state = Arc::new(PageState { service, tokens, key, base: base.trim_end_matches('/').to_string() });
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
    answer_page(&answer, &form)
}

async fn sign_in(
    State(state): State<Arc<PageState>>,
    Path(reference): Path<String>,
    headers: HeaderMap,
    Form(form): Form<BTreeMap<String, String>>,
) -> Response {
    if state.foreign_origin(&headers) {
        return html(403, "foreign_origin", "Not authorized", "This sign-in was posted from another site. Nothing was done.", "");
    }
    let Some(principal) = form.get("token").and_then(|token| state.tokens.principal(token.trim())) else {
        return sign_in_page(&reference, 401, "That token is not one this server knows. Nothing was done; try again.");
    };
    let cookie = format!(
        "{SESSION_COOKIE}={}; Path={PAGE_PATH}; HttpOnly; SameSite=Strict; Max-Age={}",
        state.session_value(principal, SystemClock.now_ms()),
        SESSION_TTL_MS / 1000
    );
    let mut response = (StatusCode::SEE_OTHER, "").into_response();
    let location = format!("{PAGE_PATH}{}", escape(&reference));
    if let (Ok(location), Ok(cookie)) = (HeaderValue::from_str(&location), HeaderValue::from_str(&cookie)) {
        response.headers_mut().insert(header::LOCATION, location);
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
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
    answer_page(&answer, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_verify_only_with_their_tag_and_before_expiry() {
        let state = PageState {
            service: Arc::new(crate::assembly::demo_notes_server()),
            tokens: Tokens::default(),
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
}
