//! A slow GPU link on the stand-in, for tests only: `MESHRUN_GPU_STANDIN_SLOW_COPY=A-B:F` makes
//! every copy between the processes of ranks A and B (either way, through a buffer one of them
//! exported and the other opened) take F times as long, as a slow NVLink or a GPU behind the
//! wrong PCIe switch would. The rank is the launcher's (`OMPI_COMM_WORLD_RANK`, `PMI_RANK`, ...);
//! an exporting stand-in writes its own into the handle, so the opener knows whose buffer it
//! maps. Unset, malformed, or outside an MPI job, nothing is slowed.

/// The variable.
pub const SLOW_COPY_ENV: &str = "MESHRUN_GPU_STANDIN_SLOW_COPY";

/// `A-B:F` read: the pair and the factor (above 1).
fn parse(v: &str) -> Option<((usize, usize), f64)> {
    let (pair, f) = v.trim().split_once(':')?;
    let (a, b) = pair.split_once('-')?;
    let f: f64 = f.trim().parse().ok()?;
    let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
    (f.is_finite() && f > 1.0).then_some(((a.min(b), a.max(b)), f))
}

/// This process's rank in its MPI job, as its launcher set it.
pub(super) fn this_rank() -> Option<usize> {
    ranks::world::rank_from_env()
}

/// How many times as long a copy between this process and the exporter of rank `exporter`
/// takes (1 unless the variable names the pair).
pub(super) fn factor(exporter: Option<usize>) -> f64 {
    let (Some(x), Some(me)) = (exporter, this_rank()) else {
        return 1.0;
    };
    match std::env::var(SLOW_COPY_ENV).ok().as_deref().and_then(parse) {
        Some((pair, f)) if pair == (x.min(me), x.max(me)) => f,
        _ => 1.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_names_an_unordered_pair_and_a_factor_above_one() {
        assert_eq!(parse("1-2:5"), Some(((1, 2), 5.0)));
        assert_eq!(parse(" 3-0:2.5 "), Some(((0, 3), 2.5)));
        for bad in ["1-2", "1-2:0.5", "1:5", "a-2:5", "1-2:inf", ""] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
