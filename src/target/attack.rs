//! `mcpsim attack --target FILE`: a battery of MRTR attacks that needs nothing but the target file. Each
//! attack runs on a fresh fleet (setup, every instance started), sends what an attacking or careless client
//! would, and judges the answers and the effect probe. A finding names the clause it breaks (the requirement
//! ids of the spec digest, `SPEC-…`, or a property of mcpsim's own where the spec says nothing) and prints
//! the exact messages that reproduce it, each with the instance it went to.
//!
//! Which instance mints the state and which ones the attack goes to next are drawn from the seed, per attack,
//! and logged with its messages. An attack that tests a rejection sends its attempt to the instance that
//! minted the state, so the refusal it sees comes from the check under attack and not from a fleet whose
//! instances cannot verify each other's states (that is what the replay, decline, cancel and retry-after-kill
//! attacks test, across instances). Every client sends the same `_meta` byte for byte (clientInfo and
//! capabilities): the other principal impersonates the victim, differing only in its credentials. A race is
//! tried `--race-tries` times, each on a fresh fleet whose instances have each answered a request first.

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
    /// A race: tried `--race-tries` times, each on a fresh, warmed fleet.
    pub race: bool,
}

/// The clientInfo every attacking client sends, whoever it authenticates as: the victim's `_meta` copied byte
/// for byte (a server that binds a state to the self-reported client is not told apart by it).
const CLIENT_NAME: &str = "mcpsim-client";

/// The rule a consumption finding breaks: MISSION.md §3's response branches.
const CANCEL_RULE: &str = "MISSION.md §3: cancel consumes nothing, the same state may be retried until it expires";
const INVALID_RULE: &str = "MISSION.md §3: validate before claiming the nonce, an invalid response consumes nothing";

/// One attack's result, with the messages that reproduce it.
pub struct AttackReport {
    pub name: &'static str,
    pub clause: &'static str,
    pub what: &'static str,
    pub verdict: Verdict,
    pub messages: Vec<String>,
    /// The instances the seed drew: the minting one first (`t2, t3, t1`).
    pub order: String,
}

/// What an attack drives: the fleet, one client per principal, the effect probe.
pub struct Attacker<'f, 't> {
    target: &'t Target,
    fleet: &'f mut Fleet<'t>,
    clients: BTreeMap<String, Client>,
    data_dir: &'f Path,
    mcpsim: &'f str,
    messages: Vec<String>,
    /// The fleet's instances in the order the seed drew them: `order[0]` mints the state.
    order: Vec<usize>,
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

    /// The instance that mints the state (drawn from the seed).
    fn mint(&self) -> usize {
        self.order[0]
    }

    /// The `k`-th other instance of the seed's order (wrapping around a small fleet).
    fn elsewhere(&self, k: usize) -> usize {
        self.order[k % self.order.len()]
    }

    /// Builds a request as `principal`'s client would (the shared `_meta`, the principal's next id).
    fn build(&mut self, principal: &str, method: &str, params: Value, notification: bool) -> Value {
        let client = self.clients.entry(principal.to_string()).or_insert_with(|| Client::new(CLIENT_NAME, form_capabilities()));
        client.request(method, params, notification).unwrap_or(Value::Null)
    }

    /// One request answered on every instance before a race (a cold process answers its first request
    /// slower, which would leave the race to whichever was warm).
    fn warm(&mut self) -> Result<(), Verdict> {
        let principal = self.principal();
        for to in 0..self.instances() {
            let request = self.build(&principal, "tools/list", json!({}), false);
            if self.send(to, &principal, request).is_none() {
                return Err(Verdict::Inconclusive(format!("{} did not answer tools/list while warming up", Fleet::instance_name(to))));
            }
        }
        Ok(())
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

    /// Round 1 of the tool, as its principal, on the minting instance.
    fn round1(&mut self) -> Result<Form, Verdict> {
        let to = self.mint();
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

/// After answers that must neither succeed nor consume anything (`refused`: what each was, its answer), the
/// valid accept on another instance must succeed, exactly once: its replay on a third must not, and the probe
/// must see one effect. `rule` is what a failed accept breaks.
/// A cancel is answered with a (non-error) refusal outcome: only invalid answers are judged not to succeed.
fn then_accept(a: &mut Attacker<'_, '_>, form: &Form, before: i64, refused: Vec<(String, Option<Value>)>, rule: &str) -> Verdict {
    let judged = if rule == CANCEL_RULE { &refused[..0] } else { &refused[..] };
    let succeeded_ones: Vec<String> =
        judged.iter().filter(|(_, r)| succeeded(r.as_ref())).map(|(what, r)| format!("{what} succeeded: {}", outcome(r))).collect();
    if !succeeded_ones.is_empty() {
        return Verdict::Broken(succeeded_ones.join("; "));
    }
    let between = attempt!(a.effects());
    if between != before {
        let what: Vec<&str> = refused.iter().map(|(what, _)| what.as_str()).collect();
        return Verdict::Broken(format!("{} caused {} effect(s)", what.join(", "), (before - between).abs()));
    }
    let principal = a.principal();
    let (to, again) = (a.elsewhere(1), a.elsewhere(2));
    let accept = a.answer(&principal, form, a.accept(), None, None);
    let accepted = a.send(to, &principal, accept);
    let what: Vec<&str> = refused.iter().map(|(what, _)| what.as_str()).collect();
    if !succeeded(accepted.as_ref()) {
        return Verdict::Broken(format!(
            "after {}, the valid accept on {} did not succeed: {} ({rule})",
            what.join(", "),
            Fleet::instance_name(to),
            outcome(&accepted)
        ));
    }
    let (replayed, effects) = attempt!(replay_fails(a, form, again, before));
    let answers: Vec<String> = refused.iter().map(|(what, r)| format!("{what}: {}", outcome(r))).collect();
    Verdict::Held(format!(
        "{}; then the valid accept on {}: {}; its replay on {}: {}; {effects} effect",
        answers.join("; "),
        Fleet::instance_name(to),
        outcome(&accepted),
        Fleet::instance_name(again),
        outcome(&replayed)
    ))
}

/// After the accept of `form` succeeded: its replay on `again` must not, and the probe must see at most one
/// effect since `before`. `Ok`: the replay's answer and the effects seen.
fn replay_fails(a: &mut Attacker<'_, '_>, form: &Form, again: usize, before: i64) -> Result<(Option<Value>, i64), Verdict> {
    let principal = a.principal();
    let replay = a.answer(&principal, form, a.accept(), None, None);
    let replayed = a.send(again, &principal, replay);
    let effects = (before - a.effects()?).abs();
    if succeeded(replayed.as_ref()) || effects > 1 {
        return Err(Verdict::Broken(format!(
            "the accept succeeded more than once: its replay on {}: {}; the effect probe saw {effects} effect(s) (SPEC-MRTR-8)",
            Fleet::instance_name(again),
            outcome(&replayed)
        )));
    }
    Ok((replayed, effects))
}

fn replay_sequential(a: &mut Attacker<'_, '_>) -> Verdict {
    let before = attempt!(a.effects());
    let form = attempt!(a.round1());
    let principal = a.principal();
    let accept = a.answer(&principal, &form, a.accept(), None, None);
    let first = a.send(a.elsewhere(1), &principal, accept);
    if !succeeded(first.as_ref()) {
        return Verdict::Inconclusive(format!("the honest accept did not succeed: {}", outcome(&first)));
    }
    let mut attempts = Vec::new();
    for to in a.order.clone() {
        let replay = a.answer(&principal, &form, a.accept(), None, None);
        let answer = a.send(to, &principal, replay);
        attempts.push((format!("the replay on {}", Fleet::instance_name(to)), answer));
    }
    match refused_all(a, before, 1, &attempts) {
        Verdict::Held(what) => match dishonest_replays(&attempts, true) {
            Some(finding) => Verdict::Broken(format!("after the accept on {} succeeded: {finding}", Fleet::instance_name(a.elsewhere(1)))),
            None => Verdict::Held(what),
        },
        other => other,
    }
}

/// The rule a replay of a used confirmation breaks when it says nothing was done.
const HONEST_RULE: &str = "honest-outcome, MISSION.md §3: the nonce was consumed by the accept that executed; a later answer to the \
     same state says so (state_consumed, or the same result), so a client that lost its answer learns the outcome by retrying";

/// Replays of a confirmation that executed (its accept succeeded) whose answers are not consistent with that
/// one execution: a refusal that says nothing was done (the item not found or gone), a used confirmation
/// reported declined, and (`form_too`: replays sent after the success was read) a fresh form
/// (`target::judge`'s reading of an answer). `None`: every replay was honest.
fn dishonest_replays(attempts: &[(String, Option<Value>)], form_too: bool) -> Option<String> {
    let dishonest: Vec<String> = attempts
        .iter()
        .filter_map(|(what, answer)| {
            let claim = super::judge::said(answer.as_ref()?).denial(form_too)?;
            Some(format!("{what} says {claim}: {}", outcome(answer)))
        })
        .collect();
    (!dishonest.is_empty()).then(|| format!("{} ({HONEST_RULE})", dishonest.join("; ")))
}

fn replay_concurrent(a: &mut Attacker<'_, '_>) -> Verdict {
    attempt!(a.warm());
    let before = attempt!(a.effects());
    let form = attempt!(a.round1());
    let principal = a.principal();
    let sends: Vec<(usize, String, Value, Option<RoutingHeaders>)> =
        a.order.clone().into_iter().map(|to| (to, principal.clone(), a.answer(&principal, &form, a.accept(), None, None), None)).collect();
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
    // The losers of the race: whichever ran first, the note was there until the winner deleted it, so none may
    // say it was not (a fresh form may have been asked before the winner ran: not judged here).
    let losers: Vec<(String, Option<Value>)> = a
        .order
        .iter()
        .zip(&answers)
        .filter(|(_, answer)| !succeeded(answer.as_ref()))
        .map(|(&to, answer)| (format!("the accept on {}", Fleet::instance_name(to)), answer.clone()))
        .collect();
    if let Some(finding) = dishonest_replays(&losers, false) {
        return Verdict::Broken(format!("1 of {} succeeded, {effects} effect; {finding}", answers.len()));
    }
    Verdict::Held(format!("1 of {} succeeded, {effects} effect", answers.len()))
}

fn another_principal(a: &mut Attacker<'_, '_>) -> Verdict {
    let Some(other) = a.target.file.tool.other_principal.clone() else {
        return Verdict::NotApplicable("the target file names no tool.other_principal".into());
    };
    let before = attempt!(a.effects());
    let form = attempt!(a.round1());
    let mut stolen = a.answer(&other, &form, a.accept(), None, None);
    // The victim's `_meta` byte for byte (clientInfo, capabilities): only the credentials differ.
    if let (Some(meta), Some(params)) = (form.request.pointer("/params/_meta").cloned(), stolen.get_mut("params")) {
        params["_meta"] = meta;
    }
    let answer = a.send(a.mint(), &other, stolen);
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
    let form = attempt!(a.round1());
    let principal = a.principal();
    let arguments = changed(&a.target.file.tool.arguments);
    let retry = a.answer(&principal, &form, a.accept(), Some(arguments), None);
    let answer = a.send(a.mint(), &principal, retry);
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
    let form = attempt!(a.round1());
    let Some(state) = crate::oracle::reading::text(&form.response, &["result", "requestState"]).map(str::to_string) else {
        return Verdict::NotApplicable("round 1 issued no requestState".into());
    };
    let principal = a.principal();
    let mut attempts = Vec::new();
    for (region, state) in tampered(&state, 8) {
        let retry = a.answer(&principal, &form, a.accept(), None, Some(Value::String(state)));
        let answer = a.send(a.mint(), &principal, retry);
        attempts.push((format!("the state tampered at {region}"), answer));
    }
    refused_all(a, before, 0, &attempts)
}

fn decline_then_accept(a: &mut Attacker<'_, '_>) -> Verdict {
    let before = attempt!(a.effects());
    let form = attempt!(a.round1());
    let principal = a.principal();
    let decline = a.answer(&principal, &form, FormAction::Decline, None, None);
    let declined = a.send(a.mint(), &principal, decline);
    if crate::oracle::reading::text(declined.as_ref().unwrap_or(&Value::Null), &["result", "resultType"]) == Some("input_required") {
        return Verdict::Broken(format!("the decline was answered with another form: {}", outcome(&declined)));
    }
    let accept = a.answer(&principal, &form, a.accept(), None, None);
    let answer = a.send(a.elsewhere(1), &principal, accept);
    refused_all(a, before, 0, &[("the accept after the decline".into(), answer)])
}

fn cancel_then_accept(a: &mut Attacker<'_, '_>) -> Verdict {
    let before = attempt!(a.effects());
    let form = attempt!(a.round1());
    let principal = a.principal();
    let cancel = a.answer(&principal, &form, FormAction::Cancel, None, None);
    let cancelled = a.send(a.mint(), &principal, cancel);
    if crate::oracle::reading::text(cancelled.as_ref().unwrap_or(&Value::Null), &["result", "resultType"]) == Some("input_required") {
        return Verdict::Broken(format!("the cancel was answered with another form: {}", outcome(&cancelled)));
    }
    then_accept(a, &form, before, vec![("the cancel".into(), cancelled)], CANCEL_RULE)
}

fn unpaired(a: &mut Attacker<'_, '_>) -> Verdict {
    let before = attempt!(a.effects());
    let form = attempt!(a.round1());
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
        let answer = a.send(a.mint(), &principal, message);
        attempts.push((what.to_string(), answer));
    }
    then_accept(a, &form, before, attempts, INVALID_RULE)
}

/// `accept` with every value of the wrong JSON type.
pub(crate) fn mistyped(accept: &Value) -> Value {
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

/// The schema round 1 asked its one question with (`inputRequests.KEY.params.requestedSchema`).
fn requested_schema(form: &Form) -> Option<&Value> {
    let requests = form.response.pointer("/result/inputRequests")?.as_object()?;
    requests.values().next()?.pointer("/params/requestedSchema")
}

/// `accept` without one field: the first the schema requires (else its first), or `None` when it has none.
pub(crate) fn missing_field(accept: &Value, schema: Option<&Value>) -> Option<(String, Value)> {
    let mut map = accept.as_object()?.clone();
    let required: Vec<&str> = schema
        .and_then(|s| s.get("required"))
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let key = required.iter().find(|k| map.contains_key(**k)).map(|k| k.to_string()).or_else(|| map.keys().next().cloned())?;
    map.remove(&key);
    Some((key, Value::Object(map)))
}

/// `accept` with a value the form never showed, in a field whose schema lists the candidates (`enum`, or
/// `oneOf` of `const`s): `None` when no field of the answer has a list.
pub(crate) fn not_shown(accept: &Value, schema: Option<&Value>) -> Option<(String, Value)> {
    let mut map = accept.as_object()?.clone();
    let properties = schema?.get("properties")?.as_object()?;
    let listed = |property: &Value| {
        property.get("enum").and_then(Value::as_array).is_some()
            || property.get("oneOf").and_then(Value::as_array).is_some_and(|o| o.iter().all(|v| v.get("const").is_some()))
    };
    let key = map.keys().find(|k| properties.get(*k).is_some_and(listed))?.clone();
    map.insert(key.clone(), json!("mcpsim-never-shown"));
    Some((key, Value::Object(map)))
}

/// One invalid answer on the minting instance, then the valid accept elsewhere (`then_accept`). `invalid`
/// builds it from the form (what it is, the message), or says why the attack does not apply.
fn invalid_then_accept(
    a: &mut Attacker<'_, '_>,
    invalid: impl FnOnce(&mut Attacker<'_, '_>, &Form) -> Result<(String, Value), Verdict>,
) -> Verdict {
    let before = attempt!(a.effects());
    let form = attempt!(a.round1());
    let principal = a.principal();
    let (what, message) = attempt!(invalid(a, &form));
    let refused = a.send(a.mint(), &principal, message);
    then_accept(a, &form, before, vec![(what, refused)], INVALID_RULE)
}

/// The retry accepting `form` with `content` instead of `tool.accept`.
fn accepting(a: &mut Attacker<'_, '_>, form: &Form, content: Value) -> Value {
    let principal = a.principal();
    a.answer(&principal, form, FormAction::Accept(Some(content)), None, None)
}

fn schema_mismatch(a: &mut Attacker<'_, '_>) -> Verdict {
    invalid_then_accept(a, |a, form| {
        let wrong = mistyped(&a.target.file.tool.accept);
        Ok(("an accept whose every field has the wrong type".into(), accepting(a, form, wrong)))
    })
}

fn missing_field_then_accept(a: &mut Attacker<'_, '_>) -> Verdict {
    invalid_then_accept(a, |a, form| {
        let (key, content) = missing_field(&a.target.file.tool.accept, requested_schema(form))
            .ok_or_else(|| Verdict::NotApplicable("tool.accept has no field to leave out".into()))?;
        Ok((format!("an accept without its field {key:?}"), accepting(a, form, content)))
    })
}

fn not_shown_then_accept(a: &mut Attacker<'_, '_>) -> Verdict {
    invalid_then_accept(a, |a, form| {
        let (key, content) = not_shown(&a.target.file.tool.accept, requested_schema(form))
            .ok_or_else(|| Verdict::NotApplicable("the form lists no candidates (enum) for any field of tool.accept".into()))?;
        Ok((format!("an accept choosing a {key} the form never showed"), accepting(a, form, content)))
    })
}

fn unasked_key_only_then_accept(a: &mut Attacker<'_, '_>) -> Verdict {
    invalid_then_accept(a, |a, form| {
        let principal = a.principal();
        let accept = a.accept();
        let mut retry = a.answer(&principal, form, accept, None, None);
        if let Some(responses) = retry.pointer_mut("/params/inputResponses").and_then(Value::as_object_mut) {
            let answered = responses.values().next().cloned().unwrap_or(Value::Null);
            responses.clear();
            responses.insert("mcpsim-unasked".into(), answered);
        }
        Ok(("inputResponses with an unasked key only (the asked one missing)".into(), retry))
    })
}

fn extra_response_keys(a: &mut Attacker<'_, '_>) -> Verdict {
    let before = attempt!(a.effects());
    let form = attempt!(a.round1());
    let principal = a.principal();
    let mut retry = a.answer(&principal, &form, a.accept(), None, None);
    if let Some(responses) = retry.pointer_mut("/params/inputResponses").and_then(Value::as_object_mut) {
        responses.insert("mcpsim-unasked".into(), json!({"action": "accept", "content": {}}));
    }
    let answer = a.send(a.mint(), &principal, retry);
    if !succeeded(answer.as_ref()) {
        return Verdict::Broken(format!("an accept with one unasked extra key did not succeed (SHOULD ignore it): {}", outcome(&answer)));
    }
    let (replayed, effects) = attempt!(replay_fails(a, &form, a.elsewhere(1), before));
    Verdict::Held(format!("the extra key was ignored: {}; its replay: {}; {effects} effect", outcome(&answer), outcome(&replayed)))
}

fn retry_after_kill(a: &mut Attacker<'_, '_>) -> Verdict {
    if a.instances() < 2 {
        return Verdict::NotApplicable("a fleet of one instance has nowhere else to retry".into());
    }
    let form = attempt!(a.round1());
    let (minted, to) = (a.mint(), a.elsewhere(1));
    let (minted_name, to_name) = (Fleet::instance_name(minted), Fleet::instance_name(to));
    a.fleet.crash(minted);
    a.messages.push(format!("  killed {minted_name} (SIGKILL)"));
    let principal = a.principal();
    let retry = a.answer(&principal, &form, a.accept(), None, None);
    let answer = a.send(to, &principal, retry);
    if let Err(why) = a.fleet.restart(minted) {
        return Verdict::Inconclusive(format!("{minted_name} could not be restarted: {why}"));
    }
    if succeeded(answer.as_ref()) {
        Verdict::Held(format!("{to_name} finished what the killed {minted_name} started: {}", outcome(&answer)))
    } else {
        Verdict::Broken(format!(
            "after the minting instance {minted_name} was killed, the accept on {to_name} failed: {}",
            outcome(&answer)
        ))
    }
}

fn missing_capability(a: &mut Attacker<'_, '_>) -> Verdict {
    let before = attempt!(a.effects());
    let principal = a.principal();
    let tool = &a.target.file.tool;
    let mut client = Client::new("attacker-no-elicitation", json!({}));
    let Ok(request) = client.request("tools/call", json!({"name": tool.name, "arguments": tool.arguments}), false) else {
        return Verdict::Inconclusive("the request could not be built".into());
    };
    let answer = a.send(a.mint(), &principal, request);
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
    let answer = a.send(a.mint(), &principal, request);
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
    let answer = a.send(a.mint(), &principal, request);
    match answer.as_ref().and_then(|r| r.pointer("/error/code")).and_then(Value::as_i64) {
        Some(-32602) => Verdict::Held(outcome(&answer)),
        _ => Verdict::Broken(format!("a request without _meta protocolVersion must get -32602: {}", outcome(&answer))),
    }
}

fn accept_as_notification(a: &mut Attacker<'_, '_>) -> Verdict {
    let before = attempt!(a.effects());
    let form = attempt!(a.round1());
    let principal = a.principal();
    let accept = a.answer(&principal, &form, a.accept(), None, None);
    let params = accept.get("params").cloned().unwrap_or(Value::Null);
    let notification = a.build(&principal, "tools/call", params, true);
    let answer = a.send(a.mint(), &principal, notification);
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
    let form = attempt!(a.round1());
    let principal = a.principal();
    let accept = a.answer(&principal, &form, a.accept(), None, None);
    let mut headers = RoutingHeaders::for_message(&accept);
    headers.name = Some("mcpsim-other-tool".into());
    let mismatched = a.send_all(vec![(a.mint(), principal.clone(), accept, Some(headers))]).pop().flatten();
    let retry = a.answer(&principal, &form, a.accept(), None, None);
    let mut headers = RoutingHeaders::for_message(&retry);
    headers.method = None;
    let missing = a.send_all(vec![(a.mint(), principal.clone(), retry, Some(headers))]).pop().flatten();
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
        race: false,
    },
    Attack {
        name: "replay-concurrent",
        clause: "SPEC-MRTR-8",
        what: "the accepted answer written to every warmed instance at once",
        run: replay_concurrent,
        race: true,
    },
    Attack {
        name: "another-principal",
        clause: "SPEC-MRTR-8(a)",
        what: "another principal, with the victim's _meta byte for byte, presents the state",
        run: another_principal,
        race: false,
    },
    Attack {
        name: "changed-arguments",
        clause: "SPEC-MRTR-8(c)",
        what: "the retry changes round 1's arguments",
        run: changed_arguments,
        race: false,
    },
    Attack {
        name: "tampered-state",
        clause: "SPEC-MRTR-7",
        what: "one character changed in each of 8 regions of the state",
        run: tampered_state,
        race: false,
    },
    Attack {
        name: "decline-then-accept",
        clause: "mcpsim refusal (GUARANTEES.md §4)",
        what: "a declined confirmation accepted on another instance",
        run: decline_then_accept,
        race: false,
    },
    Attack {
        name: "cancel-then-accept",
        clause: "MISSION.md §3, GUARANTEES.md §4.4",
        what: "a cancel consumes nothing: the accept then succeeds exactly once",
        run: cancel_then_accept,
        race: false,
    },
    Attack {
        name: "unpaired",
        clause: "SPEC-MRTR-15/17, MISSION.md §3",
        what: "requestState without inputResponses and the reverse; then the accept succeeds exactly once",
        run: unpaired,
        race: false,
    },
    Attack {
        name: "schema-mismatch",
        clause: "SPEC-MRTR-15, MISSION.md §3",
        what: "every answer field of the wrong type; then the accept succeeds exactly once",
        run: schema_mismatch,
        race: false,
    },
    Attack {
        name: "missing-field-then-accept",
        clause: "SPEC-MRTR-15, MISSION.md §3",
        what: "an answer without a required field; then the accept succeeds exactly once",
        run: missing_field_then_accept,
        race: false,
    },
    Attack {
        name: "not-shown-then-accept",
        clause: "SPEC-MRTR-7, MISSION.md §3",
        what: "a candidate the form never showed; then the accept succeeds exactly once",
        run: not_shown_then_accept,
        race: false,
    },
    Attack {
        name: "unasked-key-only-then-accept",
        clause: "SPEC-MRTR-17, MISSION.md §3",
        what: "inputResponses with an unasked key only; then the accept succeeds exactly once",
        run: unasked_key_only_then_accept,
        race: false,
    },
    Attack {
        name: "extra-response-keys",
        clause: "SPEC-MRTR-16 (SHOULD)",
        what: "an extra, unasked key beside the answer is ignored; its replay fails",
        run: extra_response_keys,
        race: false,
    },
    Attack {
        name: "retry-after-kill",
        clause: "statelessness",
        what: "the minting instance is SIGKILLed before the retry",
        run: retry_after_kill,
        race: false,
    },
    Attack {
        name: "missing-capability",
        clause: "SPEC-MRTR-6, SPEC-META-7",
        what: "round 1 from a client that declares no elicitation",
        run: missing_capability,
        race: false,
    },
    Attack {
        name: "unsupported-version",
        clause: "SPEC-META-6",
        what: "a request for protocol version 1900-01-01",
        run: unsupported_version,
        race: false,
    },
    Attack {
        name: "missing-protocol-version",
        clause: "SPEC-META-3",
        what: "_meta without protocolVersion",
        run: missing_meta,
        race: false,
    },
    Attack {
        name: "accept-as-notification",
        clause: "SPEC-MSG-5",
        what: "the accepted retry sent without an id",
        run: accept_as_notification,
        race: false,
    },
    Attack {
        name: "header-body-mismatch",
        clause: "SPEC-HTTP-11",
        what: "Mcp-Name differs from the body; Mcp-Method missing",
        run: header_body_mismatch,
        race: false,
    },
];

/// How a battery runs: its seed (which instance mints, where each attack goes next) and how often a race is
/// tried.
#[derive(Debug, Clone, Copy)]
pub struct BatteryOptions {
    pub seed: u64,
    pub race_tries: usize,
}

/// Default and most tries of a race attack (`--race-tries`).
pub const RACE_TRIES_DEFAULT: usize = 5;
pub const RACE_TRIES_MAX: usize = 100;

/// The fleet's `instances` in the order `seed` draws for the attack at `index` of the battery (its `try`):
/// the first mints the state.
pub fn instance_order(instances: usize, seed: u64, index: usize, attempt: usize) -> Vec<usize> {
    let mut rng = crate::sim::engine::random::stream(
        seed.wrapping_mul(1_000_003).wrapping_add((index as u64) << 16).wrapping_add(attempt as u64),
        crate::sim::engine::random::Stream::Scheduler,
    );
    let mut order: Vec<usize> = (0..instances).collect();
    for i in (1..order.len()).rev() {
        let j = crate::sim::engine::random::below(&mut rng, i as u64 + 1) as usize;
        order.swap(i, j);
    }
    order
}

fn order_text(order: &[usize]) -> String {
    order.iter().map(|&i| Fleet::instance_name(i)).collect::<Vec<_>>().join(", ")
}

/// One run of `attack` on a fresh fleet: its verdict and messages.
fn run_once(
    target: &Target,
    attack: &Attack,
    order: Vec<usize>,
    mcpsim: &str,
    data_dir: &Path,
) -> Result<(Verdict, Vec<String>), super::RunError> {
    let _ = std::fs::remove_dir_all(data_dir);
    super::create_private_dir(data_dir)?;
    let mut fleet = Fleet::start(target, data_dir, mcpsim)?;
    let first = format!("  instances drawn from the seed, the minting one first: {}", order_text(&order));
    let mut attacker = Attacker { target, fleet: &mut fleet, clients: BTreeMap::new(), data_dir, mcpsim, messages: vec![first], order };
    let verdict = (attack.run)(&mut attacker);
    let messages = std::mem::take(&mut attacker.messages);
    drop(fleet);
    let _ = std::fs::remove_dir_all(data_dir);
    Ok((verdict, messages))
}

/// Runs the battery (or the attacks named in `only`), each on a fresh fleet; a race once per try.
pub fn run_battery(
    target: &Target,
    only: &[String],
    options: BatteryOptions,
    mcpsim: &str,
    work_dir: &Path,
) -> Result<Vec<AttackReport>, super::RunError> {
    let mut reports = Vec::new();
    let instances = target.file.instances;
    for (index, attack) in ATTACKS.iter().enumerate().filter(|(_, a)| only.is_empty() || only.iter().any(|o| o == a.name)) {
        let data_dir = work_dir.join(attack.name);
        let tries = if attack.race { options.race_tries.clamp(1, RACE_TRIES_MAX) } else { 1 };
        let mut runs = Vec::new();
        for attempt in 0..tries {
            let order = instance_order(instances, options.seed, index, attempt);
            let (verdict, messages) = run_once(target, attack, order.clone(), mcpsim, &data_dir)?;
            runs.push((order, verdict, messages));
        }
        let found = runs.iter().filter(|(_, v, _)| matches!(v, Verdict::Broken(_))).count();
        let judged = runs.iter().filter(|(_, v, _)| matches!(v, Verdict::Held(_) | Verdict::Broken(_))).count();
        // The run shown: the first finding, else the first that could not be judged, else the first.
        let shown_at = runs
            .iter()
            .position(|(_, v, _)| matches!(v, Verdict::Broken(_)))
            .or_else(|| runs.iter().position(|(_, v, _)| matches!(v, Verdict::Inconclusive(_))).filter(|_| judged == 0))
            .unwrap_or(0);
        let (order, verdict, messages) = runs.swap_remove(shown_at);
        let verdict = match verdict {
            Verdict::Broken(what) if tries > 1 => {
                Verdict::Broken(format!("found in {found} of {tries} tries; try {}: {what}", shown_at + 1))
            }
            Verdict::Held(what) if tries > 1 => Verdict::Held(format!("held in {judged} of {tries} tries; {what}")),
            other => other,
        };
        reports.push(AttackReport {
            name: attack.name,
            clause: attack.clause,
            what: attack.what,
            verdict,
            messages,
            order: order_text(&order),
        });
    }
    Ok(reports)
}

/// The battery's report as text: one line per attack, and each finding's reproduction.
pub fn render(target: &Target, reports: &[AttackReport], options: BatteryOptions) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# mcpsim attack: {} ({}), {} instance(s) over {}, seed {} (each attack's minting instance first), races tried {} time(s)",
        super::shown(&target.file.name),
        super::shown(&target.path.display().to_string()),
        target.file.instances,
        target.file.transport.as_str(),
        options.seed,
        options.race_tries.clamp(1, RACE_TRIES_MAX)
    );
    for report in reports {
        let (mark, detail) = match &report.verdict {
            Verdict::Held(what) => ("ok", what.clone()),
            Verdict::Broken(what) => ("FINDING", what.clone()),
            Verdict::Inconclusive(why) => ("INCONCLUSIVE", why.clone()),
            Verdict::NotApplicable(why) => ("n/a", why.clone()),
        };
        let _ = writeln!(
            out,
            "{mark:<12} {:<28} {:<34} [{}] {}: {}",
            report.name,
            report.clause,
            report.order,
            report.what,
            super::shown(&detail)
        );
    }
    for report in reports.iter().filter(|r| matches!(r.verdict, Verdict::Broken(_) | Verdict::Inconclusive(_))) {
        let _ = writeln!(
            out,
            "\n## {} ({}): reproduction, every message as sent (mcpsim attack --target {} --only {} --seed {})",
            report.name,
            report.clause,
            super::shown(&target.path.display().to_string()),
            report.name,
            options.seed
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
    fn invalid_answers_leave_out_a_required_field_or_choose_an_unlisted_candidate() {
        let schema = json!({"properties": {"note_id": {"type": "string", "enum": ["note-3", "note-7"]}, "confirm": {"type": "boolean"}},
                            "required": ["confirm", "note_id"]});
        let accept = json!({"note_id": "note-7", "confirm": true});
        assert_eq!(missing_field(&accept, Some(&schema)), Some(("confirm".into(), json!({"note_id": "note-7"}))));
        assert_eq!(missing_field(&accept, None), Some(("confirm".into(), json!({"note_id": "note-7"}))));
        assert_eq!(missing_field(&json!({}), None), None);
        assert_eq!(not_shown(&accept, Some(&schema)), Some(("note_id".into(), json!({"note_id": "mcpsim-never-shown", "confirm": true}))));
        assert_eq!(not_shown(&json!({"confirm": true}), Some(&schema)), None);
    }

    #[test]
    fn each_attack_draws_its_own_instance_order_from_the_seed_and_the_same_seed_draws_it_again() {
        let orders: Vec<Vec<usize>> = (0..ATTACKS.len()).map(|i| instance_order(3, 1, i, 0)).collect();
        for order in &orders {
            let mut sorted = order.clone();
            sorted.sort();
            assert_eq!(sorted, vec![0, 1, 2]);
        }
        assert!(orders.iter().any(|o| o[0] != 0), "not every attack mints on t1: {orders:?}");
        assert_eq!(orders, (0..ATTACKS.len()).map(|i| instance_order(3, 1, i, 0)).collect::<Vec<_>>());
        assert_ne!(orders, (0..ATTACKS.len()).map(|i| instance_order(3, 2, i, 0)).collect::<Vec<_>>());
    }

    #[test]
    fn changed_arguments_differ_and_mistyped_answers_have_other_types() {
        assert_eq!(changed(&json!({"n": 1, "title": "T"})), json!({"n": 1, "title": "T (changed)"}));
        assert_eq!(changed(&json!({"n": 1})), json!({"n": 1, "mcpsimChanged": true}));
        assert_eq!(mistyped(&json!({"confirm": true, "note_id": "n"})), json!({"confirm": "yes", "note_id": 12345}));
    }
}
