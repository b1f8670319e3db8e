use stallscope::cli::{Cli, Command};
use stallscope::sink::printer::Printer;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

fn main() {
    let cli = stallscope::cli::parse_or_exit();
    if let Err(e) = real_main(cli) {
        // `stallscope run | head`: the reader left, nothing went wrong.
        let closed = |c: &(dyn std::error::Error + 'static)| {
            c.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
        };
        if e.chain().any(closed) {
            return;
        }
        eprintln!("stallscope: error: {e:#}");
        std::process::exit(stallscope::base::error::exit_code(&e));
    }
}

fn real_main(cli: Cli) -> anyhow::Result<()> {
    cli.check_placement()?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(sig, stop.clone())?;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        // Knobs a dead stallscope (a killed trial, lab or test) left changed.
        stallscope::cmd::lab::down::recover_knobs(&stallscope::knob::Registry::machine());
    }
    let config = cli.config.as_deref();
    match cli.command {
        Some(Command::Run(args)) => run(config, &args, &stop),
        Some(Command::Replay { file, speed, ui }) => replay(&file, speed, &ui, &stop),
        Some(Command::Report {
            file,
            svg,
            csv,
            from,
            to,
        }) => stallscope::cmd::report_cmd::run(&file, svg.as_deref(), csv.as_deref(), from, to),
        Some(Command::Advise(a)) => advise(&a, &stop),
        Some(Command::Compare(a)) => compare(config, a, &stop),
        Some(Command::Lab(cmd)) => lab(cmd, &stop),
        Some(Command::Trial(a)) => trial(config, &a, &stop),
        Some(Command::Imitate {
            recording,
            dir,
            repeat,
            check,
            json,
        }) => stallscope::cmd::imitate::imitate(
            &stallscope::cmd::imitate::Options {
                recording,
                dir,
                repeat,
                check,
                json,
            },
            &stop,
        ),
        Some(Command::Probe { targets }) => probe(&targets),
        Some(Command::Watch { workload, ui }) => dashboard(config, &workload, &ui, stop),
        Some(Command::Completions { shell }) => Ok(stallscope::cli::write_completions(
            shell,
            &mut std::io::stdout().lock(),
        )?),
        Some(Command::Man) => Ok(stallscope::cli::write_man(&mut std::io::stdout().lock())?),
        None => dashboard(config, &cli.workload, &cli.ui, stop),
    }
}

/// `stallscope run`: headless, table or JSON lines on stdout.
fn run(
    config: Option<&std::path::Path>,
    args: &stallscope::cli::WorkloadArgs,
    stop: &AtomicBool,
) -> anyhow::Result<()> {
    if listed_presets(args) {
        return Ok(());
    }
    let mut cfg = stallscope::cli::layered(config, args)?;
    let _imitation = stallscope::cmd::imitate::attach(&mut cfg, args.imitate.as_deref(), false)?;
    if !wait_for_observed(&cfg, args, stop)? {
        return Ok(());
    }
    let mut metrics = stallscope::sink::metrics::start(args.metrics_listen)?;
    let stdout = std::io::stdout().lock();
    let mut printer = Printer::new(std::io::BufWriter::new(stdout), cfg.format);
    let mut sink = stallscope::sink::Tee(&mut printer, &mut metrics);
    stallscope::session::run(&cfg, args.record.as_deref(), stop, &mut sink)?;
    Ok(())
}

/// `stallscope replay`: the dashboard fed from a recording.
fn replay(
    file: &std::path::Path,
    speed: u32,
    ui: &stallscope::cli::UiArgs,
    stop: &AtomicBool,
) -> anyhow::Result<()> {
    let rec = stallscope::sink::recording::read(file)
        .map_err(|e| stallscope::base::error::UsageError::new(format!("{e:#}")))?;
    if let Some(note) = rec.damage_note() {
        eprintln!("stallscope: {note}");
    }
    stallscope::tui::replay::run_replay(rec, &ui.options(), speed, stop)
}

/// `stallscope lab up|down|status|exec|adopt`.
fn lab(cmd: stallscope::cli::LabCommand, stop: &AtomicBool) -> anyhow::Result<()> {
    use stallscope::cli::LabCommand;
    use stallscope::cmd::lab::{cmd, down, exec};
    match cmd {
        LabCommand::Up {
            fs,
            size,
            dir,
            cap,
            dirty_bytes,
            dirty_background_bytes,
            stable_writes,
        } => cmd::up(&stallscope::cmd::lab::UpOptions {
            fs,
            size,
            dir,
            cap,
            dirty_bytes,
            dirty_background_bytes,
            stable_writes,
        }),
        LabCommand::Down { dir, force, lazy } => {
            down::down(&dir, down::DownOptions { force, lazy }, stop)
        }
        LabCommand::Exec { dir, command } => std::process::exit(exec::exec(&dir, &command)?),
        LabCommand::Adopt { dir, pid } => exec::adopt(&dir, pid),
        LabCommand::Status { dir } => cmd::status(&dir),
    }
}

/// `stallscope probe`: what this machine can show.
fn probe(targets: &[std::path::PathBuf]) -> anyhow::Result<()> {
    // A read-only target still gets its verdict (which says so).
    for t in targets {
        stallscope::source::scratch::check_dir(t)?;
    }
    print!(
        "{}",
        stallscope::cmd::probe::render(&stallscope::cmd::probe::gather(targets))
    );
    Ok(())
}

/// The dashboard (`stallscope` or `stallscope watch`).
fn dashboard(
    config: Option<&std::path::Path>,
    workload: &stallscope::cli::WorkloadArgs,
    ui: &stallscope::cli::UiArgs,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<()> {
    if listed_presets(workload) {
        return Ok(());
    }
    let mut cfg = stallscope::cli::layered(config, workload)?;
    let _imitation = stallscope::cmd::imitate::attach(&mut cfg, workload.imitate.as_deref(), true)?;
    if !wait_for_observed(&cfg, workload, &stop)? {
        return Ok(());
    }
    stallscope::tui::term::run_dashboard(
        &cfg,
        &ui.options(),
        workload.record.clone(),
        workload.metrics_listen,
        stop,
    )
}

/// `--wait`: until the processes to observe run (false: stopped first).
/// Without it, a missing one is the session's error.
fn wait_for_observed(
    cfg: &stallscope::config::Config,
    args: &stallscope::cli::WorkloadArgs,
    stop: &AtomicBool,
) -> anyhow::Result<bool> {
    if !args.wait {
        return Ok(true);
    }
    if cfg.observe.is_empty() && cfg.observe_name.is_empty() {
        return Err(stallscope::base::error::UsageError::new(
            "--wait waits for a process to observe: give --observe-name NAME or --observe PID",
        )
        .into());
    }
    Ok(stallscope::source::observe::wait_for(
        std::path::Path::new("/proc"),
        &cfg.observe,
        &cfg.observe_name,
        std::time::Duration::from_millis(100),
        stop,
        &mut |line| eprintln!("stallscope: {line}"),
    ))
}

/// `--preset list`: prints the shipped presets (and the caller stops).
fn listed_presets(args: &stallscope::cli::WorkloadArgs) -> bool {
    let list = args.preset.as_deref() == Some("list");
    if list {
        print!("{}", stallscope::config::preset::render_list());
    }
    list
}

/// `stallscope compare`: defaults < preset < config file < options.
fn compare(
    config: Option<&std::path::Path>,
    a: stallscope::cli::CompareArgs,
    stop: &std::sync::atomic::AtomicBool,
) -> anyhow::Result<()> {
    use stallscope::base::error::UsageError;
    use stallscope::cmd::compare::{render_table, run_compare, CompareOptions};
    use stallscope::config::preset;
    if a.preset.as_deref() == Some("list") {
        print!("{}", preset::render_list());
        return Ok(());
    }
    let p = a.preset.as_deref().map(preset::load).transpose()?;
    let mut cfg = match (&p, config) {
        (Some(p), c) => p.with_config_file(c)?,
        (None, Some(c)) => stallscope::config::Config::from_file(c)?,
        (None, None) => stallscope::config::Config::default(),
    };
    let mut targets = a.targets.clone();
    if a.lab {
        targets.extend(stallscope::cmd::lab::cmd::lab_targets(&a.lab_dir)?);
    }
    if targets.is_empty() {
        return Err(UsageError::new("compare needs --target DIR (twice or more) or --lab").into());
    }
    cfg.targets = targets;
    if let Some(v) = a.record_size {
        cfg.record_size = Some(v);
    }
    macro_rules! set {
        ($($f:ident),*) => { $( if let Some(v) = a.$f { cfg.$f = v; } )* };
    }
    set!(segment_size, sync, disk_budget, commit_interval, interval);
    cfg.duration = None;
    cfg.validate()?;
    fn pick<T: Clone>(cli: &[T], preset: Option<&Vec<T>>) -> Vec<T> {
        if cli.is_empty() {
            preset.cloned().unwrap_or_default()
        } else {
            cli.to_vec()
        }
    }
    let opts = CompareOptions {
        modes: pick(&a.modes, p.as_ref().map(|p| &p.modes)),
        threads: pick(&a.threads, p.as_ref().map(|p| &p.threads)),
        base: cfg,
        each: a.each.0,
        record: a.record.clone(),
        svg: a.svg.clone(),
        drain: stallscope::cmd::compare::Drain {
            on: !a.no_drain,
            machine: a.drop_caches,
        },
    };
    let mut last_len = 0usize;
    let mut progress = |line: &str| {
        let pad = last_len.saturating_sub(line.chars().count());
        eprint!("\r{line}{}", " ".repeat(pad));
        last_len = line.chars().count();
        if line.starts_with("writing back") || line.contains("done") || line.starts_with("wrote") {
            eprintln!();
            last_len = 0;
        }
    };
    let results = run_compare(&opts, stop, &mut progress)?;
    eprintln!();
    print!("{}", render_table(&results));
    Ok(())
}

/// `stallscope advise`, and with `--try` the cards tried in the lab.
fn advise(a: &stallscope::cli::AdviseArgs, stop: &AtomicBool) -> anyhow::Result<()> {
    use stallscope::cmd::advise::{cmd, trial::progress::Line};
    let Some(o) = a.try_options() else {
        return cmd::run(&a.recording, a.format);
    };
    let mut line = Line::default();
    let r = cmd::run_try(&a.recording, a.format, &o, stop, &mut |s| line.show(s));
    line.finish();
    r
}

/// `stallscope trial --observe`: one change tried under the live server.
fn live_trial(
    config: Option<&std::path::Path>,
    a: &stallscope::cli::TrialArgs,
    stop: &AtomicBool,
) -> anyhow::Result<()> {
    use stallscope::base::error::UsageError;
    use stallscope::cli::TrialFormat;
    use stallscope::cmd::advise::trial::live;
    if !a.mount_options.is_empty() || a.run_args.is_some() || a.svg.is_some() {
        return Err(UsageError::new(
            "a live trial flips kernel knobs only (--setting): --mount-option, --run-args and --svg are for the lab",
        )
        .into());
    }
    let w = stallscope::cli::run_args(&a.workload)?;
    let mut cfg = stallscope::cli::layered(config, &w)?;
    if !cfg.targets.is_empty() || cfg.duration.is_some() {
        return Err(UsageError::new(
            "a live trial runs no writers and sets its own length: no --target or --duration after `--`",
        )
        .into());
    }
    cfg.observe.extend(&a.observe);
    cfg.observe_name.extend(a.observe_name.iter().cloned());
    cfg.validate()?;
    let o = live::LiveOptions {
        settings: a.settings.clone(),
        pairs: a.lab.pairs,
        window: a.window.map(|d| d.0),
        measure: a.lab.measure.measure(),
        device_of: a.lab.target.clone(),
    };
    let mut line = stallscope::cmd::advise::trial::progress::Line::default();
    let r = live::run(&cfg, &o, stop, &mut |s, keep| {
        if keep {
            line.say(s)
        } else {
            line.show(s)
        }
    });
    line.finish();
    let l = r?;
    match a.format {
        TrialFormat::Text => print!("{}", live::show::render(&l)),
        TrialFormat::Json => println!("{}", serde_json::to_string_pretty(&l)?),
    }
    Ok(())
}

/// `stallscope trial`: one change tried in the lab.
fn trial(
    config: Option<&std::path::Path>,
    a: &stallscope::cli::TrialArgs,
    stop: &AtomicBool,
) -> anyhow::Result<()> {
    use stallscope::analysis::advice::treatment::{Setting, Treatment};
    use stallscope::cli::TrialFormat;
    use stallscope::cmd::advise::trial::{self as t, Workload};
    if !a.observe.is_empty() || !a.observe_name.is_empty() {
        return live_trial(config, a, stop);
    }
    if a.window.is_some() {
        return Err(stallscope::base::error::UsageError::new(
            "--window is for a live trial (--observe PID or --observe-name NAME); a lab trial's runs are --run-secs",
        )
        .into());
    }
    let w = stallscope::cli::run_args(&a.workload)?;
    let workload = Workload {
        config: stallscope::cli::layered(config, &w)?,
        args: a.workload.clone(),
        with_args: Some(stallscope::cli::with_run_args),
    };
    let mut settings = a.settings.clone();
    settings.extend(
        a.mount_options
            .iter()
            .map(|o| Setting::MountOption { option: o.clone() }),
    );
    if let Some(r) = &a.run_args {
        let args = r.split_whitespace().map(String::from).collect();
        settings.push(Setting::RunArgs { args });
    }
    if settings.is_empty() {
        return Err(stallscope::base::error::UsageError::new(
            "trial needs a change: --setting, --mount-option or --run-args",
        )
        .into());
    }
    let o = a.lab.options(!a.no_drain);
    if let Some(svg) = &a.svg {
        stallscope::cmd::outfile::check_dir(svg)?;
    }
    let treatment = Treatment { settings };
    let mut line = t::progress::Line::default();
    let r = t::try_charted(&workload, &treatment, &o, stop, &mut |s| line.show(s));
    line.finish();
    let c = r?;
    match a.format {
        TrialFormat::Text => print!("{}", t::show::render(&c.outcome)),
        TrialFormat::Json => println!("{}", serde_json::to_string_pretty(&c.outcome)?),
    }
    if let Some(svg) = &a.svg {
        t::svg::write(svg, &c.outcome, &c.treatment, &c.a, &c.b)?;
        eprintln!("stallscope: wrote {}", svg.display());
    }
    Ok(())
}
