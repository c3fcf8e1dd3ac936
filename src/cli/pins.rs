//! `mcpsim pins review` and `mcpsim pins approve NAME`: the operator's side of descriptor pinning.
//!
//! Both read what the configured backends publish (the embedded demo gateway unless `--gateway-config`) and
//! judge it exactly as the gateway does ([`crate::servers::gateway::catalog`]). `review` prints, for every
//! tool that is not approved, the evidence a person needs: the change against its pin as a diff, the full
//! descriptor of a never-reviewed tool, the publisher, and each scanner finding with its span. `approve`
//! re-pins one tool to its current descriptor and records when, by whom and from which publisher. `revoke`
//! removes one tool's pin, so the gateway quarantines it; a running `serve --gateway --pins FILE` applies
//! either on SIGHUP.

use crate::config::gateway::{load_pins, GatewayFile};
use crate::config::ConfigError;
use crate::framework::ports::Clock;
use crate::policy::pinning::{changes, Approval, PinFile};
use crate::servers::gateway::catalog::{evaluate_listing, Block, CatalogEntry, Quarantine, ScanMemo, ToolStatus};
use crate::stores::system::SystemClock;
use clap::{Args, Subcommand};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Something needs review (or an approval was refused): like `diff`, 1 means "differences" (`common::EXIT_FAILED`).
pub(crate) const EXIT_NEEDS_REVIEW: u8 = super::common::EXIT_FAILED;
/// Usage, configuration and file errors (`common::EXIT_USAGE`).
pub(crate) const EXIT_ERROR: u8 = super::common::EXIT_USAGE;

#[derive(Debug, Args)]
#[command(
    about = "Review and approve the tool descriptors the gateway pins (quarantined tools stay hidden and refused until approved)",
    after_help = "\
Examples:
  mcpsim pins review                                   # what the demo gateway quarantines or blocks, and why
  mcpsim pins approve notes_mirror.search --pins pins.json --by alice   # writes pins.json (from the embedded pins)
  mcpsim pins review --pins pins.json                  # the same review against that file
  mcpsim pins revoke issues.search --pins pins.json    # withdraw an approval; then kill -HUP each gateway
  mcpsim serve --http 127.0.0.1:8080 --gateway --pins pins.json"
)]
pub struct PinsArgs {
    #[command(subcommand)]
    pub command: PinsCommand,
}

#[derive(Debug, Subcommand)]
pub enum PinsCommand {
    /// Show every quarantined or blocked tool with its evidence: the diff against its pin, the full
    /// descriptor of a never-reviewed tool, the publisher and each scanner finding.
    /// Exits 0 when every tool is approved, 1 when something needs review, 2 on errors.
    #[command(after_help = "Examples:\n  mcpsim pins review\n  mcpsim pins review --pins pins.json --gateway-config gateway.toml")]
    Review(ReviewArgs),
    /// Pin NAME (e.g. notes.export) to the descriptor its backend publishes now, recording the approval
    /// time, who approved and the publisher evidence. Read `mcpsim pins review` first.
    #[command(after_help = "Examples:\n  mcpsim pins approve notes_mirror.search --pins pins.json --by alice\n  \
                            mcpsim pins approve notes.export --pins pins.json --accept-findings   # only after reading every finding")]
    Approve(ApproveArgs),
    /// Remove NAME's pin from FILE: the gateway quarantines the tool (hidden and refused) until it is approved
    /// again. A running `serve --gateway --pins FILE` applies it on SIGHUP (`kill -HUP PID`, each process).
    #[command(after_help = "Examples:\n  mcpsim pins revoke issues.search --pins pins.json\n  \
                            kill -HUP PID                                      # PID: each gateway process, to re-read")]
    Revoke(RevokeArgs),
}

#[derive(Debug, Args)]
pub struct RevokeArgs {
    /// Qualified tool name, backend.tool (as `pins review` prints it).
    pub name: String,
    /// Pin file to update (it must exist).
    #[arg(long, value_name = "FILE")]
    pub pins: PathBuf,
}

#[derive(Debug, Args)]
pub struct ReviewArgs {
    /// Pin file (JSON). Without it, the embedded pins of the demo backends are used.
    #[arg(long, value_name = "FILE")]
    pub pins: Option<PathBuf>,
    /// Gateway configuration (TOML: backends, policy). Without it, the embedded demo gateway.
    #[arg(long, value_name = "FILE")]
    pub gateway_config: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ApproveArgs {
    /// Qualified tool name, backend.tool (as `pins review` prints it).
    pub name: String,
    /// Pin file to update. Created from the embedded demo pins if it does not exist yet.
    #[arg(long, value_name = "FILE")]
    pub pins: PathBuf,
    /// Who approves (recorded in the pin). Defaults to $USER, or "operator".
    #[arg(long, value_name = "WHO")]
    pub by: Option<String>,
    /// Approve even though the scanner reported findings, acknowledging exactly those findings for exactly
    /// this descriptor. Only after reading every finding and the whole descriptor.
    #[arg(long)]
    pub accept_findings: bool,
    /// Gateway configuration (TOML: backends, policy). Without it, the embedded demo gateway.
    #[arg(long, value_name = "FILE")]
    pub gateway_config: Option<PathBuf>,
}

pub fn run(args: PinsArgs) -> ExitCode {
    let outcome = match args.command {
        PinsCommand::Review(args) => review(&args),
        PinsCommand::Approve(args) => approve(&args),
        PinsCommand::Revoke(args) => revoke(&args),
    };
    match outcome {
        Ok((text, code)) => {
            print!("{text}");
            ExitCode::from(code)
        }
        Err(error) => {
            eprintln!("mcpsim pins: {error}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

fn gateway_file(path: Option<&Path>) -> Result<GatewayFile, ConfigError> {
    match path {
        Some(path) => GatewayFile::load(path),
        None => Ok(GatewayFile::demo()),
    }
}

/// The catalog as the gateway would judge it now: every configured backend's descriptors against `pins`.
pub(crate) fn judge(file: &GatewayFile, pins: &PinFile) -> Vec<CatalogEntry> {
    let memo = ScanMemo::default();
    let mut entries: Vec<CatalogEntry> = file
        .initial_listings()
        .iter()
        .flat_map(|(id, (publisher, listing))| evaluate_listing(id, &publisher.endpoint, listing, pins, &memo))
        .collect();
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    entries
}

/// The review report and its exit status.
pub fn review(args: &ReviewArgs) -> Result<(String, u8), ConfigError> {
    let file = gateway_file(args.gateway_config.as_deref())?;
    let pins = load_pins(args.pins.as_deref())?;
    let entries = judge(&file, &pins);
    let pins_label = args.pins.as_ref().map_or("embedded demo pins".to_string(), |p| p.display().to_string());
    Ok(review_report(&entries, &pins, &pins_label))
}

pub(crate) fn review_report(entries: &[CatalogEntry], pins: &PinFile, pins_label: &str) -> (String, u8) {
    let mut out = String::new();
    let flagged: Vec<&CatalogEntry> = entries.iter().filter(|e| !e.status.is_approved()).collect();
    let _ =
        writeln!(out, "{} tool(s) published, {} pinned in {pins_label}; {} need review.\n", entries.len(), pins.pins.len(), flagged.len());
    let width = entries.iter().map(|e| e.name.len()).max().unwrap_or(0);
    for entry in entries {
        let _ = writeln!(out, "  {:<width$}  {}", entry.name, entry.status.label());
    }
    for entry in &flagged {
        let _ = writeln!(out, "\n== {}: {}", entry.name, entry.status.explain());
        let _ = writeln!(out, "   publisher: {}", entry.publisher);
        let _ = writeln!(out, "   digest:    {}", entry.digest);
        let pin = pins.get(&entry.name);
        if let Some(pin) = pin {
            let _ =
                writeln!(out, "   pinned:    {} (approved {} by {}, from {})", pin.digest, pin.approved_at, pin.approved_by, pin.publisher);
        }
        for (other, twin) in pins.pins.iter().filter(|(name, p)| **name != entry.name && p.digest == entry.digest) {
            let _ = writeln!(
                out,
                "   looks like: the same descriptor is pinned as {other} (from {}); a familiar look is not a publisher's identity",
                twin.publisher
            );
        }
        match (&entry.status, pin) {
            (ToolStatus::Quarantined(Quarantine::RugPull { .. }), Some(pin)) => {
                let _ = writeln!(out, "   changes since approval:");
                for change in changes(&pin.descriptor, &entry.descriptor) {
                    let _ = writeln!(out, "     {change}");
                }
            }
            (ToolStatus::Quarantined(Quarantine::PublisherChanged { pinned }), _) => {
                let _ = writeln!(out, "   descriptor unchanged; publisher was: {pinned}");
            }
            _ => {
                let _ = writeln!(out, "   descriptor (all of it; read every field):");
                let pretty = serde_json::to_string_pretty(&entry.descriptor).expect("a Value serializes");
                for line in pretty.lines() {
                    let _ = writeln!(out, "     {line}");
                }
            }
        }
        if entry.scan.findings.is_empty() {
            let _ = writeln!(out, "   scanner:   no findings (a tripwire: no findings is not proof of safety)");
        } else {
            let _ = writeln!(out, "   scanner findings (evidence for review, not a verdict):");
            for finding in &entry.scan.findings {
                let _ = writeln!(out, "     {finding}");
            }
        }
        let approvable = matches!(entry.status, ToolStatus::Quarantined(_) | ToolStatus::Blocked(Block::Findings));
        if approvable {
            let extra = if entry.scan.findings.is_empty() { "" } else { " --accept-findings" };
            let _ = writeln!(out, "   approve after review: mcpsim pins approve {} --pins FILE{extra}", entry.name);
        } else {
            let _ = writeln!(out, "   cannot be approved as published: the backend must fix it");
        }
    }
    (out, if flagged.is_empty() { 0 } else { EXIT_NEEDS_REVIEW })
}

fn approve(args: &ApproveArgs) -> Result<(String, u8), ConfigError> {
    let file = gateway_file(args.gateway_config.as_deref())?;
    let existing = args.pins.exists();
    let mut pins = load_pins(existing.then_some(args.pins.as_path()))?;
    let entries = judge(&file, &pins);
    let Some(entry) = entries.iter().find(|e| e.name == args.name) else {
        let known: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        return Err(ConfigError::Invalid(format!("no configured backend publishes {:?}; published: {}", args.name, known.join(", "))));
    };
    let findings: Vec<String> = entry.scan.findings.iter().map(|f| f.fingerprint()).collect();
    match &entry.status {
        ToolStatus::Approved => {
            return Ok((format!("{} already matches its pin; nothing changed.\n", entry.name), 0));
        }
        ToolStatus::Blocked(Block::Findings) if !args.accept_findings => {
            let mut out =
                format!("refused: {} has scanner findings; read them and the whole descriptor (`mcpsim pins review`):\n", entry.name);
            for finding in &entry.scan.findings {
                let _ = writeln!(out, "  {finding}");
            }
            out.push_str("If every finding is harmless, approve again with --accept-findings.\n");
            return Ok((out, EXIT_NEEDS_REVIEW));
        }
        ToolStatus::Blocked(Block::Findings) | ToolStatus::Quarantined(_) => {}
        ToolStatus::Blocked(_) => {
            return Ok((
                format!("refused: {} {}; it cannot be approved as published.\n", entry.name, entry.status.explain()),
                EXIT_NEEDS_REVIEW,
            ));
        }
    }
    let approved_by = args.by.clone().or_else(|| std::env::var("USER").ok()).unwrap_or_else(|| "operator".into());
    let approval = Approval {
        publisher: entry.publisher.clone(),
        approved_at_ms: SystemClock.now_ms(),
        approved_by,
        acknowledged_findings: if args.accept_findings { findings } else { Vec::new() },
    };
    let pin = pins.approve(&entry.name, &entry.descriptor, approval).map_err(|e| ConfigError::Invalid(e.to_string()))?.clone();
    write_atomically(&args.pins, &pins.to_json_string())?;
    let mut out = String::new();
    if !existing {
        let _ = writeln!(out, "created {} from the embedded demo pins", args.pins.display());
    }
    let _ = writeln!(out, "approved {}: digest {}", entry.name, pin.digest);
    let _ = writeln!(out, "  at {} by {}, from {}", pin.approved_at, pin.approved_by, pin.publisher);
    if !pin.acknowledged_findings.is_empty() {
        let _ = writeln!(out, "  acknowledging {} scanner finding(s) for this exact descriptor", pin.acknowledged_findings.len());
    }
    let _ = writeln!(out, "written to {}", args.pins.display());
    Ok((out, 0))
}

fn revoke(args: &RevokeArgs) -> Result<(String, u8), ConfigError> {
    // Never from the embedded pins: revoking in a file that does not exist would create one that approves
    // every other demo tool, which nobody asked for.
    if !args.pins.exists() {
        return Err(ConfigError::Invalid(format!(
            "{} does not exist: name the pin file the gateway serves with --pins",
            args.pins.display()
        )));
    }
    let mut pins = load_pins(Some(&args.pins))?;
    if pins.pins.remove(&args.name).is_none() {
        let known: Vec<&str> = pins.pins.keys().map(String::as_str).collect();
        return Err(ConfigError::Invalid(format!(
            "{} holds no pin for {:?}; pinned: {}",
            args.pins.display(),
            args.name,
            if known.is_empty() { "nothing".to_string() } else { known.join(", ") }
        )));
    }
    write_atomically(&args.pins, &pins.to_json_string())?;
    let mut out = String::new();
    let _ = writeln!(out, "revoked {}: its pin is removed from {}", args.name, args.pins.display());
    let _ = writeln!(out, "  a gateway serving it quarantines the tool once it re-reads the file: send each one SIGHUP (kill -HUP PID)");
    Ok((out, 0))
}

/// Writes beside the target and renames over it, so a reader never sees half a pin file.
fn write_atomically(path: &Path, text: &str) -> Result<(), ConfigError> {
    let temporary = path.with_extension("json.tmp");
    let failed = |error: std::io::Error| ConfigError::Invalid(format!("cannot write {}: {error}", path.display()));
    std::fs::write(&temporary, text).map_err(failed)?;
    std::fs::rename(&temporary, path).map_err(failed)
}
