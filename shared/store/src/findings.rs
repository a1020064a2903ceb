//! The finding store: the only writer path for `findings`, `finding_events` and
//! `finding_suppressions` (ARCHITECTURE §3: every writer — model-runner, scheduler, gateway,
//! verifier — goes through here).
//!
//! Each writing function loads what the pure rules in [`pulse_domain::finding`] need inside the
//! caller's [`TenantTx`], calls them, and writes the result as a compare-and-swap on the row's
//! `version`: the UPDATE names the version it read, so of two racing writers exactly one lands
//! and the other re-reads and decides again (at most [`MAX_CAS_ATTEMPTS`] times). New events go
//! to `finding_events` in the same transaction and each finding keeps the newest
//! [`MAX_LIFECYCLE_EVENTS`].
//!
//! [`report`] also takes a transaction-scoped advisory lock on (tenant, resource): the sibling
//! merge decides from the set of open findings on the resource, which a per-row version cannot
//! protect. Callers that report several findings in one transaction hold several such locks;
//! Postgres resolves lock-order deadlocks by aborting one transaction, which the caller retries.
//!
//! Nothing here commits: the caller commits the transaction (and can put an outbox message in
//! the same transaction).
//!
//! Every write that changes a finding puts its lifecycle event (`events.finding.created`,
//! `updated` or `resolved`, [`pulse_bus::events::FindingChanged`]) in the outbox of that same
//! transaction, on the transaction's subjects: the event is published if and only if the change
//! commits, and no writer can change a finding without it.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use pulse_bus::OutboxRow;
use pulse_bus::events::{FindingChange, FindingChanged};
use pulse_domain::finding::equivalence::{MergeBasis, ResourceSignals};
use pulse_domain::finding::operator_state::{self, SuppressionCause};
use pulse_domain::finding::{
    self as domain, AssessRefusal, Finding, FindingId, LifecycleEvent, MAX_LIFECYCLE_EVENTS,
    OperatorAction, OperatorRefusal, ReportContext, ReportError, ReportKind, ReportedFinding,
    RunOutcome, RuntimeRecovery, Severity, SeverityCounts, SuppressionId, SuppressionRule,
    VerdictInput, VerifierOutcome,
};
use pulse_domain::patrol::run::{ErrorCause, RunId};
use tokio_postgres::Row;
use tokio_postgres::types::Json;

use crate::{StoreError, TenantTx};

/// Listing limits of [`list`].
pub const DEFAULT_LIST_LIMIT: i64 = 200;
pub const MAX_LIST_LIMIT: i64 = pulse_domain::listing::MAX_FINDINGS;
/// How often a writer re-reads and decides again after losing a compare-and-swap.
pub const MAX_CAS_ATTEMPTS: usize = 8;

/// A finding as stored, with the version a compare-and-swap must name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredFinding {
    pub finding: Finding,
    pub version: i64,
}

/// Why a finding write did not happen. Refusals leave the store unchanged.
#[derive(Debug, thiserror::Error)]
pub enum FindingsError {
    #[error("no finding {0}")]
    NotFound(FindingId),
    #[error(transparent)]
    Report(#[from] ReportError),
    #[error(transparent)]
    Assess(#[from] AssessRefusal),
    #[error(transparent)]
    Operator(#[from] OperatorRefusal),
    /// The caller named a version the finding no longer has.
    #[error("finding {id} is at version {found}, not {expected}")]
    Conflict {
        id: FindingId,
        expected: i64,
        found: i64,
    },
    /// Every compare-and-swap attempt lost to a concurrent writer.
    #[error("finding {0} kept changing concurrently; try again")]
    Contended(FindingId),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<tokio_postgres::Error> for FindingsError {
    fn from(e: tokio_postgres::Error) -> Self {
        FindingsError::Store(StoreError::Database(e))
    }
}

fn invalid(e: impl std::fmt::Display) -> StoreError {
    StoreError::Invalid(e.to_string())
}

/// Columns every read selects, in this order: record, version, lifecycle.
const SELECT: &str = "SELECT f.record, f.version,
        COALESCE((SELECT jsonb_agg(e.event ORDER BY e.seq) FROM finding_events e
                  WHERE e.tenant_id = f.tenant_id AND e.finding_id = f.id), '[]'::jsonb)
     FROM findings f";

fn from_row(row: &Row) -> Result<StoredFinding, StoreError> {
    let Json(mut finding): Json<Finding> = row
        .try_get(0)
        .map_err(|e| invalid(format!("finding record: {e}")))?;
    let version: i64 = row.try_get(1).map_err(invalid)?;
    let Json(lifecycle): Json<Vec<LifecycleEvent>> = row
        .try_get(2)
        .map_err(|e| invalid(format!("finding lifecycle: {e}")))?;
    finding.lifecycle = lifecycle;
    Ok(StoredFinding { finding, version })
}

/// The finding with this id, lifecycle included.
pub async fn get(tx: &TenantTx, id: FindingId) -> Result<Option<StoredFinding>, StoreError> {
    let row = tx
        .client()
        .query_opt(&format!("{SELECT} WHERE f.id = $1"), &[&id.as_hex()])
        .await?;
    row.as_ref().map(from_row).transpose()
}

/// Which findings [`list`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListFilter {
    /// Active findings, including snoozed ones whose snooze has run out at `now`.
    Active,
    /// Every finding in any status, resolved included.
    IncludeResolved,
}

/// Narrows a [`list`]: each given field must match exactly.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Narrowing {
    pub severity: Option<String>,
    pub category: Option<String>,
    pub status: Option<String>,
    pub resource_id: Option<String>,
}

/// The tenant's findings, most recently seen first. `limit` defaults to
/// [`DEFAULT_LIST_LIMIT`] and is clamped to 1..=[`MAX_LIST_LIMIT`].
pub async fn list(
    tx: &TenantTx,
    filter: ListFilter,
    limit: Option<i64>,
    now: DateTime<Utc>,
) -> Result<Vec<StoredFinding>, StoreError> {
    list_narrowed(tx, filter, &Narrowing::default(), limit, now).await
}

/// [`list`], narrowed by severity, category, status and resource.
pub async fn list_narrowed(
    tx: &TenantTx,
    filter: ListFilter,
    narrowing: &Narrowing,
    limit: Option<i64>,
    now: DateTime<Utc>,
) -> Result<Vec<StoredFinding>, StoreError> {
    let limit = limit.unwrap_or(DEFAULT_LIST_LIMIT).clamp(1, MAX_LIST_LIMIT);
    let narrow = "AND ($3::text IS NULL OR f.severity = $3)
                  AND ($4::text IS NULL OR f.category = $4)
                  AND ($5::text IS NULL OR f.status = $5)
                  AND ($6::text IS NULL OR f.resource_id = $6)";
    let active = match filter {
        ListFilter::Active => active_at("$2"),
        ListFilter::IncludeResolved => "($2::timestamptz IS NOT NULL)".to_owned(),
    };
    let rows = tx
        .client()
        .query(
            &format!(
                "{SELECT} WHERE {active} {narrow}
                 ORDER BY f.last_seen_at DESC, f.id LIMIT $1"
            ),
            &[
                &limit,
                &now,
                &narrowing.severity,
                &narrowing.category,
                &narrowing.status,
                &narrowing.resource_id,
            ],
        )
        .await?;
    rows.iter().map(from_row).collect()
}

/// What "active at `now`" means (`now` a bind parameter such as `$2`), for [`list`] and
/// [`active_counts`]: active, or snoozed with the snooze run out.
fn active_at(now: &str) -> String {
    format!(
        "(f.status = 'active'
          OR (f.status = 'snoozed' AND (f.record->>'snoozed_until')::timestamptz <= {now}))"
    )
}

/// How many of the tenant's findings are active at `now`, by severity: every one, not a page of
/// them (the Patrol status and the agent context are projected from it).
pub async fn active_counts(
    tx: &TenantTx,
    now: DateTime<Utc>,
) -> Result<SeverityCounts, StoreError> {
    let rows = tx
        .client()
        .query(
            &format!(
                "SELECT f.severity, count(*) FROM findings f
                 WHERE {} GROUP BY f.severity",
                active_at("$1")
            ),
            &[&now],
        )
        .await?;
    let mut counts = SeverityCounts::default();
    for row in rows {
        let severity: String = row.try_get(0)?;
        let n: i64 = row.try_get(1)?;
        let severity = Severity::ALL
            .into_iter()
            .find(|s| s.as_str() == severity)
            .ok_or_else(|| invalid(format!("finding severity {severity:?}")))?;
        counts.add_n(severity, u32::try_from(n).unwrap_or(u32::MAX));
    }
    Ok(counts)
}

/// Open (active or snoozed) findings, optionally of one resource.
async fn open_findings(
    tx: &TenantTx,
    resource_id: Option<&str>,
) -> Result<Vec<StoredFinding>, StoreError> {
    let rows = tx
        .client()
        .query(
            &format!(
                "{SELECT} WHERE f.status IN ('active', 'snoozed')
                   AND ($1::text IS NULL OR f.resource_id = $1)
                 ORDER BY f.detected_at, f.id"
            ),
            &[&resource_id],
        )
        .await?;
    rows.iter().map(from_row).collect()
}

/// The tenant's active suppression rules, oldest first.
pub async fn suppressions(tx: &TenantTx) -> Result<Vec<SuppressionRule>, StoreError> {
    let rows = tx
        .client()
        .query(
            "SELECT id, resource_id, category, created_at, created_by
             FROM finding_suppressions ORDER BY created_at, id",
            &[],
        )
        .await?;
    rows.iter()
        .map(|row| {
            let id: String = row.get(0);
            let category: Option<String> = row.get(2);
            Ok(SuppressionRule {
                id: id.parse().map_err(invalid)?,
                resource_id: row.get(1),
                category: category
                    .map(|c| {
                        domain::Category::parse(&c)
                            .ok_or_else(|| invalid(format!("unknown category {c:?}")))
                    })
                    .transpose()?,
                created_at: row.get(3),
                created_by: row.get(4),
            })
        })
        .collect()
}

/// Writes `finding` with its new events: an insert when `expected_version` is `None`, else a
/// compare-and-swap on that version. Returns the new version, or `None` when the row changed
/// (or, for an insert, appeared) since it was read; nothing was written then.
async fn write(
    tx: &TenantTx,
    expected_version: Option<i64>,
    finding: &Finding,
    new_events: &[LifecycleEvent],
) -> Result<Option<i64>, StoreError> {
    let mut record = finding.clone();
    record.lifecycle = Vec::new();
    let id = finding.id.as_hex();
    let before = match expected_version {
        // No longer at that version: the compare-and-swap would write nothing.
        Some(version) => match previous(tx, &id, version).await? {
            Some(before) => Some(before),
            None => return Ok(None),
        },
        None => None,
    };
    let row = match expected_version {
        None => {
            tx.client()
                .query_opt(
                    "INSERT INTO findings (tenant_id, id, key, resource_id, category, severity,
                                           status, detected_at, last_seen_at, resolved_at,
                                           version, record)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 1, $11)
                     ON CONFLICT (tenant_id, id) DO NOTHING
                     RETURNING version",
                    &[
                        &tx.tenant().as_str(),
                        &id,
                        &finding.key.as_str(),
                        &finding.resource_id,
                        &finding.category.as_str(),
                        &finding.severity.as_str(),
                        &finding.status.as_str(),
                        &finding.detected_at,
                        &finding.last_seen_at,
                        &finding.resolved_at,
                        &Json(&record),
                    ],
                )
                .await?
        }
        Some(version) => {
            tx.client()
                .query_opt(
                    "UPDATE findings
                     SET severity = $3, status = $4, last_seen_at = $5, resolved_at = $6,
                         record = $7, version = version + 1, updated_at = now()
                     WHERE id = $1 AND version = $2
                     RETURNING version",
                    &[
                        &id,
                        &version,
                        &finding.severity.as_str(),
                        &finding.status.as_str(),
                        &finding.last_seen_at,
                        &finding.resolved_at,
                        &Json(&record),
                    ],
                )
                .await?
        }
    };
    let Some(row) = row else {
        return Ok(None);
    };
    let version: i64 = row.get(0);
    append_events(tx, &id, new_events).await?;
    if let Some(change) = change_of(before.as_ref(), finding, new_events) {
        enqueue_change(tx, change, finding, new_events, version).await?;
    }
    Ok(Some(version))
}

/// Appends events after the finding's newest one and trims to the newest
/// [`MAX_LIFECYCLE_EVENTS`]. Runs after the row write, whose row lock serializes it.
async fn append_events(
    tx: &TenantTx,
    finding_id: &str,
    events: &[LifecycleEvent],
) -> Result<(), StoreError> {
    if events.is_empty() {
        return Ok(());
    }
    let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    let ats: Vec<DateTime<Utc>> = events.iter().map(|e| e.at).collect();
    let bodies: Vec<Json<&LifecycleEvent>> = events.iter().map(Json).collect();
    tx.client()
        .execute(
            "INSERT INTO finding_events (tenant_id, finding_id, seq, at, event_type, event)
             SELECT $1, $2,
                    COALESCE((SELECT max(seq) FROM finding_events WHERE finding_id = $2), 0) + n,
                    at, event_type, event
             FROM unnest($3::timestamptz[], $4::text[], $5::jsonb[])
                  WITH ORDINALITY AS t(at, event_type, event, n)",
            &[&tx.tenant().as_str(), &finding_id, &ats, &types, &bodies],
        )
        .await?;
    let keep = MAX_LIFECYCLE_EVENTS as i64;
    tx.client()
        .execute(
            "DELETE FROM finding_events
             WHERE finding_id = $1
               AND seq <= (SELECT max(seq) FROM finding_events WHERE finding_id = $1) - $2",
            &[&finding_id, &keep],
        )
        .await?;
    Ok(())
}

/// What one report did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportOutcome {
    pub kind: ReportKind,
    /// The id the report derived from its resource, category and key.
    pub reported_id: FindingId,
    /// The finding written: the reported one, or for a merge the sibling it was merged into.
    pub finding: StoredFinding,
    /// For a merge, why the report was the sibling's problem (its key, or shared evidence).
    pub merge_basis: Option<MergeBasis>,
}

impl ReportOutcome {
    /// Whether the report created a finding (the tool's `is_new`).
    pub fn is_new(&self) -> bool {
        self.kind == ReportKind::New
    }
}

async fn lock_resource(tx: &TenantTx, resource_id: &str) -> Result<(), StoreError> {
    let name = format!("finding:{}:{resource_id}", tx.tenant());
    tx.client()
        .execute(
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
            &[&name],
        )
        .await?;
    Ok(())
}

/// Records one `patrol_report_finding` (or detector) report from `run` at `now`: a new finding,
/// a heartbeat re-detection, a merge into an equivalent open sibling, or a regression, as
/// [`pulse_domain::finding::report`] decides. Invalid reports are refused with
/// [`FindingsError::Report`] and write nothing. Nothing merges by evidence here; a Watch run
/// passes what it knows with [`report_with_signals`].
pub async fn report(
    tx: &TenantTx,
    incoming: &ReportedFinding,
    run: Option<RunId>,
    now: DateTime<Utc>,
) -> Result<ReportOutcome, FindingsError> {
    report_with_signals(tx, incoming, &ResourceSignals::default(), run, now).await
}

/// [`report`] with `signals`: the deterministic signals that hold for the reported resource in
/// the reporting run (triage flags, firing alerts), which settle a merge the keys' words cannot
/// decide ([`pulse_domain::finding::equivalence::same_problem`]).
pub async fn report_with_signals(
    tx: &TenantTx,
    incoming: &ReportedFinding,
    signals: &ResourceSignals,
    run: Option<RunId>,
    now: DateTime<Utc>,
) -> Result<ReportOutcome, FindingsError> {
    let (_, reported_id) = incoming.identity()?;
    lock_resource(tx, &incoming.resource_id).await?;
    // Patrol runtime findings are never held by a suppression rule or operator state.
    let (rules, operator_cause) = if incoming.resource_id == domain::AI_SERVICE_RESOURCE_ID {
        (Vec::new(), None)
    } else {
        let state = crate::operator_state::projection(tx, &incoming.resource_id).await?;
        (suppressions(tx).await?, state.suppression_cause(now))
    };
    for _ in 0..MAX_CAS_ATTEMPTS {
        let same = get(tx, reported_id).await?;
        let open = open_findings(tx, Some(&incoming.resource_id)).await?;
        let open_records: Vec<Finding> = open.iter().map(|s| s.finding.clone()).collect();
        let ctx = ReportContext {
            existing_same_id: same.as_ref().map(|s| &s.finding),
            active_on_resource: &open_records,
            suppressions: &rules,
        };
        let mut decision = domain::report_with_signals(ctx, incoming, signals, run, now)?;
        operator_state::apply_to_report(&mut decision, incoming, operator_cause, now);
        let expected = match decision.kind {
            ReportKind::New => None,
            ReportKind::Merged => open
                .iter()
                .find(|s| s.finding.id == decision.finding.id)
                .map(|s| s.version),
            ReportKind::Redetected | ReportKind::Regressed => same.as_ref().map(|s| s.version),
        };
        if decision.kind != ReportKind::New && expected.is_none() {
            return Err(invalid("report decided to update a finding it did not read").into());
        }
        // A new finding counts against the tenant's `findings` quota (docs/tenants.md).
        if decision.kind == ReportKind::New {
            match crate::quotas::admit(tx, pulse_domain::tenant::Quota::Findings).await {
                Ok(()) => {}
                Err(crate::quotas::QuotaError::Exceeded(exceeded)) => {
                    return Err(FindingsError::Report(ReportError::Quota(exceeded)));
                }
                Err(crate::quotas::QuotaError::Store(error)) => return Err(error.into()),
            }
        }
        if let Some(version) = write(tx, expected, &decision.finding, &decision.new_events).await? {
            return Ok(ReportOutcome {
                kind: decision.kind,
                reported_id,
                finding: StoredFinding {
                    finding: decision.finding,
                    version,
                },
                merge_basis: decision.merge_basis,
            });
        }
        tracing::debug!(finding_id = %reported_id, "finding report lost a compare-and-swap; retrying");
    }
    Err(FindingsError::Contended(reported_id))
}

/// Records one `patrol_assess_finding` verdict from `run` at `now`. `verifier` is the verifier
/// service's fresh outcome for the finding's key (`NotRun` when none was consulted); a
/// `resolved` verdict on a key with a deterministic verifier is refused unless it is
/// `Confirmed`, and the finding stays active.
pub async fn assess(
    tx: &TenantTx,
    id: FindingId,
    input: &VerdictInput,
    verifier: VerifierOutcome,
    run: RunId,
    now: DateTime<Utc>,
) -> Result<StoredFinding, FindingsError> {
    for _ in 0..MAX_CAS_ATTEMPTS {
        let stored = get(tx, id).await?.ok_or(FindingsError::NotFound(id))?;
        let decision = domain::assess(&stored.finding, input, verifier, run, now)?;
        if let Some(version) = write(
            tx,
            Some(stored.version),
            &decision.finding,
            &decision.new_events,
        )
        .await?
        {
            return Ok(StoredFinding {
                finding: decision.finding,
                version,
            });
        }
    }
    Err(FindingsError::Contended(id))
}

/// Resolves from absence what [`pulse_domain::finding::stale_reconcile`] allows after the run
/// described by `outcome` (only a successful full run; only `performance`/`capacity`; never
/// what the run reported or assessed, listed in `touched`; never `uncertain`-protected
/// findings). A finding that changes concurrently is left for the next run. Returns the ids
/// resolved.
pub async fn reconcile_stale(
    tx: &TenantTx,
    outcome: &RunOutcome,
    touched: &HashSet<FindingId>,
    now: DateTime<Utc>,
) -> Result<Vec<FindingId>, FindingsError> {
    if !matches!(outcome, RunOutcome::SuccessfulFull { .. }) {
        return Ok(Vec::new());
    }
    let open = open_findings(tx, None).await?;
    let records: Vec<Finding> = open.iter().map(|s| s.finding.clone()).collect();
    let mut resolved = Vec::new();
    for resolution in domain::stale_reconcile(&records, outcome, touched, now) {
        let id = resolution.finding.id;
        let Some(version) = open.iter().find(|s| s.finding.id == id).map(|s| s.version) else {
            continue;
        };
        if write(
            tx,
            Some(version),
            &resolution.finding,
            &resolution.new_events,
        )
        .await?
        .is_some()
        {
            resolved.push(id);
        } else {
            tracing::debug!(finding_id = %id, "finding changed during stale reconcile; left active");
        }
    }
    Ok(resolved)
}

/// Raises (or re-detects) the synthetic `ai-service` Patrol runtime failure finding for `run`,
/// which ended `error` with the runtime failure `cause` (see
/// [`pulse_domain::finding::is_runtime_failure`]).
pub async fn report_runtime_failure(
    tx: &TenantTx,
    cause: ErrorCause,
    detail: &str,
    run: RunId,
    now: DateTime<Utc>,
) -> Result<ReportOutcome, FindingsError> {
    let incoming = domain::runtime_failure_report(cause, detail);
    report(tx, &incoming, Some(run), now).await
}

/// Resolves the open `ai-service` runtime failure finding on `recovery` (a successful run, or a
/// preflight that observed a tool call). Returns the ids resolved (none when nothing was open).
pub async fn clear_runtime_failure(
    tx: &TenantTx,
    recovery: RuntimeRecovery,
    now: DateTime<Utc>,
) -> Result<Vec<FindingId>, FindingsError> {
    let mut cleared = Vec::new();
    for open in open_findings(tx, Some(domain::AI_SERVICE_RESOURCE_ID)).await? {
        let id = open.finding.id;
        update_with_retry(tx, open, |f| {
            domain::clear_runtime_failure(f, recovery, now)
        })
        .await?;
        cleared.push(id);
    }
    Ok(cleared)
}

/// Applies an operator action by `actor` at `now`. With `expected_version` (an API `If-Match`)
/// the action applies only to that version and otherwise fails with
/// [`FindingsError::Conflict`]; without it, a lost compare-and-swap re-reads and decides again.
///
/// Suppress also stores the rule and suppresses every other open finding it matches; undo
/// suppress deletes the rule and releases every finding it held.
pub async fn operator_action(
    tx: &TenantTx,
    id: FindingId,
    action: &OperatorAction,
    actor: &str,
    expected_version: Option<i64>,
    now: DateTime<Utc>,
) -> Result<StoredFinding, FindingsError> {
    for _ in 0..MAX_CAS_ATTEMPTS {
        let stored = get(tx, id).await?.ok_or(FindingsError::NotFound(id))?;
        if let Some(expected) = expected_version.filter(|v| *v != stored.version) {
            return Err(FindingsError::Conflict {
                id,
                expected,
                found: stored.version,
            });
        }
        let decision = domain::apply_operator_action(&stored.finding, action, actor, now)?;
        let Some(version) = write(
            tx,
            Some(stored.version),
            &decision.finding,
            &decision.new_events,
        )
        .await?
        else {
            if let Some(expected) = expected_version {
                let found = get(tx, id).await?.map_or(expected, |s| s.version);
                return Err(FindingsError::Conflict {
                    id,
                    expected,
                    found,
                });
            }
            continue;
        };
        if let Some(rule) = &decision.create_suppression {
            create_suppression(tx, rule, id, now).await?;
        }
        if let Some(rule_id) = decision.lift_suppression {
            lift_suppression(tx, rule_id, id, now).await?;
        }
        return Ok(StoredFinding {
            finding: decision.finding,
            version,
        });
    }
    Err(FindingsError::Contended(id))
}

async fn create_suppression(
    tx: &TenantTx,
    rule: &SuppressionRule,
    origin: FindingId,
    now: DateTime<Utc>,
) -> Result<(), FindingsError> {
    tx.client()
        .execute(
            "INSERT INTO finding_suppressions (tenant_id, id, resource_id, category, created_at,
                                               created_by)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (tenant_id, id) DO NOTHING",
            &[
                &tx.tenant().as_str(),
                &rule.id.as_hex(),
                &rule.resource_id,
                &rule.category.map(|c| c.as_str()),
                &rule.created_at,
                &rule.created_by,
            ],
        )
        .await?;
    for other in open_findings(tx, rule.resource_id.as_deref()).await? {
        if other.finding.id == origin {
            continue;
        }
        update_with_retry(tx, other, |f| domain::suppress_under(f, rule, now)).await?;
    }
    Ok(())
}

async fn lift_suppression(
    tx: &TenantTx,
    rule_id: SuppressionId,
    origin: FindingId,
    now: DateTime<Utc>,
) -> Result<(), FindingsError> {
    tx.client()
        .execute(
            "DELETE FROM finding_suppressions WHERE id = $1",
            &[&rule_id.as_hex()],
        )
        .await?;
    let rows = tx
        .client()
        .query(
            &format!("{SELECT} WHERE f.status = 'suppressed' AND f.record->>'suppression_id' = $1"),
            &[&rule_id.as_hex()],
        )
        .await?;
    for row in &rows {
        let held = from_row(row)?;
        if held.finding.id == origin {
            continue;
        }
        update_with_retry(tx, held, |f| domain::lift_suppression(f, rule_id, now)).await?;
    }
    Ok(())
}

/// Auto-dismisses every open finding of `resource_id` under `cause` (an operator just set a
/// maintenance window or intentionally offline on it), each with its `dismissed` event carrying
/// `operator_state_cause`. Returns the ids dismissed.
pub async fn apply_operator_state(
    tx: &TenantTx,
    resource_id: &str,
    cause: SuppressionCause,
    now: DateTime<Utc>,
) -> Result<Vec<FindingId>, FindingsError> {
    if resource_id == domain::AI_SERVICE_RESOURCE_ID {
        return Ok(Vec::new());
    }
    lock_resource(tx, resource_id).await?;
    let mut dismissed = Vec::new();
    for open in open_findings(tx, Some(resource_id)).await? {
        let id = open.finding.id;
        if operator_state::operator_dismiss(&open.finding, cause, now).is_none() {
            continue;
        }
        update_with_retry(tx, open, |f| {
            operator_state::operator_dismiss(f, cause, now)
        })
        .await?;
        dismissed.push(id);
    }
    Ok(dismissed)
}

/// Applies a follow-on change to another finding as a compare-and-swap, re-reading on a lost
/// race; `change` returning `None` means nothing to do.
async fn update_with_retry(
    tx: &TenantTx,
    mut stored: StoredFinding,
    change: impl Fn(&Finding) -> Option<(Finding, LifecycleEvent)>,
) -> Result<(), FindingsError> {
    let id = stored.finding.id;
    for _ in 0..MAX_CAS_ATTEMPTS {
        let Some((next, event)) = change(&stored.finding) else {
            return Ok(());
        };
        if write(
            tx,
            Some(stored.version),
            &next,
            std::slice::from_ref(&event),
        )
        .await?
        .is_some()
        {
            return Ok(());
        }
        stored = match get(tx, id).await? {
            Some(s) => s,
            None => return Ok(()),
        };
    }
    Err(FindingsError::Contended(id))
}

/// Records how action `action_id`, meant to fix finding `id`, ended (`fix_verified`,
/// `fix_verification_failed`, `fix_verification_unknown`, `fix_rejected`, `fix_failed`): sets
/// `investigation_outcome` and appends the outcome's lifecycle event, and for a verified fix
/// resolves an open finding, as [`pulse_domain::action::apply_fix_outcome`] decides. Returns
/// `false` when the tenant has no such finding (deleted, or another tenant's id); recording the
/// same outcome of the same action again writes nothing.
pub async fn record_fix_outcome(
    tx: &TenantTx,
    id: FindingId,
    outcome: pulse_domain::action::FixOutcome,
    action_id: uuid::Uuid,
    message: &str,
    now: DateTime<Utc>,
) -> Result<bool, FindingsError> {
    let Some(stored) = get(tx, id).await? else {
        return Ok(false);
    };
    update_with_retry(tx, stored, |f| {
        pulse_domain::action::apply_fix_outcome(f, outcome, action_id, message, now)
    })
    .await?;
    Ok(true)
}

/// What a finding was before a write, as far as its lifecycle event needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Before {
    status: domain::FindingStatus,
    severity: domain::Severity,
    title: String,
}

/// The finding at `version`, read before the compare-and-swap on that version (`None` when it
/// is no longer at it: the swap then writes nothing).
async fn previous(tx: &TenantTx, id: &str, version: i64) -> Result<Option<Before>, StoreError> {
    let row = tx
        .client()
        .query_opt(
            "SELECT record FROM findings WHERE id = $1 AND version = $2",
            &[&id, &version],
        )
        .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let Json(finding): Json<Finding> = row
        .try_get(0)
        .map_err(|e| invalid(format!("finding record: {e}")))?;
    Ok(Some(Before {
        status: finding.status,
        severity: finding.severity,
        title: finding.title,
    }))
}

/// The event a write is published as: `created` for a new finding and for a resolved one that
/// came back, `resolved` when an open one resolved, `updated` for any other change an operator
/// or agent would want to see (a lifecycle event, a new status, severity or title). A write that
/// only moved `last_seen_at` (a heartbeat re-detection) publishes nothing.
fn change_of(
    before: Option<&Before>,
    after: &Finding,
    new_events: &[LifecycleEvent],
) -> Option<FindingChange> {
    use domain::FindingStatus::Resolved;
    let Some(before) = before else {
        return Some(FindingChange::Created);
    };
    if before.status == Resolved && after.status != Resolved {
        return Some(FindingChange::Created);
    }
    if before.status != Resolved && after.status == Resolved {
        return Some(FindingChange::Resolved);
    }
    let changed = !new_events.is_empty()
        || before.status != after.status
        || before.severity != after.severity
        || before.title != after.title;
    changed.then_some(FindingChange::Updated)
}

/// Puts the finding's lifecycle event in the outbox, in the caller's transaction: it is
/// published if and only if the change commits.
async fn enqueue_change(
    tx: &TenantTx,
    change: FindingChange,
    finding: &Finding,
    new_events: &[LifecycleEvent],
    version: i64,
) -> Result<(), StoreError> {
    let newest = new_events.last();
    let message = FindingChanged {
        finding_id: finding.id,
        key: finding.key.clone(),
        resource_id: finding.resource_id.clone(),
        resource_name: finding.resource_name.clone(),
        severity: finding.severity,
        category: finding.category,
        status: finding.status,
        title: finding.title.clone(),
        change,
        lifecycle_event: newest.map(|e| e.event_type),
        version,
        at: newest.map_or(finding.last_seen_at, |e| e.at),
    };
    let (domain, event) = change.event();
    let outbox = |e: pulse_bus::OutboxError| match e {
        pulse_bus::OutboxError::Db(e) => StoreError::Database(e),
        other => invalid(format!("finding event not enqueued: {other}")),
    };
    let row =
        OutboxRow::event(tx.subjects(), tx.tenant(), domain, event, &message).map_err(outbox)?;
    pulse_bus::enqueue(&**tx.client(), row)
        .await
        .map_err(outbox)?;
    Ok(())
}
