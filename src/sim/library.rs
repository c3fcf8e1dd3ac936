//! The scenario library, embedded in the binary so `mcpsim run` works from any directory.
//!
//! The files under `scenarios/` are the source; a test checks that this list matches the folder exactly.

/// (file name, contents), in file-name order.
pub const SCENARIOS: &[(&str, &str)] = &[
    ("01-lesson-exchange-on-one-instance.sim", include_str!("../../scenarios/01-lesson-exchange-on-one-instance.sim")),
    ("02-retry-lands-on-another-instance.sim", include_str!("../../scenarios/02-retry-lands-on-another-instance.sim")),
    ("03-retry-after-the-first-instance-crashed.sim", include_str!("../../scenarios/03-retry-after-the-first-instance-crashed.sim")),
    ("04-accepts-race-for-one-note.sim", include_str!("../../scenarios/04-accepts-race-for-one-note.sim")),
    ("05-accepts-race-for-different-candidates.sim", include_str!("../../scenarios/05-accepts-race-for-different-candidates.sim")),
    ("06-note-deleted-after-the-form-was-shown.sim", include_str!("../../scenarios/06-note-deleted-after-the-form-was-shown.sim")),
    ("07-note-moved-out-after-the-form-was-shown.sim", include_str!("../../scenarios/07-note-moved-out-after-the-form-was-shown.sim")),
    ("08-decline-then-replayed-accept.sim", include_str!("../../scenarios/08-decline-then-replayed-accept.sim")),
    ("09-cancel-then-accept-elsewhere.sim", include_str!("../../scenarios/09-cancel-then-accept-elsewhere.sim")),
    ("10-state-expires-between-rounds.sim", include_str!("../../scenarios/10-state-expires-between-rounds.sim")),
    ("11-tampered-state.sim", include_str!("../../scenarios/11-tampered-state.sim")),
    ("12-changed-title.sim", include_str!("../../scenarios/12-changed-title.sim")),
    ("13-another-principal-replays-the-state.sim", include_str!("../../scenarios/13-another-principal-replays-the-state.sim")),
    ("14-key-rotation-between-rounds.sim", include_str!("../../scenarios/14-key-rotation-between-rounds.sim")),
    ("15-misconfigured-instance-key.sim", include_str!("../../scenarios/15-misconfigured-instance-key.sim")),
    ("16-crash-between-claim-and-delete.sim", include_str!("../../scenarios/16-crash-between-claim-and-delete.sim")),
    ("17-full-replay-store-fails-closed.sim", include_str!("../../scenarios/17-full-replay-store-fails-closed.sim")),
    ("18-url-only-client.sim", include_str!("../../scenarios/18-url-only-client.sim")),
    ("19-tools-call-as-notification.sim", include_str!("../../scenarios/19-tools-call-as-notification.sim")),
    ("20-prefix-confusion-workspace.sim", include_str!("../../scenarios/20-prefix-confusion-workspace.sim")),
    ("21-encoded-traversal-workspace.sim", include_str!("../../scenarios/21-encoded-traversal-workspace.sim")),
    ("22-admin-changes-between-rounds.sim", include_str!("../../scenarios/22-admin-changes-between-rounds.sim")),
    ("40-gateway-poisoned-description.sim", include_str!("../../scenarios/40-gateway-poisoned-description.sim")),
    ("41-gateway-rug-pull-between-two-listings.sim", include_str!("../../scenarios/41-gateway-rug-pull-between-two-listings.sim")),
    ("42-gateway-shadowed-search.sim", include_str!("../../scenarios/42-gateway-shadowed-search.sim")),
    ("43-gateway-header-body-confusion.sim", include_str!("../../scenarios/43-gateway-header-body-confusion.sim")),
    ("44-gateway-capability-is-not-permission.sim", include_str!("../../scenarios/44-gateway-capability-is-not-permission.sim")),
    ("45-gateway-tampered-or-retargeted-state.sim", include_str!("../../scenarios/45-gateway-tampered-or-retargeted-state.sim")),
    ("46-gateway-familiar-name-unknown-publisher.sim", include_str!("../../scenarios/46-gateway-familiar-name-unknown-publisher.sim")),
    ("47-gateways-race-one-export-confirmation.sim", include_str!("../../scenarios/47-gateways-race-one-export-confirmation.sim")),
    ("48-gateway-crash-between-claim-and-export.sim", include_str!("../../scenarios/48-gateway-crash-between-claim-and-export.sim")),
    ("49-gateway-crash-during-export.sim", include_str!("../../scenarios/49-gateway-crash-during-export.sim")),
];
