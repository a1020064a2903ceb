//! Subject and stream names.
//!
//! Every subject is `[<prefix>.]pulse.<tenant>.<domain>.<verb...>`. System subjects put `_sys`
//! in the tenant position: a [`TenantId`] can never start with `_`, so the two can not collide.
//! Job, event and dead-letter subjects live under different third tokens (`jobs`, `events`,
//! `dlq`), which keeps the three JetStream streams disjoint as JetStream requires.

use pulse_domain::TenantId;

/// The root token of every subject.
pub const ROOT: &str = "pulse";
/// The tenant-position token of system subjects.
pub const SYSTEM_TENANT: &str = "_sys";

const JOBS: &str = "jobs";
const EVENTS: &str = "events";
const DLQ: &str = "dlq";

/// Why a prefix, a token or a subject is not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubjectError {
    #[error("subject prefix {0:?} is not a dot-separated list of [A-Za-z0-9_-] tokens")]
    BadPrefix(String),
    #[error("subject token {0:?} must be non-empty and use only [A-Za-z0-9_-]")]
    BadToken(String),
    #[error("subject {0:?} is not a valid publish subject")]
    BadSubject(String),
}

/// Builds the subjects and stream names for one deployment (or one test, with a random prefix).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Subjects {
    prefix: Option<String>,
}

impl Subjects {
    /// Subjects under an optional prefix. An empty prefix means none. Characters that can not
    /// appear in a subject token are replaced by `_` and empty tokens dropped; use
    /// [`Subjects::try_new`] to reject such a prefix instead.
    pub fn new(prefix: Option<&str>) -> Self {
        let prefix = prefix.map(|p| {
            p.split('.')
                .filter(|t| !t.is_empty())
                .map(|t| {
                    t.chars()
                        .map(|c| if is_token_char(c) { c } else { '_' })
                        .collect::<String>()
                })
                .collect::<Vec<_>>()
                .join(".")
        });
        Self {
            prefix: prefix.filter(|p| !p.is_empty()),
        }
    }

    /// Subjects under an optional prefix, refusing a prefix that is not a dot-separated list of
    /// `[A-Za-z0-9_-]` tokens.
    pub fn try_new(prefix: Option<&str>) -> Result<Self, SubjectError> {
        match prefix {
            None | Some("") => Ok(Self { prefix: None }),
            Some(p) => {
                if p.split('.').all(is_token) {
                    Ok(Self {
                        prefix: Some(p.to_owned()),
                    })
                } else {
                    Err(SubjectError::BadPrefix(p.to_owned()))
                }
            }
        }
    }

    pub fn prefix(&self) -> Option<&str> {
        self.prefix.as_deref()
    }

    fn root(&self) -> String {
        match &self.prefix {
            Some(p) => format!("{p}.{ROOT}"),
            None => ROOT.to_owned(),
        }
    }

    /// `pulse.<tenant>.<rest>`, e.g. `tenant(t, "patrol.run.request")`.
    pub fn tenant(&self, tenant: &TenantId, rest: &str) -> String {
        format!("{}.{}.{rest}", self.root(), tenant.as_str())
    }

    /// `pulse.*.<rest>`: the same subject for every tenant, for a multi-tenant responder.
    pub fn any_tenant(&self, rest: &str) -> String {
        format!("{}.*.{rest}", self.root())
    }

    /// `pulse.<tenant>.>`: everything of one tenant.
    pub fn tenant_all(&self, tenant: &TenantId) -> String {
        format!("{}.{}.>", self.root(), tenant.as_str())
    }

    /// `pulse._sys.<rest>`.
    pub fn system(&self, rest: &str) -> String {
        format!("{}.{SYSTEM_TENANT}.{rest}", self.root())
    }

    /// `pulse._sys.heartbeat`.
    pub fn heartbeat(&self) -> String {
        self.system("heartbeat")
    }

    /// `pulse.<tenant>.jobs.<kind>`.
    pub fn job(&self, tenant: &TenantId, kind: &str) -> String {
        self.tenant(tenant, &format!("{JOBS}.{kind}"))
    }

    /// `pulse.*.jobs.<kind>`: the filter of the durable consumer for one job kind.
    pub fn job_kind_filter(&self, kind: &str) -> String {
        self.any_tenant(&format!("{JOBS}.{kind}"))
    }

    /// `pulse.*.jobs.>`: the JOBS stream subjects.
    pub fn jobs_wildcard(&self) -> String {
        self.any_tenant(&format!("{JOBS}.>"))
    }

    /// `pulse.<tenant>.events.<domain>.<event>`; `event` may have several tokens.
    pub fn event(&self, tenant: &TenantId, domain: &str, event: &str) -> String {
        self.tenant(tenant, &format!("{EVENTS}.{domain}.{event}"))
    }

    /// `pulse.*.events.<domain>.<event>`: one event of every tenant, for a durable consumer's
    /// filter; `event` may be `>`.
    pub fn event_any_tenant(&self, domain: &str, event: &str) -> String {
        self.any_tenant(&format!("{EVENTS}.{domain}.{event}"))
    }

    /// `pulse.<tenant>.events.`: what every event subject of one tenant starts with.
    pub fn tenant_events_prefix(&self, tenant: &TenantId) -> String {
        format!("{}.", self.tenant(tenant, EVENTS))
    }

    /// `pulse.<tenant>.events.>`: one tenant's events, for replay.
    pub fn tenant_events(&self, tenant: &TenantId) -> String {
        self.tenant(tenant, &format!("{EVENTS}.>"))
    }

    /// `pulse.*.events.>`: the EVENTS stream subjects.
    pub fn events_wildcard(&self) -> String {
        self.any_tenant(&format!("{EVENTS}.>"))
    }

    /// `pulse.<tenant>.assistant.session.<session>.events`: one Assistant session's live turn
    /// events (core NATS; see `assistant_api`).
    pub fn assistant_session_events(&self, tenant: &TenantId, session: uuid::Uuid) -> String {
        self.tenant(tenant, &format!("assistant.session.{session}.events"))
    }

    /// `pulse.<tenant>.assistant.abort`: stop a running Assistant turn.
    pub fn assistant_abort(&self, tenant: &TenantId) -> String {
        self.tenant(tenant, "assistant.abort")
    }

    /// `pulse.*.assistant.abort`: what every model-runner listens on.
    pub fn assistant_abort_all(&self) -> String {
        self.any_tenant("assistant.abort")
    }

    /// `pulse.<tenant>.relay.<verb>`: the agent relay's request subjects (`command`,
    /// `observe`, `read`); the body names the agent.
    pub fn relay(&self, tenant: &TenantId, verb: &str) -> String {
        self.tenant(tenant, &format!("relay.{verb}"))
    }

    /// `pulse.*.relay.<verb>`: what the relay serves.
    pub fn relay_any_tenant(&self, verb: &str) -> String {
        self.any_tenant(&format!("relay.{verb}"))
    }

    /// `pulse.<tenant>.relay.<verb>.<agent>`: served by the relay replica holding the agent's
    /// session. An agent id's `.` becomes `~` (agent ids never contain `~`) so the id stays one
    /// subject token.
    pub fn relay_agent(&self, tenant: &TenantId, verb: &str, agent_id: &str) -> String {
        self.tenant(
            tenant,
            &format!("relay.{verb}.{}", agent_id.replace('.', "~")),
        )
    }

    /// `pulse.<tenant>.dlq.<kind>`.
    pub fn dlq(&self, tenant: &TenantId, kind: &str) -> String {
        self.tenant(tenant, &format!("{DLQ}.{kind}"))
    }

    /// `pulse.<token>.dlq.<kind>` for a tenant token read off a received subject (it may be
    /// `_sys`).
    pub(crate) fn dlq_for_token(&self, tenant_token: &str, kind: &str) -> String {
        format!("{}.{tenant_token}.{DLQ}.{kind}", self.root())
    }

    /// `pulse.*.dlq.<kind>`.
    pub fn dlq_kind_filter(&self, kind: &str) -> String {
        self.any_tenant(&format!("{DLQ}.{kind}"))
    }

    /// `pulse.*.dlq.>`: the DLQ stream subjects.
    pub fn dlq_wildcard(&self) -> String {
        self.any_tenant(&format!("{DLQ}.>"))
    }

    /// The stream-name prefix: the prefix upper-cased with every other character as `_`.
    fn stream_name(&self, base: &str) -> String {
        match &self.prefix {
            Some(p) => {
                let p: String = p
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() {
                            c.to_ascii_uppercase()
                        } else {
                            '_'
                        }
                    })
                    .collect();
                format!("{p}_{base}")
            }
            None => base.to_owned(),
        }
    }

    /// Prefix of every stream name of these subjects (`""` or `"<PREFIX>_"`).
    pub fn stream_name_prefix(&self) -> String {
        self.stream_name("")
    }

    /// `PULSE_JOBS` or `<PREFIX>_PULSE_JOBS`.
    pub fn jobs_stream(&self) -> String {
        self.stream_name("PULSE_JOBS")
    }

    /// `PULSE_EVENTS` or `<PREFIX>_PULSE_EVENTS`.
    pub fn events_stream(&self) -> String {
        self.stream_name("PULSE_EVENTS")
    }

    /// `PULSE_DLQ` or `<PREFIX>_PULSE_DLQ`.
    pub fn dlq_stream(&self) -> String {
        self.stream_name("PULSE_DLQ")
    }

    /// Durable consumer name for one job kind: `jobs-<kind>`.
    pub fn job_consumer(&self, kind: &str) -> String {
        format!("{JOBS}-{kind}")
    }

    /// The tenant token of a subject built by these subjects (`_sys` for system subjects), or
    /// `None` when the subject is not under this prefix.
    pub fn tenant_token<'a>(&self, subject: &'a str) -> Option<&'a str> {
        let rest = match &self.prefix {
            Some(p) => subject.strip_prefix(p.as_str())?.strip_prefix('.')?,
            None => subject,
        };
        let rest = rest.strip_prefix(ROOT)?.strip_prefix('.')?;
        let tenant = rest.split('.').next()?;
        (!tenant.is_empty()).then_some(tenant)
    }
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// A subject token we build ourselves: non-empty, `[A-Za-z0-9_-]` only.
pub fn is_token(token: &str) -> bool {
    !token.is_empty() && token.chars().all(is_token_char)
}

/// Checks a job kind (or any single token).
pub fn check_token(token: &str) -> Result<(), SubjectError> {
    if is_token(token) {
        Ok(())
    } else {
        Err(SubjectError::BadToken(token.to_owned()))
    }
}

/// Checks a concrete publish subject: non-empty tokens, no wildcards, no whitespace.
pub fn check_publish_subject(subject: &str) -> Result<(), SubjectError> {
    let ok = !subject.is_empty()
        && subject.split('.').all(|t| {
            !t.is_empty()
                && t != "*"
                && t != ">"
                && !t.chars().any(|c| c.is_whitespace() || c.is_control())
        });
    if ok {
        Ok(())
    } else {
        Err(SubjectError::BadSubject(subject.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> TenantId {
        TenantId::new(s).unwrap()
    }

    #[test]
    fn builds_subjects_without_prefix() {
        let s = Subjects::new(None);
        assert_eq!(s.job(&t("acme"), "watch"), "pulse.acme.jobs.watch");
        assert_eq!(
            s.event(&t("acme"), "finding", "created"),
            "pulse.acme.events.finding.created"
        );
        assert_eq!(s.dlq(&t("acme"), "watch"), "pulse.acme.dlq.watch");
        assert_eq!(s.heartbeat(), "pulse._sys.heartbeat");
        assert_eq!(
            s.tenant(&t("acme"), "patrol.run.request"),
            "pulse.acme.patrol.run.request"
        );
        assert_eq!(s.any_tenant("action.plan"), "pulse.*.action.plan");
        assert_eq!(s.jobs_wildcard(), "pulse.*.jobs.>");
        assert_eq!(s.events_wildcard(), "pulse.*.events.>");
        assert_eq!(s.dlq_wildcard(), "pulse.*.dlq.>");
        assert_eq!(s.job_kind_filter("watch"), "pulse.*.jobs.watch");
        assert_eq!(s.jobs_stream(), "PULSE_JOBS");
        assert_eq!(s.events_stream(), "PULSE_EVENTS");
        assert_eq!(s.dlq_stream(), "PULSE_DLQ");
        assert_eq!(s.job_consumer("watch"), "jobs-watch");
    }

    #[test]
    fn builds_subjects_with_prefix() {
        let s = Subjects::new(Some("t0a1b2c3d4e5f"));
        assert_eq!(
            s.job(&t("acme"), "watch"),
            "t0a1b2c3d4e5f.pulse.acme.jobs.watch"
        );
        assert_eq!(s.heartbeat(), "t0a1b2c3d4e5f.pulse._sys.heartbeat");
        assert_eq!(s.jobs_stream(), "T0A1B2C3D4E5F_PULSE_JOBS");
        assert_eq!(s.stream_name_prefix(), "T0A1B2C3D4E5F_");
        let dotted = Subjects::new(Some("dev.eu-1"));
        assert_eq!(dotted.events_stream(), "DEV_EU_1_PULSE_EVENTS");
        assert_eq!(dotted.jobs_wildcard(), "dev.eu-1.pulse.*.jobs.>");
    }

    #[test]
    fn prefix_is_sanitized_or_refused() {
        assert_eq!(Subjects::new(Some("")), Subjects::new(None));
        assert_eq!(Subjects::new(Some("a b.*..c")).prefix(), Some("a_b._.c"));
        assert!(Subjects::try_new(Some("a b")).is_err());
        assert!(Subjects::try_new(Some("a..b")).is_err());
        assert!(Subjects::try_new(Some(">")).is_err());
        assert_eq!(Subjects::try_new(Some("")).unwrap().prefix(), None);
        assert_eq!(
            Subjects::try_new(Some("a.b-c")).unwrap().prefix(),
            Some("a.b-c")
        );
    }

    #[test]
    fn stream_subjects_are_disjoint() {
        // A concrete job subject matches only the jobs wildcard and vice versa.
        let s = Subjects::new(Some("p"));
        let job = s.job(&t("acme"), "watch");
        let event = s.event(&t("acme"), "jobs", "watch");
        assert_ne!(job, event);
        assert!(job.contains(".jobs."));
        assert!(event.starts_with("p.pulse.acme.events."));
    }

    #[test]
    fn extracts_tenant_token() {
        let s = Subjects::new(Some("pre.fix"));
        assert_eq!(
            s.tenant_token("pre.fix.pulse.acme.jobs.watch"),
            Some("acme")
        );
        assert_eq!(s.tenant_token("pre.fix.pulse._sys.heartbeat"), Some("_sys"));
        assert_eq!(s.tenant_token("pulse.acme.jobs.watch"), None);
        assert_eq!(s.tenant_token("pre.fixx.pulse.acme"), None);
        let none = Subjects::new(None);
        assert_eq!(none.tenant_token("pulse.acme.x"), Some("acme"));
        assert_eq!(none.tenant_token("pulsex.acme.x"), None);
        assert_eq!(none.tenant_token("pulse"), None);
    }

    #[test]
    fn checks_tokens_and_subjects() {
        assert!(check_token("watch").is_ok());
        assert!(check_token("investigate_v2").is_ok());
        for bad in ["", "a.b", "*", ">", "a b"] {
            assert!(check_token(bad).is_err(), "{bad}");
        }
        assert!(check_publish_subject("pulse.acme.jobs.watch").is_ok());
        for bad in ["", "pulse..x", "pulse.*.x", "pulse.>", "a b", "a.\n"] {
            assert!(check_publish_subject(bad).is_err(), "{bad:?}");
        }
    }
}
