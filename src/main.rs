use clap::Parser;
use stallscope::cli::{Cli, Command};
use stallscope::output::Printer;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

fn main() {
    let cli = Cli::parse();
    if let Err(e) = real_main(cli) {
        eprintln!("stallscope: error: {e:#}");
        std::process::exit(stallscope::error::exit_code(&e));
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
    match cli.command {
        Some(Command::Run(args)) => {
            let cfg = stallscope::cli::layered(cli.config.as_deref(), &args)?;
            let stdout = std::io::stdout().lock();
            let mut printer = Printer::new(std::io::BufWriter::new(stdout), cfg.format);
            stallscope::run::run(&cfg, args.record.as_deref(), &stop, &mut printer)?;
            Ok(())
        }
        Some(Command::Replay { file, speed, ui }) => {
            let rec = stallscope::recording::read(&file)
                .map_err(|e| stallscope::error::UsageError::new(format!("{e:#}")))?;
            if let Some(note) = rec.damage_note() {
                eprintln!("stallscope: {note}");
            }
            stallscope::tui::replay::run_replay(rec, &ui.options(), speed, &stop)
        }
        Some(Command::Report {
            file,
            svg,
            csv,
            from,
            to,
        }) => stallscope::report_cmd::run(&file, svg.as_deref(), csv.as_deref(), from, to),
        Some(Command::Lab(cmd)) => {
            use stallscope::cli::LabCommand;
            use stallscope::lab::cmd;
            match cmd {
                LabCommand::Up {
                    fs,
                    size,
                    dir,
                    cap,
                    dirty_bytes,
                    dirty_background_bytes,
                    stable_writes,
                } => cmd::up(&cmd::UpOptions {
                    fs,
                    size,
                    dir,
                    cap,
                    dirty_bytes,
                    dirty_background_bytes,
                    stable_writes,
                }),
                LabCommand::Down { dir } => cmd::down(&dir),
                LabCommand::Status { dir } => cmd::status(&dir),
            }
        }
        Some(Command::Probe { targets }) => {
            for t in &targets {
                stallscope::scratch::check_target(t)?;
            }
            print!(
                "{}",
                stallscope::probe::render(&stallscope::probe::gather(&targets))
            );
            Ok(())
        }
        Some(Command::Watch { workload, ui }) => {
            let cfg = stallscope::cli::layered(cli.config.as_deref(), &workload)?;
            stallscope::tui::term::run_dashboard(&cfg, &ui.options(), workload.record.clone(), stop)
        }
        None => {
            let cfg = stallscope::cli::layered(cli.config.as_deref(), &cli.workload)?;
            stallscope::tui::term::run_dashboard(
                &cfg,
                &cli.ui.options(),
                cli.workload.record.clone(),
                stop,
            )
        }
    }
}
