//! Tenant spend budgets, pure part: the four limits of the AI settings
//! (`budgets.daily_usd`, `monthly_usd`, `daily_tokens`, `monthly_tokens`), their UTC periods,
//! and the one decision whether a model call of a Watch run or an investigation may start.
//! No IO and no clock: the caller passes `now` and the ledger's sums.
//!
//! Rules:
//! - Periods are UTC calendar periods: daily is `[00:00, next 00:00)`, monthly is from the first
//!   of the month to the first of the next. A period's spend is every cost-ledger row of the
//!   tenant in it; a budget frees itself at the period boundary ([`PeriodWindow::reset_at`]).
//! - `None` is unlimited. A budget has room while its period's total is below the limit, so `0`
//!   allows no model call at all. The check runs before each provider call: the call that crosses
//!   a limit still finishes (and its turn with it), so a period can end above its limit by at
//!   most the calls already in flight.
//! - Tokens count input plus output tokens. Dollars count the known prices; a call of unknown
//!   price in the period, or a next call whose price is unknown, fails a dollar budget closed
//!   ([`dollar_fits`] is the one dollar rule; the model-runner's `DollarBudget` prices the next
//!   call with it).
//! - When several budgets are used up, the refusal names the one that frees last, so its
//!   `resets_at` is when runs can start again.

use chrono::{DateTime, Datelike, Duration, NaiveDate, Utc};
use serde::{Deserialize, Serialize};

use crate::ai_settings::Budgets;
use crate::usd::{ParseUsdError, Usd};

/// Where an operator changes the budgets.
pub const BUDGET_SETTINGS_HINT: &str = "PUT /api/settings/ai";

/// The UTC period a budget counts over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetPeriod {
    Day,
    Month,
}

/// One period: spend in `[start, reset_at)` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeriodWindow {
    pub start: DateTime<Utc>,
    pub reset_at: DateTime<Utc>,
}

fn midnight(date: NaiveDate) -> DateTime<Utc> {
    date.and_hms_opt(0, 0, 0)
        .map(|t| t.and_utc())
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

impl BudgetPeriod {
    /// The period that contains `now`.
    pub fn window(self, now: DateTime<Utc>) -> PeriodWindow {
        let today = now.date_naive();
        match self {
            Self::Day => {
                let start = midnight(today);
                let reset_at = today
                    .checked_add_signed(Duration::days(1))
                    .map(midnight)
                    .unwrap_or(DateTime::<Utc>::MAX_UTC);
                PeriodWindow { start, reset_at }
            }
            Self::Month => {
                let first = today.with_day(1).unwrap_or(today);
                let next = if first.month() == 12 {
                    NaiveDate::from_ymd_opt(first.year() + 1, 1, 1)
                } else {
                    NaiveDate::from_ymd_opt(first.year(), first.month() + 1, 1)
                };
                PeriodWindow {
                    start: midnight(first),
                    reset_at: next.map(midnight).unwrap_or(DateTime::<Utc>::MAX_UTC),
                }
            }
        }
    }
}

/// The four budgets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetKind {
    DailyTokens,
    MonthlyTokens,
    DailyUsd,
    MonthlyUsd,
}

impl BudgetKind {
    pub const ALL: [BudgetKind; 4] = [
        Self::DailyTokens,
        Self::MonthlyTokens,
        Self::DailyUsd,
        Self::MonthlyUsd,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::DailyTokens => "daily_tokens",
            Self::MonthlyTokens => "monthly_tokens",
            Self::DailyUsd => "daily_usd",
            Self::MonthlyUsd => "monthly_usd",
        }
    }

    pub fn period(self) -> BudgetPeriod {
        match self {
            Self::DailyTokens | Self::DailyUsd => BudgetPeriod::Day,
            Self::MonthlyTokens | Self::MonthlyUsd => BudgetPeriod::Month,
        }
    }

    /// "daily token budget", for messages.
    pub fn label(self) -> &'static str {
        match self {
            Self::DailyTokens => "daily token budget",
            Self::MonthlyTokens => "monthly token budget",
            Self::DailyUsd => "daily dollar budget",
            Self::MonthlyUsd => "monthly dollar budget",
        }
    }
}

/// A stored dollar budget that is not an exact amount (more than 12 decimals).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("budgets.{} is not an exact dollar amount: {source}", .kind.as_str())]
pub struct InvalidBudget {
    pub kind: BudgetKind,
    pub source: ParseUsdError,
}

/// The tenant's limits, parsed; `None` is unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantBudgets {
    pub daily_usd: Option<Usd>,
    pub monthly_usd: Option<Usd>,
    pub daily_tokens: Option<u64>,
    pub monthly_tokens: Option<u64>,
}

impl TenantBudgets {
    pub fn from_settings(budgets: &Budgets) -> Result<Self, InvalidBudget> {
        let dollars = |kind: BudgetKind, text: &Option<String>| {
            text.as_deref()
                .map(|t| t.parse::<Usd>())
                .transpose()
                .map_err(|source| InvalidBudget { kind, source })
        };
        Ok(Self {
            daily_usd: dollars(BudgetKind::DailyUsd, &budgets.daily_usd)?,
            monthly_usd: dollars(BudgetKind::MonthlyUsd, &budgets.monthly_usd)?,
            daily_tokens: budgets.daily_tokens,
            monthly_tokens: budgets.monthly_tokens,
        })
    }

    pub fn is_unlimited(&self) -> bool {
        *self == Self::default()
    }

    /// These budgets tightened by the platform operator's daily quotas: each daily limit is the
    /// smaller of the tenant's own budget and the quota (docs/tenants.md).
    pub fn within_quotas(self, quotas: &crate::tenant::TenantQuotas) -> Self {
        fn tighter<T: Ord>(own: Option<T>, quota: Option<T>) -> Option<T> {
            match (own, quota) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        }
        Self {
            daily_usd: tighter(
                self.daily_usd,
                quotas.usd_micros_per_day.map(Usd::from_micros),
            ),
            daily_tokens: tighter(self.daily_tokens, quotas.tokens_per_day),
            ..self
        }
    }
}

/// What the ledger says was spent in dollars in one period.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spend {
    /// The sum of the calls whose price was known.
    pub known: Usd,
    /// Metered calls whose price was unknown: their amount could be anything.
    pub unknown_price_calls: u64,
}

/// The ledger's totals for one period.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeriodSpend {
    /// Input plus output tokens.
    pub tokens: u64,
    pub dollars: Spend,
}

/// The ledger's totals for the current day and month (see [`BudgetPeriod::window`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantSpend {
    pub day: PeriodSpend,
    pub month: PeriodSpend,
}

impl TenantSpend {
    pub fn period(&self, period: BudgetPeriod) -> PeriodSpend {
        match period {
            BudgetPeriod::Day => self.day,
            BudgetPeriod::Month => self.month,
        }
    }
}

/// Why a budget refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalReason {
    /// The call, or spend already in the window, has no known price, so the budget cannot be
    /// shown to hold.
    UnknownPrice,
    /// The known spend plus this call would pass the limit.
    Exceeded,
}

impl RefusalReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UnknownPrice => "unknown_price",
            Self::Exceeded => "exceeded",
        }
    }

    /// One line for the operator.
    pub fn summary(self) -> &'static str {
        match self {
            Self::UnknownPrice => {
                "the model has no known price, so the dollar budget cannot be checked"
            }
            Self::Exceeded => "the dollar budget for this period is spent",
        }
    }

    pub fn recommendation(self) -> &'static str {
        match self {
            Self::UnknownPrice => {
                "choose a model with a known price, a local model, or remove the dollar budget"
            }
            Self::Exceeded => "raise the budget or wait for the next period",
        }
    }
}

/// The one dollar rule: spend of unknown price in the window fails closed; otherwise the known
/// spend plus `next` must stay within `limit`.
pub fn dollar_fits(limit: Usd, spent: Spend, next: Usd) -> Result<(), RefusalReason> {
    if spent.unknown_price_calls > 0 {
        return Err(RefusalReason::UnknownPrice);
    }
    if spent.known.saturating_add(next) > limit {
        return Err(RefusalReason::Exceeded);
    }
    Ok(())
}

/// The smallest amount a priced call adds: a budget has room for a call while the known spend
/// is below its limit.
const SMALLEST_CALL: Usd = Usd::from_picos(1);

/// Prices the next call against a dollar limit and the period's spend (the model-runner's
/// `DollarBudget`, which knows the route's price).
pub type PriceNextCall<'a> = &'a dyn Fn(Usd, Spend) -> Result<(), RefusalReason>;

/// A used-up budget: the run refused, or stopped before its next provider call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.message())]
pub struct BudgetExceeded {
    pub kind: BudgetKind,
    pub reason: RefusalReason,
    /// The limit as configured (`"12.50"` dollars, `"100000"` tokens).
    pub limit: String,
    /// What the period has used (`"12.61"` known dollars, `"100342"` tokens).
    pub used: String,
    /// The period boundary when this budget frees again.
    pub resets_at: DateTime<Utc>,
}

impl BudgetExceeded {
    /// What happened, when it resets (RFC 3339) and what to do; no secret, safe to show.
    pub fn message(&self) -> String {
        let reset = self
            .resets_at
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let field = self.kind.as_str();
        match self.reason {
            RefusalReason::Exceeded => format!(
                "the {label} is used up ({used} of {limit}{unit}); it resets at {reset}; wait for \
                 the reset or raise budgets.{field} with {BUDGET_SETTINGS_HINT}",
                label = self.kind.label(),
                used = self.used,
                limit = self.limit,
                unit = if matches!(self.kind, BudgetKind::DailyUsd | BudgetKind::MonthlyUsd) {
                    " USD"
                } else {
                    " tokens"
                },
            ),
            RefusalReason::UnknownPrice => format!(
                "the {label} cannot be checked: {summary}; {recommendation} (budgets.{field} with \
                 {BUDGET_SETTINGS_HINT}); spend of unknown price in this period clears at {reset}",
                label = self.kind.label(),
                summary = RefusalReason::UnknownPrice.summary(),
                recommendation = RefusalReason::UnknownPrice.recommendation(),
            ),
        }
    }
}

/// Whether a model call may start now. `price_next` is the next call's own price check; `None`
/// where the route's price is not known (the readiness gate: the model-runner checks it before
/// each call).
pub fn decide(
    budgets: &TenantBudgets,
    spend: &TenantSpend,
    now: DateTime<Utc>,
    price_next: Option<PriceNextCall<'_>>,
) -> Result<(), BudgetExceeded> {
    let mut refusals = Vec::new();
    for kind in BudgetKind::ALL {
        let period = spend.period(kind.period());
        let refused = match kind {
            BudgetKind::DailyTokens | BudgetKind::MonthlyTokens => {
                let limit = match kind {
                    BudgetKind::DailyTokens => budgets.daily_tokens,
                    _ => budgets.monthly_tokens,
                };
                limit.filter(|limit| period.tokens >= *limit).map(|limit| {
                    (
                        RefusalReason::Exceeded,
                        limit.to_string(),
                        period.tokens.to_string(),
                    )
                })
            }
            BudgetKind::DailyUsd | BudgetKind::MonthlyUsd => {
                let limit = match kind {
                    BudgetKind::DailyUsd => budgets.daily_usd,
                    _ => budgets.monthly_usd,
                };
                limit.and_then(|limit| {
                    dollar_fits(limit, period.dollars, SMALLEST_CALL)
                        .and_then(|()| {
                            price_next.map_or(Ok(()), |price| price(limit, period.dollars))
                        })
                        .err()
                        .map(|reason| (reason, dollars(limit), dollars(period.dollars.known)))
                })
            }
        };
        if let Some((reason, limit, used)) = refused {
            refusals.push(BudgetExceeded {
                kind,
                reason,
                limit,
                used,
                resets_at: kind.period().window(now).reset_at,
            });
        }
    }
    // The budget that frees last decides when runs start again; the first such in kind order.
    let last = refusals.iter().map(|r| r.resets_at).max();
    match refusals.into_iter().find(|r| Some(r.resets_at) == last) {
        Some(refusal) => Err(refusal),
        None => Ok(()),
    }
}

/// "12.5" rather than the ledger's twelve decimals.
fn dollars(amount: Usd) -> String {
    let text = amount.to_string();
    let trimmed = text.trim_end_matches('0');
    trimmed.strip_suffix('.').unwrap_or(trimmed).to_owned()
}

#[cfg(test)]
mod tests {
    #[test]
    fn quotas_tighten_the_daily_budgets_only() {
        let own = TenantBudgets {
            daily_usd: Some(Usd::from_micros(5_000_000)),
            monthly_usd: Some(Usd::from_micros(50_000_000)),
            daily_tokens: None,
            monthly_tokens: Some(1_000),
        };
        let quotas = crate::tenant::TenantQuotas {
            usd_micros_per_day: Some(2_000_000),
            tokens_per_day: Some(700),
            ..Default::default()
        };
        let tightened = own.within_quotas(&quotas);
        assert_eq!(tightened.daily_usd, Some(Usd::from_micros(2_000_000)));
        assert_eq!(tightened.daily_tokens, Some(700));
        assert_eq!(tightened.monthly_usd, own.monthly_usd);
        assert_eq!(tightened.monthly_tokens, own.monthly_tokens);
        let loose = crate::tenant::TenantQuotas {
            usd_micros_per_day: Some(9_000_000),
            ..Default::default()
        };
        assert_eq!(own.within_quotas(&loose).daily_usd, own.daily_usd);
        assert_eq!(
            TenantBudgets::default().within_quotas(&Default::default()),
            TenantBudgets::default()
        );
    }

    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;

    fn at(y: i32, m: u32, d: u32, h: u32, min: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, m, d, h, min, s).unwrap()
    }

    fn usd(text: &str) -> Usd {
        text.parse().unwrap()
    }

    fn tokens(day: u64, month: u64) -> TenantSpend {
        TenantSpend {
            day: PeriodSpend {
                tokens: day,
                dollars: Spend::default(),
            },
            month: PeriodSpend {
                tokens: month,
                dollars: Spend::default(),
            },
        }
    }

    fn dollars_spent(day: &str, month: &str) -> TenantSpend {
        let spent = |t: &str| PeriodSpend {
            tokens: 0,
            dollars: Spend {
                known: usd(t),
                unknown_price_calls: 0,
            },
        };
        TenantSpend {
            day: spent(day),
            month: spent(month),
        }
    }

    #[test]
    fn periods_are_utc_calendar_days_and_months() {
        let now = at(2026, 12, 31, 23, 59, 59);
        assert_eq!(
            BudgetPeriod::Day.window(now),
            PeriodWindow {
                start: at(2026, 12, 31, 0, 0, 0),
                reset_at: at(2027, 1, 1, 0, 0, 0)
            }
        );
        assert_eq!(
            BudgetPeriod::Month.window(now),
            PeriodWindow {
                start: at(2026, 12, 1, 0, 0, 0),
                reset_at: at(2027, 1, 1, 0, 0, 0)
            }
        );
        // February of a leap year; the boundary itself belongs to the new period.
        let feb = BudgetPeriod::Month.window(at(2028, 2, 29, 12, 0, 0));
        assert_eq!(feb.reset_at, at(2028, 3, 1, 0, 0, 0));
        let day = BudgetPeriod::Day.window(at(2026, 3, 2, 0, 0, 0));
        assert_eq!(day.start, at(2026, 3, 2, 0, 0, 0));
    }

    #[test]
    fn unlimited_budgets_allow_anything() {
        let spend = TenantSpend {
            day: PeriodSpend {
                tokens: u64::MAX,
                dollars: Spend {
                    known: Usd::from_picos(u64::MAX),
                    unknown_price_calls: 9,
                },
            },
            month: PeriodSpend::default(),
        };
        let refuse_all: PriceNextCall<'_> = &|_, _| Err(RefusalReason::UnknownPrice);
        assert!(TenantBudgets::default().is_unlimited());
        assert_eq!(
            decide(
                &TenantBudgets::default(),
                &spend,
                at(2026, 5, 5, 5, 5, 5),
                Some(refuse_all)
            ),
            Ok(())
        );
    }

    #[test]
    fn daily_tokens_refuse_when_used_up_and_free_at_midnight_utc() {
        let budgets = TenantBudgets {
            daily_tokens: Some(1_000),
            ..Default::default()
        };
        let now = at(2026, 12, 1, 21, 30, 0);
        assert_eq!(decide(&budgets, &tokens(999, 999), now, None), Ok(()));
        let refused = decide(&budgets, &tokens(1_000, 1_000), now, None).unwrap_err();
        assert_eq!(refused.kind, BudgetKind::DailyTokens);
        assert_eq!(refused.reason, RefusalReason::Exceeded);
        assert_eq!(refused.resets_at, at(2026, 12, 2, 0, 0, 0));
        let message = refused.message();
        assert!(message.contains("2026-12-02T00:00:00Z"), "{message}");
        assert!(message.contains("budgets.daily_tokens"), "{message}");
        assert!(message.contains("1000 of 1000 tokens"), "{message}");
        // At the boundary the ledger's new day holds nothing yet: runs start again.
        assert_eq!(
            decide(&budgets, &tokens(0, 1_000), refused.resets_at, None),
            Ok(())
        );
    }

    #[test]
    fn monthly_tokens_refuse_until_the_first_of_next_month() {
        let budgets = TenantBudgets {
            monthly_tokens: Some(50_000),
            ..Default::default()
        };
        let now = at(2026, 12, 15, 8, 0, 0);
        assert_eq!(decide(&budgets, &tokens(10, 49_999), now, None), Ok(()));
        let refused = decide(&budgets, &tokens(10, 50_000), now, None).unwrap_err();
        assert_eq!(refused.kind, BudgetKind::MonthlyTokens);
        assert_eq!(refused.resets_at, at(2027, 1, 1, 0, 0, 0));
        // A new day does not free a monthly budget; the new month does.
        assert!(
            decide(
                &budgets,
                &tokens(0, 50_000),
                at(2026, 12, 16, 0, 0, 0),
                None
            )
            .is_err()
        );
        assert_eq!(
            decide(&budgets, &tokens(0, 0), refused.resets_at, None),
            Ok(())
        );
    }

    #[test]
    fn daily_dollars_refuse_when_spent_and_free_at_midnight_utc() {
        let budgets = TenantBudgets {
            daily_usd: Some(usd("2.50")),
            ..Default::default()
        };
        let now = at(2026, 7, 4, 23, 59, 59);
        assert_eq!(
            decide(&budgets, &dollars_spent("2.499999999999", "9"), now, None),
            Ok(())
        );
        let refused = decide(&budgets, &dollars_spent("2.5", "9"), now, None).unwrap_err();
        assert_eq!(refused.kind, BudgetKind::DailyUsd);
        assert_eq!(refused.reason, RefusalReason::Exceeded);
        assert_eq!(refused.resets_at, at(2026, 7, 5, 0, 0, 0));
        assert!(
            refused.message().contains("2.5 of 2.5 USD"),
            "{}",
            refused.message()
        );
        assert_eq!(
            decide(
                &budgets,
                &dollars_spent("0", "9"),
                at(2026, 7, 5, 0, 0, 0),
                None
            ),
            Ok(())
        );
    }

    #[test]
    fn monthly_dollars_refuse_until_the_first_of_next_month() {
        let budgets = TenantBudgets {
            monthly_usd: Some(usd("40")),
            ..Default::default()
        };
        let now = at(2026, 2, 27, 10, 0, 0);
        assert_eq!(
            decide(&budgets, &dollars_spent("1", "39.99"), now, None),
            Ok(())
        );
        let refused = decide(&budgets, &dollars_spent("1", "40.01"), now, None).unwrap_err();
        assert_eq!(refused.kind, BudgetKind::MonthlyUsd);
        assert_eq!(refused.resets_at, at(2026, 3, 1, 0, 0, 0));
        assert_eq!(
            decide(&budgets, &dollars_spent("0", "0"), refused.resets_at, None),
            Ok(())
        );
    }

    #[test]
    fn zero_allows_no_model_call() {
        let none = tokens(0, 0);
        let now = at(2026, 1, 1, 0, 0, 0);
        for budgets in [
            TenantBudgets {
                daily_tokens: Some(0),
                ..Default::default()
            },
            TenantBudgets {
                monthly_tokens: Some(0),
                ..Default::default()
            },
            TenantBudgets {
                daily_usd: Some(Usd::ZERO),
                ..Default::default()
            },
            TenantBudgets {
                monthly_usd: Some(Usd::ZERO),
                ..Default::default()
            },
        ] {
            let refused = decide(&budgets, &none, now, None).unwrap_err();
            assert_eq!(refused.reason, RefusalReason::Exceeded, "{budgets:?}");
        }
    }

    #[test]
    fn unknown_price_fails_a_dollar_budget_closed() {
        let budgets = TenantBudgets {
            daily_usd: Some(usd("100")),
            ..Default::default()
        };
        let now = at(2026, 6, 1, 12, 0, 0);
        // Spend of unknown price already in the window.
        let mut spend = dollars_spent("0.01", "0.01");
        spend.day.dollars.unknown_price_calls = 1;
        let refused = decide(&budgets, &spend, now, None).unwrap_err();
        assert_eq!(refused.reason, RefusalReason::UnknownPrice);
        assert!(
            refused.message().contains("no known price"),
            "{}",
            refused.message()
        );
        // The next call's route has no price.
        let unpriced: PriceNextCall<'_> = &|_, _| Err(RefusalReason::UnknownPrice);
        let refused = decide(&budgets, &dollars_spent("0", "0"), now, Some(unpriced)).unwrap_err();
        assert_eq!(refused.reason, RefusalReason::UnknownPrice);
        // Without a dollar budget, an unknown price is no budget's business.
        let token_only = TenantBudgets {
            daily_tokens: Some(10),
            ..Default::default()
        };
        assert_eq!(decide(&token_only, &spend, now, Some(unpriced)), Ok(()));
    }

    #[test]
    fn the_budget_that_frees_last_is_reported() {
        let budgets = TenantBudgets {
            daily_tokens: Some(10),
            monthly_usd: Some(usd("1")),
            ..Default::default()
        };
        let mut spend = dollars_spent("2", "2");
        spend.day.tokens = 10;
        let now = at(2026, 4, 10, 9, 0, 0);
        let refused = decide(&budgets, &spend, now, None).unwrap_err();
        assert_eq!(refused.kind, BudgetKind::MonthlyUsd);
        assert_eq!(refused.resets_at, at(2026, 5, 1, 0, 0, 0));
    }

    #[test]
    fn stored_dollar_budgets_parse_exactly() {
        let parsed = TenantBudgets::from_settings(&Budgets {
            daily_usd: Some("12.50".into()),
            monthly_usd: None,
            daily_tokens: Some(0),
            monthly_tokens: None,
        })
        .unwrap();
        assert_eq!(parsed.daily_usd, Some(usd("12.5")));
        assert_eq!(parsed.daily_tokens, Some(0));
        let bad = TenantBudgets::from_settings(&Budgets {
            daily_usd: None,
            monthly_usd: Some("1.0000000000001".into()),
            daily_tokens: None,
            monthly_tokens: None,
        })
        .unwrap_err();
        assert_eq!(bad.kind, BudgetKind::MonthlyUsd);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// A token budget refuses exactly when its period's total reached it, always with that
        /// period's boundary (after `now`) as the reset.
        #[test]
        fn token_budgets_refuse_exactly_at_the_limit(
            limit in 0u64..10_000,
            day in 0u64..20_000,
            extra in 0u64..20_000,
            secs in 0i64..(4 * 366 * 86_400),
            monthly in any::<bool>(),
        ) {
            let now = at(2026, 1, 1, 0, 0, 0) + Duration::seconds(secs);
            let budgets = if monthly {
                TenantBudgets { monthly_tokens: Some(limit), ..Default::default() }
            } else {
                TenantBudgets { daily_tokens: Some(limit), ..Default::default() }
            };
            let spend = tokens(day, day + extra);
            let used = if monthly { day + extra } else { day };
            match decide(&budgets, &spend, now, None) {
                Ok(()) => prop_assert!(used < limit),
                Err(refused) => {
                    prop_assert!(used >= limit);
                    let window = refused.kind.period().window(now);
                    prop_assert!(window.start <= now && now < window.reset_at);
                    prop_assert_eq!(refused.resets_at, window.reset_at);
                    prop_assert!(refused.resets_at > now);
                }
            }
        }

        /// Dollars: room while the known spend is below the limit.
        #[test]
        fn dollar_budgets_refuse_exactly_at_the_limit(
            limit in 0u64..1_000_000,
            spent in 0u64..2_000_000,
        ) {
            let budgets = TenantBudgets { daily_usd: Some(Usd::from_picos(limit)), ..Default::default() };
            let spend = TenantSpend {
                day: PeriodSpend { tokens: 0, dollars: Spend { known: Usd::from_picos(spent), unknown_price_calls: 0 } },
                month: PeriodSpend::default(),
            };
            let decision = decide(&budgets, &spend, at(2026, 9, 9, 9, 9, 9), None);
            prop_assert_eq!(decision.is_ok(), spent < limit);
        }
    }
}
