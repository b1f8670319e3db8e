//! The one key table. The key handler and the `?` help overlay are both
//! generated from it, so what the help says is what the keys do.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

/// Everything a key can ask for. Writer actions become a `Control` in
/// `App::on_action`; the rest only change the view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Quit,
    TogglePause,
    ToggleFreeze,
    NextTarget,
    /// Zero-based target index (key `1` is target 0).
    PickTarget(usize),
    NextMode,
    MoreThreads,
    FewerThreads,
    WiderWindow,
    NarrowerWindow,
    ToggleRecord,
    /// Opens the "add target" prompt.
    AddTarget,
    ToggleCompare,
    ToggleHelp,
    /// The wake-up chains of the latest stalls, hop by hop.
    ToggleChains,
    /// The advice panel: changes for the stalls so far (`advise`'s cards).
    ToggleAdvice,
    /// Esc outside the prompt: closes the help overlay.
    Dismiss,
    PromptChar(char),
    PromptBackspace,
    PromptSubmit,
    PromptCancel,
    // Replay's player (`REPLAY_KEYS`).
    PlayPause,
    Faster,
    Slower,
    /// One interval forward (and pause).
    Step,
    NextStall,
    PrevStall,
    /// Opens the "go to time" prompt.
    GoTo,
}

/// A key as the table names it; modifiers other than Shift must match
/// exactly (Shift is how `?` and `+` are typed on most layouts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    Char(char),
    Ctrl(char),
    Tab,
    Esc,
    Enter,
    Backspace,
    Right,
    /// `1`..=`9`, resolving to `PickTarget(digit - 1)`.
    Digit,
}

/// One row of the table: the keys, how help shows them, what they do.
#[derive(Clone, Copy, Debug)]
pub struct KeyDef {
    pub label: &'static str,
    pub help: &'static str,
    pub keys: &'static [Key],
    /// For `Key::Digit` the index is filled in from the digit.
    pub action: Action,
}

const fn def(
    label: &'static str,
    help: &'static str,
    keys: &'static [Key],
    action: Action,
) -> KeyDef {
    KeyDef {
        label,
        help,
        keys,
        action,
    }
}

/// Keys of the dashboard (prompt closed).
pub const KEYS: &[KeyDef] = &[
    def(
        "q  Ctrl-C",
        "quit",
        &[Key::Char('q'), Key::Ctrl('c')],
        Action::Quit,
    ),
    def(
        "space",
        "pause / resume the writers",
        &[Key::Char(' ')],
        Action::TogglePause,
    ),
    def(
        "f",
        "freeze the view (writers go on)",
        &[Key::Char('f')],
        Action::ToggleFreeze,
    ),
    def(
        "Tab  t",
        "next target (writers move)",
        &[Key::Tab, Key::Char('t')],
        Action::NextTarget,
    ),
    def(
        "1-9",
        "move the writers to target N",
        &[Key::Digit],
        Action::PickTarget(0),
    ),
    def("m", "next write mode", &[Key::Char('m')], Action::NextMode),
    def(
        "+",
        "one more writer thread",
        &[Key::Char('+'), Key::Char('=')],
        Action::MoreThreads,
    ),
    def(
        "-",
        "one writer thread fewer",
        &[Key::Char('-')],
        Action::FewerThreads,
    ),
    def(
        "[ ]",
        "narrower / wider time window",
        &[Key::Char('[')],
        Action::NarrowerWindow,
    ),
    def("", "", &[Key::Char(']')], Action::WiderWindow),
    def(
        "r",
        "recording on / off",
        &[Key::Char('r')],
        Action::ToggleRecord,
    ),
    def(
        "a",
        "add a target directory",
        &[Key::Char('a')],
        Action::AddTarget,
    ),
    def(
        "c",
        "compare two targets side by side",
        &[Key::Char('c')],
        Action::ToggleCompare,
    ),
    def(
        "w",
        "wake-up chains of the latest stalls",
        &[Key::Char('w')],
        Action::ToggleChains,
    ),
    def(
        "A",
        "advice: changes for the stalls so far",
        &[Key::Char('A')],
        Action::ToggleAdvice,
    ),
    def("?", "this help", &[Key::Char('?')], Action::ToggleHelp),
    def("Esc", "close help / prompt", &[Key::Esc], Action::Dismiss),
];

/// Keys of a replay's player; the view keys of `KEYS` work too (`view_keys`).
pub const REPLAY_KEYS: &[KeyDef] = &[
    def(
        "q  Ctrl-C",
        "quit",
        &[Key::Char('q'), Key::Ctrl('c')],
        Action::Quit,
    ),
    def(
        "space",
        "play / pause",
        &[Key::Char(' ')],
        Action::PlayPause,
    ),
    def(
        "> <",
        "faster / slower (1\u{d7} to 64\u{d7})",
        &[Key::Char('>')],
        Action::Faster,
    ),
    def("", "", &[Key::Char('<')], Action::Slower),
    def(
        ".  Right",
        "one interval forward",
        &[Key::Char('.'), Key::Right],
        Action::Step,
    ),
    def(
        "n N",
        "next / previous stall",
        &[Key::Char('n')],
        Action::NextStall,
    ),
    def("", "", &[Key::Char('N')], Action::PrevStall),
    def(
        "g",
        "go to a time (seconds, Enter)",
        &[Key::Char('g')],
        Action::GoTo,
    ),
    def(
        "Tab  1-9",
        "show the next / Nth target",
        &[Key::Tab, Key::Char('t')],
        Action::NextTarget,
    ),
    def("", "", &[Key::Digit], Action::PickTarget(0)),
];

/// The keys of `KEYS` that only change the view: they work in replay too.
pub fn view_keys() -> impl Iterator<Item = &'static KeyDef> {
    KEYS.iter().filter(|d| {
        matches!(
            d.action,
            Action::ToggleFreeze
                | Action::NarrowerWindow
                | Action::WiderWindow
                | Action::ToggleCompare
                | Action::ToggleChains
                | Action::ToggleAdvice
                | Action::ToggleHelp
                | Action::Dismiss
        )
    })
}

/// A key in replay: the player's table first, then the view keys.
pub fn replay_action_for(key: KeyEvent) -> Option<Action> {
    if key.kind == KeyEventKind::Release {
        return None;
    }
    REPLAY_KEYS
        .iter()
        .chain(view_keys())
        .find_map(|d| resolve(d, &key))
}

/// Keys while the "add target" prompt is open; any other printable
/// character is typed into it.
pub const PROMPT_KEYS: &[KeyDef] = &[
    def(
        "Enter",
        "add the typed path",
        &[Key::Enter],
        Action::PromptSubmit,
    ),
    def("Esc", "cancel", &[Key::Esc], Action::PromptCancel),
    def(
        "Backspace",
        "delete a character",
        &[Key::Backspace],
        Action::PromptBackspace,
    ),
    def("Ctrl-C", "quit", &[Key::Ctrl('c')], Action::Quit),
];

/// The action for a key press, if any. Releases are ignored (terminals
/// that report them would otherwise act twice).
pub fn action_for(key: KeyEvent, prompt_open: bool) -> Option<Action> {
    if key.kind == KeyEventKind::Release {
        return None;
    }
    let table = if prompt_open { PROMPT_KEYS } else { KEYS };
    let found = table.iter().find_map(|d| resolve(d, &key));
    if found.is_some() || !prompt_open {
        return found;
    }
    match key.code {
        KeyCode::Char(c) if plain(&key) && !c.is_control() => Some(Action::PromptChar(c)),
        _ => None,
    }
}

/// The action of `d` if `key` is one of its keys.
fn resolve(d: &KeyDef, key: &KeyEvent) -> Option<Action> {
    d.keys.iter().find_map(|k| match (k, key.code) {
        (Key::Digit, KeyCode::Char(c @ '1'..='9')) if plain(key) => {
            Some(Action::PickTarget(c as usize - '1' as usize))
        }
        (Key::Char(want), KeyCode::Char(c)) if *want == c && plain(key) => Some(d.action),
        (Key::Ctrl(want), KeyCode::Char(c)) if c.eq_ignore_ascii_case(want) && ctrl(key) => {
            Some(d.action)
        }
        (Key::Tab, KeyCode::Tab)
        | (Key::Esc, KeyCode::Esc)
        | (Key::Enter, KeyCode::Enter)
        | (Key::Backspace, KeyCode::Backspace)
        | (Key::Right, KeyCode::Right)
            if plain(key) =>
        {
            Some(d.action)
        }
        _ => None,
    })
}

/// No modifier but possibly Shift.
fn plain(key: &KeyEvent) -> bool {
    (key.modifiers - KeyModifiers::SHIFT).is_empty()
}

fn ctrl(key: &KeyEvent) -> bool {
    key.modifiers - KeyModifiers::SHIFT == KeyModifiers::CONTROL
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(code: KeyCode, m: KeyModifiers) -> KeyEvent {
        KeyEvent::new(code, m)
    }

    /// The key events a table key stands for.
    fn events(k: Key) -> Vec<(KeyEvent, Option<usize>)> {
        let none = KeyModifiers::NONE;
        match k {
            Key::Char(c) => vec![(ev(KeyCode::Char(c), none), None)],
            Key::Ctrl(c) => vec![(ev(KeyCode::Char(c), KeyModifiers::CONTROL), None)],
            Key::Tab => vec![(ev(KeyCode::Tab, none), None)],
            Key::Esc => vec![(ev(KeyCode::Esc, none), None)],
            Key::Enter => vec![(ev(KeyCode::Enter, none), None)],
            Key::Backspace => vec![(ev(KeyCode::Backspace, none), None)],
            Key::Right => vec![(ev(KeyCode::Right, none), None)],
            Key::Digit => ('1'..='9')
                .enumerate()
                .map(|(i, c)| (ev(KeyCode::Char(c), none), Some(i)))
                .collect(),
        }
    }

    fn check_table(table: &[KeyDef], prompt_open: bool) {
        for d in table {
            for k in d.keys {
                for (e, digit) in events(*k) {
                    let want = match digit {
                        Some(i) => Action::PickTarget(i),
                        None => d.action,
                    };
                    assert_eq!(
                        action_for(e, prompt_open),
                        Some(want),
                        "{} ({k:?})",
                        d.label
                    );
                }
            }
        }
    }

    #[test]
    fn every_listed_key_maps_to_its_action() {
        check_table(KEYS, false);
        check_table(PROMPT_KEYS, true);
        for d in REPLAY_KEYS.iter().chain(view_keys()) {
            for k in d.keys {
                for (e, digit) in events(*k) {
                    let want = digit.map_or(d.action, Action::PickTarget);
                    assert_eq!(replay_action_for(e), Some(want), "{} ({k:?})", d.label);
                }
            }
        }
    }

    /// Defect: replay's help was the live dashboard's (pause the writers,
    /// add a target) and left out the player's keys.
    #[test]
    fn replay_keys_are_the_players_and_the_views() {
        let none = KeyModifiers::NONE;
        let r = |c| replay_action_for(ev(KeyCode::Char(c), none));
        assert_eq!(r(' '), Some(Action::PlayPause));
        assert_eq!(r('>'), Some(Action::Faster));
        assert_eq!(r('<'), Some(Action::Slower));
        assert_eq!(r('A'), Some(Action::ToggleAdvice));
        assert_eq!(r('.'), Some(Action::Step));
        assert_eq!(r('n'), Some(Action::NextStall));
        assert_eq!(r('N'), Some(Action::PrevStall));
        assert_eq!(r('g'), Some(Action::GoTo));
        assert_eq!(r('f'), Some(Action::ToggleFreeze));
        assert_eq!(r('2'), Some(Action::PickTarget(1)));
        for writer_key in ['m', '+', '-', 'r', 'a'] {
            assert_eq!(r(writer_key), None, "{writer_key} controls writers");
        }
    }

    #[test]
    fn the_asked_for_keys_are_bound() {
        let none = KeyModifiers::NONE;
        let cases = [
            (KeyCode::Char('q'), none, Action::Quit),
            (KeyCode::Char('c'), KeyModifiers::CONTROL, Action::Quit),
            (KeyCode::Char(' '), none, Action::TogglePause),
            (KeyCode::Char('f'), none, Action::ToggleFreeze),
            (KeyCode::Tab, none, Action::NextTarget),
            (KeyCode::Char('t'), none, Action::NextTarget),
            (KeyCode::Char('3'), none, Action::PickTarget(2)),
            (KeyCode::Char('m'), none, Action::NextMode),
            (KeyCode::Char('+'), KeyModifiers::SHIFT, Action::MoreThreads),
            (KeyCode::Char('-'), none, Action::FewerThreads),
            (KeyCode::Char('['), none, Action::NarrowerWindow),
            (KeyCode::Char(']'), none, Action::WiderWindow),
            (KeyCode::Char('r'), none, Action::ToggleRecord),
            (KeyCode::Char('a'), none, Action::AddTarget),
            (KeyCode::Char('c'), none, Action::ToggleCompare),
            (
                KeyCode::Char('A'),
                KeyModifiers::SHIFT,
                Action::ToggleAdvice,
            ),
            (KeyCode::Char('a'), none, Action::AddTarget),
            (KeyCode::Char('?'), KeyModifiers::SHIFT, Action::ToggleHelp),
            (KeyCode::Esc, none, Action::Dismiss),
        ];
        for (code, m, want) in cases {
            assert_eq!(action_for(ev(code, m), false), Some(want), "{code:?}");
        }
    }

    #[test]
    fn the_prompt_takes_printable_keys() {
        let none = KeyModifiers::NONE;
        let p = |code, m| action_for(ev(code, m), true);
        assert_eq!(p(KeyCode::Char('q'), none), Some(Action::PromptChar('q')));
        assert_eq!(p(KeyCode::Char(' '), none), Some(Action::PromptChar(' ')));
        assert_eq!(p(KeyCode::Char('/'), none), Some(Action::PromptChar('/')));
        assert_eq!(p(KeyCode::Char('1'), none), Some(Action::PromptChar('1')));
        assert_eq!(
            p(KeyCode::Char('c'), KeyModifiers::CONTROL),
            Some(Action::Quit)
        );
        assert_eq!(p(KeyCode::Enter, none), Some(Action::PromptSubmit));
        assert_eq!(p(KeyCode::Esc, none), Some(Action::PromptCancel));
        assert_eq!(p(KeyCode::Backspace, none), Some(Action::PromptBackspace));
        assert_eq!(p(KeyCode::Tab, none), None);
        assert_eq!(p(KeyCode::Char('x'), KeyModifiers::ALT), None);
    }

    #[test]
    fn releases_and_unbound_keys_do_nothing() {
        let mut e = ev(KeyCode::Char('q'), KeyModifiers::NONE);
        e.kind = KeyEventKind::Release;
        assert_eq!(action_for(e, false), None);
        assert_eq!(
            action_for(ev(KeyCode::Char('z'), KeyModifiers::NONE), false),
            None
        );
        assert_eq!(
            action_for(ev(KeyCode::Char('0'), KeyModifiers::NONE), false),
            None
        );
        assert_eq!(
            action_for(ev(KeyCode::Char('q'), KeyModifiers::CONTROL), false),
            None
        );
    }
}
