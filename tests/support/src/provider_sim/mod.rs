//! A scripted LLM provider over real HTTP, speaking the OpenAI, Anthropic, Gemini and Ollama wire
//! protocols, streaming and not. Usage is counted with a real tokenizer (o200k_base), and every
//! request is recorded so tests can assert what was (and was not) sent.
//!
//! Routes: `POST /v1/chat/completions` (OpenAI), `POST /v1/messages` (Anthropic),
//! `POST /v1beta/models/{model}:generateContent|:streamGenerateContent` and the same under `/v1`
//! (Gemini; the model segment may be percent-encoded), `POST /api/chat` (Ollama). A model named
//! `sim:<behaviour>` picks a built-in behaviour instead of the script (see [`Behaviour`]).
//!
//! Model lists, each in its provider's shape ([`models`]): `GET /v1/models` (OpenAI; Anthropic
//! when the request carries `anthropic-version`; Gemini when it carries a Gemini key),
//! `GET /v1beta/models` (Gemini) and `GET /api/tags` (Ollama).
//!
//! Answers are shaped as the official clients of each protocol accept them
//! (`tests/official_clients.rs` runs those clients against the simulator): response ids differ
//! per request, and Gemini thought signatures are base64 ([`thought_signature`]).
//!
//! The simulator's own API: `GET /_sim/health`, `GET /_sim/requests` (the request log as JSON,
//! credentials masked) and `DELETE /_sim/requests`.

mod anthropic;
mod behaviour;
pub mod cache;
mod conversation;
mod gemini;
pub mod models;
mod ollama;
mod openai;
mod script;
mod tokens;

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::future::Future;
use std::hash::{DefaultHasher, Hash as _, Hasher as _};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::Response;
use axum::routing::{get, post};
use futures::StreamExt as _;
use serde_json::{Value, json};

pub use behaviour::{
    Behaviour, DEFAULT_COLD_START, FALSE_ALARM_KEY, INVENTED_READS, READ_BOUND, REPEATED_CALLS,
    SIM_PREFIX, TextCallForm,
};
pub use conversation::{Conversation, OfferedTool, PastCall};
pub use gemini::thought_signature;
pub use script::{Delivery, Script, SimError, SimErrorBody, SimToolCall, Step, Turn, split_chars};
pub use tokens::count_tokens;

/// Which wire protocol a request used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimProtocol {
    OpenAi,
    Anthropic,
    Gemini,
    Ollama,
}

impl SimProtocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenAi => "openai",
            Self::Anthropic => "anthropic",
            Self::Gemini => "gemini",
            Self::Ollama => "ollama",
        }
    }
}

/// Token usage the simulator reported for one request, counted with o200k_base.
///
/// `input_tokens` is the whole prompt; the two cache counts are the parts of it the simulated
/// prompt cache served or stored ([`cache`]), reported on the wire the way each provider does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Read from the prompt cache (OpenAI `cached_tokens`, Anthropic `cache_read_input_tokens`,
    /// Gemini `cachedContentTokenCount`).
    pub cached_input_tokens: u64,
    /// Written to the prompt cache (Anthropic `cache_creation_input_tokens`).
    pub cache_write_input_tokens: u64,
}

/// One request as the simulator received it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// Position among all requests the simulator received (not reset by clearing the log).
    pub seq: usize,
    pub protocol: SimProtocol,
    /// The model the request named (from the body, or the Gemini path).
    pub model: String,
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

/// The model-runner's provider preflight probe tool.
pub const PREFLIGHT_TOOL: &str = "pulse_preflight_ping";

/// The answer of a tool-capable model to the provider preflight: a call of the probe tool (for
/// [`Script::with_tool_offer_reply`]; runs never offer the probe tool, so they never get it).
pub fn preflight_reply() -> Step {
    Step::reply(Turn::tool(PREFLIGHT_TOOL, json!({"ok": true})))
}

/// Header values replaced by [`MASK`] in the HTTP request log.
pub const SECRET_HEADERS: &[&str] = &["authorization", "x-api-key", "x-goog-api-key"];

/// Query parameters whose values are masked in the log (Gemini takes its key as `?key=`).
pub const SECRET_QUERY_PARAMS: &[&str] = &["key"];

/// What a masked secret reads as.
pub const MASK: &str = "***";

impl RecordedRequest {
    /// The request as `GET /_sim/requests` shows it: credentials in the values of the
    /// [`SECRET_HEADERS`] and [`SECRET_QUERY_PARAMS`] masked (an auth scheme word is kept), the
    /// rest verbatim.
    pub fn to_json(&self) -> Value {
        let headers: serde_json::Map<String, Value> = self
            .headers
            .iter()
            .map(|(k, v)| {
                let shown = if SECRET_HEADERS.contains(&k.as_str()) {
                    mask(v)
                } else {
                    v.clone()
                };
                (k.clone(), Value::String(shown))
            })
            .collect();
        json!({
            "seq": self.seq,
            "protocol": self.protocol.as_str(),
            "method": self.method,
            "path": mask_query(&self.path),
            "headers": headers,
            "body": self.body,
            "model": self.model,
            "stream": self.stream,
            "usage": self.usage.map(|u| json!({
                "input_tokens": u.input_tokens,
                "output_tokens": u.output_tokens,
                "cached_input_tokens": u.cached_input_tokens,
                "cache_write_input_tokens": u.cache_write_input_tokens,
            })),
        })
    }
}

fn mask_query(path: &str) -> String {
    let Some((base, query)) = path.split_once('?') else {
        return path.to_owned();
    };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if SECRET_QUERY_PARAMS.contains(&name) => format!("{name}={MASK}"),
            _ => pair.to_owned(),
        })
        .collect();
    format!("{base}?{}", pairs.join("&"))
}

fn mask(value: &str) -> String {
    match value.split_once(' ') {
        Some((scheme, _)) if scheme.eq_ignore_ascii_case("bearer") => format!("{scheme} {MASK}"),
        _ => MASK.to_owned(),
    }
}

#[derive(Debug, Default)]
struct RequestLog {
    entries: Vec<RecordedRequest>,
    next_seq: usize,
    /// The next script step; requests answered by a `sim:` behaviour do not advance it.
    script_next: usize,
}

/// The server a simulator imitates beyond its wire protocol: the quirks of real local model
/// servers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Persona {
    /// A server that takes every request its protocol allows.
    #[default]
    Standard,
    /// llama-cpp-python's server (`--chat_format chatml-function-calling`): a streamed chat
    /// request offering tools without naming one function starts a `200` event stream, then the
    /// handler raises "Automatic streaming tool choice is not supported" and the connection
    /// breaks before any event; the same request unstreamed is answered. Its request schema
    /// takes an assistant message without `content` but refuses `"content": null` (422).
    LlamaCppPython,
}

impl Persona {
    /// Whether this server breaks the stream of `body` (an OpenAI-compatible request).
    fn refuses_stream(self, protocol: SimProtocol, stream: bool, body: &Value) -> bool {
        let offers_tools = body
            .get("tools")
            .and_then(Value::as_array)
            .is_some_and(|tools| !tools.is_empty());
        // Naming one function is the only streamed tool request that handler takes.
        let names_a_function = body.get("tool_choice").is_some_and(Value::is_object);
        self == Self::LlamaCppPython
            && protocol == SimProtocol::OpenAi
            && stream
            && offers_tools
            && !names_a_function
    }
}

impl Persona {
    /// The validation error this server gives `body`, if it refuses it before any model turn.
    fn refuses_request(self, protocol: SimProtocol, body: &Value) -> Option<SimError> {
        if self != Self::LlamaCppPython || protocol != SimProtocol::OpenAi {
            return None;
        }
        let null_content = body
            .get("messages")
            .and_then(Value::as_array)?
            .iter()
            .position(|m| m.get("content").is_some_and(Value::is_null))?;
        Some(SimError::message(
            422,
            "validation_error",
            format!(
                "('body', 'messages', {null_content}, 'ChatCompletionRequestAssistantMessage', \
                 'content'): Input should be a valid string"
            ),
        ))
    }
}

/// A `200` event stream whose connection breaks before its first byte, as an ASGI server's does
/// when the handler raises after the response began.
fn broken_event_stream() -> Response {
    let broken = futures::stream::once(async {
        // The status line and headers leave first (the server writes them when the response
        // starts): the body is not ready at its first poll, so they are flushed; then it fails.
        tokio::task::yield_now().await;
        Err::<Bytes, std::io::Error>(std::io::Error::other(
            "Automatic streaming tool choice is not supported",
        ))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream; charset=utf-8")
        .body(Body::from_stream(broken))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

#[derive(Debug)]
struct SimState {
    script: Script,
    persona: Persona,
    requests: Mutex<RequestLog>,
    /// Requests seen per behaviour session (model + first user message).
    sessions: Mutex<HashMap<String, u64>>,
    /// Streamed answers whose client closed the connection before the stream ended.
    abandoned: std::sync::atomic::AtomicU64,
    /// What each provider would have served from its prompt cache.
    cache: cache::PromptCache,
}

impl SimState {
    fn new(script: Script, persona: Persona) -> Self {
        Self {
            script,
            persona,
            requests: Mutex::new(RequestLog::default()),
            sessions: Mutex::new(HashMap::new()),
            abandoned: std::sync::atomic::AtomicU64::new(0),
            cache: cache::PromptCache::default(),
        }
    }

    fn log(&self) -> MutexGuard<'_, RequestLog> {
        self.requests.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many earlier requests the session had; counts this one.
    fn session_attempt(&self, key: String) -> u64 {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let n = sessions.entry(key).or_insert(0);
        let before = *n;
        *n += 1;
        before
    }
}

fn router(state: Arc<SimState>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(openai_route))
        .route("/v1/messages", post(anthropic_route))
        .route("/v1beta/models/{model_action}", post(gemini_route))
        .route("/v1/models/{model_action}", post(gemini_route))
        .route("/api/chat", post(ollama_route))
        .route("/v1/models", get(list_models_route))
        .route("/v1beta/models", get(gemini_list_route))
        .route("/api/tags", get(ollama_list_route))
        .route("/_sim/health", get(health_route))
        .route(
            "/_sim/requests",
            get(list_requests_route).delete(clear_requests_route),
        )
        .with_state(state)
}

/// Serves the simulator on `listener` until `shutdown` resolves; then waits at most `grace` for
/// open responses (a stalled stream never ends by itself).
pub async fn serve(
    listener: tokio::net::TcpListener,
    script: Script,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> anyhow::Result<()> {
    tokens::ensure_loaded()?;
    let app = router(Arc::new(SimState::new(script, Persona::Standard)));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = axum::serve(nodelay(listener), app).with_graceful_shutdown(async move {
        shutdown.await;
        let _ = stop_tx.send(());
    });
    let mut server = std::pin::pin!(server.into_future());
    tokio::select! {
        r = &mut server => return r.map_err(Into::into),
        _ = stop_rx => {}
    }
    match tokio::time::timeout(grace, server).await {
        Ok(r) => r.map_err(Into::into),
        Err(_) => {
            tracing::warn!("provider simulator closed with responses still open");
            Ok(())
        }
    }
}

/// The listener with TCP_NODELAY on every connection, as provider front ends stream: each
/// stream frame leaves at once instead of waiting for the client's ACK of the one before.
fn nodelay(
    listener: tokio::net::TcpListener,
) -> impl axum::serve::Listener<Addr = std::net::SocketAddr> {
    axum::serve::ListenerExt::tap_io(listener, |stream: &mut tokio::net::TcpStream| {
        let _ = stream.set_nodelay(true);
    })
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
        Self::start_as(script, Persona::Standard).await
    }

    /// A simulator imitating `persona`'s quirks.
    pub async fn start_as(script: Script, persona: Persona) -> anyhow::Result<Self> {
        tokens::ensure_loaded()?;
        let state = Arc::new(SimState::new(script, persona));
        let app = router(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(nodelay(listener), app).await {
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

    /// A route to this simulator over `protocol`: its base URL for that protocol, a test key, a
    /// short retry backoff and timeouts generous enough for a loaded machine.
    pub fn route_config(
        &self,
        protocol: pulse_providers::Protocol,
    ) -> pulse_providers::ProviderConfig {
        use pulse_providers::{Protocol, ProviderConfig, Timeouts};
        let base = match protocol {
            Protocol::OpenAiCompatible => self.openai_base_url(),
            Protocol::Gemini => self.gemini_base_url(),
            Protocol::Anthropic | Protocol::Ollama => self.base_url(),
        };
        ProviderConfig::new(protocol, base)
            .with_api_key("sk-test-key")
            .with_retry_backoff(Duration::from_millis(50))
            .with_timeouts(Timeouts {
                request: Duration::from_secs(20),
                response_header: Duration::from_secs(10),
                stall: Duration::from_secs(10),
            })
    }

    /// Every request received so far (since the log was last cleared), in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state.log().entries.clone()
    }

    /// Streamed answers the client abandoned: the connection closed (the body was dropped)
    /// before the stream ended. A stalled stream counts once its client gives up.
    pub fn abandoned_streams(&self) -> u64 {
        self.state
            .abandoned
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Empties the request log (as `DELETE /_sim/requests` does); the script position stays.
    pub fn clear_requests(&self) {
        self.state.log().entries.clear();
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

async fn list_models_route(
    State(s): State<Arc<SimState>>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let query = uri.query().unwrap_or_default();
    let protocol = if headers.contains_key("anthropic-version") {
        SimProtocol::Anthropic
    } else if headers.contains_key("x-goog-api-key")
        || query.split('&').any(|pair| pair.starts_with("key="))
    {
        SimProtocol::Gemini
    } else {
        SimProtocol::OpenAi
    };
    list(s, protocol, uri, headers)
}

async fn gemini_list_route(
    State(s): State<Arc<SimState>>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    list(s, SimProtocol::Gemini, uri, headers)
}

async fn ollama_list_route(
    State(s): State<Arc<SimState>>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    list(s, SimProtocol::Ollama, uri, headers)
}

/// Answers a model list request in `protocol`'s shape (or the script's list error), and logs
/// it like every other request.
fn list(state: Arc<SimState>, protocol: SimProtocol, uri: Uri, headers: HeaderMap) -> Response {
    let path = uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| uri.path().to_owned());
    {
        let mut log = state.log();
        let seq = log.next_seq;
        log.next_seq += 1;
        log.entries.push(RecordedRequest {
            seq,
            protocol,
            model: String::new(),
            method: Method::GET.to_string(),
            path,
            headers: headers
                .iter()
                .map(|(k, v)| {
                    (
                        k.as_str().to_lowercase(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect(),
            body: Value::Null,
            stream: false,
            usage: None,
        });
    }
    if let Some(error) = state.script.list_error() {
        return error_response(protocol, error);
    }
    let body = models::page(
        protocol,
        &state.script.models(),
        uri.query().unwrap_or_default(),
    );
    raw_response(StatusCode::OK, "application/json", body.to_string())
}

async fn health_route() -> Response {
    raw_response(
        StatusCode::OK,
        "application/json",
        json!({"status": "ok"}).to_string(),
    )
}

async fn list_requests_route(State(s): State<Arc<SimState>>) -> Response {
    let list: Vec<Value> = s
        .log()
        .entries
        .iter()
        .map(RecordedRequest::to_json)
        .collect();
    raw_response(
        StatusCode::OK,
        "application/json",
        Value::Array(list).to_string(),
    )
}

async fn clear_requests_route(State(s): State<Arc<SimState>>) -> Response {
    s.log().entries.clear();
    Response::builder()
        .status(StatusCode::NO_CONTENT)
        .body(Body::empty())
        .unwrap_or_else(|_| Response::new(Body::empty()))
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

/// What the answer to one request shares across its frames.
pub(crate) struct Answering<'a> {
    /// The model the request named.
    pub model: &'a str,
    /// The request's [`RecordedRequest::seq`]: response ids are made from it, so they differ
    /// per request.
    pub request_no: usize,
    /// When the answer was made, in Unix seconds.
    pub created: i64,
}

impl Answering<'_> {
    /// [`Self::created`] as RFC 3339.
    pub fn created_at(&self) -> String {
        chrono::DateTime::from_timestamp(self.created, 0)
            .unwrap_or_default()
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    }
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
    let (model, gemini_action) = match protocol {
        SimProtocol::Gemini => {
            let (model, action) = gemini::model_and_action(uri.path());
            (model, Some(action))
        }
        _ => (
            body.get("model")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            None,
        ),
    };
    let stream = match &gemini_action {
        Some(action) => *action == gemini::Action::StreamGenerate,
        None => body.get("stream").and_then(Value::as_bool) == Some(true),
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
    let behaviour = Behaviour::from_model(&model);
    let unknown_action = match &gemini_action {
        Some(gemini::Action::Other(action)) => Some(action.clone()),
        _ => None,
    };
    let (request_no, step) = {
        let mut log = state.log();
        let no = log.next_seq;
        log.next_seq += 1;
        log.entries.push(RecordedRequest {
            seq: no,
            protocol,
            model: model.clone(),
            method: method.to_string(),
            path,
            headers: header_map,
            body: body.clone(),
            stream,
            usage: None,
        });
        if let Some(refusal) = state.persona.refuses_request(protocol, &body) {
            drop(log);
            return error_response(protocol, &refusal);
        }
        if state.persona.refuses_stream(protocol, stream, &body) {
            // The request never reached a model turn: the script does not advance.
            drop(log);
            return broken_event_stream();
        }
        if let Some(action) = unknown_action {
            drop(log);
            return error_response(
                protocol,
                &SimError::message(
                    404,
                    "not_found",
                    format!(
                        "the simulator serves generateContent and streamGenerateContent, not '{action}'"
                    ),
                ),
            );
        }
        // The script advances only on requests it answers.
        let offer_reply = state
            .script
            .tool_offer_reply()
            .filter(|reply| reply.answers(&Conversation::from_request(protocol, &body)))
            .cloned();
        let step = match (offer_reply, behaviour.as_ref()) {
            (Some(reply), _) => Some(reply),
            (None, None) => {
                let at = log.script_next;
                log.script_next += 1;
                Some(state.script.step(at))
            }
            (None, Some(_)) => None,
        };
        (no, step)
    };

    let answer = match (step, behaviour) {
        (Some(Step::Error(err)), _) => return error_response(protocol, &err),
        (Some(Step::Reply { turn, delivery }), _) => behaviour::Answer::Reply {
            turn,
            delivery,
            stall_body: false,
            cut_mid: false,
        },
        (None, Some(Err(message))) => {
            return error_response(
                protocol,
                &SimError::message(404, "not_found_error", message),
            );
        }
        (None, Some(Ok(b))) => {
            let conv = Conversation::from_request(protocol, &body);
            let attempt = state.session_attempt(session_key(&model, &conv));
            behaviour::answer(b, &conv, attempt)
        }
        (None, None) => return error_response(protocol, &SimError::model_not_found(&model)),
    };
    let (turn, delivery, stall_body, cut_mid) = match answer {
        behaviour::Answer::Error(err) => return error_response(protocol, &err),
        behaviour::Answer::Reply {
            turn,
            delivery,
            stall_body,
            cut_mid,
        } => (turn, delivery, stall_body, cut_mid),
    };
    if !delivery.cold_start.is_zero() {
        tokio::time::sleep(delivery.cold_start).await;
    }
    let input_tokens = count_tokens(&String::from_utf8_lossy(&raw));
    let cached = state.cache.serve(protocol, &model, &body);
    // Both cache counts are parts of the prompt; the body is counted whole.
    let cached_input_tokens = cached.read.min(input_tokens);
    let usage = SimUsage {
        input_tokens,
        output_tokens: turn.output_tokens(),
        cached_input_tokens,
        cache_write_input_tokens: cached.written.min(input_tokens - cached_input_tokens),
    };
    if let Some(r) = state.log().entries.iter_mut().find(|r| r.seq == request_no) {
        r.usage = Some(usage);
    }
    let ids = call_ids(&turn, request_no);
    let answering = Answering {
        model: &model,
        request_no,
        created: chrono::Utc::now().timestamp(),
    };

    if !stream {
        if delivery.malformed_json {
            return raw_response(StatusCode::OK, "application/json", "{\"choices\": [{\"mess");
        }
        let json = match protocol {
            SimProtocol::OpenAi => openai::full(&turn, &ids, usage, &answering),
            SimProtocol::Anthropic => anthropic::full(&turn, &ids, usage, &answering),
            SimProtocol::Gemini => gemini::full(&turn, &ids, usage, &answering),
            SimProtocol::Ollama => ollama::full(&turn, usage, &answering),
        }
        .to_string();
        if stall_body || cut_mid {
            let (first, _) = halves(&json);
            let sent = futures::stream::iter([Ok::<_, Infallible>(Bytes::from(first))]);
            let body = if stall_body {
                Body::from_stream(sent.chain(futures::stream::pending()))
            } else {
                Body::from_stream(sent)
            };
            return Response::builder()
                .status(StatusCode::OK)
                .header(header::CONTENT_TYPE, "application/json")
                .body(body)
                .unwrap_or_else(|_| Response::new(Body::empty()));
        }
        return raw_response(StatusCode::OK, "application/json", json);
    }

    let rendered = match protocol {
        SimProtocol::OpenAi => openai::frames(&turn, &ids, usage, &answering, &delivery),
        SimProtocol::Anthropic => anthropic::frames(&turn, &ids, usage, &answering, &delivery),
        SimProtocol::Gemini => gemini::frames(&turn, &ids, usage, &answering),
        SimProtocol::Ollama => ollama::frames(&turn, usage, &answering),
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
    let mut frames: Vec<String> = frames.into_iter().take(limit).collect();
    if cut_mid {
        // The connection drops in the middle of a frame.
        if let Some(last) = frames.last_mut() {
            *last = halves(last).0;
        }
    }
    let sent: Vec<Result<Bytes, Infallible>> =
        frames.into_iter().map(|f| Ok(Bytes::from(f))).collect();
    let body = futures::stream::iter(sent);
    let body = if delivery.stall_after_frames.is_some() {
        Body::from_stream(Tracked::new(body.chain(futures::stream::pending()), state))
    } else {
        Body::from_stream(Tracked::new(body, state))
    };
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CACHE_CONTROL, "no-cache")
        .body(body)
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

/// A streamed body that counts itself abandoned when it is dropped before it ended (the
/// server drops a response body when its client closes the connection).
struct Tracked<S> {
    inner: std::pin::Pin<Box<S>>,
    ended: bool,
    state: Arc<SimState>,
}

impl<S> Tracked<S> {
    fn new(inner: S, state: Arc<SimState>) -> Self {
        Self {
            inner: Box::pin(inner),
            ended: false,
            state,
        }
    }
}

impl<S: futures::Stream> futures::Stream for Tracked<S> {
    type Item = S::Item;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let next = self.inner.as_mut().poll_next(cx);
        if let std::task::Poll::Ready(None) = next {
            self.ended = true;
        }
        next
    }
}

impl<S> Drop for Tracked<S> {
    fn drop(&mut self) {
        if !self.ended {
            self.state
                .abandoned
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

/// Behaviour state is per model and conversation, so parallel tests do not share it.
fn session_key(model: &str, conv: &Conversation) -> String {
    let mut h = DefaultHasher::new();
    conv.first_user().hash(&mut h);
    format!("{model}#{:016x}", h.finish())
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
                    "message": message, "status": gemini::rpc_status(err.status, code)}}),
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

#[cfg(test)]
mod log_masking_tests {
    use super::*;

    #[test]
    fn query_keys_are_masked_and_other_parameters_kept() {
        assert_eq!(
            mask_query("/v1beta/models/m:streamGenerateContent?alt=sse&key=AIzaSECRET"),
            "/v1beta/models/m:streamGenerateContent?alt=sse&key=***"
        );
        assert_eq!(mask_query("/v1/chat/completions"), "/v1/chat/completions");
        assert_eq!(mask_query("/x?keyring=1"), "/x?keyring=1");
        assert!(SECRET_HEADERS.contains(&"x-goog-api-key"));
    }
}
