//! `mcpsim attack --target FILE`: a battery of MRTR attacks that needs nothing but the target file. Each
//! attack runs on a fresh fleet (setup, every instance started), sends what an attacking or careless client
//! would, and judges the answers and the effect probe. A finding names the clause it breaks (the requirement
//! ids of the spec digest, `SPEC-…`, or a property of mcpsim's own where the spec says nothing) and prints
//! the exact messages that reproduce it, each with the instance it went to.
//!
//! An attack that tests a rejection sends its attempt to the instance that minted the state, so the refusal
//! it sees comes from the check under attack and not from a fleet whose instances cannot verify each other's
//! states (that is what the replay, decline, cancel and retry-after-kill attacks test, across instances).

use super::file::{Target, Transport};
use super::fleet::Fleet;
use super::{probe, succeeded};
use crate::oracle::outcome::Observed;
use crate::play::client::{answer_params, Client, FormAction};
use crate::play::world::Outgoing;
use crate::wire::headers::RoutingHeaders;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::Path;

/// How one attack went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The server did what the clause asks.
    Held(String),
    /// It did not: a finding.
    Broken(String),
    /// The attack could not be judged (the honest flow it builds on did not work); says why.
    Inconclusive(String),
    /// The target file does not give what the attack needs.
    NotApplicable(String),
}

/// One attack of the battery.
pub struct Attack {
    pub name: &'static str,
    pub clause: &'static str,
    pub what: &'static str,
    run: fn(&mut Attacker<'_, '_>) -> Verdict,
}

/// One attack's result, with the messages that reproduce it.
pub struct AttackReport {
    pub name: &'static str,
    pub clause: &'static str,
    pub what: &'static str,
    pub verdict: Verdict,
    pub messages: Vec<String>,
}

/// What an attack drives: the fleet, one client per principal, the effect probe.
pub struct Attacker<'f, 't> {
    target: &'t Target,
    fleet: &'f mut Fleet<'t>,
    clients: BTreeMap<String, Client>,
    data_dir: &'f Path,
    mcpsim: &'f str,
    messages: Vec<String>,
}

/// A form as round 1 answered it: the request and its response.
#[derive(Clone)]
struct Form {
    request: Value,
    response: Value,
}

fn form_capabilities() -> Value {
    json!({"elicitation": {"form": {}}})
}

impl Attacker<'_, '_> {
    fn instances(&self) -> usize {
        self.fleet.len()
    }

    fn principal(&self) -> String {
        self.target.file.tool.principal.clone()
    }

    /// Builds a request as `principal`'s client would (its `_meta`, the next id).
    fn build(&mut self, principal: &str, method: &str, params: Value, notification: bool) -> Value {
        let client = self
            .clients
            .entry(principal.to_string())
            .or_insert_with(|| Client::new(&format!("attacker-{principal}"), principal, form_capabilities()));
        client.request(method, params, notification).unwrap_or(Value::Null)
    }

    /// Sends messages at once (written in the order given), each to its instance as its principal, with the
    /// routing headers a conforming client derives unless `headers` are given.
    fn send_all(&mut self, sends: Vec<(usize, String, Value, Option<RoutingHeaders>)>) -> Vec<Option<Value>> {
        let batch: Vec<(usize, String, Outgoing)> = sends
            .into_iter()
            .map(|(to, principal, value, headers)| {
                let notification = value.get("id").is_none();
                let headers_written = headers.is_some();
                let outgoing = Outgoing {
                    client: 0,
                    instance: to,
                    headers: headers.unwrap_or_else(|| RoutingHeaders::for_message(&value)),
                    raw: None,
                    value: Some(value),
                    notification,
                    headers_written,
                    step: 0,
                    name: None,
                };
                let shown = if headers_written { format!(" with headers {:?}", outgoing.headers.pairs()) } else { String::new() };
                self.messages.push(format!(
                    "→ {} as {principal}{shown}: {}",
                    Fleet::instance_name(to),
                    String::from_utf8_lossy(&outgoing.bytes())
                ));
                (to, principal, outgoing)
            })
            .collect();
        let answers = self.fleet.exchange_all(&batch);
        answers
            .into_iter()
            .zip(&batch)
            .map(|(answer, (to, _, _))| match answer {
                Ok(Some(value)) => {
                    self.messages.push(format!("← {}: {value}", Fleet::instance_name(*to)));
                    Some(value)
                }
                Ok(None) => {
                    self.messages.push(format!("← {}: nothing (a notification)", Fleet::instance_name(*to)));
                    None
                }
                Err(lost) => {
                    self.messages.push(format!("← {}: no answer: {}", Fleet::instance_name(*to), lost.message));
                    None
                }
            })
            .collect()
    }

    fn send(&mut self, to: usize, principal: &str, value: Value) -> Option<Value> {
        self.send_all(vec![(to, principal.to_string(), value, None)]).pop().flatten()
    }

    /// Round 1 of the tool, as its principal, on `to`.
    fn round1(&mut self, to: usize) -> Result<Form, Verdict> {
        let principal = self.principal();
        let tool = &self.target.file.tool;
        let params = json!({"name": tool.name, "arguments": tool.arguments});
        let request = self.build(&principal, "tools/call", params, false);
        let response = self.send(to, &principal, request.clone()).ok_or_else(|| Verdict::Inconclusive("round 1 got no answer".into()))?;
        if crate::oracle::reading::text(&response, &["result", "resultType"]) != Some("input_required") {
            return Err(Verdict::Inconclusive(format!("round 1 did not ask for input: {}", Observed::read(&response))));
        }
        Ok(Form { request, response })
    }

    /// The retry answering `form`, as `principal`, with `action` (and replaced arguments or state).
    fn answer(&mut self, principal: &str, form: &Form, action: FormAction, arguments: Option<Value>, state: Option<Value>) -> Value {
        match answer_params(&form.request, &form.response, &action, arguments, state) {
            Ok((method, params)) => self.build(principal, &method, params, false),
            Err(_) => Value::Null,
        }
    }

    fn accept(&self) -> FormAction {
        FormAction::Accept(Some(self.target.file.tool.accept.clone()))
    }

    fn effects(&mut self) -> Result<i64, Verdict> {
        probe(self.target, self.fleet, self.data_dir, self.mcpsim)
            .map_err(|why| Verdict::Inconclusive(format!("the effect probe failed: {why}")))
    }
}

fn outcome(response: &Option<Value>) -> String {
    match response {
        Some(value) => Observed::read(value).to_string(),
        None => "no answer".into(),
    }
}

/// An attack's honest flow ends in `Err(verdict)` early when it cannot be judged.
macro_rules! attempt {
    ($e:expr) => {
        match $e {
            Ok(value) => value,
            Err(verdict) => return verdict,
        }
    };
}

/// Judges attempts that must not succeed, and the effects they may have caused (`allowed` of them).
fn refused_all(a: &mut Attacker<'_, '_>, before: i64, allowed: i64, attempts: &[(String, Option<Value>)]) -> Verdict {
    let after = attempt!(a.effects());
    let succeeded_ones: Vec<String> =
        attempts.iter().filter(|(_, r)| succeeded(r.as_ref())).map(|(what, r)| format!("{what} succeeded: {}", outcome(r))).collect();
    let effects = (before - after).abs();
    if !succeeded_ones.is_empty() {
        return Verdict::Broken(succeeded_ones.join("; "));
    }
    if effects > allowed {
        return Verdict::Broken(format!("the effect probe saw {effects} effect(s), {allowed} allowed ({before} before, {after} after)"));
    }
    let answers: Vec<String> = attempts.iter().map(|(what, r)| format!("{what}: {}", outcome(r))).collect();
    Verdict::Held(answers.join("; "))
}

fn replay_sequential(a: &mut Attacker<'_, '_>) -> Verdict {
    let before = attempt!(a.effects());
    let form = attempt!(a.round1(0));
    let principal = a.principal();
    let accept = a.answer(&principal, &form, a.accept(), None, None);
    let first = a.send(1 % a.instances(), &principal, accept);
    if !succeeded(first.as_ref()) {
        return Verdict::Inconclusive(format!("the honest accept did not succeed: {}", outcome(&first)));
    }
    let mut attempts = Vec::new();
    for to in 0..a.instances() {
        let replay = a.answer(&principal, &form, a.accept(), None, None);
        let answer = a.send(to, &principal, replay);
        attempts.push((format!("the replay on {}", Fleet::instance_name(to)), answer));
    }
    refused_all(a, before, 1, &attempts)
}

fn replay_concurrent(a: &mut Attacker<'_, '_>) -> Verdict {
    let before = attempt!(a.effects());
    let form = attempt!(a.round1(0));
    let principal = a.principal();
    let sends: Vec<(usize, String, Value, Option<RoutingHeaders>)> =
        (0..a.instances()).map(|to| (to, principal.clone(), a.answer(&principal, &form, a.accept(), None, None), None)).collect();
    let answers = a.send_all(sends);
    let after = attempt!(a.effects());
    let wins = answers.iter().filter(|r| succeeded(r.as_ref())).count();
    let effects = (before - after).abs();
    if wins > 1 || effects > 1 {
        return Verdict::Broken(format!(
            "{wins} of {} concurrent accepts succeeded; the effect probe saw {effects} effect(s)",
            answers.len()
        ));
    }
    if wins == 0 {
        return Verdict::Inconclusive("none of the concurrent accepts succeeded".into());
    }
    Verdict::Held(format!("1 of {} succeeded, {effects} effect", answers.len()))
}

fn another_principal(a: &mut Attacker<'_, '_>) -> Verdict {
    let Some(other) = a.target.file.tool.other_principal.clone() else {
        return Verdict::NotApplicable("the target file names no tool.other_principal".into());
    };
    let before = attempt!(a.effects());
    let form = attempt!(a.round1(0));
    let stolen = a.answer(&other, &form, a.accept(), None, None);
    let answer = a.send(0, &other, stolen);
    refused_all(a, before, 0, &[(format!("{other}'s accept of the state issued to {}", a.principal()), answer)])
}

/// The arguments with their first string value changed (or one key added when none is a string).
fn changed(arguments: &Value) -> Value {
    let mut map = arguments.as_object().cloned().unwrap_or_default();
    let key = map.iter().find(|(_, v)| v.is_string()).map(|(k, _)| k.clone());
    match key {
        Some(key) => {
            let value = format!("{} (changed)", map[&key].as_str().unwrap_or(""));
            map.insert(key, Value::String(value));
        }
        None => {
            map.insert("mcpsimChanged".into(), json!(true));
        }
    }
    Value::Object(map)
}

fn changed_arguments(a: &mut Attacker<'_, '_>) -> Verdict {
    let before = attempt!(a.effects());
    let form = attempt!(a.round1(0));
    let principal = a.principal();
    let arguments = changed(&a.target.file.tool.arguments);
    let retry = a.answer(&principal, &form, a.accept(), Some(arguments), None);
    let answer = a.send(0, &principal, retry);
    refused_all(a, before, 0, &[("the accept with changed arguments".into(), answer)])
}

/// `state` with one character replaced in each of `regions` regions (a character of the same alphabet).
pub fn tampered(state: &str, regions: usize) -> Vec<(String, String)> {
    let chars: Vec<char> = state.chars().collect();
    if chars.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for region in 0..regions {
        let at = (region * chars.len() / regions + chars.len() / (2 * regions)).min(chars.len() - 1);
        let mut copy = chars.clone();
        copy[at] = match copy[at] {
            'A' => 'B',
            '0'..='8' | 'a'..='y' | 'B'..='Y' => char::from(copy[at] as u8 + 1),
            _ => 'A',
        };
        out.push((format!("byte {at} of {} (region {} of {regions})", chars.len(), region + 1), copy.into_iter().collect()));
    }
    out
}

fn tampered_state(a: &mut Attacker<'_, '_>) -> Verdict {
    let before = attempt!(a.effects());
    let form = attempt!(a.round1(0));
    let Some(state) = crate::oracle::reading::text(&form.response, &["result", "requestState"]).map(str::to_string) else {
        return Verdict::NotApplicable("round 1 issued no requestState".into());
    };
    let principal = a.principal();
    let mut attempts = Vec::new();
    for (region, state) in tampered(&state, 8) {
        let retry = a.answer(&principal, &form, a.accept(), None, Some(Value::String(state)));
        let answer = a.send(0, &principal, retry);
        attempts.push((format!("the state tampered at {region}"), answer));
    }
    refused_all(a, before, 0, &attempts)
}

fn decline_then_accept(a: &mut Attacker<'_, '_>) -> Verdict {
    let before = attempt!(a.effects());
    let form = attempt!(a.round1(0));
    let principal = a.principal();
    let decline = a.answer(&principal, &form, FormAction::Decline, None, None);
    let declined = a.send(0, &principal, decline);
    if crate::oracle::reading::text(declined.as_ref().unwrap_or(&Value::Null), &["result", "resultType"]) == Some("input_required") {
        return Verdict::Broken(format!("the decline was answered with another form: {}", outcome(&declined)));
    }
    let accept = a.answer(&principal, &form, a.accept(), None, None);
    let answer = a.send(1 % a.instances(), &principal, accept);
    refused_all(a, before, 0, &[("the accept after the decline".into(), answer)])
}

fn cancel_then_accept(a: &mut Attacker<'_, '_>) -> Verdict {
    let before = attempt!(a.effects());
    let form = attempt!(a.round1(0));
    let principal = a.principal();
    let cancel = a.answer(&principal, &form, FormAction::Cancel, None, None);
    let cancelled = a.send(0, &principal, cancel);
    if crate::oracle::reading::text(cancelled.as_ref().unwrap_or(&Value::Null), &["result", "resultType"]) == Some("input_required") {
        return Verdict::Broken(format!("the cancel was answered with another form: {}", outcome(&cancelled)));
    }
    let between = attempt!(a.effects());
    if between != before {
        return Verdict::Broken(format!("the cancel caused {} effect(s)", (before - between).abs()));
    }
    let accept = a.answer(&principal, &form, a.accept(), None, None);
    let accepted = a.send(1 % a.instances(), &principal, accept);
    let replay = a.answer(&principal, &form, a.accept(), None, None);
    let replayed = a.send(2 % a.instances(), &principal, replay);
    let after = attempt!(a.effects());
    let wins = [&accepted, &replayed].iter().filter(|r| succeeded(r.as_ref())).count();
    if wins > 1 || (before - after).abs() > 1 {
        return Verdict::Broken(format!(
            "after the cancel, {wins} accepts succeeded and the probe saw {} effect(s)",
            (before - after).abs()
        ));
    }
    Verdict::Held(format!(
        "the cancel: {}; the accept after it: {}; its replay: {}",
        outcome(&cancelled),
        outcome(&accepted),
        outcome(&replayed)
    ))
}

fn unpaired(a: &mut Attacker<'_, '_>) -> Verdict {
    let before = attempt!(a.effects());
    let form = attempt!(a.round1(0));
    let principal = a.principal();
    let complete = a.answer(&principal, &form, a.accept(), None, None);
    let mut attempts = Vec::new();
    for (what, drop) in [("requestState without inputResponses", "inputResponses"), ("inputResponses without requestState", "requestState")]
    {
        let mut message = complete.clone();
        if let Some(params) = message.get_mut("params").and_then(Value::as_object_mut) {
            params.remove(drop);
        }
        let message = a.build(&principal, "tools/call", message["params"].clone(), false);
        let answer = a.send(0, &principal, message);
        attempts.push((what.to_string(), answer));
    }
    refused_all(a, before, 0, &attempts)
}

/// `accept` with every value of the wrong JSON type.
fn mistyped(accept: &Value) -> Value {
    let map: Map<String, Value> = accept
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    let wrong = match v {
                        Value::String(_) => json!(12345),
                        Value::Bool(_) => json!("yes"),
                        Value::Number(_) => json!("not a number"),
                        _ => json!(true),
                    };
                    (k.clone(), wrong)
                })
                .collect()
        })
        .unwrap_or_default();
    Value::Object(map)
}

fn schema_mismatch(a: &mut Attacker<'_, '_>) -> Verdict {
    let before = attempt!(a.effects());
    let form = attempt!(a.round1(0));
    let principal = a.principal();
    let wrong = mistyped(&a.target.file.tool.accept);
    let retry = a.answer(&principal, &form, FormAction::Accept(Some(wrong)), None, None);
    let answer = a.send(0, &principal, retry);
    refused_all(a, before, 0, &[("an accept whose every field has the wrong type".into(), answer)])
}

fn extra_response_keys(a: &mut Attacker<'_, '_>) -> Verdict {
    let before = attempt!(a.effects());
    let form = attempt!(a.round1(0));
    let principal = a.principal();
    let mut retry = a.answer(&principal, &form, a.accept(), None, None);
    if let Some(responses) = retry.pointer_mut("/params/inputResponses").and_then(Value::as_object_mut) {
        responses.insert("mcpsim-unasked".into(), json!({"action": "accept", "content": {}}));
    }
    let answer = a.send(0, &principal, retry);
    let after = attempt!(a.effects());
    if !succeeded(answer.as_ref()) {
        return Verdict::Broken(format!("an accept with one unasked extra key did not succeed (SHOULD ignore it): {}", outcome(&answer)));
    }
    Verdict::Held(format!("the extra key was ignored: {}; {} effect", outcome(&answer), (before - after).abs()))
}

fn retry_after_kill(a: &mut Attacker<'_, '_>) -> Verdict {
    if a.instances() < 2 {
        return Verdict::NotApplicable("a fleet of one instance has nowhere else to retry".into());
    }
    let form = attempt!(a.round1(0));
    a.fleet.crash(0);
    a.messages.push("  killed t1 (SIGKILL)".into());
    let principal = a.principal();
    let retry = a.answer(&principal, &form, a.accept(), None, None);
    let answer = a.send(1, &principal, retry);
    if let Err(why) = a.fleet.restart(0) {
        return Verdict::Inconclusive(format!("t1 could not be restarted: {why}"));
    }
    if succeeded(answer.as_ref()) {
        Verdict::Held(format!("t2 finished what the killed t1 started: {}", outcome(&answer)))
    } else {
        Verdict::Broken(format!("after the minting instance was killed, the accept on t2 failed: {}", outcome(&answer)))
    }
}

fn missing_capability(a: &mut Attacker<'_, '_>) -> Verdict {
    let before = attempt!(a.effects());
    let principal = a.principal();
    let tool = &a.target.file.tool;
    let mut client = Client::new("attacker-no-elicitation", &principal, json!({}));
    let Ok(request) = client.request("tools/call", json!({"name": tool.name, "arguments": tool.arguments}), false) else {
        return Verdict::Inconclusive("the request could not be built".into());
    };
    let answer = a.send(0, &principal, request);
    let after = attempt!(a.effects());
    let response = answer.clone().unwrap_or(Value::Null);
    let asks = response
        .pointer("/result/inputRequests")
        .and_then(Value::as_object)
        .is_some_and(|r| r.values().any(|q| q.get("method").and_then(Value::as_str) == Some("elicitation/create")));
    if asks {
        return Verdict::Broken(format!("it asked for elicitation the request did not declare: {}", outcome(&answer)));
    }
    if before != after {
        return Verdict::Broken(format!("without a way to ask, it acted anyway ({} effect(s))", (before - after).abs()));
    }
    let code = response.pointer("/error/code").and_then(Value::as_i64);
    let required = response.pointer("/error/data/requiredCapabilities");
    match (code, required) {
        (Some(-32021), Some(Value::Object(_))) => Verdict::Held(outcome(&answer)),
        (Some(-32021), _) => Verdict::Broken(format!("-32021 without data.requiredCapabilities as an object: {}", outcome(&answer))),
        _ => Verdict::Broken(format!("expected -32021 with data.requiredCapabilities: {}", outcome(&answer))),
    }
}

fn unsupported_version(a: &mut Attacker<'_, '_>) -> Verdict {
    let principal = a.principal();
    let tool = &a.target.file.tool;
    let meta =
        json!({"io.modelcontextprotocol/protocolVersion": "1900-01-01", "io.modelcontextprotocol/clientCapabilities": form_capabilities()});
    let request = a.build(&principal, "tools/call", json!({"name": tool.name, "arguments": tool.arguments, "_meta": meta}), false);
    let answer = a.send(0, &principal, request);
    let response = answer.clone().unwrap_or(Value::Null);
    let code = response.pointer("/error/code").and_then(Value::as_i64);
    let supported = response
        .pointer("/error/data/supported")
        .and_then(Value::as_array)
        .is_some_and(|s| !s.is_empty() && s.iter().all(Value::is_string));
    let requested = response.pointer("/error/data/requested").and_then(Value::as_str) == Some("1900-01-01");
    if code == Some(-32022) && supported && requested {
        Verdict::Held(outcome(&answer))
    } else {
        Verdict::Broken(format!(
            "expected -32022 with data.supported (strings) and data.requested \"1900-01-01\": {}",
            super::full(&answer)
        ))
    }
}

fn missing_meta(a: &mut Attacker<'_, '_>) -> Verdict {
    let principal = a.principal();
    let tool = &a.target.file.tool;
    let meta = json!({"io.modelcontextprotocol/clientCapabilities": form_capabilities()});
    let request = a.build(&principal, "tools/call", json!({"name": tool.name, "arguments": tool.arguments, "_meta": meta}), false);
    let answer = a.send(0, &principal, request);
    match answer.as_ref().and_then(|r| r.pointer("/error/code")).and_then(Value::as_i64) {
        Some(-32602) => Verdict::Held(outcome(&answer)),
        _ => Verdict::Broken(format!("a request without _meta protocolVersion must get -32602: {}", outcome(&answer))),
    }
}

fn accept_as_notification(a: &mut Attacker<'_, '_>) -> Verdict {
    let before = attempt!(a.effects());
    let form = attempt!(a.round1(0));
    let principal = a.principal();
    let accept = a.answer(&principal, &form, a.accept(), None, None);
    let params = accept.get("params").cloned().unwrap_or(Value::Null);
    let notification = a.build(&principal, "tools/call", params, true);
    let answer = a.send(0, &principal, notification);
    let after = attempt!(a.effects());
    if answer.is_some() && a.target.file.transport == Transport::Stdio {
        return Verdict::Broken(format!("a notification was answered: {}", outcome(&answer)));
    }
    if before != after {
        return Verdict::Broken(format!(
            "the accept sent as a notification (no id, so no answer could say what happened) caused {} effect(s)",
            (before - after).abs()
        ));
    }
    Verdict::Held("no answer and no effect".into())
}

fn header_body_mismatch(a: &mut Attacker<'_, '_>) -> Verdict {
    if a.target.file.transport != Transport::Http {
        return Verdict::NotApplicable("HTTP only".into());
    }
    let before = attempt!(a.effects());
    let form = attempt!(a.round1(0));
    let principal = a.principal();
    let accept = a.answer(&principal, &form, a.accept(), None, None);
    let mut headers = RoutingHeaders::for_message(&accept);
    headers.name = Some("mcpsim-other-tool".into());
    let mismatched = a.send_all(vec![(0, principal.clone(), accept, Some(headers))]).pop().flatten();
    let retry = a.answer(&principal, &form, a.accept(), None, None);
    let mut headers = RoutingHeaders::for_message(&retry);
    headers.method = None;
    let missing = a.send_all(vec![(0, principal.clone(), retry, Some(headers))]).pop().flatten();
    let after = attempt!(a.effects());
    let code = |r: &Option<Value>| r.as_ref().and_then(|r| r.pointer("/error/code")).and_then(Value::as_i64);
    if before != after {
        return Verdict::Broken(format!("a request whose headers disagree with its body acted ({} effect(s))", (before - after).abs()));
    }
    match (code(&mismatched), code(&missing)) {
        (Some(-32020), Some(-32020)) => Verdict::Held("both refused with -32020".into()),
        _ => Verdict::Broken(format!(
            "expected -32020 for an Mcp-Name that differs from the body ({}) and for a missing Mcp-Method ({})",
            outcome(&mismatched),
            outcome(&missing)
        )),
    }
}

/// The battery, in the order it runs.
pub const ATTACKS: &[Attack] = &[
    Attack {
        name: "replay-sequential",
        clause: "SPEC-MRTR-8",
        what: "an accepted answer replayed on every instance, one after another",
        run: replay_sequential,
    },
    Attack {
        name: "replay-concurrent",
        clause: "SPEC-MRTR-8",
        what: "the accepted answer written to every instance at once",
        run: replay_concurrent,
    },
    Attack { name: "another-principal", clause: "SPEC-MRTR-8(a)", what: "another principal presents the state", run: another_principal },
    Attack { name: "changed-arguments", clause: "SPEC-MRTR-8(c)", what: "the retry changes round 1's arguments", run: changed_arguments },
    Attack {
        name: "tampered-state",
        clause: "SPEC-MRTR-7",
        what: "one character changed in each of 8 regions of the state",
        run: tampered_state,
    },
    Attack {
        name: "decline-then-accept",
        clause: "mcpsim refusal (GUARANTEES.md §4)",
        what: "a declined confirmation accepted on another instance",
        run: decline_then_accept,
    },
    Attack {
        name: "cancel-then-accept",
        clause: "mcpsim refusal (GUARANTEES.md §4)",
        what: "a cancel causes nothing; the confirmation then succeeds at most once",
        run: cancel_then_accept,
    },
    Attack {
        name: "unpaired",
        clause: "SPEC-MRTR-15, SPEC-MRTR-17",
        what: "requestState without inputResponses, and inputResponses without requestState",
        run: unpaired,
    },
    Attack {
        name: "schema-mismatch",
        clause: "SPEC-MRTR-15",
        what: "an accept whose answers do not match the schema asked",
        run: schema_mismatch,
    },
    Attack {
        name: "extra-response-keys",
        clause: "SPEC-MRTR-16",
        what: "an extra, unasked key in inputResponses is ignored",
        run: extra_response_keys,
    },
    Attack {
        name: "retry-after-kill",
        clause: "statelessness",
        what: "the minting instance is SIGKILLed before the retry",
        run: retry_after_kill,
    },
    Attack {
        name: "missing-capability",
        clause: "SPEC-MRTR-6, SPEC-META-7",
        what: "round 1 from a client that declares no elicitation",
        run: missing_capability,
    },
    Attack {
        name: "unsupported-version",
        clause: "SPEC-META-6",
        what: "a request for protocol version 1900-01-01",
        run: unsupported_version,
    },
    Attack { name: "missing-protocol-version", clause: "SPEC-META-3", what: "_meta without protocolVersion", run: missing_meta },
    Attack {
        name: "accept-as-notification",
        clause: "SPEC-MSG-5",
        what: "the accepted retry sent without an id",
        run: accept_as_notification,
    },
    Attack {
        name: "header-body-mismatch",
        clause: "SPEC-HTTP-11",
        what: "Mcp-Name differs from the body; Mcp-Method missing",
        run: header_body_mismatch,
    },
];

/// Runs the battery (or the attacks named in `only`), each on a fresh fleet.
pub fn run_battery(target: &Target, only: &[String], mcpsim: &str, work_dir: &Path) -> Result<Vec<AttackReport>, String> {
    let mut reports = Vec::new();
    for attack in ATTACKS.iter().filter(|a| only.is_empty() || only.iter().any(|o| o == a.name)) {
        let data_dir = work_dir.join(attack.name);
        let _ = std::fs::remove_dir_all(&data_dir);
        super::create_private_dir(&data_dir)?;
        let mut fleet = Fleet::start(target, &data_dir, mcpsim)?;
        let mut attacker =
            Attacker { target, fleet: &mut fleet, clients: BTreeMap::new(), data_dir: &data_dir, mcpsim, messages: Vec::new() };
        let verdict = (attack.run)(&mut attacker);
        let messages = std::mem::take(&mut attacker.messages);
        drop(fleet);
        let _ = std::fs::remove_dir_all(&data_dir);
        reports.push(AttackReport { name: attack.name, clause: attack.clause, what: attack.what, verdict, messages });
    }
    Ok(reports)
}

/// The battery's report as text: one line per attack, and each finding's reproduction.
pub fn render(target: &Target, reports: &[AttackReport]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# mcpsim attack: {} ({}), {} instance(s) over {}",
        super::shown(&target.file.name),
        super::shown(&target.path.display().to_string()),
        target.file.instances,
        target.file.transport.as_str()
    );
    for report in reports {
        let (mark, detail) = match &report.verdict {
            Verdict::Held(what) => ("ok", what.clone()),
            Verdict::Broken(what) => ("FINDING", what.clone()),
            Verdict::Inconclusive(why) => ("INCONCLUSIVE", why.clone()),
            Verdict::NotApplicable(why) => ("n/a", why.clone()),
        };
        let _ = writeln!(out, "{mark:<12} {:<26} {:<34} {}: {}", report.name, report.clause, report.what, super::shown(&detail));
    }
    for report in reports.iter().filter(|r| matches!(r.verdict, Verdict::Broken(_) | Verdict::Inconclusive(_))) {
        let _ = writeln!(
            out,
            "\n## {} ({}): reproduction, every message as sent (mcpsim attack --target {} --only {})",
            report.name,
            report.clause,
            super::shown(&target.path.display().to_string()),
            report.name
        );
        for message in &report.messages {
            let _ = writeln!(out, "  {}", super::shown(message));
        }
    }
    let findings = reports.iter().filter(|r| matches!(r.verdict, Verdict::Broken(_))).count();
    let inconclusive = reports.iter().filter(|r| matches!(r.verdict, Verdict::Inconclusive(_))).count();
    let held = reports.iter().filter(|r| matches!(r.verdict, Verdict::Held(_))).count();
    let _ = writeln!(
        out,
        "\n{} attack(s): {held} held, {findings} finding(s), {inconclusive} inconclusive, {} not applicable",
        reports.len(),
        reports.len() - held - findings - inconclusive
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tampering_changes_one_character_in_each_region_and_never_leaves_it_as_it_was() {
        let state = "s1.k-1.abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_";
        let variants = tampered(state, 8);
        assert_eq!(variants.len(), 8);
        let mut positions = Vec::new();
        for (_, variant) in &variants {
            assert_eq!(variant.len(), state.len());
            let differing: Vec<usize> =
                state.chars().zip(variant.chars()).enumerate().filter(|(_, (a, b))| a != b).map(|(i, _)| i).collect();
            assert_eq!(differing.len(), 1, "{variant}");
            positions.push(differing[0]);
        }
        positions.dedup();
        assert_eq!(positions.len(), 8, "every region is hit: {positions:?}");
        assert!(positions[0] < state.len() / 8 && positions[7] >= 7 * state.len() / 8, "{positions:?}");
    }

    #[test]
    fn changed_arguments_differ_and_mistyped_answers_have_other_types() {
        assert_eq!(changed(&json!({"n": 1, "title": "T"})), json!({"n": 1, "title": "T (changed)"}));
        assert_eq!(changed(&json!({"n": 1})), json!({"n": 1, "mcpsimChanged": true}));
        assert_eq!(mistyped(&json!({"confirm": true, "note_id": "n"})), json!({"confirm": "yes", "note_id": 12345}));
    }
}
