//! The mutant zoo: deliberately unsafe variants of the notes server, each breaking exactly one rule.
//!
//! They exist to prove the checker is not vacuous: every mutant must be caught by a safety property in the
//! scenario that exposes it and again in a library scenario written for another lesson (`also_caught_by`),
//! while the real server passes the same runs. Five are gateways: the variants of
//! `sim::actors::gateway_mutants`, each the real gateway with one defence removed, caught by mediation,
//! consent, refusal or containment. They live here, in the simulator, and are reachable only through
//! `RunOptions::factory` (`mcpsim run|explore --mutant NAME`), never from `serve`: the servers in
//! `src/servers` are untouched. The two after them are 2025-11-25 adapters (`sim::actors::legacy_mutants`:
//! the real `eras` adapter with one wrong decision around it), caught by containment and capabilities.
//! Each notes mutant is built one of two ways:
//!
//! * a **port wrapper**: the real `NotesServer` over a replay store that makes the mistake (a store per
//!   instance, delete before claim, a re-check separated from the delete, no re-check, eviction);
//! * a **service wrapper**: the real `NotesServer` behind a wrapper that re-makes exactly one decision the
//!   wrong way before handing the request on (string-prefix authorization, trusting unsigned or unbound
//!   state by re-sealing it, cancel consuming, an invalid answer consuming, decline not consuming, remembered
//!   capabilities, the pending confirmation kept in one instance's memory: a sticky session).

use crate::framework::Service;
use crate::scenario::{self, Scenario};
use crate::sim::actors::gateway_mutants::GatewayVariant;
use crate::sim::actors::instance::{notes_server_factory, InstanceParts, ServiceFactory};
use crate::sim::actors::legacy_mutants::EraVariant;
use crate::sim::library;
use crate::sim::runner::ServerUnderTest;
use std::sync::Arc;
use wrappers::{
    accept_trusted_as_completion, admits_past_retention, cancel_consumes, claim_then_delete, claim_without_outcome, decline_not_consuming,
    delete_then_claim, evicting_replay_store, hash_ordered, invalid_answer_consumes, no_live_recheck, no_outcome_on_replay,
    prefix_containment, recheck_then_delete, remembered_capabilities, replay_per_instance, state_unbound_arguments,
    state_unbound_principal, sticky_session, undecoded_containment, unsigned_state, url_bound_to_nothing,
};

mod wrappers;

/// One unsafe variant.
pub struct Mutant {
    pub name: &'static str,
    /// The mistake it embodies, in one sentence.
    pub mistake: &'static str,
    /// The scenario that exposes it: a library file name, or a zoo scenario below.
    pub exposed_by: &'static str,
    /// A library scenario written for another lesson where a safety property catches it too: evidence that
    /// the properties, not one tailored scenario, are what catch the mistake.
    pub also_caught_by: &'static str,
    build: Build,
    /// It breaks only liveness: it is explored with faults on (clients retry), where liveness is judged.
    pub liveness: bool,
}

/// Where the mistake is made.
#[derive(Clone, Copy)]
enum Build {
    /// In the notes service every instance runs (the real gateway, if any, is unchanged).
    Notes(fn(InstanceParts) -> Arc<dyn Service>),
    /// In the gateway instances (the notes service is the real one).
    Gateway(GatewayVariant),
    /// In the 2025-11-25 adapter of `eras both` instances (the notes service is the real one).
    Eras(EraVariant),
}

impl Mutant {
    /// The factory that builds this mutant's notes service on every instance (the real notes server for a
    /// gateway mutant: use [`Mutant::server`] to get the gateway too).
    pub fn factory(&self) -> ServiceFactory {
        match self.build {
            Build::Notes(build) => Arc::new(move |parts: InstanceParts| build(parts)),
            Build::Gateway(_) | Build::Eras(_) => notes_server_factory(),
        }
    }

    /// Everything this mutant changes: its notes service and the gateway variant.
    pub fn server(&self) -> ServerUnderTest {
        let gateway_variant = match self.build {
            Build::Notes(_) | Build::Eras(_) => GatewayVariant::Real,
            Build::Gateway(variant) => variant,
        };
        let era_variant = match self.build {
            Build::Eras(variant) => variant,
            _ => EraVariant::Real,
        };
        ServerUnderTest { factory: self.factory(), gateway_variant, era_variant, mutant: Some(self.name) }
    }

    /// Whether it is a gateway variant (the notes service is the real one).
    pub fn is_gateway(&self) -> bool {
        matches!(self.build, Build::Gateway(_))
    }

    /// The parsed scenario that exposes it.
    pub fn scenario(&self) -> Scenario {
        scenario_named(self.exposed_by).expect("every mutant names a scenario that exists and parses")
    }
}

/// Every mutant, in the order `mcpsim mutants` lists them.
pub const MUTANTS: &[Mutant] = &[
    Mutant {
        name: "replay-per-instance",
        mistake: "Each instance keeps its own replay store, so a confirmation used on one instance is still fresh on another.",
        exposed_by: "05-accepts-race-for-different-candidates.sim",
        also_caught_by: "02-retry-lands-on-another-instance.sim",
        build: Build::Notes(replay_per_instance),
        liveness: false,
    },
    Mutant {
        name: "sticky-session",
        mistake: "Keeps the pending confirmation in the memory of the instance that showed the form, so round 2 on any other instance (or after a restart) is refused as expired.",
        exposed_by: "02-retry-lands-on-another-instance.sim",
        also_caught_by: "09-cancel-then-accept-elsewhere.sim",
        build: Build::Notes(sticky_session),
        liveness: false,
    },
    Mutant {
        name: "prefix-containment",
        mistake: "Authorizes a workspace when its URI merely starts with an authorized root as a string (Notes-evil passes as Notes).",
        exposed_by: "20-prefix-confusion-workspace.sim",
        also_caught_by: "21-encoded-traversal-workspace.sim",
        build: Build::Notes(prefix_containment),
        liveness: false,
    },
    Mutant {
        name: "undecoded-containment",
        mistake: "Compares the workspace URI by path segments before percent-decoding it, so %2e%2e climbs out after the check.",
        exposed_by: "21-encoded-traversal-workspace.sim",
        also_caught_by: "24-an-attack-battery-across-three-instances.sim",
        build: Build::Notes(undecoded_containment),
        liveness: false,
    },
    Mutant {
        name: "no-live-recheck",
        mistake: "Deletes the chosen note without re-reading it, trusting where it was when the form was shown.",
        exposed_by: "07-note-moved-out-after-the-form-was-shown.sim",
        also_caught_by: "24-an-attack-battery-across-three-instances.sim",
        build: Build::Notes(no_live_recheck),
        liveness: false,
    },
    Mutant {
        name: "recheck-then-delete",
        mistake: "Re-checks the live note and deletes it in two separate store operations, so a move can land in between.",
        exposed_by: "zoo-move-races-the-accept",
        also_caught_by: "04-accepts-race-for-one-note.sim",
        build: Build::Notes(recheck_then_delete),
        liveness: false,
    },
    Mutant {
        name: "delete-then-claim",
        mistake: "Deletes first and claims the nonce afterwards as a separate step, so two racing accepts both delete.",
        exposed_by: "05-accepts-race-for-different-candidates.sim",
        also_caught_by: "08-decline-then-replayed-accept.sim",
        build: Build::Notes(delete_then_claim),
        liveness: false,
    },
    Mutant {
        name: "claim-then-delete",
        mistake: "Claims the nonce, recording \"deleted\", and deletes in a separate step: a crash in between leaves a confirmation that says deleted while the note survives.",
        exposed_by: "zoo-crash-between-claim-and-delete",
        also_caught_by: "06-note-deleted-after-the-form-was-shown.sim",
        build: Build::Notes(claim_then_delete),
        liveness: false,
    },
    Mutant {
        name: "claim-without-outcome",
        mistake: "Claims the nonce before deleting and never records how the claim ended, so every other attempt at the confirmation hears \"in progress\" forever.",
        exposed_by: "04-accepts-race-for-one-note.sim",
        also_caught_by: "02-retry-lands-on-another-instance.sim",
        build: Build::Notes(claim_without_outcome),
        liveness: true,
    },
    Mutant {
        name: "no-outcome-on-replay",
        mistake: "Refuses a used confirmation without the outcome it recorded, so a client whose answer was lost can never learn whether its note was deleted.",
        exposed_by: "16-crash-between-claim-and-delete.sim",
        also_caught_by: "02-retry-lands-on-another-instance.sim",
        build: Build::Notes(no_outcome_on_replay),
        liveness: false,
    },
    Mutant {
        name: "state-unbound-arguments",
        mistake: "Ignores the arguments digest sealed in the state, so an accept may continue a flow started with other arguments.",
        exposed_by: "12-changed-title.sim",
        also_caught_by: "24-an-attack-battery-across-three-instances.sim",
        build: Build::Notes(state_unbound_arguments),
        liveness: false,
    },
    Mutant {
        name: "state-unbound-principal",
        mistake: "Ignores the principal sealed in the state, so another principal's client can answer someone else's form.",
        exposed_by: "zoo-shared-workspace-state-stolen",
        also_caught_by: "24-an-attack-battery-across-three-instances.sim",
        build: Build::Notes(state_unbound_principal),
        liveness: false,
    },
    Mutant {
        name: "unsigned-state",
        mistake: "Reads the state's base64 payload without verifying its signature, so a client can add candidates.",
        exposed_by: "zoo-forged-candidate",
        also_caught_by: "11-tampered-state.sim",
        build: Build::Notes(unsigned_state),
        liveness: false,
    },
    Mutant {
        name: "cancel-consumes",
        mistake: "Consumes the confirmation on cancel, so dismissing the form uses it up.",
        exposed_by: "09-cancel-then-accept-elsewhere.sim",
        also_caught_by: "24-an-attack-battery-across-three-instances.sim",
        build: Build::Notes(cancel_consumes),
        liveness: false,
    },
    Mutant {
        name: "invalid-answer-consumes",
        mistake: "Claims the confirmation for an answer it refused as invalid (a candidate not shown, no content), so the valid accept that follows is refused.",
        exposed_by: "11-tampered-state.sim",
        also_caught_by: "09-cancel-then-accept-elsewhere.sim",
        build: Build::Notes(invalid_answer_consumes),
        liveness: false,
    },
    Mutant {
        name: "decline-not-consuming",
        mistake: "Answers a decline without consuming the confirmation, so a replayed accept still deletes.",
        exposed_by: "08-decline-then-replayed-accept.sim",
        also_caught_by: "24-an-attack-battery-across-three-instances.sim",
        build: Build::Notes(decline_not_consuming),
        liveness: false,
    },
    Mutant {
        name: "evicting-replay-store",
        mistake:
            "A full replay store makes room instead of refusing: the confirmation it cannot remember is admitted and can be used again.",
        exposed_by: "zoo-full-replay-store-reused",
        also_caught_by: "17-full-replay-store-fails-closed.sim",
        build: Build::Notes(evicting_replay_store),
        liveness: false,
    },
    Mutant {
        name: "remembered-capabilities",
        mistake: "Remembers a principal's form capability from an earlier request and sends forms to requests that did not declare it.",
        exposed_by: "18-url-only-client.sim",
        also_caught_by: "24-an-attack-battery-across-three-instances.sim",
        build: Build::Notes(remembered_capabilities),
        liveness: false,
    },
    Mutant {
        name: "admits-past-retention",
        mistake: "A replay store that takes the claimant's word for a state's expiry, so a lagging instance gets a pruned, used nonce accepted again.",
        exposed_by: "zoo-lagging-instance-past-the-grace",
        also_caught_by: "23-clock-behind-beyond-the-grace.sim",
        build: Build::Notes(admits_past_retention),
        liveness: false,
    },
    Mutant {
        name: "hash-ordered-candidates",
        mistake: "Collects a form's candidates in a hash map and serializes its iteration order, so the same run answers differently each time.",
        exposed_by: "01-lesson-exchange-on-one-instance.sim",
        also_caught_by: "02-retry-lands-on-another-instance.sim",
        build: Build::Notes(hash_ordered),
        liveness: false,
    },
    Mutant {
        name: "description-only-pins",
        mistake: "A gateway that judges a pinned tool by its description alone, so a changed schema behind the same description is served.",
        exposed_by: "41-gateway-rug-pull-between-two-listings.sim",
        also_caught_by: "54-gateway-an-operators-week.sim",
        build: Build::Gateway(GatewayVariant::DescriptionOnlyPins),
        liveness: false,
    },
    Mutant {
        name: "routes-by-header-after-authorizing-the-body",
        mistake: "A gateway that authorizes the tool named in the body, then routes and runs the one named by the Mcp-Name header.",
        exposed_by: "53-gateway-body-names-the-tool-even-when-both-would-run.sim",
        also_caught_by: "54-gateway-an-operators-week.sim",
        build: Build::Gateway(GatewayVariant::RoutesByHeader),
        liveness: false,
    },
    Mutant {
        name: "first-listed-backend-wins",
        mistake: "A gateway that runs a bare tool name on the first backend, in configuration order, that lists it.",
        exposed_by: "42-gateway-shadowed-search.sim",
        also_caught_by: "54-gateway-an-operators-week.sim",
        build: Build::Gateway(GatewayVariant::FirstListedBackendWins),
        liveness: false,
    },
    Mutant {
        name: "exports-on-decline",
        mistake: "A gateway that runs the export when the user declines, then answers \"declined\".",
        exposed_by: "51-gateway-decline-ends-the-export-on-every-instance.sim",
        also_caught_by: "54-gateway-an-operators-week.sim",
        build: Build::Gateway(GatewayVariant::ExportsOnDecline),
        liveness: false,
    },
    Mutant {
        name: "revoke-ignoring-backend",
        mistake: "A gateway whose notes backend keeps the grants it started with: a revocation never reaches it.",
        exposed_by: "52-gateway-revocation-reaches-the-backends.sim",
        also_caught_by: "54-gateway-an-operators-week.sim",
        build: Build::Gateway(GatewayVariant::RevokeIgnoringBackend),
        liveness: false,
    },
    Mutant {
        name: "url-bound-to-nothing",
        mistake: "The out-of-band page completes a flow for whoever opens its URL, as if the link itself proved who the user is.",
        exposed_by: "31-url-mode-completed-by-the-wrong-user.sim",
        also_caught_by: "35-url-mode-two-browsers-race-one-url.sim",
        build: Build::Notes(url_bound_to_nothing),
        liveness: false,
    },
    Mutant {
        name: "accept-trusted-as-completion",
        mistake: "Takes the client's accept of a URL-mode elicitation as proof that the out-of-band step was completed.",
        exposed_by: "30-url-mode-publish-completed-on-the-page.sim",
        also_caught_by: "31-url-mode-completed-by-the-wrong-user.sim",
        build: Build::Notes(accept_trusted_as_completion),
        liveness: false,
    },
    Mutant {
        name: "adapter-trusts-roots",
        mistake: "A 2025-11-25 adapter that takes the client's root list as a grant, so a host can name another principal's workspace as its root and act in it.",
        exposed_by: "61-legacy-roots-name-another-principals-workspace.sim",
        also_caught_by: "60-legacy-and-modern-clients-share-one-deployment.sim",
        build: Build::Eras(EraVariant::TrustsRoots),
        liveness: false,
    },
    Mutant {
        name: "session-capabilities-reach-modern-requests",
        mistake: "A dual-era instance that lends a principal's legacy session capabilities to its modern requests, so a request that declared no forms is sent one.",
        exposed_by: "64-legacy-session-capabilities-stay-in-the-session.sim",
        also_caught_by: "60-legacy-and-modern-clients-share-one-deployment.sim",
        build: Build::Eras(EraVariant::KeepsSessionCapabilities),
        liveness: false,
    },
];

pub fn find(name: &str) -> Option<&'static Mutant> {
    MUTANTS.iter().find(|mutant| mutant.name == name)
}

/// Scenarios written for the zoo: races and attacks that no library scenario happens to contain.
pub(crate) const ZOO_SCENARIOS: &[(&str, &str)] = &[
    (
        "zoo-move-races-the-accept",
        "# Guarantee taught: the live re-check and the delete are one store operation.\n\
         # The admin moves note-7 out of the workspace while alice's accept is in flight.\n\
         use demo\nkey k1\ninstance i1 keys k1\ninstance i2 keys k1\nclient alice principal alice\n\
         let delete_tps = {\"workspaceUri\": \"file:///Users/alice/Documents/Notes\", \"title\": \"TPS report\"}\n\
         send alice -> i1 tools/call {\"name\": \"notes_delete\", \"arguments\": $delete_tps} as round1\n\
         parallel {\n\
           admin move note-7 to \"file:///Users/alice/Documents/Archive/tps-2024.md\"\n\
           answer alice -> i2 accept {\"note_id\": \"note-7\", \"confirm\": true} as accept\n\
         }\n",
    ),
    (
        "zoo-crash-between-claim-and-delete",
        "# Guarantee taught: what a used confirmation reports is what happened.\n\
         # The instance serving the accept dies just before its delete reaches the note store; the client\n\
         # retries on i2. With claim and delete as one store operation there is no such moment to die in.\n\
         use demo\nkey k1\ninstance i1 keys k1\ninstance i2 keys k1\nclient alice principal alice\n\
         let delete_tps = {\"workspaceUri\": \"file:///Users/alice/Documents/Notes\", \"title\": \"TPS report\"}\n\
         send alice -> i1 tools/call {\"name\": \"notes_delete\", \"arguments\": $delete_tps} as round1\n\
         crash i1 before notes receives delete_if_inside\n\
         answer alice -> i1 accept {\"note_id\": \"note-7\", \"confirm\": true} as lost\n\
         restart i1\n\
         answer alice -> i2 accept {\"note_id\": \"note-7\", \"confirm\": true} for round1 as retry\n\
         expect note note-7 absent\n",
    ),
    (
        "zoo-shared-workspace-state-stolen",
        "# Guarantee taught: a state is bound to the principal it was issued to, even where both may act.\n\
         use demo\nprincipal carol workspaces \"file:///Users/alice/Documents/Notes\"\n\
         key k1\ninstance i1 keys k1\ninstance i2 keys k1\nclient alice principal alice\nclient carol principal carol\n\
         let delete_tps = {\"workspaceUri\": \"file:///Users/alice/Documents/Notes\", \"title\": \"TPS report\"}\n\
         send alice -> i1 tools/call {\"name\": \"notes_delete\", \"arguments\": $delete_tps} as round1\n\
         answer carol -> i2 accept {\"note_id\": \"note-7\", \"confirm\": true} for round1 as stolen\n\
         expect stolen error -32602 state_mismatch\n",
    ),
    (
        "zoo-forged-candidate",
        "# Guarantee taught: the candidates are signed; a client cannot add one.\n\
         use demo\nkey k1\ninstance i1 keys k1\nclient alice principal alice\n\
         let delete_tps = {\"workspaceUri\": \"file:///Users/alice/Documents/Notes\", \"title\": \"TPS report\"}\n\
         send alice -> i1 tools/call {\"name\": \"notes_delete\", \"arguments\": $delete_tps} as round1\n\
         answer alice -> i1 accept {\"note_id\": \"note-99\", \"confirm\": true} state tamper($round1.result.requestState, \"candidates\", [\"note-3\", \"note-7\", \"note-14\", \"note-99\"]) as forged\n\
         expect forged error -32602 state_signature\n\
         expect note note-99 present\n",
    ),
    (
        "zoo-full-replay-store-reused",
        "# Guarantee taught: a full replay store refuses; it never admits a confirmation it cannot remember.\n\
         use demo\nkey k1\ninstance i1 keys k1\ninstance i2 keys k1\nclient alice principal alice\nreplay capacity 1\n\
         let delete_tps = {\"workspaceUri\": \"file:///Users/alice/Documents/Notes\", \"title\": \"TPS report\"}\n\
         send alice -> i1 tools/call {\"name\": \"notes_delete\", \"arguments\": $delete_tps} as first\n\
         send alice -> i1 tools/call {\"name\": \"notes_delete\", \"arguments\": $delete_tps} as second\n\
         answer alice -> i1 accept {\"note_id\": \"note-3\", \"confirm\": true} for first as fills\n\
         answer alice -> i2 accept {\"note_id\": \"note-7\", \"confirm\": true} for second as refused\n\
         expect refused error -32603\n\
         answer alice -> i1 accept {\"note_id\": \"note-14\", \"confirm\": true} for second as refused_again\n\
         expect refused_again error -32603\n",
    ),
    (
        "zoo-lagging-instance-past-the-grace",
        "# Guarantee taught: the replay store judges expiry by its own clock, never by the claimant's.\n\
         # An instance ten minutes behind replays a used confirmation after the store pruned its nonce.\n\
         use demo\nkey k1\ninstance fresh keys k1\ninstance lagging keys k1 clock -10m\nclient alice principal alice\n\
         state-ttl 2m\nreplay capacity 1 grace 30s\n\
         let delete_tps = {\"workspaceUri\": \"file:///Users/alice/Documents/Notes\", \"title\": \"TPS report\"}\n\
         send alice -> fresh tools/call {\"name\": \"notes_delete\", \"arguments\": $delete_tps} as first\n\
         answer alice -> fresh accept {\"note_id\": \"note-3\", \"confirm\": true} for first as used\n\
         advance 3m\n\
         send alice -> fresh tools/call {\"name\": \"notes_delete\", \"arguments\": $delete_tps} as second\n\
         answer alice -> fresh decline for second as takes_the_slot\n\
         answer alice -> lagging accept {\"note_id\": \"note-7\", \"confirm\": true} for first as replayed\n\
         expect note note-7 present\n",
    ),
];

/// The embedded scenario a name means — the library's (`04-accepts-race-for-one-note`, with or without `.sim`,
/// or as `<embedded>/FILE` in a report) or the zoo's (`zoo-move-races-the-accept`) — as its file name and text.
/// Every lookup of an embedded scenario by name (run, explore, the embedded API) goes through here.
pub fn embedded(name: &str) -> Option<(&'static str, &'static str)> {
    let name = name.strip_prefix("<embedded>/").unwrap_or(name);
    let file = if name.ends_with(".sim") || name.starts_with("zoo-") { name.to_string() } else { format!("{name}.sim") };
    library::SCENARIOS.iter().chain(ZOO_SCENARIOS.iter()).find(|(f, _)| *f == file).copied()
}

/// The embedded scenario `name` means ([`embedded`]), parsed.
pub fn scenario_named(name: &str) -> Option<Scenario> {
    let (file, text) = embedded(name)?;
    scenario::parse(file, file.trim_end_matches(".sim"), text).ok()
}
