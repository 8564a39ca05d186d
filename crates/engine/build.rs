//! Unpacks the measured cuDNN convolution table (`src/ops/cudnn_conv_problems.txt.xz`,
//! stored xz-compressed to keep the checkout small) into `OUT_DIR` for `include_str!`.

use std::{env, fs, path::PathBuf};

fn main() {
    let packed = "src/ops/cudnn_conv_problems.txt.xz";
    println!("cargo:rerun-if-changed={packed}");
    let raw = fs::read(packed).unwrap_or_else(|e| panic!("reading {packed}: {e}"));
    let mut text = Vec::new();
    lzma_rs::xz_decompress(&mut raw.as_slice(), &mut text)
        .unwrap_or_else(|e| panic!("{packed} is not a valid xz stream: {e:?}"));
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    fs::write(out.join("cudnn_conv_problems.txt"), text).expect("writing the unpacked table");
}
