//! Run a seed case and print its steps: `cargo run --example demo -- seed001`.

fn main() {
    let case = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "seed000:both".into());
    match vramscope_engine::demo::run(&case) {
        Ok(steps) => {
            for s in steps {
                println!(
                    "{:16} allocated {:>12} peak {:>12} reserved {:>12}\n    {}",
                    s.step, s.allocated, s.peak, s.reserved, s.explanation
                );
            }
        }
        Err(e) => eprintln!("{e}"),
    }
}
