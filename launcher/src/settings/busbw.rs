//! A collective's average bus bandwidth bar: `--expect-busbw`, `MESHRUN_EXPECT_BUSBW`, or
//! nccl-tests' `NCCL_TESTS_MIN_BW`, with where it came from.

use analysis::coll::BusbwBar;

/// The average bus bandwidth bar, by precedence: `--expect-busbw`, `MESHRUN_EXPECT_BUSBW` (both
/// parsed by clap into `flag`, `from_env` saying which), then nccl-tests' `NCCL_TESTS_MIN_BW`
/// (an empty value is unset).
pub fn busbw_bar(
    flag: Option<f64>,
    from_env: bool,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<BusbwBar>, String> {
    if let Some(gbps) = flag {
        let source = if from_env {
            "MESHRUN_EXPECT_BUSBW"
        } else {
            "--expect-busbw"
        };
        return Ok(Some(BusbwBar {
            gbps,
            source: source.into(),
        }));
    }
    match env(NCCL_TESTS_MIN_BW).filter(|v| !v.trim().is_empty()) {
        Some(v) => {
            let gbps = analysis::units::parse_bar(&v).map_err(|e| format!("{NCCL_TESTS_MIN_BW}={v}: {e}"))?;
            Ok(Some(BusbwBar {
                gbps,
                source: NCCL_TESTS_MIN_BW.into(),
            }))
        }
        None => Ok(None),
    }
}

/// [`busbw_bar`] of `--expect-busbw` as clap parsed it (`m`, the subcommand's matches: whether
/// the value came from `MESHRUN_EXPECT_BUSBW`).
pub fn from_matches(
    flag: Option<f64>,
    m: &clap::ArgMatches,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<BusbwBar>, String> {
    let from_env = m.value_source("expect_busbw") == Some(clap::parser::ValueSource::EnvVariable);
    busbw_bar(flag, from_env, env)
}

/// nccl-tests' variable for the average bus bandwidth a run must reach.
pub const NCCL_TESTS_MIN_BW: &str = "NCCL_TESTS_MIN_BW";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busbw_bar_precedence_and_bad_values() {
        let none = |_: &str| None;
        let nccl = |v: &'static str| move |k: &str| (k == NCCL_TESTS_MIN_BW).then(|| v.to_string());
        assert_eq!(busbw_bar(None, false, &none), Ok(None));
        // The flag (or MESHRUN_EXPECT_BUSBW, which clap reads into it) wins over NCCL's variable.
        let b = busbw_bar(Some(40.0), false, &nccl("10")).unwrap().unwrap();
        assert_eq!((b.gbps, b.source.as_str()), (40.0, "--expect-busbw"));
        let b = busbw_bar(Some(40.0), true, &nccl("10")).unwrap().unwrap();
        assert_eq!(b.source, "MESHRUN_EXPECT_BUSBW");
        let b = busbw_bar(None, false, &nccl(" 10.5 ")).unwrap().unwrap();
        assert_eq!((b.gbps, b.source.as_str()), (10.5, NCCL_TESTS_MIN_BW));
        assert_eq!(busbw_bar(None, false, &nccl("")), Ok(None));
        let e = busbw_bar(None, false, &nccl("fast")).unwrap_err();
        assert!(
            e.starts_with("NCCL_TESTS_MIN_BW=fast: `fast` is not a number of GB/s"),
            "{e}"
        );
        assert!(busbw_bar(None, false, &nccl("-1")).is_err());
        assert!(busbw_bar(None, false, &nccl("inf")).is_err());
        // 90% of the bar, as nccl-tests: 10 GB/s passes an average of 9, not 8.99.
        let b = busbw_bar(None, false, &nccl("10")).unwrap().unwrap();
        assert!(b.passes(9.0) && !b.passes(8.99) && !b.passes(f64::NAN));
    }
}
