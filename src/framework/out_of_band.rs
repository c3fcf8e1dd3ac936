//! The out-of-band step of a URL-mode elicitation (GUARANTEES.md §2.7): the port its state lives behind, and
//! what a browser asks of the page and is answered.
//!
//! A flow is started by round 1 of a tool that needs the user's own authorization (`notes_publish`), under an
//! unguessable reference that the URL carries, and is completed only by the principal who started it, once,
//! before it expires. The state is shared by every instance (a store actor in the simulator, a table in SQLite
//! and PostgreSQL), so whichever instance serves the page and whichever serves the retry agree. The binding
//! check is the store's own atomic compare-and-set: the reference is looked up, its principal compared with the
//! signed-in user, and it is marked completed, in one operation.

use super::ports::StoreError;
use async_trait::async_trait;

/// One out-of-band flow as started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutOfBandFlow {
    /// 16 random bytes, base64url: what the URL carries. Never a credential: it names the flow, and only
    /// the flow's principal, signed in on the page, can complete it.
    pub reference: String,
    /// Who started it (the MCP principal the round-1 request was authenticated as).
    pub principal: String,
    /// The tool that waits for it.
    pub tool: String,
    /// What the tool will act on (the note id), shown on the page.
    pub subject: String,
    pub expires_at_ms: u64,
}

/// Where a flow stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlowStatus {
    Started,
    /// Completed on the page by this signed-in user (the store only ever records the flow's principal).
    Completed {
        by: String,
    },
}

/// A flow and where it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowRecord {
    pub flow: OutOfBandFlow,
    pub status: FlowStatus,
}

/// What an attempt to complete a flow did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    /// Started, unexpired, and the user is its principal: now completed.
    Completed,
    /// The signed-in user is not the principal who started it: nothing changed.
    NotYours,
    /// Already completed (a second submission, or a second browser): nothing changed.
    AlreadyCompleted,
    /// Past its expiry: nothing changed.
    Expired,
    /// No flow has this reference (never issued, altered, or pruned).
    Unknown,
}

/// Whether `user` may complete the flow `record` at `now_ms`: the decision every store makes on the record as
/// it read it (the databases inside one transaction) and the page's preview of it, written once.
pub(crate) fn decide_completion(record: Option<&FlowRecord>, user: &str, now_ms: u64) -> Completion {
    match record {
        None => Completion::Unknown,
        Some(record) if record.flow.principal != user => Completion::NotYours,
        Some(FlowRecord { status: FlowStatus::Completed { .. }, .. }) => Completion::AlreadyCompleted,
        Some(record) if record.flow.expires_at_ms <= now_ms => Completion::Expired,
        Some(_) => Completion::Completed,
    }
}

/// What an attempt to start a flow did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowStart {
    Started,
    /// Refused, nothing recorded: the flow's principal holds its share of the store's unexpired flows, or the
    /// store holds its capacity in all (fail closed, never evicting an unexpired flow). The
    /// `out_of_band_store_full` refusal, not an outage.
    Full,
}

/// The shared out-of-band state. Bounded in all and per principal: a principal holding its share of
/// unexpired flows, or a store full of them, is refused another ([`FlowStart::Full`]), never evicting one,
/// while the other principals keep starting theirs.
#[async_trait]
pub trait OutOfBandStore: Send + Sync {
    /// Records a started flow unless its principal's share or the store is full; expired flows may be
    /// pruned meanwhile (`now_ms`).
    async fn start(&self, flow: OutOfBandFlow, now_ms: u64) -> Result<FlowStart, StoreError>;

    /// The flow with this reference, if any.
    async fn flow(&self, reference: &str) -> Result<Option<FlowRecord>, StoreError>;

    /// One atomic operation: completes the flow if it is started, unexpired at `now_ms`, and `user` is its
    /// principal; otherwise says why not and changes nothing.
    async fn complete(&self, reference: &str, user: &str, now_ms: u64) -> Result<Completion, StoreError>;
}

/// What a browser does with the page: open it (see what it asks), or submit it (complete the flow).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageAction {
    Open,
    Complete,
}

impl PageAction {
    pub fn as_str(self) -> &'static str {
        match self {
            PageAction::Open => "open",
            PageAction::Complete => "complete",
        }
    }
}

/// One browser request to the out-of-band page, from a user already signed in on the page (the transport
/// proves who: a session cookie over HTTP, the browser actor's declared user in the simulator).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest {
    pub action: PageAction,
    /// The URL as the browser has it (possibly altered).
    pub url: String,
}

/// What the page answered: an HTTP status, a closed outcome word, and the sentence the page says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageAnswer {
    pub status: u16,
    /// `ready` (the page asks to authorize), `completed`, `wrong_user`, `altered`, `already_completed`,
    /// `expired`, `unknown`, `not_here` (no out-of-band page on this server), `unavailable`.
    pub outcome: &'static str,
    pub says: String,
    /// What the flow is for (tool and subject), when the page may show it to this user.
    pub flow: Option<(String, String)>,
}

impl PageAnswer {
    pub fn new(status: u16, outcome: &'static str, says: impl Into<String>) -> PageAnswer {
        PageAnswer { status, outcome, says: says.into(), flow: None }
    }

    /// The answer of a server without an out-of-band page.
    pub fn not_here() -> PageAnswer {
        PageAnswer::new(404, "not_here", "This server has no out-of-band page.")
    }

    /// As JSON, the shape the simulator's browser records: `{"page":{"outcome","says","status"[,"tool","subject"]}}`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut page = serde_json::json!({ "status": self.status, "outcome": self.outcome, "says": self.says });
        if let Some((tool, subject)) = &self.flow {
            page["tool"] = serde_json::json!(tool);
            page["subject"] = serde_json::json!(subject);
        }
        serde_json::json!({ "page": page })
    }
}
