//! The verbs mesh's facts for the report header, in perftest's words (Device, Number of qps,
//! Mtu, GID index, ...): what the transport and its test links run with.

use super::*;
use test_links::CQ_MODERATION;

impl VerbsMesh {
    /// perftest's `Mtu` line: this end's active MTU, or, where peers differ, the path MTUs the
    /// pairs really run at (each pair's smaller end).
    fn mtu_detail(&self) -> String {
        match self.path_mtu {
            (lo, hi) if lo == hi && lo == self.mtu => format!("{}[B]", self.mtu),
            (lo, hi) if lo == hi => format!(
                "{lo}[B] path (this end {}[B]; a pair runs at its smaller end's)",
                self.mtu
            ),
            (lo, hi) => format!(
                "{lo}-{hi}[B] path (this end {}[B]; a pair runs at its smaller end's)",
                self.mtu
            ),
        }
    }

    /// The mesh's own queue pairs, for the header: "3, one per peer", or "12, 4 per peer, each
    /// message striped over them (flow labels 1-4)".
    fn mesh_qps(&self) -> String {
        let peers = self.size.saturating_sub(1);
        if self.lanes > 1 {
            format!(
                "{}, {} per peer, each message striped over them ({})",
                peers * self.lanes,
                self.lanes,
                if self.cm.is_some() {
                    "flow labels the device's: rdma_cm sets the path".to_string()
                } else {
                    format!("flow labels 1-{}", self.lanes)
                }
            )
        } else {
            format!("{peers}, one per peer")
        }
    }

    pub(super) fn details_list(&self) -> Vec<(String, String)> {
        let c = &self.choice;
        let ethernet = c.link_layer == crate::devices::LinkLayer::Ethernet;
        let mut v = vec![
            ("Device".into(), c.device.clone()),
            (
                "Number of qps".into(),
                if self.test_qps > 1 {
                    format!(
                        "{} per bandwidth test ({}), 1 per latency test (besides the mesh's {})",
                        self.test_qps,
                        if self.cm.is_some() {
                            "flow labels the device's, from the queue pair numbers: rdma_cm sets the path".to_string()
                        } else {
                            format!("flow labels 1-{}", self.test_qps)
                        },
                        self.mesh_qps()
                    )
                } else {
                    format!(
                        "1 per test (write, read, send -n; besides the mesh's {})",
                        self.mesh_qps()
                    )
                },
            ),
            (
                "Transport type".into(),
                if self.iwarp { "IW".into() } else { "IB".into() },
            ),
            (
                "Data ex. method".into(),
                if self.cm.is_some() {
                    "rdma_cm (each rank listens on its device's IPv4 address; the manager resolves the route)".into()
                } else {
                    "MPI (GIDs and queue pair numbers in one all-to-all)".into()
                },
            ),
            ("Connection type".into(), "RC".into()),
            (
                "CQ Moderation".into(),
                format!("{CQ_MODERATION} (bandwidth tests; latency tests and the mesh's own traffic: 1)"),
            ),
            ("Mtu".into(), self.mtu_detail()),
            (
                "Link type".into(),
                if ethernet { "Ethernet".into() } else { "IB".into() },
            ),
            (
                "GID index".into(),
                if ethernet { c.gid.index.to_string() } else { "-".into() },
            ),
            ("Max inline data".into(), format!("{}[B]", self.max_inline)),
            (
                "Service level".into(),
                format!(
                    "{}, traffic class {}{}",
                    self.qos.sl,
                    self.qos.traffic_class,
                    if ethernet {
                        format!(" (DSCP {})", self.qos.traffic_class >> 2)
                    } else {
                        String::new()
                    }
                ),
            ),
            (
                "Staging".into(),
                format!(
                    "{} inbox slots of {} KiB per peer, {}, credits by RDMA write",
                    self.slots,
                    self.slot / 1024,
                    if self.iwarp {
                        "RDMA write then an 8-byte SEND notice (iWARP has no immediate data)"
                    } else if self.use_send {
                        "SEND with immediate"
                    } else {
                        "RDMA write with immediate"
                    }
                ),
            ),
        ];
        if self.use_send {
            v.push((
                "Send tests".into(),
                "zero-copy: SEND between registered windows (-D: through the inbox slots)".into(),
            ));
        }
        v
    }
}
