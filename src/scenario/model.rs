//! The scenario model: what a parsed scenario file says. The parser builds it; the runner executes it.

use crate::scenario::template::Template;
use serde_json::Value;

#[derive(Debug, Clone)]
pub struct Scenario {
    /// The file stem (`retry-on-another-instance`).
    pub name: String,
    /// Where it came from, for messages (`scenarios/….sim`).
    pub origin: String,
    /// The opening comment: which guarantee the scenario teaches.
    pub summary: Vec<String>,
    pub cluster: ClusterSpec,
    pub steps: Vec<Step>,
    /// What the parser suspects the author did not mean (an instance clock beyond the replay grace); shown, not refused.
    pub warnings: Vec<String>,
}

impl Scenario {
    /// The lesson in one line, from the opening comment: the guarantee it teaches (the words after
    /// `Guarantee taught:` up to the first full stop) and the situation (the comment's first line), as in
    /// `statelessness: The retry lands on another instance.` A scenario without the marker gives its first line.
    pub fn lesson_line(&self) -> String {
        lesson_line(&self.summary)
    }
}

/// [`Scenario::lesson_line`] of an opening comment's lines (`#` removed).
pub fn lesson_line(summary: &[String]) -> String {
    let situation = summary.iter().find(|line| !line.is_empty()).cloned().unwrap_or_default();
    let text = summary.join(" ");
    let guarantee = text.split_once("Guarantee taught:").map(|(_, rest)| {
        let rest = rest.trim();
        // The first sentence: up to ". " (a full stop before the next sentence) or the end.
        rest.split_once(". ").map_or(rest.trim_end_matches('.'), |(first, _)| first).trim().to_string()
    });
    match guarantee {
        Some(guarantee) if !guarantee.is_empty() && !situation.starts_with("Guarantee taught:") => format!("{guarantee}: {situation}"),
        Some(guarantee) if !guarantee.is_empty() => guarantee,
        _ => situation,
    }
}

#[derive(Debug, Clone, Default)]
pub struct ClusterSpec {
    /// Start from the embedded demo deployment (principals, workspaces, notes, state TTL).
    pub use_demo: bool,
    pub principals: Vec<PrincipalSpec>,
    pub notes: Vec<NoteSpec>,
    pub keys: Vec<KeySpec>,
    pub instances: Vec<InstanceSpec>,
    pub clients: Vec<ClientSpec>,
    pub state_ttl_ms: Option<u64>,
    pub replay_capacity: Option<usize>,
    /// Most nonces one principal may hold (`replay capacity N per-principal M`); the whole capacity if unsaid.
    pub replay_principal_capacity: Option<usize>,
    pub replay_grace_ms: Option<u64>,
    pub latency_ms: Option<(u64, u64)>,
}

#[derive(Debug, Clone)]
pub struct PrincipalSpec {
    pub name: String,
    pub workspaces: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct NoteSpec {
    pub id: String,
    pub title: String,
    pub uri: String,
    pub body: String,
}

#[derive(Debug, Clone)]
pub struct KeySpec {
    pub id: String,
    pub secret: Vec<u8>,
}

/// Whether `name` may name a target's stage: 1 to 32 of `A-Z a-z 0-9 _ -` (it is written in lessons and reports).
pub fn is_stage_name(name: &str) -> bool {
    (1..=32).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[derive(Debug, Clone)]
pub struct InstanceSpec {
    pub name: String,
    /// Key ids; the first signs, the rest only verify.
    pub keys: Vec<String>,
    pub clock_offset_ms: i64,
    /// Declared with `gateway`: the security gateway in front of the backend actors.
    pub gateway: bool,
    /// `eras both`: also serves 2025-11-25 clients through the legacy adapter (`serve --eras both`).
    pub eras_both: bool,
    /// `stage NAME`: against a target, the instance starts in the target file's `[stages.NAME]`.
    pub stage: Option<String>,
}

#[derive(Debug, Clone)]
pub struct ClientSpec {
    pub name: String,
    pub principal: String,
    pub capabilities: Value,
    /// Declared with `browser NAME user PRINCIPAL`: a browser signed in on the out-of-band page as the
    /// principal (it sends `browse` steps, never MCP requests).
    pub browser: bool,
    /// `legacy …`: a 2025-11-25 client (no `_meta`, a session, server→client requests answered in the call).
    pub legacy: Option<LegacyClientSpec>,
    /// `impersonates C`: it sends client `C`'s `_meta` byte for byte (clientInfo and capabilities); only its
    /// credentials (its principal) differ, as a real attacker copies everything it can see.
    pub impersonates: Option<String>,
}

/// How a legacy client answers what a server asks it inside a call.
#[derive(Debug, Clone, PartialEq)]
pub struct LegacyClientSpec {
    /// `roots [...]`: the root URIs it answers `roots/list` with.
    pub roots: Vec<String>,
    /// `answers {...}`: the result it answers every `elicitation/create` with (default: a decline).
    pub elicitation: Value,
}

#[derive(Debug, Clone)]
pub struct Step {
    pub line: usize,
    /// The statement as written (first line), for transcripts and failure messages.
    pub text: String,
    pub action: Action,
}

#[derive(Debug, Clone)]
pub enum Action {
    Let {
        name: String,
        value: Template,
    },
    Send(Send),
    /// Everything inside is put in flight at once; the scheduler interleaves it.
    Parallel(Vec<ParallelItem>),
    Admin(AdminAction),
    Advance {
        duration_ms: u64,
    },
    Crash {
        instance: String,
        trigger: Option<TriggerSpec>,
    },
    Restart {
        instance: String,
    },
    /// `pause I [after I receives OP]`: the instance's processes stopped now, or right after the next `OP`
    /// request to it is written (that request stays unanswered until `resume`).
    Pause {
        instance: String,
        trigger: Option<TriggerSpec>,
    },
    /// `resume I`: a paused instance continued; the answers it owes are read then.
    Resume {
        instance: String,
    },
    Rotate {
        instances: Vec<String>,
        key: String,
    },
    /// `roll I [I…] to STAGE [after I receives OP]`: against a target, each instance restarted in the target
    /// file's `[stages.STAGE]`, now or right after the next `OP` request to it is written.
    Roll {
        instances: Vec<String>,
        stage: String,
        trigger: Option<TriggerSpec>,
    },
    Retire {
        key: String,
        instances: Vec<String>,
    },
    /// `store notes|replay unavailable for N calls`: an outage of one store, for its next `calls` calls.
    StoreUnavailable {
        store: String,
        calls: u32,
    },
    /// `store cut after N statements [for DURATION]`: armed on the next request any instance receives, the
    /// store lets `after_statements` more statements through, then every connection to it is cut and new
    /// ones refused for `outage_ms` (`None`: until the next step). A real fleet's store, behind mcpsim's proxy.
    StoreCut {
        after_statements: u32,
        outage_ms: Option<u64>,
    },
    /// `store lock for DURATION`: the store's write lock is held from now for the window (a SQLite file).
    StoreLock {
        window_ms: u64,
    },
    /// `drop answer from I to OP …`, `duplicate OP to I …`, `hold OP to I`: a fault on the next request of
    /// method `method` the scenario sends to `instance`.
    Arm {
        instance: String,
        method: String,
        fault: MessageFault,
    },
    /// `release I`: the requests held for `I` go on the wire now.
    Release {
        instance: String,
    },
    /// `retry NAME -> I [as NAME2]`: the client sends the request of the answer `NAME` again, with a fresh
    /// id, to `instance`.
    Retry {
        of: String,
        instance: String,
        name: Option<String>,
    },
    Expect(Expectation),
}

/// What an armed statement does to the request it fires on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageFault {
    /// `drop answer from I to OP [closing the connection]`: delivered and processed, its answer never reaches
    /// the client (`closing`: the client stops waiting as soon as the request is written).
    DropAnswer { closing: bool },
    /// `duplicate OP to I [onto J]`: a copy (same bytes, same id) also to `J`, or a second time to `I`.
    Duplicate { onto: Option<String> },
    /// `hold OP to I`: not written until `release I` (or the end of the play).
    Hold,
}

#[derive(Debug, Clone)]
pub struct ParallelItem {
    pub line: usize,
    pub text: String,
    pub item: ParallelAction,
}

#[derive(Debug, Clone)]
pub enum ParallelAction {
    Send(Send),
    Admin(AdminAction),
}

#[derive(Debug, Clone)]
pub struct TriggerSpec {
    pub moment: Moment,
    pub receiver: String,
    pub label: String,
    /// `from SENDER`: only a message this actor sends fires it (one instance's own call, in a race).
    pub sender: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Send {
    pub client: String,
    pub instance: String,
    pub request: Request,
    /// `headers {…}`: HTTP routing headers sent with the request (`MCP-Protocol-Version`, `Mcp-Method`,
    /// `Mcp-Name`), passed to the pipeline as the HTTP transport passes them.
    pub headers: Option<Box<Template>>,
    /// `as NAME`: how later steps refer to the answer.
    pub name: Option<String>,
}

#[derive(Debug, Clone)]
pub enum Request {
    /// A request (or notification) with this client's `_meta` added to `params`.
    Call { method: String, params: Template, notification: bool },
    /// Exactly this message: a JSON value is sent as compact JSON, a JSON string as its characters.
    Raw { message: Template },
    /// The retry answering a form.
    Answer(Answer),
    /// `browse BROWSER -> INSTANCE open|complete URL [plus "TEXT"]`: a browser request to the out-of-band page.
    Page {
        action: crate::framework::out_of_band::PageAction,
        url: Template,
        /// Text the browser's user (or an attacker) appended to the URL before opening it.
        appended: Option<String>,
    },
}

#[derive(Debug, Clone)]
pub struct Answer {
    pub action: AnswerAction,
    /// The named answer whose form this answers; default: the client's last form.
    pub form: Option<String>,
    /// Replaces the original arguments.
    pub arguments: Option<Template>,
    /// Replaces the echoed `requestState`.
    pub state: Option<Template>,
    /// `responses {…}`: more `inputResponses` entries, for keys the form did not ask (never the one it did).
    pub extra_responses: Option<Box<Template>>,
}

#[derive(Debug, Clone)]
pub enum AnswerAction {
    Accept(Option<Template>),
    Decline,
    Cancel,
}

#[derive(Debug, Clone)]
pub enum Expectation {
    Answer {
        targets: Targets,
        check: AnswerCheck,
    },
    NotePresent {
        id: String,
        present: bool,
    },
    NotesCount(usize),
    ConsumedCount(usize),
    /// Exports recorded by the gateway's notes backends (each export happens once per idempotency key).
    ExportsCount(usize),
    /// The nonce sealed in the named answer's `requestState`: consumed with this record, or (None) unused.
    Nonce {
        answer: String,
        record: Option<Template>,
    },
    /// `if CONDITION then CONSEQUENCE`: the consequence is judged only when the condition holds (a race may
    /// be won by either side: "if the decline won, nothing was exported").
    If {
        condition: Box<Expectation>,
        consequence: Box<Expectation>,
    },
    /// `expect always EXPECTATION`: the scenario says it holds under faults too (lost answers, retries, crashes,
    /// …), so the simulator judges it there as well; an unmarked expectation is shown but not judged under
    /// faults, where a retry may take a flow another way than the scenario wrote. Only at the top of an
    /// `expect` statement.
    Always(Box<Expectation>),
}

impl Expectation {
    /// Whether it is marked `always` (judged under faults too).
    pub fn always(&self) -> bool {
        matches!(self, Expectation::Always(_))
    }
}

#[derive(Debug, Clone)]
pub enum Targets {
    One(String),
    /// How many of these must pass: `one of` (exactly one), `each of`, `none of`, `N of`, `at most N of`,
    /// `at least N of`.
    Some {
        names: Vec<String>,
        quantity: Quantity,
    },
}

impl AnswerCheck {
    /// The JSON templates the check compares with (what its `$references` may name).
    pub fn templates(&self) -> Vec<&Template> {
        match self {
            AnswerCheck::Equals { value, .. } => vec![value],
            AnswerCheck::Any(alternatives) => alternatives.iter().flat_map(AnswerCheck::templates).collect(),
            _ => Vec::new(),
        }
    }
}

/// How many of a set of answers an expectation wants to pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantity {
    Exactly(usize),
    AtMost(usize),
    AtLeast(usize),
    /// All of them, however many.
    Each,
}

impl Quantity {
    pub fn holds(self, passed: usize, of: usize) -> bool {
        match self {
            Quantity::Exactly(n) => passed == n,
            Quantity::AtMost(n) => passed <= n,
            Quantity::AtLeast(n) => passed >= n,
            Quantity::Each => passed == of,
        }
    }

    pub fn describe(self) -> String {
        match self {
            Quantity::Exactly(0) => "none to pass".into(),
            Quantity::Exactly(1) => "exactly one to pass".into(),
            Quantity::Exactly(n) => format!("exactly {n} to pass"),
            Quantity::AtMost(n) => format!("at most {n} to pass"),
            Quantity::AtLeast(n) => format!("at least {n} to pass"),
            Quantity::Each => "every one to pass".into(),
        }
    }
}

#[derive(Debug, Clone)]
pub enum AnswerCheck {
    /// `result.resultType` is this; `complete` also means not a tool error (`isError: true`).
    ResultType(String),
    /// `tool_error`: a `complete` result with `isError: true` (a tool error is its own outcome).
    ToolError,
    /// `error.code` is this (and `error.data.reason`, if given).
    Error {
        code: i64,
        reason: Option<String>,
    },
    /// No JSON-RPC response came back.
    NoResponse,
    Equals {
        path: Vec<String>,
        value: Template,
    },
    Absent {
        path: Vec<String>,
    },
    Present {
        path: Vec<String>,
    },
    /// `CHECK or CHECK …`: any one of them.
    Any(Vec<AnswerCheck>),
}

/// Whether a crash trigger fires before the matching delivery (the envelope is then lost with the crash
/// if it touches the crashed instance) or right after the receiver has run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moment {
    Before,
    After,
}

/// Actor names the language reserves: the shared stores and the admin (instances and clients may not use them).
pub const NOTE_STORE: &str = "notes";
pub const REPLAY_STORE: &str = "replay";
pub const ADMIN: &str = "admin";
/// A gateway backend actor is named after its backend id with this suffix (`notes-backend`).
pub const BACKEND_ACTOR_SUFFIX: &str = "-backend";

/// A change made behind every client's back: by an operator, or by an adversary with the operator's reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminAction {
    DeleteNote {
        note_id: String,
    },
    MoveNote {
        note_id: String,
        uri: String,
    },
    RenameNote {
        note_id: String,
        title: String,
    },
    /// Replaces the note's file with another copy at the same place, same content (an editor saving by
    /// renaming a new file over the old): a new revision, so a form that showed the old copy no longer names it.
    SwapNote {
        note_id: String,
    },
    /// Removes the principal's grants at or below `workspace` on every instance.
    Revoke {
        principal: String,
        workspace: String,
    },
    /// Changes what a gateway backend publishes (a message to the backend actor): `tool: Some` merges `fields`
    /// into that descriptor (a rug pull), `None` publishes `fields` as one more descriptor.
    Descriptor {
        backend: String,
        tool: Option<String>,
        fields: Value,
    },
    /// The operator reviews `backend.tool` and re-pins it to what the backend publishes now.
    Approve {
        tool: String,
    },
}

#[cfg(test)]
mod tests {
    use super::lesson_line;

    fn lines(text: &[&str]) -> Vec<String> {
        text.iter().map(|line| line.to_string()).collect()
    }

    #[test]
    fn the_lesson_line_names_the_guarantee_then_the_situation() {
        let summary =
            lines(&["The retry lands on another instance.", "", "Guarantee taught: statelessness. Instance i1 shows", "the form."]);
        assert_eq!(lesson_line(&summary), "statelessness: The retry lands on another instance.");
        let zoo = lines(&["Guarantee taught: the candidates are signed; a client cannot add one."]);
        assert_eq!(lesson_line(&zoo), "the candidates are signed; a client cannot add one");
        assert_eq!(lesson_line(&lines(&["Just a situation."])), "Just a situation.");
        assert_eq!(lesson_line(&[]), "");
    }
}
