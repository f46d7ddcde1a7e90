//! Command-line options shared by all scenarios: `--quick`, `--seed N`,
//! `--out DIR`, `--no-plot`, and free `--key value` pairs a scenario reads
//! with [`Opts::get`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::str::FromStr;

/// Parsed options.
pub struct Opts {
    /// Smaller sizes for a fast smoke run.
    pub quick: bool,
    /// Random seed.
    pub seed: u64,
    /// Where plots go (default `docs`).
    pub out: PathBuf,
    /// Skip plots.
    pub no_plot: bool,
    extra: BTreeMap<String, String>,
}

impl Opts {
    /// Parses `--flag` and `--key value` arguments.
    pub fn parse(args: impl Iterator<Item = String>) -> Result<Opts, String> {
        let mut o = Opts {
            quick: false,
            seed: 1,
            out: PathBuf::from("docs"),
            no_plot: false,
            extra: BTreeMap::new(),
        };
        let mut args = args.peekable();
        while let Some(a) = args.next() {
            let Some(key) = a.strip_prefix("--") else {
                return Err(format!("unexpected argument `{a}`"));
            };
            match key {
                "quick" => o.quick = true,
                "no-plot" => o.no_plot = true,
                _ => {
                    let v = args
                        .next()
                        .ok_or_else(|| format!("--{key} needs a value"))?;
                    match key {
                        "seed" => o.seed = v.parse().map_err(|_| format!("bad --seed `{v}`"))?,
                        "out" => o.out = PathBuf::from(v),
                        _ => {
                            o.extra.insert(key.to_string(), v);
                        }
                    }
                }
            }
        }
        Ok(o)
    }

    /// A scenario option `--key value`, or `default`.
    pub fn get<T: FromStr>(&self, key: &str, default: T) -> Result<T, String> {
        match self.extra.get(key) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| format!("bad value `{v}` for --{key}")),
        }
    }

    /// A string option `--key value`, or `default`.
    pub fn get_str<'a>(&'a self, key: &str, default: &'a str) -> &'a str {
        self.extra.get(key).map(String::as_str).unwrap_or(default)
    }
}
