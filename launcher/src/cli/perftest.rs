//! perftest's flags that `meshrun pairwise` does not run as perftest does: each is taken by the
//! parser (hidden from `--help`) so a pasted perftest line gets one line saying what the flag
//! does in perftest and what to use in meshrun, never clap's "unexpected argument" and never a
//! silent change of meaning. Flags that mean the same in both (`-s`, `-n`, `-D`, `-T`, `-m`,
//! ...) are ordinary flags in `pairwise.rs`; the list of both is perftest's own
//! (`src/perftest_parameters.c`, its `long_options` and `getopt_long` string).

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches};

/// A perftest flag refused on `pairwise`: its letter, its long names, whether it takes a value,
/// what it does in perftest, the values that mean what meshrun does anyway (accepted), and
/// what to do in meshrun instead.
pub struct Refused {
    pub short: Option<char>,
    pub long: &'static [&'static str],
    pub takes_value: bool,
    pub what: &'static str,
    /// Values (case-insensitive) with which the flag asks for what meshrun does: accepted.
    pub same: &'static [&'static str],
    pub instead: &'static str,
}

const fn flag(
    short: Option<char>,
    long: &'static [&'static str],
    what: &'static str,
    instead: &'static str,
) -> Refused {
    Refused {
        short,
        long,
        takes_value: false,
        what,
        same: &[],
        instead,
    }
}

const fn value(
    short: Option<char>,
    long: &'static [&'static str],
    what: &'static str,
    same: &'static [&'static str],
    instead: &'static str,
) -> Refused {
    Refused {
        short,
        long,
        takes_value: true,
        what,
        same,
        instead,
    }
}

const RAW_ETH: &str = "meshrun tests RDMA reliable-connected queue pairs between MPI ranks, not raw Ethernet; drop it";
const NO_OTHER_GPU: &str = "meshrun's GPU memory is CUDA's: use --use-cuda [ORDINAL] (or --use-cuda-dmabuf)";
const NONE: &str = "meshrun has no such setting; drop it";

/// Every perftest flag `pairwise` refuses, in perftest's order.
pub const REFUSED: &[Refused] = &[
    value(
        Some('c'),
        &["connection"],
        "perftest's connection type",
        &["RC"],
        "meshrun tests reliable-connected queue pairs only; give -c RC or drop -c",
    ),
    value(
        Some('u'),
        &["qp-timeout"],
        "perftest's queue pair ACK timeout",
        &["14"],
        "meshrun's queue pairs use 14 (perftest's default); --timeout SECONDS bounds every wait; drop -u",
    ),
    flag(
        Some('e'),
        &["events"],
        "perftest's completion events",
        "meshrun polls completions, as perftest does without -e; drop -e",
    ),
    value(
        Some('X'),
        &["vector"],
        "perftest's completion vector",
        &[],
        "meshrun polls completions, as perftest does without -e; drop -X",
    ),
    value(
        Some('I'),
        &["inline_size"],
        "perftest's inline size",
        &[],
        "meshrun inlines up to 220 bytes where the queue pair grants it; drop -I",
    ),
    value(
        Some('o'),
        &["outs"],
        "perftest's outstanding reads",
        &[],
        "meshrun keeps -t operations in flight; use -t DEPTH",
    ),
    flag(Some('g'), &["mcg"], "perftest's multicast", RAW_ETH),
    flag(
        Some('z'),
        &["comm_rdma_cm"],
        "perftest's rdma_cm for exchanging endpoints",
        "meshrun exchanges endpoints over MPI; for queue pairs connected through rdma_cm use -R",
    ),
    value(Some('L'), &["hop_limit"], "perftest's GRH hop limit", &[], NONE),
    value(Some('M'), &["MGID"], "perftest's multicast group", &[], RAW_ETH),
    value(
        Some('r'),
        &["rx-depth"],
        "perftest's receive queue depth",
        &[],
        "meshrun posts as many receives as -t; use -t DEPTH",
    ),
    value(
        Some('Q'),
        &["cq-mod"],
        "perftest's CQ moderation",
        &["100"],
        "meshrun signals one send completion in 100 (perftest's default); drop -Q",
    ),
    flag(
        Some('N'),
        &["noPeak"],
        "perftest's no-peak report",
        "meshrun always reports the peak; drop -N",
    ),
    flag(
        Some('C'),
        &["report-cycles"],
        "perftest's latency in CPU cycles",
        "meshrun reports latency in microseconds; drop -C",
    ),
    flag(
        Some('H'),
        &["report-histogrm"],
        "perftest's latency histogram",
        "meshrun reports perftest's latency statistics, and --json every figure; drop -H",
    ),
    flag(
        Some('U'),
        &["report-unsorted"],
        "perftest's unsorted latency samples",
        "meshrun reports perftest's latency statistics, and --json every figure; drop -U",
    ),
    value(
        Some('A'),
        &["atomic_type"],
        "perftest's atomic operation",
        &[],
        "meshrun tests --op write, read or send; drop -A",
    ),
    flag(
        Some('O'),
        &["dualport"],
        "perftest's dual-port test",
        "meshrun tests one port per rank: start a rank per port, --devices DEV,DEV and -i PORT",
    ),
    value(
        Some('l'),
        &["post_list"],
        "perftest's post list",
        &["1"],
        "meshrun posts one work request per call (-t sets how many are in flight); drop -l",
    ),
    value(
        Some('f'),
        &["margin"],
        "perftest's -D margin",
        &[],
        "meshrun times all of -D, after its own warm-up (--warmup N); drop -f",
    ),
    value(
        Some('B'),
        &["source_mac"],
        "perftest's raw Ethernet source MAC",
        &[],
        RAW_ETH,
    ),
    value(
        Some('E'),
        &["dest_mac"],
        "perftest's raw Ethernet destination MAC",
        &[],
        RAW_ETH,
    ),
    value(
        Some('J'),
        &["dest_ip"],
        "perftest's raw Ethernet destination IP",
        &[],
        RAW_ETH,
    ),
    value(
        Some('j'),
        &["source_ip", "bind_source_ip"],
        "perftest's source address for rdma_cm or raw Ethernet",
        &[],
        "every rank runs this command, so one address cannot be each rank's; with -R each rank binds the IPv4 address \
         of the GID it chose: pick the NIC with -d DEV -x GID_INDEX (meshrun devices lists them) or --tcp-if over TCP",
    ),
    value(
        Some('K'),
        &["dest_port"],
        "perftest's raw Ethernet destination port",
        &[],
        RAW_ETH,
    ),
    value(
        Some('k'),
        &["source_port"],
        "perftest's raw Ethernet source port",
        &[],
        RAW_ETH,
    ),
    value(
        Some('Y'),
        &["ethertype"],
        "perftest's raw Ethernet ethertype",
        &[],
        RAW_ETH,
    ),
    value(
        Some('w'),
        &["limit_bw"],
        "perftest's bandwidth floor",
        &[],
        "use --expect-gbps GBPS (in Gb/s): pairs below it are slow",
    ),
    value(
        Some('y'),
        &["limit_msgrate"],
        "perftest's message rate floor",
        &[],
        "meshrun judges bandwidth: use --expect-gbps GBPS",
    ),
    flag(
        Some('Z'),
        &["server"],
        "perftest's server side",
        "every meshrun rank is both sides: start it on every host with mpirun or meshrun launch; drop -Z",
    ),
    flag(
        Some('P'),
        &["client"],
        "perftest's client side",
        "every meshrun rank is both sides: start it on every host with mpirun or meshrun launch; drop -P",
    ),
    flag(
        Some('v'),
        &["mac_fwd"],
        "perftest's raw Ethernet MAC forwarding",
        RAW_ETH,
    ),
    flag(Some('G'), &["use_rss"], "perftest's raw Ethernet RSS", RAW_ETH),
    value(
        Some('W'),
        &["report-counters"],
        "perftest's counters report",
        &[],
        "meshrun reads the NICs' counters around every pass itself; drop -W",
    ),
    flag(
        None,
        &["run_infinitely"],
        "perftest's endless run",
        "use --repeat-for DURATION (or --repeat N): passes of the whole test, judged over time",
    ),
    flag(None, &["out_json"], "perftest's JSON report", "use --json FILE"),
    value(
        None,
        &["out_json_file"],
        "perftest's JSON report file",
        &[],
        "use --json FILE",
    ),
    flag(None, &["cpu_util"], "perftest's CPU utilisation", NONE),
    value(
        None,
        &[
            "use_rocm",
            "use_neuron",
            "use_hl",
            "use_mlu",
            "use_opencl",
            "use_musa",
            "use_musa_bus_id",
            "opencl_platform_id",
            "cuda_mem_type",
            "gpu_touch",
            "use_ib_dm_dmabuf",
        ],
        "perftest's accelerator memory",
        &[],
        NO_OTHER_GPU,
    ),
    flag(
        None,
        &[
            "use_rocm_dmabuf",
            "use_neuron_dmabuf",
            "use_mlu_dmabuf",
            "use_musa_dmabuf",
            "use_musa_pcie_mapping",
            "use_cuda_pcie_mapping",
            "use_data_direct",
        ],
        "perftest's accelerator memory",
        NO_OTHER_GPU,
    ),
    flag(
        None,
        &["ipv6", "ipv6-addr", "raw_ipv6"],
        "perftest's IPv6 GID or address",
        "meshrun picks the GID as perftest does (IPv4-mapped first); choose another with -x GID_INDEX",
    ),
    value(
        None,
        &["mmap", "mmap-offset", "payload_file_path"],
        "perftest's buffer from a file",
        &[],
        NONE,
    ),
    flag(
        None,
        &[
            "odp",
            "use_hugepages",
            "use_old_post_send",
            "mr_per_qp",
            "no_lock",
            "use-srq",
            "tcp",
            "dont_xchg_versions",
            "reversed",
            "report-both",
            "perform_warm_up",
            "vlan_en",
            "aes_xts",
            "encrypt_on_tx",
            "sig_before",
            "disable_pcie_relaxed",
            "use_ooo",
            "write_with_imm",
            "send_with_imm",
            "no_enhanced_reorder",
            "unsolicited_write",
            "connectionless",
            "disable_dynamic_polling",
            "sig_offload",
            "data_validation",
            "data_validation_debug",
            "disable_numa",
        ],
        "a perftest option",
        NONE,
    ),
    value(
        None,
        &[
            "force-link",
            "dlid",
            "pkey_index",
            "flow_label",
            "retry_count",
            "latency_gap",
            "rate_limit",
            "rate_limit_type",
            "rate_units",
            "burst_size",
            "typical_pkt_size",
            "output",
            "wait_destroy",
            "flows",
            "flows_burst",
            "reply_every",
            "vlan_pcp",
            "recv_post_list",
            "aes_block_size",
            "kek_path",
            "credentials_path",
            "data_enc_keys_number",
            "data_enc_key_app_path",
            "log_dci_streams",
            "log_active_dci_streams",
            "congest_type",
            "cqe_poll",
            "tph_mem",
            "cpu_id",
            "ph",
            "pin_cores",
            "numa_node",
            "remote_mac",
            "local_mac",
            "remote_ip",
            "local_ip",
            "remote_port",
            "local_port",
        ],
        "a perftest option",
        &[],
        NONE,
    ),
];

/// The clap id of a refused flag's argument: its first long name.
fn id(r: &Refused) -> String {
    format!("perftest_refused_{}", r.long[0])
}

/// Whether clap's argument `a` is one of these (not read from `MESHRUN_<FLAG>`: they are
/// perftest's spellings only).
pub fn is_refused(a: &Arg) -> bool {
    a.get_id().as_str().starts_with("perftest_refused_")
}

/// The clap id of perftest's server address, its client's last argument.
const SERVER: &str = "perftest_refused__address";

/// The first refused perftest flag given on the command line (or perftest's server address), as
/// one line: what was given, what it does in perftest, what to use instead. None where none was
/// (or each was given a value meaning what meshrun does).
#[derive(Debug, Default, Clone)]
pub struct PerftestRefused {
    pub refusal: Option<Box<str>>,
}

impl clap::FromArgMatches for PerftestRefused {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        Ok(PerftestRefused { refusal: first(m) })
    }
    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        self.refusal = first(m);
        Ok(())
    }
}

impl clap::Args for PerftestRefused {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        let server = Arg::new(SERVER).value_name("SERVER").hide(true).required(false);
        REFUSED.iter().fold(cmd.arg(server), |cmd, r| {
            // clap keeps `&'static str` ids: one small string per flag, once per process.
            let name: &'static str = Box::leak(id(r).into_boxed_str());
            let mut a = Arg::new(name)
                .long(r.long[0])
                .aliases(r.long[1..].iter().copied())
                .hide(true)
                .required(false);
            if let Some(c) = r.short {
                a = a.short(c);
            }
            a = if r.takes_value {
                a.action(ArgAction::Set).num_args(1).allow_hyphen_values(true)
            } else {
                a.action(ArgAction::SetTrue)
            };
            cmd.arg(a)
        })
    }
    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// [`PerftestRefused`]'s line from the matches.
fn first(m: &ArgMatches) -> Option<Box<str>> {
    flags(m).or_else(|| server(m)).map(String::into_boxed_str)
}

/// perftest's server address, where one was given.
fn server(m: &ArgMatches) -> Option<String> {
    let s = m.get_one::<String>(SERVER)?;
    Some(format!(
        "{s} (perftest's server address, its client's last argument): meshrun tests every pair of the MPI job's \
         ranks; drop it and give the hosts to meshrun launch (--hosts or --hostfile)"
    ))
}

/// The first refused flag given.
fn flags(m: &ArgMatches) -> Option<String> {
    REFUSED.iter().find_map(|r| {
        let id = id(r);
        if m.value_source(&id) != Some(ValueSource::CommandLine) {
            return None;
        }
        let spelled = match r.short {
            Some(c) => format!("-{c}/--{}", r.long[0]),
            None => format!("--{}", r.long[0]),
        };
        if !r.takes_value {
            return Some(format!("{spelled} ({}): {}", r.what, r.instead));
        }
        let v = m.get_one::<String>(&id).cloned().unwrap_or_default();
        if r.same.iter().any(|s| s.eq_ignore_ascii_case(v.trim())) {
            return None;
        }
        Some(format!("{spelled} {v} ({}): {}", r.what, r.instead))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, FromArgMatches};

    /// The refusal `meshrun pairwise ARGS` parses to.
    fn refusal(args: &[&str]) -> Option<String> {
        let argv = ["meshrun", "pairwise"].into_iter().chain(args.iter().copied());
        let m = crate::cli::Cli::command()
            .try_get_matches_from(argv)
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
        let cli = crate::cli::Cli::from_arg_matches(&m).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        let crate::cli::Command::Pairwise(a) = cli.command else {
            panic!("pairwise")
        };
        a.refused.refusal.map(String::from)
    }

    #[test]
    fn every_refused_flag_in_every_spelling_is_one_line_saying_what_to_do() {
        for r in REFUSED {
            let mut spellings: Vec<String> = r.long.iter().map(|l| format!("--{l}")).collect();
            spellings.extend(r.short.map(|c| format!("-{c}")));
            for s in spellings {
                let args: Vec<&str> = if r.takes_value { vec![&s, "7"] } else { vec![&s] };
                let line = refusal(&args).unwrap_or_else(|| panic!("{s} was not refused"));
                assert!(!line.contains('\n'), "{line}");
                assert!(line.contains(r.what) && line.ends_with(r.instead), "{line}");
            }
        }
    }

    #[test]
    fn values_meaning_what_meshrun_does_are_accepted_and_a_server_address_is_refused() {
        for args in [
            &["-c", "RC"][..],
            &["-c", "rc"],
            &["-Q", "100"],
            &["-u", "14"],
            &["-l", "1"],
            &[],
        ] {
            assert_eq!(refusal(args), None, "{args:?}");
        }
        assert!(
            refusal(&["-c", "UD"]).is_some_and(|l| l.starts_with("-c/--connection UD (perftest's connection type)"))
        );
        let l = refusal(&["10.0.0.1"]).unwrap_or_default();
        assert!(l.starts_with("10.0.0.1 (perftest's server address"), "{l}");
        // A flag is reported before the address, whatever their order.
        let l = refusal(&["10.0.0.1", "--cpu_util"]).unwrap_or_default();
        assert!(l.starts_with("--cpu_util"), "{l}");
    }
}
