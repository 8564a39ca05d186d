//! The repository's files as the tests read them, the large fixtures stored
//! xz-compressed (`NAME.xz`, made by `xz -9e`) decompressed on the way: the
//! GPU machine's calls carry the whole tracked tree, 64 MiB at most.

use std::path::{Path, PathBuf};

/// The workspace root (this crate is `crates/testkit`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The bytes of the file at `rel` (a path from the workspace root),
/// decompressed when it ends in `.xz`; panics, naming the file, when it
/// cannot be read or is not valid xz.
pub fn fixture_bytes(rel: &str) -> Vec<u8> {
    let path = root().join(rel);
    let raw = std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {rel}: {e}"));
    if !rel.ends_with(".xz") {
        return raw;
    }
    let mut out = Vec::with_capacity(raw.len() * 8);
    lzma_rs::xz_decompress(&mut raw.as_slice(), &mut out)
        .unwrap_or_else(|e| panic!("{rel} is not valid xz: {e:?}"));
    out
}

/// [`fixture_bytes`] as UTF-8 text.
pub fn fixture_text(rel: &str) -> String {
    String::from_utf8(fixture_bytes(rel)).unwrap_or_else(|e| panic!("{rel} is not UTF-8: {e}"))
}

/// A path to the file at `rel` as it is, or, for `NAME.xz`, to `NAME`
/// decompressed into the system's temporary folder (for readers that take a
/// path): a folder named after the compressed file's size and hash, so that
/// a changed fixture never reads a stale copy; written to a file of its own
/// and renamed, so that tests running at once each see a whole file.
pub fn fixture_file(rel: &str) -> PathBuf {
    let path = root().join(rel);
    let Some(plain) = rel.strip_suffix(".xz") else {
        return path;
    };
    let raw = std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {rel}: {e}"));
    // FNV-1a (64 bits) of the compressed bytes
    let hash = raw.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let name = Path::new(plain).file_name().expect("a file name");
    let dir = std::env::temp_dir().join(format!("vramscope-fixture-{}-{hash:016x}", raw.len()));
    let out = dir.join(name);
    if out.exists() {
        return out;
    }
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {dir:?}: {e}"));
    let mut bytes = Vec::with_capacity(raw.len() * 8);
    lzma_rs::xz_decompress(&mut raw.as_slice(), &mut bytes)
        .unwrap_or_else(|e| panic!("{rel} is not valid xz: {e:?}"));
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let part = dir.join(format!(".{}-{n}.part", std::process::id()));
    std::fs::write(&part, &bytes).unwrap_or_else(|e| panic!("cannot write {part:?}: {e}"));
    std::fs::rename(&part, &out).unwrap_or_else(|e| panic!("cannot rename to {out:?}: {e}"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A compressed fixture decompresses to the bytes its file holds, from
    /// memory and through a file; a plain one is read as it is.
    #[test]
    fn an_xz_fixture_is_its_decompressed_bytes() {
        let rel = "fixtures/snapshot_real/nanogpt_2streams_oom_h200.pickle.xz";
        let bytes = fixture_bytes(rel);
        // the pickle's size before compression (fixtures/snapshot_real/README.md)
        assert_eq!(bytes.len(), 2_307_584);
        // protocol 4's PROTO opcode, and STOP at the end
        assert_eq!((&bytes[..2], bytes.last()), (&[0x80, 4][..], Some(&b'.')));
        assert_eq!(std::fs::read(fixture_file(rel)).unwrap(), bytes);
        let plain = "crates/testkit/Cargo.toml";
        assert_eq!(fixture_file(plain), root().join(plain));
        assert!(fixture_text(plain).contains("lzma-rs"));
    }

    #[test]
    #[should_panic(expected = "is not valid xz")]
    fn a_file_that_is_not_xz_is_named() {
        // a plain file under a `.xz` name
        let dir = std::env::temp_dir().join(format!("vramscope-testkit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("bad.xz"), b"not xz").unwrap();
        let rel = dir.join("bad.xz");
        fixture_bytes(rel.to_str().unwrap());
    }
}
