//! The governance table: for every profile (each control level) and every tool, what is offered
//! is exactly what may run, and nothing else reaches a handler.

use std::sync::Arc;

use pulse_capabilities::object_schemas::boolean_subschemas;
use pulse_capabilities::{
    CallRef, ControlLevel, DenialCode, ExecutionProfile, GateError, RunGate, TerminalDenial,
    ToolName, ToolPolicy,
};
use serde_json::{Map, Value, json};

/// A handler table stub that records which handlers ran.
#[derive(Default)]
struct RecordingHandlers {
    invoked: Vec<String>,
}

impl RecordingHandlers {
    /// What a loop does with one model call: admit, then dispatch.
    fn dispatch(
        &mut self,
        gate: &mut RunGate,
        name: &str,
        arguments: &Value,
    ) -> Result<(), GateError> {
        let admitted = gate.admit(&CallRef { name, arguments })?;
        self.invoked.push(admitted.tool.wire_name().to_owned());
        Ok(())
    }
}

fn policy(profile: ExecutionProfile) -> Arc<ToolPolicy> {
    ToolPolicy::for_profile(profile).expect("policy builds")
}

/// A minimal value valid for a property schema.
fn sample(schema: &Value) -> Value {
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|v| v.first())
    {
        return first.clone();
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("integer") | Some("number") => json!(1),
        Some("boolean") => json!(true),
        Some("array") => json!([]),
        Some("object") => json!({}),
        _ => json!("x"),
    }
}

/// Arguments valid against a schema: every required property with a sample value.
fn valid_arguments(schema: &Value) -> Value {
    let mut args = Map::new();
    for name in schema["required"].as_array().into_iter().flatten() {
        let name = name.as_str().unwrap();
        args.insert(name.to_owned(), sample(&schema["properties"][name]));
    }
    Value::Object(args)
}

fn expected_offered(profile: ExecutionProfile) -> Vec<ToolName> {
    use ToolName::*;
    let reads = [
        PulseQuery,
        PulseMetrics,
        PulseStorage,
        PulseDocker,
        PulseKubernetes,
        PulseAlerts,
        PulseRead,
        PulseDiscovery,
        PulseKnowledge,
        PulsePmg,
        PulseSummarize,
    ];
    let mut tools: Vec<ToolName> = reads.to_vec();
    match profile {
        ExecutionProfile::PatrolDetection => tools.extend([
            PatrolGetFindings,
            PatrolReportFinding,
            PatrolAssessFinding,
            PatrolClearSignal,
        ]),
        ExecutionProfile::PatrolInvestigation => {
            tools.extend([PatrolActionCapabilities, PatrolProposeAction])
        }
        ExecutionProfile::InteractiveAssistant { control } => {
            tools.push(PulseQuestion);
            if control != ControlLevel::ReadOnly {
                tools.push(PulseControl);
            }
        }
    }
    tools.sort();
    tools
}

#[test]
fn offered_set_equals_executable_set_for_every_profile_and_tool() {
    for &profile in ExecutionProfile::ALL {
        let policy = policy(profile);
        let mut offered: Vec<ToolName> = ToolName::ALL
            .iter()
            .copied()
            .filter(|t| policy.offers(*t))
            .collect();
        offered.sort();
        assert_eq!(offered, expected_offered(profile), "{}", profile.label());

        for &tool in ToolName::ALL {
            let mut handlers = RecordingHandlers::default();
            let mut gate = RunGate::new(policy.clone());
            if policy.offers(tool) {
                let schema = &policy
                    .offered_tools()
                    .find(|t| t.name == tool.wire_name())
                    .unwrap()
                    .parameters;
                // Every offered discriminator value is executable.
                let discriminated = tool.descriptor().discriminator();
                let values: Vec<Value> = match discriminated {
                    Some(arg) => schema["properties"][arg]["enum"]
                        .as_array()
                        .unwrap()
                        .clone(),
                    None => vec![Value::Null],
                };
                for value in values {
                    let mut args = valid_arguments(schema);
                    if let Some(arg) = discriminated {
                        args[arg] = value.clone();
                    }
                    let mut gate = RunGate::new(policy.clone());
                    let result = handlers.dispatch(&mut gate, tool.wire_name(), &args);
                    assert!(
                        result.is_ok(),
                        "{} {tool} {args}: {result:?}",
                        profile.label()
                    );
                }
                // Every canonical discriminator value not offered is denied as a mutation.
                if let Some(arg) = discriminated {
                    let canonical = tool.schema();
                    for value in canonical["properties"][arg]["enum"].as_array().unwrap() {
                        if schema["properties"][arg]["enum"]
                            .as_array()
                            .unwrap()
                            .contains(value)
                        {
                            continue;
                        }
                        let mut args = valid_arguments(&canonical);
                        args[arg] = value.clone();
                        let before = handlers.invoked.len();
                        let denied = handlers.dispatch(&mut gate, tool.wire_name(), &args);
                        assert!(
                            matches!(&denied, Err(GateError::Denied(d)) if d.code == DenialCode::MutationNotPermitted),
                            "{} {tool} {args}: {denied:?}",
                            profile.label()
                        );
                        assert_eq!(handlers.invoked.len(), before);
                    }
                }
            } else {
                let args = valid_arguments(&tool.schema());
                let denied = handlers.dispatch(&mut gate, tool.wire_name(), &args);
                assert!(
                    matches!(&denied, Err(GateError::Denied(d)) if d.code == DenialCode::ToolNotOffered),
                    "{} {tool}: {denied:?}",
                    profile.label()
                );
                assert!(handlers.invoked.is_empty());
            }
        }
    }
}

#[test]
fn offered_schemas_are_closed_and_admission_uses_them() {
    for &profile in ExecutionProfile::ALL {
        let policy = policy(profile);
        for tool in policy.offered_tools() {
            assert_eq!(
                tool.parameters["additionalProperties"],
                json!(false),
                "{}",
                tool.name
            );
            assert_eq!(tool.parameters["type"], json!("object"));
        }
    }
}

#[test]
fn offered_schemas_use_only_object_subschemas() {
    for &profile in ExecutionProfile::ALL {
        for tool in policy(profile).offered_tools() {
            let booleans = boolean_subschemas(&tool.parameters);
            assert!(
                booleans.is_empty(),
                "{profile:?} {}: boolean subschemas at {booleans:?}",
                tool.name
            );
        }
    }
}

#[test]
fn fabricated_infrastructure_calls_in_patrol_never_reach_a_handler() {
    let fabricated = [
        (
            "pulse_control",
            json!({"type": "resource", "resource_id": "vm-101", "action": "reboot"}),
        ),
        (
            "pulse_control",
            json!({"type": "guest", "resource_id": "vm-101", "action": "stop"}),
        ),
        ("pulse_execute_command", json!({"command": "rm -rf /"})),
        ("pulse_run_command", json!({"command": "reboot"})),
        (
            "pulse_file_edit",
            json!({"action": "write", "path": "/etc/hosts", "target_host": "h"}),
        ),
        ("pulse_docker", json!({"action": "update", "host": "h"})),
        (
            "pulse_kubernetes",
            json!({"type": "scale", "deployment": "web"}),
        ),
        (
            "pulse_alerts",
            json!({"action": "dismiss", "finding_id": "f1"}),
        ),
        (
            "pulse_knowledge",
            json!({"action": "remember", "resource_id": "vm-101", "note": "n"}),
        ),
        (
            "patrol_resolve_finding",
            json!({"finding_id": "f1", "reason": "r"}),
        ),
        ("pulse_question", json!({"question": "may I?"})),
    ];
    for profile in [
        ExecutionProfile::PatrolDetection,
        ExecutionProfile::PatrolInvestigation,
    ] {
        let mut handlers = RecordingHandlers::default();
        let mut gate = RunGate::new(policy(profile));
        for (name, args) in &fabricated {
            let result = handlers.dispatch(&mut gate, name, args);
            assert!(
                matches!(result, Err(GateError::Denied(_))),
                "{} {name}: {result:?}",
                profile.label()
            );
        }
        assert!(handlers.invoked.is_empty(), "{:?}", handlers.invoked);
    }
    // Investigation may not write Pulse state either.
    let mut handlers = RecordingHandlers::default();
    let mut gate = RunGate::new(policy(ExecutionProfile::PatrolInvestigation));
    let report = valid_arguments(&ToolName::PatrolReportFinding.schema());
    assert!(
        handlers
            .dispatch(&mut gate, "patrol_report_finding", &report)
            .is_err()
    );
    assert!(handlers.invoked.is_empty());
}

#[test]
fn read_only_assistant_is_offered_no_write_and_controlled_plans_only_resources() {
    let read_only = policy(ExecutionProfile::InteractiveAssistant {
        control: ControlLevel::ReadOnly,
    });
    for tool in read_only.offered_tools() {
        let tool = ToolName::from_wire(tool.name).unwrap();
        let admitted = read_only.admit(&CallRef {
            name: tool.wire_name(),
            arguments: &valid_arguments(
                &read_only
                    .offered_tools()
                    .find(|t| t.name == tool.wire_name())
                    .unwrap()
                    .parameters,
            ),
        });
        assert_eq!(
            admitted.unwrap().class.mutation,
            pulse_capabilities::MutationTarget::None
        );
    }
    let controlled = policy(ExecutionProfile::InteractiveAssistant {
        control: ControlLevel::Controlled,
    });
    let plan = json!({"type": "resource", "resource_id": "vm-101", "action": "restart"});
    let admitted = controlled
        .admit(&CallRef {
            name: "pulse_control",
            arguments: &plan,
        })
        .unwrap();
    assert_eq!(admitted.discriminator, Some("resource"));
    assert_eq!(
        admitted.class.mutation,
        pulse_capabilities::MutationTarget::Infrastructure
    );
    let denied = read_only
        .admit(&CallRef {
            name: "pulse_control",
            arguments: &plan,
        })
        .unwrap_err();
    assert_eq!(denied.code, DenialCode::ToolNotOffered);
    let edit = json!({"action": "write", "path": "/etc/hosts", "target_host": "h"});
    let denied = controlled
        .admit(&CallRef {
            name: "pulse_file_edit",
            arguments: &edit,
        })
        .unwrap_err();
    assert_eq!(denied.code, DenialCode::ToolNotOffered);
}

#[test]
fn unknown_or_missing_discriminator_fails_closed() {
    for &profile in ExecutionProfile::ALL {
        let policy = policy(profile);
        for args in [
            json!({"action": "delete"}),
            json!({}),
            json!({"action": 7}),
            json!({"action": ["exec"]}),
        ] {
            let denied = policy
                .admit(&CallRef {
                    name: "pulse_read",
                    arguments: &args,
                })
                .unwrap_err();
            assert_eq!(
                denied.code,
                DenialCode::MutationNotPermitted,
                "{} {args}",
                profile.label()
            );
        }
    }
    let autonomous = policy(ExecutionProfile::InteractiveAssistant {
        control: ControlLevel::Autonomous,
    });
    let args = json!({"type": "host", "resource_id": "vm-101", "action": "stop"});
    let denied = autonomous
        .admit(&CallRef {
            name: "pulse_control",
            arguments: &args,
        })
        .unwrap_err();
    assert_eq!(denied.code, DenialCode::MutationNotPermitted);
}

#[test]
fn undeclared_fields_wrong_types_and_wrong_enum_values_are_invalid_arguments() {
    let watch = policy(ExecutionProfile::PatrolDetection);
    let mut finding = json!({
        "key": "cpu-high", "severity": "critical", "category": "performance",
        "resource_id": "vm-101", "resource_name": "web", "resource_type": "vm",
        "title": "t", "description": "d", "recommendation": "r", "evidence": "e",
    });
    assert!(
        watch
            .admit(&CallRef {
                name: "patrol_report_finding",
                arguments: &finding
            })
            .is_ok()
    );
    let cases = [
        ("severity", json!("info")),
        ("category", json!("vibes")),
        ("key", json!("Not Kebab")),
        ("title", json!(42)),
        ("approve_action", json!(true)),
    ];
    for (field, value) in cases {
        let mut args = finding.clone();
        args[field] = value;
        let denied = watch
            .admit(&CallRef {
                name: "patrol_report_finding",
                arguments: &args,
            })
            .unwrap_err();
        assert_eq!(denied.code, DenialCode::InvalidArguments, "{field}");
        assert!(
            !denied.message.contains("Not Kebab"),
            "never echoes values: {}",
            denied.message
        );
    }
    finding.as_object_mut().unwrap().remove("evidence");
    let denied = watch
        .admit(&CallRef {
            name: "patrol_report_finding",
            arguments: &finding,
        })
        .unwrap_err();
    assert_eq!(denied.code, DenialCode::InvalidArguments);
    assert!(denied.message.contains("evidence"), "{}", denied.message);

    let assess = json!({"finding_id": "f1", "verdict": "fixed", "evidence": "e", "reason": "r"});
    let denied = watch
        .admit(&CallRef {
            name: "patrol_assess_finding",
            arguments: &assess,
        })
        .unwrap_err();
    assert_eq!(denied.code, DenialCode::InvalidArguments);
    let extra = json!({"action": "search", "sudo": true});
    let denied = watch
        .admit(&CallRef {
            name: "pulse_query",
            arguments: &extra,
        })
        .unwrap_err();
    assert_eq!(denied.code, DenialCode::InvalidArguments);
    assert!(denied.message.contains("sudo"), "{}", denied.message);
    assert!(
        denied
            .model_message()
            .starts_with("denied (invalid_arguments)")
    );
    let not_object = json!(["action", "search"]);
    let denied = watch
        .admit(&CallRef {
            name: "pulse_query",
            arguments: &not_object,
        })
        .unwrap_err();
    assert_eq!(denied.code, DenialCode::InvalidArguments);
}

#[test]
fn second_identical_denied_call_is_terminal() {
    let mut handlers = RecordingHandlers::default();
    let mut gate = RunGate::new(policy(ExecutionProfile::PatrolDetection));
    let first = json!({"type": "resource", "resource_id": "vm-101", "action": "reboot"});
    // Same content, different key order: canonically equal.
    let same: Value =
        serde_json::from_str(r#"{"action":"reboot","resource_id":"vm-101","type":"resource"}"#)
            .unwrap();
    let other = json!({"type": "resource", "resource_id": "vm-102", "action": "reboot"});
    assert!(matches!(
        handlers.dispatch(&mut gate, "pulse_control", &first),
        Err(GateError::Denied(_))
    ));
    assert!(matches!(
        handlers.dispatch(&mut gate, "pulse_control", &other),
        Err(GateError::Denied(_))
    ));
    match handlers.dispatch(&mut gate, "pulse_control", &same) {
        Err(GateError::Terminal(t)) => {
            assert_eq!(t.code, DenialCode::ToolNotOffered);
            assert_eq!(t.terminal_code, TerminalDenial::CODE);
            assert_eq!(t.tool, "pulse_control");
        }
        other => panic!("expected terminal, got {other:?}"),
    }
    assert!(handlers.invoked.is_empty());
}

#[test]
fn patrol_get_findings_once_per_watch_run_and_one_proposal_per_investigation() {
    let mut handlers = RecordingHandlers::default();
    let mut gate = RunGate::new(policy(ExecutionProfile::PatrolDetection));
    let args = json!({});
    assert!(
        handlers
            .dispatch(&mut gate, "patrol_get_findings", &args)
            .is_ok()
    );
    match handlers.dispatch(&mut gate, "patrol_get_findings", &args) {
        Err(GateError::Denied(d)) => assert_eq!(d.code, DenialCode::CallLimitReached),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        handlers.dispatch(&mut gate, "patrol_get_findings", &args),
        Err(GateError::Terminal(_))
    ));
    assert_eq!(handlers.invoked, ["patrol_get_findings"]);

    let mut gate = RunGate::new(policy(ExecutionProfile::PatrolInvestigation));
    let proposal = json!({"resource_id": "vm-1", "causal_resource_id": "vm-1", "capability_name": "restart", "reason": "r"});
    assert!(
        gate.admit(&CallRef {
            name: "patrol_propose_action",
            arguments: &proposal
        })
        .is_ok()
    );
    assert!(matches!(
        gate.admit(&CallRef { name: "patrol_propose_action", arguments: &proposal }),
        Err(GateError::Denied(d)) if d.code == DenialCode::CallLimitReached
    ));
}

#[test]
fn policies_are_built_once() {
    for &profile in ExecutionProfile::ALL {
        assert!(Arc::ptr_eq(&policy(profile), &policy(profile)));
    }
}

#[test]
fn denial_codes_are_stable() {
    let codes: Vec<Value> = DenialCode::ALL
        .iter()
        .map(|c| serde_json::to_value(c).unwrap())
        .collect();
    assert_eq!(
        codes,
        [
            json!("tool_not_offered"),
            json!("invalid_arguments"),
            json!("mutation_not_permitted"),
            json!("call_limit_reached")
        ]
    );
    for code in DenialCode::ALL {
        assert_eq!(serde_json::to_value(code).unwrap(), json!(code.as_str()));
    }
}

#[test]
fn offered_tool_lists_snapshot() {
    for &profile in ExecutionProfile::ALL {
        let offered: Vec<_> = policy(profile).offered_tools().cloned().collect();
        insta::assert_json_snapshot!(format!("offered_{}", profile.label()), offered);
    }
}
