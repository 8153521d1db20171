//! startlab-delayline: bridges two interfaces at L2 with a fixed one-way delay per
//! direction, for kernels without sch_netem. See `config::USAGE` for the command line.
//!
//! The main thread sets everything up, prints `ready`, then waits for signals; one
//! thread per direction does the work. SIGUSR1 writes a snapshot of the counters
//! (cumulative, with a rising "generation") to the --stats file without stopping;
//! SIGTERM/SIGINT stop the line and write the final counters there.

mod codel;
mod config;
mod delaytrace;
mod frame;
mod line;
mod pairs;
mod queue;
mod ring;
mod schedule;
mod sock;
mod stage;
mod stats;
mod timer;
mod trace;
mod probe;

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// Receive socket buffer: far more than the ≤ 0.5 ms of traffic read per round.
const RCVBUF: i32 = 32 << 20;
const SNDBUF: i32 = 16 << 20;
/// A direction thread answers a snapshot within one round (≤ 0.5 ms when busy); this
/// only guards against a thread that is stuck.
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(3);

pub fn signal_set() -> libc::sigset_t {
    // SAFETY: sigset manipulation on a local value.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGUSR1);
        set
    }
}

fn eventfd(flags: libc::c_int) -> Result<libc::c_int, String> {
    // SAFETY: plain eventfd.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | flags) };
    if fd < 0 {
        return Err(format!("eventfd: {}", std::io::Error::last_os_error()));
    }
    Ok(fd)
}

fn poke(fd: libc::c_int) {
    // SAFETY: adds 1 to an eventfd counter.
    unsafe {
        libc::eventfd_write(fd, 1);
    }
}

/// Interface tx_dropped counters at start, so each write reports drops since start.
struct LinkDrops {
    ifs: [String; 2],
    base: [Option<u64>; 2],
}

impl LinkDrops {
    /// Direction i transmits on `ifs[i]` (a→b leaves through B).
    fn new(tx_if_ab: &str, tx_if_ba: &str) -> LinkDrops {
        let ifs = [tx_if_ab.to_string(), tx_if_ba.to_string()];
        let base = [sock::link_tx_dropped(&ifs[0]), sock::link_tx_dropped(&ifs[1])];
        LinkDrops { ifs, base }
    }

    fn fill(&self, dirs: &mut [stats::DirStats]) {
        for (i, d) in dirs.iter_mut().enumerate() {
            if let (Some(b0), Some(b1)) = (self.base[i], sock::link_tx_dropped(&self.ifs[i])) {
                d.link_tx_drops = b1.saturating_sub(b0);
            }
        }
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
    if args.first().map(|a| a.as_str()) == Some("probe") {
        return probe::main(&args[1..]);
    }
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

    // Block the signals in every thread (inherited); the main thread takes them with
    // sigwait, so no handler runs in the middle of a direction's work.
    let sigs = signal_set();
    // SAFETY: sigs is a valid set.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, &sigs, std::ptr::null_mut());
    }

    let fifos_ab = pairs::FifoMap::new(cfg.delay_ab_ns, &read_pairs(cfg.pairs_ab.as_deref())?);
    let fifos_ba = pairs::FifoMap::new(cfg.delay_ba_ns, &read_pairs(cfg.pairs_ba.as_deref())?);
    let wake = [eventfd(libc::EFD_NONBLOCK)?, eventfd(libc::EFD_NONBLOCK)?];
    let delay_trace_ab = read_delay_trace("--delay-trace-ab", cfg.delay_trace_ab.as_deref())?;
    let delay_trace_ba = read_delay_trace("--delay-trace-ba", cfg.delay_trace_ba.as_deref())?;
    let epoch = cfg.delay_trace_epoch_ns.unwrap_or_else(timer::mono);
    let ab = line::Direction::new(
        "a_to_b",
        0,
        sock::PacketSocket::open_rx(&cfg.if_a, RCVBUF)?,
        sock::PacketSocket::open_tx(&cfg.if_b, SNDBUF)?,
        fifos_ab.clone(),
        ring_ab,
        cfg.queue_ab.clone().map(queue::Bottleneck::new),
        wake[0],
        cfg.tuning,
    )
    .with_delay_trace(delay_trace_ab.clone(), epoch);
    let ba = line::Direction::new(
        "b_to_a",
        1,
        sock::PacketSocket::open_rx(&cfg.if_b, RCVBUF)?,
        sock::PacketSocket::open_tx(&cfg.if_a, SNDBUF)?,
        fifos_ba.clone(),
        ring_ba,
        cfg.queue_ba.clone().map(queue::Bottleneck::new),
        wake[1],
        cfg.tuning,
    )
    .with_delay_trace(delay_trace_ba.clone(), epoch);
    let ctl = Arc::new(line::Control {
        stop: AtomicBool::new(false),
        stop_fd: eventfd(0)?,
        snapshot: AtomicU64::new(0),
        last_round: [AtomicI64::new(0), AtomicI64::new(0)],
    });
    let link_drops = LinkDrops::new(&cfg.if_b, &cfg.if_a);
    let configs = [
        stats::DirConfig {
            ring_bytes: cfg.ring_ab_bytes,
            queue: cfg.queue_ab.clone(),
            fifos: fifos_ab,
            delay_trace: cfg.delay_trace_ab.as_ref().map(|p| stats::TracedDelay::new(p, delay_trace_ab.as_deref(), epoch)),
        },
        stats::DirConfig {
            ring_bytes: cfg.ring_ba_bytes,
            queue: cfg.queue_ba.clone(),
            fifos: fifos_ba,
            delay_trace: cfg.delay_trace_ba.as_ref().map(|p| stats::TracedDelay::new(p, delay_trace_ba.as_deref(), epoch)),
        },
    ];
    let write = |dirs: &mut [stats::DirStats], stamp: stats::Stamp| -> Result<(), String> {
        link_drops.fill(dirs);
        let text = stats::to_json(dirs, &configs, stamp);
        stats::write_atomic(&cfg.stats, &text).map_err(|e| format!("cannot write stats to {}: {}", cfg.stats.display(), e))
    };

    let ready = Arc::new(Barrier::new(3));
    let (report_tx, report_rx) = mpsc::channel::<line::Report>();
    let mut handles = Vec::new();
    for d in [ab, ba] {
        let (r, c, tx) = (ready.clone(), ctl.clone(), report_tx.clone());
        handles.push(std::thread::spawn(move || d.run(&c, tx, r)));
    }
    drop(report_tx);
    let mut setup_err = None;
    for (h, cpu) in handles.iter().zip([cfg.cpu_a, cfg.cpu_b].iter()) {
        if let Some(c) = cpu {
            if let Err(e) = pin(h, *c) {
                setup_err = Some(e);
            }
        }
    }
    if setup_err.is_some() {
        ctl.stop.store(true, Ordering::SeqCst);
    }
    ready.wait();
    let started = Instant::now();
    let mut generation = 0u64;
    if setup_err.is_none() {
        println!("ready");
        let _ = std::io::stdout().flush();
        loop {
            let mut sig: libc::c_int = 0;
            // SAFETY: waits for one of the blocked signals.
            unsafe {
                libc::sigwait(&sigs, &mut sig);
            }
            if sig != libc::SIGUSR1 {
                break;
            }
            generation += 1;
            ctl.snapshot.store(generation, Ordering::Release);
            for fd in wake.iter() {
                poke(*fd);
            }
            match collect(&report_rx, generation) {
                Some(mut dirs) => {
                    let stamp = stats::Stamp { generation, final_: false, elapsed_s: started.elapsed().as_secs_f64() };
                    if let Err(e) = write(&mut dirs, stamp) {
                        eprintln!("startlab-delayline: snapshot {}: {}", generation, e);
                    }
                }
                None => {
                    let now = timer::mono();
                    let ago: Vec<String> = ctl.last_round.iter().map(|t| format!("{:.3} s", (now - t.load(Ordering::Relaxed)) as f64 / 1e9)).collect();
                    eprintln!(
                        "startlab-delayline: snapshot {}: a direction did not answer (last rounds began a_to_b {} ago, b_to_a {} ago)",
                        generation, ago[0], ago[1]
                    );
                }
            }
        }
        ctl.stop.store(true, Ordering::SeqCst);
    }
    // Wakes the direction threads blocked in poll.
    poke(ctl.stop_fd);
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
    let stamp = stats::Stamp { generation: generation + 1, final_: true, elapsed_s: started.elapsed().as_secs_f64() };
    write(&mut dirs, stamp)
}

/// The per-pair delay table in `path` (none without a path).
fn read_pairs(path: Option<&std::path::Path>) -> Result<pairs::PairDelays, String> {
    match path {
        None => Ok(Vec::new()),
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| format!("cannot read the pair delays {}: {}", p.display(), e))?;
            pairs::parse(&text, &p.display().to_string())
        }
    }
}

/// The delay trace a --delay-trace-D flag names, read and checked; None without one.
fn read_delay_trace(flag: &str, path: Option<&std::path::Path>) -> Result<Option<Arc<delaytrace::DelayTrace>>, String> {
    let Some(p) = path else { return Ok(None) };
    let text = std::fs::read_to_string(p).map_err(|e| format!("{} {}: cannot read it: {}", flag, p.display(), e))?;
    let trace = delaytrace::DelayTrace::parse(&text).map_err(|e| format!("{} {}: {}", flag, p.display(), e))?;
    Ok(Some(Arc::new(trace)))
}

/// Both directions' counters for `generation`, in direction order; None on timeout.
/// Reports of older generations (from a snapshot that timed out) are skipped.
fn collect(reports: &mpsc::Receiver<line::Report>, generation: u64) -> Option<Vec<stats::DirStats>> {
    collect_within(reports, generation, SNAPSHOT_TIMEOUT)
}

fn collect_within(reports: &mpsc::Receiver<line::Report>, generation: u64, timeout: Duration) -> Option<Vec<stats::DirStats>> {
    let deadline = Instant::now() + timeout;
    let mut got: [Option<stats::DirStats>; 2] = [None, None];
    while got.iter().any(|g| g.is_none()) {
        let left = deadline.checked_duration_since(Instant::now())?;
        let r = reports.recv_timeout(left).ok()?;
        if r.generation >= generation && r.index < 2 {
            got[r.index] = Some(r.stats);
        }
    }
    let [a, b] = got;
    Some(vec![a?, b?])
}

fn main() {
    if let Err(e) = run() {
        eprintln!("startlab-delayline: error: {}", e);
        std::process::exit(2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(index: usize, generation: u64, tx: u64) -> line::Report {
        let mut stats = stats::DirStats::new(if index == 0 { "a_to_b" } else { "b_to_a" });
        stats.tx_frames = tx;
        line::Report { index, generation, stats }
    }

    #[test]
    fn collects_both_directions_of_the_asked_generation_in_order() {
        let (tx, rx) = mpsc::channel();
        // A late answer to an earlier, timed-out snapshot comes first and is skipped.
        tx.send(report(0, 1, 5)).unwrap();
        tx.send(report(1, 2, 7)).unwrap();
        tx.send(report(0, 2, 9)).unwrap();
        let dirs = collect_within(&rx, 2, Duration::from_millis(100)).unwrap();
        assert_eq!((dirs[0].name.as_str(), dirs[0].tx_frames), ("a_to_b", 9));
        assert_eq!((dirs[1].name.as_str(), dirs[1].tx_frames), ("b_to_a", 7));
    }

    #[test]
    fn a_silent_direction_times_out() {
        let (tx, rx) = mpsc::channel();
        tx.send(report(0, 1, 5)).unwrap();
        assert!(collect_within(&rx, 1, Duration::from_millis(20)).is_none());
    }
}
