//! 95% Wilson score intervals for pass rate and recall.

/// z for a two-sided 95% interval.
pub const Z95: f64 = 1.959_963_984_540_054;

/// The interval `(lower, upper)` for `successes` of `trials` at `z`; `(0, 0)` for no trials.
pub fn interval(successes: u32, trials: u32, z: f64) -> (f64, f64) {
    if trials == 0 {
        return (0.0, 0.0);
    }
    let n = f64::from(trials);
    let p = f64::from(successes) / n;
    let z2 = z * z;
    let centre = p + z2 / (2.0 * n);
    let margin = z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    let denominator = 1.0 + z2 / n;
    (
        ((centre - margin) / denominator).max(0.0),
        ((centre + margin) / denominator).min(1.0),
    )
}

/// The 95% lower bound.
pub fn lower_bound(successes: u32, trials: u32) -> f64 {
    interval(successes, trials, Z95).0
}
