//! Patrol run admission: which tenant's run starts next. Pure and clock-free: `now` is passed in.
//!
//! Rules:
//! - Cadence: each tenant has a full run due once per interval, on the deterministic jittered
//!   grid of [`pulse_domain::patrol::cadence`], so it is the same after a restart, on every
//!   replica and in the status API, and spreads tenants evenly.
//! - At most one full run per tenant is in flight. A slot that comes due while a full run is in
//!   flight or waiting is coalesced into it, never stacked.
//! - Scoped runs wait in a bounded FIFO per tenant (refused with [`Refusal::ScopedQueueFull`]
//!   when full) and bypass the cadence gate; at most `max_scoped_in_flight` run per tenant.
//! - A manual full run is refused while one is in flight or waiting, and, when
//!   `manual_full_min_spacing_ms` is set, until that long after the last completed full sweep.
//! - Tenants with admissible work wait in one round-robin ring and each gets at most one admission
//!   per turn of the ring, so a tenant flooding requests cannot starve the others.
//!
//! Costs: a binary heap of next-due times (stale entries skipped by generation) and a ring of
//! tenants with work, so each operation is O(log n) in the number of tenants.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

use chrono::{DateTime, TimeZone, Utc};
use pulse_domain::TenantId;
use pulse_domain::patrol::cadence::{Cadence, tenant_hash};
use pulse_domain::patrol::run::{RunId, RunType, TriggerReason};
use pulse_domain::patrol::scope::ScopedRequest;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionConfig {
    /// Full-run cadence.
    pub interval_ms: u64,
    /// Jitter of each due slot, percent of the interval (clamped to 0..=40).
    pub jitter_pct: u32,
    /// Scoped runs waiting per tenant before new ones are refused.
    pub scoped_queue_limit: usize,
    /// Scoped runs of one tenant running at the same time.
    pub max_scoped_in_flight: usize,
    /// Least time between the last completed full sweep and a manual full run; 0 = no gate.
    pub manual_full_min_spacing_ms: u64,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        Self {
            interval_ms: 5 * 60 * 1000,
            jitter_pct: 10,
            scoped_queue_limit: 20,
            max_scoped_in_flight: 1,
            manual_full_min_spacing_ms: 0,
        }
    }
}

/// A scoped run accepted for a tenant (its record already written as `queued`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedScopedRun {
    pub run_id: RunId,
    pub trigger_reason: TriggerReason,
    pub request: ScopedRequest,
    pub accepted_at: DateTime<Utc>,
}

/// One run allowed to start now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    pub tenant: TenantId,
    pub run: AdmittedRun,
    pub admitted_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdmittedRun {
    Full {
        trigger_reason: TriggerReason,
        /// Set for a manual run (accepted with its id); a scheduled run gets its id when its
        /// record is written.
        run_id: Option<RunId>,
        /// When the run became due: the cadence slot, or the time a manual run was accepted.
        due_at: DateTime<Utc>,
    },
    Scoped(QueuedScopedRun),
}

impl AdmittedRun {
    pub fn run_type(&self) -> RunType {
        match self {
            Self::Full { .. } => RunType::Full,
            Self::Scoped(_) => RunType::Scoped,
        }
    }
}

/// Why a request was not queued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("tenant {0} is not scheduled for Patrol")]
    UnknownTenant(TenantId),
    #[error("tenant already has {limit} scoped Patrol runs waiting")]
    ScopedQueueFull { limit: usize },
    #[error("a full Patrol run is already running or waiting for this tenant")]
    FullRunActive,
    #[error("the last full Patrol run completed too recently; retry at {retry_at}")]
    CadenceGate { retry_at: DateTime<Utc> },
}

/// `on_finished` for a run type the tenant has no run of in flight (a duplicate report).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tenant {tenant} has no {run_type:?} Patrol run in flight")]
pub struct NotInFlight {
    pub tenant: TenantId,
    pub run_type: RunType,
}

/// A read-only view of one tenant's admission state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantView {
    pub next_due_at: DateTime<Utc>,
    pub full_in_flight: bool,
    /// When the waiting full run became due, if one waits.
    pub full_waiting_since: Option<DateTime<Utc>>,
    pub scoped_in_flight: usize,
    pub scoped_waiting: usize,
    pub last_full_completed_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone)]
struct PendingFull {
    trigger_reason: TriggerReason,
    run_id: Option<RunId>,
    due_ms: i64,
}

#[derive(Debug)]
struct TenantState {
    id: TenantId,
    active: bool,
    hash: u64,
    /// This tenant's cadence (the config's unless set per tenant).
    interval_ms: u64,
    next_due_ms: i64,
    generation: u64,
    full_in_flight: bool,
    pending_full: Option<PendingFull>,
    scoped_in_flight: usize,
    scoped: VecDeque<QueuedScopedRun>,
    in_ring: bool,
    last_full_completed_ms: Option<i64>,
}

/// The admission queue for every tenant of one scheduler.
#[derive(Debug)]
pub struct AdmissionQueue {
    config: AdmissionConfig,
    tenants: Vec<TenantState>,
    index: HashMap<TenantId, usize>,
    due: BinaryHeap<Reverse<(i64, usize, u64)>>,
    ring: VecDeque<usize>,
}

fn ms(at: DateTime<Utc>) -> i64 {
    at.timestamp_millis()
}

fn at_ms(value: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(value)
        .single()
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

impl AdmissionQueue {
    pub fn new(mut config: AdmissionConfig) -> Self {
        config.interval_ms = Self::clamp_interval(config.interval_ms);
        config.jitter_pct = config
            .jitter_pct
            .min(pulse_domain::patrol::cadence::MAX_JITTER_PCT);
        config.max_scoped_in_flight = config.max_scoped_in_flight.max(1);
        Self {
            config,
            tenants: Vec::new(),
            index: HashMap::new(),
            due: BinaryHeap::new(),
            ring: VecDeque::new(),
        }
    }

    pub fn config(&self) -> &AdmissionConfig {
        &self.config
    }

    fn clamp_interval(interval_ms: u64) -> u64 {
        Cadence::new(interval_ms, 0).interval_ms()
    }

    /// The first due slot strictly after `after` on the tenant's grid (one owner:
    /// [`Cadence`]).
    fn slot_after(&self, hash: u64, interval_ms: u64, after: i64) -> i64 {
        Cadence::new(interval_ms, self.config.jitter_pct).slot_after_ms(hash, after)
    }

    /// The cadence slots of `tenant` after `after` (for inspection and tests).
    pub fn due_slots_after(
        &self,
        tenant: &TenantId,
        after: DateTime<Utc>,
        count: usize,
    ) -> Vec<DateTime<Utc>> {
        let hash = tenant_hash(tenant);
        let interval = self
            .index
            .get(tenant)
            .map_or(self.config.interval_ms, |&idx| {
                self.tenants[idx].interval_ms
            });
        let mut t = ms(after);
        (0..count)
            .map(|_| {
                t = self.slot_after(hash, interval, t);
                at_ms(t)
            })
            .collect()
    }

    /// Adds a tenant (or re-enables one). With a successful full run on record whose next slot
    /// is still ahead, the tenant waits for that slot; otherwise a `startup` full run is due now.
    pub fn add_tenant(
        &mut self,
        tenant: TenantId,
        now: DateTime<Utc>,
        last_successful_full_at: Option<DateTime<Utc>>,
    ) {
        let interval = self.config.interval_ms;
        self.add_tenant_with_interval(tenant, interval, now, last_successful_full_at);
    }

    /// [`Self::add_tenant`] with the tenant's own cadence instead of the config's.
    pub fn add_tenant_with_interval(
        &mut self,
        tenant: TenantId,
        interval_ms: u64,
        now: DateTime<Utc>,
        last_successful_full_at: Option<DateTime<Utc>>,
    ) {
        let interval_ms = Self::clamp_interval(interval_ms);
        let now_ms = ms(now);
        let hash = tenant_hash(&tenant);
        let idx = match self.index.get(&tenant) {
            Some(&idx) if self.tenants[idx].active => return,
            Some(&idx) => idx,
            None => {
                self.tenants.push(TenantState {
                    id: tenant.clone(),
                    active: false,
                    hash,
                    interval_ms,
                    next_due_ms: 0,
                    generation: 0,
                    full_in_flight: false,
                    pending_full: None,
                    scoped_in_flight: 0,
                    scoped: VecDeque::new(),
                    in_ring: false,
                    last_full_completed_ms: None,
                });
                self.index.insert(tenant, self.tenants.len() - 1);
                self.tenants.len() - 1
            }
        };
        let next_after_last =
            last_successful_full_at.map(|t| self.slot_after(hash, interval_ms, ms(t)));
        let state = &mut self.tenants[idx];
        state.active = true;
        state.interval_ms = interval_ms;
        state.last_full_completed_ms = last_successful_full_at.map(ms);
        match next_after_last {
            Some(due) if due > now_ms => self.schedule(idx, due),
            _ => {
                self.tenants[idx].pending_full = Some(PendingFull {
                    trigger_reason: TriggerReason::Startup,
                    run_id: None,
                    due_ms: now_ms,
                });
                let next = self.slot_after(hash, interval_ms, now_ms);
                self.schedule(idx, next);
                self.enter_ring(idx);
            }
        }
    }

    /// Changes an active tenant's cadence; the next slot is the first one of the new cadence
    /// after `now`. Returns whether anything changed.
    pub fn set_interval(
        &mut self,
        tenant: &TenantId,
        interval_ms: u64,
        now: DateTime<Utc>,
    ) -> bool {
        let interval_ms = Self::clamp_interval(interval_ms);
        let Ok(idx) = self.active_index(tenant) else {
            return false;
        };
        if self.tenants[idx].interval_ms == interval_ms {
            return false;
        }
        self.tenants[idx].interval_ms = interval_ms;
        let next = self.slot_after(self.tenants[idx].hash, interval_ms, ms(now));
        self.schedule(idx, next);
        true
    }

    /// Records a run that is already in flight (dispatched before this queue existed, e.g. by a
    /// previous dispatcher). A full run takes the place of a waiting startup or scheduled run,
    /// which it covers.
    pub fn resume_in_flight(
        &mut self,
        tenant: &TenantId,
        run_type: RunType,
    ) -> Result<(), Refusal> {
        let idx = self.active_index(tenant)?;
        let state = &mut self.tenants[idx];
        match run_type {
            RunType::Full => {
                if state.full_in_flight {
                    return Err(Refusal::FullRunActive);
                }
                state.full_in_flight = true;
                if state
                    .pending_full
                    .as_ref()
                    .is_some_and(|p| p.run_id.is_none())
                {
                    state.pending_full = None;
                }
            }
            RunType::Scoped => state.scoped_in_flight += 1,
        }
        Ok(())
    }

    /// Removes a tenant's schedule and waiting work; runs in flight may still report finished.
    pub fn remove_tenant(&mut self, tenant: &TenantId) -> bool {
        let Some(&idx) = self.index.get(tenant) else {
            return false;
        };
        let state = &mut self.tenants[idx];
        let was_active = state.active;
        state.active = false;
        state.generation += 1;
        state.pending_full = None;
        state.scoped.clear();
        was_active
    }

    fn schedule(&mut self, idx: usize, due: i64) {
        let state = &mut self.tenants[idx];
        state.generation += 1;
        state.next_due_ms = due;
        self.due.push(Reverse((due, idx, state.generation)));
    }

    fn admissible(&self, idx: usize) -> bool {
        let s = &self.tenants[idx];
        s.active
            && ((s.pending_full.is_some() && !s.full_in_flight)
                || (!s.scoped.is_empty() && s.scoped_in_flight < self.config.max_scoped_in_flight))
    }

    fn enter_ring(&mut self, idx: usize) {
        if !self.tenants[idx].in_ring && self.admissible(idx) {
            self.tenants[idx].in_ring = true;
            self.ring.push_back(idx);
        }
    }

    fn active_index(&self, tenant: &TenantId) -> Result<usize, Refusal> {
        match self.index.get(tenant) {
            Some(&idx) if self.tenants[idx].active => Ok(idx),
            _ => Err(Refusal::UnknownTenant(tenant.clone())),
        }
    }

    /// Queues a manual full run accepted as `run_id`. A waiting scheduled run is taken over by
    /// the manual one.
    pub fn request_full(
        &mut self,
        tenant: &TenantId,
        run_id: RunId,
        now: DateTime<Utc>,
    ) -> Result<(), Refusal> {
        let idx = self.active_index(tenant)?;
        let spacing = self.config.manual_full_min_spacing_ms as i64;
        let state = &mut self.tenants[idx];
        let waiting_manual = state
            .pending_full
            .as_ref()
            .is_some_and(|p| p.run_id.is_some());
        if state.full_in_flight || waiting_manual {
            return Err(Refusal::FullRunActive);
        }
        if let Some(last) = state.last_full_completed_ms {
            if spacing > 0 && ms(now) < last + spacing {
                return Err(Refusal::CadenceGate {
                    retry_at: at_ms(last + spacing),
                });
            }
        }
        state.pending_full = Some(PendingFull {
            trigger_reason: TriggerReason::Manual,
            run_id: Some(run_id),
            due_ms: ms(now),
        });
        self.enter_ring(idx);
        Ok(())
    }

    /// Queues a scoped run; returns how many of the tenant's scoped runs now wait.
    pub fn enqueue_scoped(
        &mut self,
        tenant: &TenantId,
        run: QueuedScopedRun,
    ) -> Result<usize, Refusal> {
        let idx = self.active_index(tenant)?;
        let limit = self.config.scoped_queue_limit;
        let state = &mut self.tenants[idx];
        if state.scoped.len() >= limit {
            return Err(Refusal::ScopedQueueFull { limit });
        }
        state.scoped.push_back(run);
        let waiting = state.scoped.len();
        self.enter_ring(idx);
        Ok(waiting)
    }

    /// Runs allowed to start at `now`, at most `capacity` of them, one per tenant per turn of
    /// the ring.
    pub fn next_admissions(&mut self, now: DateTime<Utc>, capacity: usize) -> Vec<Admission> {
        let now_ms = ms(now);
        while let Some(&Reverse((due, idx, generation))) = self.due.peek() {
            if due > now_ms {
                break;
            }
            self.due.pop();
            let state = &self.tenants[idx];
            if generation != state.generation || !state.active {
                continue;
            }
            let (hash, interval) = (state.hash, state.interval_ms);
            if state.pending_full.is_none() {
                self.tenants[idx].pending_full = Some(PendingFull {
                    trigger_reason: TriggerReason::Scheduled,
                    run_id: None,
                    due_ms: due,
                });
            }
            // After a long pause, skip the missed slots: they coalesce into the one waiting run.
            let next = self.slot_after(hash, interval, due);
            let next = if next <= now_ms {
                self.slot_after(hash, interval, now_ms)
            } else {
                next
            };
            self.schedule(idx, next);
            self.enter_ring(idx);
        }

        let mut admitted = Vec::with_capacity(capacity.min(self.ring.len()));
        while admitted.len() < capacity {
            let Some(idx) = self.ring.pop_front() else {
                break;
            };
            self.tenants[idx].in_ring = false;
            if !self.admissible(idx) {
                continue;
            }
            let max_scoped = self.config.max_scoped_in_flight;
            let state = &mut self.tenants[idx];
            let run = if !state.full_in_flight && state.pending_full.is_some() {
                let pending = state.pending_full.take().expect("checked above");
                state.full_in_flight = true;
                AdmittedRun::Full {
                    trigger_reason: pending.trigger_reason,
                    run_id: pending.run_id,
                    due_at: at_ms(pending.due_ms),
                }
            } else if state.scoped_in_flight < max_scoped {
                let Some(run) = state.scoped.pop_front() else {
                    continue;
                };
                state.scoped_in_flight += 1;
                AdmittedRun::Scoped(run)
            } else {
                continue;
            };
            admitted.push(Admission {
                tenant: state.id.clone(),
                run,
                admitted_at: now,
            });
            self.enter_ring(idx);
        }
        admitted
    }

    /// Records that a tenant's run ended (any terminal status). A successful full run counts as
    /// a completed sweep for the manual cadence gate.
    pub fn on_finished(
        &mut self,
        tenant: &TenantId,
        run_type: RunType,
        succeeded: bool,
        now: DateTime<Utc>,
    ) -> Result<(), NotInFlight> {
        let not_in_flight = || NotInFlight {
            tenant: tenant.clone(),
            run_type,
        };
        let &idx = self.index.get(tenant).ok_or_else(not_in_flight)?;
        let state = &mut self.tenants[idx];
        match run_type {
            RunType::Full if state.full_in_flight => {
                state.full_in_flight = false;
                if succeeded {
                    state.last_full_completed_ms = Some(ms(now));
                }
            }
            RunType::Scoped if state.scoped_in_flight > 0 => state.scoped_in_flight -= 1,
            _ => return Err(not_in_flight()),
        }
        self.enter_ring(idx);
        Ok(())
    }

    pub fn tenant(&self, tenant: &TenantId) -> Option<TenantView> {
        let &idx = self.index.get(tenant)?;
        let s = &self.tenants[idx];
        s.active.then(|| TenantView {
            next_due_at: at_ms(s.next_due_ms),
            full_in_flight: s.full_in_flight,
            full_waiting_since: s.pending_full.as_ref().map(|p| at_ms(p.due_ms)),
            scoped_in_flight: s.scoped_in_flight,
            scoped_waiting: s.scoped.len(),
            last_full_completed_at: s.last_full_completed_ms.map(at_ms),
        })
    }

    /// Tenants with work that could be admitted now (before due slots are collected).
    pub fn ready_tenants(&self) -> usize {
        self.ring.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use pulse_domain::patrol::cadence::mix;
    use pulse_domain::patrol::scope::RequestedScope;
    use std::collections::{BTreeMap, HashSet};

    fn run_id(n: u64) -> RunId {
        format!("00000000-0000-4000-8000-{n:012x}").parse().unwrap()
    }

    const MIN: i64 = 60_000;

    fn t(ms: i64) -> DateTime<Utc> {
        // 2026-03-01T00:00:00Z plus `ms`.
        at_ms(1_772_323_200_000 + ms)
    }

    fn tenant(name: &str) -> TenantId {
        TenantId::new(name).unwrap()
    }

    fn scoped(n: u64, at: DateTime<Utc>) -> QueuedScopedRun {
        QueuedScopedRun {
            run_id: run_id(n),
            trigger_reason: TriggerReason::Manual,
            request: ScopedRequest {
                scope: RequestedScope {
                    resource_ids: vec![format!("r{n}")],
                    resource_types: Vec::new(),
                },
                alert_identifier: None,
                alert_type: None,
                context: None,
            },
            accepted_at: at,
        }
    }

    fn queue(config: AdmissionConfig) -> AdmissionQueue {
        AdmissionQueue::new(config)
    }

    fn five_minutes() -> AdmissionConfig {
        AdmissionConfig {
            interval_ms: 5 * MIN as u64,
            ..AdmissionConfig::default()
        }
    }

    #[test]
    fn jitter_is_deterministic_and_within_ten_percent() {
        let a = queue(five_minutes());
        let b = queue(five_minutes());
        let interval = 5 * MIN;
        for name in ["default", "acme", "t-0001", "zeta_9"] {
            let slots = a.due_slots_after(&tenant(name), t(0), 50);
            assert_eq!(slots, b.due_slots_after(&tenant(name), t(0), 50), "{name}");
            let hash = tenant_hash(&tenant(name));
            let offset = (hash % interval as u64) as i64;
            for slot in &slots {
                let s = ms(*slot);
                // Distance to the nearest nominal grid point is at most 10% of the interval.
                let rel = (s - offset).rem_euclid(interval);
                let dist = rel.min(interval - rel);
                assert!(dist <= interval / 10, "{name}: {dist}");
            }
            for pair in slots.windows(2) {
                let gap = ms(pair[1]) - ms(pair[0]);
                assert!(
                    gap >= interval * 8 / 10 && gap <= interval * 12 / 10,
                    "{name}: gap {gap}"
                );
            }
        }
        // A restart (a new queue) computing from a later point lands on the same slots.
        let slots = a.due_slots_after(&tenant("acme"), t(0), 10);
        let later = b.due_slots_after(&tenant("acme"), slots[4], 5);
        assert_eq!(&slots[5..10], &later[..]);
    }

    #[test]
    fn tenants_are_spread_across_the_interval() {
        let q = queue(five_minutes());
        let mut buckets = [0_u32; 10];
        for i in 0..1_000 {
            let first = q.due_slots_after(&tenant(&format!("t{i}")), t(0), 1)[0];
            let offset = ms(first) - ms(t(0));
            // A slot can move 10% either way, so the next one is at most 1.2 intervals off.
            assert!(offset > 0 && offset <= 5 * MIN * 12 / 10, "{offset}");
            buckets[((offset * 10) / (5 * MIN)).min(9) as usize] += 1;
        }
        assert!(buckets.iter().all(|&b| b >= 40), "{buckets:?}");
    }

    #[test]
    fn new_tenant_without_history_gets_a_startup_run_then_the_cadence() {
        let mut q = queue(five_minutes());
        let acme = tenant("acme");
        q.add_tenant(acme.clone(), t(0), None);
        let got = q.next_admissions(t(0), 10);
        assert_eq!(got.len(), 1);
        assert_eq!(
            got[0].run,
            AdmittedRun::Full {
                trigger_reason: TriggerReason::Startup,
                run_id: None,
                due_at: t(0)
            }
        );
        let next = q.tenant(&acme).unwrap().next_due_at;
        assert_eq!(next, q.due_slots_after(&acme, t(0), 1)[0]);
        q.on_finished(&acme, RunType::Full, true, t(MIN)).unwrap();
        assert!(q.next_admissions(at_ms(ms(next) - 1), 10).is_empty());
        let got = q.next_admissions(next, 10);
        assert_eq!(
            got[0].run,
            AdmittedRun::Full {
                trigger_reason: TriggerReason::Scheduled,
                run_id: None,
                due_at: next
            }
        );
    }

    #[test]
    fn recent_successful_full_run_skips_the_startup_run() {
        let mut q = queue(five_minutes());
        let acme = tenant("acme");
        q.add_tenant(acme.clone(), t(MIN), Some(t(0)));
        let next = q.due_slots_after(&acme, t(0), 1)[0];
        if next > t(MIN) {
            assert!(q.next_admissions(t(MIN), 10).is_empty());
            assert_eq!(q.tenant(&acme).unwrap().next_due_at, next);
        }
        // A run long ago is overdue: due at once.
        let mut q = queue(five_minutes());
        q.add_tenant(acme.clone(), t(60 * MIN), Some(t(0)));
        assert_eq!(q.next_admissions(t(60 * MIN), 10).len(), 1);
    }

    #[test]
    fn never_two_full_runs_in_flight_and_overdue_slots_coalesce() {
        let mut q = queue(five_minutes());
        let acme = tenant("acme");
        q.add_tenant(acme.clone(), t(0), None);
        assert_eq!(q.next_admissions(t(0), 10).len(), 1);
        // The startup run overruns three cadence slots.
        for minute in 1..=16 {
            assert!(
                q.next_admissions(t(minute * MIN), 10).is_empty(),
                "minute {minute}"
            );
        }
        assert_eq!(
            q.request_full(&acme, run_id(1), t(16 * MIN)),
            Err(Refusal::FullRunActive)
        );
        assert!(q.tenant(&acme).unwrap().full_waiting_since.is_some());
        q.on_finished(&acme, RunType::Full, true, t(16 * MIN))
            .unwrap();
        let got = q.next_admissions(t(16 * MIN), 10);
        assert_eq!(got.len(), 1, "one coalesced run, not three");
        assert_eq!(got[0].run.run_type(), RunType::Full);
        assert!(q.next_admissions(t(16 * MIN), 10).is_empty());
    }

    #[test]
    fn manual_full_runs_are_gated_but_scoped_runs_bypass_the_gate() {
        let mut q = queue(AdmissionConfig {
            manual_full_min_spacing_ms: 10 * MIN as u64,
            ..five_minutes()
        });
        let acme = tenant("acme");
        q.add_tenant(acme.clone(), t(0), None);
        q.next_admissions(t(0), 1);
        q.on_finished(&acme, RunType::Full, true, t(MIN)).unwrap();
        assert_eq!(
            q.request_full(&acme, run_id(1), t(2 * MIN)),
            Err(Refusal::CadenceGate {
                retry_at: t(11 * MIN)
            })
        );
        assert_eq!(q.enqueue_scoped(&acme, scoped(2, t(2 * MIN))), Ok(1));
        let got = q.next_admissions(t(2 * MIN), 5);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].run.run_type(), RunType::Scoped);
        // A failed full run is not a completed sweep and does not arm the gate.
        let mut q = queue(AdmissionConfig {
            manual_full_min_spacing_ms: 10 * MIN as u64,
            ..five_minutes()
        });
        q.add_tenant(acme.clone(), t(0), None);
        q.next_admissions(t(0), 1);
        q.on_finished(&acme, RunType::Full, false, t(MIN)).unwrap();
        assert_eq!(q.request_full(&acme, run_id(3), t(2 * MIN)), Ok(()));
        let got = q.next_admissions(t(2 * MIN), 5);
        assert_eq!(
            got[0].run,
            AdmittedRun::Full {
                trigger_reason: TriggerReason::Manual,
                run_id: Some(run_id(3)),
                due_at: t(2 * MIN)
            }
        );
        assert_eq!(
            q.request_full(&acme, run_id(4), t(2 * MIN)),
            Err(Refusal::FullRunActive)
        );
    }

    #[test]
    fn scoped_runs_are_fifo_and_bounded() {
        let mut q = queue(AdmissionConfig {
            scoped_queue_limit: 3,
            ..five_minutes()
        });
        let acme = tenant("acme");
        q.add_tenant(acme.clone(), t(0), Some(t(0)));
        for n in 1..=3 {
            assert_eq!(q.enqueue_scoped(&acme, scoped(n, t(0))), Ok(n as usize));
        }
        assert_eq!(
            q.enqueue_scoped(&acme, scoped(4, t(0))),
            Err(Refusal::ScopedQueueFull { limit: 3 })
        );
        let mut order = Vec::new();
        for step in 0..3 {
            let got = q.next_admissions(t(step), 10);
            assert_eq!(got.len(), 1, "one scoped run in flight per tenant");
            match &got[0].run {
                AdmittedRun::Scoped(run) => order.push(run.run_id),
                other => panic!("unexpected {other:?}"),
            }
            q.on_finished(&acme, RunType::Scoped, true, t(step))
                .unwrap();
        }
        assert_eq!(order, vec![run_id(1), run_id(2), run_id(3)]);
        assert_eq!(
            q.on_finished(&acme, RunType::Scoped, true, t(5)),
            Err(NotInFlight {
                tenant: acme.clone(),
                run_type: RunType::Scoped
            })
        );
    }

    #[test]
    fn unknown_and_removed_tenants_are_refused() {
        let mut q = queue(five_minutes());
        let acme = tenant("acme");
        assert_eq!(
            q.enqueue_scoped(&acme, scoped(1, t(0))),
            Err(Refusal::UnknownTenant(acme.clone()))
        );
        q.add_tenant(acme.clone(), t(0), None);
        q.enqueue_scoped(&acme, scoped(1, t(0))).unwrap();
        assert!(q.remove_tenant(&acme));
        assert!(q.next_admissions(t(0), 10).is_empty());
        assert!(q.next_admissions(t(60 * MIN), 10).is_empty());
        assert_eq!(
            q.request_full(&acme, run_id(2), t(0)),
            Err(Refusal::UnknownTenant(acme.clone()))
        );
        assert!(q.tenant(&acme).is_none());
    }

    #[test]
    fn round_robin_gives_each_tenant_a_turn() {
        let mut q = queue(AdmissionConfig {
            max_scoped_in_flight: 10,
            scoped_queue_limit: 10,
            ..five_minutes()
        });
        let (a, b, c) = (tenant("a"), tenant("b"), tenant("c"));
        for x in [&a, &b, &c] {
            q.add_tenant(x.clone(), t(0), Some(t(0)));
        }
        for n in 0..10 {
            q.enqueue_scoped(&a, scoped(n, t(0))).unwrap();
        }
        q.enqueue_scoped(&b, scoped(100, t(1))).unwrap();
        q.enqueue_scoped(&c, scoped(200, t(2))).unwrap();
        let got = q.next_admissions(t(3), 3);
        let tenants: Vec<&str> = got.iter().map(|g| g.tenant.as_str()).collect();
        assert_eq!(tenants, vec!["a", "b", "c"]);
        let got = q.next_admissions(t(4), 3);
        assert!(got.iter().all(|g| g.tenant == a));
        assert_eq!(got.len(), 3);
    }

    #[test]
    fn each_tenant_keeps_its_own_cadence_and_a_change_applies_from_now() {
        let mut q = queue(five_minutes());
        let (fast, slow) = (tenant("fast"), tenant("slow"));
        q.add_tenant_with_interval(fast.clone(), 10 * MIN as u64, t(0), Some(t(0)));
        q.add_tenant_with_interval(slow.clone(), 60 * MIN as u64, t(0), Some(t(0)));
        let fast_slots = q.due_slots_after(&fast, t(0), 6);
        for pair in fast_slots.windows(2) {
            let gap = ms(pair[1]) - ms(pair[0]);
            assert!((8 * MIN..=12 * MIN).contains(&gap), "fast gap {gap}");
        }
        let slow_next = q.tenant(&slow).unwrap().next_due_at;
        assert!(ms(slow_next) - ms(t(0)) <= 72 * MIN);
        assert_eq!(q.tenant(&fast).unwrap().next_due_at, fast_slots[0]);
        // The same interval again changes nothing; a new one moves the next slot onto its grid.
        assert!(!q.set_interval(&fast, 10 * MIN as u64, t(MIN)));
        assert!(q.set_interval(&fast, 30 * MIN as u64, t(MIN)));
        let next = q.tenant(&fast).unwrap().next_due_at;
        assert_eq!(next, q.due_slots_after(&fast, t(MIN), 1)[0]);
        assert!(!q.set_interval(&tenant("nobody"), 30 * MIN as u64, t(MIN)));
    }

    #[test]
    fn a_resumed_full_run_covers_the_startup_run_and_blocks_a_second() {
        let mut q = queue(five_minutes());
        let acme = tenant("acme");
        q.add_tenant(acme.clone(), t(0), None);
        assert!(q.tenant(&acme).unwrap().full_waiting_since.is_some());
        q.resume_in_flight(&acme, RunType::Full).unwrap();
        let view = q.tenant(&acme).unwrap();
        assert!(view.full_in_flight && view.full_waiting_since.is_none());
        assert!(q.next_admissions(t(0), 10).is_empty());
        assert_eq!(
            q.resume_in_flight(&acme, RunType::Full),
            Err(Refusal::FullRunActive)
        );
        q.resume_in_flight(&acme, RunType::Scoped).unwrap();
        q.enqueue_scoped(&acme, scoped(1, t(0))).unwrap();
        // The resumed scoped run holds the tenant's one scoped slot.
        assert!(q.next_admissions(t(0), 10).is_empty());
        q.on_finished(&acme, RunType::Scoped, true, t(MIN)).unwrap();
        assert_eq!(q.next_admissions(t(MIN), 10).len(), 1);
        q.on_finished(&acme, RunType::Full, true, t(MIN)).unwrap();
        assert!(!q.tenant(&acme).unwrap().full_in_flight);
        assert_eq!(
            q.resume_in_flight(&tenant("nobody"), RunType::Full),
            Err(Refusal::UnknownTenant(tenant("nobody")))
        );
    }

    #[test]
    fn ten_thousand_tenants_are_all_admitted_in_one_cadence_period() {
        let mut q = queue(five_minutes());
        let tenants: Vec<TenantId> = (0..10_000).map(|i| tenant(&format!("t{i:05}"))).collect();
        for x in &tenants {
            q.add_tenant(x.clone(), t(0), Some(t(0)));
        }
        let mut admitted = HashSet::new();
        // One pass per second over 1.2 intervals; runs finish at once.
        for s in 1..=360 {
            for adm in q.next_admissions(t(s * 1_000), 100) {
                admitted.insert(adm.tenant.clone());
                q.on_finished(&adm.tenant, RunType::Full, true, t(s * 1_000))
                    .unwrap();
            }
        }
        assert_eq!(admitted.len(), tenants.len());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Scoped(usize),
        ManualFull(usize),
        Admit(usize),
        Finish(usize, bool),
        Advance(i64),
        Remove(usize),
        Add(usize),
    }

    fn op_strategy() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0_usize..5).prop_map(Op::Scoped),
            1 => (0_usize..5).prop_map(Op::ManualFull),
            3 => (0_usize..4).prop_map(Op::Admit),
            3 => (0_usize..5, any::<bool>()).prop_map(|(i, full)| Op::Finish(i, full)),
            2 => (0_i64..(7 * MIN)).prop_map(Op::Advance),
            1 => (0_usize..5).prop_map(Op::Remove),
            1 => (0_usize..5).prop_map(Op::Add),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Any sequence of requests, admissions, completions and clock moves keeps the
        /// invariants: scoped runs leave each tenant's queue in FIFO order, queues never exceed
        /// their bound, at most one full and `max_scoped_in_flight` scoped runs per tenant run,
        /// and a finished report for nothing in flight is refused.
        #[test]
        fn invariants_hold_under_any_operation_sequence(
            ops in proptest::collection::vec(op_strategy(), 1..200)
        ) {
            let config = AdmissionConfig { scoped_queue_limit: 3, ..five_minutes() };
            let mut q = queue(config);
            let tenants: Vec<TenantId> = (0..5).map(|i| tenant(&format!("p{i}"))).collect();
            let mut now = 0_i64;
            for x in &tenants {
                q.add_tenant(x.clone(), t(now), None);
            }
            let mut active = [true; 5];
            let mut expected: Vec<VecDeque<RunId>> = vec![VecDeque::new(); 5];
            let mut full_in_flight = [false; 5];
            let mut scoped_in_flight = [0_usize; 5];
            let mut n = 0;
            for op in ops {
                match op {
                    Op::Scoped(i) => {
                        n += 1;
                        match q.enqueue_scoped(&tenants[i], scoped(n, t(now))) {
                            Ok(waiting) => {
                                prop_assert!(active[i]);
                                expected[i].push_back(run_id(n));
                                prop_assert_eq!(waiting, expected[i].len());
                                prop_assert!(waiting <= 3);
                            }
                            Err(Refusal::ScopedQueueFull { limit }) => {
                                prop_assert_eq!(expected[i].len(), limit)
                            }
                            Err(Refusal::UnknownTenant(_)) => prop_assert!(!active[i]),
                            Err(other) => prop_assert!(false, "{other:?}"),
                        }
                    }
                    Op::ManualFull(i) => {
                        n += 1;
                        if let Err(refusal) = q.request_full(&tenants[i], run_id(n), t(now)) {
                            prop_assert!(matches!(
                                refusal,
                                Refusal::FullRunActive | Refusal::UnknownTenant(_)
                            ));
                        }
                    }
                    Op::Admit(capacity) => {
                        let got = q.next_admissions(t(now), capacity);
                        prop_assert!(got.len() <= capacity);
                        for adm in got {
                            let i = tenants.iter().position(|x| *x == adm.tenant).unwrap();
                            prop_assert!(active[i]);
                            match adm.run {
                                AdmittedRun::Full { .. } => {
                                    prop_assert!(!full_in_flight[i]);
                                    full_in_flight[i] = true;
                                }
                                AdmittedRun::Scoped(run) => {
                                    prop_assert_eq!(Some(run.run_id), expected[i].pop_front());
                                    prop_assert!(scoped_in_flight[i] < 1);
                                    scoped_in_flight[i] += 1;
                                }
                            }
                        }
                    }
                    Op::Finish(i, full) => {
                        let kind = if full { RunType::Full } else { RunType::Scoped };
                        let in_flight = if full { full_in_flight[i] } else { scoped_in_flight[i] > 0 };
                        let result = q.on_finished(&tenants[i], kind, true, t(now));
                        prop_assert_eq!(result.is_ok(), in_flight);
                        if in_flight {
                            if full { full_in_flight[i] = false } else { scoped_in_flight[i] -= 1 }
                        }
                    }
                    Op::Advance(step) => now += step,
                    Op::Remove(i) => {
                        prop_assert_eq!(q.remove_tenant(&tenants[i]), active[i]);
                        active[i] = false;
                        expected[i].clear();
                    }
                    Op::Add(i) => {
                        q.add_tenant(tenants[i].clone(), t(now), Some(t(now)));
                        active[i] = true;
                    }
                }
                for (i, x) in tenants.iter().enumerate() {
                    match q.tenant(x) {
                        Some(view) => {
                            prop_assert!(active[i]);
                            prop_assert_eq!(view.full_in_flight, full_in_flight[i]);
                            prop_assert_eq!(view.scoped_in_flight, scoped_in_flight[i]);
                            prop_assert_eq!(view.scoped_waiting, expected[i].len());
                        }
                        None => prop_assert!(!active[i]),
                    }
                }
            }
        }
    }

    #[derive(Debug, Clone)]
    struct Sim {
        workers: usize,
        flooder: usize,
        seed: u64,
        others_scoped_per_mille: u64,
    }

    fn sim_strategy() -> impl Strategy<Value = Sim> {
        (12_usize..=24, 0_usize..100, any::<u64>(), 0_u64..20).prop_map(
            |(workers, flooder, seed, others_scoped_per_mille)| Sim {
                workers,
                flooder,
                seed,
                others_scoped_per_mille,
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// 100 tenants on a 5-minute cadence, one flooding manual full and scoped runs: every
        /// other tenant's due full run is admitted within one cadence period, and no tenant ever
        /// has two full runs in flight.
        #[test]
        fn flooding_tenant_cannot_starve_others(sim in sim_strategy()) {
            let interval = 5 * MIN;
            let mut q = queue(five_minutes());
            let tenants: Vec<TenantId> = (0..100).map(|i| tenant(&format!("t{i:03}"))).collect();
            for x in &tenants {
                q.add_tenant(x.clone(), t(0), None);
            }
            let flooder = tenants[sim.flooder].clone();
            let mut rng = sim.seed;
            let mut next_rand = move || { rng = mix(rng); rng };
            // (finish time, tenant, run type)
            let mut running: Vec<(i64, TenantId, RunType)> = Vec::new();
            let mut full_in_flight: HashSet<TenantId> = HashSet::new();
            let mut full_admissions: BTreeMap<TenantId, u32> = BTreeMap::new();
            let mut worst_wait = 0_i64;
            let mut queue_full_refusals = 0_u32;
            let mut n = 0_u64;
            let horizon = 3 * interval;
            let mut now = 0;
            while now <= horizon {
                // Finished runs report first.
                let (done, still): (Vec<_>, Vec<_>) = running.into_iter().partition(|r| r.0 <= now);
                running = still;
                for (_, who, kind) in done {
                    if kind == RunType::Full {
                        full_in_flight.remove(&who);
                    }
                    q.on_finished(&who, kind, next_rand() % 10 != 0, t(now)).unwrap();
                }
                // The flood: a manual full run and scoped runs up to the queue limit, every second.
                n += 1;
                let _ = q.request_full(&flooder, run_id(n), t(now));
                loop {
                    n += 1;
                    match q.enqueue_scoped(&flooder, scoped(n, t(now))) {
                        Ok(_) => {}
                        Err(Refusal::ScopedQueueFull { .. }) => { queue_full_refusals += 1; break }
                        Err(other) => prop_assert!(false, "unexpected refusal {other:?}"),
                    }
                }
                for x in &tenants {
                    if *x != flooder && next_rand() % 1000 < sim.others_scoped_per_mille {
                        n += 1;
                        let _ = q.enqueue_scoped(x, scoped(n, t(now)));
                    }
                }
                let free = sim.workers - running.len();
                for adm in q.next_admissions(t(now), free) {
                    let duration = 5_000 + (next_rand() % 25_001) as i64;
                    if let AdmittedRun::Full { due_at, trigger_reason, .. } = &adm.run {
                        prop_assert!(full_in_flight.insert(adm.tenant.clone()),
                            "{} got a second full run in flight", adm.tenant);
                        if adm.tenant != flooder {
                            prop_assert!(matches!(trigger_reason, TriggerReason::Scheduled | TriggerReason::Startup));
                            let wait = ms(adm.admitted_at) - ms(*due_at);
                            worst_wait = worst_wait.max(wait);
                            prop_assert!(wait <= interval, "{} waited {wait} ms", adm.tenant);
                        }
                        *full_admissions.entry(adm.tenant.clone()).or_default() += 1;
                    }
                    running.push((now + duration, adm.tenant.clone(), adm.run.run_type()));
                }
                prop_assert!(running.len() <= sim.workers);
                now += 1_000;
            }
            prop_assert!(queue_full_refusals > 0, "the flood never hit the queue bound");
            for x in &tenants {
                // Startup run plus at least the slots due before the last period began.
                let count = full_admissions.get(x).copied().unwrap_or(0);
                prop_assert!(count >= 2, "{x} had {count} full runs");
                if *x != flooder {
                    // Nothing is left waiting longer than a period at the end either.
                    if let Some(since) = q.tenant(x).unwrap().full_waiting_since {
                        prop_assert!(horizon - (ms(since) - ms(t(0))) <= interval);
                    }
                }
            }
            prop_assert!(worst_wait <= interval);
        }
    }
}
