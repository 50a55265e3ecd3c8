//! `meshrun`: prove a GPU/RDMA fabric works before a training job trusts it. This file only
//! dispatches: the command line is read (`command_line`), resolved into what the commands use
//! (`settings`), and each subcommand runs from its own module.

#![forbid(unsafe_code)]

mod actions;
mod bounded;
mod cli;
mod coll_cmd;
mod command_line;
mod compare_cmd;
mod devices_cmd;
mod driver;
mod exit;
mod inventory;
mod launch;
mod manual;
mod mesh_check_cmd;
mod p2p;
mod pairwise_cmd;
mod pairwise_gpu;
mod passes;
mod precheck;
mod preflight_cmd;
mod rails_auto;
mod rank;
mod report_files;
mod routed;
mod settings;
mod shell;
mod stall_json;
mod topology_cmd;
mod verdict_cmd;
mod workers;

use std::process::ExitCode;

use exit::Status;
use settings::{Here, Nics, Resolved};

fn main() -> ExitCode {
    let (cli, matches) = command_line::parse();
    let env = |k: &str| std::env::var(k).ok();
    let cmd = match settings::resolve(cli.command, &matches, Nics::Here(&Here::detect()), &env) {
        Ok(c) => c,
        Err(e) => {
            ranks::eline!("meshrun: {e}");
            return ExitCode::from(Status::Usage.code().clamp(0, 255) as u8);
        }
    };
    let code = match cmd {
        Resolved::Launch(a) => launch::run(a),
        Resolved::MeshCheck(s) => driver::drive(mesh_check_cmd::MeshCheck::new(s)),
        Resolved::Devices(a) => devices_cmd::run(a),
        Resolved::Compare(a) => compare_cmd::run(&a),
        Resolved::Verdict(a) => verdict_cmd::run(&a),
        Resolved::Topology(a) => topology_cmd::run(&a),
        Resolved::Pairwise(s) => driver::drive(pairwise_cmd::Pairwise::new(s)),
        Resolved::Preflight(s) => preflight_cmd::run(s),
        Resolved::Coll(s) => coll_cmd::run(s),
        Resolved::Completions(a) => manual::completions(a.shell),
        Resolved::Manpage => manual::manpage(),
    };
    exit::self_report(code);
    ExitCode::from(code.clamp(0, 255) as u8)
}
