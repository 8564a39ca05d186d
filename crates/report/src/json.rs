//! The JSON renderer.

use crate::schema::Report;

/// The report as pretty JSON (schema: docs/json.md).
pub fn render(r: &Report) -> String {
    let mut s =
        serde_json::to_string_pretty(r).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
    s.push('\n');
    s
}
