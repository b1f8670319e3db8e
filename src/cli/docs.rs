//! Shell completions and the man page, made from the same clap tree.

use super::{Cli, ABOUT};

pub(super) const COMPLETIONS_EXAMPLES: &str = "Install:
  stallscope completions bash > ~/.local/share/bash-completion/completions/stallscope
  stallscope completions zsh > ~/.zfunc/_stallscope    (with fpath+=~/.zfunc in ~/.zshrc)
  stallscope completions fish > ~/.config/fish/completions/stallscope.fish";

pub(super) const MAN_EXAMPLES: &str = "Examples:
  stallscope man | man -l -
  sudo sh -c 'stallscope man > /usr/local/share/man/man1/stallscope.1'";

/// `stallscope completions SHELL`: the script for the whole command line.
/// Made in memory first: clap_complete panics when its writer fails (a
/// closed pipe), and an error here is the caller's to report.
pub fn write_completions(
    shell: clap_complete::Shell,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    use clap::CommandFactory;
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "stallscope", &mut script);
    out.write_all(&script)
}

/// `stallscope man`: the man page, its SUBCOMMANDS section naming each.
pub fn write_man(out: &mut dyn std::io::Write) -> std::io::Result<()> {
    use clap::CommandFactory;
    // NAME is one line: the first of ABOUT; the rest is the DESCRIPTION.
    let name_line = ABOUT
        .lines()
        .next()
        .unwrap_or_default()
        .trim_end_matches('.');
    let cmd = Cli::command().about(name_line).long_about(ABOUT);
    clap_mangen::Man::new(cmd).render(out)
}
