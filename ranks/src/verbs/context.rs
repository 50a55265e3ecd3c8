//! An open RDMA device: ports, GIDs, and the objects made from it.

use std::ffi::CStr;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_sys::*;

use super::*;

/// The device as libibverbs opened it, shared by every resource made from it and closed when the
/// last of them goes.
pub(super) struct OpenDevice {
    pub(super) raw: NonNull<ibv_context>,
    pub(super) name: String,
    /// For a device context librdmacm opened (connection-manager setup): the id that keeps it
    /// open; librdmacm, not us, closes it.
    cm: Option<super::CmId>,
}

// SAFETY: an ibv_context may be used from any thread (libibverbs is thread-safe); we never hand out
// the raw pointer.
unsafe impl Send for OpenDevice {}
// SAFETY: as for Send: libibverbs serialises what needs it; shared use is sound.
unsafe impl Sync for OpenDevice {}

impl Drop for OpenDevice {
    fn drop(&mut self) {
        if self.cm.is_some() {
            return;
        }
        // SAFETY: `raw` came from ibv_open_device and every child resource holds an Arc to us, so
        // nothing uses the context after this.
        unsafe { ibv_close_device(self.raw.as_ptr()) };
    }
}

/// Port attributes meshrun needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortInfo {
    pub active: bool,
    /// Active MTU in bytes (256 .. 4096).
    pub active_mtu: u32,
    pub mtu_enum: u32,
    /// The largest MTU the port supports, bytes.
    pub max_mtu: u32,
    pub lid: u16,
    pub ethernet: bool,
    pub gid_tbl_len: i32,
}

/// An open RDMA device.
#[derive(Clone)]
pub struct Context(Arc<OpenDevice>);

impl Context {
    /// Open `name`, or the first device.
    pub fn open(name: Option<&str>) -> Result<Context, VerbsError> {
        let mut n = 0i32;
        // SAFETY: ibv_get_device_list writes the count to `n` and returns a NULL-terminated array (or
        // NULL with errno set), which is freed below once.
        let list = unsafe { ibv_get_device_list(&mut n) };
        if list.is_null() {
            let e = errno();
            return Err(if e.raw_os_error() == Some(libc::ENOSYS) {
                VerbsError::NoKernelRdma
            } else {
                VerbsError::verb("ibv_get_device_list", "-", e, "")
            });
        }
        let mut found = None;
        let mut names = Vec::new();
        for i in 0..n.max(0) as usize {
            // SAFETY: i < n: a valid device pointer whose name is owned by the list.
            let dev = unsafe { *list.add(i) };
            // SAFETY: see above.
            let dname = unsafe { CStr::from_ptr(ibv_get_device_name(dev)) }
                .to_string_lossy()
                .into_owned();
            if found.is_none() && name.is_none_or(|want| want == dname) {
                found = Some((dev, dname.clone()));
            }
            names.push(dname);
        }
        let result = match found {
            None if names.is_empty() => Err(VerbsError::NoDevice),
            None => Err(VerbsError::UnknownDevice(name.unwrap_or("").into(), names.join(", "))),
            Some((dev, dname)) => {
                // SAFETY: `dev` is a valid device of the list, which is still alive here.
                let raw = unsafe { ibv_open_device(dev) };
                match NonNull::new(raw) {
                    Some(raw) => Ok(Context(Arc::new(OpenDevice {
                        raw,
                        name: dname,
                        cm: None,
                    }))),
                    None => Err(VerbsError::verb(
                        "ibv_open_device",
                        dname,
                        errno(),
                        " (is /dev/infiniband/uverbs* accessible to this user?)",
                    )),
                }
            }
        };
        // SAFETY: freed once; opened contexts stay valid after the list is freed.
        unsafe { ibv_free_device_list(list) };
        result
    }

    /// The device context librdmacm opened for `id` (bound or resolved), kept open by holding
    /// the id.
    pub(super) fn borrowed(raw: NonNull<ibv_context>, id: super::CmId) -> Context {
        // SAFETY: a valid context (librdmacm's, alive while the id is); its device's name is a
        // NUL-terminated string owned by libibverbs.
        let name = unsafe { CStr::from_ptr(ibv_get_device_name(raw.as_ref().device)) }
            .to_string_lossy()
            .into_owned();
        Context(Arc::new(OpenDevice {
            raw,
            name,
            cm: Some(id),
        }))
    }

    pub fn name(&self) -> &str {
        &self.0.name
    }

    fn err(&self, verb: &'static str, hint: &'static str) -> VerbsError {
        VerbsError::verb(verb, self.0.name.clone(), errno(), hint)
    }

    pub fn query_port(&self, port: u8) -> Result<PortInfo, VerbsError> {
        // SAFETY: ibv_port_attr is plain data; zeroed is a valid initial value.
        let mut attr: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: valid context and a pointer to a local, full-size attr struct (the inline
        // ___ibv_query_port passes its size to the provider).
        let rc = unsafe { ___ibv_query_port(self.0.raw.as_ptr(), port, &mut attr) };
        if rc != 0 {
            return Err(VerbsError::verb(
                "ibv_query_port",
                self.0.name.clone(),
                std::io::Error::from_raw_os_error(rc.abs()),
                " (does the device have that port? see meshrun devices)",
            ));
        }
        let mtu_enum = attr.active_mtu;
        Ok(PortInfo {
            active: attr.state == ibv_port_state::IBV_PORT_ACTIVE,
            active_mtu: 128u32 << mtu_enum,
            mtu_enum,
            max_mtu: 128u32 << attr.max_mtu,
            lid: attr.lid,
            ethernet: attr.link_layer == LINK_LAYER_ETHERNET,
            gid_tbl_len: attr.gid_tbl_len,
        })
    }

    pub fn query_gid(&self, port: u8, index: i32) -> Result<[u8; 16], VerbsError> {
        // SAFETY: ibv_gid is plain data.
        let mut gid: ibv_gid = unsafe { std::mem::zeroed() };
        // SAFETY: valid context and a pointer to a local gid.
        if unsafe { ibv_query_gid(self.0.raw.as_ptr(), port, index, &mut gid) } != 0 {
            return Err(self.err(
                "ibv_query_gid",
                " (GID index out of range? see meshrun devices, choose -x N)",
            ));
        }
        // SAFETY: every bit pattern of the union is a valid byte array.
        Ok(unsafe { gid.raw })
    }

    pub fn alloc_pd(&self) -> Result<ProtectionDomain, VerbsError> {
        // SAFETY: valid context.
        let raw = unsafe { ibv_alloc_pd(self.0.raw.as_ptr()) };
        let raw = NonNull::new(raw).ok_or_else(|| self.err("ibv_alloc_pd", ""))?;
        Ok(ProtectionDomain(Arc::new(Pd {
            raw,
            ctx: self.0.clone(),
        })))
    }

    pub fn create_cq(&self, entries: i32) -> Result<CompletionQueue, VerbsError> {
        // SAFETY: valid context; no completion channel, comp vector 0.
        let raw = unsafe {
            ibv_create_cq(
                self.0.raw.as_ptr(),
                entries,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        let raw = NonNull::new(raw).ok_or_else(|| self.err("ibv_create_cq", ""))?;
        Ok(CompletionQueue {
            raw,
            ctx: self.0.clone(),
        })
    }
}
