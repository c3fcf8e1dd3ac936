//! The notes server, driven in process through `handlers::pipeline::handle_message` with raw JSON bytes.
//!
//! Every test starts from the embedded demo deployment (alice: `…/Documents/Notes` with note-3, note-7, note-14
//! and note-99; bob: `…/bob/Notes` with note-300; note-100 outside every workspace; note-200 in the evil-twin
//! folder `…/Documents/Notes-evil`). Most tests are written from the attacker's side: each refusal asserts the
//! exact code and reason, that nothing was deleted, and — where the rule is "consumes nothing" — that a genuine
//! accept of the same state still succeeds afterwards.

mod common;

use common::*;
use mcpsim::testing::digest_hex;
use mcpsim::testing::FileUri;
use mcpsim::testing::ReplayLimits;
use mcpsim::testing::Reply;
use mcpsim::testing::RoutingHeaders;
use mcpsim::testing::CANDIDATES_MAX;
use mcpsim::testing::MESSAGE_BYTES_MAX;
use mcpsim::testing::{ClaimRecord, Note};
use mcpsim::testing::{KeyRing, StateClaims, STATE_CHARS_MAX};
use mcpsim::testing::{KEY_CLIENT_CAPABILITIES, KEY_PROTOCOL_VERSION, KEY_SERVER_INFO};
use serde_json::{json, Value};

fn test_ring() -> KeyRing {
    KeyRing::new(KEY_ID, KEY_BYTES.to_vec()).unwrap()
}

/// The claims sealed into a state minted by the harness (verified with the test key).
fn claims_of(state: &str) -> StateClaims {
    test_ring().verify(state).expect("a state minted by the harness verifies")
}

/// The four `.`-separated parts of a sealed state.
fn parts(state: &str) -> Vec<String> {
    state.split('.').map(str::to_string).collect()
}

fn text_of(result: &Value) -> String {
    result["content"][0]["text"].as_str().expect("a text content block").to_string()
}

mod lesson_flow {
    use super::*;

    #[tokio::test]
    async fn round_one_offers_exactly_the_three_tps_reports_in_alices_workspace() {
        let h = Harness::new();
        let result = h.round_one_result("alice", &lesson_arguments()).await;

        let keys: Vec<&str> = result.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["_meta", "inputRequests", "requestState", "resultType"], "input_required carries no cache hints, no content");
        assert_eq!(result["inputRequests"].as_object().unwrap().len(), 1);
        let form = &result["inputRequests"]["delete_choice"];
        assert_eq!(form["method"], "elicitation/create");
        assert_eq!(form["params"]["mode"], "form");
        assert_eq!(
            form["params"]["requestedSchema"],
            json!({
                "type": "object",
                "properties": {
                    "note_id": { "type": "string", "title": "Note to delete", "enum": ["note-3", "note-7", "note-14"] },
                    "confirm": { "type": "boolean", "title": "Yes, delete this note permanently" },
                },
                "required": ["note_id", "confirm"],
            })
        );
        let message = form["params"]["message"].as_str().unwrap();
        for line in [
            "note-3: TPS report 2023 (file:///Users/alice/Documents/Notes/tps-2023.md)",
            "note-7: TPS report 2024 (file:///Users/alice/Documents/Notes/tps-2024.md)",
            "note-14: TPS report 2025 (file:///Users/alice/Documents/Notes/tps-2025.md)",
        ] {
            assert!(message.lines().any(|l| l == line), "the form lists {line:?}: {message}");
        }
        for hidden in ["note-200", "Notes-evil", "note-100", "/tmp", "note-300", "/bob/", "note-99"] {
            assert!(!message.contains(hidden), "the form must not mention {hidden:?}: {message}");
        }
        h.assert_untouched();
    }

    #[tokio::test]
    async fn the_form_is_a_flat_object_of_primitive_required_fields() {
        let h = Harness::new();
        let result = h.round_one_result("alice", &lesson_arguments()).await;
        let schema = &result["inputRequests"]["delete_choice"]["params"]["requestedSchema"];
        for (name, property) in schema["properties"].as_object().unwrap() {
            let kind = property["type"].as_str().unwrap();
            assert!(["string", "boolean", "number", "integer"].contains(&kind), "{name} is primitive");
            assert!(property.get("properties").is_none() && property.get("items").is_none(), "{name} is not nested");
        }
        assert_eq!(schema["required"], json!(["note_id", "confirm"]));
    }

    #[tokio::test]
    async fn the_request_state_is_sealed_and_binds_principal_tool_arguments_candidates_and_expiry() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        assert!(state.starts_with("s1.test-1."), "{state}");
        assert_eq!(parts(&state).len(), 4);
        let claims = claims_of(&state);
        assert_eq!(claims.principal, "alice");
        assert_eq!(claims.method, "tools/call");
        assert_eq!(claims.tool, "notes_delete");
        assert_eq!(claims.phase, "delete_choice");
        assert_eq!(claims.candidates, ["note-3", "note-7", "note-14"]);
        // Keyed (HMAC-SHA256 under the sealing key, domain-separated), computed here independently: someone
        // holding the state cannot test a guessed title against a plain digest.
        assert_ne!(claims.arguments_digest, digest_hex(&lesson_arguments()), "not an unkeyed SHA-256 of the arguments");
        let mut mac = <hmac::Hmac<sha2::Sha256> as hmac::Mac>::new_from_slice(&KEY_BYTES).unwrap();
        hmac::Mac::update(&mut mac, b"mcpsim arguments digest v1\0");
        hmac::Mac::update(&mut mac, serde_json::to_string(&lesson_arguments()).unwrap().as_bytes());
        let expected: String = hmac::Mac::finalize(mac).into_bytes().iter().map(|byte| format!("{byte:02x}")).collect();
        assert_eq!(claims.arguments_digest, expected);
        assert_eq!(claims.issued_at_ms, START_MS);
        assert_eq!(claims.expires_at_ms, START_MS + STATE_TTL_MS);
        assert_eq!(claims.nonce, "bm9uY2UuLi4AAAAAAAAAAQ", "the first nonce of the counting source, base64url");
    }

    #[tokio::test]
    async fn accepting_note_7_on_a_fresh_id_deletes_note_7_and_nothing_else() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        let exchange = h.answer("alice", &lesson_arguments(), &state, accept("note-7")).await;
        assert_eq!(exchange.id, json!(2), "round 2 travels on a fresh id");
        let result = exchange.result();
        assert_eq!(result["resultType"], "complete");
        assert_eq!(result["isError"], false);
        assert_eq!(result["structuredContent"], json!({ "deleted": true, "noteId": "note-7", "outcome": "deleted" }));
        assert_eq!(result["content"][0]["type"], "text");
        assert!(text_of(&result).contains("note-7"), "{result}");
        assert!(result.get("ttlMs").is_none() && result.get("cacheScope").is_none(), "tools/call results are not cacheable");
        assert_eq!(h.note_ids(), demo_ids_without(&["note-7"]));
        assert_eq!(h.replay.consumed(), vec![(claims_of(&state).nonce, ClaimRecord::Deleted { note_id: "note-7".into() })]);
    }

    #[tokio::test]
    async fn the_retry_may_land_on_another_instance_that_holds_the_same_key() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        let other_instance = h.instance(demo_config());
        let outcome = h.answer_on(&other_instance, "alice", &lesson_arguments(), &state, accept("note-14")).await.outcome();
        assert_eq!(outcome, json!({ "deleted": true, "noteId": "note-14", "outcome": "deleted" }));
        assert_eq!(h.note_ids(), demo_ids_without(&["note-14"]));
    }

    #[tokio::test]
    async fn the_server_does_not_correlate_request_ids_between_rounds() {
        // Reusing round 1's id is a client bug (SPEC-MRTR-13), but everything round 2 needs is in the state.
        let h = Harness::new();
        let round_one = h.request("tools/call", json!({ "name": "notes_delete", "arguments": lesson_arguments() }), form_capabilities());
        let state = h.send("alice", &round_one).await.result()["requestState"].as_str().unwrap().to_string();
        let mut retry = h.request(
            "tools/call",
            json!({ "name": "notes_delete", "arguments": lesson_arguments(), "requestState": state, "inputResponses": accept("note-3") }),
            json!({}),
        );
        retry["id"] = round_one["id"].clone();
        assert_eq!(h.send("alice", &retry).await.outcome()["noteId"], "note-3");
    }

    #[tokio::test]
    async fn bob_is_offered_only_his_own_tps_report() {
        let h = Harness::new();
        let result = h.round_one_result("bob", &delete_arguments(BOB_WORKSPACE, "tps REPORT")).await;
        assert_eq!(
            result["inputRequests"]["delete_choice"]["params"]["requestedSchema"]["properties"]["note_id"]["enum"],
            json!(["note-300"])
        );
    }

    #[tokio::test]
    async fn a_subfolder_of_an_authorized_workspace_narrows_the_candidates() {
        let h = Harness::new();
        h.notes.upsert(Note {
            id: "note-500".into(),
            title: "TPS report archive".into(),
            uri: format!("{ALICE_WORKSPACE}/archive/tps-old.md"),
            body: String::new(),
            revision: String::new(),
        });
        let arguments = delete_arguments(&format!("{ALICE_WORKSPACE}/archive"), "TPS report");
        let result = h.round_one_result("alice", &arguments).await;
        assert_eq!(
            result["inputRequests"]["delete_choice"]["params"]["requestedSchema"]["properties"]["note_id"]["enum"],
            json!(["note-500"])
        );
    }
}

mod refusal {
    use super::*;

    #[tokio::test]
    async fn decline_deletes_nothing_and_ends_the_confirmation() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        let result = h.answer("alice", &lesson_arguments(), &state, decline()).await.result();
        assert_eq!(result["structuredContent"], json!({ "deleted": false, "outcome": "declined" }));
        assert_eq!(result["isError"], false, "a refusal is an outcome, not an error");
        assert_eq!(h.note_ids(), DEMO_NOTE_IDS);
        assert_eq!(h.replay.consumed(), vec![(claims_of(&state).nonce, ClaimRecord::Declined { tool: None })]);

        let data = h.answer("alice", &lesson_arguments(), &state, accept("note-7")).await.invalid("state_consumed");
        assert_eq!(data["previousOutcome"], json!({ "outcome": "declined" }));
        let data = h.answer("alice", &lesson_arguments(), &state, decline()).await.invalid("state_consumed");
        assert_eq!(data["previousOutcome"], json!({ "outcome": "declined" }), "a second decline is not a new prompt loop");
        assert_eq!(h.note_ids(), DEMO_NOTE_IDS);
    }

    #[tokio::test]
    async fn cancel_deletes_nothing_and_consumes_nothing() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        for _ in 0..2 {
            let result = h.answer("alice", &lesson_arguments(), &state, cancel()).await.result();
            assert_eq!(result["structuredContent"], json!({ "deleted": false, "outcome": "cancelled" }));
            assert_eq!(result["isError"], false);
            h.assert_untouched();
        }
        h.accept_succeeds(&state, "note-7").await;
    }

    #[tokio::test]
    async fn a_decline_after_a_cancel_still_ends_the_confirmation() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        h.answer("alice", &lesson_arguments(), &state, cancel()).await.outcome();
        assert_eq!(h.answer("alice", &lesson_arguments(), &state, decline()).await.outcome()["outcome"], "declined");
        h.answer("alice", &lesson_arguments(), &state, accept("note-3")).await.invalid("state_consumed");
        assert_eq!(h.note_ids(), DEMO_NOTE_IDS);
    }

    #[tokio::test]
    async fn cancel_and_decline_still_verify_the_state() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        h.answer("bob", &lesson_arguments(), &state, cancel()).await.invalid("state_mismatch");
        h.answer("bob", &lesson_arguments(), &state, decline()).await.invalid("state_mismatch");
        h.clock.set(START_MS + STATE_TTL_MS);
        h.answer("alice", &lesson_arguments(), &state, cancel()).await.invalid("state_expired");
        h.answer("alice", &lesson_arguments(), &state, decline()).await.invalid("state_expired");
        h.assert_untouched();
    }
}

mod replay {
    use super::*;
    use tokio::join;

    #[tokio::test]
    async fn a_replayed_accept_is_refused_with_what_the_first_one_did() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        h.accept_succeeds(&state, "note-7").await;
        let data = h.answer("alice", &lesson_arguments(), &state, accept("note-7")).await.invalid("state_consumed");
        assert_eq!(data["previousOutcome"], json!({ "outcome": "deleted", "noteId": "note-7" }));
        assert_eq!(h.note_ids(), demo_ids_without(&["note-7"]));
    }

    #[tokio::test]
    async fn two_accepts_of_one_state_with_different_candidates_delete_exactly_one_note() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        h.accept_succeeds(&state, "note-7").await;
        let data = h.answer("alice", &lesson_arguments(), &state, accept("note-3")).await.invalid("state_consumed");
        assert_eq!(data["previousOutcome"], json!({ "outcome": "deleted", "noteId": "note-7" }));
        assert_eq!(h.note_ids(), demo_ids_without(&["note-7"]), "note-3 survives the second accept");
    }

    #[tokio::test]
    async fn accepts_racing_inside_claim_and_delete_delete_exactly_one_note() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        h.note_store.set_behaviour(DeleteBehaviour::YieldOnce);
        let arguments = lesson_arguments();
        let (first, second) =
            join!(h.answer("alice", &arguments, &state, accept("note-7")), h.answer("alice", &arguments, &state, accept("note-3")));
        assert_eq!(first.outcome(), json!({ "deleted": true, "noteId": "note-7", "outcome": "deleted" }));
        // The loser arrived while the winner was deleting: told "in progress, retry", never "already used".
        let data = second.refused(-32603, "claim_in_progress");
        assert!(data.get("previousOutcome").is_none(), "{data}");
        assert_eq!(h.note_ids(), demo_ids_without(&["note-7"]));
        let data = h.answer("alice", &arguments, &state, accept("note-3")).await.invalid("state_consumed");
        assert_eq!(data["previousOutcome"], json!({ "outcome": "deleted", "noteId": "note-7" }));
    }

    #[tokio::test]
    async fn a_replay_on_another_instance_meets_the_same_shared_replay_store() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        h.accept_succeeds(&state, "note-7").await;
        let other_instance = h.instance(demo_config());
        h.answer_on(&other_instance, "alice", &lesson_arguments(), &state, accept("note-14")).await.invalid("state_consumed");
        assert_eq!(h.note_ids(), demo_ids_without(&["note-7"]));
    }

    #[tokio::test]
    async fn each_round_one_mints_its_own_confirmation() {
        let h = Harness::new();
        let first = h.lesson_state().await;
        let second = h.lesson_state().await;
        assert_ne!(claims_of(&first).nonce, claims_of(&second).nonce);
        h.accept_succeeds(&first, "note-7").await;
        h.accept_succeeds(&second, "note-3").await;
        assert_eq!(h.note_ids(), demo_ids_without(&["note-3", "note-7"]));
    }
}

mod tampered_state {
    use super::*;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;

    /// Answers accept(note-7) with `forged` in place of the genuine state, expects `reason`, then proves that
    /// nothing was deleted or consumed by accepting the genuine state.
    async fn refused_then_genuine_accept_works(h: &Harness, genuine: &str, forged: &str, reason: &str) {
        h.answer("alice", &lesson_arguments(), forged, accept("note-7")).await.invalid(reason);
        h.assert_untouched();
        h.accept_succeeds(genuine, "note-7").await;
    }

    #[tokio::test]
    async fn a_flipped_payload_character_fails_the_signature() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        let payload_start = "s1.test-1.".len();
        for offset in [0, 17, 60] {
            let index = payload_start + offset;
            let current = state.chars().nth(index).unwrap();
            let forged = replace_char(&state, index, other_base64_char(current));
            h.answer("alice", &lesson_arguments(), &forged, accept("note-7")).await.invalid("state_signature");
        }
        refused_then_genuine_accept_works(&h, &state, &state.replace("s1.test-1.", "s1.test-1.x"), "state_signature").await;
    }

    #[tokio::test]
    async fn a_flipped_tag_character_fails_the_signature() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        let tag_start = state.rfind('.').unwrap() + 1;
        let forged = replace_char(&state, tag_start, other_base64_char(state.chars().nth(tag_start).unwrap()));
        refused_then_genuine_accept_works(&h, &state, &forged, "state_signature").await;
    }

    #[tokio::test]
    async fn a_payload_swapped_in_from_another_genuine_state_fails_the_signature() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        let other = h.round_one("alice", &delete_arguments(ALICE_WORKSPACE, "shopping")).await;
        let (ours, theirs) = (parts(&state), parts(&other));
        let forged = format!("{}.{}.{}.{}", ours[0], ours[1], theirs[2], ours[3]);
        refused_then_genuine_accept_works(&h, &state, &forged, "state_signature").await;
    }

    #[tokio::test]
    async fn claims_rewritten_under_the_genuine_tag_fail_the_signature() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        let mut claims = claims_of(&state);
        claims.candidates.push("note-200".into());
        claims.expires_at_ms = u64::MAX;
        let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).unwrap());
        let p = parts(&state);
        let forged = format!("{}.{}.{payload}.{}", p[0], p[1], p[3]);
        refused_then_genuine_accept_works(&h, &state, &forged, "state_signature").await;
    }

    #[tokio::test]
    async fn a_stripped_tag_is_malformed_and_an_empty_tag_fails_the_signature() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        let without_tag = &state[..state.rfind('.').unwrap()];
        h.answer("alice", &lesson_arguments(), without_tag, accept("note-7")).await.invalid("state_malformed");
        let empty_tag = format!("{without_tag}.");
        refused_then_genuine_accept_works(&h, &state, &empty_tag, "state_signature").await;
    }

    #[tokio::test]
    async fn unsigned_base64_json_claims_are_malformed() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        let unsigned = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims_of(&state)).unwrap());
        h.answer("alice", &lesson_arguments(), &unsigned, accept("note-7")).await.invalid("state_malformed");
        let plain_json = serde_json::to_string(&claims_of(&state)).unwrap();
        refused_then_genuine_accept_works(&h, &state, &plain_json, "state_malformed").await;
    }

    #[tokio::test]
    async fn states_of_another_format_are_malformed() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        let p = parts(&state);
        let jwt_like = "eyJhbGciOiJub25lIn0.eyJwcmluY2lwYWwiOiJhbGljZSJ9.";
        for forged in [
            format!("s2.{}.{}.{}", p[1], p[2], p[3]),
            format!("S1.{}.{}.{}", p[1], p[2], p[3]),
            format!("s1..{}.{}", p[2], p[3]),
            format!("{state}.extra"),
            jwt_like.to_string(),
            String::new(),
            "s1.test-1.%%%.%%%".to_string(),
            "a".repeat(STATE_CHARS_MAX + 1),
        ] {
            h.answer("alice", &lesson_arguments(), &forged, accept("note-7")).await.invalid("state_malformed");
        }
        let extra = json!({ "requestState": 42, "inputResponses": accept("note-7") });
        h.delete_call(&h.server, "alice", &lesson_arguments(), extra, form_capabilities()).await.invalid("state_malformed");
        h.assert_untouched();
        h.accept_succeeds(&state, "note-7").await;
    }

    #[tokio::test]
    async fn an_expired_state_is_refused_exactly_at_its_expiry_and_consumes_nothing() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        assert_eq!(claims_of(&state).expires_at_ms, START_MS + STATE_TTL_MS);
        h.clock.set(START_MS + STATE_TTL_MS);
        h.answer("alice", &lesson_arguments(), &state, accept("note-7")).await.invalid("state_expired");
        h.clock.set(START_MS + STATE_TTL_MS + 1_000_000);
        let data = h.answer("alice", &lesson_arguments(), &state, accept("note-7")).await.invalid("state_expired");
        assert_eq!(data, json!({ "reason": "state_expired" }));
        h.assert_untouched();
        // One millisecond before expiry the same state still works: the refusals above consumed nothing.
        h.clock.set(START_MS + STATE_TTL_MS - 1);
        h.accept_succeeds(&state, "note-7").await;
    }

    #[tokio::test]
    async fn a_state_signed_by_a_foreign_key_fails_the_signature() {
        let h = Harness::new();
        let foreign = h.instance(config_with_ring(KeyRing::new(KEY_ID, vec![0x77; 32]).unwrap()));
        let foreign_state = h.delete_call(&foreign, "alice", &lesson_arguments(), json!({}), form_capabilities()).await.result()
            ["requestState"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(foreign_state.starts_with("s1.test-1."), "same key id, different key bytes");
        h.answer("alice", &lesson_arguments(), &foreign_state, accept("note-7")).await.invalid("state_signature");

        let state = h.lesson_state().await;
        let unknown_key_id = h.instance(config_with_ring(KeyRing::new("test-2", KEY_BYTES.to_vec()).unwrap()));
        h.answer_on(&unknown_key_id, "alice", &lesson_arguments(), &state, accept("note-7")).await.invalid("state_signature");
        h.assert_untouched();
        h.accept_succeeds(&state, "note-7").await;
    }

    #[tokio::test]
    async fn after_rotation_the_old_key_verifies_until_it_is_retired() {
        let h = Harness::new();
        let old_a = h.lesson_state().await;
        let old_b = h.lesson_state().await;

        let mut rotated = test_ring();
        rotated.rotate("test-2", vec![0x42; 32]).unwrap();
        let rotated_instance = h.instance(config_with_ring(rotated.clone()));
        let new_state = h.delete_call(&rotated_instance, "alice", &lesson_arguments(), json!({}), form_capabilities()).await.result()
            ["requestState"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(new_state.starts_with("s1.test-2."), "the new key signs");
        let outcome = h.answer_on(&rotated_instance, "alice", &lesson_arguments(), &old_a, accept("note-3")).await.outcome();
        assert_eq!(outcome["noteId"], "note-3", "the old key still verifies while it is held");

        let mut retired = rotated.clone();
        retired.retire(KEY_ID).unwrap();
        let retired_instance = h.instance(config_with_ring(retired));
        h.answer_on(&retired_instance, "alice", &lesson_arguments(), &old_b, accept("note-7")).await.invalid("state_signature");
        assert!(h.note("note-7").is_some());
        let outcome = h.answer_on(&retired_instance, "alice", &lesson_arguments(), &new_state, accept("note-14")).await.outcome();
        assert_eq!(outcome["noteId"], "note-14", "states of the current key are unaffected by retiring the old one");
        // The retired instance's refusal consumed nothing: an instance still holding the old key accepts old_b.
        let outcome = h.answer_on(&rotated_instance, "alice", &lesson_arguments(), &old_b, accept("note-7")).await.outcome();
        assert_eq!(outcome["noteId"], "note-7");
    }

    #[tokio::test]
    async fn bob_replaying_alices_state_is_a_mismatch() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        h.answer("bob", &lesson_arguments(), &state, accept("note-7")).await.invalid("state_mismatch");
        h.answer("bob", &delete_arguments(BOB_WORKSPACE, "TPS report"), &state, accept("note-7")).await.invalid("state_mismatch");
        h.answer("mallory", &lesson_arguments(), &state, accept("note-7")).await.invalid("state_mismatch");
        h.assert_untouched();
        h.accept_succeeds(&state, "note-7").await;
    }

    #[tokio::test]
    async fn a_genuinely_signed_state_for_another_method_tool_or_phase_is_a_mismatch() {
        let h = Harness::new();
        let genuine = h.lesson_state().await;
        let base = claims_of(&genuine);
        let variants: [fn(&mut StateClaims); 3] =
            [|c| c.method = "prompts/get".into(), |c| c.tool = "notes_export".into(), |c| c.phase = "export_confirm".into()];
        for (index, change) in variants.into_iter().enumerate() {
            let mut claims = base.clone();
            claims.nonce = format!("forged-{index}");
            change(&mut claims);
            let forged = test_ring().seal(&claims);
            h.answer("alice", &lesson_arguments(), &forged, accept("note-7")).await.invalid("state_mismatch");
        }
        h.assert_untouched();
        h.accept_succeeds(&genuine, "note-7").await;
    }

    #[tokio::test]
    async fn even_a_genuinely_signed_state_listing_a_note_outside_the_workspace_cannot_delete_it() {
        // Defence in depth: if the candidate set were ever wrong (a bug, a leaked key), the store's
        // compare-and-delete still re-checks containment against the re-authorized workspace.
        let h = Harness::new();
        let mut claims = claims_of(&h.lesson_state().await);
        claims.candidates = vec!["note-200".into(), "note-300".into(), "note-100".into()];
        claims.nonce = "forged-outside".into();
        let forged = test_ring().seal(&claims);
        for id in ["note-200", "note-300", "note-100"] {
            let data = h.answer("alice", &lesson_arguments(), &forged, accept(id)).await.invalid("note_outside_workspace");
            assert_eq!(data["noteId"], id);
        }
        h.assert_untouched();
    }
}

mod argument_binding {
    use super::*;

    #[tokio::test]
    async fn a_changed_title_is_a_mismatch_and_consumes_nothing() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        for title in ["TPS report 2024", "tps report", "TPS report ", "shopping"] {
            h.answer("alice", &delete_arguments(ALICE_WORKSPACE, title), &state, accept("note-7")).await.invalid("state_mismatch");
        }
        h.assert_untouched();
        h.accept_succeeds(&state, "note-7").await;
    }

    /// Decision: the state binds the exact arguments the user confirmed, not their normalized meaning. A
    /// client that rewrites the workspace URI between rounds is not echoing the same request (SPEC-MRTR-8c).
    #[tokio::test]
    async fn a_workspace_uri_changed_even_to_an_equivalent_form_is_a_mismatch() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        for workspace in [
            "file:///Users/alice/Documents/Notes/",
            "file://localhost/Users/alice/Documents/Notes",
            "FILE:///Users/alice/Documents/Notes",
            "file:///Users/alice/Documents/./Notes",
            "file:///Users/alice/Documents/%4Eotes",
            "file:///Users/alice/Documents/Notes/archive",
        ] {
            assert!(FileUri::parse(workspace).is_ok(), "{workspace} is an acceptable URI");
            h.answer("alice", &delete_arguments(workspace, "TPS report"), &state, accept("note-7")).await.invalid("state_mismatch");
        }
        h.answer("alice", &delete_arguments(BOB_WORKSPACE, "TPS report"), &state, accept("note-7")).await.invalid("state_mismatch");
        h.assert_untouched();
        h.accept_succeeds(&state, "note-7").await;
    }

    #[tokio::test]
    async fn reordered_argument_keys_are_the_same_arguments() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        let reordered = br#"{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"arguments":{"title":"TPS report","workspaceUri":"file:///Users/alice/Documents/Notes"},"name":"notes_delete","requestState":"STATE","inputResponses":{"delete_choice":{"content":{"confirm":true,"note_id":"note-7"},"action":"accept"}},"_meta":{"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        let body = String::from_utf8(reordered.to_vec()).unwrap().replace("STATE", &state);
        let reply = h.send_bytes("alice", body.as_bytes()).await;
        let outcome = Exchange { id: json!(99), reply }.outcome();
        assert_eq!(outcome, json!({ "deleted": true, "noteId": "note-7", "outcome": "deleted" }));
    }

    #[tokio::test]
    async fn an_added_argument_is_invalid_and_consumes_nothing() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        let mut arguments = lesson_arguments();
        arguments["noteId"] = json!("note-200");
        let error = h.answer("alice", &arguments, &state, accept("note-7")).await.error();
        assert_eq!(error["data"]["reason"], "arguments_invalid");
        assert!(error["message"].as_str().unwrap().contains("noteId"), "{error}");
        h.assert_untouched();
        h.accept_succeeds(&state, "note-7").await;
    }

    #[tokio::test]
    async fn missing_or_mistyped_arguments_are_invalid_and_consume_nothing() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        for arguments in [
            json!(null),
            json!([]),
            json!({ "title": "TPS report" }),
            json!({ "workspaceUri": ALICE_WORKSPACE }),
            json!({ "workspaceUri": 7, "title": "TPS report" }),
            json!({ "workspaceUri": ALICE_WORKSPACE, "title": "   " }),
            json!({ "workspaceUri": ALICE_WORKSPACE, "title": "x".repeat(201) }),
        ] {
            h.answer("alice", &arguments, &state, accept("note-7")).await.invalid("arguments_invalid");
        }
        let no_arguments = json!({ "name": "notes_delete", "requestState": state, "inputResponses": accept("note-7") });
        let message = h.request("tools/call", no_arguments, form_capabilities());
        h.send("alice", &message).await.invalid("arguments_invalid");
        h.assert_untouched();
        h.accept_succeeds(&state, "note-7").await;
    }

    #[tokio::test]
    async fn another_tool_name_is_an_unknown_tool() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        for name in [json!("notes_export"), json!("NOTES_DELETE"), json!("")] {
            let params =
                json!({ "name": name, "arguments": lesson_arguments(), "requestState": state, "inputResponses": accept("note-7") });
            let error = h.send("alice", &h.request("tools/call", params, form_capabilities())).await.error();
            assert_eq!((error["code"].as_i64(), error["data"]["reason"].as_str()), (Some(-32602), Some("unknown_tool")), "{error}");
        }
        for name in [json!(null), json!(7)] {
            let params = json!({ "name": name, "arguments": lesson_arguments() });
            h.send("alice", &h.request("tools/call", params, form_capabilities())).await.invalid("arguments_invalid");
        }
        h.assert_untouched();
        h.accept_succeeds(&state, "note-7").await;
    }
}

mod answer_validation {
    use super::*;

    #[tokio::test]
    async fn a_note_that_was_not_offered_is_not_a_candidate() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        // note-99 lies inside alice's workspace but was not offered: the signed set decides, not the workspace.
        for id in ["note-200", "note-300", "note-100", "note-99", "note-7 ", "NOTE-7", ""] {
            let data = h.answer("alice", &lesson_arguments(), &state, accept(id)).await.invalid("not_a_candidate");
            assert_eq!(data["noteId"], id);
        }
        h.assert_untouched();
        h.accept_succeeds(&state, "note-7").await;
    }

    #[tokio::test]
    async fn confirm_false_is_not_consent() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        let answer = json!({ "delete_choice": { "action": "accept", "content": { "note_id": "note-7", "confirm": false } } });
        h.answer("alice", &lesson_arguments(), &state, answer).await.invalid("not_confirmed");
        h.assert_untouched();
        h.accept_succeeds(&state, "note-7").await;
    }

    #[tokio::test]
    async fn malformed_answers_are_invalid_responses_that_consume_nothing() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        let choice = |answer: Value| json!({ "delete_choice": answer });
        for responses in [
            choice(json!({ "action": "accept" })),
            choice(json!({ "action": "accept", "content": null })),
            choice(json!({ "action": "accept", "content": {} })),
            choice(json!({ "action": "accept", "content": "note-7" })),
            choice(json!({ "action": "accept", "content": { "note_id": "note-7" } })),
            choice(json!({ "action": "accept", "content": { "confirm": true } })),
            choice(json!({ "action": "accept", "content": { "note_id": "note-7", "confirm": true, "also": "note-3" } })),
            choice(json!({ "action": "accept", "content": { "note_id": 7, "confirm": true } })),
            choice(json!({ "action": "accept", "content": { "note_id": ["note-7"], "confirm": true } })),
            choice(json!({ "action": "accept", "content": { "note_id": "note-7", "confirm": "true" } })),
            choice(json!({ "action": "accept", "content": { "note_id": "note-7", "confirm": 1 } })),
            choice(json!({ "action": "approve", "content": { "note_id": "note-7", "confirm": true } })),
            choice(json!({ "action": "ACCEPT", "content": { "note_id": "note-7", "confirm": true } })),
            choice(json!({ "content": { "note_id": "note-7", "confirm": true } })),
            choice(json!({ "action": true })),
            choice(json!("accept")),
            choice(json!(null)),
            json!("accept"),
            json!([accept("note-7")]),
        ] {
            h.answer("alice", &lesson_arguments(), &state, responses).await.invalid("response_invalid");
        }
        h.assert_untouched();
        h.accept_succeeds(&state, "note-7").await;
    }

    #[tokio::test]
    async fn extra_input_responses_are_ignored() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        let mut responses = accept("note-7");
        responses["unrelated"] = json!({ "action": "accept", "content": { "note_id": "note-3", "confirm": true } });
        let outcome = h.answer("alice", &lesson_arguments(), &state, responses).await.outcome();
        assert_eq!(outcome, json!({ "deleted": true, "noteId": "note-7", "outcome": "deleted" }));
        assert_eq!(h.note_ids(), demo_ids_without(&["note-7"]));
    }
}

mod continuation {
    use super::*;

    #[tokio::test]
    async fn a_request_state_without_input_responses_is_unpaired() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        let extra = json!({ "requestState": state });
        h.delete_call(&h.server, "alice", &lesson_arguments(), extra, form_capabilities()).await.invalid("continuation_unpaired");
        h.assert_untouched();
        h.accept_succeeds(&state, "note-7").await;
    }

    #[tokio::test]
    async fn input_responses_without_a_request_state_are_unpaired() {
        let h = Harness::new();
        let extra = json!({ "inputResponses": accept("note-7") });
        h.delete_call(&h.server, "alice", &lesson_arguments(), extra, form_capabilities()).await.invalid("continuation_unpaired");
        let extra = json!({ "inputResponses": {} });
        h.delete_call(&h.server, "alice", &lesson_arguments(), extra, form_capabilities()).await.invalid("continuation_unpaired");
        h.assert_untouched();
    }

    #[tokio::test]
    async fn input_responses_without_the_needed_answer_ask_again_with_the_same_state() {
        let h = Harness::new();
        let first = h.round_one_result("alice", &lesson_arguments()).await;
        let state = first["requestState"].as_str().unwrap().to_string();
        for responses in [json!({}), json!({ "other_question": { "action": "accept", "content": {} } })] {
            let again = h.answer("alice", &lesson_arguments(), &state, responses).await.result();
            assert_eq!(again["resultType"], "input_required");
            assert_eq!(again["requestState"], state.as_str(), "the same confirmation, not a new one");
            assert_eq!(again["inputRequests"], first["inputRequests"], "the same question");
        }
        h.assert_untouched();
        h.accept_succeeds(&state, "note-7").await;
    }

    #[tokio::test]
    async fn asking_again_still_verifies_the_state_first() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        let forged = replace_char(&state, 12, other_base64_char(state.chars().nth(12).unwrap()));
        h.answer("alice", &lesson_arguments(), &forged, json!({})).await.invalid("state_signature");
        h.answer("bob", &lesson_arguments(), &state, json!({})).await.invalid("state_mismatch");
        h.assert_untouched();
    }

    #[tokio::test]
    async fn asking_again_never_shows_where_a_candidate_moved_outside_the_workspace() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        assert!(h.notes.move_to("note-7", "file:///Users/bob/Notes/stolen-2024.md"));
        assert!(h.notes.rename("note-7", "Bob's secret plans"));
        assert!(h.notes.remove("note-14"));
        let again = h.answer("alice", &lesson_arguments(), &state, json!({})).await.result();
        let message = again["inputRequests"]["delete_choice"]["params"]["message"].as_str().unwrap();
        for leaked in ["/bob/", "stolen", "secret"] {
            assert!(!message.contains(leaked), "the re-asked form must not reveal {leaked:?}: {message}");
        }
        assert!(message.lines().any(|l| l == "note-3: TPS report 2023 (file:///Users/alice/Documents/Notes/tps-2023.md)"), "{message}");
        assert!(message.lines().any(|l| l == "note-7: (no longer in this workspace)"), "{message}");
        assert!(message.lines().any(|l| l == "note-14: (no longer in this workspace)"), "{message}");
    }
}

mod capabilities {
    use super::*;

    async fn round_one_with(h: &Harness, capabilities: Value) -> Exchange {
        h.delete_call(&h.server, "alice", &lesson_arguments(), json!({}), capabilities).await
    }

    fn assert_missing_form_capability(exchange: &Exchange) {
        let error = exchange.error();
        assert_eq!(error["code"], -32021);
        assert_eq!(error["data"], json!({ "requiredCapabilities": { "elicitation": { "form": {} } } }), "data is exact");
        assert_eq!(exchange.reply.http_status, 400);
    }

    #[tokio::test]
    async fn a_client_without_elicitation_is_told_exactly_what_is_missing() {
        let h = Harness::new();
        for capabilities in [
            json!({}),
            json!({ "elicitation": { "url": {} } }),
            json!({ "elicitation": true }),
            json!({ "elicitation": { "form": true } }),
            json!({ "sampling": {}, "roots": {} }),
        ] {
            assert_missing_form_capability(&round_one_with(&h, capabilities).await);
        }
        assert_eq!(h.nonces.issued(), 0, "no state was minted");
        h.assert_untouched();
    }

    #[tokio::test]
    async fn empty_elicitation_and_explicit_form_both_declare_form_support() {
        let h = Harness::new();
        for capabilities in
            [json!({ "elicitation": {} }), json!({ "elicitation": { "form": {} } }), json!({ "elicitation": { "form": {}, "url": {} } })]
        {
            assert_eq!(round_one_with(&h, capabilities).await.result()["resultType"], "input_required");
        }
    }

    #[tokio::test]
    async fn capabilities_declared_on_an_earlier_request_count_for_nothing() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        assert_missing_form_capability(&round_one_with(&h, json!({})).await);
        let extra = json!({ "requestState": state, "inputResponses": {} });
        let asked_again = h.delete_call(&h.server, "alice", &lesson_arguments(), extra, json!({ "elicitation": { "url": {} } })).await;
        assert_missing_form_capability(&asked_again);
        h.assert_untouched();
        h.accept_succeeds(&state, "note-7").await;
    }

    #[tokio::test]
    async fn argument_shape_is_checked_before_capabilities_and_capabilities_before_authorization() {
        let h = Harness::new();
        let mut extra_argument = lesson_arguments();
        extra_argument["force"] = json!(true);
        h.delete_call(&h.server, "alice", &extra_argument, json!({}), json!({})).await.invalid("arguments_invalid");
        let bobs = delete_arguments(BOB_WORKSPACE, "TPS report");
        assert_missing_form_capability(&h.delete_call(&h.server, "alice", &bobs, json!({}), json!({ "elicitation": { "url": {} } })).await);
        h.delete_call(&h.server, "alice", &bobs, json!({}), form_capabilities()).await.invalid("workspace_unauthorized");
    }
}

mod workspaces {
    use super::*;

    async fn round_one_refused(h: &Harness, principal: &str, workspace: &str, reason: &str) {
        let arguments = delete_arguments(workspace, "TPS report");
        let exchange = h.delete_call(&h.server, principal, &arguments, json!({}), form_capabilities()).await;
        let error = exchange.error();
        assert_eq!((error["code"].as_i64(), error["data"]["reason"].as_str()), (Some(-32602), Some(reason)), "{workspace}: {error}");
    }

    #[tokio::test]
    async fn workspaces_outside_alices_grant_are_unauthorized() {
        let h = Harness::new();
        for workspace in [
            "file:///Users/alice/Documents/Notes-evil",
            "file:///Users/alice/Documents/NotesX",
            "file:///Users/alice/Documents/notes",
            "file:///Users/alice/Documents",
            "file:///",
            "file:///Users/alice/Documents/Notes/%2e%2e/Notes-evil",
            "file:///Users/alice/Documents/Notes/%2E%2E/%2E%2E/%2E%2E/bob/Notes",
            "file:///Users/alice/Documents/Notes/.%2e/Notes-evil",
            "file:///Users/alice/Documents/Notes%2f..%2f..%2f..%2fbob%2fNotes",
            "file:///Users/alice/Documents/Notes/../Notes-evil",
            "file:///Users/alice/Documents/Notes/../../../bob/Notes",
            "file:///Users/bob/Notes",
            "file://evil.example/Users/alice/Documents/Notes",
        ] {
            round_one_refused(&h, "alice", workspace, "workspace_unauthorized").await;
        }
        round_one_refused(&h, "mallory", ALICE_WORKSPACE, "workspace_unauthorized").await;
        round_one_refused(&h, "bob", ALICE_WORKSPACE, "workspace_unauthorized").await;
        assert_eq!(h.nonces.issued(), 0, "no state was minted");
        h.assert_untouched();
    }

    #[tokio::test]
    async fn unacceptable_workspace_uris_are_invalid() {
        let h = Harness::new();
        for workspace in [
            "file:///Users/alice/Documents/Notes/%252e%252e/Notes-evil",
            "file:///Users/alice/Documents/Notes/%25252e%25252e",
            "file:///Users/alice/Documents/Notes/../../../../..",
            "file:///Users/alice/Documents/Notes?title=x",
            "file:///Users/alice/Documents/Notes#top",
            "https://example.com/Users/alice/Documents/Notes",
            "/Users/alice/Documents/Notes",
            "Users/alice/Documents/Notes",
            "file:///Users/alice/Documents/Notes/..%5c..%5cbob",
            "file:///Users/alice/Documents/Notes/%00",
            "file:///Users/alice/Documents/Notes/%ff",
            "",
        ] {
            round_one_refused(&h, "alice", workspace, "uri_invalid").await;
        }
        h.assert_untouched();
    }

    #[tokio::test]
    async fn equivalent_spellings_of_the_granted_workspace_are_authorized() {
        let h = Harness::new();
        for workspace in [
            "FILE://LOCALHOST/Users/alice/Documents/Notes",
            "file:///Users/alice/Documents/Notes/",
            "file:///Users/alice/Documents/Notes-evil/%2e%2e/Notes",
            "file:///Users/alice//Documents/./Notes",
        ] {
            let result = h.round_one_result("alice", &delete_arguments(workspace, "TPS report")).await;
            let ids = &result["inputRequests"]["delete_choice"]["params"]["requestedSchema"]["properties"]["note_id"]["enum"];
            assert_eq!(ids, &json!(["note-3", "note-7", "note-14"]), "{workspace}");
        }
    }

    #[tokio::test]
    async fn no_match_is_a_complete_error_result_that_never_names_notes_outside_the_workspace() {
        let h = Harness::new();
        for (title, hidden) in
            [("evil twin", ["note-200", "Notes-evil"]), ("TPS report bob", ["note-300", "/bob/"]), ("outside root", ["note-100", "/tmp"])]
        {
            let result =
                h.delete_call(&h.server, "alice", &delete_arguments(ALICE_WORKSPACE, title), json!({}), form_capabilities()).await.result();
            assert_eq!(result["resultType"], "complete");
            assert_eq!(result["isError"], true);
            assert!(result.get("requestState").is_none() && result.get("structuredContent").is_none(), "{result}");
            let text = text_of(&result);
            for hidden in hidden {
                assert!(!text.contains(hidden), "{text:?} must not mention {hidden:?}");
            }
            assert!(text.contains("Nothing was deleted"), "{text}");
        }
        h.assert_untouched();
    }

    #[tokio::test]
    async fn a_title_that_exists_elsewhere_reads_exactly_like_one_that_exists_nowhere() {
        let h = Harness::new();
        let outcome = |title: &'static str| {
            let h = &h;
            async move {
                let result = h
                    .delete_call(&h.server, "alice", &delete_arguments(ALICE_WORKSPACE, title), json!({}), form_capabilities())
                    .await
                    .result();
                serde_json::to_string(&result).unwrap().replace(title, "<title>")
            }
        };
        assert_eq!(outcome("TPS report evil twin").await, outcome("TPS report mars base").await);
    }
}

mod live_notes {
    use super::*;

    #[tokio::test]
    async fn a_note_deleted_by_an_admin_after_round_one_is_gone_and_consumes_nothing() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        assert!(h.notes.remove("note-7"));
        let data = h.answer("alice", &lesson_arguments(), &state, accept("note-7")).await.invalid("note_gone");
        assert_eq!(data["noteId"], "note-7");
        assert!(h.replay.is_empty(), "nothing consumed");
        h.accept_succeeds(&state, "note-3").await;
    }

    #[tokio::test]
    async fn a_note_moved_out_of_the_workspace_after_round_one_is_refused_and_consumes_nothing() {
        let h = Harness::new();
        for destination in [
            "file:///tmp/tps-2024.md",
            "file:///Users/alice/Documents/Notes-evil/tps-2024.md",
            "file:///Users/alice/Documents/Notes/%2e%2e/Notes-evil/tps-2024.md",
            "file:///Users/bob/Notes/tps-2024.md",
            "file://evil.example/Users/alice/Documents/Notes/tps-2024.md",
            "file:///Users/alice/Documents/Notes/%252e%252e/tps-2024.md",
        ] {
            let state = h.lesson_state().await;
            assert!(h.notes.move_to("note-7", destination));
            let data = h.answer("alice", &lesson_arguments(), &state, accept("note-7")).await.invalid("note_outside_workspace");
            assert_eq!(data["noteId"], "note-7");
            assert_eq!(h.note("note-7").unwrap().uri, destination, "not deleted");
            assert_eq!(h.replay.record(&claims_of(&state).nonce), None, "nothing consumed after moving to {destination}");
            assert!(h.notes.move_to("note-7", "file:///Users/alice/Documents/Notes/tps-2024.md"));
            h.accept_succeeds(&state, "note-7").await;
            h.notes.upsert(Note {
                id: "note-7".into(),
                title: "TPS report 2024".into(),
                uri: "file:///Users/alice/Documents/Notes/tps-2024.md".into(),
                body: String::new(),
                revision: String::new(),
            });
        }
    }

    #[tokio::test]
    async fn a_note_moved_within_the_workspace_can_still_be_deleted() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        assert!(h.notes.move_to("note-7", "file:///Users/alice/Documents/Notes/archive/2024/tps-2024.md"));
        h.accept_succeeds(&state, "note-7").await;
    }

    #[tokio::test]
    async fn a_workspace_grant_revoked_between_rounds_stops_the_delete_and_consumes_nothing() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        let mut revoked = demo_config();
        std::sync::Arc::make_mut(&mut revoked.authorizations).revoke("alice", &FileUri::parse(ALICE_WORKSPACE).unwrap());
        let revoked_instance = h.instance(revoked);
        h.answer_on(&revoked_instance, "alice", &lesson_arguments(), &state, accept("note-7")).await.invalid("workspace_unauthorized");
        h.answer_on(&revoked_instance, "alice", &lesson_arguments(), &state, json!({})).await.invalid("workspace_unauthorized");
        h.assert_untouched();
        // Granted again, the same confirmation completes.
        h.accept_succeeds(&state, "note-7").await;
    }
}

mod replay_store_bounds {
    use super::*;

    const GRACE_MS: u64 = 1_000;

    /// Runs an accept until the store has claimed the nonce and the delete is in flight, then drops it: the
    /// in-process model of an instance that crashed between claiming and deleting.
    async fn crash_between_claim_and_delete(h: &Harness, state: &str, note_id: &str) {
        h.note_store.set_behaviour(DeleteBehaviour::Hang);
        let arguments = lesson_arguments();
        tokio::select! {
            biased;
            _ = h.answer("alice", &arguments, state, accept(note_id)) => panic!("a delete that never finishes cannot answer"),
            _ = std::future::ready(()) => {}
        }
        h.note_store.set_behaviour(DeleteBehaviour::Immediate);
    }

    #[tokio::test]
    async fn a_full_replay_store_fails_closed_and_recovers_after_expiry_and_grace() {
        let h = Harness::with_limits(ReplayLimits { capacity: 1, principal_capacity: 1, retention_grace_ms: GRACE_MS });
        let first = h.lesson_state().await;
        assert_eq!(h.answer("alice", &lesson_arguments(), &first, decline()).await.outcome()["outcome"], "declined");

        h.clock.set(START_MS + 100_000);
        let second = h.lesson_state().await;
        for responses in [accept("note-7"), decline()] {
            let exchange = h.answer("alice", &lesson_arguments(), &second, responses).await;
            exchange.refused(-32603, "replay_store_full");
            assert_eq!(exchange.reply.http_status, 200);
        }
        assert_eq!(h.note_ids(), DEMO_NOTE_IDS, "nothing deleted while full");
        assert_eq!(h.replay.len(), 1);
        // Cancel needs no room: it consumes nothing.
        h.answer("alice", &lesson_arguments(), &second, cancel()).await.outcome();

        // The first nonce expired at START + TTL and is kept one grace period longer, never evicted early.
        h.clock.set(START_MS + STATE_TTL_MS + GRACE_MS - 1);
        h.answer("alice", &lesson_arguments(), &second, accept("note-7")).await.refused(-32603, "replay_store_full");
        h.clock.set(START_MS + STATE_TTL_MS + GRACE_MS);
        h.accept_succeeds(&second, "note-7").await;
        h.answer("alice", &lesson_arguments(), &first, accept("note-3")).await.invalid("state_expired");
    }

    #[tokio::test]
    async fn an_instance_crashing_between_claim_and_delete_leaves_the_confirmation_spent_not_reusable() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        crash_between_claim_and_delete(&h, &state, "note-7").await;
        // The stranded claim is still pending: "in progress" (it ends when its retention does), never a second delete.
        for id in ["note-7", "note-3"] {
            h.answer("alice", &lesson_arguments(), &state, accept(id)).await.refused(-32603, "claim_in_progress");
        }
        assert_eq!(h.note_ids(), DEMO_NOTE_IDS, "at most once: the retry may not delete a second note");
    }

    #[tokio::test]
    async fn a_claim_stranded_by_a_crash_does_not_keep_the_replay_store_full_forever() {
        let h = Harness::with_limits(ReplayLimits { capacity: 2, principal_capacity: 2, retention_grace_ms: GRACE_MS });
        let stranded = h.lesson_state().await;
        crash_between_claim_and_delete(&h, &stranded, "note-7").await;
        h.clock.set(START_MS + 1_000);
        let declined = h.lesson_state().await;
        h.answer("alice", &lesson_arguments(), &declined, decline()).await.outcome();
        assert_eq!(h.replay.len(), 2);

        // Both confirmations have expired (and their grace passed): neither can be presented again anywhere,
        // so the store must make room instead of failing closed forever.
        h.clock.set(START_MS + 1_000 + STATE_TTL_MS + GRACE_MS);
        let fresh = h.lesson_state().await;
        h.accept_succeeds(&fresh, "note-14").await;
        assert_eq!(h.replay.len(), 1, "the stranded and the declined nonce were both pruned");
        h.answer("alice", &lesson_arguments(), &stranded, accept("note-7")).await.invalid("state_expired");
    }
}

mod many_matches {
    use super::*;

    fn add_matching_notes(h: &Harness, count: usize) {
        for n in 0..count {
            h.notes.upsert(Note {
                id: format!("bulk-{n}"),
                title: format!("Bulk memo {n}"),
                uri: format!("{ALICE_WORKSPACE}/bulk/{n}.md"),
                body: String::new(),
                revision: String::new(),
            });
        }
    }

    #[tokio::test]
    async fn as_many_matches_as_one_form_may_offer_are_offered_and_the_state_still_opens() {
        let h = Harness::new();
        add_matching_notes(&h, CANDIDATES_MAX);
        let arguments = delete_arguments(ALICE_WORKSPACE, "bulk memo");
        let state = h.round_one("alice", &arguments).await;
        assert_eq!(claims_of(&state).candidates.len(), CANDIDATES_MAX);
        let last = format!("bulk-{}", CANDIDATES_MAX - 1);
        let outcome = h.answer("alice", &arguments, &state, accept(&last)).await.outcome();
        assert_eq!(outcome["noteId"], last.as_str());
    }

    #[tokio::test]
    async fn a_title_matching_more_notes_than_one_form_may_offer_asks_for_a_narrower_title() {
        let h = Harness::new();
        for count in [CANDIDATES_MAX + 1, 600] {
            add_matching_notes(&h, count);
            let arguments = delete_arguments(ALICE_WORKSPACE, "bulk memo");
            let result = h.delete_call(&h.server, "alice", &arguments, json!({}), form_capabilities()).await.result();
            assert_eq!(result["resultType"], "complete", "never a form the server could not accept back: {result}");
            assert_eq!(result["isError"], true);
            assert!(result.get("requestState").is_none());
            assert!(text_of(&result).contains("more specific title"), "{result}");
        }
        assert_eq!(h.nonces.issued(), 0);
    }

    #[tokio::test]
    async fn a_match_too_long_to_seal_is_refused_instead_of_minting_a_state_that_cannot_open() {
        let h = Harness::new();
        h.notes.upsert(Note {
            id: format!("long-{}", "x".repeat(STATE_CHARS_MAX)),
            title: "Long id memo".into(),
            uri: format!("{ALICE_WORKSPACE}/long.md"),
            body: String::new(),
            revision: String::new(),
        });
        let result = h
            .delete_call(&h.server, "alice", &delete_arguments(ALICE_WORKSPACE, "long id memo"), json!({}), form_capabilities())
            .await
            .result();
        assert_eq!(result["resultType"], "complete", "{result}");
        assert_eq!(result["isError"], true);
    }
}

mod resources {
    use super::*;

    async fn read(h: &Harness, principal: &str, uri: &str) -> Exchange {
        h.call(principal, "resources/read", json!({ "uri": uri })).await
    }

    #[tokio::test]
    async fn resources_list_shows_only_the_callers_notes_as_private() {
        let h = Harness::new();
        for (principal, expected) in
            [("alice", vec!["note-3", "note-7", "note-14", "note-99"]), ("bob", vec!["note-300"]), ("mallory", vec![])]
        {
            let result = h.call(principal, "resources/list", json!({})).await.result();
            assert_eq!(result["resultType"], "complete");
            assert_eq!(result["cacheScope"], "private", "per-principal lists are never public");
            assert!(result["ttlMs"].as_u64().is_some());
            let names: Vec<&str> = result["resources"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
            assert_eq!(names, expected, "{principal}");
        }
        let result = h.call("alice", "resources/list", json!({})).await.result();
        assert_eq!(
            result["resources"][0],
            json!({ "uri": "file:///Users/alice/Documents/Notes/tps-2023.md", "name": "note-3", "title": "TPS report 2023", "mimeType": "text/markdown" })
        );
    }

    #[tokio::test]
    async fn reading_your_own_note_returns_its_body_privately() {
        let h = Harness::new();
        for uri in [
            "file:///Users/alice/Documents/Notes/tps-2023.md",
            "file://localhost/Users/alice/Documents/Notes/archive/../tps-2023.md",
            "file:///Users/alice/Documents/Notes-evil/%2e%2e/Notes/tps-2023.md",
        ] {
            let result = read(&h, "alice", uri).await.result();
            assert_eq!(result["cacheScope"], "private");
            assert_eq!(
                result["contents"],
                json!([{
                    "uri": "file:///Users/alice/Documents/Notes/tps-2023.md",
                    "mimeType": "text/markdown",
                    "text": "# TPS report 2023\n\nCover sheet attached. Filed in Q4.\n",
                }]),
                "{uri}"
            );
        }
    }

    #[tokio::test]
    async fn notes_you_may_not_read_are_indistinguishable_from_missing_ones() {
        let h = Harness::new();
        let mut errors = Vec::new();
        for (principal, uri) in [
            ("alice", "file:///Users/bob/Notes/tps.md"),
            ("alice", "file:///Users/alice/Documents/Notes-evil/tps.md"),
            ("alice", "file:///Users/alice/Documents/Notes/%2e%2e/Notes-evil/tps.md"),
            ("alice", "file:///Users/alice/Documents/Notes/../../../../tmp/outside.md"),
            ("alice", "file:///tmp/outside.md"),
            ("alice", "file:///Users/alice/Documents/Notes/missing.md"),
            ("alice", "file:///Users/alice/Documents/Notes"),
            ("bob", "file:///Users/alice/Documents/Notes/tps-2023.md"),
            ("mallory", "file:///Users/alice/Documents/Notes/tps-2023.md"),
        ] {
            let exchange = read(&h, principal, uri).await;
            let mut error = exchange.error();
            assert_eq!(error["data"]["reason"], "resource_not_found", "{principal} {uri}: {error}");
            assert_eq!(error["data"]["uri"], uri, "only the caller's own input is echoed");
            error["data"].as_object_mut().unwrap().remove("uri");
            errors.push(error);
        }
        assert!(errors.windows(2).all(|pair| pair[0] == pair[1]), "every refusal is the same bytes: {errors:?}");
        assert_eq!(errors[0], json!({ "code": -32602, "message": "Resource not found", "data": { "reason": "resource_not_found" } }));
    }

    #[tokio::test]
    async fn hostile_resource_uris_are_invalid() {
        let h = Harness::new();
        for uri in [
            "file:///Users/alice/Documents/Notes/tps-2023.md?raw=1",
            "file:///Users/alice/Documents/Notes/tps-2023.md#x",
            "https://example.com/Users/alice/Documents/Notes/tps-2023.md",
            "file:///Users/alice/Documents/Notes/%252e%252e/Notes-evil/tps.md",
            "file:///../etc/passwd",
            "file:///Users/alice/Documents/Notes/..%5ctps-2023.md",
            "file:///Users/alice/Documents/Notes/%00.md",
            "",
        ] {
            read(&h, "alice", uri).await.invalid("uri_invalid");
        }
        for params in [json!({}), json!({ "uri": 7 }), json!({ "uri": null })] {
            h.call("alice", "resources/read", params).await.invalid("arguments_invalid");
        }
    }

    #[tokio::test]
    async fn reading_and_listing_never_change_anything() {
        let h = Harness::new();
        h.call("alice", "resources/list", json!({})).await.result();
        read(&h, "alice", "file:///Users/alice/Documents/Notes/tps-2024.md").await.result();
        h.assert_untouched();
    }
}

mod envelope {
    use super::*;

    /// Sends raw bytes and returns (id, code, reason, http status) of the error.
    async fn refused_bytes(h: &Harness, bytes: &[u8]) -> (Value, i64, Option<String>, u16) {
        let reply = h.send_bytes("alice", bytes).await;
        let response = reply.response.clone().expect("an error response");
        assert_valid_response(&response, reply.http_status);
        let error = &response["error"];
        (response["id"].clone(), error["code"].as_i64().unwrap(), error["data"]["reason"].as_str().map(String::from), reply.http_status)
    }

    #[tokio::test]
    async fn ids_that_are_not_integers_or_strings_are_invalid_requests_answered_with_a_null_id() {
        let h = Harness::new();
        for id in ["null", "1.5", "1.0", "1e3", "true", "false", "{\"a\":1}", "[1]", "18446744073709551616"] {
            let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list","params":{{"_meta":{}}}}}"#, meta(json!({})));
            assert_eq!(refused_bytes(&h, body.as_bytes()).await, (Value::Null, -32600, None, 400), "id {id}");
        }
        for id in [json!(0), json!(-7), json!(i64::MAX), json!(""), json!("a-b")] {
            let message = json!({ "jsonrpc": "2.0", "id": id, "method": "tools/list", "params": { "_meta": meta(json!({})) } });
            h.send("alice", &message).await.result();
        }
    }

    #[tokio::test]
    async fn batches_are_invalid_requests_and_nothing_in_them_runs() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        let accept_message = h.request(
            "tools/call",
            json!({ "name": "notes_delete", "arguments": lesson_arguments(), "requestState": state, "inputResponses": accept("note-7") }),
            form_capabilities(),
        );
        for body in [json!([accept_message.clone()]), json!([accept_message.clone(), accept_message.clone()]), json!([])] {
            let bytes = serde_json::to_vec(&body).unwrap();
            assert_eq!(refused_bytes(&h, &bytes).await, (Value::Null, -32600, None, 400));
        }
        h.assert_untouched();
    }

    #[tokio::test]
    async fn unparseable_bytes_are_parse_errors() {
        let h = Harness::new();
        for body in [&b""[..], b"{", b"{\"jsonrpc\":\"2.0\",", b"\xff\xfe", b"nul", b"{\"id\":1,}", b"\"\\ud800\""] {
            let (id, code, _, status) = refused_bytes(&h, body).await;
            assert_eq!((id, code, status), (Value::Null, -32700, 400), "{body:?}");
        }
        for body in [&b"42"[..], b"\"tools/list\"", b"null", b"true"] {
            assert_eq!(refused_bytes(&h, body).await, (Value::Null, -32600, None, 400), "{body:?}");
        }
    }

    #[tokio::test]
    async fn two_hundred_thousand_nested_brackets_are_a_parse_error_not_a_crash() {
        let h = Harness::new();
        let brackets = format!("{}{}", "[".repeat(200_000), "]".repeat(200_000));
        assert_eq!(refused_bytes(&h, brackets.as_bytes()).await, (Value::Null, -32700, None, 400));
        let inside_params = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{"_meta":{},"deep":{}{}}}}}"#,
            meta(json!({})),
            "{\"a\":".repeat(100_000),
            "}".repeat(100_000)
        );
        assert_eq!(refused_bytes(&h, inside_params.as_bytes()).await, (Value::Null, -32700, None, 400));
    }

    #[tokio::test]
    async fn a_multi_megabyte_message_is_refused_before_parsing_and_runs_nothing() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        let mut message = h.request(
            "tools/call",
            json!({ "name": "notes_delete", "arguments": lesson_arguments(), "requestState": state, "inputResponses": accept("note-7") }),
            form_capabilities(),
        );
        message["params"]["_meta"]["com.example/padding"] = json!("x".repeat(3 * 1024 * 1024));
        let bytes = serde_json::to_vec(&message).unwrap();
        assert_eq!(refused_bytes(&h, &bytes).await, (Value::Null, -32600, Some("payload_too_large".into()), 413));
        h.assert_untouched();
        h.accept_succeeds(&state, "note-7").await;
    }

    #[tokio::test]
    async fn a_message_of_exactly_the_size_limit_is_accepted_and_one_byte_more_is_not() {
        let h = Harness::new();
        let sized = |total: usize| {
            let mut message = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": { "_meta": meta(json!({})) } });
            message["params"]["_meta"]["com.example/padding"] = json!("");
            let overhead = serde_json::to_vec(&message).unwrap().len();
            message["params"]["_meta"]["com.example/padding"] = json!("p".repeat(total - overhead));
            let bytes = serde_json::to_vec(&message).unwrap();
            assert_eq!(bytes.len(), total);
            bytes
        };
        let reply = h.send_bytes("alice", &sized(MESSAGE_BYTES_MAX)).await;
        Exchange { id: json!(1), reply }.result();
        assert_eq!(refused_bytes(&h, &sized(MESSAGE_BYTES_MAX + 1)).await, (Value::Null, -32600, Some("payload_too_large".into()), 413));
    }

    #[tokio::test]
    async fn positional_params_are_invalid_params_with_status_400() {
        let h = Harness::new();
        let body = br#"{"jsonrpc":"2.0","id":5,"method":"tools/list","params":[]}"#;
        assert_eq!(refused_bytes(&h, body).await, (json!(5), -32602, Some("meta_invalid".into()), 400));
        let body = br#"{"jsonrpc":"2.0","id":"x","method":"tools/call","params":["notes_delete"]}"#;
        assert_eq!(refused_bytes(&h, body).await, (json!("x"), -32602, Some("meta_invalid".into()), 400));
    }

    #[tokio::test]
    async fn envelope_violations_keep_the_id_when_it_is_readable() {
        let h = Harness::new();
        for body in [
            &br#"{"jsonrpc":"1.0","id":3,"method":"tools/list","params":{}}"#[..],
            br#"{"id":3,"method":"tools/list","params":{}}"#,
            br#"{"jsonrpc":"2.0","id":3,"method":7}"#,
            br#"{"jsonrpc":"2.0","id":3,"method":""}"#,
            br#"{"jsonrpc":"2.0","id":3,"result":{}}"#,
        ] {
            assert_eq!(refused_bytes(&h, body).await, (json!(3), -32600, None, 400), "{}", String::from_utf8_lossy(body));
        }
    }

    #[tokio::test]
    async fn a_tools_call_sent_as_a_notification_is_neither_answered_nor_executed() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        let mut message = h.request(
            "tools/call",
            json!({ "name": "notes_delete", "arguments": lesson_arguments(), "requestState": state, "inputResponses": accept("note-7") }),
            form_capabilities(),
        );
        message.as_object_mut().unwrap().remove("id");
        let reply = h.send_bytes("alice", &serde_json::to_vec(&message).unwrap()).await;
        assert_eq!(reply, Reply { response: None, http_status: 202 });
        h.assert_untouched();

        let issued = h.nonces.issued();
        let mut round_one =
            h.request("tools/call", json!({ "name": "notes_delete", "arguments": lesson_arguments() }), form_capabilities());
        round_one.as_object_mut().unwrap().remove("id");
        assert_eq!(h.send_bytes("alice", &serde_json::to_vec(&round_one).unwrap()).await, Reply { response: None, http_status: 202 });
        assert_eq!(h.nonces.issued(), issued, "round 1 as a notification mints no state");

        for notification in [
            json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }),
            json!({ "jsonrpc": "2.0", "method": "no/such/method", "params": {} }),
        ] {
            let reply = h.send_bytes("alice", &serde_json::to_vec(&notification).unwrap()).await;
            assert_eq!(reply, Reply { response: None, http_status: 202 });
        }
        h.accept_succeeds(&state, "note-7").await;
    }

    #[tokio::test]
    async fn unknown_and_removed_methods_are_method_not_found_with_status_404() {
        let h = Harness::new();
        for method in [
            "no/such/method",
            "initialize",
            "ping",
            "logging/setLevel",
            "resources/subscribe",
            "resources/unsubscribe",
            "roots/list",
            "prompts/get",
            "TOOLS/LIST",
        ] {
            let exchange = h.call("alice", method, json!({})).await;
            let error = exchange.error();
            assert_eq!(error["code"], -32601, "{method}: {error}");
            assert_eq!(exchange.reply.http_status, 404);
            assert!(error["message"].as_str().unwrap().contains(method), "{error}");
        }
    }

    #[tokio::test]
    async fn missing_or_mistyped_meta_is_invalid_params_with_status_400() {
        let h = Harness::new();
        let version = json!(VERSION);
        for (params, field) in [
            (json!({}), None),
            (json!({ "_meta": null }), None),
            (json!({ "_meta": "2026-07-28" }), None),
            (json!({ "_meta": {} }), Some(KEY_PROTOCOL_VERSION)),
            (json!({ "_meta": { KEY_CLIENT_CAPABILITIES: {} } }), Some(KEY_PROTOCOL_VERSION)),
            (json!({ "_meta": { KEY_PROTOCOL_VERSION: 20260728, KEY_CLIENT_CAPABILITIES: {} } }), Some(KEY_PROTOCOL_VERSION)),
            (json!({ "_meta": { KEY_PROTOCOL_VERSION: version } }), Some(KEY_CLIENT_CAPABILITIES)),
            (json!({ "_meta": { KEY_PROTOCOL_VERSION: version, KEY_CLIENT_CAPABILITIES: [] } }), Some(KEY_CLIENT_CAPABILITIES)),
            (
                json!({ "_meta": { KEY_PROTOCOL_VERSION: version, KEY_CLIENT_CAPABILITIES: {}, "io.modelcontextprotocol/clientInfo": "me" } }),
                Some("io.modelcontextprotocol/clientInfo"),
            ),
        ] {
            for method in ["tools/list", "tools/call", "no/such/method"] {
                let message = json!({ "jsonrpc": "2.0", "id": 11, "method": method, "params": params });
                let exchange = h.send("alice", &message).await;
                let data = exchange.refused(-32602, "meta_invalid");
                assert_eq!(exchange.reply.http_status, 400, "{params}");
                assert_eq!(data.get("field").and_then(Value::as_str), field, "{params}");
            }
        }
        let no_params = json!({ "jsonrpc": "2.0", "id": 12, "method": "server/discover" });
        let exchange = h.send("alice", &no_params).await;
        exchange.refused(-32602, "meta_invalid");
        assert_eq!(exchange.reply.http_status, 400);
    }

    #[tokio::test]
    async fn client_info_is_optional() {
        let h = Harness::new();
        let message = json!({ "jsonrpc": "2.0", "id": 1, "method": "server/discover",
            "params": { "_meta": { KEY_PROTOCOL_VERSION: VERSION, KEY_CLIENT_CAPABILITIES: {} } } });
        h.send("alice", &message).await.result();
    }

    #[tokio::test]
    async fn an_unsupported_version_is_32022_with_exact_data_before_the_method_is_looked_up() {
        let h = Harness::new();
        for requested in ["2025-11-25", "1900-01-01", "", "2026-07-28 "] {
            for method in ["tools/list", "no/such/method"] {
                let message = json!({ "jsonrpc": "2.0", "id": "v", "method": method,
                    "params": { "_meta": { KEY_PROTOCOL_VERSION: requested, KEY_CLIENT_CAPABILITIES: {} } } });
                let exchange = h.send("alice", &message).await;
                let error = exchange.error();
                assert_eq!(
                    error,
                    json!({ "code": -32022, "message": "Unsupported protocol version", "data": { "supported": ["2026-07-28"], "requested": requested } })
                );
                assert_eq!(exchange.reply.http_status, 400);
            }
        }
    }
}

mod routing_headers {
    use super::*;

    fn headers(version: &str, method: &str, name: Option<&str>) -> RoutingHeaders {
        RoutingHeaders { protocol_version: Some(version.into()), method: Some(method.into()), name: name.map(String::from) }
    }

    #[tokio::test]
    async fn agreeing_headers_let_the_confirmation_through() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        let message = h.request(
            "tools/call",
            json!({ "name": "notes_delete", "arguments": lesson_arguments(), "requestState": state, "inputResponses": accept("note-7") }),
            form_capabilities(),
        );
        let agreeing = headers(VERSION, "tools/call", Some("notes_delete"));
        let outcome = h.send_with_headers(&h.server, "alice", &message, Some(&agreeing)).await.outcome();
        assert_eq!(outcome["noteId"], "note-7");
    }

    #[tokio::test]
    async fn disagreeing_headers_are_32020_and_run_nothing() {
        let h = Harness::new();
        let state = h.lesson_state().await;
        let message = h.request(
            "tools/call",
            json!({ "name": "notes_delete", "arguments": lesson_arguments(), "requestState": state, "inputResponses": accept("note-7") }),
            form_capabilities(),
        );
        for disagreeing in [
            headers(VERSION, "tools/call", Some("notes_export")),
            headers(VERSION, "tools/list", Some("notes_delete")),
            headers("2025-11-25", "tools/call", Some("notes_delete")),
            headers(VERSION, "tools/call", None),
            RoutingHeaders::default(),
        ] {
            let exchange = h.send_with_headers(&h.server, "alice", &message, Some(&disagreeing)).await;
            assert_eq!(exchange.error()["code"], -32020, "{disagreeing:?}");
            assert_eq!(exchange.reply.http_status, 400);
        }
        h.assert_untouched();
        h.accept_succeeds(&state, "note-7").await;
    }

    #[tokio::test]
    async fn a_header_body_mismatch_is_reported_before_an_unsupported_version() {
        let h = Harness::new();
        let message = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list",
            "params": { "_meta": { KEY_PROTOCOL_VERSION: "v999.0.0", KEY_CLIENT_CAPABILITIES: {} } } });
        let exchange = h.send_with_headers(&h.server, "alice", &message, Some(&headers(VERSION, "tools/list", None))).await;
        assert_eq!(exchange.error()["code"], -32020);
    }
}

mod discovery {
    use super::*;

    #[tokio::test]
    async fn discover_names_versions_capabilities_cache_hints_and_identity_only_in_meta() {
        let h = Harness::new();
        let result = h.call("alice", "server/discover", json!({})).await.result();
        let keys: Vec<&str> = result.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["_meta", "cacheScope", "capabilities", "instructions", "resultType", "supportedVersions", "ttlMs"]);
        assert_eq!(result["resultType"], "complete");
        assert_eq!(result["supportedVersions"], json!(["2026-07-28"]));
        assert_eq!(result["capabilities"], json!({ "tools": {}, "resources": {} }), "no roots");
        assert_eq!(result["ttlMs"], 3_600_000);
        assert_eq!(result["cacheScope"], "public");
        assert_eq!(result["_meta"], json!({ KEY_SERVER_INFO: { "name": "mcpsim-notes", "version": env!("CARGO_PKG_VERSION") } }));
    }

    #[tokio::test]
    async fn tools_list_is_byte_identical_across_calls_and_principals() {
        let h = Harness::new();
        let mut seen = Vec::new();
        for principal in ["alice", "bob", "mallory", "alice"] {
            let result = h.call(principal, "tools/list", json!({})).await.result();
            seen.push(serde_json::to_vec(&result).unwrap());
        }
        assert!(seen.windows(2).all(|pair| pair[0] == pair[1]));
        let other_instance = h.instance(config_with_ring(KeyRing::new("elsewhere", vec![1; 32]).unwrap()));
        let message = h.request("tools/list", json!({}), json!({}));
        assert_eq!(
            serde_json::to_vec(&h.send_to(&other_instance, "bob", &message).await.result()).unwrap(),
            seen[0],
            "keys do not leak into it"
        );
    }

    #[tokio::test]
    async fn tools_list_describes_notes_delete_with_a_closed_schema_and_public_cache_hints() {
        let h = Harness::new();
        let result = h.call("alice", "tools/list", json!({})).await.result();
        assert_eq!(result["cacheScope"], "public");
        assert_eq!(result["ttlMs"], 300_000);
        let tools = result["tools"].as_array().unwrap();
        assert_eq!(tools.len(), 1);
        let tool = &tools[0];
        assert_eq!(tool["name"], "notes_delete");
        assert_eq!(tool["inputSchema"]["type"], "object");
        assert_eq!(tool["inputSchema"]["required"], json!(["workspaceUri", "title"]));
        assert_eq!(tool["inputSchema"]["additionalProperties"], false);
        assert_eq!(tool["annotations"]["destructiveHint"], true);
        assert_eq!(tool["annotations"]["readOnlyHint"], false);
    }

    #[tokio::test]
    async fn every_kind_of_result_carries_its_type_and_server_identity() {
        // Exchange::result asserts resultType and _meta serverInfo on each of these.
        let h = Harness::new();
        h.call("alice", "server/discover", json!({})).await.result();
        h.call("alice", "tools/list", json!({})).await.result();
        h.call("alice", "resources/list", json!({})).await.result();
        h.call("alice", "resources/read", json!({ "uri": "file:///Users/alice/Documents/Notes/shopping.md" })).await.result();
        h.delete_call(&h.server, "alice", &delete_arguments(ALICE_WORKSPACE, "nothing like it"), json!({}), form_capabilities())
            .await
            .result();
        let state = h.lesson_state().await;
        h.answer("alice", &lesson_arguments(), &state, json!({})).await.result();
        h.answer("alice", &lesson_arguments(), &state, cancel()).await.result();
        h.answer("alice", &lesson_arguments(), &state, accept("note-3")).await.result();
        let state = h.lesson_state().await;
        h.answer("alice", &lesson_arguments(), &state, decline()).await.result();
    }
}

mod arbitrary_input {
    use super::*;
    use proptest::collection::{btree_map, vec};
    use proptest::option;
    use proptest::prelude::*;
    use proptest::sample::select;

    const KEYS: &[&str] = &[
        "jsonrpc",
        "id",
        "method",
        "params",
        "_meta",
        "name",
        "arguments",
        "requestState",
        "inputResponses",
        "delete_choice",
        "action",
        "content",
        "note_id",
        "confirm",
        "workspaceUri",
        "title",
        "uri",
        "io.modelcontextprotocol/protocolVersion",
        "io.modelcontextprotocol/clientCapabilities",
        "io.modelcontextprotocol/clientInfo",
        "elicitation",
        "form",
        "url",
        "progressToken",
    ];

    const STRINGS: &[&str] = &[
        "2.0",
        "2026-07-28",
        "2025-11-25",
        "tools/call",
        "tools/list",
        "server/discover",
        "resources/list",
        "resources/read",
        "notes_delete",
        "file:///Users/alice/Documents/Notes",
        "file:///Users/alice/Documents/Notes-evil",
        "file:///Users/alice/Documents/Notes/%2e%2e/Notes-evil/tps.md",
        "file:///Users/alice/Documents/Notes/tps-2024.md",
        "file:///Users/bob/Notes/tps.md",
        "TPS report",
        "accept",
        "decline",
        "cancel",
        "note-7",
        "note-200",
        "s1.test-1.e30.AAAA",
    ];

    const METHODS: &[&str] = &["tools/call", "tools/list", "server/discover", "resources/list", "resources/read", "initialize", "x"];

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![select(KEYS).prop_map(String::from), "[a-zA-Z_/.]{0,10}"]
    }

    fn leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map(Value::Number).unwrap_or(Value::Null)),
            select(STRINGS).prop_map(Value::from),
            ".{0,12}".prop_map(Value::String),
        ]
    }

    fn json_value() -> impl Strategy<Value = Value> {
        leaf().prop_recursive(5, 64, 6, |inner| {
            prop_oneof![
                vec(inner.clone(), 0..5).prop_map(Value::Array),
                btree_map(key(), inner, 0..5).prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    /// Messages that pass the envelope and `_meta` and so reach the handlers with arbitrary params.
    fn reaching_request() -> impl Strategy<Value = Value> {
        let id = prop_oneof![any::<i64>().prop_map(Value::from), "[a-z0-9-]{0,8}".prop_map(Value::from)];
        let capabilities = prop_oneof![Just(json!({})), Just(form_capabilities()), json_value()];
        (id, select(METHODS), btree_map(key(), json_value(), 0..6), capabilities).prop_map(|(id, method, params, capabilities)| {
            let mut params: serde_json::Map<String, Value> = params.into_iter().collect();
            params.insert("_meta".into(), meta(capabilities));
            json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
        })
    }

    /// A plausible-to-hostile `inputResponses` value built from the pieces of a real answer. Weighted so that
    /// a few percent of cases are valid accepts and about a tenth each declines and cancels, and the rest
    /// near misses: every branch of the property below is exercised in one run.
    fn answer() -> impl Strategy<Value = Value> {
        let action = prop_oneof![
            6 => Just(json!("accept")),
            2 => Just(json!("decline")),
            2 => Just(json!("cancel")),
            1 => select(&["approve", "", "ACCEPT"][..]).prop_map(Value::from),
            1 => json_value(),
        ];
        let note_id = prop_oneof![6 => select(&DEMO_NOTE_IDS[..]).prop_map(Value::from), 1 => json_value()];
        let confirm = prop_oneof![3 => Just(json!(true)), 1 => Just(json!(false)), 1 => json_value()];
        let extra = option::weighted(0.2, btree_map(key(), json_value(), 1..3));
        (
            option::weighted(0.9, action),
            option::weighted(0.9, note_id),
            option::weighted(0.9, confirm),
            extra,
            proptest::bool::weighted(0.9),
            proptest::bool::weighted(0.9),
        )
            .prop_map(|(action, note_id, confirm, extra, with_content, under_the_right_key)| {
                let mut answer = serde_json::Map::new();
                if let Some(action) = action {
                    answer.insert("action".into(), action);
                }
                if with_content {
                    let mut content = serde_json::Map::new();
                    if let Some(note_id) = note_id {
                        content.insert("note_id".into(), note_id);
                    }
                    if let Some(confirm) = confirm {
                        content.insert("confirm".into(), confirm);
                    }
                    if let Some(extra) = extra {
                        content.extend(extra);
                    }
                    answer.insert("content".into(), Value::Object(content));
                }
                let key = if under_the_right_key { "delete_choice" } else { "other_question" };
                json!({ key: answer })
            })
    }

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(future)
    }

    fn check_reply(reply: &Reply) {
        match &reply.response {
            Some(response) => assert_valid_response(response, reply.http_status),
            None => assert_eq!(reply.http_status, 202),
        }
    }

    /// What an answer exactly equal to a valid accept of a candidate would delete.
    fn valid_accept_target(responses: &Value) -> Option<String> {
        let answer = responses.get("delete_choice")?.as_object()?;
        let content = answer.get("content")?.as_object()?;
        let id = content.get("note_id")?.as_str()?;
        let consent = answer.get("action") == Some(&json!("accept"))
            && content.len() == 2
            && content.get("confirm") == Some(&json!(true))
            && ["note-3", "note-7", "note-14"].contains(&id);
        consent.then(|| id.to_string())
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic_and_get_a_valid_response(bytes in vec(any::<u8>(), 0..512)) {
            let h = Harness::new();
            let reply = block_on(h.send_bytes("alice", &bytes));
            check_reply(&reply);
            h.assert_untouched();
        }

        #[test]
        fn arbitrary_json_values_never_panic_and_get_a_valid_response(value in json_value()) {
            let h = Harness::new();
            let reply = block_on(h.send_bytes("alice", &serde_json::to_vec(&value).unwrap()));
            check_reply(&reply);
            h.assert_untouched();
        }

        #[test]
        fn arbitrary_params_that_reach_the_handlers_never_panic_and_never_delete(message in reaching_request()) {
            let h = Harness::new();
            let reply = block_on(h.send_bytes("alice", &serde_json::to_vec(&message).unwrap()));
            check_reply(&reply);
            let response = reply.response.expect("a request is answered");
            prop_assert_eq!(&response["id"], &message["id"]);
            h.assert_untouched();
        }

        #[test]
        fn only_a_valid_accept_deletes_and_only_it_or_a_decline_consumes(responses in answer()) {
            let h = Harness::new();
            let state = block_on(h.lesson_state());
            let exchange = block_on(h.answer("alice", &lesson_arguments(), &state, responses.clone()));
            check_reply(&exchange.reply);
            let response = exchange.response().clone();
            let deleted: Vec<String> = DEMO_NOTE_IDS.iter().map(|id| id.to_string()).filter(|id| !h.note_ids().contains(id)).collect();
            match valid_accept_target(&responses) {
                Some(id) => {
                    prop_assert_eq!(&deleted, &vec![id.clone()]);
                    prop_assert_eq!(&response["result"]["structuredContent"], &json!({ "deleted": true, "noteId": id, "outcome": "deleted" }));
                    prop_assert_eq!(h.replay.len(), 1);
                }
                None => {
                    prop_assert!(deleted.is_empty(), "deleted {:?} on {}", deleted, responses);
                    let declined = response["result"]["structuredContent"]["outcome"] == "declined";
                    prop_assert_eq!(h.replay.len(), usize::from(declined), "{}", response);
                }
            }
        }

        #[test]
        fn any_single_character_change_to_a_genuine_state_deletes_and_consumes_nothing(
            position in any::<prop::sample::Index>(),
            replacement in proptest::char::range('!', '~'),
        ) {
            let h = Harness::new();
            let state = block_on(h.lesson_state());
            let index = position.index(state.len());
            prop_assume!(state.as_bytes()[index] as char != replacement);
            let forged = replace_char(&state, index, replacement);
            let error = block_on(h.answer("alice", &lesson_arguments(), &forged, accept("note-7"))).error();
            let reason = error["data"]["reason"].as_str().unwrap().to_string();
            prop_assert!(["state_signature", "state_malformed"].contains(&reason.as_str()), "{}", error);
            h.assert_untouched();
        }
    }
}

/// The note store's index narrows round 1's search; it never authorizes. A store whose index is wrong (here:
/// it answers every search and every re-check with every note of the deployment, other workspaces, the evil
/// twin folder and other titles included) still gets nothing outside the asked workspace offered or described.
mod index_narrows_never_authorizes {
    use super::*;
    use async_trait::async_trait;
    use mcpsim::testing::MemoryNoteStore;
    use mcpsim::testing::NotesServer;
    use mcpsim::testing::{GuardedDelete, NoteStore, StoreError};
    use std::sync::Arc;

    /// A store double whose "index" returns everything.
    struct WrongIndex(Arc<MemoryNoteStore>);

    #[async_trait]
    impl NoteStore for WrongIndex {
        async fn list_notes(&self) -> Result<Vec<Note>, StoreError> {
            self.0.list_notes().await
        }
        async fn find_candidates(&self, _workspace: &FileUri, _query: &str) -> Result<Vec<Note>, StoreError> {
            self.0.list_notes().await
        }
        async fn notes_by_ids(&self, _ids: &[String]) -> Result<Vec<Note>, StoreError> {
            self.0.list_notes().await
        }
        async fn delete_if_inside(&self, id: &str, revision: &str, workspace: &FileUri) -> Result<GuardedDelete, StoreError> {
            self.0.delete_if_inside(id, revision, workspace).await
        }
    }

    fn over_wrong_index(h: &Harness) -> NotesServer {
        let mut ports = h.server.ports.clone();
        ports.notes = Arc::new(WrongIndex(h.notes.clone()));
        mcpsim::testing::notes_server(h.server.config.clone(), ports)
    }

    #[tokio::test]
    async fn candidates_a_wrong_index_returns_are_refused_by_the_handler() {
        let h = Harness::new();
        let server = over_wrong_index(&h);
        let first = h.delete_call(&server, "alice", &lesson_arguments(), json!({}), form_capabilities()).await.result();
        assert_eq!(first["resultType"], "input_required", "{first}");
        let form = &first["inputRequests"]["delete_choice"]["params"];
        assert_eq!(form["requestedSchema"]["properties"]["note_id"]["enum"], json!(["note-3", "note-7", "note-14"]));
        let message = form["message"].as_str().unwrap();
        for hidden in ["note-200", "Notes-evil", "note-100", "/tmp", "note-300", "/bob/", "note-99", "shopping"] {
            assert!(!message.contains(hidden), "the form must not mention {hidden:?}: {message}");
        }
        // Asking again re-checks the candidates by id through the same wrong index: still only the workspace's.
        let state = first["requestState"].as_str().unwrap();
        let again = h.answer_on(&server, "alice", &lesson_arguments(), state, json!({})).await.result();
        assert_eq!(again["inputRequests"], first["inputRequests"], "the same question, nothing else described");
        // And an attacker naming a note the index leaked is refused: it was never a candidate.
        let leaked = json!({ "delete_choice": { "action": "accept", "content": { "note_id": "note-200", "confirm": true } } });
        h.answer_on(&server, "alice", &lesson_arguments(), state, leaked).await.invalid("not_a_candidate");
        h.assert_untouched();
    }

    #[tokio::test]
    async fn a_title_the_index_wrongly_matches_is_not_offered() {
        let h = Harness::new();
        let server = over_wrong_index(&h);
        let arguments = json!({ "workspaceUri": "file:///Users/alice/Documents/Notes", "title": "shopping" });
        let result = h.delete_call(&server, "alice", &arguments, json!({}), form_capabilities()).await.result();
        let ids = &result["inputRequests"]["delete_choice"]["params"]["requestedSchema"]["properties"]["note_id"]["enum"];
        assert_eq!(ids, &json!(["note-99"]), "{result}");
    }
}
