//! meshrun described for other programs: the man page (`meshrun manpage`) and shell completions
//! (`meshrun completions`).

use clap::CommandFactory;

use crate::cli::Cli;
use crate::exit::Status;

/// `meshrun completions SHELL`: the completion script on stdout.
pub fn completions(shell: clap_complete::Shell) -> i32 {
    clap_complete::generate(shell, &mut Cli::command(), "meshrun", &mut std::io::stdout());
    0
}

/// `meshrun manpage`: meshrun(1) in roff, with every subcommand and its flags (and the
/// `MESHRUN_<FLAG>` variable of each) on the one page.
pub fn manpage() -> i32 {
    use clap::CommandFactory;
    let cmd = crate::settings::source::with_env(Cli::command());
    let mut out = Vec::new();
    let page = clap_mangen::Man::new(cmd.clone());
    let mut ok = page.render(&mut out).is_ok();
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        // Each subcommand as its own section: name, about, options.
        let name = format!("meshrun-{}", sub.get_name());
        let sub = sub.clone().bin_name(format!("meshrun {}", sub.get_name()));
        let man = clap_mangen::Man::new(sub);
        out.extend_from_slice(format!(".SH \"{}\"\n", name.to_uppercase().replace('-', "\\-")).as_bytes());
        ok &= man.render_description_section(&mut out).is_ok() && man.render_options_section(&mut out).is_ok();
    }
    out.extend_from_slice(
        concat!(
            ".SH ENVIRONMENT\n",
            ".TP\n\\fBMESHRUN_\\fR\\fIFLAG\\fR\n",
            "Every flag: --tcp-if as MESHRUN_TCP_IF, -n (--iters) as MESHRUN_ITERS; a flag on the command ",
            "line wins; on/off flags take true or false. meshrun launch passes them to the ranks.\n",
            ".TP\n\\fBNCCL_SOCKET_IFNAME\\fR, \\fBNCCL_IB_HCA\\fR, \\fBNCCL_IB_GID_INDEX\\fR\n",
            "Where neither a flag nor MESHRUN_ sets them: --tcp-if, --devices (and --ib-port), --gid-index, ",
            "in NCCL's syntax (prefix names, = exact, ^ exclude; mlx5_0:1 names a port), so a check uses the ",
            "NICs and GID the training job will. The run header's NIC choice line says where each came from.\n",
        )
        .as_bytes(),
    );
    use std::io::Write;
    if !ok || std::io::stdout().write_all(&out).is_err() {
        ranks::eline!("meshrun manpage: could not write the page");
        return Status::Usage.code();
    }
    0
}
