//! Errors of config reading, model building and estimation.

use std::fmt;

use vramscope_engine::EngineError;

/// Why a config could not be read or a workload not be estimated.
#[derive(Debug)]
pub enum ModelError {
    /// the config is not valid JSON or not an object
    Json(String),
    /// a field has the wrong type or an impossible value
    Field {
        /// the field
        field: String,
        /// what was wrong
        detail: String,
    },
    /// a `model_type` vramscope does not model
    UnsupportedModel(String),
    /// a config field or workload option that changes memory and is not modelled
    Unsupported(String),
    /// an unknown preset name
    UnknownPreset(String),
    /// the eager twin failed (out of memory is reported by [`crate::estimate()`]
    /// as an [`crate::Oom`], not as an error)
    Engine(EngineError),
}

/// Result with [`ModelError`].
pub type Result<T> = std::result::Result<T, ModelError>;

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelError::Json(e) => write!(f, "config.json is not valid: {e}"),
            ModelError::Field { field, detail } => write!(f, "config field `{field}`: {detail}"),
            ModelError::UnsupportedModel(t) => write!(
                f,
                "model_type `{t}` is not supported (supported: {})",
                crate::families::SUPPORTED.join(", ")
            ),
            ModelError::Unsupported(what) => write!(f, "not supported: {what}"),
            ModelError::UnknownPreset(n) => write!(
                f,
                "no preset named `{n}` (presets: {})",
                crate::presets::names().join(", ")
            ),
            ModelError::Engine(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ModelError {}

impl From<EngineError> for ModelError {
    fn from(e: EngineError) -> Self {
        ModelError::Engine(e)
    }
}
