//! `mcpsim gateway-lab`: mcpsim's own gateway fleet (two `serve --gateway` replicas on one SQLite store,
//! in front of the lab's backends) holds every claimed defence; each gateway mutant of the zoo that runs as a
//! real process is caught with the defence and the property named (all five); a lab backend binds loopback only;
//! a mutant is refused without its explicit flag; and every process a run starts is gone after it — counted
//! by the run's containment and again here, from `/proc`. Each run takes about a second.

mod common;

use common::child::run_mcpsim;

/// Runs the lab on `file` (under `targets/gateways/`) and checks what every run must show: its processes
/// started, the containment's count of 0 left, and no process of the run's work directory alive afterwards.
fn lab(file: &str, seed: &str) -> (i32, String) {
    // Three HTTP backends, one setup command, two replicas (the stdio backend is each replica's child), and
    // the revocation's command once per replica.
    lab_started(file, seed, 8, 90)
}

/// [`lab`] for a file whose run starts `started` processes itself, bounded by `seconds`.
fn lab_started(file: &str, seed: &str, started: usize, seconds: u64) -> (i32, String) {
    let path = format!("targets/gateways/{file}");
    let ran = run_mcpsim(&["gateway-lab", "run", &path, "--seed", seed], seconds);
    let out = ran.stdout;
    assert!(out.contains("cleanup: every process of the target was killed (0 left"), "{out}\n{}", ran.stderr);
    assert!(out.contains(&format!("  {started} processes started;")), "{out}");
    let work_dir = out
        .lines()
        .find_map(|l| l.strip_prefix("  decided: work directory "))
        .unwrap_or_else(|| panic!("the report names its work directory: {out}"))
        .to_string();
    assert!(!std::path::Path::new(&work_dir).exists(), "the work directory {work_dir} was removed");
    let alive = processes_naming(&work_dir);
    assert!(alive.is_empty(), "processes of the run still alive: {alive:?}");
    (ran.status, out)
}

/// Pids of live processes whose command line names `text` (the backends and replicas all name the work dir).
fn processes_naming(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(text) {
            found.push(format!("{}: {cmdline}", entry.file_name().to_string_lossy()));
        }
    }
    found
}

fn verdict(out: &str, defence: &str) -> String {
    out.lines()
        .find_map(|l| l.trim_start().strip_prefix(defence).filter(|rest| rest.starts_with(' ')).map(|rest| rest.trim().to_string()))
        .unwrap_or_else(|| panic!("no verdict for {defence}: {out}"))
}

#[test]
fn mcpsim_gateway_fleet_holds_every_claimed_defence() {
    let (status, out) = lab("mcpsim.toml", "1");
    assert_eq!(status, 0, "{out}");
    for defence in
        ["poisoning", "rug_pull", "shadowing", "header_body", "capabilities", "confirmation", "identity", "rate_limits", "revocation"]
    {
        assert_eq!(verdict(&out, defence), "held", "{out}");
    }
    assert!(out.contains("result: every claimed defence held"), "{out}");
    // Only the reviewed, clean tools are listed; the poisoned, the look-alike and the renamed are not.
    assert!(out.contains("observed: alice is listed: issues.search, notes.export, notes.search\n"), "{out}");
    // The confirmation really crossed replicas, and both replicas took quota calls.
    assert!(out.contains("decided: confirmation accepted: replica A = "), "{out}");
    assert!(out.contains("at replica 0") && out.contains("at replica 1"), "{out}");
    // The revocation was made at both replicas (SIGHUP re-read the rewritten pins), after a call that reached
    // issues, and every replica stopped listing the revoked tool within the lab's wait.
    assert!(out.contains("decided: revoked the review of issues"), "{out}");
    assert!(out.contains("decided: started revocation 0 (pid ") && out.contains("decided: started revocation 1 (pid "), "{out}");
    assert!(!out.contains("after the revocation"), "{out}");
}

#[test]
fn the_same_seed_makes_the_same_decisions() {
    let decisions = |out: &str| -> Vec<String> {
        out.lines()
            .filter(|l| l.starts_with("  decided: ") && !l.contains("started ") && !l.contains("work directory"))
            .map(str::to_string)
            .collect()
    };
    let (_, first) = lab("mcpsim.toml", "7");
    let (_, again) = lab("mcpsim.toml", "7");
    assert_eq!(decisions(&first), decisions(&again));
    assert!(decisions(&first).len() >= 7, "{first}");
}

/// Runs a mutant's target file: exit 1, the defence BROKEN, a finding naming the property, every other
/// claimed defence held.
fn caught(mutant: &str, defence: &str, property: &str) {
    let (status, out) = lab(&format!("mcpsim-mutant-{mutant}.toml"), "1");
    assert_eq!(status, 1, "{out}");
    assert_eq!(verdict(&out, defence), "BROKEN", "{out}");
    assert!(out.contains(&format!("FINDING {defence} ({property}; ")), "{out}");
    let broken = out.lines().filter(|l| l.ends_with(" BROKEN")).count();
    assert_eq!(broken, 1, "only the mutant's defence breaks: {out}");
    // The finding shows the messages that reproduce it, escaped and with requestState shortened.
    assert!(out.contains("    → replica "), "{out}");
    assert!(!out.contains("lab-alice-token"), "tokens are never shown: {out}");
}

#[test]
fn description_only_pins_are_caught_by_the_rug_pull() {
    caught("description-only-pins", "rug_pull", "mediation");
}

#[test]
fn first_listed_backend_wins_is_caught_by_shadowing() {
    caught("first-listed-backend-wins", "shadowing", "mediation");
}

#[test]
fn exports_on_decline_is_caught_by_the_confirmation() {
    caught("exports-on-decline", "confirmation", "consent");
}

#[test]
fn routing_by_the_header_is_caught_by_header_body() {
    caught("routes-by-header-after-authorizing-the-body", "header_body", "mediation");
}

#[test]
fn a_revocation_that_never_reaches_the_calls_is_caught() {
    caught("revoke-ignoring-backend", "revocation", "mediation");
}

#[test]
fn a_lab_backend_binds_loopback_only() {
    let dir = common::child::scratch("gateway-lab", "loopback");
    let spec = dir.join("spec.json");
    std::fs::write(&spec, r#"{"id":"notes","carrier":"http","server_name":"n","server_version":"1","phases":[[]]}"#).unwrap();
    let (phase, record) = (dir.join("phase"), dir.join("record.jsonl"));
    let args = |address: &str| {
        vec![
            "gateway-lab".to_string(),
            "backend".into(),
            "--spec".into(),
            spec.display().to_string(),
            "--phase-file".into(),
            phase.display().to_string(),
            "--record".into(),
            record.display().to_string(),
            "--http".into(),
            address.to_string(),
        ]
    };
    for address in ["0.0.0.0:0", "[::]:0"] {
        let argv = args(address);
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let ran = run_mcpsim(&argv, 20);
        assert_eq!(ran.status, 2, "{}", ran.stderr);
        assert!(ran.stderr.contains("loopback only"), "{}", ran.stderr);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_mutant_gateway_needs_its_explicit_flag() {
    let ran = run_mcpsim(&["serve", "--gateway", "--http", "127.0.0.1:0", "--gateway-mutant", "exports-on-decline"], 20);
    assert_eq!(ran.status, 2, "{}", ran.stderr);
    assert!(ran.stderr.contains("--i-know-this-gateway-is-broken"), "{}", ran.stderr);
    let ran =
        run_mcpsim(&["serve", "--gateway", "--http", "127.0.0.1:0", "--gateway-mutant", "nope", "--i-know-this-gateway-is-broken"], 20);
    assert_eq!(ran.status, 2, "{}", ran.stderr);
    assert!(
        ran.stderr.contains(
            "description-only-pins, routes-by-header-after-authorizing-the-body, first-listed-backend-wins, exports-on-decline, \
             revoke-ignoring-backend"
        ),
        "{}",
        ran.stderr
    );
}

#[test]
fn a_bad_gateway_target_file_says_where() {
    let dir = common::child::scratch("gateway-lab", "bad");
    let path = dir.join("g.toml");
    std::fs::write(&path, "name = \"g\"\nreplicas = 2\nreplica = 3\n").unwrap();
    let ran = run_mcpsim(&["gateway-lab", "run", &path.display().to_string()], 20);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(ran.status, 2, "{}", ran.stderr);
    assert!(ran.stderr.contains("g.toml") && ran.stderr.contains("line 3") && ran.stderr.contains("docs/gateways.md"), "{}", ran.stderr);
    // A token of the wrong type: where, and what was wrong, but never the value.
    let dir = common::child::scratch("gateway-lab", "bad-token");
    let path = dir.join("g.toml");
    std::fs::write(&path, "name = \"g\"\nreplicas = 2\n[principals.alice]\ntoken = 424242\n").unwrap();
    let ran = run_mcpsim(&["gateway-lab", "run", &path.display().to_string()], 20);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(ran.status, 2, "{}", ran.stderr);
    assert!(ran.stderr.contains("line 4") && ran.stderr.contains("key token") && !ran.stderr.contains("424242"), "{}", ran.stderr);
}

/// mcpsim's gateway serving both eras, driven through the lab's 2025-11-25 clients: each opens a session at
/// each replica it uses (the path a session-minting legacy gateway takes), the confirmation is answered
/// inside the open call, every defence 2025-11-25 carries holds, and `header_body`, which it cannot carry, is
/// reported not applicable with the reason, never as held.
#[test]
fn mcpsim_gateway_over_2025_11_25_holds_what_that_revision_carries() {
    let (status, out) = lab("mcpsim-legacy.toml", "1");
    assert_eq!(status, 0, "{out}");
    let sessions = out.lines().filter(|l| l.starts_with("  decided: initialize at replica ") && l.ends_with(": a session")).count();
    assert!(sessions >= 5, "a session per replica and principal (and per declared capabilities): {out}");
    assert!(!out.contains("no session id"), "{out}");
    for defence in ["poisoning", "rug_pull", "shadowing", "identity", "rate_limits", "revocation"] {
        assert_eq!(verdict(&out, defence), "held", "{out}");
    }
    assert_eq!(verdict(&out, "header_body"), "not claimed", "{out}");
    for defence in ["capabilities", "confirmation"] {
        assert_eq!(verdict(&out, defence), "held", "{out}");
    }
    assert!(out.contains("observed: header_body is not applicable over 2025-11-25"), "{out}");
    // The confirmation is an elicitation inside the open call, answered there.
    assert!(out.contains("observed: lab-1-confirm-accept was asked inside the call (2025-11-25), and the lab answered accept"), "{out}");
    assert!(out.contains("observed: lab-1-confirm-decline was asked inside the call (2025-11-25), and the lab answered decline"), "{out}");
    // 2025-11-25 has no routing headers: the disagreeing ones are ignored, the body's call runs.
    assert!(out.contains("observed: (not claimed) header_body: 1 call(s) reached the backend: issues.search"), "{out}");
    assert!(out.contains("observed: alice is listed: issues.search, notes.export, notes.search\n"), "{out}");
}

/// The legacy confirmation check can fail: the zoo's `exports-on-decline` behind the same 2025-11-25 clients
/// runs the export the lab declined inside the call, and is caught with the elicitation and the answer shown.
#[test]
fn exports_on_decline_is_caught_over_2025_11_25_too() {
    let dir = common::child::scratch("gateway-lab", "legacy-mutant");
    let file = dir.join("mutant.toml");
    let text = std::fs::read_to_string("targets/gateways/mcpsim-legacy.toml").unwrap();
    let planted = text.replace(
        "\"--eras\", \"both\",",
        "\"--eras\", \"both\", \"--gateway-mutant\", \"exports-on-decline\", \"--i-know-this-gateway-is-broken\",",
    );
    assert_ne!(planted, text, "the mutant's flags are planted");
    std::fs::write(&file, planted).unwrap();
    let ran = run_mcpsim(&["gateway-lab", "run", file.to_str().unwrap()], 90);
    let out = ran.stdout;
    assert_eq!(ran.status, 1, "{out}\n{}", ran.stderr);
    assert_eq!(verdict(&out, "confirmation"), "BROKEN", "{out}");
    assert!(out.contains("FINDING confirmation (consent; a decline is terminal on every replica)"), "{out}");
    assert!(out.contains("⇠ inside the call {") && out.contains("⇢ answered {") && out.contains("\"action\":\"decline\""), "{out}");
    assert!(out.contains("cleanup: every process of the target was killed (0 left"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// IBM ContextForge 1.0.7 (PyPI `mcp-contextforge-gateway`), two replicas on one SQLite database, driven
/// through the lab's 2025-11-25 clients. Its verdicts as measured, pinned to that version: it claims
/// shadowing, and shadowing holds (each prefixed name reaches its own backend, the bare name none); it claims
/// revocation (an operator deactivates the `issues` gateway through its admin REST API), and that breaks
/// across replicas: the replica whose API made the change refuses the tool, the other still calls it from its
/// own in-memory tool lookup cache (no Redis, nothing tells it). What it does not claim reaches the backends
/// and is reported as observations, never as passed.
#[test]
#[ignore = "needs IBM ContextForge: MCPSIM_CONTEXTFORGE naming a venv made by `python3 -m venv DIR && DIR/bin/pip install mcp-contextforge-gateway==1.0.7` (.ci/run makes one)"]
fn contextforge_holds_shadowing_and_breaks_the_revocation_across_replicas() {
    assert!(std::env::var_os("MCPSIM_CONTEXTFORGE").is_some(), "set MCPSIM_CONTEXTFORGE to a venv holding mcp-contextforge-gateway==1.0.7");
    // Three HTTP backends, two setup commands (its schema; the stdio bridge, a temporary instance that
    // registers the backends), two replicas, the revocation's command once per replica; the bridge and the
    // temporary instance are setup's children.
    let (status, out) = lab_started("contextforge.toml", "1", 9, 240);
    assert_eq!(status, 1, "{out}");
    assert!(out.contains("decided: clients speak MCP 2025-11-25"), "{out}");
    assert!(out.contains("no session id (stateless)"), "its MCP endpoint keeps no session by default: {out}");
    assert_eq!(verdict(&out, "shadowing"), "held", "{out}");
    for defence in ["poisoning", "rug_pull", "header_body", "capabilities", "confirmation", "identity", "rate_limits"] {
        assert_eq!(verdict(&out, defence), "not claimed", "{out}");
    }
    // The revocation: both commands ran (the deactivation, then a no-op at the second replica), and neither
    // replica listed issues-search after it, yet the call at replica 1 reached issues; replica 0's did not.
    assert_eq!(verdict(&out, "revocation"), "BROKEN", "{out}");
    assert!(out.contains("decided: started revocation 0 (pid ") && out.contains("decided: started revocation 1 (pid "), "{out}");
    assert!(!out.contains("ms after the revocation"), "neither replica listed the revoked tool: {out}");
    assert!(
        out.contains(
            "FINDING revocation (mediation; a revoked backend is never called again, at any replica): \
             1 call(s) reached the backend: issues.search (listing 0)\n    → replica 1 as "
        ),
        "{out}"
    );
    assert!(out.contains("\"query\":\"lab-1-revoke-after-1\"") && !out.contains("lab-1-revoke-after-0"), "{out}");
    assert!(out.contains("result: 1 finding(s)"), "{out}");
    // What it does not claim, as it happened: the poisoned and the look-alike tools run, the changed
    // notes.search runs under its new schema, the quota's extra call runs, the export is never confirmed.
    for tool in ["summarize", "translate", "tidy", "backup", "share"] {
        assert!(
            out.contains(&format!("observed: (not claimed) poisoning: 1 call(s) reached the backend: tricks.{tool} (listing 0)")),
            "{out}"
        );
    }
    assert!(out.contains("observed: (not claimed) identity: 1 call(s) reached the backend: mirror.search (listing 0)"), "{out}");
    assert!(out.contains("observed: (not claimed) rug_pull: 1 call(s) reached the backend: notes.search (listing 1)"), "{out}");
    assert!(out.contains("observed: (not claimed) rate_limits: 1 call(s) reached the backend: issues.search"), "{out}");
    assert!(out.contains("lab-1-confirm-accept was not asked for confirmation (round 1 answered: complete)"), "{out}");
    assert!(out.contains("observed: (not claimed) confirmation: 1 call(s) reached the backend: notes.export (listing 0)"), "{out}");
    assert!(out.contains("observed: (not claimed) capabilities: 1 call(s) reached the backend: notes.export (listing 0)"), "{out}");
    assert!(out.contains("observed: header_body is not applicable over 2025-11-25"), "{out}");
    assert!(out.contains("observed: the confirmation is judged within one call over 2025-11-25"), "{out}");
    assert!(out.contains("the instruction in issues.search's result was passed through unchanged"), "{out}");
    // Tools are listed under "{gateway slug}-{tool slug}"; the mirror and the poisoned ones among them.
    assert!(out.contains("mirror-search") && out.contains("tricks-summarize") && out.contains("notes-export"), "{out}");
}

/// LiteLLM's proxy 1.108.7 (PyPI `litellm[proxy]`), two replicas sharing nothing (no database), driven through
/// the lab's 2025-11-25 clients. Its verdicts as measured, pinned to that version: it claims none of the nine
/// (it prefixes names but keeps routing the bare one, to whichever server's listing registered it last, so
/// the lab's bare `search` reaches notes, issues or neither from run to run: that observation is not asserted
/// beyond naming a bare call); each qualified call reached its own backend (else the run is unjudged, exit 3),
/// and what it does not claim reached the backends, reported as observations, never as passed.
#[test]
#[ignore = "needs LiteLLM: MCPSIM_LITELLM naming a venv made by `python3 -m venv DIR && DIR/bin/pip install 'litellm[proxy]==1.108.7'` (.ci/run makes one)"]
fn litellm_claims_nothing_and_lets_every_call_through() {
    assert!(std::env::var_os("MCPSIM_LITELLM").is_some(), "set MCPSIM_LITELLM to a venv holding litellm[proxy]==1.108.7");
    // Three HTTP backends, one setup command (config.yaml from its template), two replicas; each replica
    // starts the stdio backend itself.
    let (status, out) = lab_started("litellm.toml", "1", 6, 240);
    assert_eq!(status, 0, "{out}");
    assert!(out.contains("decided: clients speak MCP 2025-11-25"), "{out}");
    for defence in
        ["poisoning", "rug_pull", "shadowing", "header_body", "capabilities", "confirmation", "identity", "rate_limits", "revocation"]
    {
        assert_eq!(verdict(&out, defence), "not claimed", "{out}");
    }
    assert!(out.contains("result: every claimed defence held"), "{out}");
    // Every backend's tools are listed under "{server}-{tool}", the poisoned and the look-alike among them.
    for tool in ["notes-search", "notes-export", "issues-search", "mirror-search", "tricks-summarize", "tricks-share"] {
        assert!(out.lines().any(|l| l.starts_with("  observed: alice is listed: ") && l.contains(tool)), "{tool}: {out}");
    }
    for tool in ["summarize", "translate", "tidy", "backup", "share"] {
        assert!(
            out.contains(&format!("observed: (not claimed) poisoning: 1 call(s) reached the backend: tricks.{tool} (listing 0)")),
            "{out}"
        );
    }
    assert!(out.contains("observed: (not claimed) identity: 1 call(s) reached the backend: mirror.search (listing 0)"), "{out}");
    // No pin: both the changed search and the renamed export_all ran under listing 1.
    assert!(out.contains("observed: (not claimed) rug_pull: 1 call(s) reached the backend: notes.search (listing 1)"), "{out}");
    assert!(out.contains("observed: (not claimed) rug_pull: 1 call(s) reached the backend: notes.export_all (listing 1)"), "{out}");
    assert!(out.contains("observed: (not claimed) rate_limits: 1 call(s) reached the backend: issues.search"), "{out}");
    assert!(out.contains("lab-1-confirm-accept was not asked for confirmation (round 1 answered: complete)"), "{out}");
    assert!(out.contains("observed: (not claimed) confirmation: 1 call(s) reached the backend: notes.export (listing 0)"), "{out}");
    assert!(out.contains("observed: (not claimed) capabilities: 1 call(s) reached the backend: notes.export (listing 0)"), "{out}");
    assert!(out.contains("observed: header_body is not applicable over 2025-11-25"), "{out}");
    assert!(out.contains("the instruction in issues.search's result was passed through unchanged"), "{out}");
    // Whatever the bare search reached, it is only ever an observation of the shadowing step.
    for line in out.lines().filter(|l| l.contains("(not claimed) shadowing")) {
        assert!(
            line.contains("reached the backend: notes.search (listing 0)")
                || line.contains("reached the backend: issues.search (listing 0)"),
            "{out}"
        );
    }
}

/// The same LiteLLM replicas advertising 2026-07-28, driven through the lab's 2026-07-28 clients: its MCP SDK
/// refuses a request whose `Mcp-Method` or `Mcp-Name` disagrees with the body, so `header_body`, the one it
/// claims there, holds; the rest is as over 2025-11-25 (observations, never passes).
#[test]
#[ignore = "needs LiteLLM: MCPSIM_LITELLM naming a venv made by `python3 -m venv DIR && DIR/bin/pip install 'litellm[proxy]==1.108.7'` (.ci/run makes one)"]
fn litellm_over_2026_holds_header_body_and_claims_nothing_else() {
    assert!(std::env::var_os("MCPSIM_LITELLM").is_some(), "set MCPSIM_LITELLM to a venv holding litellm[proxy]==1.108.7");
    let (status, out) = lab_started("litellm-2026.toml", "1", 6, 240);
    assert_eq!(status, 0, "{out}");
    assert!(!out.contains("decided: clients speak MCP 2025-11-25"), "{out}");
    assert_eq!(verdict(&out, "header_body"), "held", "{out}");
    for defence in ["poisoning", "rug_pull", "shadowing", "capabilities", "confirmation", "identity", "rate_limits", "revocation"] {
        assert_eq!(verdict(&out, defence), "not claimed", "{out}");
    }
    assert!(out.contains("result: every claimed defence held"), "{out}");
    for tool in ["summarize", "translate", "tidy", "backup", "share"] {
        assert!(
            out.contains(&format!("observed: (not claimed) poisoning: 1 call(s) reached the backend: tricks.{tool} (listing 0)")),
            "{out}"
        );
    }
    assert!(out.contains("observed: (not claimed) identity: 1 call(s) reached the backend: mirror.search (listing 0)"), "{out}");
    assert!(out.contains("observed: (not claimed) rug_pull: 1 call(s) reached the backend: notes.search (listing 1)"), "{out}");
    assert!(out.contains("observed: (not claimed) rug_pull: 1 call(s) reached the backend: notes.export_all (listing 1)"), "{out}");
    assert!(out.contains("observed: (not claimed) rate_limits: 1 call(s) reached the backend: issues.search"), "{out}");
    assert!(out.contains("observed: (not claimed) capabilities: 1 call(s) reached the backend: notes.export (listing 0)"), "{out}");
    // No MRTR: every round 1 answered complete, so the export ran at once, the declined ones too.
    assert!(out.contains("lab-1-confirm-accept was not asked for confirmation (round 1 answered: complete)"), "{out}");
    assert!(out.contains("lab-1-confirm-decline was not asked for confirmation (round 1 answered: complete)"), "{out}");
    assert!(out.contains("observed: (not claimed) confirmation: 1 call(s) reached the backend: notes.export (listing 0)"), "{out}");
    assert!(!out.contains("(not claimed) header_body"), "{out}");
    for line in out.lines().filter(|l| l.contains("(not claimed) shadowing")) {
        assert!(
            line.contains("reached the backend: notes.search (listing 0)")
                || line.contains("reached the backend: issues.search (listing 0)"),
            "{out}"
        );
    }
}
