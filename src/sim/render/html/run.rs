//! The page of one run: a timeline with one lane per actor and one row per transcript entry, the inspector
//! (each message's exact JSON and its decoded `requestState`), every check where it was judged, and the
//! confirmations the run went through.

use super::conversations::Conversations;
use super::state::{states_in, RunKeys, StateView};
use super::{Shell, RUN_JS};
use crate::oracle::check::{self, Property};
use crate::oracle::history::{Attempt, History};
use crate::scenario::Scenario;
use crate::sim::engine::faults::{Fault, FaultKind, StoreName};
use crate::sim::engine::message::{ActorId, OperationId};
use crate::sim::render::transcript::{Entry, Kind, Message};
use crate::sim::runner::{FailureKind, RunReport};
use askama::Template;
use serde_json::Value;
use std::collections::BTreeMap;

/// Width of one actor's lane in the timeline.
const LANE_PX: usize = 136;
/// Height of one timeline row's drawing.
const ROW_PX: usize = 30;
/// Conversation colours (CSS classes `c0` … `c7`); an eighth confirmation reuses the first colour.
const COLOURS: usize = 8;
/// Longest label drawn on an arrow, in characters (the inspector has the rest).
const LABEL_CHARS_MAX: usize = 64;
/// Width of one character of a label (11px monospace), rounded up.
const LABEL_CHAR_PX: usize = 7;

/// What a run page shows besides the run itself.
pub struct RunInput<'a> {
    pub report: &'a RunReport,
    pub scenario: &'a Scenario,
    /// The one-line command that reproduces the run.
    pub reproduce: &'a str,
    /// What ran: `the real server`, `mutant NAME`.
    pub server: &'a str,
    pub faults_on: &'a [FaultKind],
    /// A link to the page this one belongs to (an index, an exploration): its address and its text.
    pub up: Option<(&'a str, &'a str)>,
    /// One more sentence under the title (e.g. what a shrunk counterexample is).
    pub note: Option<&'a str>,
}

struct Lane {
    name: String,
    x: usize,
}

enum Row {
    Step { id: String, number: usize, line: usize, text: String, classes: &'static str },
    Substep { line: usize, text: String },
    Message(MessageRow),
    Marker(MarkerRow),
    Check { id: String, text: String, failure: Option<String> },
    Note { text: String },
}

struct MessageRow {
    id: String,
    /// The delivery's sequence number, empty for a dropped message.
    seq: String,
    time_ms: u64,
    classes: String,
    label: String,
    title: String,
    line: (usize, usize),
    head: String,
    cross: Option<usize>,
    label_x: usize,
    /// `middle`, or `start`/`end` where a centred label would leave the drawing.
    label_anchor: &'static str,
    raced: bool,
    /// The property that first broke at this delivery.
    breaking: Option<&'static str>,
}

struct MarkerRow {
    classes: String,
    time_ms: u64,
    text: String,
    /// Lanes it concerns (their x); none: the whole run.
    marks: Vec<usize>,
    glyph: &'static str,
}

struct Detail {
    id: String,
    heading: String,
    from: String,
    to: String,
    kind: &'static str,
    summary: String,
    dropped: Option<String>,
    in_flight: usize,
    conversation: Option<(usize, String)>,
    role: Option<String>,
    operation: Option<String>,
    states: Vec<StateView>,
    json: String,
    exact: Option<String>,
}

struct CheckView {
    id: String,
    text: String,
    failure: Option<String>,
    after_step: Option<usize>,
}

struct ConversationView {
    number: usize,
    colour: String,
    principal: String,
    tool: String,
    nonce: String,
    members: Vec<(String, String)>,
}

#[derive(Template)]
#[template(path = "run.html")]
struct RunTemplate<'a> {
    shell: Shell,
    scenario: &'a str,
    seed: u64,
    scheduler: &'a str,
    server: &'a str,
    faults_on: String,
    reproduce: &'a str,
    up: Option<(&'a str, &'a str)>,
    note: Option<&'a str>,
    /// The scenario's opening comment (the lesson it teaches), as paragraphs.
    lesson: Vec<String>,
    passed: bool,
    failures: Vec<String>,
    lanes: Vec<Lane>,
    width: usize,
    height: usize,
    messages: usize,
    rows: Vec<Row>,
    details: Vec<Detail>,
    checks: Vec<CheckView>,
    conversations: Vec<ConversationView>,
}

/// The page of one run.
pub fn run_page(input: &RunInput<'_>) -> String {
    let report = input.report;
    let transcript = &report.transcript;
    let keys = RunKeys::of(input.scenario, &report.decisions.faults);
    let lanes = lanes(transcript);
    let lane_x: BTreeMap<ActorId, usize> = lanes.iter().map(|(actor, lane)| (*actor, lane.x)).collect();
    let name = |actor: ActorId| transcript.actors.get(actor).cloned().unwrap_or_else(|| "?".into());
    let width = lanes.len().max(1) * LANE_PX;
    let conversations = Conversations::of(report);
    let breaking = breaking_deliveries(report);

    let mut rows = Vec::new();
    let mut details = Vec::new();
    let mut checks = Vec::new();
    let mut members: BTreeMap<usize, Vec<(String, String)>> = BTreeMap::new();
    let mut dropped_count = 0;
    let mut current_step: Option<usize> = None;
    // Row index of each step, to mark the ones where something failed.
    let mut step_rows: BTreeMap<usize, usize> = BTreeMap::new();
    let mut failing_steps = Vec::new();
    for entry in &transcript.entries {
        match entry {
            Entry::Step { number, line, text } => {
                current_step = Some(*number);
                step_rows.insert(*number, rows.len());
                rows.push(Row::Step {
                    id: format!("step-{number}"),
                    number: *number,
                    line: *line,
                    text: text.clone(),
                    classes: "row step",
                });
            }
            Entry::Substep { line, text } => rows.push(Row::Substep { line: *line, text: text.clone() }),
            Entry::Delivery { seq, time_ms, from, to, message, cause, in_flight } => {
                let id = format!("m{seq}");
                let property = breaking.get(seq).copied();
                if property.is_some() {
                    failing_steps.extend(current_step);
                }
                let view = MessageView::new(&id, message, *cause, &conversations);
                rows.push(Row::Message(view.row(&lane_x, width, *from, *to, seq.to_string(), *time_ms, None, *in_flight, property)));
                details.push(view.detail(
                    format!("delivery {seq} at +{time_ms}ms"),
                    name(*from),
                    name(*to),
                    None,
                    *in_flight,
                    report,
                    &keys,
                ));
                if let (Some(number), false) = (view.conversation, matches!(message.kind, Kind::Call | Kind::Return)) {
                    members.entry(number).or_default().push((id, view.role.clone().unwrap_or_else(|| message.summary())));
                }
            }
            Entry::Dropped { time_ms, from, to, message, reason, cause } => {
                dropped_count += 1;
                let id = format!("x{dropped_count}");
                let view = MessageView::new(&id, message, *cause, &conversations);
                rows.push(Row::Message(view.row(&lane_x, width, *from, *to, String::new(), *time_ms, Some(reason), 0, None)));
                details.push(view.detail(
                    format!("dropped at +{time_ms}ms"),
                    name(*from),
                    name(*to),
                    Some(reason.clone()),
                    0,
                    report,
                    &keys,
                ));
                if let (Some(number), false) = (view.conversation, matches!(message.kind, Kind::Call | Kind::Return)) {
                    let role = view.role.clone().unwrap_or_else(|| message.summary());
                    members.entry(number).or_default().push((id, format!("{role} (dropped)")));
                }
            }
            Entry::Event { time_ms, actor, text } => rows.push(Row::Marker(MarkerRow {
                classes: "marker event".into(),
                time_ms: *time_ms,
                text: text.clone(),
                marks: actor.and_then(|a| lane_x.get(&a).copied()).into_iter().collect(),
                glyph: "●",
            })),
            Entry::Fault { time_ms, fault, text } => rows.push(Row::Marker(MarkerRow {
                classes: format!("marker fault fault-{}", fault.kind().as_str()),
                time_ms: *time_ms,
                text: text.clone(),
                marks: fault_lanes(fault, transcript, &lane_x),
                glyph: "⚡",
            })),
            Entry::Check { text, failure, .. } => {
                let id = format!("check-{}", checks.len() + 1);
                if failure.is_some() {
                    failing_steps.extend(current_step);
                }
                checks.push(CheckView { id: id.clone(), text: text.clone(), failure: failure.clone(), after_step: current_step });
                rows.push(Row::Check { id, text: text.clone(), failure: failure.clone() });
            }
            Entry::Note { text } => rows.push(Row::Note { text: text.clone() }),
        }
    }
    for number in failing_steps {
        if let Some(Row::Step { classes, .. }) = step_rows.get(&number).and_then(|row| rows.get_mut(*row)) {
            *classes = "row step failing";
        }
    }
    let conversation_views = conversations
        .list
        .iter()
        .enumerate()
        .map(|(index, c)| ConversationView {
            number: index + 1,
            colour: colour(index + 1),
            principal: c.principal.clone(),
            tool: c.tool.clone(),
            nonce: c.nonce.clone(),
            members: members.remove(&(index + 1)).unwrap_or_default(),
        })
        .collect();
    let faults_on = if input.faults_on.is_empty() {
        "none".to_string()
    } else {
        input.faults_on.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", ")
    };
    let page = RunTemplate {
        shell: Shell::new(format!("mcpsim: {} seed {}", transcript.scenario, transcript.seed), Some(RUN_JS)),
        scenario: &transcript.scenario,
        seed: transcript.seed,
        scheduler: &transcript.scheduler,
        server: input.server,
        faults_on,
        reproduce: input.reproduce,
        up: input.up,
        note: input.note,
        lesson: paragraphs(&input.scenario.summary),
        passed: report.failures.is_empty(),
        failures: report.failures.iter().map(ToString::to_string).collect(),
        lanes: lanes.into_iter().map(|(_, lane)| lane).collect(),
        width,
        height: ROW_PX,
        messages: details.len(),
        rows,
        details,
        checks,
        conversations: conversation_views,
    };
    page.render().expect("the run page renders")
}

/// Comment lines as paragraphs: consecutive lines joined, a blank line ending a paragraph.
fn paragraphs(lines: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut open = false;
    for line in lines {
        if line.is_empty() {
            open = false;
        } else if open {
            let last = out.last_mut().expect("an open paragraph exists");
            last.push(' ');
            last.push_str(line);
        } else {
            out.push(line.clone());
            open = true;
        }
    }
    out
}

fn colour(conversation: usize) -> String {
    format!("c{}", (conversation - 1) % COLOURS)
}

/// The actors that take part, in the diagrams' order (clients, admin, instances, backends, stores).
fn lanes(transcript: &crate::sim::render::transcript::Transcript) -> Vec<(ActorId, Lane)> {
    let used = transcript.actors_used();
    let order: Vec<ActorId> =
        if transcript.diagram_order.is_empty() { (0..transcript.actors.len()).collect() } else { transcript.diagram_order.clone() };
    order
        .into_iter()
        .filter(|actor| used.get(*actor).copied().unwrap_or(false))
        .enumerate()
        .map(|(index, actor)| (actor, Lane { name: transcript.actors[actor].clone(), x: index * LANE_PX + LANE_PX / 2 }))
        .collect()
}

/// The lanes a fault concerns: the instance it crashes or skews, the store it slows, every instance a key
/// rotation reaches; none for faults on one message (the message's own row follows).
fn fault_lanes(fault: &Fault, transcript: &crate::sim::render::transcript::Transcript, lane_x: &BTreeMap<ActorId, usize>) -> Vec<usize> {
    let by_name = |name: &str| transcript.actors.iter().position(|a| a == name).and_then(|actor| lane_x.get(&actor).copied());
    match fault {
        // Instances are the first actors, in declaration order.
        Fault::Crash { instance, .. } | Fault::ClockSkew { instance, .. } => lane_x.get(instance).copied().into_iter().collect(),
        Fault::SlowStore { store: StoreName::Notes, .. } | Fault::StoreUnavailable { store: StoreName::Notes, .. } => {
            by_name(crate::scenario::model::NOTE_STORE).into_iter().collect()
        }
        Fault::SlowStore { store: StoreName::Replay, .. } | Fault::StoreUnavailable { store: StoreName::Replay, .. } => {
            by_name(crate::scenario::model::REPLAY_STORE).into_iter().collect()
        }
        Fault::RotateKey { .. } => {
            // The instances are the actors before the note store.
            let instances = transcript.actors.iter().position(|a| a == crate::scenario::model::NOTE_STORE).unwrap_or(0);
            (0..instances).filter_map(|actor| lane_x.get(&actor).copied()).collect()
        }
        Fault::Drop { .. } | Fault::Duplicate { .. } | Fault::Delay { .. } => Vec::new(),
    }
}

/// A message with what the page knows about it.
struct MessageView<'m> {
    id: String,
    message: &'m Message,
    cause: Option<OperationId>,
    conversation: Option<usize>,
    role: Option<String>,
}

impl<'m> MessageView<'m> {
    fn new(id: &str, message: &'m Message, cause: Option<OperationId>, conversations: &Conversations) -> MessageView<'m> {
        let conversation = cause.and_then(|op| conversations.of_operation.get(op.0).copied().flatten());
        let role = cause.and_then(|op| conversations.role(op, message));
        MessageView { id: id.to_string(), message, cause, conversation, role }
    }

    #[allow(clippy::too_many_arguments)]
    fn row(
        &self,
        lane_x: &BTreeMap<ActorId, usize>,
        width: usize,
        from: ActorId,
        to: ActorId,
        seq: String,
        time_ms: u64,
        dropped: Option<&String>,
        in_flight: usize,
        breaking: Option<&'static str>,
    ) -> MessageRow {
        let x1 = lane_x.get(&from).copied().unwrap_or(LANE_PX / 2);
        let mut x2 = lane_x.get(&to).copied().unwrap_or(LANE_PX / 2);
        if x2 == x1 {
            x2 = x1 + LANE_PX / 3;
        }
        let y = ROW_PX - 8;
        let summary = self.message.summary();
        // Requests say which round they are; a response that carries a form says so.
        let full = match (&self.role, self.message.kind) {
            (Some(role), Kind::Request | Kind::Notify) => format!("{role} · {summary}"),
            (Some(_), Kind::Response) if summary.starts_with("input_required") => format!("form · {summary}"),
            _ => summary,
        };
        let (line, head, cross) = match dropped {
            Some(_) => {
                let middle = (x1 + x2) / 2;
                ((x1, middle), String::new(), Some(middle))
            }
            None if x2 > x1 => ((x1, x2 - 7), format!("{},{y} {},{} {},{}", x2 - 1, x2 - 9, y - 4, x2 - 9, y + 4), None),
            None => ((x1, x2 + 7), format!("{},{y} {},{} {},{}", x2 + 1, x2 + 9, y - 4, x2 + 9, y + 4), None),
        };
        let mut classes = format!("row msg {}", self.message.kind.as_str());
        match self.conversation {
            Some(number) => classes.push_str(&format!(" {}", colour(number))),
            None => classes.push_str(" plain"),
        }
        if dropped.is_some() {
            classes.push_str(" dropped");
        }
        if breaking.is_some() {
            classes.push_str(" breaking");
        }
        let title = match dropped {
            Some(reason) => format!("dropped ({reason}): {full}"),
            None => full.clone(),
        };
        let label = shorten(&full, LABEL_CHARS_MAX);
        let (label_x, label_anchor) = label_position((x1 + x2) / 2, label.chars().count(), width);
        MessageRow {
            id: self.id.clone(),
            seq,
            time_ms,
            classes,
            label,
            title,
            line,
            head,
            cross,
            label_x,
            label_anchor,
            raced: in_flight > 1,
            breaking,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn detail(
        &self,
        heading: String,
        from: String,
        to: String,
        dropped: Option<String>,
        in_flight: usize,
        report: &RunReport,
        keys: &RunKeys,
    ) -> Detail {
        let value = self.message.value();
        let json = serde_json::to_string_pretty(&*value).expect("a JSON value serializes");
        Detail {
            id: self.id.clone(),
            heading,
            from,
            to,
            kind: self.message.kind.as_str(),
            summary: self.message.summary(),
            dropped,
            in_flight,
            conversation: self.conversation.map(|number| (number, colour(number))),
            role: self.role.clone(),
            operation: self.cause.map(|op| operation_label(&report.history, op)),
            states: states_in(&value, keys),
            json,
            exact: self.message.exact.clone(),
        }
    }
}

/// Where a label of `chars` characters centred on `centre` fits inside a drawing `width` wide.
fn label_position(centre: usize, chars: usize, width: usize) -> (usize, &'static str) {
    let half = chars * LABEL_CHAR_PX / 2;
    if centre < half + 2 {
        (2, "start")
    } else if centre + half + 2 > width {
        (width - 2, "end")
    } else {
        (centre, "middle")
    }
}

fn shorten(text: &str, chars: usize) -> String {
    if text.chars().count() <= chars {
        return text.to_string();
    }
    let kept: String = text.chars().take(chars - 1).collect();
    format!("{kept}…")
}

/// "alice's request id 2 to i1 (retry 1)".
fn operation_label(history: &History, id: OperationId) -> String {
    let Some(op) = history.operations().get(id.0) else { return format!("operation {}", id.0) };
    let request_id = op.request_value.as_ref().and_then(|v| v.get("id")).map(Value::to_string);
    let what = match request_id {
        Some(request_id) => format!("{}'s request id {request_id} to {}", op.client, op.instance),
        None => format!("{}'s notification to {}", op.client, op.instance),
    };
    match history.attempts().get(&id) {
        Some(Attempt::Retry { number, .. }) => format!("{what} (retry {number})"),
        Some(Attempt::Duplicate { .. }) => format!("{what} (a copy the network made)"),
        None => what,
    }
}

/// For each safety property the run broke, the delivery at which it first broke: the smallest delivery `d`
/// whose history prefix (effects and answers up to `d`) the checker already finds in violation of it. The
/// checker itself decides; the page only asks it about prefixes.
fn breaking_deliveries(report: &RunReport) -> BTreeMap<usize, &'static str> {
    let mut broken: Vec<Property> = report
        .failures
        .iter()
        .filter_map(|f| match f.kind {
            FailureKind::Property(property) if property.is_safety() && property != Property::Statelessness => Some(property),
            _ => None,
        })
        .collect();
    broken.sort();
    broken.dedup();
    let mut found = BTreeMap::new();
    for property in broken {
        for delivery in 1..=report.deliveries {
            let prefix = report.history.until(delivery);
            if check::check_properties(&prefix).iter().any(|v| v.property == property) {
                found.entry(delivery).or_insert(property.as_str());
                break;
            }
        }
    }
    found
}
