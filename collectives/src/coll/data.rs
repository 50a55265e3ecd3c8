//! Test data crafted so any reduction order gives bit-identical results: small integers, exact in
//! every type (bfloat16 holds integers up to 256 exactly), and for `prod` only 1, 2 and -1, whose
//! products are exact powers of two (or overflow to the same infinity in any order). Integer
//! arithmetic wraps, which is order-independent too.

use crate::dtype::{DataType, RedOp};
use crate::reduce::{self, LayoutError};

/// Element `i` of rank `rank`'s input to a reduction.
pub fn reduction_value(dt: DataType, op: RedOp, rank: usize, i: usize) -> i64 {
    let (r, i) = (rank as i64, i as i64);
    let signed = dt.is_signed();
    match op {
        // Sums of n values in [-1, 2] stay within +-2n: exact in bfloat16 up to 128 ranks.
        RedOp::Sum | RedOp::Avg => (r * 7 + i * 13) % 4 - i64::from(signed),
        RedOp::Prod => {
            if signed && (r * 3 + i) % 11 == 0 {
                -1
            } else if (r + i) % 7 == 0 {
                2
            } else {
                1
            }
        }
        RedOp::Min | RedOp::Max => (r * 31 + i * 17) % 100 - if signed { 50 } else { 0 },
    }
}

/// Element `i` that rank `rank` contributes to a data-movement collective (0..96: fits int8).
pub fn plain_value(rank: usize, i: usize) -> i64 {
    ((rank * 131 + i * 7) % 97) as i64
}

/// The reduction of every rank's input, element by element, finalised (`avg` divided by n).
pub fn reduced(dt: DataType, op: RedOp, nranks: usize, offset: usize, out: &mut [u8]) -> Result<(), LayoutError> {
    reduce::fill(dt, out, |i| reduction_value(dt, op, 0, offset + i))?;
    let mut tmp = vec![0u8; out.len()];
    for r in 1..nranks {
        reduce::fill(dt, &mut tmp, |i| reduction_value(dt, op, r, offset + i))?;
        reduce::reduce_into(dt, op, out, &tmp)?;
    }
    reduce::finalize(dt, op, out, nranks)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The crafted values give the same bits whatever order the ranks are reduced in.
    #[test]
    fn any_order_same_bits() {
        for dt in DataType::ALL {
            for op in RedOp::ALL {
                let n = 37;
                let len = 64;
                let mut fwd = vec![0u8; len * dt.size()];
                reduced(dt, op, n, 5, &mut fwd).unwrap();
                // Reverse order, and pairwise tree order.
                let mut rev = vec![0u8; len * dt.size()];
                reduce::fill(dt, &mut rev, |i| reduction_value(dt, op, n - 1, 5 + i)).unwrap();
                let mut tmp = rev.clone();
                for r in (0..n - 1).rev() {
                    reduce::fill(dt, &mut tmp, |i| reduction_value(dt, op, r, 5 + i)).unwrap();
                    reduce::reduce_into(dt, op, &mut rev, &tmp).unwrap();
                }
                reduce::finalize(dt, op, &mut rev, n).unwrap();
                assert_eq!(fwd, rev, "{} {}", dt.name(), op.name());
            }
        }
    }
}
