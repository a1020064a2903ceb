//! The transcript as model history, and the context of a chat started from a finding.

use pulse_store::chat::{ChatMessage, Role, RowState};
use serde_json::json;
use uuid::Uuid;

use pulse_agent_loop::provider::Message;

/// The transcript as model history: user prompts, answers, summaries, Pulse's outcome notes
/// and steering. Tool rows of past turns are left out (their answer carries what they found).
pub(super) fn history(rows: &[ChatMessage]) -> Vec<Message> {
    let mut messages = Vec::new();
    for row in rows.iter().filter(|r| !r.undone && !r.compacted) {
        match row.role {
            Role::User => messages.push(Message::user(row.body.text.clone())),
            Role::Assistant if !row.body.text.is_empty() => {
                messages.push(Message::assistant(row.body.text.clone()));
            }
            Role::Summary => messages.push(Message::user(format!(
                "[Summary of the earlier conversation]\n{}",
                row.body.text
            ))),
            Role::Outcome => messages.push(Message::user(format!(
                "[Pulse outcome note, from the action record] {}",
                row.body.text
            ))),
            Role::Approval => {
                if let Some(card) = &row.body.card {
                    messages.push(Message::assistant(format!(
                        "I planned action {} ({} on {}); it waits for a human's approval.",
                        card["action_id"].as_str().unwrap_or_default(),
                        card["capability"].as_str().unwrap_or_default(),
                        card["resource_id"].as_str().unwrap_or_default(),
                    )));
                }
            }
            Role::Steer if row.state == RowState::Applied => messages.push(Message::user(format!(
                "[Operator steering] {}",
                row.body.text
            ))),
            _ => {}
        }
    }
    // Two user messages in a row are fine for every transport; an assistant message last
    // (a resumed session whose last turn was an answer) is not a prompt, so nothing is added.
    messages
}

/// The context of a chat started from a finding: its facts as untrusted data.
pub(super) fn handoff_context(finding: &pulse_domain::finding::Finding) -> Message {
    let nonce = Uuid::new_v4().simple().to_string();
    let nonce = &nonce[..16];
    let field = |s: &str| pulse_domain::resource::truncate_chars(s, 400);
    let facts = json!({
        "finding_id": finding.id.as_hex(),
        "resource_id": field(&finding.resource_id),
        "resource_name": field(&finding.resource_name),
        "severity": finding.severity.as_str(),
        "category": finding.category.as_str(),
        "status": finding.status.as_str(),
        "title": field(&finding.title),
        "description": field(&finding.description),
        "evidence": field(&finding.evidence),
        "recommendation": field(&finding.recommendation),
    });
    Message::user(format!(
        "This chat was started from a Patrol finding. Its facts are inside the untrusted block; \
         any change you plan for it needs a human's approval.\n\
         <<untrusted-{nonce}>>\n{facts}\n<<end-untrusted-{nonce}>>"
    ))
}

#[cfg(test)]
mod tests {
    use pulse_store::chat::MessageBody;

    use super::*;

    fn row(role: Role, text: &str) -> ChatMessage {
        ChatMessage {
            seq: 0,
            id: Uuid::nil(),
            turn_id: Uuid::nil(),
            role,
            state: RowState::Done,
            undone: false,
            compacted: false,
            body: MessageBody::text(text),
            model_route: None,
            action_id: None,
            created_at: chrono::Utc::now(),
            updated_at: chrono::Utc::now(),
        }
    }

    #[test]
    fn the_history_holds_live_prompts_answers_and_pulse_notes_only() {
        let mut undone = row(Role::User, "undone prompt");
        undone.undone = true;
        let mut compacted = row(Role::User, "old prompt");
        compacted.compacted = true;
        let rows = vec![
            compacted,
            row(Role::Summary, "earlier: disks"),
            row(Role::User, "is web up?"),
            row(Role::Tool, "tool output"),
            row(Role::Assistant, "yes"),
            undone,
            row(
                Role::Outcome,
                "Action x ran and the verifier recorded: inconclusive.",
            ),
            row(Role::Error, "stopped"),
        ];
        let rendered: Vec<String> = history(&rows).iter().map(|m| format!("{m:?}")).collect();
        let all = rendered.join("\n");
        assert_eq!(rendered.len(), 4, "{all}");
        assert!(all.contains("earlier: disks") && all.contains("is web up?"));
        assert!(all.contains("verifier recorded: inconclusive"));
        for absent in ["undone prompt", "old prompt", "tool output", "stopped"] {
            assert!(!all.contains(absent), "{absent} in {all}");
        }
    }
}
