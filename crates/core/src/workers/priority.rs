//! SuperPoint before DUSt3R on shared cores. Keypoints are the per-frame product; a pair is
//! seconds of work that can wait. On the CPU both would share one thread pool and a frame would
//! queue behind a pair's blocks, so the live node runs DUSt3R on a pool of its own whose threads
//! have a higher nice value: the kernel's scheduler gives the cores to SuperPoint whenever it has
//! a frame and to DUSt3R the rest of the time, with no cost when either is idle.
//!
//! A camera faster than SuperPoint leaves no rest time, and at nice 19 a pair would then get a
//! sliver of the cores and never finish; so while a pair is in flight the foreground rests a
//! little after each frame ([`rest_after`]), which guarantees the pair a share of the time.

use std::time::Duration;

use rayon::{ThreadPool, ThreadPoolBuilder};

/// Errors making the background pool.
#[derive(Debug, thiserror::Error)]
pub enum PriorityError {
    /// The threads could not be started.
    #[error("starting the background thread pool")]
    Pool(#[from] rayon::ThreadPoolBuildError),
}

/// A rayon pool whose threads run at a lower priority than the rest of the process.
pub struct BackgroundPool {
    pool: ThreadPool,
    nice: i32,
}

impl BackgroundPool {
    /// `threads` workers (0: one per core), each raising its own nice value by `nice` (Linux
    /// applies nice per thread; 0 leaves them equal to the others). A nice value the system
    /// refuses is logged once per thread and the thread runs on at the normal priority.
    pub fn new(name: &str, threads: usize, nice: i32) -> Result<Self, PriorityError> {
        let prefix = name.to_string();
        let pool = ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(move |i| format!("{prefix}-{i}"))
            .start_handler(move |_| {
                if nice != 0 {
                    if let Err(e) = lower_this_thread(nice) {
                        tracing::warn!("could not lower a background thread's priority by {nice}: {e}");
                    }
                }
            })
            .build()?;
        Ok(Self { pool, nice })
    }

    /// Runs `work` on the pool: it and every rayon operation inside it use the pool's threads.
    pub fn install<R: Send>(&self, work: impl FnOnce() -> R + Send) -> R {
        self.pool.install(work)
    }

    /// The nice value its threads add.
    pub fn nice(&self) -> i32 {
        self.nice
    }

    /// Its number of threads.
    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }
}

/// The node's default share of the time for a pair in flight (`dust3r_cpu_share`): enough for a
/// pair to finish when frames come faster than SuperPoint, for about a third of the keypoints
/// then (measured, docs/speed.md), and only then.
pub const DEFAULT_BACKGROUND_SHARE: f64 = 0.25;

/// The most of the time the background may be guaranteed: the foreground keeps a tenth.
pub const MAX_BACKGROUND_SHARE: f64 = 0.9;

/// How long the foreground rests after work that took `busy` so that waiting background work
/// gets `share` of the time even when the foreground always has more to do: `busy * share / (1 -
/// share)` (`share` clamped to 0..=[`MAX_BACKGROUND_SHARE`]). Time the foreground would have
/// waited anyway counts toward it.
pub fn rest_after(busy: Duration, share: f64) -> Duration {
    let share = if share.is_nan() { 0.0 } else { share.clamp(0.0, MAX_BACKGROUND_SHARE) };
    busy.mul_f64(share / (1.0 - share))
}

/// Raises the calling thread's nice value by `nice` (Linux: per thread, through its id).
fn lower_this_thread(nice: i32) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: plain system calls on the calling thread's own id; no memory is shared.
        unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            *libc::__errno_location() = 0;
            let current = libc::getpriority(libc::PRIO_PROCESS, tid);
            if current == -1 && *libc::__errno_location() != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::setpriority(libc::PRIO_PROCESS, tid, (current + nice).min(19)) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = nice;
        Ok(())
    }
}

/// The calling thread's nice value (Linux; 0 elsewhere).
pub fn this_thread_nice() -> i32 {
    #[cfg(target_os = "linux")]
    // SAFETY: as in lower_this_thread.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::getpriority(libc::PRIO_PROCESS, tid)
    }
    #[cfg(not(target_os = "linux"))]
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rest_leaves_the_background_its_share_of_the_time() {
        for (busy_ms, share) in [(300.0, 0.25), (80.0, 0.5), (1234.0, 0.1), (250.0, 0.9)] {
            let busy = Duration::from_secs_f64(busy_ms / 1e3);
            let rest = rest_after(busy, share).as_secs_f64();
            // Over one frame and its rest, the background has the cores for `share` of the time.
            let background = rest / (rest + busy.as_secs_f64());
            assert!((background - share).abs() < 1e-6, "busy {busy_ms} ms, share {share}: {background}");
        }
        let busy = Duration::from_millis(200);
        assert_eq!(rest_after(busy, 0.0), Duration::ZERO, "0: no rest");
        assert_eq!(rest_after(busy, -1.0), Duration::ZERO);
        assert_eq!(rest_after(busy, f64::NAN), Duration::ZERO);
        assert_eq!(rest_after(busy, 1.0), rest_after(busy, MAX_BACKGROUND_SHARE), "never all of it");
    }

    #[test]
    fn the_pools_threads_run_at_the_raised_nice_value_and_the_caller_does_not() {
        let before = this_thread_nice();
        let pool = BackgroundPool::new("bg-test", 2, 5).unwrap();
        assert_eq!(pool.threads(), 2);
        let inside: Vec<i32> = pool.install(|| {
            use rayon::prelude::*;
            (0..64).into_par_iter().map(|_| this_thread_nice()).collect()
        });
        assert!(inside.iter().all(|&n| n == (before + 5).min(19)), "{inside:?}, caller at {before}");
        assert_eq!(this_thread_nice(), before, "the calling thread keeps its priority");
        // The global pool is untouched.
        let global: Vec<i32> = {
            use rayon::prelude::*;
            (0..64).into_par_iter().map(|_| this_thread_nice()).collect()
        };
        assert!(global.iter().all(|&n| n == before), "{global:?}");
    }
}
