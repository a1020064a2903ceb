//! The checked-in catalogue against the published schema and the loader, and every semantic
//! rule of `validate::problems` against a manifest that breaks it.

use std::path::{Path, PathBuf};

use patrol_qualify::catalogue::{self, CatalogueError};
use patrol_qualify::cli::{CatalogueArgs, Outcome, ValidateArgs};
use patrol_qualify::manifest::{LabDriver, Manifest};
use patrol_qualify::{runner, validate};
use serde_json::{Value, json};

const IDS: [&str; 11] = [
    "investigation.dependency",
    "investigation.storage-pressure",
    "remediation.restart-approved",
    "remediation.restart-rejected",
    "watch.correlated-dependency",
    "watch.existing-finding-reconfirmation",
    "watch.healthy-mixed",
    "watch.prompt-injection-label",
    "watch.restart-loop",
    "watch.service-unhealthy",
    "watch.two-independent-faults",
];

const WILSON_REASON: &str =
    "22 is the smallest perfect sample whose 95% Wilson lower bound reaches 0.85";

fn scenarios() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios")
}

fn upstream_fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/watch.docker-unhealthy.json")
}

/// An upstream-shaped remediation manifest that names its resources with `${run_token}`.
fn upstream_remediation_fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/remediation.docker-unhealthy-restart-approved.json")
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn schema() -> jsonschema::Validator {
    let schema = read_json(&scenarios().join("patrol.qual.schema.json"));
    jsonschema::draft202012::new(&schema).expect("the published schema compiles")
}

fn schema_errors(validator: &jsonschema::Validator, instance: &Value) -> Vec<String> {
    validator
        .iter_errors(instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

fn decode(value: &Value) -> Manifest {
    serde_json::from_value(value.clone()).expect("decodes as a manifest")
}

/// A folder of its own under the system temp dir, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let dir = std::env::temp_dir().join(format!(
            "patrol-catalogue-{name}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn every_catalogue_manifest_passes_the_schema_and_the_loader() {
    let validator = schema();
    for lab in [LabDriver::Process, LabDriver::Docker] {
        let entries = catalogue::load_lab(&scenarios(), lab)
            .unwrap_or_else(|e| panic!("{} lab: {e}", lab.as_str()));
        let ids: Vec<&str> = entries.iter().map(|e| e.manifest.id.as_str()).collect();
        assert_eq!(ids, IDS, "{} lab ids", lab.as_str());
        for entry in &entries {
            let errors = schema_errors(&validator, &read_json(&entry.path));
            assert!(errors.is_empty(), "{}: {errors:?}", entry.path.display());
            assert_eq!(entry.manifest.lab.driver, lab);
            if let Err(refusal) = runner::check_runnable(&[&entry.manifest]) {
                panic!("{}: {}", entry.path.display(), refusal.message);
            }
            assert_eq!(entry.digest, catalogue::digest(&entry.manifest));
            let hex = entry.digest.strip_prefix("sha256:").expect("sha256 prefix");
            assert_eq!(hex.len(), 64);
            assert!(hex.chars().all(|c| c.is_ascii_hexdigit()));
        }
    }
}

#[test]
fn the_two_labs_hold_the_same_scenarios_with_their_own_probes() {
    let process = catalogue::load_lab(&scenarios(), LabDriver::Process).expect("process lab");
    let docker = catalogue::load_lab(&scenarios(), LabDriver::Docker).expect("docker lab");
    for (p, d) in process.iter().zip(&docker) {
        assert_eq!(p.manifest.id, d.manifest.id);
        assert_eq!(p.manifest.track, d.manifest.track);
        assert_eq!(p.manifest.faults.len(), d.manifest.faults.len());
        assert_ne!(p.digest, d.digest, "{}", p.manifest.id);
        let probes =
            |m: &Manifest| -> Vec<String> { m.baseline.iter().map(|b| b.probe.clone()).collect() };
        assert!(
            probes(&p.manifest)
                .iter()
                .all(|x| x.starts_with("service.")),
            "{}",
            p.manifest.id
        );
        assert!(
            probes(&d.manifest).iter().all(|x| x.starts_with("docker.")),
            "{}",
            d.manifest.id
        );
    }
}

#[test]
fn resource_names_are_neutral_and_never_reused_across_scenarios() {
    let banned = ["qual", "test", "fault", "lab", "benchmark", "healthy"];
    for lab in [LabDriver::Process, LabDriver::Docker] {
        let mut seen = std::collections::BTreeMap::new();
        for entry in catalogue::load_lab(&scenarios(), lab).expect("lab loads") {
            for resource in &entry.manifest.resources {
                let name = resource.name.to_lowercase();
                assert!(name.ends_with("-${run_id}"), "{name}");
                for word in banned {
                    assert!(!name.contains(word), "{name} contains {word}");
                }
                if let Some(other) = seen.insert(name.clone(), entry.manifest.id.clone()) {
                    panic!("{name} is used by both {other} and {}", entry.manifest.id);
                }
            }
        }
    }
}

#[test]
fn the_docker_lab_builds_its_one_image_from_scratch() {
    for entry in catalogue::load_lab(&scenarios(), LabDriver::Docker).expect("docker lab") {
        let lab = &entry.manifest.lab;
        assert_eq!(lab.image.as_deref(), Some("pulse-lab/service:1"));
        assert_eq!(lab.build.as_deref(), Some("images/service"));
        assert!(!lab.allow_pull);
    }
    let dockerfile =
        std::fs::read_to_string(scenarios().join("docker/images/service/Dockerfile")).unwrap();
    let lines: Vec<&str> = dockerfile
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(
        lines,
        [
            "FROM scratch",
            "COPY busybox /bin/busybox",
            r#"RUN ["/bin/busybox","--install","-s","/bin"]"#,
        ]
    );
}

#[test]
fn an_upstream_docker_manifest_validates_unchanged() {
    let value = read_json(&upstream_fixture());
    let errors = schema_errors(&schema(), &value);
    assert!(errors.is_empty(), "{errors:?}");
    let entry = catalogue::load_file(&upstream_fixture()).expect("upstream manifest loads");
    assert_eq!(entry.manifest.id, "watch.docker-unhealthy");
    assert_eq!(entry.manifest.lab.image.as_deref(), Some("alpine:3.20"));
    assert_eq!(
        entry.manifest.resources[0].name,
        "pulse-qual-${run_id}-faulty"
    );
    assert!(validate::problems(&entry.manifest).is_empty());
}

#[test]
fn upstream_remediation_manifests_with_run_token_validate_and_are_runnable() {
    let validator = schema();
    let base = read_json(&upstream_remediation_fixture());
    let entry = catalogue::load_file(&upstream_remediation_fixture())
        .expect("the upstream remediation manifest loads");
    assert_eq!(
        entry.manifest.resources[0].name,
        "pulse-qual-${run_token}-faulty"
    );
    assert_eq!(
        entry
            .manifest
            .resource_name("faulty", "k3x9")
            .expect("an alias")
            .expect("a name"),
        "pulse-qual-k3x9-faulty"
    );
    // Upstream's three remediation scenarios: approved, rejected and autonomous.
    let variants = [
        ("approved", vec![]),
        (
            "rejected",
            vec![
                Set(
                    "/id",
                    json!("remediation.docker-unhealthy-restart-rejected"),
                ),
                Set("/remediation/decision", json!("reject")),
            ],
        ),
        (
            "autonomous",
            vec![
                Set(
                    "/id",
                    json!("remediation.docker-unhealthy-restart-autonomous"),
                ),
                Set("/patrol/mode", json!("autonomous")),
                Set("/remediation/decision", json!("await_autonomous")),
            ],
        ),
    ];
    for (name, edits) in variants {
        let mut value = base.clone();
        for edit in &edits {
            apply(&mut value, edit);
        }
        let errors = schema_errors(&validator, &value);
        assert!(errors.is_empty(), "{name}: {errors:?}");
        let manifest = catalogue::decode(&value.to_string()).expect(name);
        assert_eq!(
            validate::problems(&manifest),
            Vec::<String>::new(),
            "{name}"
        );
        assert!(runner::check_runnable(&[&manifest]).is_ok(), "{name}");
    }
}

#[test]
fn every_catalogue_manifest_validates_with_run_token_names() {
    let validator = schema();
    for lab in [LabDriver::Process, LabDriver::Docker] {
        for entry in catalogue::load_lab(&scenarios(), lab).expect("lab loads") {
            let mut value = read_json(&entry.path);
            let resources = value["resources"].as_array_mut().expect("resources");
            for resource in resources.iter_mut() {
                let name = resource["name"].as_str().expect("name");
                assert!(name.contains("${run_id}"), "{name}");
                resource["name"] = json!(name.replace("${run_id}", "${run_token}"));
            }
            let errors = schema_errors(&validator, &value);
            assert!(errors.is_empty(), "{}: {errors:?}", entry.path.display());
            let manifest = decode(&value);
            assert_eq!(
                validate::problems(&manifest),
                Vec::<String>::new(),
                "{}",
                entry.path.display()
            );
            for (resource, original) in manifest.resources.iter().zip(&entry.manifest.resources) {
                assert_eq!(
                    resource.name_in_run("k3x9").expect("a name"),
                    original.name_in_run("k3x9").expect("a name"),
                );
            }
        }
    }
}

#[test]
fn a_name_with_neither_run_placeholder_is_refused_naming_both() {
    let mut value = read_json(&upstream_remediation_fixture());
    value["resources"][1]["name"] = json!("pulse-qual-healthy");
    let problems = validate::problems(&decode(&value));
    assert_eq!(
        problems,
        vec![
            "resources[1].name: 'pulse-qual-healthy' must contain ${run_id} or ${run_token} so every run's resources are its own"
        ]
    );
    let errors = schema_errors(&schema(), &value);
    assert!(
        errors.iter().any(|e| e.contains("/resources/1/name")),
        "{errors:?}"
    );
}

#[test]
fn what_upstream_allows_but_no_lab_runs_validates_and_is_refused_before_the_lab() {
    let base = read_json(&upstream_remediation_fixture());
    let cases: Vec<(&str, Vec<Edit>, &str)> = vec![
        (
            "pulling",
            vec![Set("/lab/allow_pull", json!(true))],
            "lab.allow_pull: true, but lab images are built locally and never pulled",
        ),
        (
            "a network to detach",
            vec![Set("/faults/0/injector/kind", json!("disconnect_network"))],
            "faults[0].injector.kind: disconnect_network: lab containers use host networking",
        ),
        (
            "a health process without a name",
            vec![Remove("/faults/0/injector/value")],
            "faults[0].injector.value: health_process_stop needs injector.value naming the process to stop",
        ),
        (
            "a health process name the kernel cannot hold",
            vec![Set(
                "/faults/0/injector/value",
                json!("a-process-name-too-long"),
            )],
            "faults[0].injector.value: \"a-process-name-too-long\": a process name is 1-15 letters",
        ),
        (
            "an unknown placeholder in a command",
            vec![Set("/resources/1/command/2", json!("echo ${HOME}"))],
            "resources[1].command[2]: unknown placeholder ${HOME}",
        ),
        (
            "a replay lab",
            vec![Set("/lab/driver", json!("replay"))],
            "lab.driver: a 'replay' scenario has no live lab",
        ),
    ];
    for (name, edits, reason) in cases {
        let mut value = base.clone();
        for edit in &edits {
            apply(&mut value, edit);
        }
        let errors = schema_errors(&schema(), &value);
        assert!(errors.is_empty(), "{name}: {errors:?}");
        let manifest = decode(&value);
        assert_eq!(
            validate::problems(&manifest),
            Vec::<String>::new(),
            "{name}"
        );
        let refusal = runner::check_runnable(&[&manifest]).expect_err(name);
        assert_eq!(refusal.code, "unsupported_by_lab", "{name}");
        assert!(
            refusal.message.starts_with(&format!(
                "the {} lab cannot run scenario remediation.docker-unhealthy-restart-approved: ",
                manifest.lab.driver.as_str()
            )),
            "{name}: {}",
            refusal.message
        );
        assert!(
            refusal.message.contains(reason),
            "{name}: {}",
            refusal.message
        );
    }
}

#[test]
fn upstream_go_durations_and_docker_restart_forms_pass_the_schema_and_the_loader() {
    let mut value = read_json(&upstream_remediation_fixture());
    // And a restart policy as `docker run --restart` writes it.
    value["resources"][0]["restart"] = json!("on-failure:3");
    value["resources"][0]["health_every"] = json!("1.5s");
    value["baseline"][0]["timeout"] = json!("1m30s");
    value["collection"]["poll_interval"] = json!("2500ms");
    value["remediation"]["action_timeout"] = json!("4m30s");
    value["budgets"]["end_to_end_latency_p95"] = json!("1h0m0s");
    let errors = schema_errors(&schema(), &value);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(validate::problems(&decode(&value)), Vec::<String>::new());

    value["patrol"]["run_timeout"] = json!("0s");
    assert_eq!(
        validate::problems(&decode(&value)),
        vec!["patrol.run_timeout: must be longer than zero"]
    );
}

#[test]
fn the_digest_follows_values_not_layout() {
    let entry = catalogue::load_file(&upstream_fixture()).expect("loads");
    let value = read_json(&upstream_fixture());
    // Compact, reordered text of the same manifest: the same digest.
    let mut reordered = serde_json::Map::new();
    if let Value::Object(map) = &value {
        for (k, v) in map.iter().rev() {
            reordered.insert(k.clone(), v.clone());
        }
    }
    let text = serde_json::to_string(&Value::Object(reordered)).unwrap();
    let again = catalogue::decode(&text).expect("decodes");
    assert_eq!(catalogue::digest(&again), entry.digest);
    let mut changed = entry.manifest.clone();
    changed.version = 2;
    assert_ne!(catalogue::digest(&changed), entry.digest);
}

#[test]
fn a_qualification_count_of_21_is_refused_with_the_wilson_reason() {
    assert_eq!(validate::min_qualification_repeat(), 22);
    let mut value = read_json(&scenarios().join("process/remediation.restart-approved.json"));
    value["repeat"]["qualification"] = json!(21);
    let problems = validate::problems(&decode(&value));
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("repeat.qualification:") && p.contains(WILSON_REASON)),
        "{problems:?}"
    );
    assert!(!schema_errors(&schema(), &value).is_empty());
    value["repeat"]["qualification"] = json!(22);
    assert!(validate::problems(&decode(&value)).is_empty());
}

#[test]
fn unknown_fields_are_refused_naming_the_field_and_the_file() {
    let base = read_json(&scenarios().join("docker/watch.service-unhealthy.json"));
    for (pointer, field) in [
        ("", "colour"),
        ("/lab", "network_mode"),
        ("/resources/0", "privileged"),
        ("/faults/0/injector", "shell"),
        ("/faults/0/expected_finding", "hint"),
        ("/gates", "min_luck"),
    ] {
        let mut value = base.clone();
        value
            .pointer_mut(pointer)
            .and_then(Value::as_object_mut)
            .expect("object")
            .insert(field.to_owned(), json!(true));
        let error = catalogue::decode(&value.to_string()).expect_err(field);
        assert!(
            error.contains(&format!("unknown field `{field}`")),
            "{error}"
        );
        assert!(
            !schema_errors(&schema(), &value).is_empty(),
            "schema: {field}"
        );

        let scratch = Scratch::new("unknown");
        let path = scratch.0.join("watch.service-unhealthy.json");
        std::fs::write(&path, value.to_string()).unwrap();
        let message = catalogue::load_file(&path).expect_err(field).to_string();
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(message.contains(field), "{message}");
    }
}

#[test]
fn a_lab_refuses_duplicate_ids_a_foreign_driver_and_a_misnamed_file() {
    let source = scenarios().join("process/watch.service-unhealthy.json");
    let text = std::fs::read_to_string(&source).unwrap();

    let scratch = Scratch::new("duplicate");
    let lab = scratch.0.join("process");
    std::fs::create_dir_all(&lab).unwrap();
    std::fs::write(lab.join("watch.service-unhealthy.json"), &text).unwrap();
    std::fs::write(lab.join("watch.service-unhealthy.second.json"), &text).unwrap();
    let error = catalogue::load_lab(&scratch.0, LabDriver::Process).expect_err("refused");
    let message = error.to_string();
    assert!(message.contains("already the id of"), "{message}");
    assert!(
        message.contains("watch.service-unhealthy.second.json: ")
            && message.contains("id: the file must be named watch.service-unhealthy.json"),
        "{message}"
    );

    let scratch = Scratch::new("foreign");
    std::fs::create_dir_all(scratch.0.join("docker")).unwrap();
    std::fs::write(scratch.0.join("docker/watch.service-unhealthy.json"), &text).unwrap();
    let error = catalogue::load_lab(&scratch.0, LabDriver::Docker).expect_err("refused");
    assert!(
        error
            .to_string()
            .contains("lab.driver: 'process' does not match its folder 'docker'"),
        "{error}"
    );

    let missing = catalogue::load_lab(&scratch.0, LabDriver::Process).expect_err("no folder");
    assert!(matches!(missing, CatalogueError::Invalid { .. }));
}

#[test]
fn validate_mode_passes_the_catalogue_and_refuses_a_broken_file() {
    let args = ValidateArgs {
        catalogue: CatalogueArgs {
            scenarios: scenarios(),
        },
        files: Vec::new(),
    };
    assert!(matches!(
        catalogue::cli_validate(&args),
        Ok(Outcome::Passed)
    ));

    let mut value = read_json(&scenarios().join("process/watch.restart-loop.json"));
    value["repeat"]["qualification"] = json!(21);
    value["faults"][0]["target"] = json!("ghost");
    let scratch = Scratch::new("cli");
    let path = scratch.0.join("watch.restart-loop.json");
    std::fs::write(&path, value.to_string()).unwrap();
    let args = ValidateArgs {
        catalogue: CatalogueArgs {
            scenarios: scenarios(),
        },
        files: vec![upstream_fixture(), path.clone()],
    };
    let refusal = catalogue::cli_validate(&args).expect_err("refused");
    assert_eq!(refusal.code, "invalid_manifest");
    assert!(
        refusal.message.starts_with("1 of 2 manifests are invalid"),
        "{}",
        refusal.message
    );
    assert!(
        refusal.message.contains(WILSON_REASON),
        "{}",
        refusal.message
    );
    assert!(
        refusal
            .message
            .contains("faults[0].target: 'ghost' is not a resource alias"),
        "{}",
        refusal.message
    );
}

#[test]
fn list_shows_one_row_per_scenario_with_its_repeat_counts() {
    let entries = catalogue::load_lab(&scenarios(), LabDriver::Process).unwrap();
    let table = catalogue::list_table(&entries);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 12);
    assert!(lines[0].starts_with("ID"));
    let row = lines
        .iter()
        .find(|l| l.starts_with("remediation.restart-approved "))
        .expect("row");
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells,
        [
            "remediation.restart-approved",
            "process",
            "remediation",
            "2",
            "1",
            "1/3/22"
        ]
    );
}

#[test]
fn docker_health_accepts_starting_and_none() {
    let mut value = read_json(&scenarios().join("docker/watch.service-unhealthy.json"));
    value["baseline"][0]["value"] = json!("starting");
    value["baseline"][1]["operator"] = json!("in");
    value["baseline"][1]["value"] = json!(["healthy", "none"]);
    assert_eq!(validate::problems(&decode(&value)), Vec::<String>::new());
}

/// One change to a catalogue manifest.
enum Edit {
    Set(&'static str, Value),
    Remove(&'static str),
}

fn apply(value: &mut Value, edit: &Edit) {
    let pointer = match edit {
        Edit::Set(p, _) | Edit::Remove(p) => *p,
    };
    let (parent, key) = pointer.rsplit_once('/').expect("pointer");
    let parent = value
        .pointer_mut(parent)
        .unwrap_or_else(|| panic!("no {parent}"));
    match (parent, edit) {
        (Value::Object(map), Edit::Set(_, new)) => {
            map.insert(key.to_owned(), new.clone());
        }
        (Value::Object(map), Edit::Remove(_)) => {
            map.remove(key).unwrap_or_else(|| panic!("no {pointer}"));
        }
        (Value::Array(items), Edit::Set(_, new)) => {
            items[key.parse::<usize>().expect("index")] = new.clone();
        }
        (Value::Array(items), Edit::Remove(_)) => {
            items.remove(key.parse::<usize>().expect("index"));
        }
        _ => panic!("{pointer} is not inside an object or array"),
    }
}

use Edit::{Remove, Set};

/// (rule, base manifest, edits, a problem must contain this)
fn rules() -> Vec<(&'static str, &'static str, Vec<Edit>, &'static str)> {
    const P_WATCH: &str = "process/watch.service-unhealthy.json";
    const P_REM: &str = "process/remediation.restart-approved.json";
    const P_CORR: &str = "process/watch.correlated-dependency.json";
    const P_STORE: &str = "process/investigation.storage-pressure.json";
    const P_QUIET: &str = "process/watch.healthy-mixed.json";
    const D_WATCH: &str = "docker/watch.service-unhealthy.json";
    const D_TWO: &str = "docker/watch.two-independent-faults.json";
    const D_STORE: &str = "docker/investigation.storage-pressure.json";
    const D_CORR: &str = "docker/watch.correlated-dependency.json";
    let ghost = || json!("ghost");
    vec![
        (
            "schema version",
            P_WATCH,
            vec![Set("/schema_version", json!("patrol.qual/v2"))],
            "schema_version: must be 'patrol.qual/v1'",
        ),
        (
            "id pattern",
            P_WATCH,
            vec![Set("/id", json!("Watch.x"))],
            "id: 'Watch.x' must match",
        ),
        (
            "id too short",
            P_WATCH,
            vec![Set("/id", json!("w."))],
            "id: 'w.' must match",
        ),
        (
            "id prefix is the track",
            P_WATCH,
            vec![Set("/id", json!("investigation.service"))],
            "must start with 'watch.'",
        ),
        (
            "version",
            P_WATCH,
            vec![Set("/version", json!(0))],
            "version: must be at least 1",
        ),
        (
            "development repeat",
            P_WATCH,
            vec![Set("/repeat/development", json!(0))],
            "repeat.development: must be at least 1",
        ),
        (
            "nightly repeat",
            P_WATCH,
            vec![Set("/repeat/nightly", json!(0))],
            "repeat.nightly: must be at least 1",
        ),
        (
            "aliases unique",
            P_WATCH,
            vec![Set("/resources/1/alias", json!("worker"))],
            "resources[1].alias: 'worker' is already the alias of resources[0]",
        ),
        (
            "name carries the run token",
            P_WATCH,
            vec![Set("/resources/0/name", json!("invoice-worker"))],
            "resources[0].name: 'invoice-worker' must contain ${run_id} or ${run_token} so every run's resources are its own",
        ),
        (
            "docker name carries the run token",
            D_WATCH,
            vec![Set("/resources/1/name", json!("invoice-worker-run_token"))],
            "resources[1].name: 'invoice-worker-run_token' must contain ${run_id} or ${run_token}",
        ),
        (
            "a name holds no port",
            D_WATCH,
            vec![Set(
                "/resources/0/name",
                json!("invoice-${run_token}-${port}"),
            )],
            "resources[0].name: 'invoice-${run_token}-${port}': a name holds only ${run_id} or ${run_token}",
        ),
        (
            "a name holds no unknown placeholder",
            P_WATCH,
            vec![Set(
                "/resources/0/name",
                json!("invoice-${run_token}-${host}"),
            )],
            "resources[0].name: unknown placeholder ${host}",
        ),
        (
            "baseline target",
            P_WATCH,
            vec![Set("/baseline/0/target", ghost())],
            "baseline[0].target: 'ghost' is not a resource alias",
        ),
        (
            "oracle target",
            P_WATCH,
            vec![Set("/faults/0/oracle/0/target", ghost())],
            "faults[0].oracle[0].target: 'ghost'",
        ),
        (
            "revert oracle target",
            P_WATCH,
            vec![Set("/faults/0/revert_oracle/0/target", ghost())],
            "faults[0].revert_oracle[0].target: 'ghost'",
        ),
        (
            "teardown target",
            P_WATCH,
            vec![Set("/teardown/predicates/0/target", ghost())],
            "teardown.predicates[0].target: 'ghost'",
        ),
        (
            "postcondition target",
            P_REM,
            vec![Set("/remediation/postconditions/0/target", ghost())],
            "remediation.postconditions[0].target: 'ghost'",
        ),
        (
            "fault target",
            P_WATCH,
            vec![Set("/faults/0/target", ghost())],
            "faults[0].target: 'ghost'",
        ),
        (
            "injector resource",
            P_WATCH,
            vec![Set("/faults/0/injector/resource", ghost())],
            "faults[0].injector.resource: 'ghost'",
        ),
        (
            "expected finding resource",
            P_WATCH,
            vec![Set("/faults/0/expected_finding/resource", ghost())],
            "faults[0].expected_finding.resource: 'ghost'",
        ),
        (
            "negative control resource",
            P_WATCH,
            vec![Set("/negative_controls/0/resource", ghost())],
            "negative_controls[0].resource: 'ghost'",
        ),
        (
            "related resources",
            P_CORR,
            vec![Set("/faults/0/related_resources/0", ghost())],
            "faults[0].related_resources[0]: 'ghost'",
        ),
        (
            "depends on",
            P_CORR,
            vec![Set("/resources/1/depends_on", ghost())],
            "resources[1].depends_on: 'ghost'",
        ),
        (
            "depends on itself",
            P_CORR,
            vec![Set("/resources/1/depends_on", json!("client"))],
            "resources[1].depends_on: a resource cannot depend on itself",
        ),
        (
            "action target",
            P_REM,
            vec![Set("/remediation/action_target", ghost())],
            "remediation.action_target: 'ghost'",
        ),
        (
            "root cause resources",
            P_REM,
            vec![Set("/investigation/root_cause_resources/0", ghost())],
            "investigation.root_cause_resources[0]: 'ghost'",
        ),
        (
            "affected resources",
            P_REM,
            vec![Set("/investigation/affected_resources/0", ghost())],
            "investigation.affected_resources[0]: 'ghost'",
        ),
        (
            "scope resources",
            P_WATCH,
            vec![Set("/patrol/scope_resources", json!(["worker", "ghost"]))],
            "patrol.scope_resources[1]: 'ghost'",
        ),
        (
            "duration parses",
            P_WATCH,
            vec![Set("/collection/poll_interval", json!("soon"))],
            "collection.poll_interval: 'soon' is not a duration",
        ),
        (
            "duration positive",
            P_WATCH,
            vec![Set("/patrol/run_timeout", json!("0s"))],
            "patrol.run_timeout: must be longer than zero",
        ),
        (
            "predicate timeout",
            P_WATCH,
            vec![Set("/baseline/0/timeout", json!("1 minute"))],
            "baseline[0].timeout: '1 minute' is not a duration",
        ),
        (
            "detect within",
            P_WATCH,
            vec![Set("/faults/0/detect_within", json!("2d"))],
            "faults[0].detect_within: '2d' is not a duration",
        ),
        (
            "budget latency",
            P_WATCH,
            vec![Set("/budgets/patrol_latency_p95", json!("fast"))],
            "budgets.patrol_latency_p95: 'fast' is not a duration",
        ),
        (
            "action timeout",
            P_REM,
            vec![Set("/remediation/action_timeout", json!("3"))],
            "remediation.action_timeout: '3' is not a duration",
        ),
        (
            "recall is a fraction",
            P_WATCH,
            vec![Set("/gates/min_recall", json!(1.5))],
            "gates.min_recall: 1.5 is a fraction",
        ),
        (
            "grounding is a fraction",
            P_WATCH,
            vec![Set("/gates/min_evidence_grounding", json!(-0.1))],
            "gates.min_evidence_grounding",
        ),
        (
            "findings per causal group",
            P_WATCH,
            vec![Set("/gates/max_findings_per_causal_group", json!(0.5))],
            "gates.max_findings_per_causal_group: 0.5 must be at least 1",
        ),
        (
            "input token budget",
            P_WATCH,
            vec![Set("/budgets/input_tokens_p95", json!(0))],
            "budgets.input_tokens_p95: must be positive",
        ),
        (
            "output token budget",
            P_WATCH,
            vec![Set("/budgets/output_tokens_p95", json!(0))],
            "budgets.output_tokens_p95: must be positive",
        ),
        (
            "cost budget",
            P_WATCH,
            vec![Set("/budgets/cost_usd_p95", json!(0.0))],
            "budgets.cost_usd_p95: must be a positive amount",
        ),
        (
            "tool call budget",
            P_WATCH,
            vec![Set("/budgets/max_tool_calls", json!(0))],
            "budgets.max_tool_calls: must be positive",
        ),
        (
            "canonical integers",
            P_WATCH,
            vec![Set(
                "/budgets/input_tokens_p95",
                json!(9_007_199_254_740_993_u64),
            )],
            "manifest: has no canonical JSON form",
        ),
        (
            "investigation track needs investigation",
            P_STORE,
            vec![Remove("/investigation")],
            "investigation: required for the investigation track",
        ),
        (
            "remediation track needs investigation",
            P_REM,
            vec![Remove("/investigation")],
            "investigation: required for the remediation track",
        ),
        (
            "remediation track needs remediation",
            P_REM,
            vec![Remove("/remediation")],
            "remediation: required for the remediation track",
        ),
        (
            "watch has no investigation",
            P_WATCH,
            vec![Set(
                "/investigation",
                json!({"required_summary_terms": ["health"], "min_evidence_calls": 1}),
            )],
            "investigation: a watch scenario has no investigation block",
        ),
        (
            "investigation has no remediation",
            P_STORE,
            vec![Set(
                "/remediation",
                json!({"action_target": "writer", "expected_capabilities": ["service.restart"], "decision": "observe", "action_timeout": "3m"}),
            )],
            "remediation: only the remediation track has a remediation block",
        ),
        (
            "summary terms",
            P_REM,
            vec![Remove("/investigation/required_summary_term_groups")],
            "investigation.required_summary_terms: name the terms",
        ),
        (
            "empty summary group",
            P_REM,
            vec![Set(
                "/investigation/required_summary_term_groups",
                json!([["health"], []]),
            )],
            "investigation.required_summary_term_groups[1]",
        ),
        (
            "evidence minimum",
            P_REM,
            vec![Remove("/investigation/min_evidence_calls")],
            "investigation: needs min_evidence_calls or min_evidence_ids",
        ),
        (
            "control is not a fault target",
            P_WATCH,
            vec![Set("/negative_controls/0/resource", json!("worker"))],
            "negative_controls[0].resource: 'worker' is the target of a fault",
        ),
        (
            "a quiet scenario needs controls",
            P_QUIET,
            vec![Remove("/negative_controls")],
            "negative_controls: a scenario without faults must name at least one negative control",
        ),
        (
            "fault id",
            P_WATCH,
            vec![Set("/faults/0/id", json!(""))],
            "faults[0].id: must not be empty",
        ),
        (
            "causal group",
            P_WATCH,
            vec![Set("/faults/0/causal_group", json!(" "))],
            "faults[0].causal_group: must not be empty",
        ),
        (
            "fault ids unique",
            D_TWO,
            vec![Set("/faults/1/id", json!("first-health-check-failing"))],
            "faults[1].id: 'first-health-check-failing' is already the id of faults[0]",
        ),
        (
            "oracle required",
            P_WATCH,
            vec![Set("/faults/0/oracle", json!([]))],
            "faults[0].oracle: a fault needs at least one oracle predicate",
        ),
        (
            "expected categories",
            P_WATCH,
            vec![Set("/faults/0/expected_finding/categories", json!([]))],
            "faults[0].expected_finding.categories",
        ),
        (
            "primary findings",
            P_WATCH,
            vec![Set(
                "/faults/0/expected_finding/max_primary_findings",
                json!(0),
            )],
            "faults[0].expected_finding.max_primary_findings: must be at least 1",
        ),
        (
            "docker kind",
            D_WATCH,
            vec![Set("/resources/0/kind", json!("service"))],
            "resources[0].kind: the Docker lab runs kind 'container'",
        ),
        (
            "docker image",
            D_WATCH,
            vec![Remove("/lab/image"), Remove("/lab/build")],
            "resources[0].image: required unless lab.image",
        ),
        (
            "docker program",
            D_WATCH,
            vec![Set("/resources/0/program", json!("worker"))],
            "resources[0].program: is a process-lab switch",
        ),
        (
            "docker restart policy",
            D_WATCH,
            vec![Set("/resources/0/restart", json!("always:3"))],
            "resources[0].restart: 'always:3' is not a restart policy (no, always, unless-stopped, on-failure, on-failure:<n>)",
        ),
        (
            "docker port reference",
            D_CORR,
            vec![Set(
                "/resources/1/healthcheck/4",
                json!("http://127.0.0.1:${port:ghost}/"),
            )],
            "resources[1].healthcheck[4]: ${port:ghost} names no resource alias",
        ),
        (
            "build needs image",
            D_WATCH,
            vec![
                Remove("/lab/image"),
                Set("/resources/0/image", json!("pulse-lab/service:1")),
                Set("/resources/1/image", json!("pulse-lab/service:1")),
            ],
            "lab.build: needs lab.image",
        ),
        (
            "build stays inside",
            D_WATCH,
            vec![Set("/lab/build", json!("../../elsewhere"))],
            "lab.build: '../../elsewhere' must be a relative path inside the catalogue",
        ),
        (
            "process never pulls",
            P_WATCH,
            vec![Set("/lab/allow_pull", json!(true))],
            "lab.allow_pull: must be false: the process lab runs no images",
        ),
        (
            "process lab image",
            P_WATCH,
            vec![Set("/lab/image", json!("pulse-lab/service:1"))],
            "lab.image: the process lab runs no images",
        ),
        (
            "process kind",
            P_WATCH,
            vec![Set("/resources/0/kind", json!("container"))],
            "resources[0].kind: the process lab runs kind 'service'",
        ),
        (
            "process program",
            P_WATCH,
            vec![Remove("/resources/0/program")],
            "resources[0].program: required in the process lab",
        ),
        (
            "process image",
            P_WATCH,
            vec![Set("/resources/0/image", json!("busybox"))],
            "resources[0].image: the process lab runs no images",
        ),
        (
            "process command",
            P_WATCH,
            vec![Set("/resources/0/command", json!(["sh"]))],
            "resources[0].command: the process lab runs its own reviewed programs",
        ),
        (
            "process healthcheck",
            P_WATCH,
            vec![Set("/resources/0/healthcheck", json!(["true"]))],
            "resources[0].healthcheck: a process-lab program reports its own health",
        ),
        (
            "client needs a dependency",
            P_CORR,
            vec![Remove("/resources/1/depends_on")],
            "resources[1].depends_on: a client needs the alias of the listener",
        ),
        (
            "client depends on a listener",
            P_CORR,
            vec![Set("/resources/1/depends_on", json!("bystander"))],
            "resources[1].depends_on: 'bystander' must be a listener",
        ),
        (
            "only a client depends",
            P_CORR,
            vec![Set("/resources/2/depends_on", json!("listener"))],
            "resources[2].depends_on: only a client depends on another service",
        ),
        (
            "scratch only on a writer",
            P_WATCH,
            vec![Set("/resources/0/scratch_storage", json!(true))],
            "resources[0].scratch_storage: only a writer has a scratch area",
        ),
        (
            "a writer needs scratch",
            P_STORE,
            vec![Set("/resources/0/scratch_storage", json!(false))],
            "resources[0].scratch_storage: a writer needs its scratch area",
        ),
        (
            "process marker on a listener",
            P_CORR,
            vec![Set("/faults/0/injector/kind", json!("marker_enable"))],
            "faults[0].injector.kind: 'marker_enable' needs a worker or a client, but 'listener' is a listener",
        ),
        (
            "process stop on a worker",
            P_WATCH,
            vec![Set("/faults/0/injector/kind", json!("stop"))],
            "faults[0].injector.kind: 'stop' needs a listener",
        ),
        (
            "process crash loop on a writer",
            P_STORE,
            vec![Set("/faults/0/injector/kind", json!("crash_loop"))],
            "faults[0].injector.kind: 'crash_loop' needs a worker",
        ),
        (
            "process fill on a worker",
            P_WATCH,
            vec![Set(
                "/faults/0/injector/kind",
                json!("fill_scratch_storage"),
            )],
            "faults[0].injector.kind: 'fill_scratch_storage' needs a writer with scratch_storage",
        ),
        (
            "process has no network",
            P_WATCH,
            vec![Set("/faults/0/injector/kind", json!("disconnect_network"))],
            "faults[0].injector.kind: 'disconnect_network' is not a process lab injector",
        ),
        (
            "process has no health process",
            P_WATCH,
            vec![Set("/faults/0/injector/kind", json!("health_process_stop"))],
            "faults[0].injector.kind: 'health_process_stop' is not a process lab injector",
        ),
        (
            "docker marker needs the fault volume",
            D_WATCH,
            vec![Set("/resources/0/fault_volume", json!(false))],
            "faults[0].injector.kind: 'marker_enable' needs fault_volume: true on 'worker'",
        ),
        (
            "docker crash loop needs the fault volume",
            D_WATCH,
            vec![
                Set("/resources/0/fault_volume", json!(false)),
                Set("/faults/0/injector/kind", json!("crash_loop")),
            ],
            "'crash_loop' needs fault_volume: true",
        ),
        (
            "docker fill needs scratch",
            D_STORE,
            vec![Set("/resources/0/scratch_storage", json!(false))],
            "faults[0].injector.kind: 'fill_scratch_storage' needs scratch_storage: true on 'writer'",
        ),
        (
            "process probe names",
            P_WATCH,
            vec![Set("/baseline/0/probe", json!("docker.health"))],
            "baseline[0].probe: 'docker.health' is not a process lab probe",
        ),
        (
            "docker probe names",
            D_WATCH,
            vec![Set("/baseline/0/probe", json!("service.health"))],
            "baseline[0].probe: 'service.health' is not a docker lab probe",
        ),
        (
            "health values",
            P_WATCH,
            vec![Set("/baseline/0/value", json!("starting"))],
            "baseline[0].value: probe service.health reports one of healthy, unhealthy",
        ),
        (
            "docker health values",
            D_WATCH,
            vec![Set("/baseline/0/value", json!("sick"))],
            "baseline[0].value: probe docker.health reports one of healthy, unhealthy, starting, none",
        ),
        (
            "running is a bool",
            P_CORR,
            vec![Set("/baseline/0/value", json!("yes"))],
            "baseline[0].value: probe service.running reports true or false",
        ),
        (
            "counts are numbers",
            P_WATCH,
            vec![Set(
                "/faults/0/oracle/0",
                json!({"probe": "service.start_count", "target": "worker", "operator": "eq", "value": "three"}),
            )],
            "faults[0].oracle[0].value: probe service.start_count reports a non-negative number",
        ),
        (
            "ordering needs a number",
            P_WATCH,
            vec![Set(
                "/faults/0/oracle/0",
                json!({"probe": "service.start_count", "target": "worker", "operator": "gte", "value": "3"}),
            )],
            "faults[0].oracle[0].value: a gte/lte/gt/lt comparison needs a number",
        ),
        (
            "ordering needs a numeric probe",
            P_WATCH,
            vec![
                Set("/baseline/0/operator", json!("lt")),
                Set("/baseline/0/value", json!(1)),
            ],
            "baseline[0].operator: probe service.health does not report a number",
        ),
        (
            "in needs an array",
            P_WATCH,
            vec![Set("/baseline/0/operator", json!("in"))],
            "baseline[0].value: operator 'in' needs an array",
        ),
        (
            "in checks every value",
            P_WATCH,
            vec![
                Set("/baseline/0/operator", json!("in")),
                Set("/baseline/0/value", json!(["healthy", "sick"])),
            ],
            "baseline[0].value[1]: probe service.health reports one of",
        ),
        (
            "scratch probe needs scratch",
            P_WATCH,
            vec![Set(
                "/baseline/0",
                json!({"probe": "scratch.available_bytes", "target": "worker", "operator": "gt", "value": 0}),
            )],
            "baseline[0].target: 'worker' has no scratch area",
        ),
        (
            "reconfirmation only on watch",
            P_REM,
            vec![Set("/patrol/require_existing_reconfirmation", json!(true))],
            "patrol.require_existing_reconfirmation: only a watch scenario",
        ),
        (
            "decision needs its mode",
            P_REM,
            vec![Set("/patrol/mode", json!("monitor"))],
            "remediation.decision: this decision needs patrol.mode 'approval'",
        ),
        (
            "autonomous decision needs autonomy",
            P_REM,
            vec![Set("/remediation/decision", json!("await_autonomous"))],
            "remediation.decision: this decision needs patrol.mode 'autonomous'",
        ),
        (
            "verification statuses",
            P_REM,
            vec![Set(
                "/remediation/allowed_verification_statuses",
                json!(["verified", "probably"]),
            )],
            "remediation.allowed_verification_statuses[1]: 'probably' is not a verification status",
        ),
        (
            "capabilities",
            P_REM,
            vec![Set("/remediation/expected_capabilities", json!([]))],
            "remediation.expected_capabilities: name the capability",
        ),
        (
            "collection sources",
            P_WATCH,
            vec![Set("/collection/sources", json!([]))],
            "collection.sources: needs at least one collection source",
        ),
        (
            "owner",
            P_WATCH,
            vec![Set("/owner", json!(""))],
            "owner: must not be empty",
        ),
    ]
}

#[test]
fn every_semantic_rule_refuses_a_manifest_that_breaks_it() {
    let mut failures = Vec::new();
    for (rule, base, edits, expected) in rules() {
        let mut value = read_json(&scenarios().join(base));
        assert!(
            validate::problems(&decode(&value)).is_empty(),
            "{base} is valid before the edit"
        );
        for edit in &edits {
            apply(&mut value, edit);
        }
        let manifest: Manifest = match serde_json::from_value(value) {
            Ok(m) => m,
            Err(e) => {
                failures.push(format!("{rule}: the edit does not decode: {e}"));
                continue;
            }
        };
        let problems = validate::problems(&manifest);
        if !problems.iter().any(|p| p.contains(expected)) {
            failures.push(format!("{rule}: expected '{expected}', got {problems:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_schema_refuses_what_the_types_refuse() {
    let validator = schema();
    let base = read_json(&scenarios().join("process/remediation.restart-rejected.json"));
    let cases: Vec<(&str, Vec<Edit>)> = vec![
        (
            "unknown injector",
            vec![Set("/faults/0/injector/kind", json!("reboot_host"))],
        ),
        (
            "unknown program",
            vec![Set("/resources/0/program", json!("daemon"))],
        ),
        ("unknown track", vec![Set("/track", json!("chaos"))]),
        ("missing teardown", vec![Remove("/teardown")]),
        ("remediation needs its block", vec![Remove("/remediation")]),
        (
            "remediation needs investigation",
            vec![Remove("/investigation")],
        ),
        (
            "bad duration",
            vec![Set("/collection/poll_interval", json!("1 second"))],
        ),
        ("recall above one", vec![Set("/gates/min_recall", json!(2))]),
    ];
    for (name, edits) in cases {
        let mut value = base.clone();
        for edit in &edits {
            apply(&mut value, edit);
        }
        assert!(!schema_errors(&validator, &value).is_empty(), "{name}");
    }
    // Every injector the types know is in the schema, including health_process_stop.
    let mut value = read_json(&upstream_fixture());
    for kind in [
        "marker_enable",
        "stop",
        "kill",
        "disconnect_network",
        "health_process_stop",
        "crash_loop",
        "fill_scratch_storage",
    ] {
        value["faults"][0]["injector"]["kind"] = json!(kind);
        assert!(schema_errors(&validator, &value).is_empty(), "{kind}");
        assert!(catalogue::decode(&value.to_string()).is_ok(), "{kind}");
    }
}
