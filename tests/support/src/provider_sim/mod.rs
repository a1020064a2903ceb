//! A scripted LLM provider over real HTTP, speaking the OpenAI, Anthropic, Gemini and Ollama wire
//! protocols, streaming and not. Usage is counted with a real tokenizer (o200k_base), and every
//! request is recorded so tests can assert what was (and was not) sent.
//!
//! Routes: `POST /v1/chat/completions` (OpenAI), `POST /v1/messages` (Anthropic),
//! `POST /v1beta/models/{model}:generateContent|:streamGenerateContent` (Gemini),
//! `POST /api/chat` (Ollama).

mod anthropic;
mod gemini;
mod ollama;
mod openai;
mod script;
mod tokens;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::Response;
use axum::routing::post;
use futures::StreamExt as _;
use serde_json::{Value, json};

pub use script::{Delivery, Script, SimError, SimErrorBody, SimToolCall, Step, Turn};
pub use tokens::count_tokens;

/// Which wire protocol a request used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimProtocol {
    OpenAi,
    Anthropic,
    Gemini,
    Ollama,
}

/// Token usage the simulator reported for one request, counted with o200k_base.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// One request as the simulator received it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub protocol: SimProtocol,
    pub method: String,
    /// Path and query.
    pub path: String,
    /// Header names lowercased.
    pub headers: BTreeMap<String, String>,
    /// The JSON body (`Null` when it was not JSON).
    pub body: Value,
    pub stream: bool,
    /// What the simulator reported, when it answered with a model turn.
    pub usage: Option<SimUsage>,
}

#[derive(Debug)]
struct SimState {
    script: Script,
    requests: Mutex<Vec<RecordedRequest>>,
}

/// A running simulator; the server stops when this is dropped.
#[derive(Debug)]
pub struct ProviderSim {
    addr: SocketAddr,
    state: Arc<SimState>,
    task: tokio::task::JoinHandle<()>,
}

impl ProviderSim {
    pub async fn start(script: Script) -> anyhow::Result<Self> {
        tokens::ensure_loaded()?;
        let state = Arc::new(SimState {
            script,
            requests: Mutex::new(Vec::new()),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(openai_route))
            .route("/v1/messages", post(anthropic_route))
            .route("/v1beta/models/{model_action}", post(gemini_route))
            .route("/api/chat", post(ollama_route))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!(error = %e, "provider simulator stopped");
            }
        });
        Ok(Self { addr, state, task })
    }

    /// `http://127.0.0.1:<port>`: the base URL for Anthropic and Ollama.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The base URL an OpenAI-compatible client appends `/chat/completions` to.
    pub fn openai_base_url(&self) -> String {
        format!("{}/v1", self.base_url())
    }

    /// The base URL a Gemini client appends `/models/...` to.
    pub fn gemini_base_url(&self) -> String {
        format!("{}/v1beta", self.base_url())
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state
            .requests
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }
}

impl Drop for ProviderSim {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn openai_route(
    State(s): State<Arc<SimState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(s, SimProtocol::OpenAi, method, uri, headers, body).await
}

async fn anthropic_route(
    State(s): State<Arc<SimState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(s, SimProtocol::Anthropic, method, uri, headers, body).await
}

async fn gemini_route(
    State(s): State<Arc<SimState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(s, SimProtocol::Gemini, method, uri, headers, body).await
}

async fn ollama_route(
    State(s): State<Arc<SimState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(s, SimProtocol::Ollama, method, uri, headers, body).await
}

/// What a protocol renders for one turn.
pub(crate) struct Rendered {
    /// Frames of a stream, each complete with its line endings.
    pub frames: Vec<String>,
    /// The end-of-stream marker frame, for protocols that have one.
    pub terminal: Option<String>,
}

/// Ids given to the turn's tool calls.
pub(crate) fn call_ids(turn: &Turn, request_no: usize) -> Vec<String> {
    turn.tool_calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            c.id.clone()
                .unwrap_or_else(|| format!("call_{request_no}_{i}"))
        })
        .collect()
}

/// Splits text into a few pieces so streams really arrive in parts.
pub(crate) fn pieces(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for (i, word) in text.split_inclusive(' ').enumerate() {
        current.push_str(word);
        if i % 2 == 1 {
            out.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// Halves a string at a character boundary.
pub(crate) fn halves(text: &str) -> (String, String) {
    let mid = text.chars().count() / 2;
    let first: String = text.chars().take(mid).collect();
    let second: String = text.chars().skip(mid).collect();
    (first, second)
}

async fn handle(
    state: Arc<SimState>,
    protocol: SimProtocol,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    raw: Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    let path = uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| uri.path().to_owned());
    let stream = match protocol {
        SimProtocol::Gemini => path.contains(":streamGenerateContent"),
        _ => body.get("stream").and_then(Value::as_bool) == Some(true),
    };
    let model = match protocol {
        SimProtocol::Gemini => uri
            .path()
            .rsplit('/')
            .next()
            .and_then(|s| s.split(':').next())
            .unwrap_or_default()
            .to_owned(),
        _ => body
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
    };
    let header_map = headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_lowercase(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let (request_no, step) = {
        let mut requests = match state.requests.lock() {
            Ok(r) => r,
            Err(poisoned) => poisoned.into_inner(),
        };
        let no = requests.len();
        requests.push(RecordedRequest {
            protocol,
            method: method.to_string(),
            path,
            headers: header_map,
            body,
            stream,
            usage: None,
        });
        (no, state.script.step(no))
    };

    let (turn, delivery) = match step {
        Step::Error(err) => return error_response(protocol, &err),
        Step::Reply { turn, delivery } => (turn, delivery),
    };
    if !delivery.cold_start.is_zero() {
        tokio::time::sleep(delivery.cold_start).await;
    }
    let usage = SimUsage {
        input_tokens: count_tokens(&String::from_utf8_lossy(&raw)),
        output_tokens: turn.output_tokens(),
    };
    if let Ok(mut requests) = state.requests.lock() {
        if let Some(r) = requests.get_mut(request_no) {
            r.usage = Some(usage);
        }
    }
    let ids = call_ids(&turn, request_no);

    if !stream {
        if delivery.malformed_json {
            return raw_response(StatusCode::OK, "application/json", "{\"choices\": [{\"mess");
        }
        let json = match protocol {
            SimProtocol::OpenAi => openai::full(&turn, &ids, usage, &model),
            SimProtocol::Anthropic => anthropic::full(&turn, &ids, usage, &model),
            SimProtocol::Gemini => gemini::full(&turn, &ids, usage),
            SimProtocol::Ollama => ollama::full(&turn, usage, &model),
        };
        return raw_response(StatusCode::OK, "application/json", json.to_string());
    }

    let rendered = match protocol {
        SimProtocol::OpenAi => openai::frames(&turn, &ids, usage, &model, &delivery),
        SimProtocol::Anthropic => anthropic::frames(&turn, &ids, usage, &model, &delivery),
        SimProtocol::Gemini => gemini::frames(&turn, &ids, usage),
        SimProtocol::Ollama => ollama::frames(&turn, usage, &model),
    };
    let mut frames = rendered.frames;
    if delivery.malformed_json {
        let broken = match protocol {
            SimProtocol::Ollama => "{\"message\":{\"content\":\"unterminated\n".to_owned(),
            _ => "data: {\"choices\":[{\"delta\":{\"content\":\"unterminated\n\n".to_owned(),
        };
        frames.insert(frames.len().min(1), broken);
    }
    if delivery.truncate {
        if let Some(last) = frames.last_mut() {
            let keep = last.trim_end_matches(['\r', '\n']).len();
            last.truncate(keep);
        }
    } else if let Some(t) = rendered.terminal {
        frames.push(t);
    }
    let content_type = match protocol {
        SimProtocol::Ollama => "application/x-ndjson",
        _ => "text/event-stream",
    };
    let limit = match (delivery.stall_after_frames, delivery.cut_after_frames) {
        (Some(a), Some(b)) => a.min(b),
        (Some(n), None) | (None, Some(n)) => n,
        (None, None) => usize::MAX,
    };
    let sent: Vec<Result<Bytes, Infallible>> = frames
        .into_iter()
        .take(limit)
        .map(|f| Ok(Bytes::from(f)))
        .collect();
    let body = futures::stream::iter(sent);
    let body = if delivery.stall_after_frames.is_some() {
        Body::from_stream(body.chain(futures::stream::pending()))
    } else {
        Body::from_stream(body)
    };
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CACHE_CONTROL, "no-cache")
        .body(body)
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

fn raw_response(status: StatusCode, content_type: &str, body: impl Into<Body>) -> Response {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .body(body.into())
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

fn error_response(protocol: SimProtocol, err: &SimError) -> Response {
    let status = StatusCode::from_u16(err.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let (content_type, body) = match &err.body {
        SimErrorBody::Raw { content_type, body } => (content_type.clone(), body.clone()),
        SimErrorBody::Message { code, message } => {
            let json = match protocol {
                SimProtocol::OpenAi => {
                    json!({"error": {"message": message, "type": code, "code": code}})
                }
                SimProtocol::Anthropic => {
                    json!({"type": "error", "error": {"type": code, "message": message}})
                }
                SimProtocol::Gemini => json!({"error": {"code": err.status,
                    "message": message, "status": code.to_uppercase()}}),
                SimProtocol::Ollama => json!({"error": message}),
            };
            ("application/json".to_owned(), json.to_string())
        }
    };
    let mut builder = Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type);
    if let Some(secs) = err.retry_after_secs {
        builder = builder.header(header::RETRY_AFTER, secs.to_string());
    }
    builder
        .body(Body::from(body))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}
