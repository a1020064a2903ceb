//! Watch run cost and overhead: the real Watch executor (`WatchRuntime`: seed, agentic loop,
//! Watch tools against the store, accounting) over fleets seeded in Postgres, with the provider
//! simulator's `sim:diligent` model at zero latency.
//!
//! - input tokens per run, counted by the simulator's o200k_base tokenizer over each request
//!   body, for the healthy 50-resource fleet, the same fleet with one unhealthy service (the run
//!   that reports it) and the run after (the one that gives the finding a verdict);
//! - per healthy fleet of 50, 200 and 1,000 resources, on each caching wire (OpenAI-compatible,
//!   Anthropic): input tokens raw, read from the prompt cache, written to it, billed-equivalent
//!   (cache reads and writes weighted by a reference model's price ratios), requests and wall
//!   time per run. Every run starts with a cold cache (a fresh simulator): a Patrol cadence is
//!   longer than a provider keeps a prompt cached, so nothing is carried from the run before;
//! - run wall time minus provider time (the executor's own work: seed, redaction, tool handlers
//!   and their store reads, finding writes, accounting), p50/p95 over healthy runs;
//! - where each request of a healthy 50-resource run spends its input tokens (tool schemas,
//!   system prompt, seed, history), on each wire, and a PASS/FAIL line per wire for the raw input
//!   target of a healthy 50-resource run ([`RAW_TARGET_50`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use pulse_agent_loop::agent_loop::BoxFuture;
use pulse_agent_loop::pricing::{self, PriceRow};
use pulse_agent_loop::provider::Usage;
use pulse_agent_loop::provider::pool::ProviderPool;
use pulse_agent_loop::route::Route;
use pulse_domain::TenantId;
use pulse_domain::patrol::run::{PatrolRun, RunType, TriggerReason};
use pulse_domain::resource::{Health, ObservedResource, Resource};
use pulse_model_runner::preflight::RouteConnection;
use pulse_model_runner::watch::executor::{
    Ending, ProgressSink, WatchExecutor, WatchInput, WatchOutcome,
};
use pulse_model_runner::watch::runtime::WatchRuntime;
use pulse_store::{Store, agents, patrol_runs, resources, tenants};
use pulse_test_support::db::TestDb;
use pulse_test_support::provider_sim::{ProviderSim, Script, SimUsage, count_tokens};
use serde_json::Value;

use crate::{BenchArgs, figure, quantile};

const BENCH: &str = "watch";
/// Agents in the 50-resource fleet; each reports [`SERVICES_PER_HOST`] services.
const HOSTS: usize = 5;
const SERVICES_PER_HOST: usize = 10;
const RESOURCES: usize = HOSTS * SERVICES_PER_HOST;
/// Healthy fleet sizes of the scaling figures.
const FLEETS: [usize; 3] = [50, 200, 1_000];
/// The billed-equivalent target for a healthy 50-resource run on a caching provider.
const BILLED_TARGET_50: f64 = 4_000.0;
/// The raw input target for a healthy 50-resource run on every wire: on a CPU-only local model
/// every prompt token is time the user waits, and nothing is cached.
const RAW_TARGET_50: f64 = 6_000.0;
/// A healthy 1,000-resource run may use at most this many times the tokens of a 50-resource run.
const SCALE_TARGET: f64 = 2.0;
const MODEL: &str = "sim:diligent";
/// The upstream figure for one Watch run on a real fleet.
const UPSTREAM_INPUT_TOKENS: f64 = 104_528.0;

/// Progress is the worker's concern (a record write per call); the executor bench skips it.
struct NoProgress;

impl ProgressSink for NoProgress {
    fn provider_call(&self, _provider_calls: u32, _total: Usage) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

fn service(name: &str, health: Health) -> ObservedResource {
    ObservedResource {
        health,
        labels: BTreeMap::from([("tier".to_owned(), "backend".to_owned())]),
        ..pulse_test_support::seed::service_resource(name)
    }
}

const SERVICE_NAMES: [&str; SERVICES_PER_HOST] = [
    "web", "api", "worker", "db", "cache", "queue", "search", "metrics", "proxy", "backup",
];

/// Every agent reports its services; `faulty` (host index, service) is unhealthy.
async fn seed(
    store: &Store,
    tenant: &TenantId,
    faulty: Option<(usize, &str)>,
) -> anyhow::Result<Vec<Resource>> {
    seed_hosts(store, tenant, HOSTS, faulty).await
}

/// `hosts` agents reporting [`SERVICES_PER_HOST`] services each.
async fn seed_hosts(
    store: &Store,
    tenant: &TenantId,
    hosts: usize,
    faulty: Option<(usize, &str)>,
) -> anyhow::Result<Vec<Resource>> {
    let tx = store.tenant_tx(tenant).await?;
    for h in 0..hosts {
        let host = format!("bench-host-{h}");
        agents::connect(
            &tx,
            &agents::AgentSession {
                id: host.clone(),
                hostname: host.clone(),
                agent_version: "bench".to_owned(),
                report_interval_ms: 10_000,
                token_id: None,
            },
        )
        .await?;
        let observed: Vec<ObservedResource> = SERVICE_NAMES
            .iter()
            .map(|name| {
                let health = if faulty == Some((h, name)) {
                    Health::Unhealthy
                } else {
                    Health::Healthy
                };
                service(name, health)
            })
            .collect();
        resources::apply_report(&tx, &host, Utc::now(), &observed).await?;
    }
    let inventory = resources::list(&tx, None).await?;
    tx.commit().await?;
    Ok(inventory)
}

/// One measured run.
struct Measured {
    outcome: WatchOutcome,
    wall: Duration,
    /// Input tokens of the run's requests, as the simulator counted them.
    sim_input_tokens: u64,
    /// What the simulator reported, summed over the run's requests.
    usage: Usage,
    requests: usize,
    breakdown: Breakdown,
    /// Where each request's input tokens went, in order.
    per_request: Vec<RequestTokens>,
}

/// Where a run's input tokens go: what every request repeats, from its first request.
#[derive(Debug, Default, Clone, Copy)]
struct Breakdown {
    requests: usize,
    tool_schemas: u64,
    system: u64,
    seed: u64,
}

impl Breakdown {
    fn of(body: &Value, requests: usize) -> Self {
        let parts = RequestTokens::of(body, 0);
        Self {
            requests,
            tool_schemas: parts.tools,
            system: parts.system,
            seed: parts.seed,
        }
    }
}

/// One request's input tokens by part, on either wire: the tool schemas, the system prompt
/// (a message on the OpenAI wire, a field on the Anthropic wire), the seed (the first user
/// message), the history after it (the run's own calls, tool results and instructions), and the
/// rest (model, limits and the JSON around the parts).
#[derive(Debug, Default, Clone, Copy)]
struct RequestTokens {
    total: u64,
    tools: u64,
    system: u64,
    seed: u64,
    history: u64,
}

impl RequestTokens {
    /// `total`: the input tokens the simulator counted over the request as sent.
    fn of(body: &Value, total: u64) -> Self {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let tokens = |v: &Value| count_tokens(&v.to_string());
        let system = match body.get("system") {
            Some(system) => tokens(system),
            None => messages
                .iter()
                .filter(|m| m["role"] == "system")
                .map(tokens)
                .sum(),
        };
        let seed_at = messages.iter().position(|m| m["role"] == "user");
        Self {
            total,
            tools: body.get("tools").map_or(0, tokens),
            system,
            seed: seed_at.map_or(0, |i| tokens(&messages[i])),
            history: seed_at.map_or(0, |i| messages[i + 1..].iter().map(tokens).sum()),
        }
    }

    fn rest(&self) -> u64 {
        self.total
            .saturating_sub(self.tools + self.system + self.seed + self.history)
    }
}

/// Prints where each request of one run spent its input tokens.
fn print_requests(what: &str, requests: &[RequestTokens]) {
    println!(
        "{BENCH:<8} per request, {what}: total = tool schemas + system prompt + seed + history + rest"
    );
    for (at, r) in requests.iter().enumerate() {
        println!(
            "{BENCH:<8}   request {}: {:>5} = {:>4} + {:>4} + {:>4} + {:>4} + {:>3}",
            at + 1,
            r.total,
            r.tools,
            r.system,
            r.seed,
            r.history,
            r.rest()
        );
    }
    let sum = |f: fn(&RequestTokens) -> u64| requests.iter().map(f).sum::<u64>();
    println!(
        "{BENCH:<8}   run:       {:>5} = {:>4} + {:>4} + {:>4} + {:>4} + {:>3}",
        sum(|r| r.total),
        sum(|r| r.tools),
        sum(|r| r.system),
        sum(|r| r.seed),
        sum(|r| r.history),
        sum(RequestTokens::rest)
    );
}

struct Bench {
    store: Store,
    tenant: TenantId,
    sim: ProviderSim,
    runtime: WatchRuntime,
    connection: RouteConnection,
}

impl Bench {
    async fn run(&self, inventory: &[Resource]) -> anyhow::Result<Measured> {
        let run = PatrolRun::queued(
            patrol_runs::new_run_id(),
            TriggerReason::Manual,
            RunType::Full,
            Utc::now(),
        );
        let tx = self.store.tenant_tx(&self.tenant).await?;
        patrol_runs::insert_queued(&tx, &run, None).await?;
        tx.commit().await?;
        self.sim.clear_requests();
        let started = Instant::now();
        let outcome = self
            .runtime
            .execute(WatchInput {
                tenant: &self.tenant,
                run: &run,
                connection: &self.connection,
                inventory,
                progress: &NoProgress,
            })
            .await;
        let wall = started.elapsed();
        if let Ending::Failed { cause, detail } = &outcome.ending {
            anyhow::bail!("watch bench run failed: {cause}: {detail}");
        }
        let requests: Vec<_> = self
            .sim
            .requests()
            .into_iter()
            .filter(|r| r.model == MODEL)
            .collect();
        let breakdown = requests
            .first()
            .map(|r| Breakdown::of(&r.body, requests.len()));
        let mut usage = Usage::default();
        for reported in requests.iter().filter_map(|r| r.usage) {
            usage += usage_of(reported);
        }
        let per_request = requests
            .iter()
            .map(|r| RequestTokens::of(&r.body, r.usage.map_or(0, |u| u.input_tokens)))
            .collect();
        Ok(Measured {
            outcome,
            wall,
            sim_input_tokens: usage.input_tokens,
            usage,
            requests: requests.len(),
            breakdown: breakdown.unwrap_or_default(),
            per_request,
        })
    }
}

fn usage_of(sim: SimUsage) -> Usage {
    Usage {
        input_tokens: sim.input_tokens,
        output_tokens: sim.output_tokens,
        cached_input_tokens: sim.cached_input_tokens,
        cache_write_input_tokens: sim.cache_write_input_tokens,
    }
}

fn accounted(measured: &Measured) -> (u32, u32) {
    match &measured.outcome.ending {
        Ending::Answered { accounting, .. } => {
            (accounting.new_findings, accounting.reconfirmed_findings)
        }
        Ending::Failed { .. } => (0, 0),
    }
}

pub async fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let runs = if args.quick { 3 } else { 100 };
    let db = TestDb::create().await?;
    let mut result = measure(&db, runs).await;
    if result.is_ok() {
        result = fleets(&db, if args.quick { 1 } else { 5 }).await;
    }
    db.cleanup().await?;
    result
}

/// A caching wire and the model whose cache price ratios weigh its billed-equivalent tokens.
struct Wire {
    name: &'static str,
    provider: &'static str,
    reference: &'static PriceRow,
}

fn wires() -> anyhow::Result<[Wire; 2]> {
    let row = |provider: &str, model: &str| {
        pricing::price(provider, model)
            .ok_or_else(|| anyhow::anyhow!("no price row for {provider}:{model}"))
    };
    Ok([
        Wire {
            name: "openai",
            provider: "openai",
            reference: row("openai", "gpt-4.1")?,
        },
        Wire {
            name: "anthropic",
            provider: "anthropic",
            reference: row("anthropic", "claude-sonnet-4-20250514")?,
        },
    ])
}

/// One healthy fleet on one wire: the figures of its runs.
struct FleetFigures {
    raw: Vec<f64>,
    cached: Vec<f64>,
    written: Vec<f64>,
    billed: Vec<f64>,
    requests: Vec<f64>,
    wall_ms: Vec<f64>,
}

impl FleetFigures {
    fn p50(v: &[f64]) -> f64 {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        quantile(&v, 0.5)
    }
}

/// Healthy fleets of [`FLEETS`] resources on each caching wire, `runs` cold-cache runs each.
async fn fleets(db: &TestDb, runs: usize) -> anyhow::Result<()> {
    let mut billed_50 = BTreeMap::new();
    let mut raw_by_fleet: BTreeMap<(&str, usize), f64> = BTreeMap::new();
    let mut requests_50: BTreeMap<&str, Vec<RequestTokens>> = BTreeMap::new();
    for (at, size) in FLEETS.into_iter().enumerate() {
        let tenant = TenantId::new(format!("bench-watch-fleet-{at}"))?;
        tenants::create(db.store(), &tenant, "Watch fleet bench").await?;
        let inventory = seed_hosts(db.store(), &tenant, size / SERVICES_PER_HOST, None).await?;
        anyhow::ensure!(
            inventory.len() == size,
            "seeded {} resources, expected {size}",
            inventory.len()
        );
        for wire in wires()? {
            let mut figures = FleetFigures {
                raw: Vec::new(),
                cached: Vec::new(),
                written: Vec::new(),
                billed: Vec::new(),
                requests: Vec::new(),
                wall_ms: Vec::new(),
            };
            for _ in 0..runs {
                // A fresh simulator: the run starts with a cold prompt cache.
                let sim = ProviderSim::start(Script::turns([])).await?;
                let base_url = match wire.provider {
                    "anthropic" => sim.base_url(),
                    _ => sim.openai_base_url(),
                };
                let bench = Bench {
                    store: db.store().clone(),
                    tenant: tenant.clone(),
                    runtime: WatchRuntime::new(
                        db.store().clone(),
                        None,
                        Arc::new(ProviderPool::new()),
                    ),
                    connection: RouteConnection {
                        route: Route::parse(&format!("{}:{MODEL}", wire.provider))?,
                        base_url: Some(base_url),
                        api_key: Some("sk-bench-watch-5b1d0c9e".to_owned()),
                        options: Default::default(),
                        settings_version: None,
                    },
                    sim,
                };
                let m = bench.run(&inventory).await?;
                anyhow::ensure!(
                    accounted(&m) == (0, 0),
                    "a healthy {size}-resource run recorded findings"
                );
                figures.raw.push(m.usage.input_tokens as f64);
                figures.cached.push(m.usage.cached_input_tokens as f64);
                figures
                    .written
                    .push(m.usage.cache_write_input_tokens as f64);
                figures
                    .billed
                    .push(wire.reference.billed_equivalent_input(m.usage));
                figures.requests.push(m.requests as f64);
                figures.wall_ms.push(m.wall.as_secs_f64() * 1e3);
                if size == 50 {
                    requests_50.insert(wire.name, m.per_request);
                }
            }
            let p50 = FleetFigures::p50;
            println!(
                "{BENCH:<8} healthy {size} resources, {} wire, billed as {} (cache read x{:.2}, write x{:.2}), {runs} cold-cache run(s)",
                wire.name,
                wire.reference.model,
                wire.reference.cached_input_ratio(),
                wire.reference.cache_write_ratio(),
            );
            let label = |what: &str| format!("{size:>5} {:<9} {what}", wire.name);
            figure(BENCH, &label("input raw"), p50(&figures.raw), "tokens");
            figure(
                BENCH,
                &label("input cached"),
                p50(&figures.cached),
                "tokens",
            );
            figure(
                BENCH,
                &label("input cache-written"),
                p50(&figures.written),
                "tokens",
            );
            figure(
                BENCH,
                &label("billed-equivalent"),
                p50(&figures.billed),
                "tokens",
            );
            figure(
                BENCH,
                &label("requests"),
                p50(&figures.requests),
                "requests",
            );
            figure(BENCH, &label("wall time"), p50(&figures.wall_ms), "ms");
            raw_by_fleet.insert((wire.name, size), p50(&figures.raw));
            if size == 50 {
                billed_50.insert(wire.name, p50(&figures.billed));
            }
        }
    }
    for (wire, requests) in &requests_50 {
        print_requests(&format!("healthy 50 resources, {wire} wire"), requests);
    }
    for wire in wires()? {
        let small = raw_by_fleet
            .get(&(wire.name, 50))
            .copied()
            .unwrap_or(f64::NAN);
        let large = raw_by_fleet
            .get(&(wire.name, 1_000))
            .copied()
            .unwrap_or(f64::NAN);
        figure(
            BENCH,
            &format!("1000/50 raw input ratio, {}", wire.name),
            large / small,
            "x",
        );
        if large / small > SCALE_TARGET {
            eprintln!(
                "{BENCH:<8} WARNING: a healthy 1,000-resource run used {:.2}x the tokens of a 50-resource run on the {} wire (target <= {SCALE_TARGET}x)",
                large / small,
                wire.name
            );
        }
        // NaN (no figure) is not a pass.
        let verdict = if small <= RAW_TARGET_50 {
            "PASS"
        } else {
            "FAIL"
        };
        println!(
            "{BENCH:<8} healthy 50-resource run, {} wire: {small:.0} raw input tokens (target <= {RAW_TARGET_50:.0}) {verdict}",
            wire.name
        );
        let billed = billed_50.get(wire.name).copied().unwrap_or(f64::NAN);
        if billed > BILLED_TARGET_50 {
            eprintln!(
                "{BENCH:<8} WARNING: a healthy 50-resource run billed {billed:.0} equivalent input tokens on the {} wire (target <= {BILLED_TARGET_50})",
                wire.name
            );
        }
    }
    Ok(())
}

async fn measure(db: &TestDb, runs: usize) -> anyhow::Result<()> {
    let tenant = TenantId::new("bench-watch")?;
    tenants::create(db.store(), &tenant, "Watch bench").await?;
    let sim = ProviderSim::start(Script::turns([])).await?;
    let connection = RouteConnection {
        route: Route::parse(&format!("openai:{MODEL}"))?,
        base_url: Some(sim.openai_base_url()),
        api_key: Some("sk-bench-watch-5b1d0c9e".to_owned()),
        options: Default::default(),
        settings_version: None,
    };
    let bench = Bench {
        store: db.store().clone(),
        tenant,
        runtime: WatchRuntime::new(db.store().clone(), None, Arc::new(ProviderPool::new())),
        sim,
        connection,
    };

    // Healthy fleet: tokens of every run, overhead over all of them (after one warm-up).
    let inventory = seed(&bench.store, &bench.tenant, None).await?;
    anyhow::ensure!(
        inventory.len() == RESOURCES,
        "seeded {} resources, expected {RESOURCES}",
        inventory.len()
    );
    bench.run(&inventory).await?;
    let mut overhead_ms = Vec::with_capacity(runs);
    let mut wall_ms = Vec::with_capacity(runs);
    let mut provider_ms = Vec::with_capacity(runs);
    let mut healthy_tokens = Vec::with_capacity(runs);
    let mut turns = 0;
    let mut breakdown = Breakdown::default();
    let mut per_request = Vec::new();
    for _ in 0..runs {
        let m = bench.run(&inventory).await?;
        anyhow::ensure!(
            accounted(&m) == (0, 0),
            "a healthy fleet run recorded findings"
        );
        let provider = m.outcome.provider_time;
        overhead_ms.push(m.wall.saturating_sub(provider).as_secs_f64() * 1e3);
        wall_ms.push(m.wall.as_secs_f64() * 1e3);
        provider_ms.push(provider.as_secs_f64() * 1e3);
        healthy_tokens.push(m.sim_input_tokens as f64);
        turns = m.outcome.turns;
        breakdown = m.breakdown;
        per_request = m.per_request;
    }

    // One fault: the run that reports it, then the run that gives it a verdict.
    let faulty = seed(&bench.store, &bench.tenant, Some((2, "db"))).await?;
    let report = bench.run(&faulty).await?;
    anyhow::ensure!(
        accounted(&report).0 == 1,
        "the fault run recorded {:?} (new, reconfirmed), expected one new finding",
        accounted(&report)
    );
    let verdict = bench.run(&faulty).await?;
    anyhow::ensure!(
        accounted(&verdict).1 == 1,
        "the run after the fault recorded {:?} (new, reconfirmed), expected one reconfirmed",
        accounted(&verdict)
    );

    let sort = |v: &mut Vec<f64>| v.sort_by(f64::total_cmp);
    sort(&mut overhead_ms);
    sort(&mut wall_ms);
    sort(&mut provider_ms);
    sort(&mut healthy_tokens);
    println!(
        "{BENCH:<8} {RESOURCES} resources, {runs} healthy runs of {turns} turns, model {MODEL} (zero latency)"
    );
    figure(
        BENCH,
        "input tokens per run, healthy (p50)",
        quantile(&healthy_tokens, 0.5),
        "tokens",
    );
    figure(
        BENCH,
        "input tokens per run, healthy (max)",
        quantile(&healthy_tokens, 1.0),
        "tokens",
    );
    figure(
        BENCH,
        "input tokens per run, one fault (report)",
        report.sim_input_tokens as f64,
        "tokens",
    );
    figure(
        BENCH,
        "input tokens per run, one fault (verdict)",
        verdict.sim_input_tokens as f64,
        "tokens",
    );
    figure(
        BENCH,
        "provider requests per healthy run",
        breakdown.requests as f64,
        "requests",
    );
    figure(
        BENCH,
        "  tool schemas, repeated per request",
        breakdown.tool_schemas as f64,
        "tokens",
    );
    figure(
        BENCH,
        "  system prompt, repeated per request",
        breakdown.system as f64,
        "tokens",
    );
    figure(
        BENCH,
        "  seed (inventory + triage), per request",
        breakdown.seed as f64,
        "tokens",
    );
    print_requests("last healthy run, openai wire", &per_request);
    figure(
        BENCH,
        "upstream input tokens per run (reference)",
        UPSTREAM_INPUT_TOKENS,
        "tokens",
    );
    figure(
        BENCH,
        "run wall - provider time p50",
        quantile(&overhead_ms, 0.5),
        "ms",
    );
    figure(
        BENCH,
        "run wall - provider time p95",
        quantile(&overhead_ms, 0.95),
        "ms",
    );
    figure(BENCH, "run wall time p50", quantile(&wall_ms, 0.5), "ms");
    figure(
        BENCH,
        "provider time per run p50",
        quantile(&provider_ms, 0.5),
        "ms",
    );
    let max_tokens = [
        quantile(&healthy_tokens, 1.0),
        report.sim_input_tokens as f64,
        verdict.sim_input_tokens as f64,
    ]
    .into_iter()
    .fold(0.0, f64::max);
    if max_tokens > 12_000.0 {
        eprintln!("{BENCH:<8} WARNING: a run used {max_tokens} input tokens (target <= 12,000)");
    }
    Ok(())
}

/// The wall-time target of a healthy 50-resource run on a local model route (2 cores).
const LOCAL_WALL_TARGET_S: f64 = 60.0;

/// A real route to measure instead of the simulator (`pulse-bench watch-real`).
pub struct RealRoute {
    /// `provider:model`, as in the settings (`llamacpp:qwen2.5-coder-1.5b-instruct`).
    pub route: String,
    /// The provider's base URL (`http://127.0.0.1:8089/v1`).
    pub base_url: String,
    pub runs: usize,
}

/// Healthy 50-resource Watch runs on a real model server: the wall time a user waits, with the
/// tokens and calls behind it. Not part of `all`: it needs a model server that is running.
pub async fn real(route: &RealRoute) -> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let result = real_runs(&db, route).await;
    db.cleanup().await?;
    result
}

async fn real_runs(db: &TestDb, real: &RealRoute) -> anyhow::Result<()> {
    let tenant = TenantId::new("bench-watch-real")?;
    tenants::create(db.store(), &tenant, "Watch bench, real route").await?;
    let connection = RouteConnection {
        base_url: Some(real.base_url.clone()),
        ..RouteConnection::new(Route::parse(&real.route)?)
    };
    let runtime = WatchRuntime::new(db.store().clone(), None, Arc::new(ProviderPool::new()));
    let inventory = seed(db.store(), &tenant, None).await?;
    println!(
        "{BENCH:<8} {RESOURCES} healthy resources, route {} at {}, {} run(s)",
        real.route, real.base_url, real.runs
    );
    let mut wall_s = Vec::with_capacity(real.runs);
    for i in 1..=real.runs {
        let run = PatrolRun::queued(
            patrol_runs::new_run_id(),
            TriggerReason::Manual,
            RunType::Full,
            Utc::now(),
        );
        let tx = db.store().tenant_tx(&tenant).await?;
        patrol_runs::insert_queued(&tx, &run, None).await?;
        tx.commit().await?;
        let started = Instant::now();
        let outcome = runtime
            .execute(WatchInput {
                tenant: &tenant,
                run: &run,
                connection: &connection,
                inventory: &inventory,
                progress: &NoProgress,
            })
            .await;
        let wall = started.elapsed().as_secs_f64();
        let ended = match &outcome.ending {
            Ending::Answered { accounting, .. } => format!(
                "answered: {} new finding(s), {} unaddressed signal(s)",
                accounting.new_findings, accounting.unaddressed_signals
            ),
            Ending::Failed { cause, detail } => format!("failed: {cause}: {detail}"),
        };
        println!(
            "{BENCH:<8} run {i}: {wall:.1} s wall, {:.1} s in the model, {} request(s), {} input / {} output tokens, {} call(s) ({} recovered from text); {ended}",
            outcome.provider_time.as_secs_f64(),
            outcome.provider_calls,
            outcome.usage.input_tokens,
            outcome.usage.output_tokens,
            outcome.tool_call_count,
            outcome.tool_calls_recovered,
        );
        wall_s.push(wall);
    }
    wall_s.sort_by(f64::total_cmp);
    let p50 = quantile(&wall_s, 0.5);
    figure(BENCH, "real route wall time p50", p50, "s");
    figure(
        BENCH,
        "real route wall time max",
        wall_s.last().copied().unwrap_or(f64::NAN),
        "s",
    );
    let verdict = if p50 < LOCAL_WALL_TARGET_S {
        "PASS"
    } else {
        "FAIL"
    };
    println!(
        "{BENCH:<8} healthy 50-resource run on {}: {p50:.1} s p50 wall time (target < {LOCAL_WALL_TARGET_S:.0} s) {verdict}",
        real.route
    );
    Ok(())
}
