//! Hosts and placement: `--host` lists, hostfiles, mapping ranks to hosts by slot or by
//! node, and the `PMI_process_mapping` that tells the ranks where everyone runs. Pure
//! functions, unit-tested.

/// A host and how many ranks it takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    pub name: String,
    pub slots: usize,
}

/// How ranks are spread over hosts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MapBy {
    /// Fill each host's slots before the next (ranks 0,1 on the first host, 2,3 on the next).
    #[default]
    Slot,
    /// Round robin over hosts (rank 0 on the first, rank 1 on the second...).
    Node,
}

fn parse_slots(s: &str, what: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{what}: invalid slot count {:?}", s.trim())),
    }
}

/// Parse `--host h1:2,h2:2` (a host without `:N` has 1 slot; a repeated host adds slots).
pub fn parse_host_list(spec: &str) -> Result<Vec<Host>, String> {
    let mut hosts: Vec<Host> = Vec::new();
    for item in spec.split(',') {
        let item = item.trim();
        if item.is_empty() {
            return Err(format!("--host {spec}: empty host name"));
        }
        let (name, slots) = match item.rsplit_once(':') {
            Some((n, s)) => (n, parse_slots(s, &format!("--host {item}"))?),
            None => (item, 1),
        };
        add(&mut hosts, name, slots, &format!("--host {item}"))?;
    }
    Ok(hosts)
}

fn add(hosts: &mut Vec<Host>, name: &str, slots: usize, what: &str) -> Result<(), String> {
    if name.is_empty()
        || name
            .chars()
            .any(|c| c.is_whitespace() || c == '\'' || c == '"')
    {
        return Err(format!("{what}: invalid host name {name:?}"));
    }
    match hosts.iter_mut().find(|h| h.name == name) {
        Some(h) => h.slots += slots,
        None => hosts.push(Host {
            name: name.to_string(),
            slots,
        }),
    }
    Ok(())
}

/// Parse a hostfile: one host per line, `host`, `host slots=N` or `host:N`; `#` starts a
/// comment. `file` names the file in errors.
pub fn parse_hostfile(text: &str, file: &str) -> Result<Vec<Host>, String> {
    let mut hosts = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let what = format!("hostfile {file} line {}", i + 1);
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let first = words.next().expect("non-empty line");
        let (name, mut slots) = match first.rsplit_once(':') {
            Some((n, s)) => (n, parse_slots(s, &what)?),
            None => (first, 1),
        };
        for w in words {
            match w.split_once('=') {
                Some(("slots", v)) => slots = parse_slots(v, &what)?,
                // Open MPI's hostfiles may carry max_slots; it does not change placement.
                Some(("max_slots", v)) => {
                    parse_slots(v, &what)?;
                }
                _ => return Err(format!("{what}: unexpected {w:?} (expected slots=N)")),
            }
        }
        add(&mut hosts, name, slots, &what)?;
    }
    if hosts.is_empty() {
        return Err(format!("hostfile {file} lists no hosts"));
    }
    Ok(hosts)
}

/// The host index of every rank. More ranks than slots is an error unless `oversubscribe`,
/// in which case placement keeps cycling over the hosts.
pub fn place(
    hosts: &[Host],
    np: usize,
    by: MapBy,
    oversubscribe: bool,
) -> Result<Vec<usize>, String> {
    let total: usize = hosts.iter().map(|h| h.slots).sum();
    if np > total && !oversubscribe {
        return Err(format!(
            "{np} ranks but only {total} slots on {} host(s); add slots or use --oversubscribe",
            hosts.len()
        ));
    }
    let mut used = vec![0usize; hosts.len()];
    let mut out = Vec::with_capacity(np);
    match by {
        MapBy::Slot => {
            // Fill hosts in order; past the slots, go round again one rank per host.
            let mut h = 0;
            while out.len() < np {
                if out.len() < total {
                    while used[h] >= hosts[h].slots {
                        h += 1;
                    }
                } else {
                    h = (out.len() - total) % hosts.len();
                }
                used[h] += 1;
                out.push(h);
            }
            // Oversubscribed ranks were appended round robin; keep each host's ranks
            // consecutive so node-local ranks are neighbours, as with slots.
            if np > total {
                out.sort_unstable();
            }
        }
        MapBy::Node => {
            let mut h = 0;
            while out.len() < np {
                if out.len() < total && used[h] >= hosts[h].slots {
                    h = (h + 1) % hosts.len();
                    continue;
                }
                used[h] += 1;
                out.push(h);
                h = (h + 1) % hosts.len();
            }
        }
    }
    Ok(out)
}

/// `PMI_process_mapping` for a placement: runs of consecutive ranks on one host become
/// `(node,1,count)` blocks, and neighbouring blocks of consecutive nodes with the same count
/// merge (`(0,2,1)` for round robin over two hosts).
pub fn process_mapping(placement: &[usize]) -> String {
    let mut runs: Vec<(usize, usize)> = Vec::new(); // (host, ranks)
    for &h in placement {
        match runs.last_mut() {
            Some((last, n)) if *last == h => *n += 1,
            _ => runs.push((h, 1)),
        }
    }
    let mut blocks: Vec<(usize, usize, usize)> = Vec::new(); // (first node, nodes, per node)
    for (h, n) in runs {
        match blocks.last_mut() {
            Some((first, count, per)) if *per == n && *first + *count == h => *count += 1,
            _ => blocks.push((h, 1, n)),
        }
    }
    let body: Vec<String> = blocks
        .iter()
        .map(|(f, c, p)| format!("({f},{c},{p})"))
        .collect();
    format!("(vector,{})", body.join(","))
}

/// Whether `name` is this host, so its ranks start without an agent.
pub fn is_local(name: &str, my_hostname: &str) -> bool {
    name == "localhost"
        || name == "127.0.0.1"
        || name == my_hostname
        || my_hostname.split('.').next() == Some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(name: &str, slots: usize) -> Host {
        Host {
            name: name.into(),
            slots,
        }
    }

    #[test]
    fn host_lists() {
        assert_eq!(
            parse_host_list("a:2,b:2").unwrap(),
            vec![h("a", 2), h("b", 2)]
        );
        assert_eq!(
            parse_host_list("a,b,a").unwrap(),
            vec![h("a", 2), h("b", 1)]
        );
        assert!(parse_host_list("a:0").is_err());
        assert!(parse_host_list("a:x").is_err());
        assert!(parse_host_list("a,,b").is_err());
    }

    #[test]
    fn hostfiles() {
        let text = "# cluster\nnode1 slots=2\nnode2:3  # comment\n\n  node3\n";
        assert_eq!(
            parse_hostfile(text, "f").unwrap(),
            vec![h("node1", 2), h("node2", 3), h("node3", 1)]
        );
        let e = parse_hostfile("node1 slots=two\n", "f").unwrap_err();
        assert!(e.contains("line 1"), "{e}");
        let e = parse_hostfile("ok\nnode1 cpus=2\n", "f").unwrap_err();
        assert!(e.contains("line 2"), "{e}");
        assert!(parse_hostfile("# nothing\n", "f").is_err());
    }

    #[test]
    fn placement() {
        let hs = [h("a", 2), h("b", 2)];
        assert_eq!(place(&hs, 4, MapBy::Slot, false).unwrap(), vec![0, 0, 1, 1]);
        assert_eq!(place(&hs, 3, MapBy::Slot, false).unwrap(), vec![0, 0, 1]);
        assert_eq!(place(&hs, 4, MapBy::Node, false).unwrap(), vec![0, 1, 0, 1]);
        let uneven = [h("a", 1), h("b", 3)];
        assert_eq!(
            place(&uneven, 4, MapBy::Node, false).unwrap(),
            vec![0, 1, 1, 1]
        );
        let e = place(&hs, 5, MapBy::Slot, false).unwrap_err();
        assert!(e.contains("--oversubscribe"), "{e}");
        assert_eq!(
            place(&hs, 6, MapBy::Slot, true).unwrap(),
            vec![0, 0, 0, 1, 1, 1]
        );
        assert_eq!(
            place(&hs, 6, MapBy::Node, true).unwrap(),
            vec![0, 1, 0, 1, 0, 1]
        );
    }

    #[test]
    fn mappings() {
        assert_eq!(process_mapping(&[0, 0, 1, 1]), "(vector,(0,2,2))");
        assert_eq!(process_mapping(&[0, 1, 0, 1]), "(vector,(0,2,1),(0,2,1))");
        assert_eq!(process_mapping(&[0, 0, 0, 1]), "(vector,(0,1,3),(1,1,1))");
        for p in [
            vec![0, 0, 1, 1, 2, 2],
            vec![0, 1, 2, 0, 1],
            vec![1, 0, 0, 2],
        ] {
            let m = process_mapping(&p);
            let nodes = tsunagi_core::pmi::parse_process_mapping(&m, p.len()).unwrap();
            let want: Vec<u32> = p.iter().map(|&x| x as u32).collect();
            assert_eq!(nodes, want, "{m}");
        }
    }

    #[test]
    fn local_names() {
        assert!(is_local("localhost", "box.example.org"));
        assert!(is_local("box", "box.example.org"));
        assert!(is_local("box.example.org", "box.example.org"));
        assert!(!is_local("other", "box.example.org"));
    }
}
