//! Semantic validation of a decoded manifest (what the JSON Schema cannot say).
//!
//! The strict serde decode in [`crate::manifest`] already refused unknown fields and wrong
//! types; [`problems`] checks everything that needs the whole manifest at once: references
//! between resources, what each lab driver can build, inject and probe, the track's required
//! blocks, durations, gates, budgets, and the statistical floor of the qualification profile.
//! Every problem is one line `<field path>: <reason>`, so an author can fix all of them in one
//! pass.
//!
//! Every field and value upstream's schema allows passes here. What a live lab cannot run
//! (pulling an image, `disconnect_network`, a `replay` lab, ...) is not a manifest error: the
//! runner refuses it with `unsupported_by_lab` ([`crate::lab::unrunnable`]).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::manifest::{
    Decision, Fault, InjectorKind, LabDriver, Manifest, Operator, PatrolMode, Predicate, Program,
    Resource, ResourceKind, RestartPolicy, SCHEMA_VERSION, Track,
};
use crate::placeholder::{self, Placeholder};

/// The 95% Wilson lower bound a perfect qualification sample must reach.
pub const QUALIFICATION_CONFIDENCE_FLOOR: f64 = 0.85;

/// The largest sample [`min_qualification_repeat`] searches.
const REPEAT_SEARCH_LIMIT: u32 = 10_000;

/// The smallest `n` whose perfect sample `n/n` has a 95% Wilson lower bound of at least
/// [`QUALIFICATION_CONFIDENCE_FLOOR`] (22). A qualification profile below it could never pass
/// the launch gate, even with every run passing.
pub fn min_qualification_repeat() -> u32 {
    (1..=REPEAT_SEARCH_LIMIT)
        .find(|&n| crate::wilson::lower_bound(n, n) >= QUALIFICATION_CONFIDENCE_FLOOR)
        .unwrap_or(REPEAT_SEARCH_LIMIT)
}

/// The reason a too-small qualification count is refused.
pub fn qualification_repeat_reason() -> String {
    format!(
        "{} is the smallest perfect sample whose 95% Wilson lower bound reaches {}",
        min_qualification_repeat(),
        QUALIFICATION_CONFIDENCE_FLOOR
    )
}

/// Verification outcomes an action's lifecycle can end in.
const VERIFICATION_STATUSES: &[&str] = &["unknown", "verified", "unverified", "failed"];

/// The probe every driver shares: the lab's inventory compared with the pre-run one.
pub const PROBE_INVENTORY_SAME_AS_PRE: &str = "inventory.same_as_pre";

/// The kind of value a probe reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeValue {
    /// One of these strings.
    Word(&'static [&'static str]),
    Bool,
    /// A non-negative number.
    Number,
}

/// A probe a driver can evaluate.
#[derive(Debug, Clone, Copy)]
pub struct ProbeSpec {
    pub name: &'static str,
    pub value: ProbeValue,
    /// The target must have `scratch_storage`.
    pub needs_scratch: bool,
}

const PROCESS_PROBES: &[ProbeSpec] = &[
    ProbeSpec {
        name: "service.health",
        value: ProbeValue::Word(&["healthy", "unhealthy"]),
        needs_scratch: false,
    },
    ProbeSpec {
        name: "service.running",
        value: ProbeValue::Bool,
        needs_scratch: false,
    },
    ProbeSpec {
        name: "service.start_count",
        value: ProbeValue::Number,
        needs_scratch: false,
    },
    ProbeSpec {
        name: "scratch.available_bytes",
        value: ProbeValue::Number,
        needs_scratch: true,
    },
    ProbeSpec {
        name: PROBE_INVENTORY_SAME_AS_PRE,
        value: ProbeValue::Bool,
        needs_scratch: false,
    },
];

const DOCKER_PROBES: &[ProbeSpec] = &[
    ProbeSpec {
        name: "docker.health",
        value: ProbeValue::Word(&["healthy", "unhealthy", "starting", "none"]),
        needs_scratch: false,
    },
    ProbeSpec {
        name: "docker.running",
        value: ProbeValue::Bool,
        needs_scratch: false,
    },
    ProbeSpec {
        name: "docker.restart_count",
        value: ProbeValue::Number,
        needs_scratch: false,
    },
    ProbeSpec {
        name: "docker.scratch_available_bytes",
        value: ProbeValue::Number,
        needs_scratch: true,
    },
    ProbeSpec {
        name: PROBE_INVENTORY_SAME_AS_PRE,
        value: ProbeValue::Bool,
        needs_scratch: false,
    },
];

const PROXMOX_PROBES: &[ProbeSpec] = &[
    ProbeSpec {
        name: "pve.guest_status",
        value: ProbeValue::Word(&["running", "stopped"]),
        needs_scratch: false,
    },
    ProbeSpec {
        name: "pve.quorate",
        value: ProbeValue::Bool,
        needs_scratch: false,
    },
    ProbeSpec {
        name: "pve.storage_used_percent",
        value: ProbeValue::Number,
        needs_scratch: false,
    },
    ProbeSpec {
        name: "pve.backup_age_hours",
        value: ProbeValue::Number,
        needs_scratch: false,
    },
    ProbeSpec {
        name: PROBE_INVENTORY_SAME_AS_PRE,
        value: ProbeValue::Bool,
        needs_scratch: false,
    },
];

/// The probes `driver` evaluates. A replay lab reproduces recorded Docker runs, so it reads
/// Docker manifests.
pub fn probes_for(driver: LabDriver) -> &'static [ProbeSpec] {
    match driver {
        LabDriver::Process => PROCESS_PROBES,
        LabDriver::Proxmox => PROXMOX_PROBES,
        LabDriver::Docker | LabDriver::Replay => DOCKER_PROBES,
    }
}

/// Every rule the manifest breaks, each naming the field and the reason; empty when valid.
pub fn problems(manifest: &Manifest) -> Vec<String> {
    let mut check = Checker {
        manifest,
        aliases: manifest
            .resources
            .iter()
            .map(|r| r.alias.as_str())
            .collect(),
        problems: Vec::new(),
    };
    check.identity();
    check.repeat();
    check.resources();
    check.predicates();
    check.faults();
    check.negative_controls();
    check.collection_and_patrol();
    check.track_blocks();
    check.budgets_and_gates();
    check.canonical();
    check.problems
}

struct Checker<'m> {
    manifest: &'m Manifest,
    aliases: BTreeSet<&'m str>,
    problems: Vec<String>,
}

impl<'m> Checker<'m> {
    fn push(&mut self, field: impl AsRef<str>, reason: impl AsRef<str>) {
        self.problems
            .push(format!("{}: {}", field.as_ref(), reason.as_ref()));
    }

    fn driver(&self) -> LabDriver {
        self.manifest.lab.driver
    }

    fn resource(&self, alias: &str) -> Option<&'m Resource> {
        self.manifest.resource(alias)
    }

    /// `field` must name a resource alias.
    fn reference(&mut self, field: impl AsRef<str>, alias: &str) -> Option<&'m Resource> {
        let found = self.resource(alias);
        if found.is_none() {
            let known = self.aliases.iter().copied().collect::<Vec<_>>().join(", ");
            self.push(
                field,
                format!("'{alias}' is not a resource alias (aliases: {known})"),
            );
        }
        found
    }

    fn duration(&mut self, field: impl AsRef<str>, text: &str) {
        match crate::duration::parse(text) {
            None => self.push(
                field,
                format!("'{text}' is not a duration (use 500ms, 30s, 5m, 1h, 1m30s or 1.5h)"),
            ),
            Some(d) if d.is_zero() => self.push(field, "must be longer than zero"),
            Some(_) => {}
        }
    }

    fn not_empty(&mut self, field: &str, text: &str) {
        if text.trim().is_empty() {
            self.push(field, "must not be empty");
        }
    }

    fn identity(&mut self) {
        let m = self.manifest;
        if m.schema_version != SCHEMA_VERSION {
            self.push(
                "schema_version",
                format!("must be '{SCHEMA_VERSION}', not '{}'", m.schema_version),
            );
        }
        if !id_is_well_formed(&m.id) {
            self.push(
                "id",
                format!(
                    "'{}' must match ^[a-z0-9][a-z0-9._-]{{2,95}}$ (3 to 96 lowercase letters, digits, '.', '_' or '-')",
                    m.id
                ),
            );
        }
        let prefix = format!("{}.", m.track.as_str());
        if !m.id.starts_with(&prefix) {
            self.push(
                "id",
                format!(
                    "'{}' must start with '{prefix}' because the track is {}",
                    m.id,
                    m.track.as_str()
                ),
            );
        }
        if m.version < 1 {
            self.push("version", "must be at least 1");
        }
        self.not_empty("title", &m.title);
        self.not_empty("description", &m.description);
        self.not_empty("owner", &m.owner);
        self.not_empty("risk", &m.risk);
    }

    fn repeat(&mut self) {
        let r = self.manifest.repeat;
        if r.development < 1 {
            self.push("repeat.development", "must be at least 1");
        }
        if r.nightly < 1 {
            self.push("repeat.nightly", "must be at least 1");
        }
        let minimum = min_qualification_repeat();
        if r.qualification < minimum {
            self.push(
                "repeat.qualification",
                format!(
                    "{} is below {minimum}: {}",
                    r.qualification,
                    qualification_repeat_reason()
                ),
            );
        }
    }

    fn resources(&mut self) {
        let m = self.manifest;
        if m.resources.is_empty() {
            self.push("resources", "a scenario needs at least one resource");
        }
        self.not_empty("lab.profile", &m.lab.profile);
        match self.driver() {
            LabDriver::Proxmox => {
                if m.lab.allow_pull || m.lab.image.is_some() || m.lab.build.is_some() {
                    self.push(
                        "lab.image",
                        "the Proxmox lab runs no images: no image, build or allow_pull",
                    );
                }
                let clusters = m
                    .resources
                    .iter()
                    .filter(|r| r.kind == ResourceKind::Cluster)
                    .count();
                if clusters > 1 {
                    self.push("resources", "the Proxmox lab has one cluster");
                }
            }
            LabDriver::Process => {
                if m.lab.allow_pull {
                    self.push(
                        "lab.allow_pull",
                        "must be false: the process lab runs no images, so it pulls none",
                    );
                }
                if m.lab.image.is_some() {
                    self.push("lab.image", "the process lab runs no images");
                }
                if m.lab.build.is_some() {
                    self.push("lab.build", "the process lab builds no images");
                }
            }
            LabDriver::Docker | LabDriver::Replay => {
                if let Some(build) = &m.lab.build {
                    if m.lab.image.is_none() {
                        self.push("lab.build", "needs lab.image: the tag the build produces");
                    }
                    let path = std::path::Path::new(build);
                    if build.trim().is_empty()
                        || path.is_absolute()
                        || path
                            .components()
                            .any(|c| matches!(c, std::path::Component::ParentDir))
                    {
                        self.push(
                            "lab.build",
                            format!("'{build}' must be a relative path inside the catalogue"),
                        );
                    }
                }
            }
        }

        let mut seen = BTreeMap::new();
        for (i, resource) in m.resources.iter().enumerate() {
            let at = format!("resources[{i}]");
            if resource.alias.trim().is_empty() {
                self.push(format!("{at}.alias"), "must not be empty");
            } else if let Some(first) = seen.insert(resource.alias.as_str(), i) {
                self.push(
                    format!("{at}.alias"),
                    format!(
                        "'{}' is already the alias of resources[{first}]",
                        resource.alias
                    ),
                );
            }
            self.resource_name(&at, resource);
            if let Some(every) = &resource.health_every {
                self.duration(format!("{at}.health_every"), every);
            }
            if let Some(dependency) = &resource.depends_on {
                if dependency == &resource.alias {
                    self.push(
                        format!("{at}.depends_on"),
                        "a resource cannot depend on itself",
                    );
                } else {
                    self.reference(format!("{at}.depends_on"), dependency);
                }
            }
            match self.driver() {
                LabDriver::Process => self.process_resource(&at, resource),
                LabDriver::Proxmox => self.proxmox_resource(&at, resource),
                LabDriver::Docker | LabDriver::Replay => self.docker_resource(&at, resource),
            }
        }
    }

    /// A name holds a run placeholder (so every run's resources are its own) and no other.
    fn resource_name(&mut self, at: &str, resource: &Resource) {
        let field = format!("{at}.name");
        match placeholder::scan(&resource.name) {
            Err(error) => self.push(field, error.to_string()),
            Ok(found) => {
                if !found.contains(&Placeholder::Run) {
                    self.push(
                        &field,
                        format!(
                            "'{}' must contain {} so every run's resources are its own",
                            resource.name,
                            placeholder::run_placeholders_text()
                        ),
                    );
                }
                if found.iter().any(|p| *p != Placeholder::Run) {
                    self.push(
                        field,
                        format!(
                            "'{}': a name holds only {}; ${{port}} belongs in a Docker command or health check",
                            resource.name,
                            placeholder::run_placeholders_text()
                        ),
                    );
                }
            }
        }
    }

    fn process_resource(&mut self, at: &str, resource: &Resource) {
        if resource.kind != ResourceKind::Service {
            self.push(format!("{at}.kind"), "the process lab runs kind 'service'");
        }
        if resource.image.is_some() {
            self.push(format!("{at}.image"), "the process lab runs no images");
        }
        if !resource.command.is_empty() {
            self.push(
                format!("{at}.command"),
                "the process lab runs its own reviewed programs, so name one in 'program'",
            );
        }
        if !resource.healthcheck.is_empty() {
            self.push(
                format!("{at}.healthcheck"),
                "a process-lab program reports its own health",
            );
        }
        if resource.fault_volume {
            self.push(format!("{at}.fault_volume"), "is a Docker lab switch");
        }
        if let Some(restart) = &resource.restart {
            self.push(
                format!("{at}.restart"),
                format!(
                    "'{restart}' is a Docker restart policy, and the process lab always restarts"
                ),
            );
        }
        let Some(program) = resource.program else {
            self.push(
                format!("{at}.program"),
                "required in the process lab (worker, listener, client or writer)",
            );
            return;
        };
        match program {
            Program::Client => match &resource.depends_on {
                None => self.push(
                    format!("{at}.depends_on"),
                    "a client needs the alias of the listener it connects to",
                ),
                Some(dependency) => {
                    if let Some(target) = self.resource(dependency)
                        && target.program != Some(Program::Listener)
                    {
                        self.push(
                            format!("{at}.depends_on"),
                            format!("'{dependency}' must be a listener"),
                        );
                    }
                }
            },
            _ => {
                if resource.depends_on.is_some() {
                    self.push(
                        format!("{at}.depends_on"),
                        "only a client depends on another service",
                    );
                }
            }
        }
        match (program, resource.scratch_storage) {
            (Program::Writer, false) => self.push(
                format!("{at}.scratch_storage"),
                "a writer needs its scratch area (scratch_storage: true)",
            ),
            (Program::Writer, true) | (_, false) => {}
            (_, true) => self.push(
                format!("{at}.scratch_storage"),
                "only a writer has a scratch area",
            ),
        }
    }

    fn proxmox_resource(&mut self, at: &str, resource: &Resource) {
        if !matches!(
            resource.kind,
            ResourceKind::Guest | ResourceKind::Storage | ResourceKind::Cluster
        ) {
            self.push(
                format!("{at}.kind"),
                "the Proxmox lab has kinds 'guest', 'storage' and 'cluster'",
            );
        }
        let docker_or_process = resource.image.is_some()
            || !resource.command.is_empty()
            || !resource.healthcheck.is_empty()
            || resource.restart.is_some()
            || resource.health_every.is_some()
            || resource.fault_volume
            || resource.program.is_some()
            || resource.depends_on.is_some()
            || resource.scratch_storage
            || !resource.labels.is_empty();
        if docker_or_process {
            self.push(
                at,
                "a Proxmox lab resource has only alias, kind and name; the fake cluster \
                 describes the rest",
            );
        }
    }

    fn docker_resource(&mut self, at: &str, resource: &Resource) {
        if resource.kind != ResourceKind::Container {
            self.push(format!("{at}.kind"), "the Docker lab runs kind 'container'");
        }
        if resource.program.is_some() {
            self.push(
                format!("{at}.program"),
                "is a process-lab switch, and a container runs its 'command'",
            );
        }
        if resource.image.is_none() && self.manifest.lab.image.is_none() {
            self.push(
                format!("{at}.image"),
                "required unless lab.image names the image every container runs",
            );
        }
        if let Some(restart) = &resource.restart
            && RestartPolicy::parse(restart).is_none()
        {
            self.push(
                format!("{at}.restart"),
                format!(
                    "'{restart}' is not a restart policy ({})",
                    RestartPolicy::FORMS
                ),
            );
        }
        for (j, word) in resource
            .command
            .iter()
            .chain(resource.healthcheck.iter())
            .enumerate()
        {
            for alias in port_references(word) {
                if self.resource(alias).is_none() {
                    let field = if j < resource.command.len() {
                        format!("{at}.command[{j}]")
                    } else {
                        format!("{at}.healthcheck[{}]", j - resource.command.len())
                    };
                    self.push(field, format!("${{port:{alias}}} names no resource alias"));
                }
            }
        }
    }

    fn predicates(&mut self) {
        let m = self.manifest;
        for (i, p) in m.baseline.iter().enumerate() {
            self.predicate(&format!("baseline[{i}]"), p);
        }
        for (i, p) in m.teardown.predicates.iter().enumerate() {
            self.predicate(&format!("teardown.predicates[{i}]"), p);
        }
        if let Some(remediation) = &m.remediation {
            for (i, p) in remediation.postconditions.iter().enumerate() {
                self.predicate(&format!("remediation.postconditions[{i}]"), p);
            }
        }
        for (f, fault) in m.faults.iter().enumerate() {
            for (i, p) in fault.oracle.iter().enumerate() {
                self.predicate(&format!("faults[{f}].oracle[{i}]"), p);
            }
            for (i, p) in fault.revert_oracle.iter().enumerate() {
                self.predicate(&format!("faults[{f}].revert_oracle[{i}]"), p);
            }
        }
    }

    fn predicate(&mut self, at: &str, predicate: &Predicate) {
        let target = self.reference(format!("{at}.target"), &predicate.target);
        if let Some(timeout) = &predicate.timeout {
            self.duration(format!("{at}.timeout"), timeout);
        }
        let driver = self.driver();
        let Some(spec) = probes_for(driver)
            .iter()
            .find(|s| s.name == predicate.probe)
        else {
            let known = probes_for(driver)
                .iter()
                .map(|s| s.name)
                .collect::<Vec<_>>()
                .join(", ");
            self.push(
                format!("{at}.probe"),
                format!(
                    "'{}' is not a {} lab probe ({known})",
                    predicate.probe,
                    driver.as_str()
                ),
            );
            return;
        };
        if spec.needs_scratch
            && let Some(target) = target
            && !target.scratch_storage
        {
            self.push(
                format!("{at}.target"),
                format!(
                    "'{}' has no scratch area for probe {}",
                    target.alias, spec.name
                ),
            );
        }
        let value = &predicate.value;
        match predicate.operator {
            Operator::Eq | Operator::NotEq => {
                if let Some(reason) = value_mismatch(spec, value) {
                    self.push(format!("{at}.value"), reason);
                }
            }
            Operator::Gte | Operator::Lte | Operator::Gt | Operator::Lt => {
                if !value.is_number() {
                    self.push(
                        format!("{at}.value"),
                        "a gte/lte/gt/lt comparison needs a number",
                    );
                } else if spec.value != ProbeValue::Number {
                    self.push(
                        format!("{at}.operator"),
                        format!("probe {} does not report a number", spec.name),
                    );
                }
            }
            Operator::In => match value.as_array() {
                None => self.push(format!("{at}.value"), "operator 'in' needs an array"),
                Some(items) if items.is_empty() => self.push(
                    format!("{at}.value"),
                    "operator 'in' needs at least one value",
                ),
                Some(items) => {
                    for (k, item) in items.iter().enumerate() {
                        if let Some(reason) = value_mismatch(spec, item) {
                            self.push(format!("{at}.value[{k}]"), reason);
                        }
                    }
                }
            },
        }
    }

    fn faults(&mut self) {
        let m = self.manifest;
        let mut ids = BTreeMap::new();
        for (f, fault) in m.faults.iter().enumerate() {
            let at = format!("faults[{f}]");
            if fault.id.trim().is_empty() {
                self.push(format!("{at}.id"), "must not be empty");
            } else if let Some(first) = ids.insert(fault.id.as_str(), f) {
                self.push(
                    format!("{at}.id"),
                    format!("'{}' is already the id of faults[{first}]", fault.id),
                );
            }
            if fault.causal_group.trim().is_empty() {
                self.push(format!("{at}.causal_group"), "must not be empty");
            }
            self.reference(format!("{at}.target"), &fault.target);
            if let Some(within) = &fault.detect_within {
                self.duration(format!("{at}.detect_within"), within);
            }
            if fault.oracle.is_empty() {
                self.push(
                    format!("{at}.oracle"),
                    "a fault needs at least one oracle predicate: the lab, not Patrol, confirms it",
                );
            }
            for (i, alias) in fault.related_resources.iter().enumerate() {
                self.reference(format!("{at}.related_resources[{i}]"), alias);
            }
            self.injector(&at, fault);
            self.expected_finding(&at, fault);
        }
    }

    fn injector(&mut self, at: &str, fault: &Fault) {
        let injector = &fault.injector;
        let Some(resource) = self.reference(format!("{at}.injector.resource"), &injector.resource)
        else {
            return;
        };
        let field = format!("{at}.injector.kind");
        let kind = injector.kind.as_str();
        match self.driver() {
            LabDriver::Process => {
                let program = resource.program;
                let fits = match injector.kind {
                    InjectorKind::MarkerEnable => {
                        matches!(program, Some(Program::Worker | Program::Client))
                    }
                    InjectorKind::Stop => program == Some(Program::Listener),
                    InjectorKind::Kill => true,
                    InjectorKind::CrashLoop => program == Some(Program::Worker),
                    InjectorKind::FillScratchStorage => {
                        program == Some(Program::Writer) && resource.scratch_storage
                    }
                    InjectorKind::DisconnectNetwork
                    | InjectorKind::HealthProcessStop
                    | InjectorKind::GuestStop
                    | InjectorKind::LoseQuorum
                    | InjectorKind::FillStorage
                    | InjectorKind::StaleBackup => {
                        self.push(field, format!("'{kind}' is not a process lab injector"));
                        return;
                    }
                };
                if !fits {
                    let needs = match injector.kind {
                        InjectorKind::MarkerEnable => "a worker or a client",
                        InjectorKind::Stop => "a listener",
                        InjectorKind::CrashLoop => "a worker",
                        _ => "a writer with scratch_storage",
                    };
                    self.push(
                        field,
                        format!(
                            "'{kind}' needs {needs}, but '{}' is {}",
                            resource.alias,
                            program.map_or("no program", program_name)
                        ),
                    );
                }
            }
            LabDriver::Proxmox => {
                let needs = match injector.kind {
                    InjectorKind::GuestStop | InjectorKind::StaleBackup => ResourceKind::Guest,
                    InjectorKind::FillStorage => ResourceKind::Storage,
                    InjectorKind::LoseQuorum => ResourceKind::Cluster,
                    _ => {
                        self.push(field, format!("'{kind}' is not a Proxmox lab injector"));
                        return;
                    }
                };
                if resource.kind != needs {
                    self.push(
                        field,
                        format!(
                            "'{kind}' acts on a {}, and '{}' is not one",
                            match needs {
                                ResourceKind::Guest => "guest",
                                ResourceKind::Storage => "storage",
                                _ => "cluster",
                            },
                            resource.alias
                        ),
                    );
                }
            }
            LabDriver::Docker | LabDriver::Replay => match injector.kind {
                InjectorKind::GuestStop
                | InjectorKind::LoseQuorum
                | InjectorKind::FillStorage
                | InjectorKind::StaleBackup => {
                    self.push(field, format!("'{kind}' is a Proxmox lab injector"));
                }
                InjectorKind::MarkerEnable | InjectorKind::CrashLoop if !resource.fault_volume => {
                    self.push(
                        field,
                        format!(
                            "'{kind}' needs fault_volume: true on '{}' (the marker lives there)",
                            resource.alias
                        ),
                    );
                }
                InjectorKind::FillScratchStorage if !resource.scratch_storage => {
                    self.push(
                        field,
                        format!(
                            "'{kind}' needs scratch_storage: true on '{}'",
                            resource.alias
                        ),
                    );
                }
                _ => {}
            },
        }
    }

    fn expected_finding(&mut self, at: &str, fault: &Fault) {
        let expected = &fault.expected_finding;
        let at = format!("{at}.expected_finding");
        self.reference(format!("{at}.resource"), &expected.resource);
        for (name, list) in [
            ("resource_types", &expected.resource_types),
            ("categories", &expected.categories),
            ("severities", &expected.severities),
        ] {
            if list.is_empty() || list.iter().any(|s| s.trim().is_empty()) {
                self.push(
                    format!("{at}.{name}"),
                    "needs at least one value and no empty one",
                );
            }
        }
        if expected.max_primary_findings < 1 {
            self.push(format!("{at}.max_primary_findings"), "must be at least 1");
        }
    }

    fn negative_controls(&mut self) {
        let m = self.manifest;
        let faulted: BTreeSet<&str> = m
            .faults
            .iter()
            .flat_map(|f| [f.target.as_str(), f.injector.resource.as_str()])
            .collect();
        for (i, control) in m.negative_controls.iter().enumerate() {
            let at = format!("negative_controls[{i}]");
            self.reference(format!("{at}.resource"), &control.resource);
            if faulted.contains(control.resource.as_str()) {
                self.push(
                    format!("{at}.resource"),
                    format!(
                        "'{}' is the target of a fault, so it cannot be a negative control",
                        control.resource
                    ),
                );
            }
            self.not_empty(&format!("{at}.reason"), &control.reason);
        }
        if m.faults.is_empty() && m.negative_controls.is_empty() {
            self.push(
                "negative_controls",
                "a scenario without faults must name at least one negative control",
            );
        }
    }

    fn collection_and_patrol(&mut self) {
        let m = self.manifest;
        if m.collection.sources.is_empty() {
            self.push("collection.sources", "needs at least one collection source");
        }
        self.duration(
            "collection.convergence_timeout",
            &m.collection.convergence_timeout,
        );
        self.duration("collection.poll_interval", &m.collection.poll_interval);
        self.duration("patrol.run_timeout", &m.patrol.run_timeout);
        if let Some(timeout) = &m.patrol.investigation_timeout {
            self.duration("patrol.investigation_timeout", timeout);
        }
        for (i, alias) in m.patrol.scope_resources.iter().enumerate() {
            self.reference(format!("patrol.scope_resources[{i}]"), alias);
        }
        if m.patrol.require_existing_reconfirmation && m.track != Track::Watch {
            self.push(
                "patrol.require_existing_reconfirmation",
                "only a watch scenario reconfirms an existing finding",
            );
        }
    }

    fn track_blocks(&mut self) {
        let m = self.manifest;
        let track = m.track.as_str();
        match (m.track, &m.investigation) {
            (Track::Watch, Some(_)) => self.push(
                "investigation",
                "a watch scenario has no investigation block",
            ),
            (Track::Investigation | Track::Remediation, None) => {
                self.push("investigation", format!("required for the {track} track"))
            }
            _ => {}
        }
        match (m.track, &m.remediation) {
            (Track::Remediation, None) => {
                self.push("remediation", "required for the remediation track")
            }
            (Track::Watch | Track::Investigation, Some(_)) => self.push(
                "remediation",
                format!("only the remediation track has a remediation block, not {track}"),
            ),
            _ => {}
        }
        if let Some(investigation) = &m.investigation {
            let groups = &investigation.required_summary_term_groups;
            if investigation.required_summary_terms.is_empty() && groups.is_empty() {
                self.push(
                    "investigation.required_summary_terms",
                    "name the terms the summary must hold (or required_summary_term_groups)",
                );
            }
            for (i, group) in groups.iter().enumerate() {
                if group.is_empty() || group.iter().any(|t| t.trim().is_empty()) {
                    self.push(
                        format!("investigation.required_summary_term_groups[{i}]"),
                        "a group needs at least one term and no empty one",
                    );
                }
            }
            if investigation.min_evidence_calls.is_none()
                && investigation.min_evidence_ids.is_none()
            {
                self.push(
                    "investigation",
                    "needs min_evidence_calls or min_evidence_ids",
                );
            }
            for (i, alias) in investigation.root_cause_resources.iter().enumerate() {
                self.reference(format!("investigation.root_cause_resources[{i}]"), alias);
            }
            for (i, alias) in investigation.affected_resources.iter().enumerate() {
                self.reference(format!("investigation.affected_resources[{i}]"), alias);
            }
        }
        if let Some(remediation) = &m.remediation {
            self.reference("remediation.action_target", &remediation.action_target);
            if remediation.expected_capabilities.is_empty() {
                self.push(
                    "remediation.expected_capabilities",
                    "name the capability the action must use",
                );
            }
            self.duration("remediation.action_timeout", &remediation.action_timeout);
            for (i, status) in remediation.allowed_verification_statuses.iter().enumerate() {
                if !VERIFICATION_STATUSES.contains(&status.as_str()) {
                    self.push(
                        format!("remediation.allowed_verification_statuses[{i}]"),
                        format!(
                            "'{status}' is not a verification status ({})",
                            VERIFICATION_STATUSES.join(", ")
                        ),
                    );
                }
            }
            let needed = match remediation.decision {
                Decision::Observe => None,
                Decision::Reject | Decision::ApproveExecute => Some(PatrolMode::Approval),
                Decision::AwaitAutonomous => Some(PatrolMode::Autonomous),
            };
            if let Some(mode) = needed
                && m.patrol.mode != mode
            {
                self.push(
                    "remediation.decision",
                    format!(
                        "this decision needs patrol.mode '{}'",
                        mode.autonomy_level()
                    ),
                );
            }
        }
    }

    fn budgets_and_gates(&mut self) {
        let m = self.manifest;
        let b = &m.budgets;
        self.duration("budgets.collection_latency_p95", &b.collection_latency_p95);
        self.duration("budgets.patrol_latency_p95", &b.patrol_latency_p95);
        self.duration("budgets.end_to_end_latency_p95", &b.end_to_end_latency_p95);
        if b.input_tokens_p95 == 0 {
            self.push("budgets.input_tokens_p95", "must be positive");
        }
        if b.output_tokens_p95 == 0 {
            self.push("budgets.output_tokens_p95", "must be positive");
        }
        if !(b.cost_usd_p95.is_finite() && b.cost_usd_p95 > 0.0) {
            self.push("budgets.cost_usd_p95", "must be a positive amount");
        }
        if b.max_tool_calls == 0 {
            self.push("budgets.max_tool_calls", "must be positive");
        }
        let g = &m.gates;
        for (name, value) in [
            ("min_recall", g.min_recall),
            ("min_resource_accuracy", g.min_resource_accuracy),
            ("min_category_accuracy", g.min_category_accuracy),
            ("min_severity_accuracy", g.min_severity_accuracy),
            ("min_evidence_grounding", g.min_evidence_grounding),
        ] {
            if !(0.0..=1.0).contains(&value) {
                self.push(
                    format!("gates.{name}"),
                    format!("{value} is a fraction and must be within [0, 1]"),
                );
            }
        }
        if !(g.max_findings_per_causal_group.is_finite() && g.max_findings_per_causal_group >= 1.0)
        {
            self.push(
                "gates.max_findings_per_causal_group",
                format!(
                    "{} must be at least 1: a detected fault has at least one finding",
                    g.max_findings_per_causal_group
                ),
            );
        }
    }

    /// The digest needs canonical JSON, which refuses integers beyond 2^53 - 1.
    fn canonical(&mut self) {
        if let Err(error) = pulse_domain::canonical_json::to_canonical_vec(self.manifest) {
            self.push("manifest", format!("has no canonical JSON form: {error}"));
        }
    }
}

/// `^[a-z0-9][a-z0-9._-]{2,95}$` without a regex engine.
fn id_is_well_formed(id: &str) -> bool {
    let mut chars = id.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    (3..=96).contains(&id.len())
        && (first.is_ascii_lowercase() || first.is_ascii_digit())
        && chars
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'))
}

/// Why `value` cannot be a reading of `spec`, if it cannot.
fn value_mismatch(spec: &ProbeSpec, value: &Value) -> Option<String> {
    match spec.value {
        ProbeValue::Bool if !value.is_boolean() => {
            Some(format!("probe {} reports true or false", spec.name))
        }
        ProbeValue::Number if !value.as_f64().is_some_and(|n| n >= 0.0) => {
            Some(format!("probe {} reports a non-negative number", spec.name))
        }
        ProbeValue::Word(words) if !value.as_str().is_some_and(|s| words.contains(&s)) => Some(
            format!("probe {} reports one of {}", spec.name, words.join(", ")),
        ),
        _ => None,
    }
}

fn program_name(program: Program) -> &'static str {
    match program {
        Program::Worker => "a worker",
        Program::Listener => "a listener",
        Program::Client => "a client",
        Program::Writer => "a writer",
    }
}

/// The aliases named by `${port:<alias>}` in one command word. A word that does not scan
/// names none here: the Docker lab refuses it when it provisions.
fn port_references(word: &str) -> Vec<&str> {
    placeholder::scan(word)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| match p {
            Placeholder::PortOf(alias) => Some(alias),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twenty_two_is_the_smallest_perfect_sample_that_clears_the_floor() {
        assert_eq!(min_qualification_repeat(), 22);
        assert!(crate::wilson::lower_bound(21, 21) < QUALIFICATION_CONFIDENCE_FLOOR);
    }

    #[test]
    fn ids_follow_the_upstream_pattern() {
        for good in ["watch.a", "abc", "0ab", "watch.docker-unhealthy_2"] {
            assert!(id_is_well_formed(good), "{good}");
        }
        let long = "a".repeat(97);
        for bad in [
            "",
            "ab",
            "Watch.a",
            ".abc",
            "-abc",
            "wat ch",
            "watch/a",
            long.as_str(),
        ] {
            assert!(!id_is_well_formed(bad), "{bad}");
        }
    }

    #[test]
    fn port_references_name_every_alias() {
        assert_eq!(
            port_references("http://127.0.0.1:${port:db}/x ${port:cache} ${port}"),
            vec!["db", "cache"]
        );
        assert!(port_references("${port:unterminated").is_empty());
        assert_eq!(port_references("${run_token}:${port:db}"), vec!["db"]);
    }
}
