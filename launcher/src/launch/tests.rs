//! Unit tests of the mpirun command's building: host sources, placement, argv, flavours, quoting.

use super::*;

fn src(hosts: &[(&str, u32)]) -> HostSource {
    HostSource {
        hosts: hosts
            .iter()
            .map(|(h, s)| HostSlots {
                host: h.to_string(),
                slots: *s,
                max_slots: None,
            })
            .collect(),
        from: "hosts.txt".into(),
    }
}

fn plan(flavour: MpiFlavour) -> LaunchPlan {
    LaunchPlan {
        mpirun: "mpirun".into(),
        flavour,
        placement: vec![("n1".into(), 2), ("n2".into(), 2)],
        as_root: true,
        oversubscribe: false,
        rsh_agent: Some("/opt/agent.sh".into()),
        rsh_args: None,
        env: vec![
            ("MESHRUN_EXPECT_NODES".into(), Some("2".into())),
            ("NCCL_DEBUG".into(), None),
        ],
        extra_mpi_args: vec![],
        program: "/usr/bin/meshrun".into(),
        program_args: vec!["mesh-check".into()],
    }
}

#[test]
fn open_mpi_argv() {
    assert_eq!(
        build_argv(&plan(MpiFlavour::Openmpi)).join(" "),
        "mpirun --allow-run-as-root -np 4 --host n1:2,n2:2 --bind-to none --mca plm_rsh_agent /opt/agent.sh \
         --mca odls_base_sigkill_timeout 0 \
         -x MESHRUN_EXPECT_NODES=2 -x NCCL_DEBUG /usr/bin/meshrun mesh-check"
    );
}

#[test]
fn hydra_argv() {
    assert_eq!(
        build_argv(&plan(MpiFlavour::Mpich)).join(" "),
        "mpirun -n 4 -hosts n1:2,n2:2 -bind-to none -launcher ssh -launcher-exec /opt/agent.sh \
         -genv MESHRUN_EXPECT_NODES 2 -genvlist NCCL_DEBUG /usr/bin/meshrun mesh-check"
    );
}

#[test]
fn placement_fills_slots_in_order() {
    let s = src(&[("a", 2), ("b", 2), ("c", 2)]);
    assert_eq!(
        place(&s, Some(3), None, false).unwrap(),
        vec![("a".into(), 2), ("b".into(), 1)]
    );
    assert_eq!(place(&s, None, None, false).unwrap().len(), 3);
    assert_eq!(
        place(&s, None, Some(1), false).unwrap(),
        vec![("a".into(), 1), ("b".into(), 1), ("c".into(), 1)]
    );
    let e = place(&s, Some(7), None, false).unwrap_err().to_string();
    assert_eq!(e, "--np 7 is more than the 6 slots of the hosts from hosts.txt; add hosts, raise their slots, or pass --oversubscribe");
    assert!(place(&s, Some(4), Some(1), true).is_err());
    assert_eq!(
        place(&s, Some(8), None, true).unwrap(),
        vec![("a".into(), 3), ("b".into(), 3), ("c".into(), 2)]
    );
}

#[test]
fn flavours_from_real_version_banners() {
    assert_eq!(
        flavour_from_version("mpirun (Open MPI) 4.1.4\n\nReport bugs to"),
        Some(MpiFlavour::Openmpi)
    );
    assert_eq!(
        flavour_from_version("prterun (Open MPI) 5.0.3"),
        Some(MpiFlavour::Openmpi)
    );
    assert_eq!(
        flavour_from_version("HYDRA build details:\n    Version:  4.0.2"),
        Some(MpiFlavour::Mpich)
    );
    assert_eq!(
        flavour_from_version("Intel(R) MPI Library for Linux* OS, Version 2021.10"),
        Some(MpiFlavour::Intel)
    );
    assert_eq!(flavour_from_version("something else"), None);
}

#[test]
fn slurm_tasks() {
    assert_eq!(slurm_tasks_per_node("2(x3),1"), Some(vec![2, 2, 2, 1]));
    assert_eq!(slurm_tasks_per_node("4"), Some(vec![4]));
    assert_eq!(slurm_tasks_per_node("x"), None);
}

#[test]
fn host_sources_in_order() {
    let env = |k: &str| match k {
        "SLURM_JOB_NODELIST" => Some("gpu[01-03]".to_string()),
        "SLURM_TASKS_PER_NODE" => Some("4(x2),2".to_string()),
        _ => None,
    };
    let s = host_source(None, None, &env).unwrap().unwrap();
    assert_eq!(s.from, "SLURM_JOB_NODELIST");
    assert_eq!(s.hosts.iter().map(|h| h.slots).collect::<Vec<_>>(), vec![4, 4, 2]);
    let s = host_source(None, Some("n[1-2]"), &env).unwrap().unwrap();
    assert_eq!(s.from, "--hosts");
    assert!(host_source(None, None, &|_| None).unwrap().is_none());
    let e = host_source(None, Some("n[2-1]"), &env).unwrap_err().to_string();
    assert!(e.contains("reversed"), "{e}");
    let e = host_source(None, None, &|k| (k == "K_MPI_JOB_ROLE").then(|| "launcher".into()));
    // No /etc/mpi/hostfile on a developer machine: the error names that file.
    if !Path::new(MPIJOB_HOSTFILE).exists() {
        assert!(e.unwrap_err().to_string().contains(MPIJOB_HOSTFILE));
    }
}

#[test]
fn env_specs() {
    assert_eq!(parse_env("A_B=1").unwrap(), ("A_B".into(), Some("1".into())));
    assert_eq!(parse_env("PATH").unwrap(), ("PATH".into(), None));
    assert!(parse_env("1A").is_err());
    assert!(parse_env("A;B").is_err());
}
