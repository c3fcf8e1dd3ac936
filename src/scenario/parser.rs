//! The scenario parser: a small line-oriented language with `#` comments and inline JSON.
//!
//! One statement per line; JSON may span lines (until its brackets close), and `#` comments may appear
//! anywhere outside strings. Errors name `file:line:column` and say what was expected there. See
//! `docs/simulator.md` for the language reference.

use crate::config::Deployment;
use crate::policy::containment::FileUri;
use crate::policy::state::{derived_key_secret, KeyRing};
use crate::scenario::model::*;
use crate::scenario::template::{Reference, Template};
use serde_json::Value;
use std::collections::BTreeSet;

/// Largest scenario file we read.
pub(crate) const SCENARIO_BYTES_MAX: usize = 1 << 20;
/// Most statements (steps and declarations) in one scenario.
pub(crate) const STATEMENTS_MAX: usize = 2_000;
/// Most messages in one `parallel` block.
pub(crate) const PARALLEL_ITEMS_MAX: usize = 64;
/// Deepest JSON nesting accepted in a scenario.
pub(crate) const JSON_DEPTH_MAX: usize = 64;
pub(crate) const INSTANCES_MAX: usize = 16;
pub(crate) const CLIENTS_MAX: usize = 16;
pub(crate) const NOTES_MAX: usize = 1_000;
/// Most calls one `store … unavailable` step refuses.
pub(crate) const STORE_OUTAGE_CALLS_MAX: usize = 100;
/// Most statements a `store cut after N statements` lets through first.
pub(crate) const STORE_CUT_STATEMENTS_MAX: usize = 10_000;
/// Longest outage of `store cut … for DURATION` and lock of `store lock for DURATION`.
pub(crate) const STORE_OUTAGE_MS_MAX: u64 = 60_000;

/// The statement keywords, for "expected one of" messages.
const DECLARATIONS: [&str; 11] =
    ["use", "principal", "note", "key", "instance", "gateway", "client", "browser", "state-ttl", "replay", "latency"];
const STEPS: [&str; 22] = [
    "let",
    "send",
    "notify",
    "answer",
    "browse",
    "admin",
    "advance",
    "crash",
    "restart",
    "pause",
    "resume",
    "rotate",
    "retire",
    "roll",
    "store",
    "parallel",
    "expect",
    "drop",
    "duplicate",
    "hold",
    "release",
    "retry",
];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}:{line}:{column}: {message}")]
pub struct ParseError {
    pub origin: String,
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// What a scenario may mean but probably does not: an instance clock further off than the replay store's
/// grace. Such a run is legitimate (it shows skew costing availability), so it is a warning, not an error.
fn warnings(cluster: &ClusterSpec) -> Vec<String> {
    let grace_ms = cluster.replay_grace_ms.unwrap_or(crate::stores::memory::ReplayLimits::default().retention_grace_ms);
    cluster
        .instances
        .iter()
        // Behind only: an instance ahead of the store expires states early, which the store never has to judge.
        .filter(|instance| instance.clock_offset_ms < 0 && instance.clock_offset_ms.unsigned_abs() > grace_ms)
        .map(|instance| {
            format!(
                "instance {}'s clock is {} ms behind, beyond the replay store's {grace_ms} ms grace: confirmations it takes for unexpired \
                 may be refused by the store (replay_window_closed) — availability lost, at-most-once kept",
                instance.name,
                instance.clock_offset_ms.unsigned_abs()
            )
        })
        .collect()
}

/// Parses one scenario. `origin` names it in errors; `name` is its short name (the file stem).
pub fn parse(origin: &str, name: &str, text: &str) -> Result<Scenario, ParseError> {
    let mut parser = Parser {
        origin: origin.to_string(),
        text,
        cursor: Cursor { pos: 0, line: 1, column: 1 },
        cluster: ClusterSpec::default(),
        steps: Vec::new(),
        first_step_line: None,
        instances: BTreeSet::new(),
        clients: BTreeSet::new(),
        browsers: BTreeSet::new(),
        keys: BTreeSet::new(),
        principals: BTreeSet::new(),
        bound: BTreeSet::new(),
        answers: BTreeSet::new(),
        statements: 0,
    };
    if text.len() > SCENARIO_BYTES_MAX {
        return Err(parser.error_here(format!("the file is larger than {SCENARIO_BYTES_MAX} bytes")));
    }
    let summary = leading_comment(text);
    parser.parse_all()?;
    let warnings = warnings(&parser.cluster);
    Ok(Scenario { name: name.to_string(), origin: origin.to_string(), summary, cluster: parser.cluster, steps: parser.steps, warnings })
}

/// The comment lines at the top of the file, `#` removed: what the scenario teaches.
fn leading_comment(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .take_while(|line| line.starts_with('#'))
        .map(|line| line.trim_start_matches('#').trim().to_string())
        .collect()
}

#[derive(Debug, Clone, Copy)]
struct Cursor {
    pos: usize,
    line: usize,
    column: usize,
}

struct Parser<'a> {
    origin: String,
    text: &'a str,
    cursor: Cursor,
    cluster: ClusterSpec,
    steps: Vec<Step>,
    first_step_line: Option<usize>,
    instances: BTreeSet<String>,
    clients: BTreeSet<String>,
    /// The clients declared with `browser`.
    browsers: BTreeSet<String>,
    keys: BTreeSet<String>,
    principals: BTreeSet<String>,
    /// Names usable as `$name`: lets and named answers.
    bound: BTreeSet<String>,
    /// Names of answers (`as NAME`).
    answers: BTreeSet<String>,
    statements: usize,
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | '+' | '%')
}

fn is_name(word: &str) -> bool {
    let mut chars = word.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic()) && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

impl<'a> Parser<'a> {
    // ----- characters -----

    fn rest(&self) -> &'a str {
        &self.text[self.cursor.pos..]
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.cursor.pos += c.len_utf8();
        if c == '\n' {
            self.cursor.line += 1;
            self.cursor.column = 1;
        } else {
            self.cursor.column += 1;
        }
        Some(c)
    }

    /// Spaces and tabs (a statement continues).
    fn skip_blank(&mut self) {
        while matches!(self.peek(), Some(' ' | '\t' | '\r')) {
            self.bump();
        }
    }

    fn skip_comment(&mut self) {
        if self.peek() == Some('#') {
            while !matches!(self.peek(), None | Some('\n')) {
                self.bump();
            }
        }
    }

    /// Blanks, newlines and comments (between statements, and inside JSON).
    fn skip_trivia(&mut self) {
        loop {
            self.skip_blank();
            match self.peek() {
                Some('#') => self.skip_comment(),
                Some('\n') => {
                    self.bump();
                }
                _ => return,
            }
        }
    }

    fn error_at(&self, at: Cursor, message: impl Into<String>) -> ParseError {
        ParseError { origin: self.origin.clone(), line: at.line, column: at.column, message: message.into() }
    }

    fn error_here(&self, message: impl Into<String>) -> ParseError {
        self.error_at(self.cursor, message)
    }

    /// What comes next, for "found …" in messages.
    fn found(&mut self) -> String {
        self.skip_blank();
        match self.peek() {
            None => "the end of the file".into(),
            Some('\n') => "the end of the line".into(),
            Some('#') => "a comment".into(),
            Some(c) if is_word_char(c) => {
                let word: String = self.rest().chars().take_while(|c| is_word_char(*c)).collect();
                format!("`{word}`")
            }
            Some(c) => format!("`{c}`"),
        }
    }

    fn expected(&mut self, what: &str) -> ParseError {
        let at = {
            self.skip_blank();
            self.cursor
        };
        let found = self.found();
        self.error_at(at, format!("expected {what}, found {found}"))
    }

    fn at_line_end(&mut self) -> bool {
        self.skip_blank();
        matches!(self.peek(), None | Some('\n') | Some('#'))
    }

    fn end_statement(&mut self, statement: &str) -> Result<(), ParseError> {
        self.skip_blank();
        self.skip_comment();
        match self.peek() {
            None => Ok(()),
            Some('\n') => {
                self.bump();
                Ok(())
            }
            _ => Err(self.expected(&format!("the end of the `{statement}` statement"))),
        }
    }

    // ----- tokens -----

    fn word(&mut self) -> Option<(String, Cursor)> {
        self.skip_blank();
        let start = self.cursor;
        let mut word = String::new();
        while let Some(c) = self.peek() {
            if !is_word_char(c) || (c == '-' && self.rest().starts_with("->")) {
                break;
            }
            word.push(c);
            self.bump();
        }
        (!word.is_empty()).then_some((word, start))
    }

    fn peek_word(&mut self) -> Option<String> {
        let saved = self.cursor;
        let word = self.word().map(|(w, _)| w);
        self.cursor = saved;
        word
    }

    /// Consumes `keyword` if it comes next.
    fn keyword(&mut self, keyword: &str) -> bool {
        if self.peek_word().as_deref() == Some(keyword) {
            self.word();
            true
        } else {
            false
        }
    }

    /// Consumes whichever of `choices` comes next, or says what was expected (pointing at what is there).
    fn one_of(&mut self, choices: &[&'static str], what: &str) -> Result<&'static str, ParseError> {
        let next = self.peek_word();
        match choices.iter().find(|choice| next.as_deref() == Some(**choice)) {
            Some(choice) => {
                self.word();
                Ok(choice)
            }
            None => Err(self.expected(what)),
        }
    }

    fn expect_keyword(&mut self, keyword: &str, context: &str) -> Result<(), ParseError> {
        if self.keyword(keyword) {
            Ok(())
        } else {
            Err(self.expected(&format!("`{keyword}` {context}")))
        }
    }

    fn name(&mut self, what: &str) -> Result<(String, Cursor), ParseError> {
        match self.peek_word() {
            Some(word) if is_name(&word) => Ok(self.word().expect("peeked")),
            _ => Err(self.expected(&format!("{what} (a name: a letter, then letters, digits, `-` or `_`)"))),
        }
    }

    fn arrow(&mut self, context: &str) -> Result<(), ParseError> {
        self.skip_blank();
        if self.rest().starts_with("->") {
            self.bump();
            self.bump();
            Ok(())
        } else {
            Err(self.expected(&format!("`->` {context}")))
        }
    }

    fn symbol(&mut self, symbol: char, context: &str) -> Result<(), ParseError> {
        self.skip_blank();
        if self.peek() == Some(symbol) {
            self.bump();
            Ok(())
        } else {
            Err(self.expected(&format!("`{symbol}` {context}")))
        }
    }

    fn string(&mut self, what: &str) -> Result<String, ParseError> {
        self.skip_blank();
        if self.peek() != Some('"') {
            return Err(self.expected(&format!("{what} (a \"quoted string\")")));
        }
        self.string_literal()
    }

    /// A JSON string literal at the cursor (which is on the opening quote).
    fn string_literal(&mut self) -> Result<String, ParseError> {
        let start = self.cursor;
        self.bump();
        let mut escaped = false;
        loop {
            match self.bump() {
                None | Some('\n') => return Err(self.error_at(start, "this string is not closed before the end of the line")),
                Some('\\') if !escaped => escaped = true,
                Some('"') if !escaped => break,
                Some(_) => escaped = false,
            }
        }
        let literal = &self.text[start.pos..self.cursor.pos];
        serde_json::from_str::<String>(literal).map_err(|e| self.error_at(start, format!("invalid string: {e}")))
    }

    fn integer(&mut self, what: &str) -> Result<i64, ParseError> {
        match self.word() {
            Some((word, at)) => word.parse::<i64>().map_err(|_| self.error_at(at, format!("expected {what} (an integer), found `{word}`"))),
            None => Err(self.expected(&format!("{what} (an integer)"))),
        }
    }

    fn count(&mut self, what: &str) -> Result<usize, ParseError> {
        self.skip_blank();
        let at = self.cursor;
        let value = self.integer(what)?;
        usize::try_from(value).map_err(|_| self.error_at(at, format!("{what} cannot be negative")))
    }

    /// `250ms`, `30s`, `5m`, `1h`; with `signed`, an optional leading `+` or `-`.
    fn duration(&mut self, what: &str, signed: bool) -> Result<i64, ParseError> {
        let Some((word, at)) = self.word() else {
            return Err(self.expected(&format!("{what} (a duration such as 250ms, 30s, 5m or 1h)")));
        };
        let invalid = || self.error_at(at, format!("expected {what} (a duration such as 250ms, 30s, 5m or 1h), found `{word}`"));
        let (sign, digits_and_unit) = match word.strip_prefix('-') {
            Some(rest) if signed => (-1, rest),
            _ => (1, word.strip_prefix('+').filter(|_| signed).unwrap_or(&word)),
        };
        let split = digits_and_unit.find(|c: char| !c.is_ascii_digit()).ok_or_else(invalid)?;
        let (digits, unit) = digits_and_unit.split_at(split);
        let amount: i64 = digits.parse().map_err(|_| invalid())?;
        let unit_ms = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            _ => return Err(invalid()),
        };
        amount.checked_mul(unit_ms).map(|ms| sign * ms).ok_or_else(|| self.error_at(at, format!("{what} is too large")))
    }

    fn unsigned_duration(&mut self, what: &str) -> Result<u64, ParseError> {
        Ok(self.duration(what, false)? as u64)
    }

    /// After `legacy`: `roots ["file:///…", …]` and `answers {…}` (the result of every `elicitation/create`).
    fn legacy_client(&mut self) -> Result<LegacyClientSpec, ParseError> {
        let mut spec = LegacyClientSpec { roots: Vec::new(), elicitation: serde_json::json!({ "action": "decline" }) };
        loop {
            if self.keyword("roots") {
                let Template::Literal(Value::Array(roots)) = self.json("the root URIs, a JSON array of strings")? else {
                    return Err(self.error_here("roots must be a literal JSON array of URI strings"));
                };
                spec.roots = roots
                    .iter()
                    .map(|root| root.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| self.error_here("roots must be a literal JSON array of URI strings"))?;
            } else if self.keyword("answers") {
                match self.json("the elicitation/create result, a JSON object")? {
                    Template::Literal(value @ Value::Object(_)) => spec.elicitation = value,
                    _ => return Err(self.error_here("answers must be a literal JSON object (the elicitation/create result)")),
                }
            } else {
                return Ok(spec);
            }
        }
    }

    // ----- JSON with references -----

    fn json(&mut self, what: &str) -> Result<Template, ParseError> {
        self.skip_blank();
        if !matches!(self.peek(), Some('{' | '[' | '"' | '$' | '-' | '0'..='9' | 't' | 'f' | 'n')) {
            return Err(self.expected(&format!("{what} (JSON, or a $reference)")));
        }
        Ok(self.json_value(0)?.simplify())
    }

    fn json_value(&mut self, depth: usize) -> Result<Template, ParseError> {
        if depth > JSON_DEPTH_MAX {
            return Err(self.error_here(format!("JSON nested deeper than {JSON_DEPTH_MAX} levels")));
        }
        self.skip_trivia();
        let start = self.cursor;
        match self.peek() {
            Some('{') => {
                self.bump();
                let mut members = Vec::new();
                self.skip_trivia();
                if self.peek() == Some('}') {
                    self.bump();
                    return Ok(Template::Object(members));
                }
                loop {
                    self.skip_trivia();
                    if self.peek() != Some('"') {
                        return Err(self.expected("a \"quoted\" object key"));
                    }
                    let key_at = self.cursor;
                    let key = self.string_literal()?;
                    if members.iter().any(|(k, _)| *k == key) {
                        return Err(self.error_at(key_at, format!("the key {key:?} appears twice in this object")));
                    }
                    self.skip_trivia();
                    self.symbol(':', "after the object key")?;
                    let value = self.json_value(depth + 1)?;
                    members.push((key, value));
                    self.skip_trivia();
                    match self.peek() {
                        Some(',') => self.bump(),
                        Some('}') => {
                            self.bump();
                            return Ok(Template::Object(members));
                        }
                        _ => return Err(self.expected("`,` or `}` in this object")),
                    };
                }
            }
            Some('[') => {
                self.bump();
                let mut items = Vec::new();
                self.skip_trivia();
                if self.peek() == Some(']') {
                    self.bump();
                    return Ok(Template::Array(items));
                }
                loop {
                    items.push(self.json_value(depth + 1)?);
                    self.skip_trivia();
                    match self.peek() {
                        Some(',') => self.bump(),
                        Some(']') => {
                            self.bump();
                            return Ok(Template::Array(items));
                        }
                        _ => return Err(self.expected("`,` or `]` in this array")),
                    };
                }
            }
            Some('"') => Ok(Template::Literal(Value::String(self.string_literal()?))),
            Some('$') => {
                self.bump();
                Ok(Template::Ref(self.reference(start)?))
            }
            Some('-' | '0'..='9') => {
                let length = self
                    .rest()
                    .find(|c: char| !(c.is_ascii_digit() || matches!(c, '-' | '+' | '.' | 'e' | 'E')))
                    .unwrap_or(self.rest().len());
                let literal = &self.rest()[..length];
                let number: Value =
                    serde_json::from_str(literal).map_err(|_| self.error_at(start, format!("`{literal}` is not a JSON number")))?;
                for _ in 0..literal.chars().count() {
                    self.bump();
                }
                Ok(Template::Literal(number))
            }
            Some(c) if c.is_ascii_alphabetic() => {
                let (word, at) = self.word().expect("a letter starts a word");
                match word.as_str() {
                    "true" => Ok(Template::Literal(Value::Bool(true))),
                    "false" => Ok(Template::Literal(Value::Bool(false))),
                    "null" => Ok(Template::Literal(Value::Null)),
                    "tamper" => self.tamper(depth),
                    _ => Err(self
                        .error_at(at, format!("expected a JSON value, found `{word}` (strings need \"quotes\"; references start with $)"))),
                }
            }
            _ => Err(self.expected("a JSON value")),
        }
    }

    /// After `$`: a bound name, then `.segment`s.
    fn reference(&mut self, start: Cursor) -> Result<Reference, ParseError> {
        let name: String = self.rest().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-').collect();
        if !is_name(&name) {
            return Err(self.error_at(start, "expected a name after `$`"));
        }
        if !self.bound.contains(&name) {
            return Err(self
                .error_at(start, format!("${name} is not bound here: bind it first with `let {name} = …` or name an answer `as {name}`")));
        }
        for _ in 0..name.len() {
            self.bump();
        }
        let mut path = Vec::new();
        while self.peek() == Some('.') && self.rest()[1..].starts_with(|c: char| c == '"' || c.is_ascii_alphanumeric() || c == '_') {
            self.bump();
            path.push(self.path_segment()?);
        }
        Ok(Reference { name, path })
    }

    fn path_segment(&mut self) -> Result<String, ParseError> {
        if self.peek() == Some('"') {
            return self.string_literal();
        }
        let segment: String = self.rest().chars().take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '/')).collect();
        if segment.is_empty() {
            return Err(self.expected("a path segment (a key, a number, or a \"quoted key\")"));
        }
        for _ in 0..segment.chars().count() {
            self.bump();
        }
        Ok(segment)
    }

    /// `a.b.0."c.d"` in expectations.
    fn path(&mut self) -> Result<Vec<String>, ParseError> {
        self.skip_blank();
        let mut path = vec![self.path_segment()?];
        while self.peek() == Some('.') {
            self.bump();
            path.push(self.path_segment()?);
        }
        Ok(path)
    }

    /// `tamper(STATE, "field", VALUE)`.
    fn tamper(&mut self, depth: usize) -> Result<Template, ParseError> {
        self.symbol('(', "after tamper")?;
        let state = self.json_value(depth + 1)?;
        self.skip_trivia();
        self.symbol(',', "after tamper's state")?;
        self.skip_trivia();
        let field = self.string("the claim to change")?;
        self.skip_trivia();
        self.symbol(',', "after tamper's claim name")?;
        let value = self.json_value(depth + 1)?;
        self.skip_trivia();
        self.symbol(')', "to close tamper(…)")?;
        Ok(Template::Tamper { state: Box::new(state.simplify()), field, value: Box::new(value.simplify()) })
    }

    // ----- statements -----

    fn parse_all(&mut self) -> Result<(), ParseError> {
        loop {
            self.skip_trivia();
            if self.peek().is_none() {
                break;
            }
            self.statements += 1;
            if self.statements > STATEMENTS_MAX {
                return Err(self.error_here(format!("more than {STATEMENTS_MAX} statements")));
            }
            let start = self.cursor;
            let Some((keyword, _)) = self.word() else {
                return Err(self.expected("a statement"));
            };
            if DECLARATIONS.contains(&keyword.as_str()) {
                if let Some(line) = self.first_step_line {
                    return Err(self.error_at(
                        start,
                        format!("`{keyword}` declares the cluster, which must be complete before the first step (line {line}); move it up"),
                    ));
                }
                self.declaration(&keyword, start)?;
            } else if STEPS.contains(&keyword.as_str()) {
                if keyword != "let" && self.first_step_line.is_none() {
                    self.finish_cluster(start)?;
                    self.first_step_line = Some(start.line);
                }
                let action = self.step(&keyword, start)?;
                let text = self.statement_text(start);
                self.steps.push(Step { line: start.line, text, action });
            } else {
                return Err(self.error_at(
                    start,
                    format!(
                        "unknown statement `{keyword}`: expected a declaration ({}) or a step ({})",
                        DECLARATIONS.join(", "),
                        STEPS.join(", ")
                    ),
                ));
            }
        }
        if self.first_step_line.is_none() {
            self.finish_cluster(self.cursor)?;
        }
        Ok(())
    }

    /// The first line of the statement starting at `start`, without its comment (`…` if it continues).
    fn statement_text(&self, start: Cursor) -> String {
        let whole = &self.text[start.pos..self.cursor.pos];
        let first = whole.lines().next().unwrap_or("");
        let first = strip_comment(first).trim_end();
        let continues = whole.trim_end().lines().count() > 1;
        if continues {
            format!("{first} …")
        } else {
            first.to_string()
        }
    }

    fn declaration(&mut self, keyword: &str, start: Cursor) -> Result<(), ParseError> {
        match keyword {
            "use" => {
                self.expect_keyword("demo", "(the only deployment `use` knows is the embedded demo)")?;
                self.cluster.use_demo = true;
                let demo = Deployment::demo();
                self.principals.extend(demo.principals.keys().cloned());
            }
            "principal" => {
                let (name, _) = self.name("the principal's name")?;
                self.expect_keyword("workspaces", "and the workspace URIs this principal may use")?;
                let mut workspaces = Vec::new();
                while !self.at_line_end() {
                    self.skip_blank();
                    let at = self.cursor;
                    let uri = self.string("a workspace URI")?;
                    FileUri::parse(&uri).map_err(|e| self.error_at(at, format!("{uri:?} is not a workspace URI: {e}")))?;
                    workspaces.push(uri);
                }
                if workspaces.is_empty() {
                    return Err(self.expected("at least one workspace URI"));
                }
                self.principals.insert(name.clone());
                self.cluster.principals.push(PrincipalSpec { name, workspaces });
            }
            "note" => {
                let (id, at) = self.word().ok_or_else(|| self.expected("the note's id"))?;
                if self.cluster.notes.iter().any(|n| n.id == id) {
                    return Err(self.error_at(at, format!("a note {id} is already declared")));
                }
                if self.cluster.notes.len() >= NOTES_MAX {
                    return Err(self.error_at(at, format!("more than {NOTES_MAX} notes")));
                }
                self.expect_keyword("title", "after the note id")?;
                let title = self.string("the note's title")?;
                self.expect_keyword("uri", "after the title")?;
                let uri = self.string("the note's file:// URI")?;
                let body = if self.keyword("body") { self.string("the note's body")? } else { String::new() };
                self.cluster.notes.push(NoteSpec { id, title, uri, body });
            }
            "key" => {
                let (id, at) = self.word().ok_or_else(|| self.expected("the key id"))?;
                if self.keys.contains(&id) {
                    return Err(self.error_at(at, format!("key {id} is already declared")));
                }
                let secret = if self.keyword("secret") {
                    self.skip_blank();
                    let secret_at = self.cursor;
                    let text = self.string("the secret, base64")?;
                    use base64::Engine;
                    base64::engine::general_purpose::STANDARD
                        .decode(&text)
                        .map_err(|e| self.error_at(secret_at, format!("the secret is not base64: {e}")))?
                } else {
                    derived_key_secret(&id)
                };
                KeyRing::new(&id, secret.clone()).map_err(|e| self.error_at(at, format!("key {id}: {e}")))?;
                self.keys.insert(id.clone());
                self.cluster.keys.push(KeySpec { id, secret });
            }
            "instance" | "gateway" => {
                let (name, at) = self.name("the instance's name")?;
                self.new_actor_name(&name, at)?;
                if self.cluster.instances.len() >= INSTANCES_MAX {
                    return Err(self.error_at(at, format!("more than {INSTANCES_MAX} instances")));
                }
                let mut keys = Vec::new();
                let mut clock_offset_ms = 0;
                let mut eras_both = false;
                let mut stage = None;
                loop {
                    if self.keyword("keys") {
                        while !self.at_line_end() && !matches!(self.peek_word().as_deref(), Some("clock" | "eras" | "stage")) {
                            let (key, key_at) = self.word().ok_or_else(|| self.expected("a key id"))?;
                            if !self.keys.contains(&key) {
                                return Err(self.error_at(key_at, format!("key {key} is not declared: add `key {key}` above")));
                            }
                            keys.push(key);
                        }
                        if keys.is_empty() {
                            return Err(self.expected("at least one key id after `keys`"));
                        }
                    } else if self.keyword("clock") {
                        clock_offset_ms = self.duration("the clock offset", true)?;
                    } else if self.keyword("stage") {
                        stage = Some(self.stage_name()?);
                    } else if self.keyword("eras") {
                        if self.keyword("both") {
                            if keyword == "gateway" {
                                return Err(self.error_here("a gateway serves the 2026-07-28 era only; `eras both` is for instances"));
                            }
                            eras_both = true;
                        } else if self.keyword("modern") {
                            eras_both = false;
                        } else {
                            return Err(self.expected("`both` or `modern` after `eras`"));
                        }
                    } else {
                        break;
                    }
                }
                self.instances.insert(name.clone());
                self.cluster.instances.push(InstanceSpec { name, keys, clock_offset_ms, gateway: keyword == "gateway", eras_both, stage });
            }
            "client" => {
                let (name, at) = self.name("the client's name")?;
                self.new_actor_name(&name, at)?;
                if self.cluster.clients.len() >= CLIENTS_MAX {
                    return Err(self.error_at(at, format!("more than {CLIENTS_MAX} clients")));
                }
                self.expect_keyword("principal", "and the principal this client authenticates as")?;
                let (principal, principal_at) = self.name("the principal")?;
                if !self.principals.contains(&principal) {
                    return Err(self.error_at(
                        principal_at,
                        format!("principal {principal} is not declared: add `principal {principal} workspaces \"file:///…\"` or `use demo` above"),
                    ));
                }
                let impersonates = if self.keyword("impersonates") {
                    let (victim, victim_at) = self.name("the client whose _meta it copies")?;
                    match self.cluster.clients.iter().find(|c| c.name == victim) {
                        Some(c) if !c.browser && c.legacy.is_none() => Some((victim, c.capabilities.clone())),
                        Some(_) => {
                            return Err(self.error_at(victim_at, format!("{victim} sends no _meta to copy (a browser or a legacy client)")))
                        }
                        None => return Err(self.error_at(victim_at, format!("no client {victim} is declared above this line"))),
                    }
                } else {
                    None
                };
                let legacy = if impersonates.is_none() && self.keyword("legacy") { Some(self.legacy_client()?) } else { None };
                let capabilities = if let Some((_, copied)) = &impersonates {
                    copied.clone()
                } else if legacy.is_none() && self.keyword("capabilities") {
                    match self.json("the capabilities object")? {
                        Template::Literal(value @ Value::Object(_)) => value,
                        _ => return Err(self.error_here("capabilities must be a literal JSON object")),
                    }
                } else if legacy.is_some() {
                    // A legacy client declares its capabilities in the initialize the scenario sends.
                    serde_json::json!({})
                } else {
                    serde_json::json!({ "elicitation": { "form": {} } })
                };
                self.clients.insert(name.clone());
                let impersonates = impersonates.map(|(victim, _)| victim);
                self.cluster.clients.push(ClientSpec { name, principal, capabilities, browser: false, legacy, impersonates });
            }
            "browser" => {
                let (name, at) = self.name("the browser's name")?;
                self.new_actor_name(&name, at)?;
                if self.cluster.clients.len() >= CLIENTS_MAX {
                    return Err(self.error_at(at, format!("more than {CLIENTS_MAX} clients and browsers")));
                }
                self.expect_keyword("user", "and the user signed in on it (a principal)")?;
                let (principal, principal_at) = self.name("the principal")?;
                if !self.principals.contains(&principal) {
                    return Err(self.error_at(
                        principal_at,
                        format!("principal {principal} is not declared: add `principal {principal} workspaces \"file:///…\"` or `use demo` above"),
                    ));
                }
                self.clients.insert(name.clone());
                self.browsers.insert(name.clone());
                self.cluster.clients.push(ClientSpec {
                    name,
                    principal,
                    capabilities: serde_json::json!({}),
                    browser: true,
                    legacy: None,
                    impersonates: None,
                });
            }
            "state-ttl" => self.cluster.state_ttl_ms = Some(self.unsigned_duration("the requestState lifetime")?),
            "replay" => {
                self.expect_keyword("capacity", "after `replay`")?;
                let capacity = self.count("the replay store's capacity")?;
                if capacity == 0 {
                    return Err(self.error_here("a replay store of capacity 0 could never hold a nonce"));
                }
                self.cluster.replay_capacity = Some(capacity);
                if self.keyword("per-principal") {
                    let share = self.count("one principal's share of the replay store")?;
                    if share == 0 || share > capacity {
                        return Err(self.error_here("a principal's share is 1 to the replay store's capacity"));
                    }
                    self.cluster.replay_principal_capacity = Some(share);
                }
                if self.keyword("grace") {
                    self.cluster.replay_grace_ms = Some(self.unsigned_duration("the retention grace period")?);
                }
            }
            "latency" => {
                let min = self.unsigned_duration("the shortest link latency")?;
                self.expect_keyword("to", "between the shortest and longest latency")?;
                self.skip_blank();
                let at = self.cursor;
                let max = self.unsigned_duration("the longest link latency")?;
                if max < min {
                    return Err(self.error_at(at, "the longest latency is shorter than the shortest"));
                }
                self.cluster.latency_ms = Some((min, max));
            }
            _ => unreachable!("DECLARATIONS lists what is handled here"),
        }
        self.end_statement(keyword).map_err(|e| if e.line < start.line { self.error_at(start, e.message) } else { e })
    }

    fn new_actor_name(&self, name: &str, at: Cursor) -> Result<(), ParseError> {
        if [NOTE_STORE, REPLAY_STORE, ADMIN].contains(&name) || name.ends_with(BACKEND_ACTOR_SUFFIX) {
            return Err(self.error_at(at, format!("`{name}` is reserved for the simulator's own actor; choose another name")));
        }
        if self.instances.contains(name) || self.clients.contains(name) {
            return Err(self.error_at(at, format!("`{name}` is already the name of an instance or a client")));
        }
        Ok(())
    }

    /// Checks the cluster once it is complete (at the first step).
    fn finish_cluster(&mut self, at: Cursor) -> Result<(), ParseError> {
        if self.cluster.instances.is_empty() {
            return Err(self.error_at(at, "declare at least one `instance NAME` before the first step"));
        }
        if self.cluster.clients.is_empty() {
            return Err(self.error_at(at, "declare at least one `client NAME principal PRINCIPAL` before the first step"));
        }
        Ok(())
    }

    fn step(&mut self, keyword: &str, start: Cursor) -> Result<Action, ParseError> {
        let action = match keyword {
            "let" => {
                let (name, at) = self.name("the name to bind")?;
                if self.bound.contains(&name) {
                    return Err(self.error_at(at, format!("${name} is already bound")));
                }
                self.symbol('=', "after the name")?;
                let value = self.json("the value")?;
                self.bound.insert(name.clone());
                Action::Let { name, value }
            }
            "send" | "notify" | "answer" | "browse" => {
                let send = self.send(keyword)?;
                self.bind_answer(&send)?;
                Action::Send(send)
            }
            "admin" => Action::Admin(self.admin(false)?),
            "advance" => Action::Advance { duration_ms: self.unsigned_duration("how far to move the clock")? },
            "crash" => {
                let instance = self.instance()?;
                let trigger = match self.peek_word().as_deref() {
                    Some(word @ ("before" | "after")) => {
                        let moment = if word == "before" { Moment::Before } else { Moment::After };
                        self.word();
                        let (receiver, at) = self.name("who receives (an instance, `notes` or `replay`)")?;
                        let backend_actor =
                            receiver.strip_suffix(BACKEND_ACTOR_SUFFIX).is_some_and(|id| self.gateway_backend(id, at).is_ok());
                        if !self.instances.contains(&receiver) && receiver != NOTE_STORE && receiver != REPLAY_STORE && !backend_actor {
                            return Err(self.error_at(
                                at,
                                format!("`{receiver}` is not an instance, `notes`, `replay` or (behind a gateway) a backend such as `notes-backend`"),
                            ));
                        }
                        self.expect_keyword("receives", "after the receiver")?;
                        let (label, _) = self.word().ok_or_else(|| self.expected("what it receives (a store operation or a method)"))?;
                        let sender = if self.peek_word().as_deref() == Some("from") {
                            self.word();
                            let (sender, at) = self.name("who sends it (an instance or a client)")?;
                            if !self.instances.contains(&sender) && !self.clients.contains(&sender) {
                                return Err(self.error_at(at, format!("`{sender}` is not an instance or a client of this scenario")));
                            }
                            Some(sender)
                        } else {
                            None
                        };
                        Some(TriggerSpec { moment, receiver, label, sender })
                    }
                    _ => None,
                };
                Action::Crash { instance, trigger }
            }
            "restart" => Action::Restart { instance: self.instance()? },
            "pause" => {
                let instance = self.instance()?;
                let trigger = self.after_receives()?;
                Action::Pause { instance, trigger }
            }
            "resume" => Action::Resume { instance: self.instance()? },
            "rotate" => {
                let instances = self.instances_before_to()?;
                self.expect_keyword("to", "and the new signing key")?;
                Action::Rotate { instances, key: self.key()? }
            }
            "roll" => {
                let instances = self.instances_before_to()?;
                self.expect_keyword("to", "and the stage of the target file to restart them in")?;
                let stage = self.stage_name()?;
                let trigger = self.after_receives()?;
                Action::Roll { instances, stage, trigger }
            }
            "retire" => {
                let key = self.key()?;
                self.expect_keyword("on", "and the instances that forget it")?;
                let mut instances = vec![self.instance()?];
                while !self.at_line_end() {
                    instances.push(self.instance()?);
                }
                Action::Retire { key, instances }
            }
            "store" if self.keyword("cut") => {
                self.expect_keyword("after", "after `store cut` (`store cut after 2 statements`)")?;
                let after = self.count("how many more statements reach the store before the cut")?;
                if after > STORE_CUT_STATEMENTS_MAX {
                    return Err(self.expected(&format!("at most {STORE_CUT_STATEMENTS_MAX} statements")));
                }
                self.one_of(&["statement", "statements"], "`statement` or `statements`")?;
                let outage_ms = if self.keyword("for") {
                    let ms = self.unsigned_duration("how long the store stays unreachable")?;
                    if ms == 0 || ms > STORE_OUTAGE_MS_MAX {
                        return Err(self.expected(&format!("an outage of 1 ms to {STORE_OUTAGE_MS_MAX} ms")));
                    }
                    Some(ms)
                } else {
                    None
                };
                Action::StoreCut { after_statements: after as u32, outage_ms }
            }
            "store" if self.keyword("lock") => {
                self.expect_keyword("for", "and how long the write lock is held (`store lock for 2s`)")?;
                let window_ms = self.unsigned_duration("how long the write lock is held")?;
                if window_ms == 0 || window_ms > STORE_OUTAGE_MS_MAX {
                    return Err(self.expected(&format!("a lock of 1 ms to {STORE_OUTAGE_MS_MAX} ms")));
                }
                Action::StoreLock { window_ms }
            }
            "store" => {
                let store = self
                    .one_of(
                        &[NOTE_STORE, REPLAY_STORE],
                        "which store (`notes` or `replay`), or `cut after N statements` or `lock for DURATION`",
                    )?
                    .to_string();
                self.expect_keyword("unavailable", "after the store (`store replay unavailable for 1 call`)")?;
                self.expect_keyword("for", "and how many calls it refuses")?;
                let calls = self.count("how many calls it refuses")?;
                if calls == 0 || calls > STORE_OUTAGE_CALLS_MAX {
                    return Err(self.expected(&format!("between 1 and {STORE_OUTAGE_CALLS_MAX} calls")));
                }
                self.one_of(&["call", "calls"], "`call` or `calls`")?;
                Action::StoreUnavailable { store, calls: calls as u32 }
            }
            "parallel" => self.parallel()?,
            "expect" => Action::Expect(self.expect_statement()?),
            "drop" => {
                self.expect_keyword("answer", "(`drop answer from I to tools/call`)")?;
                self.expect_keyword("from", "and the instance that answers (`drop answer from I to tools/call`)")?;
                let instance = self.instance()?;
                self.expect_keyword("to", "and the method whose answer is lost (`drop answer from I to tools/call`)")?;
                let method = self.method()?;
                let closing = self.keyword("closing");
                if closing {
                    self.expect_keyword("the", "(`closing the connection`)")?;
                    self.expect_keyword("connection", "(`closing the connection`)")?;
                }
                Action::Arm { instance, method, fault: MessageFault::DropAnswer { closing } }
            }
            "duplicate" => {
                let method = self.method()?;
                self.expect_keyword("to", "and the instance it goes to (`duplicate tools/call to I [onto J]`)")?;
                let instance = self.instance()?;
                let onto = if self.keyword("onto") { Some(self.instance()?) } else { None };
                Action::Arm { instance, method, fault: MessageFault::Duplicate { onto } }
            }
            "hold" => {
                let method = self.method()?;
                self.expect_keyword("to", "and the instance it goes to (`hold tools/call to I`)")?;
                let instance = self.instance()?;
                Action::Arm { instance, method, fault: MessageFault::Hold }
            }
            "release" => Action::Release { instance: self.instance()? },
            "retry" => {
                let of = self.answer_name()?;
                self.arrow("between the answer retried and the instance")?;
                let instance = self.instance()?;
                let mut name = None;
                if self.keyword("as") {
                    let (bound, at) = self.name("the name of the retry's answer")?;
                    if self.bound.contains(&bound) {
                        return Err(self.error_at(at, format!("${bound} is already bound; choose another name")));
                    }
                    self.bound.insert(bound.clone());
                    self.answers.insert(bound.clone());
                    name = Some(bound);
                }
                Action::Retry { of, instance, name }
            }
            _ => unreachable!("STEPS lists what is handled here"),
        };
        self.end_statement(keyword).map_err(|e| if e.line < start.line { self.error_at(start, e.message) } else { e })?;
        Ok(action)
    }

    /// A JSON-RPC method (`tools/call`).
    fn method(&mut self) -> Result<String, ParseError> {
        let (method, _) = self.word().ok_or_else(|| self.expected("a method (e.g. tools/call)"))?;
        Ok(method)
    }

    fn instance(&mut self) -> Result<String, ParseError> {
        let (name, at) = self.name("an instance")?;
        if !self.instances.contains(&name) {
            return Err(self.error_at(at, format!("no instance named {name} (declared: {})", list(&self.instances))));
        }
        Ok(name)
    }

    fn client(&mut self) -> Result<String, ParseError> {
        let (name, at) = self.name("a client")?;
        if !self.clients.contains(&name) {
            return Err(self.error_at(at, format!("no client named {name} (declared: {})", list(&self.clients))));
        }
        Ok(name)
    }

    fn key(&mut self) -> Result<String, ParseError> {
        let (key, at) = self.word().ok_or_else(|| self.expected("a key id"))?;
        if !self.keys.contains(&key) {
            return Err(self.error_at(at, format!("key {key} is not declared: add `key {key}` above the first step")));
        }
        Ok(key)
    }

    /// `after I receives OP`, if the line goes on with `after` (`pause` and `roll`): the request that fires it.
    fn after_receives(&mut self) -> Result<Option<TriggerSpec>, ParseError> {
        if !self.keyword("after") {
            return Ok(None);
        }
        let receiver = self.instance()?;
        self.expect_keyword("receives", "after the receiver")?;
        let (label, _) = self.word().ok_or_else(|| self.expected("what it receives (a method such as tools/call)"))?;
        Ok(Some(TriggerSpec { moment: Moment::After, receiver, label, sender: None }))
    }

    /// One or more instances, up to `to` (`rotate I… to KEY`, `roll I… to STAGE`).
    fn instances_before_to(&mut self) -> Result<Vec<String>, ParseError> {
        let mut instances = vec![self.instance()?];
        while self.peek_word().as_deref() != Some("to") && !self.at_line_end() {
            instances.push(self.instance()?);
        }
        Ok(instances)
    }

    /// A stage of the target file (`[stages.NAME]`): 1 to 32 of `A-Z a-z 0-9 _ -`; whether the file has it is
    /// the target's to say.
    fn stage_name(&mut self) -> Result<String, ParseError> {
        let (stage, at) = self.word().ok_or_else(|| self.expected("a stage of the target file (a [stages.NAME] table)"))?;
        if !is_stage_name(&stage) {
            return Err(self.error_at(at, format!("`{stage}` is not a stage's name (1 to 32 of A-Z a-z 0-9 _ -)")));
        }
        Ok(stage)
    }

    fn answer_name(&mut self) -> Result<String, ParseError> {
        let (name, at) = self.name("the name of an earlier answer")?;
        if !self.answers.contains(&name) {
            return Err(self.error_at(at, format!("no earlier answer is named {name} (name one with `as {name}`)")));
        }
        Ok(name)
    }

    fn bind_answer(&mut self, send: &Send) -> Result<(), ParseError> {
        if let Some(name) = &send.name {
            self.bound.insert(name.clone());
            self.answers.insert(name.clone());
        }
        Ok(())
    }

    /// `send|notify|answer CLIENT -> INSTANCE …`, `browse BROWSER -> INSTANCE …`.
    fn send(&mut self, keyword: &str) -> Result<Send, ParseError> {
        self.skip_blank();
        let client_at = self.cursor;
        let client = self.client()?;
        match (keyword == "browse", self.browsers.contains(&client)) {
            (true, false) => {
                return Err(self
                    .error_at(client_at, format!("{client} is an MCP client; `browse` needs a browser (`browser NAME user PRINCIPAL`)")))
            }
            (false, true) => {
                return Err(self.error_at(
                    client_at,
                    format!(
                    "{client} is a browser: it opens pages with `browse {client} -> INSTANCE open|complete URL`, it sends no MCP requests"
                ),
                ))
            }
            _ => {}
        }
        self.arrow("between the client and the instance")?;
        let instance = self.instance()?;
        let request = match keyword {
            "answer" => Request::Answer(self.answer()?),
            "browse" => {
                use crate::framework::out_of_band::PageAction;
                let action = match self.one_of(&["open", "complete"], "open or complete")? {
                    "open" => PageAction::Open,
                    _ => PageAction::Complete,
                };
                let url = self.json("the page's URL (a string, e.g. $round1.result.inputRequests.publish_authorization.params.url)")?;
                let appended = if self.keyword("plus") { Some(self.string("the text appended to the URL")?) } else { None };
                Request::Page { action, url, appended }
            }
            _ => {
                if keyword == "send" && self.keyword("raw") {
                    Request::Raw { message: self.json("the exact message")? }
                } else {
                    let (method, _) = self.word().ok_or_else(|| self.expected("the method (e.g. tools/call), or `raw`"))?;
                    let params = self.json("the params object")?;
                    Request::Call { method, params, notification: keyword == "notify" }
                }
            }
        };
        let mut headers = None;
        if keyword != "answer" && keyword != "browse" && self.keyword("headers") {
            headers = Some(Box::new(self.json("the routing headers object")?));
        }
        let mut name = None;
        if self.keyword("as") {
            let (bound, at) = self.name("the name of this answer")?;
            if self.bound.contains(&bound) {
                return Err(self.error_at(at, format!("${bound} is already bound; choose another name")));
            }
            name = Some(bound);
        }
        Ok(Send { client, instance, request, headers, name })
    }

    /// After `answer CLIENT -> INSTANCE`: the action and its options.
    fn answer(&mut self) -> Result<Answer, ParseError> {
        let action = match self.word() {
            Some((word, _)) if word == "accept" => {
                self.skip_blank();
                if matches!(self.peek(), Some('{' | '$')) {
                    AnswerAction::Accept(Some(self.json("the form content")?))
                } else {
                    AnswerAction::Accept(None)
                }
            }
            Some((word, _)) if word == "decline" => AnswerAction::Decline,
            Some((word, _)) if word == "cancel" => AnswerAction::Cancel,
            Some((word, at)) => return Err(self.error_at(at, format!("expected accept, decline or cancel, found `{word}`"))),
            None => return Err(self.expected("accept, decline or cancel")),
        };
        let mut answer = Answer { action, form: None, arguments: None, state: None, extra_responses: None };
        loop {
            if self.keyword("for") {
                answer.form = Some(self.answer_name()?);
            } else if self.keyword("arguments") {
                answer.arguments = Some(self.json("the replacement arguments")?);
            } else if self.keyword("state") {
                answer.state = Some(self.json("the replacement requestState")?);
            } else if self.keyword("responses") {
                answer.extra_responses = Some(Box::new(self.json("the extra inputResponses entries (an object)")?));
            } else {
                break;
            }
        }
        Ok(answer)
    }

    fn admin(&mut self, in_parallel: bool) -> Result<AdminAction, ParseError> {
        let (verb, at) = self.word().ok_or_else(|| self.expected("delete, move, rename, swap, revoke, rugpull, publish or approve"))?;
        Ok(match verb.as_str() {
            "delete" => AdminAction::DeleteNote { note_id: self.note_id()? },
            "swap" => AdminAction::SwapNote { note_id: self.note_id()? },
            "move" => {
                let note_id = self.note_id()?;
                self.expect_keyword("to", "and the new URI")?;
                AdminAction::MoveNote { note_id, uri: self.string("the new file:// URI")? }
            }
            "rename" => {
                let note_id = self.note_id()?;
                self.expect_keyword("to", "and the new title")?;
                AdminAction::RenameNote { note_id, title: self.string("the new title")? }
            }
            "revoke" if in_parallel => {
                return Err(self.error_at(at, "revoke changes configuration between deliveries; put it outside the parallel block"));
            }
            "revoke" => {
                let (principal, principal_at) = self.name("the principal")?;
                if !self.principals.contains(&principal) {
                    return Err(self.error_at(principal_at, format!("principal {principal} is not declared")));
                }
                self.skip_blank();
                let uri_at = self.cursor;
                let workspace = self.string("the workspace URI to revoke")?;
                FileUri::parse(&workspace).map_err(|e| self.error_at(uri_at, format!("{workspace:?} is not a workspace URI: {e}")))?;
                AdminAction::Revoke { principal, workspace }
            }
            "rugpull" => {
                let (backend, tool) = self.qualified_tool()?;
                let fields = self.literal_object("the descriptor fields to replace (a JSON object; null removes a field)")?;
                AdminAction::Descriptor { backend, tool: Some(tool), fields }
            }
            "publish" => {
                let (backend, at) = self.name("the backend that publishes")?;
                self.gateway_backend(&backend, at)?;
                let fields = self.literal_object("the new descriptor (a JSON object)")?;
                AdminAction::Descriptor { backend, tool: None, fields }
            }
            "approve" if in_parallel => {
                return Err(self.error_at(at, "approve changes configuration between deliveries; put it outside the parallel block"));
            }
            "approve" => {
                let (backend, tool) = self.qualified_tool()?;
                AdminAction::Approve { tool: format!("{backend}.{tool}") }
            }
            other => {
                return Err(self.error_at(
                    at,
                    format!("expected delete, move, rename, revoke, rugpull, publish or approve after `admin`, found `{other}`"),
                ))
            }
        })
    }

    /// A literal JSON object (no `$references`: what a backend publishes does not depend on the run).
    fn literal_object(&mut self, what: &str) -> Result<Value, ParseError> {
        self.skip_blank();
        let at = self.cursor;
        match self.json(what)? {
            Template::Literal(value @ Value::Object(_)) => Ok(value),
            _ => Err(self.error_at(at, format!("{what}: a literal JSON object, without $references"))),
        }
    }

    /// `backend.tool`, naming a backend of the demo gateway.
    fn qualified_tool(&mut self) -> Result<(String, String), ParseError> {
        self.skip_blank();
        let at = self.cursor;
        let (word, _) = self.word().ok_or_else(|| self.expected("a tool named backend.tool"))?;
        let Some((backend, tool)) = word.split_once('.') else {
            return Err(self.error_at(at, format!("`{word}` is not a qualified tool name: write backend.tool (e.g. notes.export)")));
        };
        self.gateway_backend(backend, at)?;
        Ok((backend.to_string(), tool.to_string()))
    }

    fn gateway_backend(&self, backend: &str, at: Cursor) -> Result<(), ParseError> {
        if !self.cluster.instances.iter().any(|i| i.gateway) {
            return Err(self.error_at(at, "backends exist only behind a gateway: declare `gateway NAME` above the first step"));
        }
        let known = crate::config::gateway::GatewayFile::demo().backends;
        if !known.contains_key(backend) {
            let names: Vec<&String> = known.keys().collect();
            return Err(self.error_at(at, format!("no gateway backend {backend} (the demo gateway has {names:?})")));
        }
        Ok(())
    }

    fn note_id(&mut self) -> Result<String, ParseError> {
        self.word().map(|(w, _)| w).ok_or_else(|| self.expected("a note id"))
    }

    fn parallel(&mut self) -> Result<Action, ParseError> {
        self.symbol('{', "to open the parallel block")?;
        self.end_statement("parallel {")?;
        let mut items = Vec::new();
        let mut names = Vec::new();
        loop {
            self.skip_trivia();
            let start = self.cursor;
            if self.peek() == Some('}') {
                self.bump();
                break;
            }
            if self.peek().is_none() {
                return Err(self.error_here("the parallel block is not closed: expected `}`"));
            }
            if items.len() >= PARALLEL_ITEMS_MAX {
                return Err(self.error_at(start, format!("more than {PARALLEL_ITEMS_MAX} messages in one parallel block")));
            }
            let (keyword, at) = self.word().ok_or_else(|| self.expected("send, notify, answer, browse, admin or `}`"))?;
            let item = match keyword.as_str() {
                "send" | "notify" | "answer" | "browse" => {
                    let send = self.send(&keyword)?;
                    if let Some(name) = &send.name {
                        if names.contains(name) {
                            return Err(self.error_at(at, format!("{name} is named twice in this block")));
                        }
                        names.push(name.clone());
                    }
                    ParallelAction::Send(send)
                }
                "admin" => ParallelAction::Admin(self.admin(true)?),
                other => {
                    return Err(
                        self.error_at(at, format!("a parallel block holds send, notify, answer, browse and admin lines, not `{other}`"))
                    );
                }
            };
            self.end_statement(&keyword)?;
            let text = self.statement_text(start);
            items.push(ParallelItem { line: start.line, text, item });
        }
        if items.is_empty() {
            return Err(self.error_here("an empty parallel block does nothing; put messages in it"));
        }
        for item in &items {
            if let ParallelAction::Send(send) = &item.item {
                self.bind_answer(send)?;
            }
        }
        Ok(Action::Parallel(items))
    }

    /// What follows `expect`: an expectation, or `always` and one (judged under faults too). A request named
    /// `always` still works (`expect always complete`): `always` is the marker only when an expectation follows.
    fn expect_statement(&mut self) -> Result<Expectation, ParseError> {
        let saved = self.cursor;
        if self.word().is_some_and(|(word, _)| word == "always") {
            match self.expectation() {
                Ok(expectation) => return Ok(Expectation::Always(Box::new(expectation))),
                Err(marked_error) => {
                    self.cursor = saved;
                    return self.expectation().map_err(|_| marked_error);
                }
            }
        }
        self.cursor = saved;
        self.expectation()
    }

    fn expectation(&mut self) -> Result<Expectation, ParseError> {
        let saved = self.cursor;
        let first = self.word().map(|(w, _)| w);
        match first.as_deref() {
            Some("note") => {
                let id = self.note_id()?;
                let present = self.one_of(&["present", "absent"], "`present` or `absent`")? == "present";
                Ok(Expectation::NotePresent { id, present })
            }
            Some("notes") => {
                self.expect_keyword("count", "after `expect notes`")?;
                Ok(Expectation::NotesCount(self.count("the number of notes")?))
            }
            Some("exports") => {
                self.expect_keyword("count", "after `expect exports`")?;
                Ok(Expectation::ExportsCount(self.count("the number of exports")?))
            }
            Some("consumed") => {
                self.expect_keyword("count", "after `expect consumed`")?;
                Ok(Expectation::ConsumedCount(self.count("the number of consumed nonces")?))
            }
            Some("nonce") => {
                self.expect_keyword("of", "after `expect nonce`")?;
                let answer = self.answer_name()?;
                match self.word() {
                    Some((w, _)) if w == "consumed" => {
                        Ok(Expectation::Nonce { answer, record: Some(self.json("the consumption record")?) })
                    }
                    Some((w, _)) if w == "unused" => Ok(Expectation::Nonce { answer, record: None }),
                    _ => Err(self.expected("`consumed RECORD` or `unused`")),
                }
            }
            Some("if") => {
                let condition = self.expectation()?;
                self.expect_keyword("then", "after the condition of `expect if`")?;
                let consequence = self.expectation()?;
                Ok(Expectation::If { condition: Box::new(condition), consequence: Box::new(consequence) })
            }
            Some(word @ ("one" | "each" | "none" | "at")) => {
                let quantity = match word {
                    "one" => Quantity::Exactly(1),
                    "each" => Quantity::Each,
                    "none" => Quantity::Exactly(0),
                    _ => match self.one_of(&["most", "least"], "`most` or `least` after `expect at`")? {
                        "most" => Quantity::AtMost(self.count("how many at most")?),
                        _ => Quantity::AtLeast(self.count("how many at least")?),
                    },
                };
                self.expect_keyword("of", &format!("after `expect {word}`"))?;
                self.quantified(quantity)
            }
            Some(number) if number.chars().all(|c| c.is_ascii_digit()) => {
                let n: usize = number.parse().map_err(|_| self.expected("a count of answers"))?;
                self.expect_keyword("of", &format!("after `expect {number}`"))?;
                self.quantified(Quantity::Exactly(n))
            }
            _ => {
                self.cursor = saved;
                let name = self.answer_name().map_err(|mut error| {
                    // Not an answer's name: perhaps a misspelt form of `expect` (`expect nots count 3`).
                    let meant = closest_keywords(first.as_deref().unwrap_or(""), &EXPECT_FORMS.map(|(keyword, _)| keyword));
                    let forms: Vec<String> = EXPECT_FORMS
                        .iter()
                        .filter(|(keyword, _)| meant.contains(keyword))
                        .map(|(_, form)| format!("`expect {form}`"))
                        .collect();
                    if !forms.is_empty() {
                        error.message = format!("{}; or did you mean {}?", error.message, forms.join(" or "));
                    }
                    error
                })?;
                Ok(Expectation::Answer { targets: Targets::One(name), check: self.answer_check()? })
            }
        }
    }

    /// `A, B, …: CHECK` after a quantifier's `of`.
    fn quantified(&mut self, quantity: Quantity) -> Result<Expectation, ParseError> {
        let mut names = vec![self.answer_name()?];
        loop {
            self.skip_blank();
            match self.peek() {
                Some(',') => {
                    self.bump();
                    names.push(self.answer_name()?);
                }
                Some(':') => {
                    self.bump();
                    break;
                }
                _ => return Err(self.expected("`,` and another answer, or `:` and the check")),
            }
        }
        let check = self.answer_check()?;
        Ok(Expectation::Answer { targets: Targets::Some { names, quantity }, check })
    }

    /// One check, or several joined by `or` (any of them).
    fn answer_check(&mut self) -> Result<AnswerCheck, ParseError> {
        let first = self.single_check()?;
        let mut alternatives = vec![first];
        loop {
            let saved = self.cursor;
            match self.word() {
                Some((w, _)) if w == "or" => alternatives.push(self.single_check()?),
                _ => {
                    self.cursor = saved;
                    break;
                }
            }
        }
        Ok(if alternatives.len() == 1 { alternatives.remove(0) } else { AnswerCheck::Any(alternatives) })
    }

    /// Whether the clause ends here: the line does, or a word that continues the statement follows.
    fn at_clause_end(&mut self) -> bool {
        if self.at_line_end() {
            return true;
        }
        let saved = self.cursor;
        let next = self.word().map(|(w, _)| w);
        self.cursor = saved;
        matches!(next.as_deref(), Some("or" | "then"))
    }

    fn single_check(&mut self) -> Result<AnswerCheck, ParseError> {
        let saved = self.cursor;
        match self.word().map(|(w, _)| w).as_deref() {
            Some("complete") => return Ok(AnswerCheck::ResultType("complete".into())),
            Some("input_required") => return Ok(AnswerCheck::ResultType("input_required".into())),
            Some("tool_error") => return Ok(AnswerCheck::ToolError),
            Some("error") => {
                let code = self.integer("the JSON-RPC error code")?;
                let reason = if self.at_clause_end() { None } else { Some(self.word().ok_or_else(|| self.expected("a reason"))?.0) };
                return Ok(AnswerCheck::Error { code, reason });
            }
            Some("no") => {
                self.expect_keyword("response", "after `no`")?;
                return Ok(AnswerCheck::NoResponse);
            }
            _ => self.cursor = saved,
        }
        self.skip_blank();
        if !matches!(self.peek(), Some(c) if c.is_ascii_alphanumeric() || c == '"' || c == '_') {
            return Err(self.expected(CHECKS));
        }
        let start = self.cursor;
        let path = self.path()?;
        self.skip_blank();
        if self.peek() == Some('=') {
            self.bump();
            return Ok(AnswerCheck::Equals { path, value: self.json("the value expected there")? });
        }
        if let ([word], false) = (path.as_slice(), matches!(self.peek_word().as_deref(), Some("absent" | "present"))) {
            // A lone word that is no path check: a misspelt check keyword (`compete`), not a path.
            let meant: Vec<String> = closest_keywords(word, &["complete", "input_required", "tool_error", "error", "no"])
                .into_iter()
                .map(|keyword| format!("`{}`", if keyword == "no" { "no response" } else { keyword }))
                .collect();
            if !meant.is_empty() {
                let meant = meant.join(" or ");
                return Err(self.error_at(start, format!("`{word}` is not a check: did you mean {meant}? (expected {CHECKS})")));
            }
        }
        match self.one_of(&["absent", "present"], "`= JSON`, `absent` or `present` after the path")? {
            "absent" => Ok(AnswerCheck::Absent { path }),
            _ => Ok(AnswerCheck::Present { path }),
        }
    }
}

/// What may follow `expect ANSWER`, for messages.
const CHECKS: &str = "a check: complete, input_required, tool_error, error CODE [REASON], no response, or PATH = JSON";

/// The forms of `expect` that start with a keyword rather than an answer's name.
const EXPECT_FORMS: [(&str, &str); 7] = [
    ("note", "note ID present|absent"),
    ("notes", "notes count N"),
    ("exports", "exports count N"),
    ("consumed", "consumed count N"),
    ("nonce", "nonce of ANSWER consumed {…}|unused"),
    ("one", "one of A, B: CHECK"),
    ("each", "each of A, B: CHECK"),
];

/// The keywords `word` is most likely a typo of (all of those equally close): within two edits, and fewer than
/// half its letters.
fn closest_keywords(word: &str, keywords: &[&'static str]) -> Vec<&'static str> {
    let distances: Vec<(usize, &'static str)> = keywords.iter().map(|keyword| (strsim::levenshtein(word, keyword), *keyword)).collect();
    let Some(best) = distances.iter().map(|(distance, _)| *distance).min() else { return Vec::new() };
    if best == 0 || best > 2 || best * 2 >= word.chars().count() {
        return Vec::new();
    }
    distances.into_iter().filter(|(distance, _)| *distance == best).map(|(_, keyword)| keyword).collect()
}

fn strip_comment(line: &str) -> &str {
    // A `#` inside a JSON string is not a comment.
    let mut in_string = false;
    let mut escaped = false;
    for (index, c) in line.char_indices() {
        match c {
            '\\' if in_string && !escaped => {
                escaped = true;
                continue;
            }
            '"' if !escaped => in_string = !in_string,
            '#' if !in_string => return &line[..index],
            _ => {}
        }
        escaped = false;
    }
    line
}

fn list(names: &BTreeSet<String>) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.iter().cloned().collect::<Vec<_>>().join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLUSTER: &str =
        "use demo\nkey k1\nkey k2\ninstance i1 keys k1\ninstance i2 keys k1 k2 clock -250ms\nclient alice principal alice\n";

    fn error(text: &str) -> String {
        parse("s.sim", "s", text).map(|_| ()).unwrap_err().to_string()
    }

    fn with_cluster(steps: &str) -> String {
        error(&format!("{CLUSTER}{steps}"))
    }

    #[test]
    fn an_impersonator_copies_a_declared_clients_capabilities_and_names_it() {
        let cluster = "use demo\ninstance i1\nclient alice principal alice capabilities {\"elicitation\": {\"form\": {}, \"url\": {}}}\n";
        let parsed = parse("s.sim", "s", &format!("{cluster}client mallory principal bob impersonates alice\n")).expect("it parses");
        let mallory = &parsed.cluster.clients[1];
        assert_eq!((mallory.principal.as_str(), mallory.impersonates.as_deref()), ("bob", Some("alice")));
        assert_eq!(mallory.capabilities, parsed.cluster.clients[0].capabilities);
        let error = |text: &str| parse("s.sim", "s", text).map(|_| ()).unwrap_err().to_string();
        assert!(error(&format!("{cluster}client mallory principal bob impersonates carol\n")).contains("no client carol is declared above"));
        assert!(
            error("use demo\ninstance i1\nbrowser web user alice\nclient m principal bob impersonates web\n").contains("sends no _meta")
        );
    }

    #[test]
    fn store_cut_and_lock_parse_and_their_mistakes_point_at_the_column() {
        let parsed = parse(
            "s.sim",
            "s",
            &format!("{CLUSTER}store cut after 2 statements for 1s\nstore cut after 1 statement\nstore lock for 500ms\n"),
        )
        .expect("it parses");
        let actions: Vec<String> = parsed.steps.iter().map(|s| format!("{:?}", s.action)).collect();
        assert_eq!(
            actions,
            [
                "StoreCut { after_statements: 2, outage_ms: Some(1000) }",
                "StoreCut { after_statements: 1, outage_ms: None }",
                "StoreLock { window_ms: 500 }"
            ]
        );
        assert!(with_cluster("store cut 2 statements\n").starts_with("s.sim:7:11: "), "{}", with_cluster("store cut 2 statements\n"));
        assert!(with_cluster("store cut after 2 rows\n").starts_with("s.sim:7:19: "), "{}", with_cluster("store cut after 2 rows\n"));
        assert!(with_cluster("store cut after 2 statements for 0ms\n").contains("an outage of 1 ms to 60000 ms"));
        assert!(with_cluster("store lock for 2h\n").contains("a lock of 1 ms to 60000 ms"));
        assert!(with_cluster("store lock 2s\n").starts_with("s.sim:7:12: "), "{}", with_cluster("store lock 2s\n"));
        assert!(with_cluster("store files unavailable for 1 call\n").contains("or `cut after N statements`"));
    }

    #[test]
    fn message_faults_and_retries_parse_and_a_wrong_one_says_where_and_what() {
        let steps = "send alice -> i1 tools/list {} as r\ndrop answer from i1 to tools/call closing the connection\n\
                     drop answer from i2 to tools/list\nduplicate tools/call to i1 onto i2\nduplicate tools/call to i2\n\
                     hold tools/call to i2\nrelease i2\nretry r -> i2 as again\nretry again -> i1\n";
        let parsed = parse("s.sim", "s", &format!("{CLUSTER}{steps}")).expect("it parses");
        let actions: Vec<&Action> = parsed.steps.iter().map(|s| &s.action).collect();
        assert!(
            matches!(actions[1], Action::Arm { instance, method, fault: MessageFault::DropAnswer { closing: true } } if instance == "i1" && method == "tools/call")
        );
        assert!(matches!(actions[2], Action::Arm { fault: MessageFault::DropAnswer { closing: false }, .. }));
        assert!(matches!(actions[3], Action::Arm { fault: MessageFault::Duplicate { onto: Some(j) }, .. } if j == "i2"));
        assert!(matches!(actions[4], Action::Arm { fault: MessageFault::Duplicate { onto: None }, .. }));
        assert!(matches!(actions[5], Action::Arm { fault: MessageFault::Hold, .. }));
        assert!(matches!(actions[6], Action::Release { instance } if instance == "i2"));
        assert!(matches!(actions[7], Action::Retry { of, instance, name: Some(n) } if of == "r" && instance == "i2" && n == "again"));
        assert!(matches!(actions[8], Action::Retry { of, name: None, .. } if of == "again"));
        // Line 7 is the first step (six declaration lines).
        assert_eq!(with_cluster("drop answer from i9 to tools/call\n"), "s.sim:7:18: no instance named i9 (declared: i1, i2)");
        assert!(with_cluster("drop answer i1 to tools/call\n").starts_with("s.sim:7:13: expected `from`"));
        assert!(with_cluster("drop answer from i1 to tools/call closing\n").starts_with("s.sim:7:"));
        assert!(with_cluster("duplicate tools/call to i1 onto i7\n").contains("no instance named i7"));
        assert!(with_cluster("hold tools/call i1\n").contains("expected `to`"));
        assert!(with_cluster("retry nothing -> i1\n").starts_with("s.sim:7:7: no earlier answer is named nothing"));
        assert!(with_cluster("send alice -> i1 tools/list {} as r\nretry r -> i1 as r\n").contains("$r is already bound"));
        assert!(with_cluster("release i3\n").contains("no instance named i3"));
    }

    #[test]
    fn a_tool_error_is_its_own_check() {
        let parsed =
            parse("s.sim", "s", &format!("{CLUSTER}send alice -> i1 tools/list {{}} as r\nexpect r tool_error\n")).expect("it parses");
        assert!(parsed
            .steps
            .iter()
            .any(|s| matches!(&s.action, Action::Expect(Expectation::Answer { check: AnswerCheck::ToolError, .. }))));
        assert!(with_cluster("send alice -> i1 tools/list {} as r\nexpect r tool_eror\n").contains("did you mean `tool_error`?"));
    }

    #[test]
    fn browsers_only_browse_and_clients_never_do() {
        let cluster = "use demo\ninstance i1\nclient alice principal alice\nbrowser web user alice\n";
        let error = |steps: &str| parse("s.sim", "s", &format!("{cluster}{steps}")).map(|_| ()).unwrap_err().to_string();
        assert!(error("send web -> i1 tools/list {}\n").contains("web is a browser"), "a browser sends no MCP request");
        assert!(error("browse alice -> i1 open \"https://notes.example/connect/x\"\n").contains("alice is an MCP client"));
        assert!(error("browse web -> i1 submit \"u\"\n").contains("expected open or complete"));
        assert!(parse("s.sim", "s", "use demo\ninstance i1\nbrowser web user mallory\n").is_err(), "the user is a declared principal");
        let parsed =
            parse("s.sim", "s", &format!("{cluster}browse web -> i1 complete \"https://notes.example/connect/x\" plus \"?u=b\" as p\n"))
                .expect("a browse step parses");
        assert!(parsed.cluster.clients[1].browser);
        match &parsed.steps[0].action {
            Action::Send(Send { request: Request::Page { appended, .. }, name, .. }) => {
                assert_eq!((appended.as_deref(), name.as_deref()), (Some("?u=b"), Some("p")));
            }
            other => panic!("expected a page request, got {other:?}"),
        }
    }

    #[test]
    fn legacy_clients_and_dual_era_instances_are_declared_and_checked() {
        let text = "use demo\ninstance i1 eras both\ninstance i2\nclient desk principal alice legacy roots [\"file:///a\"] answers {\"action\": \"cancel\"}\n";
        let scenario = parse("s.sim", "s", text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((scenario.cluster.instances[0].eras_both, scenario.cluster.instances[1].eras_both), (true, false));
        let legacy = scenario.cluster.clients[0].legacy.clone().unwrap();
        assert_eq!((legacy.roots, legacy.elicitation), (vec!["file:///a".to_string()], serde_json::json!({"action": "cancel"})));
        assert!(error("use demo\ngateway g1 eras both\n").contains("2026-07-28 era only"));
        assert!(error("use demo\ninstance i1 eras old\n").contains("`both` or `modern`"));
        assert!(error("use demo\ninstance i1\nclient c principal alice legacy roots [1]\n").contains("URI strings"));
    }

    #[test]
    fn pause_and_resume_parse_now_or_armed_on_what_the_instance_receives() {
        let text =
            "use demo\ninstance i1\ninstance i2\nclient c principal alice\npause i1 after i1 receives tools/call\npause i2\nresume i1\n";
        let scenario = parse("s.sim", "s", text).unwrap_or_else(|e| panic!("{e}"));
        match &scenario.steps[0].action {
            Action::Pause { instance, trigger: Some(trigger) } => {
                assert_eq!((instance.as_str(), trigger.receiver.as_str(), trigger.label.as_str()), ("i1", "i1", "tools/call"))
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(&scenario.steps[1].action, Action::Pause { instance, trigger: None } if instance == "i2"));
        assert!(matches!(&scenario.steps[2].action, Action::Resume { instance } if instance == "i1"));
        assert!(error("use demo\ninstance i1\nclient c principal alice\npause i3\n").contains("no instance named i3"));
        assert!(error("use demo\ninstance i1\nclient c principal alice\npause i1 after i1 gets tools/call\n").contains("receives"));
    }

    #[test]
    fn errors_name_file_line_column_and_what_was_expected() {
        assert_eq!(
            error("use demo\nsned alice -> i1 tools/list {}\n"),
            "s.sim:2:1: unknown statement `sned`: expected a declaration (use, principal, note, key, instance, gateway, client, browser, state-ttl, replay, latency) or a step (let, send, notify, answer, browse, admin, advance, crash, restart, pause, resume, rotate, retire, roll, store, parallel, expect, drop, duplicate, hold, release, retry)"
        );
        assert_eq!(
            with_cluster("send alice i1 tools/list {}\n"),
            "s.sim:7:12: expected `->` between the client and the instance, found `i1`"
        );
        assert_eq!(with_cluster("send alice -> i9 tools/list {}\n"), "s.sim:7:15: no instance named i9 (declared: i1, i2)");
        assert_eq!(with_cluster("send bob -> i1 tools/list {}\n"), "s.sim:7:6: no client named bob (declared: alice)");
        assert_eq!(
            with_cluster("send alice -> i1 tools/list\n"),
            "s.sim:7:28: expected the params object (JSON, or a $reference), found the end of the line"
        );
        assert_eq!(
            with_cluster("send alice -> i1 tools/call {\"name\": \"notes_delete\",\n   \"arguments\": {\"title\": tps}}\n"),
            "s.sim:8:27: expected a JSON value, found `tps` (strings need \"quotes\"; references start with $)"
        );
        assert_eq!(
            with_cluster("send alice -> i1 tools/list {\"a\": 1 \"b\": 2}\n"),
            "s.sim:7:37: expected `,` or `}` in this object, found `\"`"
        );
        assert_eq!(
            with_cluster("send alice -> i1 tools/list {} as\n"),
            "s.sim:7:34: expected the name of this answer (a name: a letter, then letters, digits, `-` or `_`), found the end of the line"
        );
        assert_eq!(
            with_cluster("send alice -> i1 tools/list {} extra\n"),
            "s.sim:7:32: expected the end of the `send` statement, found `extra`"
        );
    }

    #[test]
    fn references_and_names_must_be_bound_first() {
        assert_eq!(
            with_cluster("send alice -> i1 tools/call {\"arguments\": $args}\n"),
            "s.sim:7:43: $args is not bound here: bind it first with `let args = …` or name an answer `as args`"
        );
        assert_eq!(with_cluster("expect round1 complete\n"), "s.sim:7:8: no earlier answer is named round1 (name one with `as round1`)");
        assert_eq!(
            with_cluster("send alice -> i1 tools/list {} as r\nsend alice -> i1 tools/list {} as r\n"),
            "s.sim:8:35: $r is already bound; choose another name"
        );
        assert_eq!(
            with_cluster("answer alice -> i1 accept {} for nothing\n"),
            "s.sim:7:34: no earlier answer is named nothing (name one with `as nothing`)"
        );
    }

    #[test]
    fn the_cluster_is_declared_before_the_first_step() {
        assert_eq!(
            with_cluster("advance 1s\ninstance i3\n"),
            "s.sim:8:1: `instance` declares the cluster, which must be complete before the first step (line 7); move it up"
        );
        assert_eq!(
            error("use demo\nclient alice principal alice\nadvance 1s\n"),
            "s.sim:3:1: declare at least one `instance NAME` before the first step"
        );
        assert_eq!(
            error("use demo\ninstance i1\n"),
            "s.sim:3:1: declare at least one `client NAME principal PRINCIPAL` before the first step"
        );
        assert_eq!(error("instance notes\n"), "s.sim:1:10: `notes` is reserved for the simulator's own actor; choose another name");
        assert_eq!(error("instance i1\ninstance i1\n"), "s.sim:2:10: `i1` is already the name of an instance or a client");
        assert_eq!(error("instance i1 keys k7\n"), "s.sim:1:18: key k7 is not declared: add `key k7` above");
        assert_eq!(
            error("instance i1\nclient carol principal carol\n"),
            "s.sim:2:24: principal carol is not declared: add `principal carol workspaces \"file:///…\"` or `use demo` above"
        );
        assert_eq!(
            error("principal carol workspaces \"http://x/y\"\n"),
            "s.sim:1:28: \"http://x/y\" is not a workspace URI: only file:// URIs are accepted"
        );
        assert_eq!(error("key k.1\n"), "s.sim:1:5: key k.1: a key id is 1 to 32 characters of A-Z a-z 0-9 _ -");
        assert_eq!(error("key k1 secret \"c2hvcnQ=\"\n"), "s.sim:1:5: key k1: a key must be at least 32 bytes");
        assert_eq!(error("latency 5ms to 2ms\n"), "s.sim:1:16: the longest latency is shorter than the shortest");
        assert_eq!(
            error("state-ttl 5 minutes\n"),
            "s.sim:1:11: expected the requestState lifetime (a duration such as 250ms, 30s, 5m or 1h), found `5`"
        );
        assert_eq!(error("replay capacity 0\n"), "s.sim:1:18: a replay store of capacity 0 could never hold a nonce");
    }

    #[test]
    fn blocks_and_steps_report_their_own_mistakes() {
        assert_eq!(
            with_cluster("parallel {\n  send alice -> i1 tools/list {}\n"),
            "s.sim:9:1: the parallel block is not closed: expected `}`"
        );
        assert_eq!(
            with_cluster("parallel {\n  advance 1s\n}\n"),
            "s.sim:8:3: a parallel block holds send, notify, answer, browse and admin lines, not `advance`"
        );
        assert_eq!(
            with_cluster("parallel {\n  admin revoke alice \"file:///x\"\n}\n"),
            "s.sim:8:9: revoke changes configuration between deliveries; put it outside the parallel block"
        );
        assert_eq!(with_cluster("parallel {\n}\n"), "s.sim:8:2: an empty parallel block does nothing; put messages in it");
        assert_eq!(
            with_cluster("crash i1 during replay receives claim\n"),
            "s.sim:7:10: expected the end of the `crash` statement, found `during`"
        );
        assert_eq!(
            with_cluster("crash i1 before alice receives response\n"),
            "s.sim:7:17: `alice` is not an instance, `notes`, `replay` or (behind a gateway) a backend such as `notes-backend`"
        );
        assert_eq!(with_cluster("rotate i1 to k3\n"), "s.sim:7:14: key k3 is not declared: add `key k3` above the first step");
        assert_eq!(with_cluster("answer alice -> i1 approve\n"), "s.sim:7:20: expected accept, decline or cancel, found `approve`");
        assert_eq!(
            with_cluster("send alice -> i1 tools/list {} as r\nexpect r result.x == 1\n"),
            "s.sim:8:20: expected the value expected there (JSON, or a $reference), found `=`"
        );
        assert_eq!(with_cluster("expect note note-7 gone\n"), "s.sim:7:20: expected `present` or `absent`, found `gone`");
        // A misspelt check keyword is named as such, not read as a path into the answer.
        let answered = |check: &str| with_cluster(&format!("send alice -> i1 tools/list {{}} as x\nexpect x {check}\n"));
        assert_eq!(answered("compete"), format!("s.sim:8:10: `compete` is not a check: did you mean `complete`? (expected {CHECKS})"));
        assert!(answered("input_requird").contains("did you mean `input_required`?"), "{}", answered("input_requird"));
        assert!(answered("eror -32602").contains("did you mean `error`?"), "{}", answered("eror -32602"));
        assert!(answered("complet").contains("did you mean `complete`?"), "{}", answered("complet"));
        // A real one-word path stays a path: `expect x result present` parses.
        assert!(parse("s.sim", "s", &format!("{CLUSTER}send alice -> i1 tools/list {{}} as x\nexpect x result present\n")).is_ok());
        assert_eq!(
            answered("resultt"),
            "s.sim:8:17: expected `= JSON`, `absent` or `present` after the path, found the end of the line",
            "a word like no keyword is still read as a path"
        );
        assert_eq!(
            with_cluster("expect nots count 3\n"),
            "s.sim:7:8: no earlier answer is named nots (name one with `as nots`); or did you mean `expect note ID present|absent` or `expect notes count N`?"
        );
        assert_eq!(
            with_cluster("advance soon\n"),
            "s.sim:7:9: expected how far to move the clock (a duration such as 250ms, 30s, 5m or 1h), found `soon`"
        );
    }

    #[test]
    fn every_construct_parses_into_the_model() {
        let text = format!(
            "# What it teaches.\n# Second line.\n\n{CLUSTER}\
             client bob principal bob capabilities {{\"elicitation\": {{\"url\": {{}}}}}}\n\
             principal carol workspaces \"file:///c\" \"file:///d\"\n\
             note n1 title \"T\" uri \"file:///c/n1.md\" body \"B\"\n\
             state-ttl 2m\nreplay capacity 5 per-principal 3 grace 10s\nlatency 2ms to 9ms\n\
             let args = {{\"workspaceUri\": \"file:///c\", # a comment inside JSON\n   \"title\": \"T\"}}\n\
             send alice -> i1 tools/call {{\"name\": \"notes_delete\", \"arguments\": $args}} as r1\n\
             send alice -> i2 raw \"{{not json\" as raw\n\
             notify alice -> i1 tools/list {{}}\n\
             crash i1 after replay receives claim_and_delete\nrestart i1\n\
             parallel {{\n  answer alice -> i1 accept {{\"note_id\": \"n1\", \"confirm\": true}} as a\n  answer alice -> i2 decline for r1 as b\n  admin move n1 to \"file:///x\"\n}}\n\
             answer bob -> i2 cancel for r1 arguments $args state tamper($r1.result.requestState, \"principal\", \"bob\") as c\n\
             rotate i1 i2 to k2\nretire k1 on i1 i2\nadvance 1h\nadmin revoke carol \"file:///c\"\n\
             expect one of a, b: complete\nexpect each of a, b: error -32602\nexpect r1 result._meta.\"io.modelcontextprotocol/serverInfo\".name = \"mcpsim-notes\"\n\
             expect r1 result.x absent\nexpect raw no response\nexpect note n1 present\nexpect notes count 8\nexpect consumed count 0\n\
             expect nonce of r1 unused\nexpect nonce of r1 consumed {{\"outcome\": \"declined\"}}\n"
        );
        let scenario = parse("s.sim", "s", &text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(scenario.summary, ["What it teaches.", "Second line."]);
        let cluster = &scenario.cluster;
        assert!(cluster.use_demo);
        assert_eq!(cluster.instances[1].clock_offset_ms, -250);
        assert_eq!(cluster.instances[1].keys, ["k1", "k2"]);
        assert_eq!(cluster.clients[1].capabilities, serde_json::json!({"elicitation": {"url": {}}}));
        assert_eq!(cluster.principals[0].workspaces, ["file:///c", "file:///d"]);
        assert_eq!((cluster.state_ttl_ms, cluster.replay_capacity, cluster.replay_grace_ms), (Some(120_000), Some(5), Some(10_000)));
        assert_eq!(cluster.replay_principal_capacity, Some(3));
        assert_eq!(cluster.latency_ms, Some((2, 9)));
        assert_eq!(cluster.keys[0].secret, derived_key_secret("k1"));
        assert_eq!(scenario.steps.len(), 22);
        let parallel = scenario.steps.iter().find_map(|s| if let Action::Parallel(items) = &s.action { Some(items) } else { None });
        assert_eq!(parallel.map(Vec::len), Some(3));
        let texts: Vec<&str> = scenario.steps.iter().map(|s| s.text.as_str()).collect();
        assert!(texts.contains(&"let args = {\"workspaceUri\": \"file:///c\", …"), "{texts:?}");
        assert!(texts.contains(&"crash i1 after replay receives claim_and_delete"));
    }

    #[test]
    fn stages_and_rolls_parse_and_their_mistakes_are_named() {
        let text = "instance i1 stage k1-k2 clock +5m\ninstance i2 keys k1 stage old\nclient u principal alice\n\
                    roll i1 i2 to k2\nroll i2 to new after i2 receives tools/call\n";
        let text = format!("use demo\nkey k1\n{text}");
        let scenario = parse("s.sim", "s", &text).unwrap_or_else(|e| panic!("{e}"));
        let instances = &scenario.cluster.instances;
        assert_eq!((instances[0].stage.as_deref(), instances[0].clock_offset_ms), (Some("k1-k2"), 300_000));
        assert_eq!((instances[1].stage.as_deref(), instances[1].keys.as_slice()), (Some("old"), &["k1".to_string()][..]));
        let rolls: Vec<_> = scenario
            .steps
            .iter()
            .filter_map(|s| match &s.action {
                Action::Roll { instances, stage, trigger } => {
                    Some((instances.clone(), stage.clone(), trigger.as_ref().map(|t| t.label.clone())))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            rolls,
            [
                (vec!["i1".to_string(), "i2".to_string()], "k2".to_string(), None),
                (vec!["i2".to_string()], "new".to_string(), Some("tools/call".to_string()))
            ]
        );
        assert_eq!(
            error("use demo\ninstance i1\nclient u principal alice\nroll i1 to k/2\n"),
            "s.sim:4:12: `k/2` is not a stage's name (1 to 32 of A-Z a-z 0-9 _ -)"
        );
        assert_eq!(
            error("use demo\ninstance i1\nclient u principal alice\nroll i1 k2\n"),
            "s.sim:4:9: no instance named k2 (declared: i1)"
        );
    }

    #[test]
    fn gateway_constructs_parse_and_their_mistakes_are_named() {
        let text = "use demo\ngateway g1 keys k1\nkey k1\n";
        assert_eq!(error(text), "s.sim:2:17: key k1 is not declared: add `key k1` above");
        assert_eq!(
            error("use demo\nclient notes-backend principal alice\n"),
            "s.sim:2:8: `notes-backend` is reserved for the simulator's own actor; choose another name"
        );
        let cluster = "use demo\ngateway g1\ninstance i1\nclient alice principal alice\n";
        let steps = "send alice -> g1 tools/call {\"name\": \"notes.search\"} headers {\"Mcp-Name\": \"notes.search\"} as r\n\
                     admin rugpull notes.export {\"description\": \"changed\"}\nadmin publish issues {\"name\": \"x\"}\n\
                     admin approve notes.export\nparallel {\n  admin rugpull notes.search {\"title\": null}\n}\nexpect exports count 1\n";
        let scenario = parse("s.sim", "s", &format!("{cluster}{steps}")).unwrap();
        assert!(scenario.cluster.instances[0].gateway && !scenario.cluster.instances[1].gateway);
        let Action::Send(send) = &scenario.steps[0].action else { panic!("a send") };
        assert!(send.headers.is_some());
        assert!(matches!(&scenario.steps[1].action, Action::Admin(AdminAction::Descriptor { tool: Some(t), .. }) if t == "export"));
        assert!(matches!(&scenario.steps[2].action, Action::Admin(AdminAction::Descriptor { tool: None, .. })));
        assert!(matches!(&scenario.steps[3].action, Action::Admin(AdminAction::Approve { tool }) if tool == "notes.export"));
        assert!(matches!(&scenario.steps[5].action, Action::Expect(Expectation::ExportsCount(1))));
        let with = |step: &str| error(&format!("{cluster}{step}"));
        assert_eq!(
            with("admin rugpull export {}\n"),
            "s.sim:5:15: `export` is not a qualified tool name: write backend.tool (e.g. notes.export)"
        );
        assert_eq!(
            with("admin rugpull ftp.get {}\n"),
            "s.sim:5:15: no gateway backend ftp (the demo gateway has [\"issues\", \"notes\", \"notes_mirror\"])"
        );
        assert_eq!(
            with("let x = {}\nadmin publish notes $x\n"),
            "s.sim:6:21: the new descriptor (a JSON object): a literal JSON object, without $references"
        );
        assert_eq!(
            with("parallel {\n  admin approve notes.export\n}\n"),
            "s.sim:6:9: approve changes configuration between deliveries; put it outside the parallel block"
        );
        assert_eq!(
            error("use demo\ninstance i1\nclient alice principal alice\nadmin rugpull notes.export {}\n"),
            "s.sim:4:15: backends exist only behind a gateway: declare `gateway NAME` above the first step"
        );
    }

    #[test]
    fn comment_stripping_respects_strings() {
        assert_eq!(strip_comment(r##"send a -> b x {"t": "#1"} # why"##), r##"send a -> b x {"t": "#1"} "##);
        assert_eq!(strip_comment(r##"x "a\"#" # c"##), r##"x "a\"#" "##);
    }
    #[test]
    fn always_marks_an_expectation_judged_under_faults_and_a_request_may_still_be_named_always() {
        let text = format!(
            "{CLUSTER}send alice -> i1 tools/list {{}} as a\nsend alice -> i2 tools/list {{}} as always\n\
             expect always at most 1 of a, always: complete\n\
             expect always if a complete then notes count 7\n\
             expect always complete\n\
             expect a complete\n"
        );
        let scenario = parse("s.sim", "s", &text).unwrap();
        let expectations: Vec<&Expectation> =
            scenario.steps.iter().filter_map(|s| if let Action::Expect(e) = &s.action { Some(e) } else { None }).collect();
        let marked: Vec<bool> = expectations.iter().map(|e| e.always()).collect();
        assert_eq!(marked, [true, true, false, false]);
        assert!(matches!(expectations[0], Expectation::Always(inner) if matches!(**inner, Expectation::Answer { .. })));
        assert!(matches!(expectations[1], Expectation::Always(inner) if matches!(**inner, Expectation::If { .. })));
        assert!(matches!(expectations[2], Expectation::Answer { targets: Targets::One(name), .. } if name == "always"));
        // After the marker, an expectation: the error is the marked one's, at its column.
        assert_eq!(
            with_cluster("send alice -> i1 tools/list {} as a\nexpect always a\n"),
            "s.sim:8:16: expected a check: complete, input_required, tool_error, error CODE [REASON], no response, or PATH = JSON, found the end of the line"
        );
        assert_eq!(
            with_cluster("send alice -> i1 tools/list {} as a\nexpect always note\n"),
            "s.sim:8:19: expected a note id, found the end of the line"
        );
    }

    #[test]
    fn quantified_alternative_and_conditional_expectations_parse() {
        let text = format!(
            "{CLUSTER}send alice -> i1 tools/list {{}} as a\nsend alice -> i2 tools/list {{}} as b\n\
             expect none of a, b: error -32602\n\
             expect at most 1 of a, b: input_required\n\
             expect at least 2 of a, b: complete\n\
             expect 2 of a, b: complete or error -32603 claim_in_progress\n\
             expect if a complete then b result.resultType = \"complete\"\n\
             expect if a error -32602 then notes count 7\n"
        );
        let scenario = parse("s.sim", "s", &text).unwrap();
        let expectations: Vec<&Expectation> =
            scenario.steps.iter().filter_map(|s| if let Action::Expect(e) = &s.action { Some(e) } else { None }).collect();
        let quantity = |e: &Expectation| match e {
            Expectation::Answer { targets: Targets::Some { quantity, .. }, .. } => Some(*quantity),
            _ => None,
        };
        assert_eq!(quantity(expectations[0]), Some(Quantity::Exactly(0)));
        assert_eq!(quantity(expectations[1]), Some(Quantity::AtMost(1)));
        assert_eq!(quantity(expectations[2]), Some(Quantity::AtLeast(2)));
        assert!(matches!(expectations[3], Expectation::Answer { check: AnswerCheck::Any(alternatives), .. } if alternatives.len() == 2));
        assert!(matches!(expectations[4], Expectation::If { .. }));
        let Expectation::If { condition, consequence } = expectations[5] else { panic!("an if") };
        assert!(
            matches!(**condition, Expectation::Answer { check: AnswerCheck::Error { code: -32602, reason: None }, .. }),
            "`then` is no reason"
        );
        assert!(matches!(**consequence, Expectation::NotesCount(7)));
        let error = with_cluster("send alice -> i1 tools/list {} as a\nexpect if a complete notes count 7\n");
        assert!(error.contains("`then`"), "{error}");
    }
}
