//! Small populations between hosts: a rail, or all pairs of a few hosts (12 to 28 cells, where
//! the fastest quarter the healthy bulk is seeded from holds fewer than
//! [`MIN_CELLS`](crate::pairwise::defaults::MIN_CELLS) cells). There the bulk cannot measure its
//! own spread until it has grown, and the spread it assumed instead (+-42%) took a slow part in:
//! 4 hosts with one node (or one rail's NIC) at 85% make 6 slow cells of 12, the assumed spread
//! let all 12 into the bulk, and the run passed with the node's cells counted as noise.
//!
//! What a fault looks like says where to measure the noise instead: one slow node, NIC or link
//! slows the cells that touch it and no other. So for each candidate part (each host, and each
//! rank where hosts have several) the cells split into those touching it and the rest; the part
//! whose cells sit furthest below the rest's is the likeliest fault, and each side of that split
//! is one level plus noise (when exactly one part is slow; and where none is, any split is). The
//! noise is the larger of the two sides' robust spreads about their own medians: a slow part's
//! drop does not widen it, as it widens the spread of all cells about one median. A slow host
//! link (a sixth of 4 hosts' cells) or an uplink between two leaves of two hosts (two thirds)
//! leaves most of each side at one level, so the median deviation still reads the noise.
//!
//! The bulk is then grown from the fastest quarter as always, with this noise as its spread
//! while it has too few cells to measure its own, and as the least spread after; suspects are
//! retested alone against references alone, as everywhere.

use crate::pairwise::bulk::seed_size;
use crate::pairwise::defaults::MIN_CELLS;
use crate::pairwise::Measurement;
use crate::stats::{median, MAD_TO_SD};

/// The fewest cells measured apart from a slow part: 4 hosts of one rank each, 12 directions
/// (or one rail of 4 hosts). Fewer (3 hosts: 6 cells, 2 apart from any host) cannot show the
/// noise apart from a part, and keep the assumed spread.
pub(super) const SMALL_CELLS: usize = 12;

/// The population's noise (log units) measured apart from its likeliest slow part, for a small
/// population between hosts (`cells`, at the matrix size, with the host of each rank in
/// `hosts`); None where the population is not small (the bulk measures its own spread) or too
/// small to split ([`SMALL_CELLS`], fewer than 3 hosts).
pub(super) fn noise_apart(cells: &[&Measurement], hosts: &[String]) -> Option<f64> {
    let n = cells.len();
    if n < SMALL_CELLS || seed_size(n) >= MIN_CELLS {
        return None;
    }
    let logs: Vec<f64> = cells.iter().map(|m| m.score().max(f64::MIN_POSITIVE).ln()).collect();
    candidates(cells, hosts)
        .into_iter()
        .filter_map(|touches| {
            let t: Vec<bool> = cells.iter().map(|m| touches(m)).collect();
            split(&logs, &t)
        })
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, noise)| noise)
}

/// A cell's membership test of one candidate part.
type Touches<'a> = Box<dyn Fn(&Measurement) -> bool + 'a>;

/// The candidate parts of `cells`: each host, and each rank where a host has several ranks among
/// them (with one rank a host, a rank is its host).
fn candidates<'a>(cells: &[&Measurement], hosts: &'a [String]) -> Vec<Touches<'a>> {
    let host = |r: usize| hosts.get(r).map_or("", String::as_str);
    let mut names: Vec<&str> = cells.iter().flat_map(|m| [host(m.src), host(m.dst)]).collect();
    names.sort_unstable();
    names.dedup();
    if names.len() < 3 {
        return Vec::new();
    }
    let mut ranks: Vec<usize> = cells.iter().flat_map(|m| [m.src, m.dst]).collect();
    ranks.sort_unstable();
    ranks.dedup();
    let mut parts: Vec<Touches<'a>> = names
        .into_iter()
        .map(|h| Box::new(move |m: &Measurement| host(m.src) == h || host(m.dst) == h) as Touches<'a>)
        .collect();
    if ranks.len() > parts.len() {
        parts.extend(
            ranks
                .into_iter()
                .map(|r| Box::new(move |m: &Measurement| m.src == r || m.dst == r) as Touches<'a>),
        );
    }
    parts
}

/// The fewest cells on either side of a split: fewer cannot show a spread.
const SIDE_CELLS: usize = 4;

/// One split of `logs` into the cells touching a part (`touching`) and the rest: how far the
/// touching side's median is below the rest's, and the noise the split shows (log units): the
/// larger of the two sides' robust spreads about their own medians, so that a slow part whose
/// cells agree more closely than the healthy ones (a shaper holds them at its rate) does not
/// narrow it. None where either side has fewer than [`SIDE_CELLS`] cells.
fn split(logs: &[f64], touching: &[bool]) -> Option<(f64, f64)> {
    let side = |t: bool| -> Vec<f64> {
        logs.iter()
            .zip(touching)
            .filter(|(_, &x)| x == t)
            .map(|(l, _)| *l)
            .collect()
    };
    let (mut inside, mut rest) = (side(true), side(false));
    if inside.len() < SIDE_CELLS || rest.len() < SIDE_CELLS {
        return None;
    }
    let (mi, mr) = (median(&mut inside), median(&mut rest));
    Some((mr - mi, mad(&inside, mi).max(mad(&rest, mr))))
}

/// The robust standard deviation of `v` about `centre`: the plain median of the absolute
/// deviations, not the larger of it and the median of those above (as the healthy bulk's own
/// spread), since a split by the wrong part (an uplink's two thirds, split by a host) leaves the
/// slow level's cells on both sides with the fast third above each side's median.
fn mad(v: &[f64], centre: f64) -> f64 {
    let mut d: Vec<f64> = v.iter().map(|x| (x - centre).abs()).collect();
    MAD_TO_SD * median(&mut d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(src: usize, dst: usize, gbps: f64) -> Measurement {
        Measurement::bandwidth(src, dst, 1 << 20, 20, gbps, false)
    }

    /// All directions of `h` hosts of one rank, at `rate(src, dst)`.
    fn fabric(h: usize, rate: impl Fn(usize, usize) -> f64) -> (Vec<String>, Vec<Measurement>) {
        let hosts = (0..h).map(|i| format!("h{i}")).collect();
        let mut v = Vec::new();
        for a in 0..h {
            for b in 0..h {
                if a != b {
                    v.push(cell(a, b, rate(a, b)));
                }
            }
        }
        (hosts, v)
    }

    fn noise(hosts: &[String], ms: &[Measurement]) -> Option<f64> {
        let refs: Vec<&Measurement> = ms.iter().collect();
        noise_apart(&refs, hosts)
    }

    /// +-0.5% of deterministic jitter.
    fn jitter(a: usize, b: usize) -> f64 {
        1.0 + 0.005 * (((a * 7 + b * 13) % 11) as f64 / 5.0 - 1.0)
    }

    #[test]
    fn a_node_at_85_percent_does_not_widen_the_noise() {
        let (hosts, ms) = fabric(4, |a, b| if a == 3 || b == 3 { 0.32 } else { 0.38 } * jitter(a, b));
        let sd = noise(&hosts, &ms).expect("12 cells are small");
        assert!(sd < 0.01, "{sd}");
    }

    #[test]
    fn an_uplink_across_two_thirds_of_the_cells_does_not_widen_it() {
        let (hosts, ms) = fabric(4, |a, b| if (a < 2) != (b < 2) { 70.0 } else { 100.0 } * jitter(a, b));
        let sd = noise(&hosts, &ms).expect("small");
        assert!(sd < 0.01, "{sd}");
    }

    #[test]
    fn noise_reads_as_noise() {
        // +-10% of jitter, no fault.
        let (hosts, ms) = fabric(4, |a, b| {
            100.0 * (1.0 + 0.1 * (((a * 5 + b * 3) % 7) as f64 / 3.0 - 1.0))
        });
        let sd = noise(&hosts, &ms).expect("small");
        assert!(sd > 0.03, "{sd}");
    }

    #[test]
    fn only_small_populations_of_three_hosts_or_more_are_split() {
        let (hosts, ms) = fabric(3, |_, _| 1.0);
        assert_eq!(noise(&hosts, &ms), None, "6 cells");
        let (hosts, ms) = fabric(6, |_, _| 1.0);
        assert_eq!(noise(&hosts, &ms), None, "30 cells seed 8: the bulk measures its own");
        let (hosts, ms) = fabric(5, |_, _| 1.0);
        assert!(noise(&hosts, &ms).is_some(), "20 cells");
        // Two hosts of 4 ranks: 32 cells, not small; two hosts of 2: 8, too few.
        let hosts: Vec<String> = (0..4).map(|r| format!("h{}", r / 2)).collect();
        let ms: Vec<Measurement> = (0..4)
            .flat_map(|a| (0..4).map(move |b| (a, b)))
            .filter(|&(a, b)| a / 2 != b / 2)
            .map(|(a, b)| cell(a, b, 1.0))
            .collect();
        assert_eq!(noise(&hosts, &ms), None);
    }
}
