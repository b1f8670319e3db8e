use super::*;
use crate::config::{Config, Mode};
use std::time::Duration;

/// Defect: `compare --help` and `lab down --help` had options with no
/// description.
#[test]
fn every_option_of_every_command_says_what_it_does() {
    use clap::CommandFactory;
    fn walk(cmd: &clap::Command, path: &str, bare: &mut Vec<String>) {
        for a in cmd.get_arguments() {
            let id = a.get_id().as_str();
            if id != "help" && id != "version" && a.get_help().is_none() {
                bare.push(format!("{path} --{id}"));
            }
        }
        for sub in cmd.get_subcommands() {
            walk(sub, &format!("{path} {}", sub.get_name()), bare);
        }
    }
    let mut bare = Vec::new();
    walk(&Cli::command(), "stallscope", &mut bare);
    assert!(bare.is_empty(), "options without help: {bare:?}");
}

/// Defect: presets were only for compare; run and the dashboard
/// refused `--preset`.
#[test]
fn run_and_the_dashboard_take_a_preset_under_the_options() {
    let w = workload(parse(&["run", "--preset", "rados-bench"]).unwrap());
    let c = layered(None, &w).unwrap();
    assert_eq!(c.mode, Mode::Journal);
    assert_eq!(c.record_size(), 4 << 20);
    let w = workload(parse(&["run", "--preset", "rados-bench", "--threads", "3"]).unwrap());
    assert_eq!(
        layered(None, &w).unwrap().threads,
        3,
        "options over the preset"
    );
    let dash = parse(&["--preset", "cassandra-commitlog"]).unwrap();
    assert_eq!(layered(None, &dash.workload).unwrap().threads, 32);
    let bad = workload(parse(&["run", "--preset", "nope"]).unwrap());
    assert!(layered(None, &bad).is_err());
}

#[test]
fn watch_help_lists_the_keys_and_run_help_runs() {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    let watch = cmd
        .find_subcommand_mut("watch")
        .unwrap()
        .render_long_help()
        .to_string();
    for k in crate::tui::keys::KEYS {
        assert!(watch.contains(k.help), "{}: {watch}", k.help);
    }
    let run = cmd
        .find_subcommand_mut("run")
        .unwrap()
        .render_long_help()
        .to_string();
    assert!(!run.contains("the live dashboard"), "{run}");
    assert!(run.contains("--preset rados-bench"), "{run}");
}

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("stallscope").chain(args.iter().copied()))
}

fn workload(cli: Cli) -> WorkloadArgs {
    match cli.command {
        Some(Command::Run(w)) => w,
        _ => panic!("not run"),
    }
}

#[test]
fn cli_overrides_file_overrides_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("c.toml");
    std::fs::write(&f, "threads = 8\nmode = \"buffered\"\ninterval = \"2s\"\n").unwrap();
    let w = workload(parse(&["run", "--threads", "2"]).unwrap());
    let c = layered(Some(&f), &w).unwrap();
    assert_eq!(c.threads, 2, "CLI wins");
    assert_eq!(c.mode, Mode::Buffered, "file beats default");
    assert_eq!(c.interval.0, Duration::from_secs(2));
    assert_eq!(c.segment_size, Config::default().segment_size, "default");
}

#[test]
fn bad_cli_values_are_refused() {
    for args in [
        &["run", "--mode", "fsync"][..],
        &["run", "--duration", "10x"],
        &["run", "--segment-size", "10x"],
        &["run", "--sync", "often"],
        &["run", "--threads", "-1"],
        &["run", "--duration", "-5s"],
    ] {
        let e = parse(args).unwrap_err();
        assert_eq!(e.exit_code(), 2, "{args:?}");
        assert!(e.to_string().contains(args[2]), "{args:?}: {e}");
    }
    let e = parse(&["run", "--duration", "-5s"])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cannot be negative"),
        "said as such, not as an unknown flag: {e}"
    );
}

#[test]
fn a_zero_threshold_is_echoed_without_a_unit_it_was_not_given() {
    let w = workload(parse(&["run", "--stall-threshold", "0ms"]).unwrap());
    let e = layered(None, &w).unwrap_err().0;
    assert!(e.contains("--stall-threshold 0 is below 1ms"), "{e}");
}

#[test]
fn record_size_checks_after_layering() {
    let w = workload(parse(&["run", "--record-size", "0"]).unwrap());
    assert!(layered(None, &w).unwrap_err().0.contains("--record-size 0"));
    let w = workload(parse(&["run", "--record-size", "64MiB"]).unwrap());
    assert!(layered(None, &w).unwrap_err().0.contains("segment"));
}

#[test]
fn trial_settings_and_run_options_parse() {
    use crate::analysis::advice::treatment::Setting;
    assert_eq!(
        parse_setting("vm.dirty_background_bytes=16777216").unwrap(),
        Setting::Sysctl {
            name: "vm.dirty_background_bytes".into(),
            value: "16777216".into()
        }
    );
    assert_eq!(
        parse_setting("/sys/class/bdi/{bdi}/strict_limit=1").unwrap(),
        Setting::Sysfs {
            path: "/sys/class/bdi/{bdi}/strict_limit".into(),
            value: "1".into()
        }
    );
    assert!(parse_setting("vm.x").is_err());
    assert!(parse_setting("=1").is_err());
    let cli = parse(&[
        "trial",
        "--setting",
        "vm.a=1",
        "--pairs",
        "6",
        "--",
        "--mode",
        "buffered",
        "--rate",
        "200",
    ])
    .unwrap();
    let Some(Command::Trial(t)) = cli.command else {
        panic!("not trial")
    };
    assert_eq!(t.lab.pairs, 6);
    assert_eq!(t.workload, ["--mode", "buffered", "--rate", "200"]);
    let base = Config::default();
    let c = with_run_args(&base, &t.workload).unwrap();
    assert_eq!((c.mode, c.rate), (Mode::Buffered, 200));
    assert_eq!(c.threads, base.threads, "untouched");
    let e = run_args(&["--threads".into(), "x".into()]).unwrap_err();
    assert!(e.to_string().contains("run options"), "{e}");
}

#[test]
fn unknown_config_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("c.toml");
    std::fs::write(&f, "threads = 8\nthreadz = 3\n").unwrap();
    let e = layered(Some(&f), &WorkloadArgs::default()).unwrap_err().0;
    assert!(e.contains("threadz") && e.contains("line 2"), "{e}");
}

/// `advise --try`'s workload is the recording's configuration given back
/// as `run` options (for the recipe, and for a write-path card's B runs):
/// they must make the same writers.
#[test]
fn a_recorded_configuration_round_trips_through_run_options() {
    use crate::cmd::advise::tries::workload::run_args as args_of;
    let mut custom = Config {
        rate: 960,
        thread_rate: 3,
        record_size: Some(crate::base::units::ByteSize(16 << 10)),
        stall_threshold: crate::base::units::Dur(Duration::from_millis(20)),
        journal_dir: Some("/var/tmp".into()),
        ..Config::default()
    };
    custom.sync = crate::config::SyncPolicy::Every(6400);
    let mut configs = vec![Config::default(), custom];
    for p in ["cassandra-commitlog", "rados-bench"] {
        configs.push(crate::config::preset::load(p).unwrap().config);
    }
    for c in configs {
        let args = args_of(&c);
        let back = with_run_args(&Config::default(), &args).unwrap();
        assert_eq!(back, c, "{args:?}");
    }
}

#[test]
fn advise_try_options_parse() {
    let cli = parse(&[
        "advise",
        "r.jsonl",
        "--try",
        "--card",
        "2",
        "--card",
        "4",
        "--pairs",
        "6",
        "--run-secs",
        "20s",
        "--measure",
        "max",
    ])
    .unwrap();
    let Some(Command::Advise(a)) = cli.command else {
        panic!("not advise")
    };
    let o = a.try_options().unwrap();
    assert_eq!(o.cards, [2, 4]);
    assert_eq!(o.trial.pairs, 6);
    assert_eq!(o.trial.run_secs, Some(Duration::from_secs(20)));
    assert_eq!(
        o.trial.measure,
        crate::cmd::advise::trial::Measure::MaxStall
    );
    let plain = parse(&["advise", "r.jsonl"]).unwrap();
    let Some(Command::Advise(a)) = plain.command else {
        panic!("not advise")
    };
    assert!(a.try_options().is_none());
    assert!(
        parse(&["advise", "r.jsonl", "--card", "1"]).is_err(),
        "--card without --try"
    );
}
