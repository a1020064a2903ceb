//! `pulsectl findings list | show | ack | dismiss | suppress` over the gateway's finding API:
//! `GET /api/ai/patrol/findings[?include_resolved=true&limit=N]`, `GET .../findings/{id}`,
//! `POST /api/ai/patrol/acknowledge`, `.../dismiss` and `.../suppress`.
//!
//! Human text by default; `--json` prints the answer as JSON. Answers are the API's own types
//! (`pulse-api`), read through the typed client; enum values print as their wire names, empty
//! texts as `-`. `show` also prints the latest
//! investigation record (conclusion, evidence, proposal, the action it entered) and the fix
//! outcome the action wrote back (`fix_verified`, `fix_rejected`, ...) with its message.

use pulse_api::findings::{
    DismissBody, FindingAnswer, FindingRef, InvestigationRecord, ListQuery, SuppressBody,
};
use pulse_domain::finding::{Finding, FindingStatus};

use crate::cli::{FindingsDismissArgs, FindingsListArgs, FindingsSuppressArgs};
use crate::gateway_client::{ApiError, GatewayClient, print_json};
use crate::text::{render_table, show_time, wire_name};

/// The list's query: every finding with `--all`, and the limit when given.
pub fn list_query(args: &FindingsListArgs) -> ListQuery {
    ListQuery {
        include_resolved: args.all,
        limit: args.limit.map(i64::from),
        ..ListQuery::default()
    }
}

/// `findings list [--all] [--limit N]`.
pub async fn list(client: &GatewayClient, args: &FindingsListArgs) -> Result<(), ApiError> {
    let list = client.api().findings(&list_query(args)).await?;
    if args.json {
        print_json(&list);
    } else if list.findings.is_empty() {
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
    Ok(())
}

pub async fn show(client: &GatewayClient, id: &str, json: bool) -> Result<(), ApiError> {
    let answer = client.api().finding(id).await?;
    if json {
        print_json(&answer);
    } else {
        print!("{}", describe_finding(&answer));
    }
    Ok(())
}

pub async fn ack(client: &GatewayClient, id: &str, json: bool) -> Result<(), ApiError> {
    let body = FindingRef {
        finding_id: id.to_owned(),
    };
    let answer = client.api().acknowledge_finding(&body).await?;
    if json {
        print_json(&answer);
    } else {
        println!(
            "acknowledged finding {} at {}",
            answer.finding.id,
            show_time(answer.finding.acknowledged_at, "-")
        );
    }
    Ok(())
}

pub async fn dismiss(client: &GatewayClient, args: &FindingsDismissArgs) -> Result<(), ApiError> {
    let body = DismissBody {
        finding_id: args.id.clone(),
        reason: args.reason.clone(),
        note: args.note.clone().unwrap_or_default(),
    };
    let answer = client.api().dismiss_finding(&body).await?;
    if args.json {
        print_json(&answer);
        return Ok(());
    }
    let f = &answer.finding;
    println!(
        "dismissed finding {} ({})",
        f.id,
        f.dismissed_reason
            .as_ref()
            .map_or_else(|| args.reason.clone(), wire_name)
    );
    if let Some(at) = f.remind_at {
        println!("reminds at {}", show_time(Some(at), "-"));
    }
    Ok(())
}

pub async fn suppress(client: &GatewayClient, args: &FindingsSuppressArgs) -> Result<(), ApiError> {
    let body = SuppressBody {
        finding_id: args.finding.clone(),
        resource_id: args.resource.clone(),
        category: args.category.clone(),
        allow_broad_scope: args.allow_broad_scope,
    };
    let answer = client.api().suppress_finding(&body).await?;
    if args.json {
        print_json(&answer);
        return Ok(());
    }
    let f = &answer.finding;
    println!(
        "suppressed {} findings on {} (from finding {}, rule {})",
        args.category,
        args.resource,
        f.id,
        f.suppression_id
            .map_or_else(|| "-".to_owned(), |id| id.to_string())
    );
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
        let status = if f.acknowledged_at.is_some() && f.status == FindingStatus::Active {
            "active (acked)".to_owned()
        } else {
            wire_name(&f.status)
        };
        rows.push(vec![
            f.id.to_string(),
            wire_name(&f.severity),
            status,
            wire_name(&f.category),
            or_dash(&f.resource_id),
            show_time(Some(f.last_seen_at), "-"),
            f.title.clone(),
        ]);
    }
    render_table(&rows)
}

/// `label  value` lines, then the lifecycle as a table.
pub fn describe_finding(answer: &FindingAnswer) -> String {
    let f = &answer.finding;
    let mut rows = vec![
        ("finding", f.id.to_string()),
        ("title", or_dash(&f.title)),
        ("status", wire_name(&f.status)),
        ("severity", wire_name(&f.severity)),
        ("category", wire_name(&f.category)),
        (
            "resource",
            if f.resource_name.is_empty() || f.resource_name == f.resource_id {
                or_dash(&f.resource_id)
            } else {
                format!("{} ({})", f.resource_id, f.resource_name)
            },
        ),
        ("detected", show_time(Some(f.detected_at), "-")),
        ("last seen", show_time(Some(f.last_seen_at), "-")),
        ("times raised", f.times_raised.to_string()),
        ("acknowledged", show_time(f.acknowledged_at, "no")),
    ];
    let optional = [
        (
            "snoozed until",
            f.snoozed_until.map(|t| show_time(Some(t), "-")),
        ),
        ("dismissed", f.dismissed_reason.as_ref().map(wire_name)),
        ("remind at", f.remind_at.map(|t| show_time(Some(t), "-"))),
        ("resolved", f.resolved_at.map(|t| show_time(Some(t), "-"))),
        ("suppression", f.suppression_id.map(|id| id.to_string())),
    ];
    for (label, shown) in optional {
        if let Some(shown) = shown {
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
                show_time(Some(e.at), "-"),
                wire_name(&e.event_type),
                e.from.as_ref().map_or_else(|| "-".to_owned(), wire_name),
                e.to.as_ref().map_or_else(|| "-".to_owned(), wire_name),
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
    let mut status = wire_name(&record.status);
    if let Some(outcome) = &record.outcome {
        status.push_str(&format!(" ({})", wire_name(outcome)));
    }
    let mut rows = vec![
        ("id", record.id.to_string()),
        ("status", status),
        ("confidence", or_dash(&record.confidence)),
        ("started", show_time(Some(record.started_at), "-")),
        ("completed", show_time(record.completed_at, "-")),
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
                action.action_id,
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
        .as_ref()
        .map(wire_name)
        .filter(|o| o.starts_with("fix_"))?;
    let event = finding
        .lifecycle
        .iter()
        .rev()
        .find(|e| wire_name(&e.event_type) == outcome);
    let mut rows = vec![vec!["outcome".to_owned(), outcome]];
    if let Some(event) = event {
        rows.push(vec!["at".to_owned(), show_time(Some(event.at), "-")]);
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
    use serde_json::{Value, json};

    use super::*;

    /// A finding as the API answers it, with `fields` over the required ones.
    fn finding_json(fields: Value) -> Value {
        let mut finding = json!({
            "id": "00112233aabbccdd",
            "key": "disk-high",
            "severity": "warning",
            "category": "capacity",
            "resource_id": "host:h1",
            "resource_name": "h1",
            "resource_type": "host",
            "title": "disk almost full",
            "description": "",
            "recommendation": "",
            "evidence": "",
            "status": "active",
            "detected_at": "2026-11-29T17:00:00Z",
            "last_seen_at": "2026-11-29T18:02:03Z",
            "times_raised": 1,
            "regression_count": 0,
        });
        for (name, value) in fields.as_object().cloned().unwrap_or_default() {
            finding[name] = value;
        }
        finding
    }

    fn finding(status: &str, acked: bool) -> Finding {
        let mut fields = json!({
            "status": status,
            "lifecycle": [{"at": "2026-11-29T18:05:00Z", "type": "acknowledged",
                           "from": "active", "to": "active", "metadata": {"actor": "token:ops"}}],
        });
        if acked {
            fields["acknowledged_at"] = json!("2026-11-29T18:05:00Z");
        }
        serde_json::from_value(finding_json(fields)).expect("a finding")
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
            version: 2,
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
            "finding": finding_json(json!({
                "status": "resolved",
                "investigation_outcome": "fix_verified",
                "lifecycle": [
                    {"at": "2026-11-29T18:10:00Z", "type": "fix_verified",
                     "message": "demo-web answers again",
                     "metadata": {"action_id": "0190aaaa-bbbb-7ccc-8ddd-eeeeffff0000"}}
                ]
            })),
            "version": 3,
            "allowed_actions": [],
            "investigation_record": {
                "id": "0190cccc-0000-7000-8000-000000000001",
                "finding_id": "00112233aabbccdd",
                "session_id": "watch-run-1",
                "subject": {"resource_id": "service:h1:demo-web", "resource_name": "demo-web",
                            "resource_type": "service", "node": "h1"},
                "trigger": {"finding_key": "service-down", "source": "patrol",
                            "severity": "critical", "category": "reliability",
                            "title": "demo-web is down", "detected_at": "2026-11-29T18:02:00Z",
                            "description": "", "cause": "watch_run:1"},
                "status": "completed",
                "outcome": "fix_queued",
                "confidence": "high",
                "conclusion": "demo-web stopped after its health file vanished",
                "impact": "",
                "recommended_action": "restart demo-web",
                "evidence": [
                    {"id": "call-1", "kind": "pulse_get_resource", "summary": "demo-web is down"},
                    {"id": "call-2", "kind": "pulse_read_logs", "summary": "health file missing"}
                ],
                "tools_used": ["pulse_get_resource", "pulse_read_logs"],
                "proposal": {"resource_id": "service:h1:demo-web",
                             "causal_resource_id": "service:h1:demo-web",
                             "capability_name": "service.restart", "reason": "restart clears it"},
                "action": {"action_id": "0190aaaa-bbbb-7ccc-8ddd-eeeeffff0000",
                           "state": "pending_approval"},
                "started_at": "2026-11-29T18:03:00Z",
                "completed_at": "2026-11-29T18:04:00Z"
            }
        }))
        .expect("a finding answer");
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
        f.investigation_outcome = Some(pulse_domain::finding::InvestigationOutcome::NeedsAttention);
        assert_eq!(fix_outcome(&f), None);
    }

    #[test]
    fn list_query_carries_all_and_limit() {
        let args = |all, limit| FindingsListArgs {
            all,
            limit,
            json: false,
        };
        let query = |all, limit| serde_json::to_value(list_query(&args(all, limit))).unwrap();
        assert_eq!(query(false, None), json!({}));
        assert_eq!(
            query(true, Some(20)),
            json!({"include_resolved": true, "limit": 20})
        );
    }
}
