//! Capacity forecast: a least-squares line through a metric's percent-used history.
//!
//! Pure and deterministic, so Patrol can stamp `capacity_forecast` on a finding independently of
//! the model's prose. Three outcomes, never a guess:
//!
//! - [`ForecastOutcome::Forecast`]: enough history; `days_to_full` is the projected days until the
//!   fitted line reaches 100%, or `-1` when the trend is stable (below
//!   [`STABLE_DAILY_CHANGE`] points a day, the reference "stable below 1%/day") or falling.
//! - [`ForecastOutcome::NoFillTrend`]: the metric is already high (at least
//!   [`HIGH_USAGE_PCT`]) but not meaningfully rising, so it is not filling up; `days_to_full`
//!   is `-1`. Kept apart from a forecast so a full-but-flat volume is not read as "fine".
//! - [`ForecastOutcome::NoHistory`]: fewer than [`MIN_SAMPLES`] usable samples at distinct times,
//!   or the samples span less than [`MIN_SPAN_SECONDS`] (one hour, the reference's shortest
//!   window). A slope from two points a minute apart is noise, so none is reported.
//!
//! Input hygiene: non-finite values and values outside `0..=100` are skipped and counted; the
//! input may be unsorted; samples sharing a timestamp are averaged into one.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Fewest usable samples (distinct timestamps) a forecast needs.
pub const MIN_SAMPLES: usize = 3;
/// Shortest span between first and last usable sample a forecast needs (1 hour).
pub const MIN_SPAN_SECONDS: i64 = 3_600;
/// A daily change (percentage points) below this magnitude is "stable".
pub const STABLE_DAILY_CHANGE: f64 = 1.0;
/// At or above this current usage a stable or falling series is reported as "no fill trend".
pub const HIGH_USAGE_PCT: f64 = 80.0;
/// Residual standard deviation (points) above which the trend is "volatile".
pub const VOLATILE_STDDEV: f64 = 15.0;

const SECONDS_PER_DAY: f64 = 86_400.0;

/// One observation of a percent-used metric.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct MetricSample {
    pub at: DateTime<Utc>,
    pub pct: f64,
}

impl MetricSample {
    pub fn new(at: DateTime<Utc>, pct: f64) -> Self {
        Self { at, pct }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum TrendDirection {
    Stable,
    Increasing,
    Decreasing,
    Volatile,
}

/// The projection stamped on a finding. The first four fields are the reference
/// `capacity_forecast` shape; the rest say how much to trust it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct CapacityForecast {
    pub metric: String,
    /// Latest observed value, percent used.
    pub current_pct: f64,
    /// Fitted slope, percentage points per day.
    pub daily_change: f64,
    /// Days until the fitted line reaches 100%, measured from the latest sample; `-1` when
    /// stable or falling; `0` when already full.
    pub days_to_full: f64,
    pub trend: TrendDirection,
    /// Coefficient of determination of the fit, `0..=1`.
    pub confidence: f64,
    pub sample_count: usize,
    pub span_hours: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum NoHistoryReason {
    TooFewSamples,
    SpanTooShort,
}

/// Not enough history to say anything about the trend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct NoHistory {
    pub metric: String,
    pub reason: NoHistoryReason,
    /// Usable samples after skipping invalid ones and merging duplicate timestamps.
    pub sample_count: usize,
    /// Samples skipped as non-finite or outside `0..=100`.
    pub skipped_samples: usize,
    pub span_hours: f64,
    pub min_samples: usize,
    pub min_span_hours: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ForecastOutcome {
    Forecast(CapacityForecast),
    NoFillTrend(CapacityForecast),
    NoHistory(NoHistory),
}

impl ForecastOutcome {
    /// The projection to stamp on a finding, if there is one.
    pub fn capacity_forecast(&self) -> Option<&CapacityForecast> {
        match self {
            Self::Forecast(f) | Self::NoFillTrend(f) => Some(f),
            Self::NoHistory(_) => None,
        }
    }
}

/// Rounds for a stable wire shape (4 decimal places); keeps `-0.0` out of snapshots.
fn round4(value: f64) -> f64 {
    let rounded = (value * 10_000.0).round() / 10_000.0;
    if rounded == 0.0 { 0.0 } else { rounded }
}

/// Forecasts `metric` from `samples` (any order).
pub fn forecast_capacity(metric: &str, samples: &[MetricSample]) -> ForecastOutcome {
    // Merge samples per timestamp (seconds + nanos), averaging duplicates.
    let mut by_time: BTreeMap<(i64, u32), (f64, u32)> = BTreeMap::new();
    let mut skipped = 0usize;
    for sample in samples {
        if !sample.pct.is_finite() || !(0.0..=100.0).contains(&sample.pct) {
            skipped += 1;
            continue;
        }
        let key = (sample.at.timestamp(), sample.at.timestamp_subsec_nanos());
        let slot = by_time.entry(key).or_insert((0.0, 0));
        slot.0 += sample.pct;
        slot.1 += 1;
    }
    let points: Vec<(i64, u32, f64)> = by_time
        .into_iter()
        .map(|((secs, nanos), (sum, n))| (secs, nanos, sum / f64::from(n)))
        .collect();

    let span_seconds = match (points.first(), points.last()) {
        (Some(first), Some(last)) => elapsed_seconds(first, last),
        _ => 0.0,
    };
    let no_history = |reason| {
        ForecastOutcome::NoHistory(NoHistory {
            metric: metric.to_owned(),
            reason,
            sample_count: points.len(),
            skipped_samples: skipped,
            span_hours: round4(span_seconds / 3_600.0),
            min_samples: MIN_SAMPLES,
            min_span_hours: MIN_SPAN_SECONDS as f64 / 3_600.0,
        })
    };
    if points.len() < MIN_SAMPLES {
        return no_history(NoHistoryReason::TooFewSamples);
    }
    if span_seconds < MIN_SPAN_SECONDS as f64 {
        return no_history(NoHistoryReason::SpanTooShort);
    }
    let Some(first) = points.first().copied() else {
        return no_history(NoHistoryReason::TooFewSamples);
    };
    let Some(last) = points.last().copied() else {
        return no_history(NoHistoryReason::TooFewSamples);
    };

    // x in days since the first sample keeps the sums well conditioned.
    let xs: Vec<f64> = points
        .iter()
        .map(|p| elapsed_seconds(&first, p) / SECONDS_PER_DAY)
        .collect();
    let ys: Vec<f64> = points.iter().map(|p| p.2).collect();
    let n = xs.len() as f64;
    let mean_x = xs.iter().sum::<f64>() / n;
    let mean_y = ys.iter().sum::<f64>() / n;
    let (mut sxx, mut sxy, mut syy) = (0.0, 0.0, 0.0);
    for (x, y) in xs.iter().zip(&ys) {
        let (dx, dy) = (x - mean_x, y - mean_y);
        sxx += dx * dx;
        sxy += dx * dy;
        syy += dy * dy;
    }
    // sxx > 0 because the span is at least an hour; guard anyway so no input can divide by zero.
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    let intercept = mean_y - slope * mean_x;
    let mut sse = 0.0;
    for (x, y) in xs.iter().zip(&ys) {
        let r = y - (intercept + slope * x);
        sse += r * r;
    }
    let confidence = if syy > 0.0 {
        (1.0 - sse / syy).clamp(0.0, 1.0)
    } else {
        // A perfectly flat series is perfectly explained by a flat line.
        1.0
    };
    let residual_stddev = (sse / n).sqrt();
    let current_pct = last.2;
    let x_last = xs.last().copied().unwrap_or(0.0);
    let fitted_last = intercept + slope * x_last;

    let trend = if residual_stddev > VOLATILE_STDDEV {
        TrendDirection::Volatile
    } else if slope.abs() < STABLE_DAILY_CHANGE {
        TrendDirection::Stable
    } else if slope > 0.0 {
        TrendDirection::Increasing
    } else {
        TrendDirection::Decreasing
    };
    let rising = slope >= STABLE_DAILY_CHANGE;
    // Project from the fitted value at the latest sample, not the raw reading, so a single noisy
    // reading does not move the estimate; a series already at 100% is full now.
    let days_to_full = if !rising {
        -1.0
    } else if current_pct >= 100.0 || fitted_last >= 100.0 {
        0.0
    } else {
        ((100.0 - fitted_last) / slope).max(0.0)
    };
    let forecast = CapacityForecast {
        metric: metric.to_owned(),
        current_pct: round4(current_pct),
        daily_change: round4(slope),
        days_to_full: if days_to_full < 0.0 {
            -1.0
        } else {
            round4(days_to_full)
        },
        trend,
        confidence: round4(confidence),
        sample_count: points.len(),
        span_hours: round4(span_seconds / 3_600.0),
    };
    if !rising && current_pct >= HIGH_USAGE_PCT {
        ForecastOutcome::NoFillTrend(forecast)
    } else {
        ForecastOutcome::Forecast(forecast)
    }
}

fn elapsed_seconds(from: &(i64, u32, f64), to: &(i64, u32, f64)) -> f64 {
    // i128 so extreme timestamps cannot overflow.
    let secs = i128::from(to.0) - i128::from(from.0);
    let nanos = i128::from(to.1) - i128::from(from.1);
    secs as f64 + nanos as f64 / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 1, 0, 0, 0)
            .single()
            .unwrap_or_default()
    }

    /// `count` samples every `step_hours`, on the line `start + slope_per_day * days`, plus
    /// a deterministic zig-zag of `noise` points.
    fn series(
        start: f64,
        slope_per_day: f64,
        count: usize,
        step_hours: i64,
        noise: f64,
    ) -> Vec<MetricSample> {
        (0..count)
            .map(|i| {
                let hours = step_hours * i as i64;
                let days = hours as f64 / 24.0;
                let wiggle = match i % 4 {
                    0 => noise,
                    1 => -noise,
                    2 => -noise,
                    _ => noise,
                };
                MetricSample::new(
                    t0() + chrono::Duration::hours(hours),
                    start + slope_per_day * days + wiggle,
                )
            })
            .collect()
    }

    fn forecast_of(outcome: &ForecastOutcome) -> &CapacityForecast {
        match outcome {
            ForecastOutcome::Forecast(f) => f,
            other => panic!("expected a forecast, got {other:?}"),
        }
    }

    fn assert_within_1pct(actual: f64, expected: f64) {
        let rel = ((actual - expected) / expected).abs();
        assert!(
            rel <= 0.01,
            "days_to_full {actual} not within 1% of {expected}"
        );
    }

    #[test]
    fn known_slopes_noise_free_give_days_to_full_within_one_percent() {
        for (start, slope) in [(40.0, 2.0), (10.0, 5.0), (60.0, 1.5), (20.0, 10.0)] {
            let samples = series(start, slope, 48, 1, 0.0);
            let last_days = 47.0 / 24.0;
            let expected = (100.0 - (start + slope * last_days)) / slope;
            let outcome = forecast_capacity("disk", &samples);
            let f = forecast_of(&outcome);
            assert_within_1pct(f.days_to_full, expected);
            assert!(
                (f.daily_change - slope).abs() < 1e-3,
                "slope {}",
                f.daily_change
            );
            assert_eq!(f.trend, TrendDirection::Increasing);
            assert!(f.confidence > 0.999);
        }
    }

    #[test]
    fn known_slopes_with_small_deterministic_noise_stay_within_one_percent() {
        // Seven days of hourly samples with +-0.3 point noise.
        for (start, slope) in [(30.0, 2.0), (10.0, 5.0), (20.0, 1.5)] {
            let samples = series(start, slope, 24 * 7, 1, 0.3);
            let last_days = (24.0 * 7.0 - 1.0) / 24.0;
            let expected = (100.0 - (start + slope * last_days)) / slope;
            let outcome = forecast_capacity("disk", &samples);
            let f = forecast_of(&outcome);
            assert_within_1pct(f.days_to_full, expected);
        }
    }

    #[test]
    fn flat_high_series_is_no_fill_trend() {
        let samples = series(92.0, 0.0, 24, 1, 0.2);
        match forecast_capacity("disk", &samples) {
            ForecastOutcome::NoFillTrend(f) => {
                assert_eq!(f.days_to_full, -1.0);
                assert_eq!(f.trend, TrendDirection::Stable);
            }
            other => panic!("expected no fill trend, got {other:?}"),
        }
    }

    #[test]
    fn slowly_rising_high_series_below_stable_threshold_is_no_fill_trend() {
        let samples = series(85.0, 0.5, 48, 1, 0.0);
        assert!(matches!(
            forecast_capacity("disk", &samples),
            ForecastOutcome::NoFillTrend(_)
        ));
    }

    #[test]
    fn falling_series_gives_minus_one() {
        let samples = series(70.0, -3.0, 48, 1, 0.0);
        let outcome = forecast_capacity("disk", &samples);
        let f = forecast_of(&outcome);
        assert_eq!(f.days_to_full, -1.0);
        assert_eq!(f.trend, TrendDirection::Decreasing);
    }

    #[test]
    fn flat_low_series_is_a_stable_forecast_with_minus_one() {
        let samples = series(40.0, 0.0, 24, 1, 0.0);
        let outcome = forecast_capacity("disk", &samples);
        let f = forecast_of(&outcome);
        assert_eq!(f.days_to_full, -1.0);
        assert_eq!(f.trend, TrendDirection::Stable);
    }

    #[test]
    fn empty_and_single_sample_are_no_history() {
        for samples in [vec![], vec![MetricSample::new(t0(), 50.0)]] {
            match forecast_capacity("disk", &samples) {
                ForecastOutcome::NoHistory(h) => {
                    assert_eq!(h.reason, NoHistoryReason::TooFewSamples);
                }
                other => panic!("expected no history, got {other:?}"),
            }
        }
    }

    #[test]
    fn short_span_is_no_history() {
        // 10 samples a minute apart: enough samples, not enough time.
        let samples: Vec<_> = (0..10)
            .map(|i| MetricSample::new(t0() + chrono::Duration::minutes(i), 50.0 + i as f64))
            .collect();
        match forecast_capacity("disk", &samples) {
            ForecastOutcome::NoHistory(h) => assert_eq!(h.reason, NoHistoryReason::SpanTooShort),
            other => panic!("expected no history, got {other:?}"),
        }
    }

    #[test]
    fn unsorted_input_gives_the_same_forecast_as_sorted() {
        let sorted = series(30.0, 4.0, 30, 2, 0.1);
        let mut shuffled = sorted.clone();
        shuffled.reverse();
        shuffled.swap(3, 17);
        assert_eq!(
            forecast_capacity("disk", &sorted),
            forecast_capacity("disk", &shuffled)
        );
    }

    #[test]
    fn duplicate_timestamps_are_averaged_not_double_counted() {
        let mut samples = series(30.0, 4.0, 30, 2, 0.0);
        let base = forecast_capacity("disk", &samples);
        // The same instants again, symmetric around the line: the average is unchanged.
        for s in samples.clone() {
            samples.push(MetricSample::new(s.at, s.pct + 1.0));
            samples.push(MetricSample::new(s.at, s.pct - 1.0));
        }
        let with_dupes = forecast_capacity("disk", &samples);
        assert_eq!(
            forecast_of(&base).days_to_full,
            forecast_of(&with_dupes).days_to_full
        );
        assert_eq!(forecast_of(&with_dupes).sample_count, 30);
        // Three readings at one instant are still one sample.
        let same_instant = vec![MetricSample::new(t0(), 10.0); 3];
        assert!(matches!(
            forecast_capacity("disk", &same_instant),
            ForecastOutcome::NoHistory(NoHistory {
                sample_count: 1,
                ..
            })
        ));
    }

    #[test]
    fn non_finite_and_out_of_range_samples_are_skipped() {
        let mut samples = series(30.0, 4.0, 30, 2, 0.0);
        let clean = forecast_capacity("disk", &samples);
        samples.push(MetricSample::new(t0(), f64::NAN));
        samples.push(MetricSample::new(t0(), f64::INFINITY));
        samples.push(MetricSample::new(t0(), f64::NEG_INFINITY));
        samples.push(MetricSample::new(t0(), -4.0));
        samples.push(MetricSample::new(t0(), 140.0));
        assert_eq!(forecast_capacity("disk", &samples), clean);
        let only_bad = vec![MetricSample::new(t0(), f64::NAN); 5];
        match forecast_capacity("disk", &only_bad) {
            ForecastOutcome::NoHistory(h) => assert_eq!(h.skipped_samples, 5),
            other => panic!("expected no history, got {other:?}"),
        }
    }

    #[test]
    fn already_full_is_zero_days() {
        let samples = series(94.0, 3.0, 49, 1, 0.0);
        let outcome = forecast_capacity("disk", &samples);
        assert_eq!(forecast_of(&outcome).days_to_full, 0.0);
    }

    #[test]
    fn snapshot_forecast() {
        let samples = series(40.0, 2.0, 25, 1, 0.0);
        insta::assert_json_snapshot!(forecast_capacity("disk:/var", &samples), @r#"
            {
              "outcome": "forecast",
              "metric": "disk:/var",
              "current_pct": 42.0,
              "daily_change": 2.0,
              "days_to_full": 29.0,
              "trend": "increasing",
              "confidence": 1.0,
              "sample_count": 25,
              "span_hours": 24.0
            }
        "#);
    }

    #[test]
    fn snapshot_no_fill_trend() {
        let samples = series(91.0, 0.0, 25, 1, 0.0);
        insta::assert_json_snapshot!(forecast_capacity("disk:/var", &samples), @r#"
            {
              "outcome": "no_fill_trend",
              "metric": "disk:/var",
              "current_pct": 91.0,
              "daily_change": 0.0,
              "days_to_full": -1.0,
              "trend": "stable",
              "confidence": 1.0,
              "sample_count": 25,
              "span_hours": 24.0
            }
        "#);
    }

    #[test]
    fn snapshot_no_history() {
        let samples = vec![
            MetricSample::new(t0(), 50.0),
            MetricSample::new(t0(), f64::NAN),
        ];
        insta::assert_json_snapshot!(forecast_capacity("disk:/var", &samples), @r#"
            {
              "outcome": "no_history",
              "metric": "disk:/var",
              "reason": "too_few_samples",
              "sample_count": 1,
              "skipped_samples": 1,
              "span_hours": 0.0,
              "min_samples": 3,
              "min_span_hours": 1.0
            }
        "#);
    }

    proptest! {
        #[test]
        fn arbitrary_finite_inputs_never_panic(
            raw in proptest::collection::vec(
                (-8_000_000_000i64..8_000_000_000i64, 0u32..1_000_000_000u32, -1e6f64..1e6f64),
                0..64,
            )
        ) {
            let samples: Vec<MetricSample> = raw
                .into_iter()
                .filter_map(|(secs, nanos, pct)| {
                    DateTime::<Utc>::from_timestamp(secs, nanos).map(|at| MetricSample::new(at, pct))
                })
                .collect();
            let outcome = forecast_capacity("disk", &samples);
            if let Some(f) = outcome.capacity_forecast() {
                prop_assert!(f.days_to_full == -1.0 || f.days_to_full >= 0.0, "{:?}", f);
                prop_assert!(f.days_to_full.is_finite());
                prop_assert!(f.daily_change.is_finite());
                prop_assert!((0.0..=1.0).contains(&f.confidence));
            }
        }

        #[test]
        fn arbitrary_floats_including_non_finite_never_panic(
            raw in proptest::collection::vec((0i64..10_000_000i64, proptest::num::f64::ANY), 0..32)
        ) {
            let samples: Vec<MetricSample> = raw
                .into_iter()
                .filter_map(|(secs, pct)| {
                    DateTime::<Utc>::from_timestamp(secs, 0).map(|at| MetricSample::new(at, pct))
                })
                .collect();
            let outcome = forecast_capacity("disk", &samples);
            if let Some(f) = outcome.capacity_forecast() {
                prop_assert!(f.days_to_full == -1.0 || f.days_to_full >= 0.0);
            }
        }
    }
}
