//! A process with a container's memory limit, as it runs in a pod: its own
//! memory cgroup with the limit, seen by the process as its cgroup root
//! (a private mount namespace binds it where a container sees its own) —
//! so what reads the limit from inside (Envoy's `cgroup_memory` monitor)
//! reads this one, and the kernel's OOM killer acts at it. Needs root and
//! the memory controller (cgroup v1 `memory`, or v2), as the test machines
//! have.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// Where a container sees its memory cgroup.
const V1_ROOT: &str = "/sys/fs/cgroup/memory";
const V2_ROOT: &str = "/sys/fs/cgroup";

pub struct MemoryCgroup {
    path: PathBuf,
    v2: bool,
}

impl MemoryCgroup {
    /// A new cgroup limited to `limit` bytes (no swap beyond it).
    pub fn new(name: &str, limit: u64) -> Result<MemoryCgroup> {
        let v2 = Path::new(V2_ROOT).join("cgroup.controllers").exists();
        let root = if v2 { V2_ROOT } else { V1_ROOT };
        if !v2 && !Path::new(V1_ROOT).is_dir() {
            bail!("no memory cgroup controller at {V1_ROOT} or {V2_ROOT}");
        }
        let path = Path::new(root).join(format!("mvp-test-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&path).with_context(|| format!("creating {} (root and the memory controller are needed)", path.display()))?;
        let cg = MemoryCgroup { path, v2 };
        if v2 {
            cg.write("memory.max", &limit.to_string())?;
            let _ = cg.write("memory.swap.max", "0");
        } else {
            cg.write("memory.limit_in_bytes", &limit.to_string())?;
            let _ = cg.write("memory.memsw.limit_in_bytes", &limit.to_string());
        }
        Ok(cg)
    }

    fn write(&self, file: &str, value: &str) -> Result<()> {
        std::fs::write(self.path.join(file), value).with_context(|| format!("writing {value} to {}", self.path.join(file).display()))
    }

    fn read(&self, file: &str) -> Option<String> {
        std::fs::read_to_string(self.path.join(file)).ok()
    }

    /// The command line that runs `program args` in this cgroup, seeing it
    /// as its own: (`sh`, its arguments), for [`super::Proc::spawn`].
    pub fn wrap(&self, dir: &Path, program: &Path, args: &[String]) -> Result<(PathBuf, Vec<String>)> {
        let script = dir.join("in-container.sh");
        std::fs::write(
            &script,
            "#!/bin/sh\n# $1: the cgroup, $2: where a container sees it, then the program.\ncg=$1; at=$2; shift 2\necho $$ > \"$cg/cgroup.procs\"\nexec unshare -m sh -c 'mount --bind \"$1\" \"$2\" && shift 2 && exec \"$@\"' _ \"$cg\" \"$at\" \"$@\"\n",
        )?;
        let at = if self.v2 { V2_ROOT } else { V1_ROOT };
        let mut all = vec![super::process::arg(&script), super::process::arg(&self.path), at.to_string(), super::process::arg(program)];
        all.extend(args.iter().cloned());
        Ok((PathBuf::from("sh"), all))
    }

    /// The most memory the cgroup has used (bytes).
    pub fn peak_bytes(&self) -> u64 {
        let file = if self.v2 { "memory.peak" } else { "memory.max_usage_in_bytes" };
        self.read(file).and_then(|s| s.trim().parse().ok()).unwrap_or(0)
    }

    /// Processes the kernel's OOM killer ended in it.
    pub fn oom_kills(&self) -> u64 {
        let file = if self.v2 { "memory.events" } else { "memory.oom_control" };
        self.read(file).and_then(|s| s.lines().find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())).unwrap_or(0)
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        // Empty once its process is gone (the owner kills it first).
        for _ in 0..50 {
            if std::fs::remove_dir(&self.path).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}
