//! A truncated file found before decoding: protocol 4 and 5 pickles are cut
//! into frames (`FRAME` and an 8-byte length; Python's `_Framer` commits
//! one at an opcode boundary every 64 KiB, `Lib/pickle.py`), so following
//! the frame headers alone, a few bytes read every 64 KiB, finds a file
//! shorter than it says in milliseconds instead of after decoding
//! gigabytes.

use std::fs::File;

use crate::Error;

/// The `FRAME` opcode.
const FRAME: u8 = 0x95;
/// The `STOP` opcode.
const STOP: u8 = b'.';

/// Follow `file`'s frame headers from the start: [`Error::Truncated`] when
/// one declares more bytes than the file has left; otherwise the offsets of
/// the frames found (each an opcode's start). Anything else (no frames, a
/// pickle that ends, a large argument written between frames, an I/O
/// error) ends the walk quietly: decoding then says what it finds.
pub(crate) fn check(file: &dyn At, len: u64) -> Result<Vec<u64>, Error> {
    let mut starts = Vec::new();
    let mut head = [0u8; 9];
    if file.read_at(&mut head[..2], 0) < 2 || head[0] != 0x80 || head[1] < 4 {
        return Ok(starts);
    }
    let mut pos = 2u64;
    let mut last = 0u8;
    // the next frame's header, when read with the last byte before it
    let mut ahead = false;
    while pos < len {
        if !std::mem::take(&mut ahead) && file.read_at(&mut head, pos) < 9 {
            return Ok(starts);
        }
        if head[0] != FRAME {
            return Ok(starts);
        }
        starts.push(pos);
        let declared = u64::from_le_bytes(head[1..9].try_into().expect("8 bytes"));
        let end = pos.saturating_add(9).saturating_add(declared);
        // a frame after one that ends with STOP may be data after the
        // pickle, which pickle.load ignores
        if end > len && last != STOP {
            return Err(Error::Truncated {
                frame_offset: pos,
                declared,
                len,
            });
        }
        if end > len || declared == 0 {
            return Ok(starts);
        }
        // the frame's last byte and the next header, in one read
        let mut b = [0u8; 10];
        let got = file.read_at(&mut b, end - 1);
        if got < 1 {
            return Ok(starts);
        }
        last = b[0];
        if got == b.len() {
            head.copy_from_slice(&b[1..]);
            ahead = true;
        }
        pos = end;
    }
    Ok(starts)
}

/// Bytes read at an offset: a file, by positioned reads, or bytes in memory.
pub(crate) trait At: Sync {
    /// Read into `buf` at `offset`; the bytes read (fewer at the end, 0 on
    /// an error).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> usize;
}

#[cfg(unix)]
impl At for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> usize {
        use std::os::unix::fs::FileExt;
        let mut n = 0;
        while n < buf.len() {
            match FileExt::read_at(self, &mut buf[n..], offset + n as u64) {
                Ok(0) | Err(_) => break,
                Ok(k) => n += k,
            }
        }
        n
    }
}

/// Without positioned reads the walk and the lex are skipped.
#[cfg(not(unix))]
impl At for File {
    fn read_at(&self, _: &mut [u8], _: u64) -> usize {
        0
    }
}

impl At for &[u8] {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> usize {
        let Some(from) = usize::try_from(offset).ok().filter(|&o| o <= self.len()) else {
            return 0;
        };
        let n = buf.len().min(self.len() - from);
        buf[..n].copy_from_slice(&self[from..from + n]);
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file(bytes: &[u8]) -> (File, u64) {
        let mut path = std::env::temp_dir();
        path.push(format!(
            "vramscope-frames-{}-{}",
            std::process::id(),
            bytes.len()
        ));
        std::fs::File::create(&path)
            .unwrap()
            .write_all(bytes)
            .unwrap();
        let f = File::open(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        (f, bytes.len() as u64)
    }

    fn framed(frames: &[&[u8]]) -> Vec<u8> {
        let mut v = vec![0x80, 4];
        for f in frames {
            v.push(FRAME);
            v.extend_from_slice(&(f.len() as u64).to_le_bytes());
            v.extend_from_slice(f);
        }
        v
    }

    #[test]
    fn a_whole_file_passes_and_a_cut_one_names_the_frame() {
        let whole = framed(&[&[b'N'; 100], b"N."]);
        let (f, n) = file(&whole);
        assert!(check(&f, n).is_ok());
        let cut = &whole[..whole.len() - 1];
        let (f, n) = file(cut);
        match check(&f, n) {
            Err(Error::Truncated {
                frame_offset,
                declared,
                len,
            }) => assert_eq!((frame_offset, declared, len), (111, 2, 121)),
            other => panic!("{other:?}"),
        }
    }

    /// A header declaring 2^64 - 1 bytes (found by the fuzz target: the
    /// message's sum overflowed) says exactly how many are missing.
    #[test]
    fn a_frame_declaring_2_pow_64_bytes_is_told_exactly() {
        let mut v = vec![0x80, 5, FRAME];
        v.extend_from_slice(&u64::MAX.to_le_bytes());
        v.extend_from_slice(b"N.");
        let (f, n) = file(&v);
        let e = check(&f, n).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "the file is truncated: the pickle frame at byte 2 declares {} bytes, but the file ends at byte 13 ({} bytes missing; was the dump cut short?)",
                u64::MAX,
                u128::from(u64::MAX) - 2
            )
        );
    }

    #[test]
    fn data_after_the_stop_and_unframed_pickles_are_left_to_decoding() {
        let mut v = framed(&[b"N."]);
        v.extend_from_slice(&[FRAME, 0xff, 0xff, 0, 0, 0, 0, 0, 0]);
        let (f, n) = file(&v);
        assert!(check(&f, n).is_ok());
        let (f, n) = file(&[0x80, 2, b'N', b'.']);
        assert!(check(&f, n).is_ok());
        let (f, n) = file(b"N.");
        assert!(check(&f, n).is_ok());
    }
}
