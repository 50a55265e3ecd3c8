use super::memory::page_window;
use super::*;
use crate::reduce;

/// GPU 0, or a panic saying plainly why there is none.
fn gpu_for_test() -> CudaGpu {
    match CudaGpu::open(None, 0, "this machine") {
        Ok(g) => g,
        Err(GpuError::NoDriver { .. }) => panic!(
            "no GPU to test on: libcuda.so (the NVIDIA driver) cannot be loaded on this machine; \
             these tests run on a GPU machine (scripts/gpu-check.sh, the GPU bundle's check)"
        ),
        Err(e) => panic!("no GPU to test on: {e}"),
    }
}

/// Operands that exercise wrapping (integers) and rounding (16-bit floats), without NaN.
fn operands(dt: DataType, n: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; n * dt.size()];
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    match dt {
        DataType::Half | DataType::Float | DataType::Double | DataType::Bfloat16 => {
            // Values in [-40, 40) with 1/1024 steps: sums and products round in half and bfloat16.
            reduce::fill(dt, &mut v, |_| 0).unwrap();
            crate::with_type!(dt, T => {
                let s: &mut [T] = bytemuck::cast_slice_mut(&mut v);
                for e in s.iter_mut() {
                    let f = ((next() % 81920) as f64 - 40960.0) / 1024.0;
                    *e = <T as FromF64>::from_f64(f);
                }
            });
        }
        _ => v.iter_mut().for_each(|b| *b = next() as u8),
    }
    v
}

trait FromF64 {
    fn from_f64(f: f64) -> Self;
}
macro_rules! from_f64 {
    ($($t:ty => $e:expr),*) => { $(impl FromF64 for $t { fn from_f64(f: f64) -> Self { ($e)(f) } })* };
}
from_f64!(
    i8 => |f: f64| f as i8, u8 => |f: f64| f as u8, i32 => |f: f64| f as i32, u32 => |f: f64| f as u32,
    i64 => |f: f64| f as i64, u64 => |f: f64| f as u64, f32 => |f: f64| f as f32, f64 => |f: f64| f,
    half::f16 => half::f16::from_f64, half::bf16 => half::bf16::from_f64
);

/// Where a buffer starts inside what cuMemAlloc returned: the first page boundary, when the
/// whole-page window fits (else the allocation is made one page larger).
#[test]
fn buffers_sit_on_page_boundaries() {
    let page = 4096;
    // Page-aligned (what large allocations usually get): the window is the allocation.
    assert_eq!(page_window(0x7f00_0020_0000, 8192, 5000, page), Some(0x7f00_0020_0000));
    // Only 256-byte aligned (all cuMemAlloc promises): no room without a page more...
    assert_eq!(page_window(0x7f00_0020_0100, 8192, 5000, page), None);
    // ...and with it, the next boundary.
    assert_eq!(
        page_window(0x7f00_0020_0100, 8192 + page, 5000, page),
        Some(0x7f00_0020_1000)
    );
    assert_eq!(
        page_window(0x1000, 4096, 0, page),
        Some(0x1000),
        "an empty buffer still gets a page"
    );
    for raw in (0..page as u64 * 2).step_by(256) {
        let base = page_window(raw, 3 * page + page, 3 * page, page).expect("a page more always fits");
        assert_eq!(base % page as u64, 0);
        assert!(base >= raw && base + 3 * page as u64 <= raw + 4 * page as u64);
    }
}

/// Elements per case: more than two full grids (4,096 blocks of 512 threads, the launch's cap),
/// so every thread takes at least two grid strides and the tail is not a whole block.
const KERNEL_TEST_N: usize = 2 * kernels::MAX_BLOCKS as usize * kernels::BLOCK as usize + 12_345;

#[test]
fn the_kernel_test_strides_the_grid() {
    let n = KERNEL_TEST_N;
    assert_eq!(kernels::blocks(n), kernels::MAX_BLOCKS, "the grid is capped");
    let grid = kernels::MAX_BLOCKS as usize * kernels::BLOCK as usize;
    assert!(n > 2 * grid, "each thread strides at least twice");
    assert_ne!(n % kernels::BLOCK as usize, 0, "a partial last block");
}

/// Element `i` of `bytes` as a value of `dt`, for reports.
fn element(dt: DataType, bytes: &[u8], i: usize) -> String {
    let e = &bytes[i * dt.size()..(i + 1) * dt.size()];
    crate::with_type!(dt, T => {
        let v: T = bytemuck::pod_read_unaligned(e);
        format!("{v:?}")
    })
}

/// How one (type, op) case came out on the device.
enum CaseOutcome {
    Equal,
    Wrong {
        count: u64,
        first: usize,
        got: String,
        want: String,
    },
    Failed(String),
}

/// Run `dst = a op b` (in place, as the ring does) and the avg divide on the device, and
/// compare with the CPU.
fn run_case(g: &mut dyn Gpu, dt: DataType, op: RedOp, a: &[u8], b: &[u8]) -> CaseOutcome {
    let mut want = vec![0u8; a.len()];
    if let Err(e) = reduce::reduce_from(dt, op, &mut want, a, b).and_then(|()| reduce::finalize(dt, op, &mut want, 3)) {
        return CaseOutcome::Failed(format!("CPU reference: {e}"));
    }
    let mut got = vec![0u8; a.len()];
    let device = (|| -> Result<(), GpuError> {
        let (da, db) = (g.alloc(a.len())?, g.alloc(b.len())?);
        let r = (|| {
            g.upload(At::new(da, 0), a)?;
            g.upload(At::new(db, 0), b)?;
            g.reduce(dt, op, At::new(da, 0), At::new(da, 0), At::new(db, 0), a.len())?;
            g.finalize(dt, op, da, 0..a.len(), 3)?;
            g.download(At::new(da, 0), &mut got)
        })();
        g.free(da);
        g.free(db);
        r
    })();
    if let Err(e) = device {
        return CaseOutcome::Failed(e.to_string());
    }
    let count = reduce::count_wrong(dt, &got, &want);
    if count == 0 {
        return CaseOutcome::Equal;
    }
    let first = got
        .chunks(dt.size())
        .zip(want.chunks(dt.size()))
        .position(|(x, y)| x != y)
        .unwrap_or(0);
    CaseOutcome::Wrong {
        count,
        first,
        got: element(dt, &got, first),
        want: element(dt, &want, first),
    }
}

/// A line of the report, written to stderr at once and not through the test harness's capture
/// (`std::io::stderr()` is not captured; `eprintln!` is), so each case shows as it finishes,
/// even if a later one hangs until a timeout kills the test.
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// Every case's line, the cases that went wrong, and the summary line.
struct Report {
    table: Vec<String>,
    failed: Vec<String>,
    summary: String,
}

/// Run every (type, op) on `g` over `n` elements, each reported through `say` as it finishes.
fn kernel_report(g: &mut dyn Gpu, n: usize, say: &mut dyn FnMut(&str)) -> Report {
    let (mut table, mut failed, mut equal) = (Vec::new(), Vec::new(), 0);
    for dt in DataType::ALL {
        let (a, b) = (operands(dt, n, 1), operands(dt, n, 2));
        for op in RedOp::ALL {
            let case = format!("{:>8} {:>4}", dt.name(), op.name());
            let line = match run_case(g, dt, op, &a, &b) {
                CaseOutcome::Equal => {
                    equal += 1;
                    format!("{case}: ok, {n} of {n} equal")
                }
                CaseOutcome::Wrong {
                    count,
                    first,
                    got,
                    want,
                } => format!("{case}: WRONG {count} of {n}, first at {first}: got {got}, want {want}"),
                CaseOutcome::Failed(e) => format!("{case}: FAILED: {e}"),
            };
            if !line.contains(": ok,") {
                failed.push(format!("{} {}", dt.name(), op.name()));
            }
            say(&line);
            table.push(line);
        }
    }
    let summary = format!(
        "reduction kernels: {equal} of {} (type, op) cases equal the CPU bit for bit over {n} elements{}",
        table.len(),
        if failed.is_empty() {
            String::new()
        } else {
            format!("; wrong or failed: {}", failed.join(", "))
        }
    );
    say(&summary);
    Report { table, failed, summary }
}

/// Every (type, op) on the device against the CPU, bit for bit, over enough elements that the
/// grid strides. Every case runs and is reported (mismatches, the first wrong index, the value
/// there and the one wanted) before the test fails, and the failure message holds the table.
#[test]
#[ignore = "needs an NVIDIA GPU and driver; scripts/gpu-check.sh runs it on a GPU machine"]
fn device_kernels_equal_the_cpu_for_every_type_and_op() {
    let n = KERNEL_TEST_N;
    let mut g = gpu_for_test();
    say(&format!(
        "reduction kernels on GPU {} {} [{}]: {n} elements per case, grid {} blocks x {} threads (strides {}x)",
        g.info.ordinal,
        g.info.name,
        g.info.pci_bus_id,
        kernels::blocks(n),
        kernels::BLOCK,
        n.div_ceil(kernels::MAX_BLOCKS as usize * kernels::BLOCK as usize)
    ));
    let r = kernel_report(&mut g, n, &mut |l| say(l));
    assert_eq!(r.table.len(), 50);
    assert!(r.failed.is_empty(), "{}\n{}", r.summary, r.table.join("\n"));
}

/// A GPU that gets case 7's result wrong (one element) and fails case 12's kernel: every
/// other case still runs, and both are reported as they are.
struct Faulty {
    inner: super::super::standin::HostStandIn,
    downloads: usize,
    reduces: usize,
}

impl Gpu for Faulty {
    fn info(&self) -> &GpuInfo {
        self.inner.info()
    }
    fn alloc(&mut self, len: usize) -> Result<BufId, GpuError> {
        self.inner.alloc(len)
    }
    fn free(&mut self, buf: BufId) {
        self.inner.free(buf)
    }
    fn host_staging(&mut self, len: usize) -> Result<Box<dyn Staging>, GpuError> {
        self.inner.host_staging(len)
    }
    fn upload(&mut self, dst: At, src: &[u8]) -> Result<(), GpuError> {
        self.inner.upload(dst, src)
    }
    fn download(&mut self, src: At, dst: &mut [u8]) -> Result<(), GpuError> {
        self.inner.download(src, dst)?;
        self.downloads += 1;
        if self.downloads == 8 {
            dst[5] ^= 0x40;
        }
        Ok(())
    }
    fn copy(&mut self, dst: At, src: At, len: usize) -> Result<(), GpuError> {
        self.inner.copy(dst, src, len)
    }
    fn nic_memory(&self, buf: BufId) -> Result<Box<dyn ranks::NicMemory>, GpuError> {
        self.inner.nic_memory(buf)
    }
    fn reduce(&mut self, dt: DataType, op: RedOp, dst: At, a: At, b: At, bytes: usize) -> Result<(), GpuError> {
        self.reduces += 1;
        if self.reduces == 13 {
            // (Built by hand: a DriverError asks libcuda for its words.)
            return Err(GpuError::Call {
                ordinal: 0,
                name: self.inner.info().name.clone(),
                call: "cuLaunchKernel (reduce)",
                error: "CUDA_ERROR_LAUNCH_FAILED".into(),
                hint: String::new(),
            });
        }
        self.inner.reduce(dt, op, dst, a, b, bytes)
    }
    fn finalize(&mut self, dt: DataType, op: RedOp, buf: BufId, r: Range<usize>, n: usize) -> Result<(), GpuError> {
        self.inner.finalize(dt, op, buf, r, n)
    }
    fn rdma_writes_landed(&mut self) {
        self.inner.rdma_writes_landed()
    }
}

/// The report itself, on the host stand-in (no GPU needed): all 50 cases equal; then a GPU
/// with one wrong element and one failed launch has both reported, and the other 48 still run.
#[test]
fn the_kernel_report_runs_and_tells_every_case() {
    let n = 3 * kernels::BLOCK as usize + 7;
    let mut g = super::super::standin::HostStandIn::new(0);
    let mut said = Vec::new();
    let r = kernel_report(&mut g, n, &mut |l| said.push(l.to_string()));
    assert_eq!((r.table.len(), r.failed.len()), (50, 0), "{}", r.summary);
    assert_eq!(said.len(), 51);
    assert!(r
        .summary
        .starts_with("reduction kernels: 50 of 50 (type, op) cases equal"));
    let mut g = Faulty {
        inner: super::super::standin::HostStandIn::new(0),
        downloads: 0,
        reduces: 0,
    };
    let r = kernel_report(&mut g, n, &mut |_| {});
    assert_eq!(r.table.len(), 50);
    assert_eq!(r.failed, ["uint8 min", "int32 min"], "{}", r.table.join("\n"));
    // Case 7 (uint8 min): element 5 flipped by 0x40.
    let wrong = &r.table[7];
    assert!(
        wrong.contains("   uint8  min: WRONG 1 of 1543, first at 5: got "),
        "{wrong}"
    );
    assert!(
        r.table[12].contains("int32  min: FAILED: GPU 0 (host stand-in"),
        "{}",
        r.table[12]
    );
    assert!(
        r.table[12].contains("cuLaunchKernel (reduce) failed"),
        "{}",
        r.table[12]
    );
    assert!(r.summary.contains("48 of 50") && r.summary.ends_with("wrong or failed: uint8 min, int32 min"));
}

#[test]
#[ignore = "needs an NVIDIA GPU and driver; scripts/gpu-check.sh runs it on a GPU machine"]
fn device_errors_name_the_gpu_and_the_bounds() {
    let mut g = gpu_for_test();
    let b = g.alloc(64).unwrap();
    let e = g.upload(At::new(b, 60), &[0u8; 8]).unwrap_err().to_string();
    assert!(e.contains("upload past the end") && e.contains("60..68"), "{e}");
    let e = CudaGpu::open(Some(&[999]), 0, "gpu-check").err().map(|e| e.to_string());
    assert!(
        e.as_deref().is_some_and(|e| e.contains("GPU 999 does not exist")),
        "{e:?}"
    );
    // Pinned staging round trip.
    let mut s = g.host_staging(1 << 20).unwrap();
    s.bytes_mut().iter_mut().enumerate().for_each(|(i, x)| *x = i as u8);
    let d = g.alloc(1 << 20).unwrap();
    g.upload(At::new(d, 0), s.bytes()).unwrap();
    let mut back = vec![0u8; 1 << 20];
    g.download(At::new(d, 0), &mut back).unwrap();
    assert_eq!(back, s.bytes());
}

/// A started reduction (its own stream) gives the bytes a waited one gives, while uploads and
/// downloads of other buffers run on the copy stream meanwhile, as the overlapped ring does.
#[test]
#[ignore = "needs an NVIDIA GPU and driver; scripts/gpu-check.sh runs it on a GPU machine"]
fn started_reductions_equal_waited_ones_beside_copies() {
    let mut g = gpu_for_test();
    let n = 1 << 22;
    for dt in [DataType::Float, DataType::Bfloat16] {
        let bytes = n * dt.size();
        let (a, b) = (operands(dt, n, 1), operands(dt, n, 2));
        let [da, db, want, got, other] = [0; 5].map(|_| g.alloc(bytes).unwrap());
        g.upload(At::new(da, 0), &a).unwrap();
        g.upload(At::new(db, 0), &b).unwrap();
        let (x, y) = (At::new(da, 0), At::new(db, 0));
        g.reduce(dt, RedOp::Sum, At::new(want, 0), x, y, bytes).unwrap();
        g.reduce_start(dt, RedOp::Sum, At::new(got, 0), x, y, bytes).unwrap();
        g.upload(At::new(other, 0), &a).unwrap();
        let mut back = vec![0u8; bytes];
        g.download(At::new(other, 0), &mut back).unwrap();
        g.reduce_wait().unwrap();
        assert_eq!(back, a, "{}: the copy beside the kernel", dt.name());
        let (mut w, mut o) = (vec![0u8; bytes], vec![0u8; bytes]);
        g.download(At::new(want, 0), &mut w).unwrap();
        g.download(At::new(got, 0), &mut o).unwrap();
        assert_eq!(reduce::count_wrong(dt, &o, &w), 0, "{} sum, started", dt.name());
        g.reduce_wait().unwrap();
        for buf in [da, db, want, got, other] {
            g.free(buf);
        }
    }
}
