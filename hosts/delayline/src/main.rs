//! startlab-delayline: bridges two interfaces at L2 with a fixed one-way delay per
//! direction, for kernels without sch_netem. See `config::USAGE` for the command line.
//!
//! The main thread sets everything up, prints `ready`, then waits for SIGTERM/SIGINT;
//! one thread per direction does the work; on the signal the counters are written as
//! JSON to the --stats file.

mod config;
mod line;
mod ring;
mod schedule;
mod sock;
mod stats;

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};

/// Receive socket buffer: far more than the ≤ 0.5 ms of traffic read per round.
const RCVBUF: i32 = 32 << 20;
const SNDBUF: i32 = 16 << 20;

static STOP: AtomicBool = AtomicBool::new(false);

fn signal_set() -> libc::sigset_t {
    // SAFETY: sigset manipulation on a local value.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        set
    }
}

fn pin(handle: &std::thread::JoinHandle<Result<stats::DirStats, String>>, cpu: usize) -> Result<(), String> {
    use std::os::unix::thread::JoinHandleExt;
    // SAFETY: a zeroed cpu_set_t with one bit set, applied to a live thread.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
            return Err(format!("CPU {} is out of range", cpu));
        }
        libc::CPU_SET(cpu, &mut set);
        libc::pthread_setaffinity_np(handle.as_pthread_t(), std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        return Err(format!("cannot pin a thread to CPU {}: {}", cpu, std::io::Error::from_raw_os_error(rc)));
    }
    Ok(())
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cfg = config::parse(&args)?;
    sock::ifindex(&cfg.if_a)?;
    sock::ifindex(&cfg.if_b)?;
    let (mtu_a, mtu_b) = (sock::mtu(&cfg.if_a)?, sock::mtu(&cfg.if_b)?);
    if mtu_a != mtu_b {
        return Err(format!(
            "MTUs differ: {} has {}, {} has {}; frames could not pass both ways, set the same MTU",
            cfg.if_a, mtu_a, cfg.if_b, mtu_b
        ));
    }
    let ring_ab = ring::Ring::new(cfg.ring_ab_bytes).map_err(|e| format!("--ring-ab-bytes: {}", e))?;
    let ring_ba = ring::Ring::new(cfg.ring_ba_bytes).map_err(|e| format!("--ring-ba-bytes: {}", e))?;

    // Block the stop signals in every thread (inherited); the main thread takes them
    // with sigwait, so no handler runs in the middle of a direction's work.
    let sigs = signal_set();
    // SAFETY: sigs is a valid set.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, &sigs, std::ptr::null_mut());
    }

    let ab = line::Direction {
        name: "a_to_b",
        rx: sock::PacketSocket::open_rx(&cfg.if_a, RCVBUF)?,
        tx: sock::PacketSocket::open_tx(&cfg.if_b, SNDBUF)?,
        delay_ns: cfg.delay_ab_ns,
        ring: ring_ab,
    };
    let ba = line::Direction {
        name: "b_to_a",
        rx: sock::PacketSocket::open_rx(&cfg.if_b, RCVBUF)?,
        tx: sock::PacketSocket::open_tx(&cfg.if_a, SNDBUF)?,
        delay_ns: cfg.delay_ba_ns,
        ring: ring_ba,
    };
    // SAFETY: plain eventfd.
    let stop_fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if stop_fd < 0 {
        return Err(format!("eventfd: {}", std::io::Error::last_os_error()));
    }
    let drops_before = (sock::link_tx_dropped(&cfg.if_b), sock::link_tx_dropped(&cfg.if_a));

    let ready = Arc::new(Barrier::new(3));
    let mut handles = Vec::new();
    for d in vec![ab, ba] {
        let r = ready.clone();
        handles.push(std::thread::spawn(move || d.run(&STOP, stop_fd, r)));
    }
    let mut setup_err = None;
    for (h, cpu) in handles.iter().zip([cfg.cpu_a, cfg.cpu_b].iter()) {
        if let Some(c) = cpu {
            if let Err(e) = pin(h, *c) {
                setup_err = Some(e);
            }
        }
    }
    if setup_err.is_some() {
        STOP.store(true, Ordering::SeqCst);
    }
    ready.wait();
    if setup_err.is_none() {
        println!("ready");
        let _ = std::io::stdout().flush();
        let mut sig: libc::c_int = 0;
        // SAFETY: waits for one of the blocked signals.
        unsafe {
            libc::sigwait(&sigs, &mut sig);
        }
        STOP.store(true, Ordering::SeqCst);
    }
    // SAFETY: wakes the direction threads blocked in poll.
    unsafe {
        libc::eventfd_write(stop_fd, 1);
    }
    let mut dirs = Vec::new();
    let mut thread_err = setup_err;
    for h in handles {
        match h.join() {
            Ok(Ok(s)) => dirs.push(s),
            Ok(Err(e)) => thread_err = Some(e),
            Err(_) => thread_err = Some("a direction thread panicked".to_string()),
        }
    }
    if let Some(e) = thread_err {
        return Err(e);
    }
    let drops_after = (sock::link_tx_dropped(&cfg.if_b), sock::link_tx_dropped(&cfg.if_a));
    if let (Some(b0), Some(b1)) = (drops_before.0, drops_after.0) {
        dirs[0].link_tx_drops = b1.saturating_sub(b0);
    }
    if let (Some(a0), Some(a1)) = (drops_before.1, drops_after.1) {
        dirs[1].link_tx_drops = a1.saturating_sub(a0);
    }
    let text = stats::to_json(&dirs, &[cfg.delay_ab_ns, cfg.delay_ba_ns], &[cfg.ring_ab_bytes, cfg.ring_ba_bytes]);
    stats::write_atomic(&cfg.stats, &text).map_err(|e| format!("cannot write stats to {}: {}", cfg.stats.display(), e))?;
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("startlab-delayline: error: {}", e);
        std::process::exit(2);
    }
}
