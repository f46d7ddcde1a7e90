//! A watchdog for tests with threads: no such test hangs, and whichever
//! thread fails says why where the message survives the process.
//!
//! Each watched thread says what it is doing. The watchdog fails the whole
//! process (stuck threads would never join) when
//! - a call lasts longer than the limit,
//! - a wait at a [`PollBarrier`], or the test's final join, lasts longer
//!   than [`Watchdog::slow_limit`] (waits last as long as the slowest
//!   thread's work, so they get a longer limit than one call),
//! - a watched thread panicked and the test has not ended one limit later
//!   (the others are stuck in something the dead thread would have done).
//!
//! A panic on a watched thread is written to stderr at once, before the
//! test harness's capture can lose it with the process, and makes every
//! barrier of the watchdog give up: the waiting threads panic in turn, the
//! scope joins, and the test fails with the first message at the top.

use std::cell::RefCell;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

/// The name a barrier wait is reported under.
const BARRIER: &str = "a barrier";
/// The name the test's final join is reported under.
const JOIN: &str = "the join of its threads";

thread_local! {
    /// The watchdog this thread belongs to, and its index there.
    static WATCHED: RefCell<Option<(Arc<Watchdog>, usize)>> = const { RefCell::new(None) };
}

/// What each thread is doing, with a thread that watches.
pub struct Watchdog {
    start: Instant,
    limit: Duration,
    /// Per thread (the workers, then the thread that started the
    /// watchdog): milliseconds since `start` + 1 when the current call or
    /// wait began, 0 when not in one.
    since: Vec<AtomicU64>,
    /// Per thread: what it is in, an index into `names` (past its end: a
    /// barrier, or the join).
    what: Vec<AtomicUsize>,
    names: &'static [&'static str],
    /// Milliseconds since `start` + 1 when the first watched thread
    /// panicked, 0 while none has.
    died_at: AtomicU64,
    /// The first panic's thread and message.
    death: Mutex<Option<String>>,
    /// Workers whose [`WorkerGuard`] is alive.
    live: AtomicUsize,
    done: AtomicBool,
}

impl Watchdog {
    /// Watches `threads` worker threads whose calls are named by `names`,
    /// and the calling thread (the test's own, index `threads`); fails the
    /// process when one call lasts longer than `limit` (see the module
    /// docs for the other cases).
    pub fn start(threads: usize, names: &'static [&'static str], limit: Duration) -> Arc<Self> {
        install_hook();
        let w = Arc::new(Watchdog {
            start: Instant::now(),
            limit,
            since: (0..=threads).map(|_| AtomicU64::new(0)).collect(),
            what: (0..=threads).map(|_| AtomicUsize::new(0)).collect(),
            names,
            died_at: AtomicU64::new(0),
            death: Mutex::new(None),
            live: AtomicUsize::new(0),
            done: AtomicBool::new(false),
        });
        WATCHED.with(|t| *t.borrow_mut() = Some((w.clone(), threads)));
        let me = w.clone();
        std::thread::spawn(move || {
            while !me.done.load(Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
                if me.died() && me.live.load(Relaxed) == 0 {
                    // Every worker has ended: the panic fails the test as
                    // it unwinds, with nothing left to hang.
                    return;
                }
                if let Some(why) = me.overdue()
                    && !me.done.load(Relaxed)
                {
                    me.report(&why);
                    std::process::exit(101);
                }
            }
        });
        w
    }

    /// How long a barrier wait or the final join may last.
    pub fn slow_limit(&self) -> Duration {
        self.limit * 6
    }

    fn now(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn name(&self, what: usize) -> &'static str {
        match what.checked_sub(self.names.len()) {
            None => self.names[what],
            Some(0) => BARRIER,
            Some(_) => JOIN,
        }
    }

    fn thread_name(&self, i: usize) -> String {
        if i + 1 == self.since.len() {
            "the test's thread".into()
        } else {
            format!("CPU {i}")
        }
    }

    /// Why the process must end now, if it must.
    fn overdue(&self) -> Option<String> {
        let now = self.now();
        let died = self.died_at.load(Relaxed);
        if died != 0 && Duration::from_millis(now - (died - 1)) > self.limit {
            return Some(format!(
                "a thread panicked and the others have not ended {:?} later",
                self.limit
            ));
        }
        for (i, s) in self.since.iter().enumerate() {
            let t = s.load(Relaxed);
            let what = self.what[i].load(Relaxed);
            let limit = if what < self.names.len() {
                self.limit
            } else {
                self.slow_limit()
            };
            if t != 0 && Duration::from_millis(now - (t - 1)) > limit {
                return Some(format!(
                    "{} has been in {} over {limit:?}",
                    self.thread_name(i),
                    self.name(what)
                ));
            }
        }
        None
    }

    /// Writes why the test fails, the first panic and every thread still
    /// in a call, straight to stderr (the harness's capture would be lost
    /// with the process).
    fn report(&self, why: &str) {
        let now = self.now();
        let mut e = std::io::stderr().lock();
        let _ = writeln!(e, "watchdog: {why}");
        if let Some(d) = &*self.death.lock().unwrap_or_else(|p| p.into_inner()) {
            let _ = writeln!(e, "  first panic: {d}");
        }
        let _ = writeln!(e, "  threads in a call or a wait:");
        for (i, s) in self.since.iter().enumerate() {
            let t = s.load(Relaxed);
            if t != 0 {
                let name = self.name(self.what[i].load(Relaxed));
                let _ = writeln!(
                    e,
                    "    {}: in {name} for {} ms",
                    self.thread_name(i),
                    now - (t - 1)
                );
            }
        }
    }

    /// Marks this thread as worker `i` until the guard drops: a panic on
    /// it is reported at once and breaks every barrier of the watchdog.
    #[must_use]
    pub fn worker(self: &Arc<Self>, i: usize) -> WorkerGuard {
        assert!(
            i + 1 < self.since.len(),
            "worker {i} of {}",
            self.since.len() - 1
        );
        WATCHED.with(|t| *t.borrow_mut() = Some((self.clone(), i)));
        self.live.fetch_add(1, Relaxed);
        WorkerGuard
    }

    /// Runs `f` as thread `cpu`'s call `what` (an index into the names).
    pub fn call<T>(&self, cpu: usize, what: usize, f: impl FnOnce() -> T) -> T {
        self.enter(cpu, what);
        let r = f();
        self.since[cpu].store(0, Relaxed);
        r
    }

    fn enter(&self, i: usize, what: usize) {
        self.what[i].store(what, Relaxed);
        self.since[i].store(self.now() + 1, Relaxed);
    }

    /// A barrier for `n` threads that gives up when a watched thread has
    /// died, and whose waits the watchdog times.
    pub fn barrier(self: &Arc<Self>, n: usize) -> PollBarrier {
        PollBarrier {
            n,
            count: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
            dog: self.clone(),
        }
    }

    /// The test's thread is about to join its workers (the end of a
    /// `std::thread::scope` closure): from here the join is timed.
    pub fn joining(&self) {
        self.enter(self.since.len() - 1, self.names.len() + 1);
    }

    /// Whether a watched thread has panicked.
    pub fn died(&self) -> bool {
        self.died_at.load(Relaxed) != 0
    }

    /// Records the first panic.
    fn record_death(&self, i: usize, message: String) {
        let mut d = self.death.lock().unwrap_or_else(|p| p.into_inner());
        if d.is_none() {
            *d = Some(format!("{}: {message}", self.thread_name(i)));
            self.died_at.store(self.now() + 1, Relaxed);
        }
    }

    /// Stops watching.
    pub fn stop(&self) {
        self.done.store(true, Relaxed);
        WATCHED.with(|t| {
            let mut t = t.borrow_mut();
            if t.as_ref().is_some_and(|(w, _)| std::ptr::eq(&**w, self)) {
                *t = None;
            }
        });
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.done.store(true, Relaxed);
    }
}

/// Marks the thread as a worker while it lives ([`Watchdog::worker`]).
pub struct WorkerGuard;

impl Drop for WorkerGuard {
    fn drop(&mut self) {
        if let Some((dog, _)) = WATCHED.with(|t| t.borrow_mut().take()) {
            dog.live.fetch_sub(1, Relaxed);
        }
    }
}

/// Once per process: a panic on a watched thread goes to stderr at once
/// and is recorded in its watchdog; then the usual report (which the
/// harness captures) follows.
fn install_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let watched = WATCHED
                .try_with(|t| t.try_borrow().ok().and_then(|t| t.clone()))
                .ok()
                .flatten();
            if let Some((dog, i)) = watched {
                let payload = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "(no message)".into());
                let at = info
                    .location()
                    .map(|l| format!(" at {}:{}", l.file(), l.line()))
                    .unwrap_or_default();
                let message = format!("panicked{at}: {payload}");
                let _ = writeln!(
                    std::io::stderr().lock(),
                    "watchdog: {} {message}",
                    dog.thread_name(i)
                );
                dog.record_death(i, message);
            }
            previous(info);
        }));
    });
}

/// A barrier whose waiters keep doing `idle` (a CPU polls its caches, so
/// that a drain waiting on it ends) instead of sleeping; made by
/// [`Watchdog::barrier`].
pub struct PollBarrier {
    n: usize,
    count: AtomicUsize,
    generation: AtomicUsize,
    dog: Arc<Watchdog>,
}

impl PollBarrier {
    /// Waits until all `n` threads have arrived, running `idle` meanwhile.
    /// Panics (saying so) when a watched thread has died: it will never
    /// arrive.
    pub fn wait(&self, mut idle: impl FnMut()) {
        use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};
        let me = WATCHED.with(|t| {
            t.borrow()
                .as_ref()
                .filter(|(w, _)| Arc::ptr_eq(w, &self.dog))
                .map(|(_, i)| *i)
        });
        let g = self.generation.load(Acquire);
        if self.count.fetch_add(1, AcqRel) + 1 == self.n {
            self.count.store(0, Relaxed);
            self.generation.fetch_add(1, Release);
            return;
        }
        if let Some(i) = me {
            self.dog.enter(i, self.dog.names.len());
        }
        while self.generation.load(Acquire) == g {
            if self.dog.died() {
                panic!("barrier: gave up waiting, a thread that was to arrive has died");
            }
            idle();
            std::thread::yield_now();
        }
        if let Some(i) = me {
            self.dog.since[i].store(0, Relaxed);
        }
    }
}
