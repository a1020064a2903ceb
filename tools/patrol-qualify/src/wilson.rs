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

/// The smallest number of runs whose perfect record (n of n) has a 95% lower bound of at least
/// `floor`; `u32::MAX` when no finite sample reaches it (a floor of 1 or more).
pub fn minimum_perfect_sample(floor: f64) -> u32 {
    if floor.is_nan() || floor >= 1.0 {
        return u32::MAX;
    }
    // n/n has lower bound n / (n + z^2), which grows with n: the first n that reaches the
    // floor is the answer. The closed form only seeds the search; the loop decides exactly.
    let z2 = Z95 * Z95;
    let estimate = (floor * z2 / (1.0 - floor)).floor().max(1.0);
    let mut n = if estimate < f64::from(u32::MAX) {
        // Truncation is intended: the estimate is a non-negative whole number in range.
        (estimate as u32).saturating_sub(2).max(1)
    } else {
        return u32::MAX;
    };
    while lower_bound(n, n) < floor {
        if n == u32::MAX {
            return u32::MAX;
        }
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(actual: f64, expected: f64) -> bool {
        (actual - expected).abs() < 5e-5
    }

    #[test]
    fn twenty_two_of_twenty_two_clears_the_launch_floor() {
        let (lower, upper) = interval(22, 22, Z95);
        assert!(close(lower, 0.8513), "{lower}");
        assert!(lower >= 0.85);
        assert!(close(upper, 1.0), "{upper}");
    }

    #[test]
    fn twenty_one_of_twenty_one_does_not() {
        let lower = lower_bound(21, 21);
        assert!(close(lower, 0.8454), "{lower}");
        assert!(lower < 0.85);
    }

    #[test]
    fn published_intervals() {
        let (lower, upper) = interval(0, 10, Z95);
        assert_eq!(lower, 0.0);
        assert!(close(upper, 0.2775), "{upper}");
        let (lower, upper) = interval(5, 10, Z95);
        assert!(close(lower, 0.2366), "{lower}");
        assert!(close(upper, 0.7634), "{upper}");
        let (lower, upper) = interval(3, 3, Z95);
        assert!(close(lower, 0.4385), "{lower}");
        assert!(close(upper, 1.0), "{upper}");
        assert_eq!(interval(0, 0, Z95), (0.0, 0.0));
    }

    #[test]
    fn smallest_perfect_sample_for_the_launch_floor_is_22() {
        assert_eq!(minimum_perfect_sample(0.85), 22);
        assert_eq!(minimum_perfect_sample(0.0), 1);
        assert_eq!(minimum_perfect_sample(1.0), u32::MAX);
        for floor in [0.5, 0.8, 0.9, 0.95] {
            let n = minimum_perfect_sample(floor);
            assert!(lower_bound(n, n) >= floor);
            assert!(n == 1 || lower_bound(n - 1, n - 1) < floor, "{floor}");
        }
    }
}
