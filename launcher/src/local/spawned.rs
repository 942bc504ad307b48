//! Processes started by MPI_Comm_spawn through this mpirun's PMI server (PMI-1 `spawn`),
//! and the name service (MPI_Publish_name, MPI_Lookup_name, MPI_Unpublish_name).
//!
//! A spawn request becomes a new group of the PMI server (its own key-value space holding
//! the preput pairs, its own barrier, ranks 0..n-1: its own MPI_COMM_WORLD) whose
//! processes this mpirun starts and reaps like the job's own: a child that fails takes the
//! whole job down, and mpirun ends only when every child has ended. Children are placed
//! round-robin over the hosts the job's ranks run on (in the order of the ranks; the
//! `host` info key narrows them to the hosts it names), started here or by the host's
//! agent; they get the job's environment and key, plus
//! `PMI_SPAWNED=1` (MPICH's convention, which tells the library to look for its parents'
//! port among the preput keys) and `TSUNAGI_APPNUM` (MPI_APPNUM).
//!
//! Names live in the directory of files `tsunagi_dynconn::setup` keeps
//! (`TSUNAGI_NAME_DIR`), so jobs of different mpiruns on a host still find each other;
//! what a job published and did not unpublish is removed when its mpirun ends.

use std::ffi::OsStr;

use tsunagi_dynconn::setup::{self as names, NameError};

use super::*;
use crate::pmi_spawn::SpawnRequest;
use crate::server::{name_reply, NameOp};
use tsunagi_core::pmi::wire::Command;

/// Where a spawned process can run: here, or through agent `i`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Host {
    Here,
    Agent(usize),
}

impl Runner {
    /// The hosts of the job's ranks, in rank order, each once (only connected agents).
    fn job_hosts(&self) -> Vec<Host> {
        let mut v = Vec::new();
        for slot in 0..self.server.size() {
            let h = if self.ranks.iter().any(|r| r.rank == slot) {
                Some(Host::Here)
            } else {
                self.remote.as_ref().and_then(|st| {
                    st.agents
                        .iter()
                        .position(|a| a.conn.is_some() && !a.lost && a.plan.ranks.contains(&slot))
                        .map(Host::Agent)
                })
            };
            if let Some(h) = h.filter(|h| !v.contains(h)) {
                v.push(h);
            }
        }
        if v.is_empty() {
            v.push(Host::Here);
        }
        v
    }

    fn host_name(&self, h: Host, me: &str) -> String {
        match (h, self.remote.as_ref()) {
            (Host::Agent(i), Some(st)) => st.agents[i].plan.host.clone(),
            _ => me.to_string(),
        }
    }

    /// Start the processes of `req` as a new group; `Err` says why nothing was started
    /// (bad program, directory or host). A process that cannot be started once others
    /// are running ends the job (its group would wait for it forever).
    pub(super) fn spawn_group(&mut self, req: &SpawnRequest) -> Result<(), String> {
        if self.failure.is_some() {
            return Err("the job is ending".into());
        }
        let me = tsunagi_core::boot::hostname();
        let path_var = std::env::var_os("PATH");
        // Check every application before anything starts.
        let job_hosts = self.job_hosts();
        let mut plans = Vec::new();
        for a in &req.apps {
            let mut hosts = job_hosts.clone();
            if let Some(names) = a.info("host") {
                let names: Vec<&str> = names
                    .split(',')
                    .map(str::trim)
                    .filter(|h| !h.is_empty())
                    .collect();
                if let Some(h) = names.iter().find(|n| {
                    !job_hosts.iter().any(|&j| match j {
                        Host::Here => crate::hosts::is_local(n, &me),
                        Host::Agent(_) => self.host_name(j, &me) == **n,
                    })
                }) {
                    return Err(format!(
                        "host {:?} is not one of the hosts this job runs on",
                        printable(h, 100)
                    ));
                }
                if !names.is_empty() {
                    hosts.retain(|&j| {
                        names.iter().any(|n| match j {
                            Host::Here => crate::hosts::is_local(n, &me),
                            Host::Agent(_) => self.host_name(j, &me) == *n,
                        })
                    });
                }
            }
            if hosts.is_empty() {
                return Err("no host to run on".into());
            }
            let wdir = a.info("wdir").map(PathBuf::from);
            if let Some(d) = wdir.as_ref().filter(|d| !d.is_dir()) {
                return Err(format!("wdir {:?} is not a directory", d.display()));
            }
            let path = match a.info("path") {
                Some(p) => {
                    let mut v = OsString::from(p);
                    if let Some(old) = &path_var {
                        v.push(":");
                        v.push(old);
                    }
                    Some(v)
                }
                None => path_var.clone(),
            };
            // A relative path with a slash is relative to the working directory the
            // process will have.
            let exec = PathBuf::from(&a.execname);
            let exec = match &wdir {
                Some(d) if exec.is_relative() && a.execname.contains('/') => d.join(exec),
                _ => exec,
            };
            let program = crate::resolve_program(exec.as_os_str(), path.as_deref())
                .map_err(|(msg, _)| msg)?;
            plans.push((a, program, wdir, hosts));
        }
        let total = req.total_procs();
        let group_no = self.server.kvsnames().count();
        let kvsname = format!("{}_s{group_no}", self.template.kvsname);
        let appnums: Vec<i32> = req
            .apps
            .iter()
            .enumerate()
            .flat_map(|(i, a)| std::iter::repeat_n(i as i32, a.nprocs))
            .collect();
        let mapping = format!("(vector,(0,1,{total}))");
        let base = self
            .server
            .add_group(&kvsname, &appnums, &mapping, &req.preput)?;
        let mut first = 0;
        for (i, (a, program, wdir, hosts)) in plans.into_iter().enumerate() {
            let job_for = |env: &[(OsString, OsString)], ranks: Vec<usize>| {
                let mut env: Vec<(OsString, OsString)> = env
                    .iter()
                    // A node map lists the parents' ranks, not the children's.
                    .filter(|(k, v)| {
                        k != OsStr::new("TSUNAGI_NODE_MAP") || !v.to_string_lossy().contains(',')
                    })
                    .cloned()
                    .collect();
                env.push(("PMI_SPAWNED".into(), "1".into()));
                env.push(("TSUNAGI_APPNUM".into(), i.to_string().into()));
                LocalJob {
                    program: program.clone(),
                    argv0: OsString::from(&a.execname),
                    args: a.args.iter().map(OsString::from).collect(),
                    ranks,
                    size: total,
                    env,
                    kvsname: kvsname.clone(),
                    job_key: self.template.job_key.clone(),
                    slot_base: base,
                    wdir: wdir.clone(),
                }
            };
            // Round-robin over the app's hosts, counting from the group's first rank.
            let app_first = first;
            let on = |h: Host| -> Vec<usize> {
                (app_first..app_first + a.nprocs)
                    .filter(|r| hosts[r % hosts.len()] == h)
                    .collect()
            };
            first += a.nprocs;
            if let Some(st) = self.remote.as_mut() {
                for (ai, agent) in st.agents.iter_mut().enumerate() {
                    let ranks = on(Host::Agent(ai));
                    if ranks.is_empty() {
                        continue;
                    }
                    let job = job_for(&st.spec.env, ranks);
                    agent.left += job.ranks.len();
                    agent.plan.ranks.extend(job.ranks.iter().map(|r| base + r));
                    for m in Msg::job_spec(&job) {
                        agent.out.extend_from_slice(m.encode().as_bytes());
                    }
                }
            }
            let job = job_for(&self.template.env, on(Host::Here));
            for &rank in &job.ranks {
                match spawn_rank(&job, rank) {
                    Ok((child, conn)) => self.ranks.push(Rank::started(base + rank, child, conn)),
                    Err(e) => {
                        let msg = format!(
                            "cannot start {} ({}): {e}",
                            self.server.describe(base + rank),
                            job.program.display()
                        );
                        self.fail(format!("{msg}; job aborted"), 126, libc::SIGTERM);
                        return Err(msg);
                    }
                }
            }
        }
        Ok(())
    }

    /// Serve a name-service request; the reply to send.
    pub(super) fn name_service(&mut self, op: NameOp) -> Command {
        let failed = |e: NameError| match e {
            NameError::Service(m) => ("exists", m),
            NameError::Name(m) => ("notfound", m),
            NameError::Io(m) => ("fail", m),
        };
        match op {
            NameOp::Publish { service, port } => {
                let r = names::publish(&service, &port);
                if r.is_ok() {
                    self.published.push((service, port));
                }
                name_reply("publish_name", r.map(|()| None).map_err(failed))
            }
            NameOp::Unpublish { service, port } => {
                let port = match port {
                    Some(p) => Ok(p),
                    // MPICH's client names only the service.
                    None => names::lookup(&service).map_err(|_| {
                        NameError::Service(format!("the service name {service:?} is not published"))
                    }),
                };
                let r = port.and_then(|p| {
                    names::unpublish(&service, &p)?;
                    self.published.retain(|(s, q)| !(s == &service && q == &p));
                    Ok(())
                });
                name_reply("unpublish_name", r.map(|()| None).map_err(failed))
            }
            NameOp::Lookup { service } => name_reply(
                "lookup_name",
                names::lookup(&service).map(Some).map_err(failed),
            ),
        }
    }

    /// At the end: remove what spawned groups left in /dev/shm and the names this job
    /// did not unpublish.
    pub(super) fn clean_up_after_spawns(&mut self) {
        for k in self.server.kvsnames().skip(1) {
            crate::remove_job_shm(k);
        }
        for (service, port) in self.published.drain(..) {
            let _ = names::unpublish(&service, &port);
        }
    }
}
