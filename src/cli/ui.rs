//! How the dashboard draws (watch, replay and the bare command).

use crate::base::units::Dur;
use clap::Args;

/// How the dashboard draws.
#[derive(Args, Debug, Clone)]
pub struct UiArgs {
    /// Most redraws per second (redraws happen only on new data or input).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=60))]
    pub fps: u32,

    /// Time span the charts show.
    #[arg(
        long,
        value_name = "DUR",
        default_value = "120s",
        allow_hyphen_values = true
    )]
    pub window: Dur,

    /// Plain ASCII: no braille or box-drawing glyphs.
    #[arg(long)]
    pub ascii: bool,

    /// No colours (also when NO_COLOR is set).
    #[arg(long)]
    pub no_color: bool,
}

impl UiArgs {
    pub fn options(&self) -> crate::tui::term::UiOptions {
        let no_color_env = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        crate::tui::term::UiOptions {
            fps: self.fps,
            window_s: self.window.0.as_secs().clamp(10, 3600),
            ascii: self.ascii,
            color: !(self.no_color || no_color_env),
        }
    }
}
