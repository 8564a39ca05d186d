//! What the GPU-fixture tests share (`gpu_fixtures`, `gpu_traces`).

/// The repository's root, where `validation/` and `fixtures/` lie.
pub const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// Whether PyTorch refused the workload `name` of the fixtures' directory
/// `dir`: `NAME.refused.txt`, the end of its traceback, in place of its
/// figures and trace.
pub fn refused(dir: &str, name: &str) -> bool {
    std::path::Path::new(&format!("{ROOT}/{dir}/{name}.refused.txt")).exists()
}
