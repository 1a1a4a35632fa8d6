//! Cleanup command decoding and signature verification, as a collector does them
//! (`decode::<CleanupCommand>`, `CommandKey::verify`, `check_names`): a command or a typed
//! error, never a panic; a decoded command encodes and decodes to itself (with today's
//! schema and with v2, the oldest that holds signatures, when it fits); and no forged
//! command verifies: a command that verifies under the collector's key is one the key's
//! holder signed (the seed corpus holds their encodings, so the fuzzer starts from valid
//! signatures and mutates them), field for field, with its signature in canonical form.
#![no_main]

#[path = "../common/mod.rs"]
mod common;

use std::sync::OnceLock;

use ipaudit_schemas::{decode, encode, encode_as, CleanupAction, CleanupCommand, CommandKey};
use libfuzzer_sys::fuzz_target;

/// The key and the commands signed with it (their encodings are in the seed corpus; see
/// fuzz/README.md for how they are written).
fn signed() -> &'static (CommandKey, Vec<CleanupCommand>) {
    static SIGNED: OnceLock<(CommandKey, Vec<CleanupCommand>)> = OnceLock::new();
    SIGNED.get_or_init(|| {
        let key = CommandKey::new(b"ipaudit fuzz commands key, 32 by".to_vec()).expect("a key");
        let mut commands = ipaudit_fuzz_commands();
        for command in &mut commands {
            key.sign(command);
        }
        (key, commands)
    })
}

/// The commands the key's holder signed.
fn ipaudit_fuzz_commands() -> Vec<CleanupCommand> {
    let base = CleanupCommand {
        command_id: "a1/120".into(),
        cluster_id: "prod".into(),
        action: CleanupAction::RemoveFinalizer,
        target_kind: "IP".into(),
        target_name: "vm-1.ns".into(),
        target_uid: "u1".into(),
        expected_resource_version: "118".into(),
        finalizer: Some("kube-ovn-controller".into()),
        subnet: "net1".into(),
        reason_alert_id: "a1".into(),
        issued_at_ms: 1_790_000_000_000,
        alert_fired_at_ms: 1_789_999_000_000,
        target_namespace: None,
        address: None,
        signature: None,
    };
    let reservation = CleanupCommand {
        command_id: "a2/7".into(),
        action: CleanupAction::Delete,
        target_kind: "OverlappingRangeIPReservation".into(),
        target_name: "10.9.0.1".into(),
        finalizer: None,
        subnet: String::new(),
        target_namespace: Some("kube-system".into()),
        ..base.clone()
    };
    let allocation = CleanupCommand {
        command_id: "a3/9".into(),
        action: CleanupAction::RemoveAllocation,
        target_kind: "IPPool".into(),
        target_name: "pool1".into(),
        finalizer: None,
        target_namespace: Some("kube-system".into()),
        address: Some("10.9.0.1".into()),
        ..base.clone()
    };
    vec![base, reservation, allocation]
}

/// The seed corpus: the signed commands, encoded with today's schema and with v2 (those
/// v2 holds).
fn seeds() -> Vec<Vec<u8>> {
    let (_, commands) = signed();
    commands
        .iter()
        .flat_map(|c| [encode(c).ok(), encode_as(c, 2).ok()])
        .flatten()
        .collect()
}

fuzz_target!(|bytes: &[u8]| {
    common::write_seeds_if_asked(|| {
        seeds()
            .into_iter()
            .enumerate()
            .map(|(i, seed)| (format!("signed-{i}"), seed))
            .collect()
    });
    let Ok(command) = decode::<CleanupCommand>(bytes) else {
        return;
    };
    let again = decode::<CleanupCommand>(&encode(&command).expect("a decoded command encodes"))
        .expect("an encoded command decodes");
    assert_eq!(again, command, "the command changed through today's schema");
    let _ = command.check_names();
    let (key, commands) = signed();
    if key.verify(&command).is_ok() {
        let mut unsigned = command.clone();
        unsigned.signature = None;
        assert!(
            commands.iter().any(|c| CleanupCommand {
                signature: None,
                ..c.clone()
            } == unsigned),
            "a command the key never signed verifies: {command:?}"
        );
        let signature = command.signature.as_deref().unwrap_or_default();
        assert_eq!(
            signature.to_ascii_lowercase(),
            key.signature(&command),
            "a signature not in canonical form verifies"
        );
    }
});
