//! The reduction kernels: CUDA source (`reduce.cu`), the PTX compiled from it ahead of time
//! (`reduce.ptx`, made by `scripts/gen-ptx` with NVRTC), and the names of its entry points.
//!
//! The PTX is shipped so that nodes need only the driver (which JIT-compiles PTX for their GPU),
//! not NVRTC. It is compiled for `compute_70` (Volta and every later GPU) by NVRTC 12.0, whose PTX
//! ISA 8.0 loads on every CUDA 12 driver; a newer NVRTC would raise the ISA and the minimum driver.

use crate::dtype::{DataType, RedOp};

/// The kernels' CUDA source.
pub const SOURCE: &str = include_str!("reduce.cu");
/// `SOURCE` compiled by `scripts/gen-ptx`.
pub const PTX: &str = include_str!("reduce.ptx");
/// Virtual architecture the PTX targets.
pub const ARCH: &str = "compute_70";
/// Threads per block of every launch.
pub const BLOCK: u32 = 512;
/// At most this many blocks per launch (the kernels loop over the rest).
pub const MAX_BLOCKS: u32 = 4096;

/// The entry point for `dst = a op b` (sum also for avg, which divides at the end).
pub fn reduce_name(dt: DataType, op: RedOp) -> String {
    let op = match op {
        RedOp::Sum | RedOp::Avg => "sum",
        RedOp::Prod => "prod",
        RedOp::Min => "min",
        RedOp::Max => "max",
    };
    format!("meshrun_{op}_{}", dt.name())
}

/// The entry point for the final divide of avg.
pub fn div_name(dt: DataType) -> String {
    format!("meshrun_div_{}", dt.name())
}

/// Every entry point the PTX must hold.
pub fn all_names() -> Vec<String> {
    let mut v = Vec::new();
    for dt in DataType::ALL {
        for op in [RedOp::Sum, RedOp::Prod, RedOp::Min, RedOp::Max] {
            v.push(reduce_name(dt, op));
        }
        v.push(div_name(dt));
    }
    v
}

/// Grid size for `n` elements.
pub fn blocks(n: usize) -> u32 {
    n.div_ceil(BLOCK as usize).clamp(1, MAX_BLOCKS as usize) as u32
}

/// The NVRTC options `scripts/gen-ptx` compiles with: IEEE division, no fused multiply-add and no
/// flush-to-zero, so results equal the CPU's bit for bit.
pub fn nvrtc_options() -> cudarc::nvrtc::CompileOptions {
    cudarc::nvrtc::CompileOptions {
        ftz: Some(false),
        prec_div: Some(true),
        fmad: Some(false),
        arch: Some(ARCH),
        name: Some("reduce.cu".into()),
        ..Default::default()
    }
}

/// Whether NVRTC can be loaded here.
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries to dlopen the NVRTC library by its usual names; no NVRTC call is made.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Compile [`SOURCE`] with NVRTC (used by `scripts/gen-ptx` and the regeneration test).
pub fn compile() -> Result<String, String> {
    if !nvrtc_present() {
        return Err("NVRTC (libnvrtc.so.12) is not loadable: install the CUDA toolkit, or \
                    `pip install nvidia-cuda-nvrtc-cu12==12.0.76` and put its lib/ directory on LD_LIBRARY_PATH"
            .into());
    }
    cudarc::nvrtc::compile_ptx_with_opts(SOURCE, nvrtc_options())
        .map(|p| p.to_src())
        .map_err(|e| format!("NVRTC could not compile reduce.cu: {e:?}"))
}

/// The NVRTC release named in a PTX header (`// Cuda compilation tools, release 12.0, V12.0.76`).
pub fn ptx_release(ptx: &str) -> Option<&str> {
    ptx.lines()
        .find_map(|l| l.strip_prefix("// Cuda compilation tools, release "))
        .map(|s| s.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_ptx_has_every_entry_point_and_targets_the_arch() {
        for name in all_names() {
            assert!(
                PTX.contains(&format!(".entry {name}(")),
                "reduce.ptx lacks {name}: run scripts/gen-ptx"
            );
        }
        assert_eq!(all_names().len(), 50);
        assert!(PTX.contains(".target sm_70"), "PTX must target sm_70");
        assert!(
            PTX.contains(".version 8.0"),
            "PTX ISA must stay 8.0 (NVRTC 12.0) for old drivers"
        );
        assert!(ptx_release(PTX).is_some_and(|r| r.starts_with("12.0")));
    }

    #[test]
    fn names_and_grid() {
        assert_eq!(reduce_name(DataType::Bfloat16, RedOp::Avg), "meshrun_sum_bfloat16");
        assert_eq!(reduce_name(DataType::Int8, RedOp::Min), "meshrun_min_int8");
        assert_eq!(div_name(DataType::Half), "meshrun_div_half");
        assert_eq!(blocks(0), 1);
        assert_eq!(blocks(513), 2);
        assert_eq!(blocks(usize::MAX / 2), MAX_BLOCKS);
    }

    /// Recompile reduce.cu with NVRTC and compare with the shipped PTX. Needs NVRTC: `scripts/test`
    /// installs NVRTC 12.0 from PyPI and runs this test with it.
    #[test]
    #[ignore = "needs NVRTC (libnvrtc.so.12); scripts/test installs it from PyPI and runs this test"]
    fn shipped_ptx_is_what_nvrtc_makes_of_the_source() {
        let ptx = compile().unwrap_or_else(|e| panic!("{e}"));
        for name in all_names() {
            assert!(ptx.contains(&format!(".entry {name}(")), "{name}");
        }
        let (got, want) = (ptx_release(&ptx), ptx_release(PTX));
        assert_eq!(
            got, want,
            "this NVRTC is release {got:?}, the shipped PTX was made by {want:?}: use NVRTC {want:?} to compare"
        );
        assert!(
            ptx == PTX,
            "reduce.ptx is stale: run scripts/gen-ptx and commit collectives/src/gpu/reduce.ptx"
        );
    }
}
