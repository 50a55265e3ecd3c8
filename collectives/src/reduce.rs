//! Element-wise reduction on the CPU for every type and operation, written as plain loops over
//! typed slices so the compiler vectorises them. Integers wrap (two's complement), as NCCL's do;
//! half and bfloat16 are computed in f32 and rounded back, once per operation.
//!
//! Large reductions are split by element ranges across this rank's share of the cores
//! ([`crate::threads`]: one thread below its measured threshold); every element is reduced on
//! its own, so the bytes are those of one thread. The `_on` forms take the thread count (the
//! bench's), the others the rule's.

use half::{bf16, f16};

use crate::dtype::{DataType, RedOp};
use crate::threads;

/// A buffer whose length or alignment does not fit its element type.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("buffer of {len} bytes at offset {align_off} is not a whole, aligned number of {dtype} elements")]
pub struct LayoutError {
    pub len: usize,
    pub align_off: usize,
    pub dtype: &'static str,
}

/// What one element type needs for the reductions and the test data.
pub trait Elem: bytemuck::Pod + PartialEq {
    fn op_sum(a: Self, b: Self) -> Self;
    fn op_prod(a: Self, b: Self) -> Self;
    fn op_min(a: Self, b: Self) -> Self;
    fn op_max(a: Self, b: Self) -> Self;

    /// Divide by the number of ranks (the last step of `avg`).
    fn div_n(self, n: usize) -> Self;
    /// A small integer as this type (exact for the values the tests use).
    fn from_small(v: i64) -> Self;
}

/// `Elem` for type `$t`: each operation as an expression of `a` and `b` (`x` and `n` for the
/// division, `v` for the conversion).
macro_rules! elem {
    ($t:ty, |$a:ident, $b:ident| sum: $sum:expr, prod: $prod:expr, min: $min:expr, max: $max:expr;
     |$x:ident, $n:ident| div: $div:expr; |$v:ident| from: $from:expr) => {
        impl Elem for $t {
            #[inline(always)]
            fn op_sum($a: $t, $b: $t) -> $t {
                $sum
            }
            #[inline(always)]
            fn op_prod($a: $t, $b: $t) -> $t {
                $prod
            }
            #[inline(always)]
            fn op_min($a: $t, $b: $t) -> $t {
                $min
            }
            #[inline(always)]
            fn op_max($a: $t, $b: $t) -> $t {
                $max
            }
            fn div_n(self, $n: usize) -> Self {
                let $x = self;
                $div
            }
            fn from_small($v: i64) -> Self {
                $from
            }
        }
    };
}

/// Integers wrap, as NCCL's do.
macro_rules! int_elem {
    ($($t:ty),*) => {$(
        elem!($t, |a, b| sum: a.wrapping_add(b), prod: a.wrapping_mul(b), min: a.min(b), max: a.max(b);
              |x, n| div: x / (n as $t); |v| from: v as $t);
    )*};
}
int_elem!(i8, u8, i32, u32, i64, u64);

macro_rules! float_elem {
    ($($t:ty),*) => {$(
        elem!($t, |a, b| sum: a + b, prod: a * b, min: a.min(b), max: a.max(b);
              |x, n| div: x / (n as $t); |v| from: v as $t);
    )*};
}
float_elem!(f32, f64);

/// Half and bfloat16: computed in f32, rounded back once per operation.
macro_rules! half_elem {
    ($($t:ty),*) => {$(
        elem!($t, |a, b| sum: <$t>::from_f32(a.to_f32() + b.to_f32()),
              prod: <$t>::from_f32(a.to_f32() * b.to_f32()),
              min: <$t>::from_f32(a.to_f32().min(b.to_f32())),
              max: <$t>::from_f32(a.to_f32().max(b.to_f32()));
              |x, n| div: <$t>::from_f32(x.to_f32() / n as f32); |v| from: <$t>::from_f32(v as f32));
    )*};
}
half_elem!(f16, bf16);

fn typed<T: Elem>(buf: &[u8], dt: DataType) -> Result<&[T], LayoutError> {
    bytemuck::try_cast_slice(buf).map_err(|_| LayoutError {
        len: buf.len(),
        align_off: buf.as_ptr() as usize % dt.size(),
        dtype: dt.name(),
    })
}

fn typed_mut<T: Elem>(buf: &mut [u8], dt: DataType) -> Result<&mut [T], LayoutError> {
    let (len, off) = (buf.len(), buf.as_ptr() as usize % dt.size());
    bytemuck::try_cast_slice_mut(buf).map_err(|_| LayoutError {
        len,
        align_off: off,
        dtype: dt.name(),
    })
}

/// Apply `f` element-wise. `F` is a concrete function type (one per type and op), so the loop is
/// monomorphised with `f` inlined and vectorised; a function pointer here would cost a call per
/// element.
#[inline(always)]
fn zip2<T: Copy, F: Fn(T, T) -> T>(acc: &mut [T], src: &[T], f: F) {
    for (a, b) in acc.iter_mut().zip(src) {
        *a = f(*a, *b);
    }
}

#[inline(always)]
fn zip3<T: Copy, F: Fn(T, T) -> T>(dst: &mut [T], a: &[T], b: &[T], f: F) {
    for ((d, x), y) in dst.iter_mut().zip(a).zip(b) {
        *d = f(*x, *y);
    }
}

/// Run `$zip` with the operation as a closure the compiler can inline.
macro_rules! by_op {
    ($T:ty, $op:expr, $zip:ident($($arg:expr),*)) => {
        match $op {
            RedOp::Sum | RedOp::Avg => $zip($($arg),*, |x: $T, y: $T| <$T as Elem>::op_sum(x, y)),
            RedOp::Prod => $zip($($arg),*, |x: $T, y: $T| <$T as Elem>::op_prod(x, y)),
            RedOp::Min => $zip($($arg),*, |x: $T, y: $T| <$T as Elem>::op_min(x, y)),
            RedOp::Max => $zip($($arg),*, |x: $T, y: $T| <$T as Elem>::op_max(x, y)),
        }
    };
}

fn reduce_t<T: Elem>(op: RedOp, acc: &mut [T], src: &[T]) {
    by_op!(T, op, zip2(acc, src))
}

/// Run `$body` with `$T` bound to the Rust type of `$dt` (`half::f16` and `half::bf16` for the
/// 16-bit floats). With `halves => $other`, half and bfloat16 run `$other` instead: for code that
/// has no 16-bit float form, as MPI's own collectives.
#[macro_export]
macro_rules! with_type {
    (@switch $dt:expr, $T:ident => $body:expr, $half:expr, $bf16:expr) => {
        $crate::with_type!(@arms $dt, $T => $body, $half, $bf16;
            Int8 i8, Uint8 u8, Int32 i32, Uint32 u32, Int64 i64, Uint64 u64, Float f32, Double f64)
    };
    (@arms $dt:expr, $T:ident => $body:expr, $half:expr, $bf16:expr; $($name:ident $rust:ty),*) => {
        match $dt {
            $($crate::dtype::DataType::$name => {
                type $T = $rust;
                $body
            })*
            $crate::dtype::DataType::Half => $half,
            $crate::dtype::DataType::Bfloat16 => $bf16,
        }
    };
    ($dt:expr, $T:ident => $body:expr, halves => $other:expr) => {
        $crate::with_type!(@switch $dt, $T => $body, $other, $other)
    };
    ($dt:expr, $T:ident => $body:expr) => {
        $crate::with_type!(
            @switch $dt,
            $T => $body,
            {
                type $T = half::f16;
                $body
            },
            {
                type $T = half::bf16;
                $body
            }
        )
    };
}

fn reduce3_t<T: Elem>(op: RedOp, dst: &mut [T], a: &[T], b: &[T]) {
    by_op!(T, op, zip3(dst, a, b))
}

/// `dst[i] = a[i] op b[i]`: a reduction that also moves the data, so out-of-place collectives
/// need no separate copy.
pub fn reduce_from(dt: DataType, op: RedOp, dst: &mut [u8], a: &[u8], b: &[u8]) -> Result<(), LayoutError> {
    let n = threads::for_bytes(dst.len());
    threads::run(n, || reduce_from_on(n, dt, op, dst, a, b))
}

/// [`reduce_from`] on `n` threads of the current rayon pool.
pub fn reduce_from_on(
    n: usize,
    dt: DataType,
    op: RedOp,
    dst: &mut [u8],
    a: &[u8],
    b: &[u8],
) -> Result<(), LayoutError> {
    with_type!(dt, T => {
        let (dst, a, b) = (typed_mut::<T>(dst, dt)?, typed::<T>(a, dt)?, typed::<T>(b, dt)?);
        threads::split3(n, dst, a, b, |d, x, y| reduce3_t::<T>(op, d, x, y));
    });
    Ok(())
}

/// `acc[i] = acc[i] op src[i]`.
pub fn reduce_into(dt: DataType, op: RedOp, acc: &mut [u8], src: &[u8]) -> Result<(), LayoutError> {
    let n = threads::for_bytes(acc.len());
    threads::run(n, || reduce_into_on(n, dt, op, acc, src))
}

/// [`reduce_into`] on `n` threads of the current rayon pool.
pub fn reduce_into_on(n: usize, dt: DataType, op: RedOp, acc: &mut [u8], src: &[u8]) -> Result<(), LayoutError> {
    with_type!(dt, T => {
        let (acc, src) = (typed_mut::<T>(acc, dt)?, typed::<T>(src, dt)?);
        threads::split2(n, acc, src, |a, s| reduce_t::<T>(op, a, s));
    });
    Ok(())
}

/// The last step of a reduction: `avg` divides by the number of ranks; other ops do nothing.
pub fn finalize(dt: DataType, op: RedOp, buf: &mut [u8], nranks: usize) -> Result<(), LayoutError> {
    if op != RedOp::Avg {
        return Ok(());
    }
    let n = threads::for_bytes(buf.len());
    threads::run(n, || finalize_on(n, dt, buf, nranks))
}

/// The division of `avg` on `n` threads of the current rayon pool.
fn finalize_on(n: usize, dt: DataType, buf: &mut [u8], nranks: usize) -> Result<(), LayoutError> {
    with_type!(dt, T => {
        threads::split1(n, typed_mut::<T>(buf, dt)?, |part| {
            for x in part {
                *x = x.div_n(nranks);
            }
        });
    });
    Ok(())
}

/// Fill `buf` with `value(i)` for element i, in type `dt`.
pub fn fill(dt: DataType, buf: &mut [u8], value: impl Fn(usize) -> i64) -> Result<(), LayoutError> {
    with_type!(dt, T => {
        for (i, x) in typed_mut::<T>(buf, dt)?.iter_mut().enumerate() {
            *x = T::from_small(value(i));
        }
    });
    Ok(())
}

/// Elements that differ bit for bit.
pub fn count_wrong(dt: DataType, got: &[u8], want: &[u8]) -> u64 {
    got.chunks(dt.size())
        .zip(want.chunks(dt.size()))
        .filter(|(a, b)| a != b)
        .count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_of<T: bytemuck::Pod>(v: &[T]) -> Vec<u8> {
        bytemuck::cast_slice(v).to_vec()
    }

    #[test]
    fn every_type_and_op_by_hand() {
        // acc = [3, -2, 5], src = [2, 4, -1]
        let cases = [
            (RedOp::Sum, [5, 2, 4]),
            (RedOp::Prod, [6, -8, -5]),
            (RedOp::Min, [2, -2, -1]),
            (RedOp::Max, [3, 4, 5]),
        ];
        for dt in DataType::ALL.into_iter().filter(|d| d.is_signed()) {
            for (op, want) in cases {
                let mut acc = vec![0u8; 3 * dt.size()];
                let mut src = acc.clone();
                let mut exp = acc.clone();
                fill(dt, &mut acc, |i| [3, -2, 5][i]).unwrap();
                fill(dt, &mut src, |i| [2, 4, -1][i]).unwrap();
                fill(dt, &mut exp, |i| want[i]).unwrap();
                reduce_into(dt, op, &mut acc, &src).unwrap();
                assert_eq!(count_wrong(dt, &acc, &exp), 0, "{} {}", dt.name(), op.name());
            }
        }
    }

    #[test]
    fn unsigned_wraps_and_avg_divides() {
        let mut a = bytes_of(&[250u8, 7]);
        reduce_into(DataType::Uint8, RedOp::Sum, &mut a, &bytes_of(&[10u8, 1])).unwrap();
        assert_eq!(a, vec![4, 8]);
        let mut f = bytes_of(&[6.0f32, 3.0]);
        finalize(DataType::Float, RedOp::Avg, &mut f, 4).unwrap();
        assert_eq!(bytemuck::cast_slice::<u8, f32>(&f), &[1.5, 0.75]);
        let mut i = bytes_of(&[-7i32, 9]);
        finalize(DataType::Int32, RedOp::Avg, &mut i, 2).unwrap();
        assert_eq!(bytemuck::cast_slice::<u8, i32>(&i), &[-3, 4]);
        let mut h = bytes_of(&[f16::from_f32(3.0)]);
        finalize(DataType::Half, RedOp::Avg, &mut h, 2).unwrap();
        assert_eq!(bytemuck::cast_slice::<u8, f16>(&h)[0].to_f32(), 1.5);
        // Sum is untouched by finalize.
        let mut s = bytes_of(&[6.0f32]);
        finalize(DataType::Float, RedOp::Sum, &mut s, 4).unwrap();
        assert_eq!(bytemuck::cast_slice::<u8, f32>(&s), &[6.0]);
    }

    #[test]
    fn bfloat16_rounds_once_per_operation() {
        // 256 + 1 is not representable in bfloat16 (8 bits of mantissa): it rounds to 256.
        let mut a = bytes_of(&[bf16::from_f32(256.0)]);
        reduce_into(
            DataType::Bfloat16,
            RedOp::Sum,
            &mut a,
            &bytes_of(&[bf16::from_f32(1.0)]),
        )
        .unwrap();
        assert_eq!(bytemuck::cast_slice::<u8, bf16>(&a)[0].to_f32(), 256.0);
    }

    #[test]
    fn three_operand_form_matches_in_place() {
        for dt in DataType::ALL {
            for op in RedOp::ALL {
                let mut a = vec![0u8; 5 * dt.size()];
                let mut b = a.clone();
                fill(dt, &mut a, |i| i as i64 - 2).unwrap();
                fill(dt, &mut b, |i| 3 - i as i64).unwrap();
                let mut dst = vec![0u8; a.len()];
                reduce_from(dt, op, &mut dst, &a, &b).unwrap();
                reduce_into(dt, op, &mut a, &b).unwrap();
                assert_eq!(dst, a, "{} {}", dt.name(), op.name());
            }
        }
    }

    /// Split across 2 to 5 threads, every type and op gives the bytes one thread gives, on odd
    /// sizes (arbitrary bytes: NaNs, infinities, wrapping integers); in place, out of place, and
    /// the avg division.
    #[test]
    fn threads_give_the_bytes_one_thread_gives() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut noise = |len: usize| -> Vec<u8> {
            (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x >> 32) as u8
                })
                .collect()
        };
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        for dt in DataType::ALL {
            for op in RedOp::ALL {
                for count in [1, 3, 1001, 65_537] {
                    let (a, b) = (noise(count * dt.size()), noise(count * dt.size()));
                    let mut one = vec![0u8; a.len()];
                    reduce_from_on(1, dt, op, &mut one, &a, &b).unwrap();
                    let mut acc1 = a.clone();
                    reduce_into_on(1, dt, op, &mut acc1, &b).unwrap();
                    finalize_on(1, dt, &mut acc1, 3).unwrap();
                    for n in 2..=5 {
                        let what = format!("{} {} x{count} on {n} threads", dt.name(), op.name());
                        let mut many = vec![0u8; a.len()];
                        pool.install(|| reduce_from_on(n, dt, op, &mut many, &a, &b)).unwrap();
                        assert!(many == one, "{what}: out of place");
                        let mut acc = a.clone();
                        pool.install(|| reduce_into_on(n, dt, op, &mut acc, &b)).unwrap();
                        pool.install(|| finalize_on(n, dt, &mut acc, 3)).unwrap();
                        assert!(acc == acc1, "{what}: in place and divided");
                    }
                    // And through the rule, at this size.
                    let mut ruled = vec![0u8; a.len()];
                    reduce_from(dt, op, &mut ruled, &a, &b).unwrap();
                    assert!(ruled == one, "{} {} x{count} by the rule", dt.name(), op.name());
                }
            }
        }
        // Past the rule's threshold (split where this process may use 2 cores or more).
        for dt in [DataType::Float, DataType::Bfloat16, DataType::Int8] {
            let count = threads::PARALLEL_MIN_BYTES / dt.size() * 3 / 2 + 1;
            let (a, b) = (noise(count * dt.size()), noise(count * dt.size()));
            let mut one = a.clone();
            reduce_into_on(1, dt, RedOp::Sum, &mut one, &b).unwrap();
            let mut ruled = a.clone();
            reduce_into(dt, RedOp::Sum, &mut ruled, &b).unwrap();
            assert!(ruled == one, "{} sum x{count} by the rule", dt.name());
        }
    }

    #[test]
    fn misaligned_or_partial_buffers_are_errors() {
        let mut a = vec![0u8; 6];
        let e = reduce_into(DataType::Float, RedOp::Sum, &mut a, &[0u8; 6]).unwrap_err();
        assert_eq!(e.dtype, "float");
        assert_eq!(
            count_wrong(DataType::Int32, &[1, 0, 0, 0, 2, 0, 0, 0], &[1, 0, 0, 0, 3, 0, 0, 0]),
            1
        );
    }
}
