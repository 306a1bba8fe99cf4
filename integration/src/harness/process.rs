//! Child processes killed on drop, free ports, and the bounded wait every
//! test synchronises with.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// A path as a command-line argument.
pub fn arg(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// `n` distinct free loopback ports: every probe socket is held until all
/// are chosen, since the kernel readily hands a just-closed port out again
/// (two one-at-a-time picks once gave Envoy and mvp-ext-proc the same port).
pub fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<TcpListener> = (0..n).filter_map(|_| TcpListener::bind("127.0.0.1:0").ok()).collect();
    held.iter().filter_map(|l| l.local_addr().ok()).map(|a| a.port()).collect()
}

/// Polls `check` every 25 ms until it returns `Some`, or fails after `within`.
pub async fn wait_for<T, F, Fut>(what: &str, within: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            bail!("timed out after {within:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Waits for and holds the machine-wide lock `name` (a file in the temp
/// directory) for one of a kind a machine has one of at a time: flock(2)
/// (File::lock is newer than the workspace's MSRV), released when the file
/// closes, also when the process is killed.
pub fn machine_lock(name: &str) -> Result<std::fs::File> {
    let lock = std::fs::File::create(std::env::temp_dir().join(format!("mvp-envoy-{name}.lock")))?;
    use std::os::fd::AsRawFd;
    // SAFETY: a valid open descriptor, owned by `lock` for the call.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        bail!("locking {name}: {}", std::io::Error::last_os_error());
    }
    Ok(lock)
}

/// The child gets SIGKILL when the thread that spawned it ends — with the
/// test process, also when that is killed (a CI timeout, a ^C): `Drop`
/// never runs then, and an orphaned etcd, kube-apiserver or kubelet would
/// hold its ports and state into the next run. (Every `Proc` is spawned on a
/// thread that outlives it: a test's own thread or its runtime's workers.)
fn die_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: only async-signal-safe calls (prctl, getppid) between fork and exec.
    let parent = std::process::id() as libc::pid_t;
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent died before the prctl: nobody would kill us.
            if libc::getppid() != parent {
                return Err(std::io::Error::other("the test process is gone"));
            }
            Ok(())
        });
    }
}

/// A child process killed on drop, its output in a log file.
pub struct Proc {
    pub name: String,
    child: Option<Child>,
    pub log: PathBuf,
}

impl Proc {
    pub fn spawn(name: &str, dir: &Path, program: &Path, args: &[String]) -> Result<Proc> {
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log)?;
        let err = out.try_clone()?;
        let mut command = Command::new(program);
        command.args(args).stdin(Stdio::null()).stdout(out).stderr(err);
        die_with_parent(&mut command);
        let child = command
            .spawn()
            .with_context(|| format!("starting {name} ({})", program.display()))?;
        Ok(Proc { name: name.to_string(), child: Some(child), log })
    }

    /// Like `spawn`, pinned to `cores` (taskset list, e.g. "0" or "0,1").
    pub fn spawn_pinned(name: &str, dir: &Path, cores: &str, program: &Path, args: &[String]) -> Result<Proc> {
        let mut all = vec!["-c".to_string(), cores.to_string(), program.to_string_lossy().into_owned()];
        all.extend(args.iter().cloned());
        Proc::spawn(name, dir, Path::new("taskset"), &all)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends a signal (`STOP`, `CONT`, …) to the process.
    pub fn signal(&self, sig: &str) {
        if let Some(c) = &self.child {
            let _ = Command::new("kill").arg(format!("-{sig}")).arg(c.id().to_string()).status();
        }
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// The log's first lines: where a process that failed to start says why
    /// (a backtrace may follow).
    pub fn log_head(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines().take(lines).collect::<Vec<_>>().join("\n")
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("----- last lines of {} ({}) -----\n{}", self.name, self.log.display(), self.log_tail(30));
        }
        self.kill();
    }
}

/// A process's resident memory (KiB), 0 when it is gone.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok()).unwrap_or(0)
}

/// Pins the calling thread to core `cpu`; processes it spawns afterwards
/// inherit the pin. A test that measures latency under a flood pins its own
/// side (clients, attacker, fakes) apart from the door's Envoy, as they are
/// apart in a cluster: otherwise the kernel's time slices between them are
/// what is measured.
pub fn pin_this_thread(cpu: usize) -> Result<()> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes within it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: the calling thread (0), a set of the size given.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        bail!("pinning this thread to core {cpu}: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// The cores this thread may run on (its affinity: a container's cpuset,
/// not always 0 and 1).
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set, filled by the call.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the calling thread (0), a set of the size given.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return vec![];
    }
    // SAFETY: reading bits within the set's size.
    (0..libc::CPU_SETSIZE as usize).filter(|c| unsafe { libc::CPU_ISSET(*c, &set) }).collect()
}

/// Pins every thread of process `pid` to the cores `cpus` (taskset list).
pub fn pin_process(pid: u32, cpus: &str) -> Result<()> {
    let out = Command::new("taskset").args(["-a", "-p", "-c", cpus, &pid.to_string()]).stdout(Stdio::null()).output()?;
    if !out.status.success() {
        bail!("taskset -a -p -c {cpus} {pid}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// One thread of a child process stopped — ptrace seizes and interrupts
/// it, the process's other threads run on — until dropped. What a stalled
/// thread looks like from outside: SIGSTOP would stop the whole process.
/// Dropped on the thread that stopped it (ptrace's tracer is a thread).
pub struct StoppedThread {
    tid: libc::pid_t,
}

impl StoppedThread {
    /// Stops thread `tid` (a process's main thread: its pid).
    pub fn stop(tid: u32) -> Result<StoppedThread> {
        let tid = libc::pid_t::try_from(tid)?;
        let none = std::ptr::null_mut::<libc::c_void>();
        // SAFETY: ptrace requests on a thread of our own child; no memory
        // is passed (null address and data).
        unsafe {
            if libc::ptrace(libc::PTRACE_SEIZE, tid, none, none) != 0 {
                bail!("ptrace seize of thread {tid}: {}", std::io::Error::last_os_error());
            }
            let stopped = StoppedThread { tid };
            if libc::ptrace(libc::PTRACE_INTERRUPT, tid, none, none) != 0 {
                bail!("ptrace interrupt of thread {tid}: {}", std::io::Error::last_os_error());
            }
            let mut status = 0;
            if libc::waitpid(tid, &mut status, libc::__WALL) != tid {
                bail!("waiting for thread {tid} to stop: {}", std::io::Error::last_os_error());
            }
            Ok(stopped)
        }
    }
}

impl Drop for StoppedThread {
    fn drop(&mut self) {
        let none = std::ptr::null_mut::<libc::c_void>();
        // SAFETY: detaching the thread this value seized; it runs on.
        unsafe { libc::ptrace(libc::PTRACE_DETACH, self.tid, none, none) };
    }
}

#[cfg(test)]
mod die_with_parent_tests {
    use super::*;

    /// Its `Drop` never runs (as when the test process is killed): the child
    /// still goes when the thread that spawned it does.
    #[test]
    fn a_child_dies_with_its_spawner_even_unreaped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        let pid = std::thread::spawn(move || {
            let p = Proc::spawn("sleeper", &path, Path::new("sleep"), &["600".into()]).unwrap();
            let pid = p.pid();
            std::mem::forget(p);
            pid
        })
        .join()
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        // A zombie until reaped (it is our child): gone or in state Z.
        let alive = || std::fs::read_to_string(format!("/proc/{pid}/stat")).map(|s| !s.contains(") Z ")).unwrap_or(false);
        while alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!alive(), "sleep {pid} outlived the thread that spawned it");
    }
}
