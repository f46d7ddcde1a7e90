//! A watchdog for tests of cross-CPU waits: each thread says what it is
//! doing; one that stays in a call longer than the limit fails the test
//! (the whole process: the stuck threads would never join), naming every
//! thread still inside a call.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// What each thread is doing, with a thread that watches.
pub struct Watchdog {
    start: Instant,
    /// Per thread: milliseconds since `start` + 1 when the call began, 0
    /// when not in a call.
    since: Vec<AtomicU64>,
    /// Per thread: an index into `names`.
    what: Vec<AtomicUsize>,
    names: &'static [&'static str],
    done: AtomicBool,
}

impl Watchdog {
    /// Watches `threads` threads whose calls are named by `names`; fails
    /// the process when one call lasts longer than `limit`.
    pub fn start(threads: usize, names: &'static [&'static str], limit: Duration) -> Arc<Self> {
        let w = Arc::new(Watchdog {
            start: Instant::now(),
            since: (0..threads).map(|_| AtomicU64::new(0)).collect(),
            what: (0..threads).map(|_| AtomicUsize::new(0)).collect(),
            names,
            done: AtomicBool::new(false),
        });
        let me = w.clone();
        std::thread::spawn(move || {
            while !me.done.load(Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
                let now = me.now();
                let stuck = me.since.iter().any(|s| {
                    let t = s.load(Relaxed);
                    t != 0 && Duration::from_millis(now - (t - 1)) > limit
                });
                if stuck && !me.done.load(Relaxed) {
                    // Straight to stderr: the test harness's capture would
                    // be lost with the process.
                    use std::io::Write;
                    let mut e = std::io::stderr().lock();
                    let _ = writeln!(
                        e,
                        "watchdog: a call has lasted over {limit:?}; threads in a call:"
                    );
                    for (i, s) in me.since.iter().enumerate() {
                        let t = s.load(Relaxed);
                        if t != 0 {
                            let name = me.names[me.what[i].load(Relaxed)];
                            let _ = writeln!(e, "  CPU {i}: in {name} for {} ms", now - (t - 1));
                        }
                    }
                    std::process::exit(101);
                }
            }
        });
        w
    }

    fn now(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Runs `f` as thread `cpu`'s call `what` (an index into the names).
    pub fn call<T>(&self, cpu: usize, what: usize, f: impl FnOnce() -> T) -> T {
        self.what[cpu].store(what, Relaxed);
        self.since[cpu].store(self.now() + 1, Relaxed);
        let r = f();
        self.since[cpu].store(0, Relaxed);
        r
    }

    /// Stops watching.
    pub fn stop(&self) {
        self.done.store(true, Relaxed);
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A barrier whose waiters keep doing `idle` (a CPU polls its caches, so
/// that a drain waiting on it ends) instead of sleeping.
pub struct PollBarrier {
    n: usize,
    count: AtomicUsize,
    generation: AtomicUsize,
}

impl PollBarrier {
    /// A barrier for `n` threads.
    pub fn new(n: usize) -> Self {
        PollBarrier {
            n,
            count: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
        }
    }

    /// Waits until all `n` threads have arrived, running `idle` meanwhile.
    pub fn wait(&self, mut idle: impl FnMut()) {
        use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};
        let g = self.generation.load(Acquire);
        if self.count.fetch_add(1, AcqRel) + 1 == self.n {
            self.count.store(0, Relaxed);
            self.generation.fetch_add(1, Release);
            return;
        }
        while self.generation.load(Acquire) == g {
            idle();
            std::thread::yield_now();
        }
    }
}
