//! pageframe and llfree-rs side by side, in one process, timed from
//! outside: `cargo xtask peers [--llfree DIR] [--rounds N] [--iters N]
//! [--secs S] [--seed N] [--out FILE] [--row NAME] [--column NAME]`.
//!
//! Every cell is one workload on a fresh allocator over the same simulated
//! frames (numbers, never touched). Each round runs every row once for
//! every column, the columns' order rotated from round to round; the table
//! gives each cell's median over the rounds and its spread. The
//! single-thread rows run pinned to one core. `--row` and `--column` run
//! one row or one column alone (the others' cells stay empty): for a
//! profiler, or to time one cell against a build of another tree.

mod column;
mod frames;
mod llfree_side;
mod pageframe_side;
mod rows;
mod source;
mod table;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use column::Column;
use rows::{Row, Setup};
use source::Source;
use table::Cell;

/// Frames in 4 GiB.
const FRAMES_4G: u64 = 1 << 20;

/// The command line.
struct Args {
    llfree: PathBuf,
    rounds: usize,
    iters: usize,
    pairs: u64,
    secs: f64,
    seed: u64,
    out: Option<PathBuf>,
    row: Option<Row>,
    column: Option<Column>,
}

const USAGE: &str = "usage: peers [--llfree DIR] [--rounds N] [--iters N] [--pairs N] [--secs S] \
                     [--seed N] [--out FILE] [--row pair0|pair9|fill|free|scattered|threads] \
                     [--column zone-numbers|zone-blocks|cache-numbers|cache-blocks|llfree|\
                     llfree-two-words]";

fn parse() -> Result<Args, String> {
    let mut a = Args {
        llfree: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/peers/llfree-rs"),
        rounds: 3,
        iters: 100,
        pairs: 1 << 22,
        secs: 1.0,
        seed: 1,
        out: None,
        row: None,
        column: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value; {USAGE}"))?;
        let bad = |_| format!("{flag} {value}: not a number; {USAGE}");
        match flag.as_str() {
            "--llfree" => a.llfree = PathBuf::from(&value),
            "--rounds" => a.rounds = value.parse().map_err(bad)?,
            "--iters" => a.iters = value.parse().map_err(bad)?,
            "--pairs" => a.pairs = value.parse().map_err(bad)?,
            "--secs" => {
                a.secs = value
                    .parse()
                    .map_err(|_| format!("--secs {value}: not a number"))?
            }
            "--seed" => a.seed = value.parse().map_err(bad)?,
            "--out" => a.out = Some(PathBuf::from(&value)),
            "--row" => a.row = Some(named(&flag, &value, Row::ALL, Row::name)?),
            "--column" => a.column = Some(named(&flag, &value, Column::ALL, Column::name)?),
            _ => return Err(format!("unknown argument {flag}; {USAGE}")),
        }
    }
    if a.rounds == 0 || a.pairs < 16 || a.secs.is_nan() || a.secs <= 0.0 {
        return Err(format!(
            "--rounds, --pairs (>= 16) and --secs must be positive; {USAGE}"
        ));
    }
    Ok(a)
}

/// The one of `all` whose name is `value` (the argument of `flag`).
fn named<T: Copy, const N: usize>(
    flag: &str,
    value: &str,
    all: [T; N],
    name: fn(T) -> &'static str,
) -> Result<T, String> {
    all.into_iter()
        .find(|&t| name(t) == value)
        .ok_or_else(|| format!("{flag} {value}: no such name; {USAGE}"))
}

/// Today's date (UTC), from the days since 1970 (the civil calendar's
/// rule: 400-year eras of 146097 days, years starting in March).
fn today() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// The processor's name, as Linux reports it.
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("model name")?.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "processor unknown".into())
}

/// The first CPU's data and unified caches as Linux describes them
/// (`L1d 32K, L2 512K, L3 32768K`), or `None` where it does not: a free
/// in random order is bound by where its metadata is found, so a table
/// is read against the caches of the host that made it.
fn caches() -> Option<String> {
    let dir = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    let mut found: Vec<(String, String)> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let field = |f: &str| {
                std::fs::read_to_string(e.path().join(f))
                    .ok()
                    .map(|v| v.trim().to_owned())
            };
            let kind = match field("type")?.as_str() {
                "Data" => "d",
                "Unified" => "",
                _ => return None,
            };
            Some((format!("L{}{kind}", field("level")?), field("size")?))
        })
        .collect();
    if found.is_empty() {
        return None;
    }
    found.sort();
    Some(
        found
            .iter()
            .map(|(level, size)| format!("{level} {size}"))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

/// The timed rows in the table's order, each with its rounds for every
/// column and whether it is a rate (higher better): the rows, with the
/// scattered test's two phases under it.
fn timed_rows<'c>(
    cells: &'c [Vec<Cell>],
    phases: &'c [Vec<Cell>; 2],
) -> Vec<(&'static str, &'c [Cell], bool)> {
    let mut rows: Vec<(&'static str, &[Cell], bool)> = Row::ALL
        .iter()
        .zip(cells)
        .map(|(&r, c)| (r.label(), c.as_slice(), r == Row::Threads))
        .collect();
    let below = Row::ALL
        .iter()
        .position(|&r| r == Row::Scattered)
        .map_or(rows.len(), |i| i + 1);
    for (k, (label, cells)) in ["scattered test, a free", "scattered test, an allocation"]
        .into_iter()
        .zip(phases)
        .enumerate()
    {
        rows.insert(below + k, (label, cells.as_slice(), false));
    }
    rows
}

/// The ratio table: each pageframe column over llfree-rs's of the same
/// round, and the `Block` columns also over the two-word peer's; `None`
/// when a peer column did not run.
fn ratio_table(rows: &[(&str, &[Cell], bool)]) -> Option<(Vec<String>, table::Body)> {
    let at = |c: Column| Column::ALL.iter().position(|&x| x == c).expect("a column");
    let (one, two) = (at(Column::LlFree), at(Column::LlFreeTwoWords));
    let pairs: Vec<(Column, usize)> = [
        Column::ZoneNumbers,
        Column::ZoneBlocks,
        Column::CacheNumbers,
        Column::CacheBlocks,
    ]
    .iter()
    .map(|&c| (c, one))
    .chain([(Column::ZoneBlocks, two), (Column::CacheBlocks, two)])
    .collect();
    let body: table::Body = rows
        .iter()
        .map(|(label, row, rate)| {
            let cells = pairs
                .iter()
                .map(|&(c, peer)| table::over(&row[at(c)], &row[peer], *rate).render(2))
                .collect();
            (label.to_string(), cells)
        })
        .filter(|(_, cells): &(String, Vec<String>)| cells.iter().any(|c| !c.is_empty()))
        .collect();
    if body.is_empty() {
        return None;
    }
    let heads = pairs
        .iter()
        .map(|&(c, peer)| match Column::ALL[peer] {
            Column::LlFree => c.label().to_owned(),
            _ => format!("{}, over two-word handles", c.label()),
        })
        .collect();
    Some((heads, body))
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("peers: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let args = parse()?;
    let command = std::env::var("PEERS_COMMAND").unwrap_or_else(|_| {
        let argv: Vec<String> = std::env::args().collect();
        argv.join(" ")
    });
    let source = Source::read(&args.llfree);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    // The cores this process may run on, read before it pins itself.
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let pinned = cores
        .first()
        .is_some_and(|&c| core_affinity::set_for_current(c));
    let two_cores = cores.len() >= 2;
    let frames = FRAMES_4G;

    let mut cells = vec![vec![Cell::default(); Column::ALL.len()]; Row::ALL.len()];
    let mut huge = vec![Cell::default(); Column::ALL.len()];
    let mut phases = [
        vec![Cell::default(); Column::ALL.len()],
        vec![Cell::default(); Column::ALL.len()],
    ];
    for round in 0..args.rounds {
        let setup = Setup {
            frames,
            pairs: args.pairs,
            iters: args.iters,
            secs: args.secs,
            seed: args.seed + round as u64,
            cores: [cores.first().copied(), cores.get(1).copied()],
        };
        for (r, &row) in Row::ALL.iter().enumerate() {
            if (row == Row::Threads && !two_cores) || args.row.is_some_and(|only| only != row) {
                continue;
            }
            let n = Column::ALL.len();
            for k in 0..n {
                let c = (k + round) % n;
                let col = Column::ALL[c];
                if args.column.is_some_and(|only| only != col) {
                    continue;
                }
                eprintln!(
                    "peers: round {} of {}: {} / {}",
                    round + 1,
                    args.rounds,
                    row.label(),
                    col.label()
                );
                let s = col.measure(row, &setup);
                cells[r][c].0.push(s.value);
                if let Some(h) = s.huge_blocks {
                    huge[c].0.push(h as f64);
                }
                if let Some((free, alloc)) = s.phases {
                    phases[0][c].0.push(free);
                    phases[1][c].0.push(alloc);
                }
            }
        }
    }

    let timed = timed_rows(&cells, &phases);
    let mut body: table::Body = timed
        .iter()
        .map(|(label, cells, _)| {
            (
                (*label).to_owned(),
                cells.iter().map(|c| c.render(1)).collect(),
            )
        })
        .collect();
    body.push((
        format!(
            "scattered test, 2 MiB blocks free after (of {})",
            rows::scattered_huge_max(frames)
        ),
        huge.iter().map(|c| c.render(0)).collect(),
    ));
    let (zone, pcp) = pageframe_side::metadata_bytes(frames, 1);
    let peer = llfree_side::metadata_bytes(frames, 1);
    let per_frame = |b: usize| format!("{:.3}", b as f64 / frames as f64);
    body.push((
        "metadata, bytes a frame".into(),
        vec![
            per_frame(zone),
            String::new(),
            per_frame(zone + pcp),
            String::new(),
            per_frame(peer),
            String::new(),
        ],
    ));
    let heads: Vec<&str> = Column::ALL.iter().map(|c| c.label()).collect();
    let ratios = ratio_table(&timed);
    let (_, pcp2) = pageframe_side::metadata_bytes(frames, 2);
    let peer2 = llfree_side::metadata_bytes(frames, 2);

    let mut out = String::new();
    out += &format!("date: {} (UTC)  \n", today());
    out += &format!(
        "machine: {cpus} CPUs, {}; caches of CPU 0: {}  \n",
        cpu_model(),
        caches().unwrap_or_else(|| "not known".into())
    );
    out += &format!(
        "peer: {}, from {}  \n",
        source.describe(),
        args.llfree.display()
    );
    out += &format!("command: `{command}`\n\n");
    out += &table::markdown("row, ns per op", &heads, &body);
    if let Some((heads, body)) = &ratios {
        let heads: Vec<&str> = heads.iter().map(String::as_str).collect();
        out += "\nEach round's cell over llfree-rs's of the same round (the last two columns: \
                over its two-word handles'; the two-thread rate turned over), median and \
                range: below 1 is ahead. A host whose speed drifts moves both cells of a \
                round alike, which the ratio cancels.\n\n";
        out += &table::markdown("row, time over llfree-rs's", &heads, body);
    }
    out += &format!(
        "\n4 GiB of simulated frames ({frames} of 4 KiB), one process; every cell is a fresh \
         allocator; median of {} interleaved rounds (the columns' order rotated each round), \
         lowest–highest in brackets. Single-thread rows {}.\n",
        args.rounds,
        if pinned {
            "pinned to one core"
        } else {
            "not pinned (no core affinity here)"
        }
    );
    out += &format!(
        "\n- pairs: {} order-0 and {} order-9 alloc/free pairs after a sixteenth as many \
         untimed; ns per alloc or free.\n",
        args.pairs,
        args.pairs / 8
    );
    out += "- fill: order-0 allocations until none is left (every frame, checked); \
            frees: that fill freed in a random order, all free again checked.\n";
    out += &format!(
        "- scattered test (the lab's `frag`, LLFree's method): every frame allocated at order 0, \
         a random half freed, then {} iterations each freeing a random tenth of the frames held \
         and allocating as many again: N = {} steps, a step being one free or one allocation \
         (each iteration's frees and allocations also timed apart: a free, an allocation); \
         2 MiB blocks counted after draining the caches (pageframe's per-CPU cache and order-0 \
         stripes, LLFree's reservations).\n",
        args.iters,
        args.iters as u64 * 2 * (frames / 2 / 10)
    );
    out += &if two_cores {
        format!(
            "- two threads: each on its own core and handle (a `CpuCache` of its own, LLFree's \
             local reservation of its own), order-0 alloc/free pairs for {} s; all operations \
             over the time from the first start to the last end.\n",
            args.secs
        )
    } else {
        "- two threads: not run (one core available).\n".to_owned()
    };
    out += "- llfree-rs, two-word handles: the same allocator, each frame number kept in two \
            words (a `Block`'s size) instead of one: the peer to read the `Block` columns \
            against, its caller's array as large as theirs.\n";
    out += &format!(
        "- metadata: pageframe's zone (`Machine::zone_metadata_bytes`), plus the per-CPU caches \
         for one CPU (`Machine::pcp_bytes`); LLFree's three buffers (`metadata_size`) for one \
         core. For two CPUs: cache {}, llfree-rs {}.\n",
        per_frame(zone + pcp2),
        per_frame(peer2)
    );
    print!("{out}");
    if let Some(path) = &args.out {
        std::fs::write(path, &out).map_err(|e| format!("{}: {e}", path.display()))?;
        eprintln!("peers: written to {}", path.display());
    }
    Ok(())
}
