//! How a Watch run words the tools it offers: the shared schemas narrowed to what the Watch
//! handlers serve, with Watch descriptions, and only the lifecycle tools the run's facts make
//! usable ([`Offer`]). Every request of a run repeats the offer, so each token here is paid once
//! per turn.
//!
//! The policy applies this before its own narrowing and compiles the result, so what is offered
//! is exactly what is admitted. The annotations dropped here are still enforced after
//! admission: blank text by the lifecycle handlers (`tools::blank_field`, from the canonical
//! `minLength`), lengths and the finding key format by the domain (`ReportedFinding::identity`,
//! `FindingKey::normalize`); counts out of range fall back to the handler's default.

use pulse_capabilities::ToolName;
use pulse_domain::resource::ResourceType;
use serde_json::{Map, Value, json};

use crate::tools::Narrowing;

/// The lifecycle tools a run's facts make usable, decided once when the run starts.
///
/// `patrol_report_finding` is always offered. A verdict needs an active finding to judge, and the
/// seed already lists the run's active findings (the snapshot taken at its start), so a run with
/// none offers neither `patrol_assess_finding` nor `patrol_get_findings`: the read could only
/// repeat the seed's "no active finding" at the price of a provider turn. A clear needs a
/// problem signal to clear, so a run with none does not offer `patrol_clear_signal`. An
/// unoffered call is refused by the gate like any other, so the offer cannot be talked past.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offer {
    /// Active findings on the run's resources: read them once and give each a verdict.
    pub findings: bool,
    /// Problem signals (problem triage flags, firing alerts) on the run's resources.
    pub signals: bool,
}

impl Offer {
    /// Every lifecycle tool.
    pub const ALL: Offer = Offer {
        findings: true,
        signals: true,
    };

    /// The lifecycle tools of the investigation turns.
    pub fn investigation(self) -> Vec<Narrowing> {
        let mut tools = self.opening();
        tools.extend(self.decision());
        tools
    }

    /// The lifecycle reads of the opening turn (which reads only): the findings snapshot when
    /// a finding is active.
    pub fn opening(self) -> Vec<Narrowing> {
        if self.findings {
            vec![(ToolName::PatrolGetFindings, &[][..], &[][..])]
        } else {
            Vec::new()
        }
    }

    /// The lifecycle tools of the final decision, repair and review turns (no reads).
    pub fn decision(self) -> Vec<Narrowing> {
        let mut tools: Vec<Narrowing> = vec![(ToolName::PatrolReportFinding, &[], &[])];
        if self.findings {
            tools.push((ToolName::PatrolAssessFinding, &[], &[]));
        }
        if self.signals {
            tools.push((ToolName::PatrolClearSignal, &[], &[]));
        }
        tools
    }
}

/// The Watch wording of `tool`: rewrites its offered schema in place and returns its Watch
/// description (`None` keeps the canonical one).
pub fn project(tool: ToolName, schema: &mut Value) -> Option<&'static str> {
    let resource_types: Vec<&str> = ResourceType::ALL.iter().map(|t| t.as_str()).collect();
    strip_annotations(schema);
    let props = schema
        .get_mut("properties")
        .and_then(Value::as_object_mut)?;
    match tool {
        ToolName::PulseQuery => {
            // The handler serves these four (tools/query.rs) over the domain's resource types.
            set_enum(props, "action", &["search", "get", "list", "health"]);
            set_enum(props, "resource_type", &resource_types);
            Some("Search, get, list or count (health) the run's resources.")
        }
        ToolName::PulseMetrics => {
            set_enum(props, "type", &["performance"]);
            require(schema, "resource_id");
            Some("CPU, memory and disk percent history of a resource, with a forecast.")
        }
        ToolName::PulseStorage => {
            set_enum(props, "type", crate::tools::storage::SERVED);
            Some(
                "Storage, ZFS pools and disks of the run's resources: usage, health, SMART, wearout, forecast.",
            )
        }
        ToolName::PulseRead => {
            require(schema, "resource_id");
            Some("Live: recent log lines of a service or app-container, or a container's inspect.")
        }
        ToolName::PatrolGetFindings => Some("The active findings on the run's resources."),
        ToolName::PatrolReportFinding => {
            set_enum(props, "resource_type", &resource_types);
            // `FindingKey::normalize` owns the key format (it lowercases and joins words).
            if let Some(key) = props.get_mut("key").and_then(Value::as_object_mut) {
                key.remove("pattern");
            }
            None
        }
        ToolName::PatrolAssessFinding => Some("Give an active finding a verdict."),
        _ => None,
    }
}

/// Drops `minLength`, `maxLength` and `minimum` from every property.
fn strip_annotations(schema: &mut Value) {
    if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        for prop in props.values_mut().filter_map(Value::as_object_mut) {
            prop.remove("minLength");
            prop.remove("maxLength");
            prop.remove("minimum");
        }
    }
}

fn set_enum(props: &mut Map<String, Value>, name: &str, values: &[&str]) {
    if let Some(prop) = props.get_mut(name) {
        *prop = json!({"type": "string", "enum": values});
    }
}

fn require(schema: &mut Value, name: &str) {
    if let Some(required) = schema.get_mut("required").and_then(Value::as_array_mut) {
        if !required.iter().any(|r| r == name) {
            required.push(json!(name));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use pulse_capabilities::{CallRef, DenialCode, ToolPolicy};
    use serde_json::json;

    use super::*;
    use crate::watch::runtime::{decision_policy, watch_policy};

    fn offered(policy: &Arc<ToolPolicy>, name: &str) -> Value {
        policy
            .offered_tools()
            .find(|t| t.name == name)
            .map(|t| t.parameters.clone())
            .unwrap_or_else(|| panic!("{name} is offered"))
    }

    fn denial(policy: &Arc<ToolPolicy>, name: &str, arguments: Value) -> Option<DenialCode> {
        policy
            .admit(&CallRef {
                name,
                arguments: &arguments,
            })
            .err()
            .map(|d| d.code)
    }

    #[test]
    fn the_watch_offers_and_admits_what_its_handlers_serve() {
        let policy = watch_policy(Offer::ALL).expect("policy");
        let query = offered(&policy, "pulse_query");
        assert_eq!(
            query["properties"]["action"]["enum"],
            json!(["search", "get", "list", "health"])
        );
        let types: Vec<&str> = ResourceType::ALL.iter().map(|t| t.as_str()).collect();
        assert_eq!(query["properties"]["resource_type"]["enum"], json!(types));
        let metrics = offered(&policy, "pulse_metrics");
        assert_eq!(
            metrics["properties"]["type"]["enum"],
            json!(["performance"])
        );
        assert_eq!(metrics["required"], json!(["type", "resource_id"]));
        // Offer and admission agree: what is no longer offered is refused before any handler.
        let refused = [
            ("pulse_query", json!({"action": "topology"})),
            (
                "pulse_query",
                json!({"action": "list", "resource_type": "k8s-pod"}),
            ),
            (
                "pulse_metrics",
                json!({"type": "temperatures", "resource_id": "x"}),
            ),
            ("pulse_storage", json!({"type": "raid"})),
            ("pulse_read", json!({"action": "logs"})),
        ];
        for (name, arguments) in refused {
            assert_eq!(
                denial(&policy, name, arguments.clone()),
                Some(DenialCode::InvalidArguments),
                "{name} {arguments}"
            );
        }
        let served = json!({"action": "list", "resource_type": "service", "limit": 3});
        assert_eq!(denial(&policy, "pulse_query", served), None);
        for tool in policy.offered_tools() {
            assert!(!tool.description.contains("topology"), "{}", tool.name);
            // Gemini refuses an object schema without properties.
            assert!(
                tool.parameters["properties"]
                    .as_object()
                    .is_some_and(|p| !p.is_empty()),
                "{}",
                tool.name
            );
        }
    }

    #[test]
    fn watch_and_investigation_runs_offer_logs_and_inspect_reads_only() {
        let investigation = crate::investigation::tools::investigation_policy();
        for policy in [watch_policy(Offer::ALL), investigation] {
            let policy = policy.expect("policy");
            let read = offered(&policy, "pulse_read");
            assert_eq!(
                read["properties"]["action"]["enum"],
                json!(["logs", "inspect"])
            );
            let inspect = json!({"action": "inspect", "resource_id": "app-container:h1:abc"});
            assert_eq!(denial(&policy, "pulse_read", inspect), None);
            for action in ["exec", "file", "find", "tail"] {
                let arguments = json!({"action": action, "resource_id": "app-container:h1:abc"});
                assert_eq!(
                    denial(&policy, "pulse_read", arguments),
                    Some(DenialCode::InvalidArguments),
                    "{action}"
                );
            }
        }
    }

    #[test]
    fn lifecycle_tools_keep_their_required_fields_in_every_watch_turn() {
        for policy in [watch_policy(Offer::ALL), decision_policy(Offer::ALL)] {
            let policy = policy.expect("policy");
            let report = offered(&policy, "patrol_report_finding");
            assert_eq!(
                report["required"],
                ToolName::PatrolReportFinding.schema()["required"]
            );
            assert_eq!(
                report["properties"]["severity"]["enum"],
                json!(["warning", "critical"])
            );
            assert!(report["properties"]["impact"].is_object());
            let assess = offered(&policy, "patrol_assess_finding");
            assert_eq!(
                assess["required"],
                ToolName::PatrolAssessFinding.schema()["required"]
            );
            let text = format!("{report}{assess}");
            assert!(!text.contains("minLength") && !text.contains("maxLength"));
            // A report of a type no Watch resource has is refused by the gate.
            let vm = json!({
                "key": "pod-down", "severity": "warning", "category": "reliability",
                "resource_id": "k8s-pod:1", "resource_name": "pod1", "resource_type": "k8s-pod",
                "title": "t", "description": "d", "recommendation": "r", "evidence": "e"
            });
            assert_eq!(
                denial(&policy, "patrol_report_finding", vm),
                Some(DenialCode::InvalidArguments)
            );
        }
    }

    fn names(policy: &Arc<ToolPolicy>) -> Vec<String> {
        policy.offered_tools().map(|t| t.name.to_string()).collect()
    }

    #[test]
    fn a_run_offers_only_the_lifecycle_tools_its_facts_make_usable() {
        let quiet = Offer {
            findings: false,
            signals: false,
        };
        let policy = watch_policy(quiet).expect("policy");
        assert_eq!(
            names(&policy),
            [
                "pulse_query",
                "pulse_metrics",
                "pulse_storage",
                "pulse_read",
                "patrol_report_finding"
            ]
        );
        // What is not offered is refused before any handler, whatever the model writes.
        let verdict =
            json!({"finding_id": "f", "verdict": "resolved", "evidence": "e", "reason": "r"});
        assert_eq!(
            denial(&policy, "patrol_assess_finding", verdict.clone()),
            Some(DenialCode::ToolNotOffered)
        );
        assert_eq!(
            denial(&policy, "patrol_get_findings", json!({})),
            Some(DenialCode::ToolNotOffered)
        );
        let clear = json!({"resource_id": "service:h:web", "signal": "not_running",
            "evidence": "e", "reason": "r"});
        assert_eq!(
            denial(&policy, "patrol_clear_signal", clear.clone()),
            Some(DenialCode::ToolNotOffered)
        );
        assert_eq!(
            names(&decision_policy(quiet).expect("policy")),
            ["patrol_report_finding"]
        );

        let flagged = Offer {
            findings: false,
            signals: true,
        };
        assert_eq!(
            names(&decision_policy(flagged).expect("policy")),
            ["patrol_report_finding", "patrol_clear_signal"]
        );
        assert_eq!(
            denial(
                &watch_policy(flagged).expect("policy"),
                "patrol_clear_signal",
                clear
            ),
            None
        );

        let with_findings = Offer {
            findings: true,
            signals: false,
        };
        let policy = watch_policy(with_findings).expect("policy");
        assert_eq!(
            names(&policy),
            [
                "pulse_query",
                "pulse_metrics",
                "pulse_storage",
                "pulse_read",
                "patrol_get_findings",
                "patrol_report_finding",
                "patrol_assess_finding"
            ]
        );
        assert_eq!(denial(&policy, "patrol_assess_finding", verdict), None);
        assert_eq!(
            names(&decision_policy(with_findings).expect("policy")),
            ["patrol_report_finding", "patrol_assess_finding"]
        );
        assert_eq!(
            names(&watch_policy(Offer::ALL).expect("policy")).len(),
            8,
            "every lifecycle tool when both are usable"
        );
    }
}
