//! The pageframe lab: reproduces published allocator experiments on a
//! simulated machine and prints markdown-friendly tables (and SVG plots
//! under `docs/`).
//!
//! ```text
//! pageframe-lab <scenario> [--quick] [--seed N] [--out DIR] [--no-plot] [--key value ...]
//! pageframe-lab list
//! ```
//!
//! Each scenario is one module under `scenarios/`, registered in
//! [`scenarios::ALL`]; shared helpers print tables ([`table`]), draw SVG
//! plots ([`plot`]) and show progress ([`progress`]).

mod args;
mod churn;
mod plot;
mod progress;
mod scenarios;
mod table;

use std::process::ExitCode;

fn usage() -> String {
    let mut s = String::from(
        "usage: pageframe-lab <scenario> [--quick] [--seed N] [--out DIR] [--no-plot] [--key value ...]\n\nscenarios:\n",
    );
    for sc in scenarios::ALL {
        s.push_str(&format!("  {:<16} {}\n", sc.name, sc.about));
    }
    s
}

fn main() -> ExitCode {
    let mut argv = std::env::args().skip(1);
    let Some(name) = argv.next() else {
        eprint!("{}", usage());
        return ExitCode::from(2);
    };
    if name == "list" || name == "--help" || name == "-h" {
        print!("{}", usage());
        return ExitCode::SUCCESS;
    }
    let Some(sc) = scenarios::find(&name) else {
        eprintln!("unknown scenario `{name}`\n");
        eprint!("{}", usage());
        return ExitCode::from(2);
    };
    let opts = match args::Opts::parse(argv) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match (sc.run)(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}: {e}", sc.name);
            ExitCode::FAILURE
        }
    }
}
