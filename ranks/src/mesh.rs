//! Building the all-to-all mesh of a job: choose an address, exchange endpoints and the job token
//! over MPI, connect every pair.

use std::net::{IpAddr, SocketAddr};

use crate::netif::{self, NetifError};
use crate::tcp::{self, TcpListening, TcpMesh};
use crate::transport::TransportError;
use crate::wire::Record;
use crate::{Timeouts, World};

/// Why the mesh could not be built.
#[derive(Debug, thiserror::Error)]
pub enum MeshError {
    #[error("rank {rank} ({host}): {source}")]
    Address {
        rank: usize,
        host: String,
        #[source]
        source: NetifError,
    },
    #[error(
        "rank {rank} ({host}): host name resolves to {ip}, a loopback address, but the job spans {nodes} hosts; \
         pass --tcp-if NAME|CIDR to choose the interface peers can reach"
    )]
    LoopbackAcrossHosts {
        rank: usize,
        host: String,
        ip: IpAddr,
        nodes: usize,
    },
    #[error("rank {rank} ({host}): cannot listen on {ip}: {source}")]
    Listen {
        rank: usize,
        host: String,
        ip: IpAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("rank {rank} ({host}): cannot draw the job token: {source}")]
    Token {
        rank: usize,
        host: String,
        #[source]
        source: std::io::Error,
    },
    #[error("rank {rank} ({host}): ranks {failed} could not set up a TCP endpoint (see their messages)")]
    PeersFailed { rank: usize, host: String, failed: String },
    #[error(transparent)]
    Connect(#[from] TransportError),
}

/// Options for the TCP mesh.
#[derive(Debug, Clone, Default)]
pub struct TcpOptions {
    /// Interface name or CIDR; default: the address the host name resolves to.
    pub tcp_if: Option<String>,
}

/// The address this rank's TCP mesh listens on (`--tcp-if`, else the host name's address).
pub fn choose_ip(world: &World, opts: &TcpOptions) -> Result<IpAddr, MeshError> {
    let (rank, host) = (world.rank(), world.host().to_string());
    let wrap = |source| MeshError::Address {
        rank,
        host: host.clone(),
        source,
    };
    let ip = match &opts.tcp_if {
        Some(spec) => netif::choose(spec, &netif::local_addresses().map_err(wrap)?).map_err(wrap)?,
        None => netif::resolve_host(world.host()).map_err(wrap)?,
    };
    if ip.is_loopback() && world.node_count() > 1 {
        return Err(MeshError::LoopbackAcrossHosts {
            rank,
            host,
            ip,
            nodes: world.node_count(),
        });
    }
    Ok(ip)
}

/// Connect every pair of ranks over TCP. Every rank takes part in the MPI exchanges even when its
/// own setup failed, so a failure on one rank ends the job everywhere instead of hanging it.
pub fn connect_tcp(world: &World, opts: &TcpOptions, timeouts: Timeouts) -> Result<TcpMesh, MeshError> {
    connect_tcp_on(world, choose_ip(world, opts), timeouts)
}

/// [`connect_tcp`] on the address [`choose_ip`] already gave (or its error), so a rank that
/// needed the address earlier (the post-mortem's control port) does not resolve it twice.
pub fn connect_tcp_on(world: &World, ip: Result<IpAddr, MeshError>, timeouts: Timeouts) -> Result<TcpMesh, MeshError> {
    let (rank, host) = (world.rank(), world.host().to_string());
    let listening = ip.and_then(|ip| {
        TcpListening::bind(ip).map_err(|source| MeshError::Listen {
            rank,
            host: host.clone(),
            ip,
            source,
        })
    });
    let mut token = [0u8; 16];
    let mut token_err = None;
    if rank == 0 {
        match tcp::random_token() {
            Ok(t) => token = t,
            Err(source) => {
                token_err = Some(MeshError::Token {
                    rank,
                    host: host.clone(),
                    source,
                })
            }
        }
    }
    let rec = match &listening {
        Ok(l) if token_err.is_none() => l.local_addr().to_bytes(),
        _ => vec![0u8; <SocketAddr as Record>::LEN],
    };
    let all = world.all_gather_bytes(&rec, "exchanging TCP endpoints");
    world.broadcast_bytes(&mut token, "sharing the job token");
    let endpoints: Vec<Option<SocketAddr>> = all
        .chunks(<SocketAddr as Record>::LEN)
        .map(SocketAddr::from_bytes)
        .collect();
    let listening = listening?;
    if let Some(e) = token_err {
        return Err(e);
    }
    let failed: Vec<String> = endpoints
        .iter()
        .enumerate()
        .filter(|(_, e)| e.is_none())
        .map(|(r, _)| format!("{r} ({})", world.hosts()[r]))
        .collect();
    if !failed.is_empty() {
        return Err(MeshError::PeersFailed {
            rank,
            host,
            failed: failed.join(", "),
        });
    }
    let endpoints: Vec<SocketAddr> = endpoints.into_iter().flatten().collect();
    crate::postmortem::enter("connect");
    Ok(listening.connect_all(rank, &endpoints, world.hosts().to_vec(), token, timeouts.connect)?)
}
