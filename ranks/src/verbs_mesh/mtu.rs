//! perftest's `-m`: the path MTU this rank's queue pairs run at, asked for in bytes and never
//! above the port's active MTU. Applied to the port's attributes as soon as they are read, so
//! every queue pair (the mesh's and each test's), the endpoint records and the header's `Mtu`
//! line see the same MTU.

use crate::verbs::PortInfo;

/// The IBV_MTU_* value of an InfiniBand MTU in bytes (256 .. 4096, powers of two).
pub fn enum_of(bytes: u32) -> Option<u32> {
    match bytes {
        256 => Some(1),
        512 => Some(2),
        1024 => Some(3),
        2048 => Some(4),
        4096 => Some(5),
        _ => None,
    }
}

/// `info` with its MTU lowered to `cap` (an IBV_MTU_* value); unchanged without one.
pub(super) fn lowered(info: PortInfo, cap: Option<u32>) -> PortInfo {
    match cap {
        Some(c) if c < info.mtu_enum => PortInfo {
            mtu_enum: c,
            active_mtu: 128 << c,
            ..info
        },
        _ => info,
    }
}

/// The MTU enum `asked` (bytes, `-m`) gives on port `port` of `dev`, checked against its active MTU:
/// larger is an error, as is a smaller one through the connection manager (`cm`), which takes
/// the path MTU from the route when it connects a queue pair. None without `-m`.
pub(super) fn cap_for(
    asked: Option<u32>,
    (dev, port): (&str, u8),
    info: &PortInfo,
    cm: bool,
) -> Result<Option<u32>, String> {
    let Some(bytes) = asked else {
        return Ok(None);
    };
    let Some(e) = enum_of(bytes) else {
        return Err(format!(
            "-m {bytes}: not an InfiniBand MTU; expected 256, 512, 1024, 2048 or 4096"
        ));
    };
    let active = info.active_mtu;
    if e > info.mtu_enum {
        return Err(format!(
            "-m {bytes}: {dev} port {port}'s active MTU is {active} B and a queue pair's path MTU cannot be \
             larger; give -m {active} or less (or raise the port's MTU; on RoCE, the interface's)"
        ));
    }
    if cm && e < info.mtu_enum {
        return Err(format!(
            "-m {bytes} with -R/--rdma-cm: the connection manager takes the path MTU from the route \
             ({active} B on {dev} port {port}); drop -R to run at {bytes} B, or drop -m"
        ));
    }
    Ok(Some(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(mtu_enum: u32) -> PortInfo {
        PortInfo {
            active: true,
            active_mtu: 128 << mtu_enum,
            mtu_enum,
            max_mtu: 4096,
            lid: 0,
            ethernet: true,
            gid_tbl_len: 16,
        }
    }

    fn choice() -> (&'static str, u8) {
        ("mlx5_1", 1)
    }

    #[test]
    fn the_asked_mtu_lowers_the_port_and_never_raises_it() {
        let c = choice();
        assert_eq!(cap_for(None, c, &port(5), false), Ok(None));
        assert_eq!(cap_for(Some(1024), c, &port(5), false), Ok(Some(3)));
        let p = lowered(port(5), Some(3));
        assert_eq!((p.mtu_enum, p.active_mtu), (3, 1024));
        assert_eq!(lowered(port(3), Some(5)), port(3));
        assert_eq!(lowered(port(3), None), port(3));
        assert_eq!(cap_for(Some(4096), c, &port(5), true), Ok(Some(5)));
    }

    #[test]
    fn a_larger_or_odd_mtu_and_a_smaller_one_through_rdma_cm_are_one_line() {
        let c = choice();
        let e = cap_for(Some(4096), c, &port(3), false).unwrap_err();
        assert!(e.starts_with("-m 4096: mlx5_1 port 1's active MTU is 1024 B"), "{e}");
        assert!(e.contains("give -m 1024 or less"), "{e}");
        let e = cap_for(Some(1500), c, &port(5), false).unwrap_err();
        assert_eq!(
            e,
            "-m 1500: not an InfiniBand MTU; expected 256, 512, 1024, 2048 or 4096"
        );
        let e = cap_for(Some(1024), c, &port(5), true).unwrap_err();
        assert!(e.contains("drop -R to run at 1024 B"), "{e}");
        assert!(!e.contains('\n'));
    }
}
