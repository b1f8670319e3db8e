//! Runtime actions a recording keeps (target switch, pause, recording on
//! and off…), so replay and report can show where the workload changed.

use crate::model::snapshot::TargetMeta;
use serde::{Deserialize, Serialize};

/// What a marker records. Serialized in snake_case, the recording's
/// `kind` field; a kind a newer version writes reads back as `Other`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MarkerKind {
    TargetSwitch,
    ModeChange,
    ThreadChange,
    Pause,
    Resume,
    RecordingStart,
    RecordingStop,
    /// `meta` names the new target.
    TargetAdded,
    #[serde(other)]
    Other,
}

impl MarkerKind {
    /// The recording's spelling (what serde writes).
    pub fn as_str(self) -> &'static str {
        match self {
            MarkerKind::TargetSwitch => "target_switch",
            MarkerKind::ModeChange => "mode_change",
            MarkerKind::ThreadChange => "thread_change",
            MarkerKind::Pause => "pause",
            MarkerKind::Resume => "resume",
            MarkerKind::RecordingStart => "recording_start",
            MarkerKind::RecordingStop => "recording_stop",
            MarkerKind::TargetAdded => "target_added",
            MarkerKind::Other => "other",
        }
    }
}

/// A runtime action worth a line in the recording.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Marker {
    pub t_s: f64,
    pub kind: MarkerKind,
    pub detail: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<TargetMeta>,
}

impl Marker {
    pub fn new(t_s: f64, kind: MarkerKind, detail: impl Into<String>) -> Marker {
        Marker {
            t_s,
            kind,
            detail: detail.into(),
            meta: None,
        }
    }
}
