//! Conformance with the official clients: the Python SDKs `openai`, `anthropic`, `google-genai`
//! and `ollama` talk to the provider simulator over real HTTP, each streamed and not, with a tool
//! offered, in multi-turn conversations that send every tool call and its result back; and each
//! lists the simulator's models through its own models API, pages and all
//! (`official_clients/list_models.py`).
//!
//! The clients live in a virtual environment under the target directory, keyed by a hash of the
//! pinned requirements and the Python version, so a run reuses it unless either changed; failing
//! to build it fails the test (it is never skipped). The driver script
//! (`official_clients/drive.py`) checks every answer as an application would and exits non-zero
//! naming the protocol, mode and request that failed; this test then checks, from the
//! simulator's own request log, that each protocol and mode made as many requests as the driver
//! counted (at least [`MIN_REQUESTS`]), that every one was answered with a model turn, and that
//! Gemini thought signatures came back unchanged with their calls.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use pulse_test_support::provider_sim::{
    ProviderSim, RecordedRequest, Script, SimProtocol, thought_signature,
};
use pulse_test_support::python::{ensure_success, run, venv_python};
use serde_json::{Value, json};

/// Requests per protocol and mode: enough for ids and signatures to change many times over
/// (request numbers reach two and three digits).
const MIN_REQUESTS: usize = 15;
const REQUIREMENTS: &str = include_str!("official_clients/requirements.txt");
const REQUIREMENTS_PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/official_clients/requirements.txt"
);
const DRIVER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/official_clients/drive.py"
);
const PROTOCOLS: [SimProtocol; 4] = [
    SimProtocol::OpenAi,
    SimProtocol::Anthropic,
    SimProtocol::Gemini,
    SimProtocol::Ollama,
];

const LISTER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/official_clients/list_models.py"
);

const DRIVER_TIMEOUT: Duration = Duration::from_secs(300);

/// What the driver reports for one protocol and mode.
#[derive(Debug)]
struct Cell {
    requests: usize,
    tool_calls: usize,
    conversations: usize,
    gemini_api_versions: BTreeMap<String, usize>,
}

fn cells(summary: &Value) -> anyhow::Result<BTreeMap<(String, bool), Cell>> {
    let mut out = BTreeMap::new();
    for c in summary["cells"]
        .as_array()
        .context("summary without cells")?
    {
        let count = |k: &str| -> anyhow::Result<usize> {
            let n = c[k]
                .as_u64()
                .with_context(|| format!("cell without {k}: {c}"))?;
            Ok(usize::try_from(n)?)
        };
        let versions = c["gemini_api_versions"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0) as usize))
                    .collect()
            })
            .unwrap_or_default();
        out.insert(
            (
                c["protocol"].as_str().context("cell protocol")?.to_owned(),
                c["stream"].as_bool().context("cell stream")?,
            ),
            Cell {
                requests: count("requests")?,
                tool_calls: count("tool_calls")?,
                conversations: count("conversations")?,
                gemini_api_versions: versions,
            },
        );
    }
    Ok(out)
}

/// Every Gemini function call a request sends back carries the signature the simulator gave it.
fn gemini_signatures_round_trip(r: &RecordedRequest) -> anyhow::Result<usize> {
    let mut echoed = 0;
    let contents = r.body["contents"].as_array().cloned().unwrap_or_default();
    for part in contents
        .iter()
        .filter(|c| c["role"] == "model")
        .flat_map(|c| c["parts"].as_array().cloned().unwrap_or_default())
    {
        let Some(id) = part["functionCall"]["id"].as_str() else {
            continue;
        };
        ensure!(
            part["thoughtSignature"] == json!(thought_signature(id)),
            "request {} sent call {id} back with signature {} instead of {}",
            r.seq,
            part["thoughtSignature"],
            thought_signature(id)
        );
        echoed += 1;
    }
    Ok(echoed)
}

#[tokio::test]
async fn official_clients_speak_all_four_protocols() -> anyhow::Result<()> {
    let python = venv_python(
        &Path::new(env!("CARGO_TARGET_TMPDIR")).join("official-clients"),
        REQUIREMENTS,
        Path::new(REQUIREMENTS_PATH),
    )
    .await
    .context("the official Python clients could not be installed")?;
    let sim = ProviderSim::start(Script::steps([])).await?;

    let out = run(
        tokio::process::Command::new(&python)
            .arg(DRIVER)
            .arg("--base-url")
            .arg(sim.base_url())
            .arg("--min-requests")
            .arg(MIN_REQUESTS.to_string())
            .env("PYTHONUNBUFFERED", "1"),
        DRIVER_TIMEOUT,
        "the official-client driver",
    )
    .await?;
    ensure_success(&out, "the official-client driver")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .with_context(|| format!("the driver's summary is not JSON: {stdout}"))?;
    let cells = cells(&summary)?;

    let requests = sim.requests();
    let mut signatures_echoed = 0;
    for protocol in PROTOCOLS {
        for stream in [false, true] {
            let mode = if stream { "stream" } else { "no stream" };
            let cell = cells
                .get(&(protocol.as_str().to_owned(), stream))
                .with_context(|| format!("no {} ({mode}) cell in {summary}", protocol.as_str()))?;
            let seen: Vec<&RecordedRequest> = requests
                .iter()
                .filter(|r| r.protocol == protocol && r.stream == stream)
                .collect();
            let name = format!("{} ({mode})", protocol.as_str());
            ensure!(
                cell.requests >= MIN_REQUESTS,
                "{name}: the driver made only {} requests",
                cell.requests
            );
            ensure!(
                seen.len() == cell.requests,
                "{name}: the simulator recorded {} requests, the driver made {}",
                seen.len(),
                cell.requests
            );
            // Every conversation ends in text after at least one tool round.
            ensure!(
                cell.tool_calls >= cell.conversations && cell.conversations >= 2,
                "{name}: {cell:?}"
            );
            for r in &seen {
                ensure!(
                    r.model == "sim:diligent",
                    "{name}: request {} named model {:?}",
                    r.seq,
                    r.model
                );
                ensure!(
                    r.usage.is_some(),
                    "{name}: request {} ({}) was not answered with a model turn",
                    r.seq,
                    r.path
                );
            }
            if protocol == SimProtocol::Gemini {
                for version in ["v1", "v1beta"] {
                    let prefix = format!("/{version}/models/");
                    let n = seen.iter().filter(|r| r.path.starts_with(&prefix)).count();
                    ensure!(
                        n > 0 && Some(&n) == cell.gemini_api_versions.get(version),
                        "{name}: {n} requests under {prefix}, driver counted {:?}",
                        cell.gemini_api_versions
                    );
                }
                for r in &seen {
                    signatures_echoed += gemini_signatures_round_trip(r)?;
                }
            }
        }
    }
    ensure!(
        signatures_echoed >= MIN_REQUESTS,
        "only {signatures_echoed} Gemini calls came back with their signatures"
    );
    Ok(())
}

#[tokio::test]
async fn official_clients_list_the_models_in_every_shape() -> anyhow::Result<()> {
    let python = venv_python(
        &Path::new(env!("CARGO_TARGET_TMPDIR")).join("official-clients"),
        REQUIREMENTS,
        Path::new(REQUIREMENTS_PATH),
    )
    .await
    .context("the official Python clients could not be installed")?;
    // Five models: the paging clients (pages of two) need three pages each.
    let models = ["alpha-1", "beta-2", "gamma-3", "delta:4b", "epsilon-5"];
    let sim = ProviderSim::start(Script::steps([]).with_models(models)).await?;
    let out = run(
        tokio::process::Command::new(&python)
            .arg(LISTER)
            .arg("--base-url")
            .arg(sim.base_url())
            .env("PYTHONUNBUFFERED", "1"),
        DRIVER_TIMEOUT,
        "the official-client lister",
    )
    .await?;
    ensure_success(&out, "the official-client lister")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let listed: BTreeMap<String, Vec<String>> =
        serde_json::from_str(stdout.lines().last().unwrap_or_default())
            .with_context(|| format!("the lister's output is not JSON: {stdout}"))?;
    for client in [
        "openai",
        "anthropic",
        "gemini-v1beta",
        "gemini-v1",
        "ollama",
    ] {
        ensure!(
            listed.get(client).map(Vec::as_slice) == Some(&models.map(str::to_owned)[..]),
            "{client} listed {:?}",
            listed.get(client)
        );
    }
    let requests = sim.requests();
    let pages = |protocol: SimProtocol| requests.iter().filter(|r| r.protocol == protocol).count();
    ensure!(pages(SimProtocol::Anthropic) == 3, "{requests:?}");
    ensure!(
        pages(SimProtocol::Gemini) == 6,
        "three pages per API version: {requests:?}"
    );
    ensure!(pages(SimProtocol::OpenAi) == 1 && pages(SimProtocol::Ollama) == 1);
    ensure!(
        requests
            .iter()
            .all(|r| r.method == "GET" && r.usage.is_none())
    );
    Ok(())
}

/// Some clients percent-encode the model segment (`sim%3Adiligent`); both Gemini API versions
/// are served.
#[tokio::test]
async fn gemini_model_segment_may_be_percent_encoded() -> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let sim = ProviderSim::start(Script::steps([])).await?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    let body = json!({
        "contents": [{"role": "user", "parts": [{"text": "Check host db1."}]}],
        "tools": [{"functionDeclarations": [{"name": "get_status",
            "parameters": {"type": "object", "properties": {"host": {"type": "string"}}}}]}],
    });
    for path in [
        "/v1beta/models/sim%3Adiligent:generateContent",
        "/v1/models/sim%3adiligent%3AgenerateContent",
        "/v1/models/sim:diligent:generateContent",
    ] {
        let response = http
            .post(format!("{}{path}", sim.base_url()))
            .json(&body)
            .send()
            .await?;
        let status = response.status();
        let answer: Value = response.json().await?;
        ensure!(status.is_success(), "{path}: {status} {answer}");
        let part = &answer["candidates"][0]["content"]["parts"][0];
        let id = part["functionCall"]["id"]
            .as_str()
            .with_context(|| format!("{path}: no function call in {answer}"))?;
        ensure!(
            part["thoughtSignature"] == json!(thought_signature(id)),
            "{path}: {answer}"
        );
    }
    let recorded: Vec<String> = sim.requests().into_iter().map(|r| r.model).collect();
    ensure!(recorded == ["sim:diligent"; 3], "{recorded:?}");

    let response = http
        .post(format!(
            "{}/v1beta/models/sim%3Adiligent:countTokens",
            sim.base_url()
        ))
        .json(&body)
        .send()
        .await?;
    let status = response.status();
    let answer: Value = response.json().await?;
    if status != reqwest::StatusCode::NOT_FOUND || answer["error"]["status"] != "NOT_FOUND" {
        bail!("an unserved action must be a Gemini 404: {status} {answer}");
    }
    Ok(())
}
