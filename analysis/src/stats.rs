//! Summary statistics used by reports.

/// MAD to standard deviation, for normally distributed noise.
pub const MAD_TO_SD: f64 = 1.4826;

/// Median of `v` (mean of the two middle values for an even count); 0 for an empty slice.
/// Sorts `v` in place.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The standard normal's quantile: x with P(Z <= x) = p, for 0 < p < 1 (NaN outside). Acklam's
/// rational approximation (relative error under 1.2e-9), a central region and two tails.
pub fn probit(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    const LOW: f64 = 0.024_25;
    if !(p > 0.0 && p < 1.0) {
        return f64::NAN;
    }
    let tail = |q: f64| {
        let q = (-2.0 * q.ln()).sqrt();
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < LOW {
        tail(p)
    } else if p > 1.0 - LOW {
        -tail(1.0 - p)
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// The standard deviation of a zero-mean normal, from the absolute values `v` of draws from it,
/// read at their lower median: the k-th smallest, k = ceil(n/2), divided by the half-normal's
/// quantile at that order statistic's expected rank (Blom's (k - 3/8) / (n + 1/4)). For odd n
/// this is the median over 0.6745, the usual robust estimate; for even n it does not average in
/// the value above the middle, so up to n/2 values inflated by a one-sided tail (a stall that
/// slowed one pass) leave it where the rest put it, where the plain median of six breaks at
/// three. 0 for an empty slice; sorts `v` in place.
pub fn sd_from_abs_lower_median(v: &mut [f64]) -> f64 {
    let n = v.len();
    if n == 0 {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let k = n.div_ceil(2);
    let rank = (k as f64 - 0.375) / (n as f64 + 0.25);
    v[k - 1] / probit((1.0 + rank) / 2.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_odd_even_empty() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&mut []), 0.0);
    }

    #[test]
    fn probit_matches_the_normal_tables() {
        // Standard normal quantiles (any table): 0.5, 0.75, 0.841345 (1 sd), 0.975, 0.99,
        // 0.999 and the lower tail.
        for (p, x) in [
            (0.5, 0.0),
            (0.75, 0.674_489_750),
            (0.841_344_746, 1.0),
            (0.975, 1.959_963_985),
            (0.99, 2.326_347_874),
            (0.999, 3.090_232_306),
            (0.01, -2.326_347_874),
            (0.025, -1.959_963_985),
        ] {
            assert!((probit(p) - x).abs() < 1e-6, "probit({p}) = {} not {x}", probit(p));
        }
        assert!(probit(0.0).is_nan() && probit(1.0).is_nan() && probit(f64::NAN).is_nan());
    }

    #[test]
    fn the_lower_median_reads_a_normals_spread_through_a_one_sided_tail() {
        // Odd n: the median over the half-normal's median, 0.6745 (the MAD constant 1.4826).
        let sd = sd_from_abs_lower_median(&mut [0.5, 3.0, 1.0, 2.0, 100.0]);
        assert!((sd - 2.0 / 0.674_489_750).abs() < 1e-6, "{sd}");
        // Six values, three of them a tail's: the third smallest at its expected rank
        // (3 - 0.375) / 6.25 = 0.42, the half-normal's quantile there probit(0.71) = 0.5534.
        let sd = sd_from_abs_lower_median(&mut [0.01, 0.012, 0.011, 0.9, 1.2, 0.6]);
        assert!((sd - 0.012 / probit(0.71)).abs() < 1e-9, "{sd}");
        assert!((probit(0.71) - 0.553_385).abs() < 1e-5);
        // The plain median of the same six is the tail's: (0.012 + 0.6) / 2.
        assert!((median(&mut [0.01, 0.012, 0.011, 0.9, 1.2, 0.6]) - 0.306).abs() < 1e-12);
        assert_eq!(sd_from_abs_lower_median(&mut []), 0.0);
        // Many draws of |N(0, 0.1)|: the estimate is near 0.1 (a seeded Box-Muller).
        let mut state = 7u64;
        let mut uniform = || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        };
        let mut v: Vec<f64> = (0..20_000)
            .map(|_| (0.1 * (-2.0 * uniform().ln()).sqrt() * (std::f64::consts::TAU * uniform()).cos()).abs())
            .collect();
        let sd = sd_from_abs_lower_median(&mut v);
        assert!((sd - 0.1).abs() < 0.003, "{sd}");
    }
}
