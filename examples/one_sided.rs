//! One-sided communication through the safe API: a fence epoch where every rank puts
//! into every window, a get epoch, accumulates under lock_all, and a ticket counter on
//! rank 0 taken with fetch-and-op under an exclusive lock. Prints one OK line per rank.

use tsunagi::collective::SystemOperation;
use tsunagi::traits::*;
use tsunagi::window::{LockKind, Window};

fn main() -> Result<(), tsunagi::Error> {
    let universe = tsunagi::initialize().expect("MPI initializes once");
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let n = size as usize;
    // Slots 0..n: puts; slot n: accumulate; slot n+1: ticket counter.
    let mut win = Window::<i64>::allocate(&world, n + 2)?;

    let mine: Vec<i64> = vec![100 * rank as i64 + 1];
    win.fence(|epoch| -> Result<(), tsunagi::Error> {
        for t in 0..size {
            epoch.put(&mine, t, rank as usize)?;
        }
        Ok(())
    })??;
    win.with_local(|s| {
        for (r, v) in s[..n].iter().enumerate() {
            assert_eq!(*v, 100 * r as i64 + 1, "slot {r}");
        }
    })?;

    let mut got = vec![0i64; n];
    let right = (rank + 1) % size;
    win.fence(|epoch| epoch.get(&mut got, right, 0))??;
    for (r, v) in got.iter().enumerate() {
        assert_eq!(*v, 100 * r as i64 + 1);
    }

    let one = [1i64];
    win.lock_all(|epoch| -> Result<(), tsunagi::Error> {
        for t in 0..size {
            epoch.accumulate(&one, t, n, &SystemOperation::sum())?;
        }
        Ok(())
    })??;

    let mut tickets = Vec::new();
    for _ in 0..10 {
        let mut ticket = -1i64;
        win.lock(0, LockKind::Exclusive, |epoch| {
            epoch.fetch_and_op(&one[0], &mut ticket, 0, n + 1, &SystemOperation::sum())
        })??;
        tickets.push(ticket);
    }
    let mut old = -1i64;
    let (new, cmp) = (7i64, 0i64);
    win.lock(right, LockKind::Shared, |epoch| {
        epoch.compare_and_swap(&new, &cmp, &mut old, right, n + 1)
    })??;
    world.barrier()?;
    let mut all = vec![0i64; 10 * n];
    world.all_gather_into(&tickets[..], &mut all[..])?;
    all.sort();
    assert_eq!(
        all,
        (0..10 * n as i64).collect::<Vec<_>>(),
        "every ticket once"
    );
    win.with_local(|s| assert_eq!(s[n], size as i64, "accumulated"))?;
    println!("one_sided: rank {rank} of {size} OK");
    Ok(())
}
