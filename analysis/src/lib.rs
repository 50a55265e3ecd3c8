//! What meshrun makes of measurements, apart from taking them: statistics, flag values and
//! units, the pairwise schedule and the verdict and blame of a pairwise run, configuration
//! findings, the report exporters of both kinds of run, and the readers and table of
//! `meshrun compare`. Nothing here touches a transport, MPI, CUDA or verbs, so the offline
//! commands, the fuzz targets and these modules' tests build without libmpi or rdma-core.

pub mod coll;
pub mod compare;
pub mod counters;
pub mod dtype;
pub mod export;
pub mod findings;
pub mod mesh_check;
pub mod metrics;
pub mod pairwise;
pub mod preflight;
pub mod schedule;
pub mod stats;
pub mod units;
