//! Loading the driver and opening a GPU's context; driver errors with the fix a user can make.

use super::*;

/// Advice for driver errors a user can act on.
pub fn hint(e: &DriverError) -> &'static str {
    match e.0 {
        CUresult::CUDA_ERROR_NO_DEVICE => "; the driver sees no GPU: check nvidia-smi and CUDA_VISIBLE_DEVICES",
        CUresult::CUDA_ERROR_INVALID_DEVICE => "; no such GPU: check --gpu-ids against nvidia-smi -L",
        CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION => {
            "; the driver cannot JIT PTX ISA 8.0 (CUDA 12.0): update the NVIDIA driver to 525 or newer"
        }
        CUresult::CUDA_ERROR_OUT_OF_MEMORY => "; GPU memory is full: use a smaller -e, or fewer ranks per GPU",
        CUresult::CUDA_ERROR_NOT_INITIALIZED | CUresult::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH => {
            "; the kernel module and libcuda differ in version: reload the nvidia module or reboot"
        }
        CUresult::CUDA_ERROR_DEVICE_UNAVAILABLE => {
            "; the GPU is in exclusive-process mode and taken: nvidia-smi -c DEFAULT, or one rank per GPU"
        }
        _ => "",
    }
}

/// A failed driver call on the GPU `info` describes.
pub(super) fn call_error(info: &GpuInfo, call: &'static str, e: DriverError) -> GpuError {
    GpuError::Call {
        ordinal: info.ordinal,
        name: info.name.clone(),
        call,
        error: e.to_string(),
        hint: hint(&e).to_string(),
    }
}

/// Whether the loaded libcuda exports `name`: cudarc panics on a call to a missing symbol, and
/// older drivers lack the newer GPUDirect calls. Only after [`driver_present`] said yes.
pub(super) fn has_symbol(name: &str) -> bool {
    // SAFETY: looks the symbol up in the already loaded libcuda without calling it; the function
    // type named is never used.
    unsafe { sys::culib().get::<unsafe extern "C" fn()>(name.as_bytes()) }.is_ok()
}

/// Whether the NVIDIA driver library (libcuda) can be loaded here.
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen libcuda by its usual names; no CUDA call is made.
    unsafe { sys::is_culib_present() }
}

/// cuInit and the number of GPUs, after checking libcuda loads (cudarc panics on the first call
/// when it does not).
pub(super) fn init(host: &str) -> Result<usize, GpuError> {
    if !driver_present() {
        return Err(GpuError::NoDriver { host: host.to_string() });
    }
    let early = |call: &'static str, e: DriverError| GpuError::Call {
        ordinal: 0,
        name: format!("(any GPU on {host})"),
        call,
        error: e.to_string(),
        hint: hint(&e).to_string(),
    };
    result::init().map_err(|e| early("cuInit", e))?;
    let count = CudaContext::device_count().map_err(|e| early("cuDeviceGetCount", e))?;
    Ok(count.max(0) as usize)
}

/// The CUDA ordinal of the GPU at PCI address `bus_id` (`0000:1b:00.0`), among the GPUs this
/// process sees (`pairwise --rails auto` pairs a NIC with a GPU by its place in the PCI tree).
pub fn ordinal_of(bus_id: &str, local_rank: usize, host: &str) -> Result<usize, GpuError> {
    init(host)?;
    let refused = |why: String| GpuError::Selection {
        host: host.to_string(),
        local_rank,
        why,
    };
    let c = std::ffi::CString::new(bus_id).map_err(|_| refused(format!("{bus_id:?} is not a PCI address")))?;
    let mut dev: sys::CUdevice = 0;
    // SAFETY: `dev` is a valid place for the answer and `c` a NUL-terminated string, both alive
    // for the call; cuInit ran in `init` above.
    let r = unsafe { sys::cuDeviceGetByPCIBusId(&mut dev, c.as_ptr()) };
    if r != CUresult::CUDA_SUCCESS || dev < 0 {
        return Err(refused(format!(
            "the GPU paired with this rank's NIC, at {bus_id}, is not one CUDA shows here ({r:?}; \
             CUDA_VISIBLE_DEVICES may hide it): pass --use-cuda N to choose one"
        )));
    }
    Ok(dev as usize)
}

/// The primary context of GPU `ordinal` and what it is (name, PCI address).
pub(super) fn open_context(ordinal: usize) -> Result<(Arc<CudaContext>, GpuInfo), GpuError> {
    let mut info = GpuInfo {
        ordinal,
        name: "?".into(),
        pci_bus_id: String::new(),
        stand_in: false,
    };
    let ctx = CudaContext::new(ordinal).map_err(|e| call_error(&info, "cuDevicePrimaryCtxRetain", e))?;
    info.name = ctx.name().map_err(|e| call_error(&info, "cuDeviceGetName", e))?;
    let attr = |a| ctx.attribute(a);
    let (dom, bus, dev) = (
        attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
        attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
        attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID),
    );
    let (dom, bus, dev) = match (dom, bus, dev) {
        (Ok(a), Ok(b), Ok(c)) => (a, b, c),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
            return Err(call_error(&info, "cuDeviceGetAttribute(PCI)", e))
        }
    };
    info.pci_bus_id = format!("{dom:04x}:{bus:02x}:{dev:02x}.0");
    Ok((ctx, info))
}

/// The two attributes that say whether RDMA writes need a flush, and the rule they make (a host
/// flush only where the driver has the call).
pub(super) fn flush_rule(ctx: &CudaContext) -> (Result<i32, String>, Result<i32, String>, RdmaFlush) {
    let opts = ctx
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS)
        .map_err(|e| e.to_string());
    let order = ctx
        .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING)
        .map_err(|e| e.to_string());
    let mut rule = RdmaFlush::from_attributes(*opts.as_ref().unwrap_or(&0), *order.as_ref().unwrap_or(&0));
    if rule == RdmaFlush::Flush && !has_symbol("cuFlushGPUDirectRDMAWrites") {
        rule = RdmaFlush::Unavailable;
    }
    (opts, order, rule)
}
