//! SuperPoint before DUSt3R on shared cores. Keypoints are the per-frame product; a pair is
//! seconds of work that can wait. On the CPU both would share one thread pool and a frame would
//! queue behind a pair's blocks, so the live node runs DUSt3R on a pool of its own whose threads
//! have a higher nice value: the kernel's scheduler gives the cores to SuperPoint whenever it has
//! a frame and to DUSt3R the rest of the time, with no cost when either is idle.

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
