//! The test suite's watchdog does its job: a worker that panics on
//! purpose, while the others wait at a barrier, sit in a call that never
//! ends, or spin on a flag the dead worker was to set, fails its test
//! within the test's limit, with the panic's message on stderr.
//!
//! Each case runs in a child process (this binary again, told which case
//! by an environment variable), since the watchdog may end the process.
//! No test harness: `main` is the test.

mod common;

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use common::watchdog::Watchdog;

const CASE: &str = "PAGEFRAME_WATCHDOG_CASE";
const LIMIT: Duration = Duration::from_secs(2);
const WORKERS: usize = 4;
const MESSAGE: &str = "worker 2 fails on purpose";

/// What the other workers do when worker 2 panics.
const CASES: &[&str] = &["barrier", "endless-call", "spin-on-flag"];

fn victim(case: &str) {
    let dog = Watchdog::start(WORKERS, &["work", "endless"], LIMIT);
    let barrier = dog.barrier(WORKERS);
    let flag = AtomicBool::new(false);
    std::thread::scope(|s| {
        for i in 0..WORKERS {
            let (dog, barrier, flag) = (&dog, &barrier, &flag);
            s.spawn(move || {
                let _watched = dog.worker(i);
                dog.call(i, 0, || std::thread::sleep(Duration::from_millis(20)));
                if i == 2 && case != "none" {
                    panic!("{MESSAGE}");
                }
                match case {
                    "barrier" => barrier.wait(|| {}),
                    "endless-call" if i == 0 => dog.call(i, 1, || {
                        loop {
                            std::thread::sleep(Duration::from_millis(10));
                        }
                    }),
                    "spin-on-flag" => {
                        while !flag.load(Relaxed) {
                            std::thread::yield_now();
                        }
                    }
                    _ => {}
                }
            });
        }
        dog.joining();
    });
    dog.stop();
}

/// Runs `case` in a child; returns whether it failed, its stderr and how
/// long it took. A child still running after `budget` is killed and the
/// check fails.
fn run_child(case: &str, budget: Duration) -> (bool, String, Duration) {
    let t0 = Instant::now();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(CASE, case)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return (!status.success(), err, t0.elapsed());
        }
        if t0.elapsed() > budget {
            let _ = child.kill();
            panic!("case {case}: still running after {budget:?}: the watchdog let it hang");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn main() {
    if let Ok(case) = std::env::var(CASE) {
        victim(&case);
        return;
    }
    // The watchdog's longest grace: a death, then one limit; a barrier or
    // join, then six. Either is well inside this budget.
    let budget = LIMIT * 6 + Duration::from_secs(10);
    for case in CASES {
        let (failed, err, took) = run_child(case, budget);
        assert!(
            failed,
            "case {case}: the test passed although a worker panicked"
        );
        assert!(
            err.contains("watchdog: CPU 2 panicked at") && err.contains(MESSAGE),
            "case {case}: the panic's message is not on stderr:\n{err}"
        );
        assert!(took < budget, "case {case}: took {took:?}");
        println!("watchdog: case {case} failed in {took:?}, saying why");
    }
    // A run without a panic passes: the watchdog stays quiet.
    let (failed, err, _) = run_child("none", budget);
    assert!(!failed, "a run with no panic failed:\n{err}");
    println!("watchdog: every case ends, saying why");
}
