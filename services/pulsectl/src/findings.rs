//! `pulsectl findings list | show | ack | dismiss | suppress` over the gateway's finding API:
//! `GET /api/ai/patrol/findings[?include_resolved=1&limit=N]`, `GET .../findings/{id}`,
//! `POST /api/ai/patrol/acknowledge`, `.../dismiss` and `.../suppress`.
//!
//! Human text by default; `--json` prints the API's answer as it came. Answers are read
//! leniently (unknown fields ignored, missing ones shown as `-`). `show` also prints the latest
//! investigation record (conclusion, evidence, proposal, the action it entered) and the fix
//! outcome the action wrote back (`fix_verified`, `fix_rejected`, ...) with its message.

use reqwest::Method;
use serde::Deserialize;
use serde_json::json;

use crate::cli::{FindingsDismissArgs, FindingsListArgs, FindingsSuppressArgs};
use crate::gateway_client::{ApiError, GatewayClient};
use crate::patrol::client_with_query;
use crate::text::{display_time, render_table};

#[derive(Debug, Clone, Deserialize)]
pub struct LifecycleEvent {
    #[serde(default)]
    pub at: Option<String>,
    #[serde(rename = "type", default)]
    pub event_type: String,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub from: Option<String>,
    #[serde(default)]
    pub to: Option<String>,
    #[serde(default)]
    pub metadata: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Finding {
    pub id: String,
    #[serde(default)]
    pub severity: String,
    #[serde(default)]
    pub category: String,
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub resource_id: String,
    #[serde(default)]
    pub resource_name: String,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub recommendation: String,
    #[serde(default)]
    pub detected_at: Option<String>,
    #[serde(default)]
    pub last_seen_at: Option<String>,
    #[serde(default)]
    pub resolved_at: Option<String>,
    #[serde(default)]
    pub acknowledged_at: Option<String>,
    #[serde(default)]
    pub snoozed_until: Option<String>,
    #[serde(default)]
    pub dismissed_reason: Option<String>,
    #[serde(default)]
    pub remind_at: Option<String>,
    #[serde(default)]
    pub suppression_id: Option<String>,
    #[serde(default)]
    pub user_note: String,
    #[serde(default)]
    pub times_raised: u32,
    /// The investigation's outcome, or the fix outcome an action wrote back (`fix_*`).
    #[serde(default)]
    pub investigation_outcome: Option<String>,
    #[serde(default)]
    pub lifecycle: Vec<LifecycleEvent>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct InvestigationEvidence {
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub summary: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct InvestigationProposal {
    #[serde(default)]
    pub resource_id: String,
    #[serde(default)]
    pub capability_name: String,
    #[serde(default)]
    pub reason: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct InvestigationAction {
    #[serde(default)]
    pub action_id: String,
    /// The action's state when the proposal entered it.
    #[serde(default)]
    pub state: String,
}

/// `investigation_record` of `GET .../findings/{id}` (only what is printed).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct InvestigationRecord {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub outcome: Option<String>,
    #[serde(default)]
    pub confidence: String,
    #[serde(default)]
    pub conclusion: String,
    #[serde(default)]
    pub recommended_action: String,
    #[serde(default)]
    pub evidence: Vec<InvestigationEvidence>,
    #[serde(default)]
    pub proposal: Option<InvestigationProposal>,
    #[serde(default)]
    pub action: Option<InvestigationAction>,
    #[serde(default)]
    pub started_at: Option<String>,
    #[serde(default)]
    pub completed_at: Option<String>,
    #[serde(default)]
    pub error: String,
}

#[derive(Debug, Deserialize)]
struct FindingList {
    findings: Vec<Finding>,
}

/// The answer of `GET .../findings/{id}` and of every action.
#[derive(Debug, Deserialize)]
pub struct FindingAnswer {
    pub finding: Finding,
    #[serde(default)]
    pub allowed_actions: Vec<String>,
    /// The newest investigation (`GET .../findings/{id}` only; absent when never investigated).
    #[serde(default)]
    pub investigation_record: Option<InvestigationRecord>,
}

/// The list's query string: `include_resolved=1` with `--all`, and the limit when given.
pub fn list_query(args: &FindingsListArgs) -> Option<String> {
    let mut parts = Vec::new();
    if args.all {
        parts.push("include_resolved=1".to_owned());
    }
    if let Some(limit) = args.limit {
        parts.push(format!("limit={limit}"));
    }
    (!parts.is_empty()).then(|| parts.join("&"))
}

/// `findings list [--all] [--limit N]`. Takes the gateway and token: the query is carried by
/// the client's base URL.
pub async fn list(gateway: &str, token: String, args: &FindingsListArgs) -> Result<(), ApiError> {
    let client = client_with_query(gateway, token, list_query(args))?;
    let segments = ["api", "ai", "patrol", "findings"];
    if let Some(list) = client
        .fetch::<FindingList>(Method::GET, &segments, None, args.json)
        .await?
    {
        if list.findings.is_empty() {
            println!(
                "{}",
                if args.all {
                    "no findings"
                } else {
                    "no active findings"
                }
            );
        } else {
            print!("{}", render_findings(&list.findings));
        }
    }
    Ok(())
}

pub async fn show(client: &GatewayClient, id: &str, json: bool) -> Result<(), ApiError> {
    let segments = ["api", "ai", "patrol", "findings", id];
    if let Some(answer) = client
        .fetch::<FindingAnswer>(Method::GET, &segments, None, json)
        .await?
    {
        print!("{}", describe_finding(&answer));
    }
    Ok(())
}

async fn act(
    client: &GatewayClient,
    route: &str,
    body: serde_json::Value,
    json: bool,
) -> Result<Option<FindingAnswer>, ApiError> {
    let segments = ["api", "ai", "patrol", route];
    client
        .fetch::<FindingAnswer>(Method::POST, &segments, Some(&body), json)
        .await
}

pub async fn ack(client: &GatewayClient, id: &str, json: bool) -> Result<(), ApiError> {
    if let Some(answer) = act(client, "acknowledge", json!({"finding_id": id}), json).await? {
        println!(
            "acknowledged finding {} at {}",
            answer.finding.id,
            display_time(answer.finding.acknowledged_at.as_deref(), "-")
        );
    }
    Ok(())
}

pub async fn dismiss(client: &GatewayClient, args: &FindingsDismissArgs) -> Result<(), ApiError> {
    let mut body = json!({"finding_id": args.id, "reason": args.reason});
    if let Some(note) = &args.note {
        body["note"] = json!(note);
    }
    if let Some(answer) = act(client, "dismiss", body, args.json).await? {
        let f = &answer.finding;
        println!(
            "dismissed finding {} ({})",
            f.id,
            f.dismissed_reason.as_deref().unwrap_or(&args.reason)
        );
        if let Some(at) = &f.remind_at {
            println!("reminds at {}", display_time(Some(at), "-"));
        }
    }
    Ok(())
}

pub async fn suppress(client: &GatewayClient, args: &FindingsSuppressArgs) -> Result<(), ApiError> {
    let mut body = json!({"resource_id": args.resource, "category": args.category});
    if let Some(id) = &args.finding {
        body["finding_id"] = json!(id);
    }
    if args.allow_broad_scope {
        body["allow_broad_scope"] = json!(true);
    }
    if let Some(answer) = act(client, "suppress", body, args.json).await? {
        let f = &answer.finding;
        println!(
            "suppressed {} findings on {} (from finding {}, rule {})",
            args.category,
            args.resource,
            f.id,
            f.suppression_id.as_deref().unwrap_or("-")
        );
    }
    Ok(())
}

fn or_dash(text: &str) -> String {
    if text.is_empty() {
        "-".to_owned()
    } else {
        text.to_owned()
    }
}

/// One finding per line, most recently seen first as the API lists them.
pub fn render_findings(findings: &[Finding]) -> String {
    let mut rows = vec![
        [
            "ID",
            "SEVERITY",
            "STATUS",
            "CATEGORY",
            "RESOURCE",
            "LAST SEEN",
            "TITLE",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    for f in findings {
        let status = if f.acknowledged_at.is_some() && f.status == "active" {
            "active (acked)".to_owned()
        } else {
            or_dash(&f.status)
        };
        rows.push(vec![
            f.id.clone(),
            or_dash(&f.severity),
            status,
            or_dash(&f.category),
            or_dash(&f.resource_id),
            display_time(f.last_seen_at.as_deref(), "-"),
            f.title.clone(),
        ]);
    }
    render_table(&rows)
}

/// `label  value` lines, then the lifecycle as a table.
pub fn describe_finding(answer: &FindingAnswer) -> String {
    let f = &answer.finding;
    let mut rows = vec![
        ("finding", f.id.clone()),
        ("title", or_dash(&f.title)),
        ("status", or_dash(&f.status)),
        ("severity", or_dash(&f.severity)),
        ("category", or_dash(&f.category)),
        (
            "resource",
            if f.resource_name.is_empty() || f.resource_name == f.resource_id {
                or_dash(&f.resource_id)
            } else {
                format!("{} ({})", f.resource_id, f.resource_name)
            },
        ),
        ("detected", display_time(f.detected_at.as_deref(), "-")),
        ("last seen", display_time(f.last_seen_at.as_deref(), "-")),
        ("times raised", f.times_raised.to_string()),
        (
            "acknowledged",
            display_time(f.acknowledged_at.as_deref(), "no"),
        ),
    ];
    let optional = [
        ("snoozed until", &f.snoozed_until),
        ("dismissed", &f.dismissed_reason),
        ("remind at", &f.remind_at),
        ("resolved", &f.resolved_at),
        ("suppression", &f.suppression_id),
    ];
    for (label, value) in optional {
        if let Some(value) = value {
            let shown = if label == "dismissed" || label == "suppression" {
                value.clone()
            } else {
                display_time(Some(value), "-")
            };
            rows.push((label, shown));
        }
    }
    if !f.user_note.is_empty() {
        rows.push(("note", f.user_note.clone()));
    }
    rows.push(("description", or_dash(&f.description)));
    rows.push(("recommendation", or_dash(&f.recommendation)));
    rows.push((
        "allowed actions",
        if answer.allowed_actions.is_empty() {
            "-".to_owned()
        } else {
            answer.allowed_actions.join(", ")
        },
    ));
    let table: Vec<Vec<String>> = rows
        .into_iter()
        .map(|(k, v)| vec![k.to_owned(), v])
        .collect();
    let mut out = render_table(&table);
    if !f.lifecycle.is_empty() {
        out.push_str("\nlifecycle:\n");
        let mut events = vec![
            ["AT", "EVENT", "FROM", "TO", "BY", "DETAIL"]
                .map(str::to_owned)
                .to_vec(),
        ];
        for e in &f.lifecycle {
            let detail = [e.metadata.get("reason"), Some(&e.message)]
                .into_iter()
                .flatten()
                .filter(|s| !s.is_empty())
                .cloned()
                .collect::<Vec<_>>()
                .join(": ");
            events.push(vec![
                display_time(e.at.as_deref(), "-"),
                e.event_type.clone(),
                e.from.clone().unwrap_or_else(|| "-".to_owned()),
                e.to.clone().unwrap_or_else(|| "-".to_owned()),
                e.metadata
                    .get("actor")
                    .cloned()
                    .unwrap_or_else(|| "-".to_owned()),
                detail,
            ]);
        }
        out.push_str(&render_table(&events));
    }
    if let Some(record) = &answer.investigation_record {
        out.push_str("\ninvestigation:\n");
        out.push_str(&describe_investigation(record));
    }
    if let Some(fix) = fix_outcome(f) {
        out.push_str("\nfix outcome:\n");
        out.push_str(&fix);
    }
    out
}

/// The investigation record as `label  value` lines, evidence one per line.
pub fn describe_investigation(record: &InvestigationRecord) -> String {
    let mut status = or_dash(&record.status);
    if let Some(outcome) = record.outcome.as_deref().filter(|o| !o.is_empty()) {
        status.push_str(&format!(" ({outcome})"));
    }
    let mut rows = vec![
        ("id", or_dash(&record.id)),
        ("status", status),
        ("confidence", or_dash(&record.confidence)),
        ("started", display_time(record.started_at.as_deref(), "-")),
        (
            "completed",
            display_time(record.completed_at.as_deref(), "-"),
        ),
        ("conclusion", or_dash(&record.conclusion)),
    ];
    if !record.recommended_action.is_empty() {
        rows.push(("recommended", record.recommended_action.clone()));
    }
    for (i, evidence) in record.evidence.iter().enumerate() {
        let line = match (evidence.kind.is_empty(), evidence.summary.is_empty()) {
            (false, false) => format!("{}: {}", evidence.kind, evidence.summary),
            (false, true) => evidence.kind.clone(),
            _ => or_dash(&evidence.summary),
        };
        rows.push((if i == 0 { "evidence" } else { "" }, line));
    }
    if let Some(proposal) = &record.proposal {
        let mut text = format!(
            "{} on {}",
            or_dash(&proposal.capability_name),
            or_dash(&proposal.resource_id)
        );
        if !proposal.reason.is_empty() {
            text.push_str(&format!(": {}", proposal.reason));
        }
        rows.push(("proposal", text));
    }
    if let Some(action) = &record.action {
        rows.push((
            "action",
            format!(
                "{} (entered as {})",
                or_dash(&action.action_id),
                or_dash(&action.state)
            ),
        ));
    }
    if !record.error.is_empty() {
        rows.push(("error", record.error.clone()));
    }
    let table: Vec<Vec<String>> = rows
        .into_iter()
        .map(|(k, v)| vec![k.to_owned(), v])
        .collect();
    render_table(&table)
}

/// The fix outcome an action wrote back to the finding, with the message and action of its
/// lifecycle event; `None` while no action reported one.
pub fn fix_outcome(finding: &Finding) -> Option<String> {
    let outcome = finding
        .investigation_outcome
        .as_deref()
        .filter(|o| o.starts_with("fix_"))?;
    let event = finding
        .lifecycle
        .iter()
        .rev()
        .find(|e| e.event_type == outcome);
    let mut rows = vec![vec!["outcome".to_owned(), outcome.to_owned()]];
    if let Some(event) = event {
        rows.push(vec![
            "at".to_owned(),
            display_time(event.at.as_deref(), "-"),
        ]);
        if let Some(action) = event.metadata.get("action_id") {
            rows.push(vec!["action".to_owned(), action.clone()]);
        }
        if !event.message.is_empty() {
            rows.push(vec!["message".to_owned(), event.message.clone()]);
        }
    }
    Some(render_table(&rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(status: &str, acked: bool) -> Finding {
        serde_json::from_value(json!({
            "id": "00112233aabbccdd",
            "severity": "warning",
            "category": "capacity",
            "status": status,
            "resource_id": "host:h1",
            "title": "disk almost full",
            "last_seen_at": "2026-11-29T18:02:03Z",
            "acknowledged_at": acked.then_some("2026-11-29T18:05:00Z"),
            "lifecycle": [{"at": "2026-11-29T18:05:00Z", "type": "acknowledged",
                           "from": "active", "to": "active", "metadata": {"actor": "token:ops"}}],
            "unknown_future_field": 1
        }))
        .expect("lenient")
    }

    #[test]
    fn list_rows_show_the_acknowledgement() {
        let text = render_findings(&[finding("active", true), finding("dismissed", false)]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("ID"), "{text}");
        assert!(lines[1].contains("active (acked)"), "{text}");
        assert!(lines[2].contains("dismissed"), "{text}");
        assert!(lines[1].contains("2026-11-29 18:02:03"), "{text}");
    }

    #[test]
    fn show_prints_fields_and_the_lifecycle_with_its_actor() {
        let answer = FindingAnswer {
            finding: finding("active", true),
            allowed_actions: vec!["snooze".to_owned()],
            investigation_record: None,
        };
        let text = describe_finding(&answer);
        assert!(
            text.contains("acknowledged     2026-11-29 18:05:00"),
            "{text}"
        );
        assert!(text.contains("allowed actions  snooze"), "{text}");
        assert!(text.contains("token:ops"), "{text}");
        assert!(!text.contains("investigation:"), "{text}");
        assert!(!text.contains("fix outcome:"), "{text}");
    }

    #[test]
    fn show_prints_the_investigation_and_the_fix_outcome() {
        let answer: FindingAnswer = serde_json::from_value(json!({
            "finding": {
                "id": "00112233aabbccdd",
                "status": "resolved",
                "investigation_outcome": "fix_verified",
                "lifecycle": [
                    {"at": "2026-11-29T18:10:00Z", "type": "fix_verified",
                     "message": "demo-web answers again",
                     "metadata": {"action_id": "0190aaaa-bbbb-7ccc-8ddd-eeeeffff0000"}}
                ]
            },
            "allowed_actions": [],
            "investigation_record": {
                "id": "0190cccc-0000-7000-8000-000000000001",
                "status": "completed",
                "outcome": "fix_queued",
                "confidence": "high",
                "conclusion": "demo-web stopped after its health file vanished",
                "recommended_action": "restart demo-web",
                "evidence": [
                    {"id": "call-1", "kind": "pulse_get_resource", "summary": "demo-web is down"},
                    {"id": "call-2", "kind": "pulse_read_logs", "summary": "health file missing"}
                ],
                "proposal": {"resource_id": "service:h1:demo-web",
                             "causal_resource_id": "service:h1:demo-web",
                             "capability_name": "service.restart", "reason": "restart clears it"},
                "action": {"action_id": "0190aaaa-bbbb-7ccc-8ddd-eeeeffff0000",
                           "state": "pending_approval"},
                "started_at": "2026-11-29T18:03:00Z",
                "completed_at": "2026-11-29T18:04:00Z",
                "future_field": true
            }
        }))
        .expect("lenient");
        let text = describe_finding(&answer);
        let investigation = text
            .split("investigation:\n")
            .nth(1)
            .unwrap_or_else(|| panic!("no investigation section: {text}"));
        for line in [
            "status       completed (fix_queued)",
            "confidence   high",
            "conclusion   demo-web stopped after its health file vanished",
            "evidence     pulse_get_resource: demo-web is down",
            "             pulse_read_logs: health file missing",
            "proposal     service.restart on service:h1:demo-web: restart clears it",
            "action       0190aaaa-bbbb-7ccc-8ddd-eeeeffff0000 (entered as pending_approval)",
        ] {
            assert!(investigation.contains(line), "{line:?} missing:\n{text}");
        }
        let fix = text
            .split("fix outcome:\n")
            .nth(1)
            .unwrap_or_else(|| panic!("no fix outcome: {text}"));
        assert!(fix.contains("outcome  fix_verified"), "{text}");
        assert!(fix.contains("message  demo-web answers again"), "{text}");
        assert!(
            fix.contains("action   0190aaaa-bbbb-7ccc-8ddd-eeeeffff0000"),
            "{text}"
        );
    }

    #[test]
    fn an_investigation_outcome_is_not_a_fix_outcome() {
        let mut f = finding("active", false);
        f.investigation_outcome = Some("needs_attention".to_owned());
        assert_eq!(fix_outcome(&f), None);
    }

    #[test]
    fn list_query_carries_all_and_limit() {
        let args = |all, limit| FindingsListArgs {
            all,
            limit,
            json: false,
        };
        assert_eq!(list_query(&args(false, None)), None);
        assert_eq!(
            list_query(&args(true, Some(20))).as_deref(),
            Some("include_resolved=1&limit=20")
        );
    }
}
