//! Print an ops case's twin allocator trace (action, size per line) and its
//! figures, to compare with `fixtures/ops/traces.tar.xz`:
//! `cargo run -q -p vramscope-engine --example ops_trace -- mha_w:fp32`.
fn main() {
    let c = std::env::args().nth(1).expect("case");
    let (steps, trace) = vramscope_testkit::ops::run_traced(&c).expect("case runs");
    for (a, s) in trace {
        println!("{a} {s}");
    }
    for (s, f) in steps {
        println!("# {s} {f:?}");
    }
}
