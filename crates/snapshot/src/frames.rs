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
/// one declares more bytes than the file has left. Anything else (no
/// frames, a pickle that ends, a large argument written between frames, an
/// I/O error) ends the walk quietly: decoding then says what it finds.
pub(crate) fn check(file: &File, len: u64) -> Result<(), Error> {
    let mut head = [0u8; 9];
    if read_at(file, &mut head[..2], 0) < 2 || head[0] != 0x80 || head[1] < 4 {
        return Ok(());
    }
    let mut pos = 2u64;
    let mut last = 0u8;
    while pos < len {
        if read_at(file, &mut head, pos) < 9 || head[0] != FRAME {
            return Ok(());
        }
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
            return Ok(());
        }
        let mut b = [0u8; 1];
        if read_at(file, &mut b, end - 1) < 1 {
            return Ok(());
        }
        last = b[0];
        pos = end;
    }
    Ok(())
}

/// Read into `buf` at `offset`; the bytes read (0 on error).
#[cfg(unix)]
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> usize {
    use std::os::unix::fs::FileExt;
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], offset + n as u64) {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    n
}

/// Without positioned reads the walk is skipped.
#[cfg(not(unix))]
fn read_at(_: &File, _: &mut [u8], _: u64) -> usize {
    0
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
