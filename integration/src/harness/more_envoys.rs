//! More Envoys in front of one [`FrontDoor`]'s mvp-ext-proc: several doors
//! behind an L4 balancer, a plain round robin or the other filter build on
//! the same members side by side, an Envoy under valgrind for the bench.

use std::time::Duration;

use anyhow::{Context, Result};

use super::FrontDoor;
use super::process::{Proc, free_ports};
use super::tools::{FilterBuild, envoy_bin};
use super::topology::Topology;

impl FrontDoor {
    /// Another Envoy on its own ports with the same bootstrap, served by the
    /// same mvp-ext-proc (several front doors behind an L4 balancer):
    /// returns it and its topology once it is ready.
    pub async fn another_envoy(&self) -> Result<(Proc, Topology)> {
        self.another_envoy_with(|yaml| yaml).await
    }

    /// [`FrontDoor::another_envoy`] with its bootstrap edited (e.g. a plain
    /// round-robin front door: no routing filter, same apiserver members).
    pub async fn another_envoy_with(&self, edit: fn(String) -> String) -> Result<(Proc, Topology)> {
        self.another_envoy_of(self.topology.filter, edit).await
    }

    /// [`FrontDoor::another_envoy_with`] running the routing filter's
    /// other build (both builds' doors side by side on the same members).
    pub async fn another_envoy_of(&self, filter: FilterBuild, edit: fn(String) -> String) -> Result<(Proc, Topology)> {
        self.another_envoy_under(filter, edit, None).await
    }

    /// [`FrontDoor::another_envoy_of`] run by `under` (a program and its
    /// flags, Envoy's command line following them: valgrind for the
    /// bench's instruction counts) with `within` to start.
    pub async fn another_envoy_under(&self, filter: FilterBuild, edit: fn(String) -> String, under: Option<(&[String], Duration)>) -> Result<(Proc, Topology)> {
        let mut topology = self.topology.clone();
        topology.filter = filter;
        let free = free_ports(2);
        topology.ports.listen = free.first().copied().context("no free port")?;
        topology.ports.admin = free.get(1).copied().context("no free port")?;
        let config = self.dir.path().join(format!("envoy-{}.yaml", topology.ports.listen));
        std::fs::write(&config, edit(topology.render_envoy_config()?))?;
        let (mut program, mut args) = (envoy_bin()?, Topology::envoy_args(&config, 1, "info"));
        if let Some((wrapper, within)) = under {
            let (first, flags) = wrapper.split_first().context("an empty wrapper command")?;
            args = flags.iter().cloned().chain([program.to_string_lossy().into_owned()]).chain(args).collect();
            program = first.into();
            topology.envoy_start_within = within;
        }
        let envoy = Proc::spawn(&format!("envoy-{}", topology.ports.listen), self.dir.path(), &program, &args)?;
        topology.wait_ready(&self.http).await?;
        Ok((envoy, topology))
    }

    /// An Envoy of [`FrontDoor::another_envoy`] started again, its process
    /// gone (killed, crashed), on the same ports and bootstrap; returned
    /// once it is ready.
    pub async fn restart_another_envoy(&self, topology: &Topology) -> Result<Proc> {
        let config = self.dir.path().join(format!("envoy-{}.yaml", topology.ports.listen));
        let envoy = Proc::spawn(&format!("envoy-{}-again", topology.ports.listen), self.dir.path(), &envoy_bin()?, &Topology::envoy_args(&config, 1, "info"))?;
        topology.wait_ready(&self.http).await?;
        Ok(envoy)
    }
}
