//! The one tool policy: per execution profile it builds the tool list offered to the model and
//! admits (or denies) each call before any handler runs. Offer and admission share the same
//! descriptors and the same compiled schemas, so they cannot disagree.

use std::sync::{Arc, OnceLock};

use jsonschema::error::ValidationErrorKind;
use serde::Serialize;
use serde_json::Value;

use crate::invocation::{InvocationClass, InvocationDescriptor, InvocationKind, MutationTarget};
use crate::profile::ExecutionProfile;
use crate::tools::{CatalogueError, ToolFamily, ToolName, check_catalogue};

/// Longest tool name echoed back in a denial (model-supplied names are untrusted).
const MAX_ECHOED_NAME: usize = 64;
/// Most schema violations listed in one denial message.
const MAX_LISTED_VIOLATIONS: usize = 5;

/// A call the model asked for, from whichever surface carries it.
pub trait ProposedCall {
    fn tool_name(&self) -> &str;
    fn tool_arguments(&self) -> &Value;
}

/// A borrowed call, for surfaces without their own call type.
#[derive(Debug, Clone, Copy)]
pub struct CallRef<'a> {
    pub name: &'a str,
    pub arguments: &'a Value,
}

impl ProposedCall for CallRef<'_> {
    fn tool_name(&self) -> &str {
        self.name
    }
    fn tool_arguments(&self) -> &Value {
        self.arguments
    }
}

/// A tool as offered to the model: name, description and the projected schema.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OfferedTool {
    pub name: &'static str,
    pub description: &'static str,
    pub parameters: Value,
}

/// Why a call was denied. Stable wire codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DenialCode {
    /// The name is not a tool offered in this run (unknown, legacy, or not in this profile).
    ToolNotOffered,
    /// The arguments do not satisfy the offered schema (undeclared field, wrong type or value).
    InvalidArguments,
    /// The invocation would mutate something this profile may not mutate, or its discriminator
    /// value is missing or unknown (fail closed).
    MutationNotPermitted,
    /// The tool may be called only a bounded number of times per run and that bound is reached.
    CallLimitReached,
}

impl DenialCode {
    pub const ALL: &'static [DenialCode] = &[
        Self::ToolNotOffered,
        Self::InvalidArguments,
        Self::MutationNotPermitted,
        Self::CallLimitReached,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::ToolNotOffered => "tool_not_offered",
            Self::InvalidArguments => "invalid_arguments",
            Self::MutationNotPermitted => "mutation_not_permitted",
            Self::CallLimitReached => "call_limit_reached",
        }
    }
}

impl std::fmt::Display for DenialCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A denied call: the handler did not run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("tool call {tool} denied ({code}): {message}")]
pub struct Denial {
    pub code: DenialCode,
    /// The requested name, truncated.
    pub tool: String,
    /// Model-facing explanation; never echoes argument values.
    pub message: String,
}

impl Denial {
    pub(crate) fn new(code: DenialCode, tool: &str, message: impl Into<String>) -> Self {
        Self {
            code,
            tool: truncate(tool, MAX_ECHOED_NAME),
            message: message.into(),
        }
    }

    /// The text returned to the model as the call's error result.
    pub fn model_message(&self) -> String {
        format!(
            "denied ({}): {}. The call did not run; do not repeat it unchanged.",
            self.code, self.message
        )
    }
}

/// A call that passed admission: it may be dispatched to its handler.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AdmittedCall {
    pub tool: ToolName,
    pub class: InvocationClass,
    /// The discriminator value, for mixed tools.
    pub discriminator: Option<&'static str>,
}

/// The policy could not be built (the catalogue is inconsistent or a schema does not compile).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error(transparent)]
    Catalogue(#[from] CatalogueError),
    #[error("tool {tool}: schema does not compile: {reason}")]
    Schema { tool: ToolName, reason: String },
}

#[derive(Debug)]
struct OfferedEntry {
    tool: ToolName,
    offered: OfferedTool,
    validator: ArgumentSchema,
}

/// A compiled argument schema: the one check of a call's arguments against what was offered.
/// The policy holds one per offered tool; a surface that offers a tool outside the catalogue
/// (the provider preflight's) compiles its schema here, so its calls get the same check.
#[derive(Debug)]
pub struct ArgumentSchema {
    validator: jsonschema::Validator,
}

impl ArgumentSchema {
    /// Compiles `schema` (formats are not validated); the error is the compiler's reason.
    pub fn compile(schema: &Value) -> Result<Self, String> {
        jsonschema::options()
            .should_validate_formats(false)
            .build(schema)
            .map(|validator| Self { validator })
            .map_err(|e| e.to_string())
    }

    /// What is wrong with `arguments`, at most a few violations; empty when they are valid.
    pub fn violations(&self, arguments: &Value) -> Vec<String> {
        self.validator
            .iter_errors(arguments)
            .take(MAX_LISTED_VIOLATIONS)
            .map(|error| describe_violation(&error))
            .collect()
    }
}

/// What the model is offered and may run under one execution profile.
#[derive(Debug)]
pub struct ToolPolicy {
    profile: ExecutionProfile,
    entries: Vec<OfferedEntry>,
}

type CachedPolicy = OnceLock<Result<Arc<ToolPolicy>, PolicyError>>;
static POLICIES: [CachedPolicy; 5] = [const { OnceLock::new() }; 5];

impl ToolPolicy {
    /// The policy of a profile. Built (schemas projected and compiled) once per process.
    pub fn for_profile(profile: ExecutionProfile) -> Result<Arc<ToolPolicy>, PolicyError> {
        POLICIES[profile.index()]
            .get_or_init(|| Self::build(profile).map(Arc::new))
            .clone()
    }

    fn build(profile: ExecutionProfile) -> Result<ToolPolicy, PolicyError> {
        check_catalogue()?;
        let mut entries = Vec::new();
        for &tool in ToolName::ALL {
            let Some(parameters) = project_schema(profile, tool) else {
                continue;
            };
            let validator = ArgumentSchema::compile(&parameters)
                .map_err(|reason| PolicyError::Schema { tool, reason })?;
            entries.push(OfferedEntry {
                tool,
                offered: OfferedTool {
                    name: tool.wire_name(),
                    description: tool.description(),
                    parameters,
                },
                validator,
            });
        }
        Ok(ToolPolicy { profile, entries })
    }

    /// A policy of `profile` that offers no tool and so admits no call (fail closed): for turns
    /// that may only answer in text.
    pub fn offering_nothing(profile: ExecutionProfile) -> Arc<ToolPolicy> {
        Arc::new(ToolPolicy {
            profile,
            entries: Vec::new(),
        })
    }

    /// A policy of `profile` offering only `tools`, in exposure order. A tool listed with
    /// discriminator values is offered (and admitted) with only those of its permitted values;
    /// with none, all its permitted values. A tool the profile does not permit at all is not
    /// offered. For runs and turns that expose part of a profile (the Watch detection tools, its
    /// final decision and repair turns).
    pub fn narrowed(
        profile: ExecutionProfile,
        tools: &[(ToolName, &[&str])],
    ) -> Result<Arc<ToolPolicy>, PolicyError> {
        let all: Vec<(ToolName, &[&str], &[&str])> = tools
            .iter()
            .map(|(t, cases)| (*t, *cases, &[][..]))
            .collect();
        Self::narrowed_properties(profile, &all)
    }

    /// [`ToolPolicy::narrowed`], where a tool listed with property names is offered (and
    /// admitted) with only those properties and its required ones: the arguments the surface's
    /// handler reads. With none, all its properties. The shared schema is not changed.
    pub fn narrowed_properties(
        profile: ExecutionProfile,
        tools: &[(ToolName, &[&str], &[&str])],
    ) -> Result<Arc<ToolPolicy>, PolicyError> {
        Self::narrowed_projection(profile, tools, &|_, _| None)
    }

    /// [`ToolPolicy::narrowed_properties`] in a surface's own wording: `project` may edit each
    /// tool's offered schema (drop annotations, narrow an enum to what its handler serves) and
    /// return a description to offer instead of the canonical one. It runs before the narrowing
    /// and the compile, so offer and admission still agree and it cannot widen a discriminator
    /// past the profile's permitted values or the listed ones.
    pub fn narrowed_projection(
        profile: ExecutionProfile,
        tools: &[(ToolName, &[&str], &[&str])],
        project: &dyn Fn(ToolName, &mut Value) -> Option<&'static str>,
    ) -> Result<Arc<ToolPolicy>, PolicyError> {
        check_catalogue()?;
        let mut entries = Vec::new();
        for &tool in ToolName::ALL {
            let Some((_, cases, kept)) = tools.iter().find(|(t, _, _)| *t == tool) else {
                continue;
            };
            let Some(mut parameters) = project_schema(profile, tool) else {
                continue;
            };
            let description = project(tool, &mut parameters).unwrap_or(tool.description());
            if parameters.get("additionalProperties") != Some(&Value::Bool(false)) {
                return Err(PolicyError::Schema {
                    tool,
                    reason: "the projection opened the schema".to_owned(),
                });
            }
            if let InvocationDescriptor::Discriminator { argument, .. } = tool.descriptor() {
                let permitted = permitted_cases(profile, tool);
                let Some(values) = parameters
                    .get_mut("properties")
                    .and_then(|p| p.get_mut(argument))
                    .and_then(|a| a.get_mut("enum"))
                    .and_then(Value::as_array_mut)
                else {
                    return Err(PolicyError::Schema {
                        tool,
                        reason: format!("the projection removed the {argument} enum"),
                    });
                };
                values.retain(|v| v.as_str().is_some_and(|v| permitted.contains(&v)));
            }
            if !kept.is_empty() {
                let required: Vec<String> = parameters
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| {
                        r.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_owned)
                            .collect()
                    })
                    .unwrap_or_default();
                if let Some(props) = parameters
                    .get_mut("properties")
                    .and_then(Value::as_object_mut)
                {
                    props
                        .retain(|name, _| kept.contains(&name.as_str()) || required.contains(name));
                }
            }
            if let (InvocationDescriptor::Discriminator { argument, .. }, false) =
                (tool.descriptor(), cases.is_empty())
            {
                if let Some(values) = parameters
                    .get_mut("properties")
                    .and_then(|p| p.get_mut(argument))
                    .and_then(|a| a.get_mut("enum"))
                    .and_then(Value::as_array_mut)
                {
                    values.retain(|v| v.as_str().is_some_and(|v| cases.contains(&v)));
                    if values.is_empty() {
                        continue;
                    }
                }
            }
            let validator = ArgumentSchema::compile(&parameters)
                .map_err(|reason| PolicyError::Schema { tool, reason })?;
            entries.push(OfferedEntry {
                tool,
                offered: OfferedTool {
                    name: tool.wire_name(),
                    description,
                    parameters,
                },
                validator,
            });
        }
        Ok(Arc::new(ToolPolicy { profile, entries }))
    }

    pub fn profile(&self) -> ExecutionProfile {
        self.profile
    }

    /// The tools to offer the model, in exposure order.
    pub fn offered_tools(&self) -> impl Iterator<Item = &OfferedTool> {
        self.entries.iter().map(|e| &e.offered)
    }

    /// Whether a tool is offered in this profile.
    pub fn offers(&self, tool: ToolName) -> bool {
        self.entries.iter().any(|e| e.tool == tool)
    }

    /// How many times per run a tool may be called, when bounded.
    pub fn call_limit(&self, tool: ToolName) -> Option<u32> {
        match (self.profile, tool) {
            (ExecutionProfile::PatrolDetection, ToolName::PatrolGetFindings) => Some(1),
            (ExecutionProfile::PatrolInvestigation, ToolName::PatrolProposeAction) => Some(1),
            _ => None,
        }
    }

    /// Decides whether a call may run. Stateless; see [`crate::RunGate`] for per-run rules.
    pub fn admit<C: ProposedCall + ?Sized>(&self, call: &C) -> Result<AdmittedCall, Denial> {
        let name = call.tool_name();
        let arguments = call.tool_arguments();
        let Some(entry) = self.entries.iter().find(|e| e.offered.name == name) else {
            return Err(Denial::new(
                DenialCode::ToolNotOffered,
                name,
                "this tool is not offered in this run; use only the tools listed",
            ));
        };
        let tool = entry.tool;
        let descriptor = tool.descriptor();
        let discriminator = match descriptor {
            InvocationDescriptor::Static(_) => None,
            InvocationDescriptor::Discriminator { argument, cases } => {
                let value = arguments.get(argument).and_then(Value::as_str);
                let case = value.and_then(|v| cases.iter().find(|(c, _)| *c == v));
                match case {
                    Some((case, _)) => Some(*case),
                    None => {
                        return Err(Denial::new(
                            DenialCode::MutationNotPermitted,
                            name,
                            format!(
                                "argument {argument} is missing or not a known value; allowed here: {}",
                                permitted_cases(self.profile, tool).join(", ")
                            ),
                        ));
                    }
                }
            }
        };
        let class = descriptor.classify(arguments);
        if !permits(self.profile, tool, discriminator, class) {
            return Err(Denial::new(
                DenialCode::MutationNotPermitted,
                name,
                match discriminator {
                    Some(value) => format!(
                        "{} {}={value} is not permitted in this run",
                        tool.wire_name(),
                        descriptor.discriminator().unwrap_or_default()
                    ),
                    None => format!("{} is not permitted in this run", tool.wire_name()),
                },
            ));
        }
        let violations = entry.validator.violations(arguments);
        if !violations.is_empty() {
            return Err(Denial::new(
                DenialCode::InvalidArguments,
                name,
                format!(
                    "arguments do not match the tool schema: {}",
                    violations.join("; ")
                ),
            ));
        }
        Ok(AdmittedCall {
            tool,
            class,
            discriminator,
        })
    }
}

fn describe_violation(error: &jsonschema::ValidationError<'_>) -> String {
    let path = error.instance_path().as_str();
    let at = if path.is_empty() { "/" } else { path };
    match error.kind() {
        ValidationErrorKind::AdditionalProperties { unexpected } => {
            format!("undeclared field(s) {}", unexpected.join(", "))
        }
        ValidationErrorKind::Required { property } => match property.as_str() {
            Some(p) => format!("missing required field {p}"),
            None => "missing required field".to_owned(),
        },
        ValidationErrorKind::Enum { .. } => format!("{at}: value is not one of the allowed values"),
        kind => format!("{at}: violates {}", kind.keyword()),
    }
}

/// Whether this profile may run this invocation. The single authority rule.
fn permits(
    profile: ExecutionProfile,
    tool: ToolName,
    case: Option<&str>,
    class: InvocationClass,
) -> bool {
    let in_scope = matches!(
        (profile, tool.family()),
        (_, ToolFamily::Infrastructure)
            | (
                ExecutionProfile::InteractiveAssistant { .. },
                ToolFamily::Interaction
            )
            | (
                ExecutionProfile::PatrolDetection,
                ToolFamily::PatrolLifecycle
            )
            | (
                ExecutionProfile::PatrolInvestigation,
                ToolFamily::PatrolInvestigation
            )
    );
    if !in_scope {
        return false;
    }
    if class.kind == InvocationKind::UserInput && !profile.is_interactive() {
        return false;
    }
    match class.mutation {
        MutationTarget::None => true,
        MutationTarget::PulseState => {
            profile == ExecutionProfile::PatrolDetection
                && matches!(
                    tool,
                    ToolName::PatrolReportFinding
                        | ToolName::PatrolAssessFinding
                        | ToolName::PatrolClearSignal
                )
        }
        MutationTarget::Infrastructure => match profile {
            ExecutionProfile::InteractiveAssistant { control } => {
                control.allows_control_tools()
                    && tool == ToolName::PulseControl
                    && case == Some("resource")
            }
            ExecutionProfile::PatrolDetection | ExecutionProfile::PatrolInvestigation => false,
        },
    }
}

/// The discriminator values of a tool this profile permits (empty for static tools).
fn permitted_cases(profile: ExecutionProfile, tool: ToolName) -> Vec<&'static str> {
    match tool.descriptor() {
        InvocationDescriptor::Static(_) => Vec::new(),
        InvocationDescriptor::Discriminator { cases, .. } => cases
            .iter()
            .filter(|(case, class)| permits(profile, tool, Some(case), *class))
            .map(|(case, _)| *case)
            .collect(),
    }
}

/// The schema offered for a tool in a profile: forbidden discriminator values removed; `None`
/// when no invocation is permitted.
fn project_schema(profile: ExecutionProfile, tool: ToolName) -> Option<Value> {
    let mut schema = tool.schema();
    match tool.descriptor() {
        InvocationDescriptor::Static(class) => {
            permits(profile, tool, None, class).then_some(schema)
        }
        InvocationDescriptor::Discriminator { argument, .. } => {
            let permitted = permitted_cases(profile, tool);
            if permitted.is_empty() {
                return None;
            }
            let values = schema
                .get_mut("properties")
                .and_then(|p| p.get_mut(argument))
                .and_then(|a| a.get_mut("enum"))
                .and_then(Value::as_array_mut)?;
            values.retain(|v| v.as_str().is_some_and(|v| permitted.contains(&v)));
            Some(schema)
        }
    }
}

fn truncate(s: &str, max_chars: usize) -> String {
    match s.char_indices().nth(max_chars) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod offering_nothing_tests {
    use super::*;

    struct Call(&'static str, Value);

    impl ProposedCall for Call {
        fn tool_name(&self) -> &str {
            self.0
        }
        fn tool_arguments(&self) -> &Value {
            &self.1
        }
    }

    #[test]
    fn a_policy_offering_nothing_admits_nothing() {
        let full = ToolPolicy::for_profile(ExecutionProfile::PatrolDetection).expect("policy");
        let none = ToolPolicy::offering_nothing(ExecutionProfile::PatrolDetection);
        assert_eq!(none.offered_tools().count(), 0);
        for offered in full.offered_tools() {
            let call = Call(offered.name, Value::Object(Default::default()));
            let denial = none.admit(&call).expect_err("nothing is admitted");
            assert_eq!(denial.code, DenialCode::ToolNotOffered);
        }
    }
}

#[cfg(test)]
mod narrowed_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_narrowed_policy_offers_and_admits_only_its_part() {
        let policy = ToolPolicy::narrowed(
            ExecutionProfile::PatrolDetection,
            &[
                (ToolName::PulseRead, &["logs"]),
                (ToolName::PatrolAssessFinding, &[]),
                (ToolName::PulseControl, &[]),
            ],
        )
        .expect("policy");
        let names: Vec<&str> = policy.offered_tools().map(|t| t.name).collect();
        // pulse_control is not permitted in detection at all, so it is not offered.
        assert_eq!(names, ["pulse_read", "patrol_assess_finding"]);
        let read = policy.offered_tools().next().expect("pulse_read");
        assert_eq!(
            read.parameters["properties"]["action"]["enum"],
            json!(["logs"])
        );
        let logs = CallRef {
            name: "pulse_read",
            arguments: &json!({"action": "logs", "resource_id": "service:h:web"}),
        };
        assert!(policy.admit(&logs).is_ok());
        let exec = CallRef {
            name: "pulse_read",
            arguments: &json!({"action": "exec", "command": "uptime"}),
        };
        assert_eq!(
            policy.admit(&exec).expect_err("exec is not offered").code,
            DenialCode::InvalidArguments
        );
        let query = CallRef {
            name: "pulse_query",
            arguments: &json!({"action": "list"}),
        };
        assert_eq!(
            policy.admit(&query).expect_err("not in this part").code,
            DenialCode::ToolNotOffered
        );
    }

    #[test]
    fn narrowed_properties_offer_and_admit_only_the_listed_and_required_arguments() {
        let policy = ToolPolicy::narrowed_properties(
            ExecutionProfile::PatrolDetection,
            &[
                (ToolName::PulseRead, &["logs"], &["resource_id", "lines"]),
                (ToolName::PatrolAssessFinding, &[], &[]),
            ],
        )
        .expect("policy");
        let offered: Vec<&OfferedTool> = policy.offered_tools().collect();
        let props: Vec<&String> = offered[0].parameters["properties"]
            .as_object()
            .expect("properties")
            .keys()
            .collect();
        // `action` is required, so it stays though it was not listed.
        assert_eq!(props, ["action", "lines", "resource_id"]);
        assert_eq!(
            offered[1].parameters,
            project_schema(
                ExecutionProfile::PatrolDetection,
                ToolName::PatrolAssessFinding
            )
            .expect("permitted")
        );
        let grep = CallRef {
            name: "pulse_read",
            arguments: &json!({"action": "logs", "grep": "error"}),
        };
        assert_eq!(
            policy.admit(&grep).expect_err("grep is not offered").code,
            DenialCode::InvalidArguments
        );
        // The shared schema keeps every argument for other surfaces.
        assert!(ToolName::PulseRead.schema()["properties"]["grep"].is_object());
    }

    #[test]
    fn a_projection_rewords_the_offer_but_cannot_widen_or_open_it() {
        let tools: &[(ToolName, &[&str], &[&str])] = &[
            (ToolName::PulseRead, &["logs"], &["resource_id"]),
            (ToolName::PatrolAssessFinding, &[], &[]),
        ];
        let policy = ToolPolicy::narrowed_projection(
            ExecutionProfile::PatrolDetection,
            tools,
            &|tool, schema| {
                if tool != ToolName::PulseRead {
                    return None;
                }
                // Tries to offer exec again and to make resource_id required.
                schema["properties"]["action"]["enum"] = json!(["exec", "logs"]);
                schema["required"] = json!(["action", "resource_id"]);
                Some("Read logs.")
            },
        )
        .expect("policy");
        let offered: Vec<&OfferedTool> = policy.offered_tools().collect();
        assert_eq!(offered[0].description, "Read logs.");
        assert_eq!(
            offered[0].parameters["properties"]["action"]["enum"],
            json!(["logs"])
        );
        assert_eq!(
            offered[1].description,
            ToolName::PatrolAssessFinding.description()
        );
        let exec = CallRef {
            name: "pulse_read",
            arguments: &json!({"action": "exec", "resource_id": "service:h:web"}),
        };
        assert_eq!(
            policy
                .admit(&exec)
                .expect_err("exec stays narrowed out")
                .code,
            DenialCode::InvalidArguments
        );
        let no_id = CallRef {
            name: "pulse_read",
            arguments: &json!({"action": "logs"}),
        };
        assert_eq!(
            policy
                .admit(&no_id)
                .expect_err("the projection's schema is the admitted one")
                .code,
            DenialCode::InvalidArguments
        );

        let unenumerated = ToolPolicy::narrowed_projection(
            ExecutionProfile::PatrolDetection,
            tools,
            &|_, schema| {
                if let Some(action) = schema["properties"].get_mut("action") {
                    *action = json!({"type": "string"});
                }
                None
            },
        );
        assert!(matches!(unenumerated, Err(PolicyError::Schema { .. })));
        let opened = ToolPolicy::narrowed_projection(
            ExecutionProfile::PatrolDetection,
            tools,
            &|_, schema| {
                schema["additionalProperties"] = json!(true);
                None
            },
        );
        assert!(matches!(opened, Err(PolicyError::Schema { .. })));
    }
}
