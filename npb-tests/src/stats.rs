//! Order statistics over repeated runs. Benchmarks on a shared machine are noisy, so
//! results are medians with the observed range, never means.

/// Median, range and sample count of one measured point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    pub runs: usize,
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

/// Summarise the finite values of `samples`; `None` when there are none.
/// An even count takes the mean of the two middle values.
pub fn summarize(samples: &[f64]) -> Option<Summary> {
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    Some(Summary {
        runs: n,
        median,
        min: v[0],
        max: v[n - 1],
    })
}

/// Whether smaller or larger values of a metric are better.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Better {
    Lower,
    Higher,
}

/// `ours / theirs`, or `None` when the quotient means nothing (zero or non-finite).
pub fn ratio(ours: f64, theirs: f64) -> Option<f64> {
    let r = ours / theirs;
    (theirs != 0.0 && r.is_finite()).then_some(r)
}

/// The best of the peers' medians for a metric: the smallest when lower is better.
pub fn best(values: impl IntoIterator<Item = f64>, better: Better) -> Option<f64> {
    values
        .into_iter()
        .filter(|v| v.is_finite())
        .reduce(|a, b| match better {
            Better::Lower => a.min(b),
            Better::Higher => a.max(b),
        })
}

/// Whether `ours` is at least as good as `theirs`.
pub fn at_least_as_good(ours: f64, theirs: f64, better: Better) -> bool {
    match better {
        Better::Lower => ours <= theirs,
        Better::Higher => ours >= theirs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        let s = summarize(&[5.0, 1.0, 3.0]).unwrap();
        assert_eq!((s.runs, s.median, s.min, s.max), (3, 3.0, 1.0, 5.0));
        let s = summarize(&[4.0, 1.0, 3.0, 10.0]).unwrap();
        assert_eq!((s.runs, s.median, s.min, s.max), (4, 3.5, 1.0, 10.0));
    }

    #[test]
    fn non_finite_samples_are_ignored_and_empty_is_none() {
        let s = summarize(&[f64::NAN, 2.0, f64::INFINITY]).unwrap();
        assert_eq!((s.runs, s.median), (1, 2.0));
        assert_eq!(summarize(&[]), None);
        assert_eq!(summarize(&[f64::NAN]), None);
    }

    #[test]
    fn one_outlier_does_not_move_the_median() {
        let s = summarize(&[1.0, 1.1, 0.9, 1.0, 500.0]).unwrap();
        assert_eq!(s.median, 1.0);
        assert_eq!(s.max, 500.0);
    }

    #[test]
    fn ratios_and_best_peer_follow_the_direction() {
        assert_eq!(ratio(1.0, 2.0), Some(0.5));
        assert_eq!(ratio(1.0, 0.0), None);
        assert_eq!(best([3.0, 2.0, f64::NAN], Better::Lower), Some(2.0));
        assert_eq!(best([3.0, 2.0], Better::Higher), Some(3.0));
        assert_eq!(best([], Better::Higher), None);
        assert!(at_least_as_good(1.0, 1.0, Better::Lower));
        assert!(!at_least_as_good(1.1, 1.0, Better::Lower));
        assert!(at_least_as_good(12.0, 11.0, Better::Higher));
    }
}
