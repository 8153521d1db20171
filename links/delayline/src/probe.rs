//! `startlab-delayline probe`: how late this host wakes the delay line's own timer.
//!
//! The delay line releases each frame on an absolute CLOCK_MONOTONIC timerfd from a
//! SCHED_FIFO thread; how late that wake-up comes is what its accuracy depends on, and it
//! differs from host to host (timer interrupt delivery in a VM, CPU steal, other load).
//! The probe arms the same timer the same way, one thread per CPU at the same priority,
//! and records the lateness of every wake-up. Two companions make a host's conditions
//! reproducible:
//!   --load   one SCHED_IDLE busy thread per CPU: a hypervisor takes (and accounts as
//!            steal) time only from vCPUs that want to run, so an idle host measures
//!            nothing; SCHED_IDLE threads yield to everything else.
//!   --hog    a SCHED_FIFO thread per CPU, above the probe, busy RUN µs of every PERIOD:
//!            an unfit host made on purpose (tests show such a host is flagged).

use crate::stats::Lateness;
use crate::timer::{mono, poll, Timer};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

pub const USAGE: &str = "usage: startlab-delayline probe [--seconds S (0: until SIGTERM)] [--interval-us N] \
[--cpus 0,1] [--rt-priority P (0: normal scheduling)] [--load] [--hog RUN_US,PERIOD_US] [--out PATH]
  SIGUSR1 writes a cumulative snapshot to --out; SIGTERM ends the probe and writes the final figures.";

/// Priority of the hog threads: above any probe or delay line priority startlab uses.
const HOG_PRIORITY: i32 = 90;
/// Longest probe accepted (one day); 0 means until a signal.
const MAX_SECONDS: f64 = 86_400.0;

#[derive(Debug, PartialEq)]
pub struct ProbeConfig {
    pub seconds: f64,
    pub interval_ns: i64,
    pub cpus: Option<Vec<usize>>,
    pub rt_priority: i32,
    pub load: bool,
    pub hog: Option<(i64, i64)>,
    pub out: Option<std::path::PathBuf>,
}

pub fn parse(args: &[String]) -> Result<ProbeConfig, String> {
    let mut c = ProbeConfig { seconds: 10.0, interval_ns: 500_000, cpus: None, rt_priority: 10, load: false, hog: None, out: None };
    let mut i = 0;
    while i < args.len() {
        let flag = args[i].as_str();
        if flag == "--load" {
            c.load = true;
            i += 1;
            continue;
        }
        if flag == "--help" {
            return Err(USAGE.to_string());
        }
        let value = args.get(i + 1).ok_or_else(|| format!("{} needs a value\n{}", flag, USAGE))?.as_str();
        let bad = |what: &str| format!("{} wants {}, got {:?}", flag, what, value);
        match flag {
            "--seconds" => {
                let s: f64 = value.parse().map_err(|_| bad("seconds"))?;
                if !(0.0..=MAX_SECONDS).contains(&s) {
                    return Err(format!("{} must be within 0..{} (got {})", flag, MAX_SECONDS, s));
                }
                c.seconds = s;
            }
            "--interval-us" => {
                let us: i64 = value.parse().map_err(|_| bad("whole microseconds"))?;
                if !(10..=1_000_000).contains(&us) {
                    return Err(format!("{} must be within 10..1000000 (got {})", flag, us));
                }
                c.interval_ns = us * 1_000;
            }
            "--cpus" => {
                let cpus: Result<Vec<usize>, _> = value.split(',').map(|p| p.trim().parse::<usize>()).collect();
                c.cpus = Some(cpus.map_err(|_| bad("CPU numbers separated by commas"))?);
            }
            "--rt-priority" => {
                let p: i32 = value.parse().map_err(|_| bad("a priority"))?;
                if !(0..=99).contains(&p) {
                    return Err(format!("{} must be within 0..99 (got {})", flag, p));
                }
                c.rt_priority = p;
            }
            "--hog" => {
                let parts: Vec<&str> = value.split(',').collect();
                let nums: Result<Vec<i64>, _> = parts.iter().map(|p| p.trim().parse::<i64>()).collect();
                match nums.ok().as_deref() {
                    Some([run, period]) if *run > 0 && run < period => c.hog = Some((run * 1_000, period * 1_000)),
                    _ => return Err(format!("{} wants RUN_US,PERIOD_US with 0 < RUN < PERIOD, got {:?}", flag, value)),
                }
            }
            "--out" => c.out = Some(std::path::PathBuf::from(value)),
            _ => return Err(format!("unknown option {}\n{}", flag, USAGE)),
        }
        i += 2;
    }
    Ok(c)
}

fn allowed_cpus() -> Vec<usize> {
    // SAFETY: sched_getaffinity fills a zeroed local set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return vec![0];
        }
        (0..libc::CPU_SETSIZE as usize).filter(|c| libc::CPU_ISSET(*c, &set)).collect()
    }
}

/// Pin the calling thread to `cpu` and give it `policy` at `priority`.
fn place_self(cpu: usize, policy: libc::c_int, priority: i32) -> Result<(), String> {
    // SAFETY: a zeroed cpu_set_t with one bit, and a sched_param, applied to this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(format!("cannot pin to CPU {}: {}", cpu, std::io::Error::last_os_error()));
        }
        let param = libc::sched_param { sched_priority: priority };
        if libc::sched_setscheduler(0, policy, &param) != 0 {
            return Err(format!("cannot set scheduling policy {} priority {}: {}", policy, priority, std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

fn eventfd() -> Result<libc::c_int, String> {
    // SAFETY: plain eventfd.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(format!("eventfd: {}", std::io::Error::last_os_error()));
    }
    Ok(fd)
}

/// One CPU's probe: wake at every multiple of the interval, record how late into `late`
/// (shared, so that a snapshot can read it while the probe runs).
fn timer_thread(cpu: usize, cfg: &ProbeConfig, stop: &AtomicBool, stop_fd: libc::c_int, late: &Mutex<Lateness>) -> Result<(), String> {
    let (policy, prio) = if cfg.rt_priority > 0 { (libc::SCHED_FIFO, cfg.rt_priority) } else { (libc::SCHED_OTHER, 0) };
    place_self(cpu, policy, prio)?;
    let timer = Timer::new()?;
    let mut due = mono() + cfg.interval_ns;
    while !stop.load(Ordering::Relaxed) {
        timer.arm(due);
        poll(&[timer.fd, stop_fd], -1);
        timer.clear();
        let now = mono();
        if stop.load(Ordering::Relaxed) {
            break;
        }
        if now >= due {
            late.lock().map_err(|_| "a probe thread panicked".to_string())?.record(now - due);
        }
        due += cfg.interval_ns;
        if due <= now {
            // Woken after the next one was due too (a stalled CPU): skip ahead, so the
            // stall counts once rather than as a run of zero-wait wake-ups.
            due = now + cfg.interval_ns;
        }
    }
    Ok(())
}

fn idle_load_thread(cpu: usize, stop: &AtomicBool) -> Result<(), String> {
    place_self(cpu, libc::SCHED_IDLE, 0)?;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..10_000 {
            std::hint::spin_loop();
        }
    }
    Ok(())
}

fn hog_thread(cpu: usize, run_ns: i64, period_ns: i64, stop: &AtomicBool, stop_fd: libc::c_int) -> Result<(), String> {
    place_self(cpu, libc::SCHED_FIFO, HOG_PRIORITY)?;
    let timer = Timer::new()?;
    let mut start = mono();
    while !stop.load(Ordering::Relaxed) {
        while mono() < start + run_ns && !stop.load(Ordering::Relaxed) {
            std::hint::spin_loop();
        }
        start += period_ns;
        timer.arm(start);
        poll(&[timer.fd, stop_fd], -1);
        timer.clear();
    }
    Ok(())
}

/// Wait for the end (SIGTERM/SIGINT, or `seconds` when positive); `snapshot` runs on
/// every SIGUSR1 meanwhile.
fn wait_for_end(seconds: f64, mut snapshot: impl FnMut()) {
    let set = crate::signal_set();
    let end = mono() + (seconds * 1e9) as i64;
    loop {
        // SAFETY: waits for one of the signals blocked in every thread.
        let sig = unsafe {
            if seconds > 0.0 {
                let left = (end - mono()).max(0);
                let ts = libc::timespec { tv_sec: (left / 1_000_000_000) as _, tv_nsec: (left % 1_000_000_000) as _ };
                libc::sigtimedwait(&set, std::ptr::null_mut(), &ts)
            } else {
                let mut sig = 0;
                libc::sigwait(&set, &mut sig);
                sig
            }
        };
        if sig == libc::SIGUSR1 {
            snapshot();
            continue;
        }
        if sig == -1 && seconds > 0.0 && mono() < end {
            continue; // interrupted before the time was up
        }
        return;
    }
}

/// The probe's result as JSON: lateness percentiles (µs) and the fine histogram, cumulative
/// since the start; `generation` counts the snapshots (the final one is marked).
pub fn to_json(cfg: &ProbeConfig, cpus: &[usize], seconds: f64, late: &Lateness, generation: u64, final_: bool) -> String {
    let q = |x: f64| late.quantile_us(x).map_or("null".to_string(), |v| v.to_string());
    format!(
        "{{\"generation\": {}, \"final\": {}, \"interval_us\": {}, \"rt_priority\": {}, \"cpus\": {:?}, \"load\": {}, \"hog\": {}, \"seconds\": {:.3}, \
\"samples\": {}, \"lateness_us\": {{\"p50\": {}, \"p99\": {}, \"p999\": {}, \"max\": {:.1}}}, \"histogram\": {}}}\n",
        generation,
        final_,
        cfg.interval_ns / 1_000,
        cfg.rt_priority,
        cpus,
        cfg.load,
        cfg.hog.map_or("null".to_string(), |(r, p)| format!("[{}, {}]", r / 1_000, p / 1_000)),
        seconds,
        late.count(),
        q(0.5),
        q(0.99),
        q(0.999),
        late.max_us(),
        late.fine_json()
    )
}

pub fn main(args: &[String]) -> Result<(), String> {
    let cfg = Arc::new(parse(args)?);
    let cpus = cfg.cpus.clone().unwrap_or_else(allowed_cpus);
    let sigs = crate::signal_set();
    // SAFETY: blocks the stop signals in this thread and every thread it starts.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, &sigs, std::ptr::null_mut());
    }
    let stop = Arc::new(AtomicBool::new(false));
    let stop_fd = eventfd()?;
    let per_cpu: Vec<Arc<Mutex<Lateness>>> = cpus.iter().map(|_| Arc::new(Mutex::new(Lateness::new()))).collect();
    let mut handles: Vec<std::thread::JoinHandle<Result<(), String>>> = Vec::new();
    for (&cpu, late) in cpus.iter().zip(per_cpu.iter()) {
        let (c, s, l) = (cfg.clone(), stop.clone(), late.clone());
        handles.push(std::thread::spawn(move || timer_thread(cpu, &c, &s, stop_fd, &l)));
        if cfg.load {
            let s = stop.clone();
            handles.push(std::thread::spawn(move || idle_load_thread(cpu, &s)));
        }
        if let Some((run, period)) = cfg.hog {
            let s = stop.clone();
            handles.push(std::thread::spawn(move || hog_thread(cpu, run, period, &s, stop_fd)));
        }
    }
    let started = mono();
    let merged = || {
        let mut all = Lateness::new();
        for l in per_cpu.iter() {
            if let Ok(l) = l.lock() {
                all.merge(&l);
            }
        }
        all
    };
    println!("ready");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let mut generation = 0u64;
    wait_for_end(cfg.seconds, || {
        generation += 1;
        if let Some(path) = &cfg.out {
            let text = to_json(&cfg, &cpus, (mono() - started) as f64 / 1e9, &merged(), generation, false);
            if let Err(e) = crate::stats::write_atomic(path, &text) {
                eprintln!("startlab-delayline probe: snapshot {}: {}", generation, e);
            }
        }
    });
    let seconds = (mono() - started) as f64 / 1e9;
    stop.store(true, Ordering::SeqCst);
    // SAFETY: adds 1 to the stop eventfd so every blocked poll returns.
    unsafe {
        libc::eventfd_write(stop_fd, 1);
    }
    let mut err = None;
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => err = Some(e),
            Err(_) => err = Some("a probe thread panicked".to_string()),
        }
    }
    if let Some(e) = err {
        return Err(e);
    }
    let text = to_json(&cfg, &cpus, seconds, &merged(), generation + 1, true);
    match &cfg.out {
        Some(path) => crate::stats::write_atomic(path, &text).map_err(|e| format!("cannot write {}: {}", path.display(), e)),
        None => {
            print!("{}", text);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(|x| x.to_string()).collect()
    }

    #[test]
    fn defaults_and_flags() {
        let c = parse(&[]).unwrap();
        assert_eq!((c.seconds, c.interval_ns, c.rt_priority, c.load, c.hog), (10.0, 500_000, 10, false, None));
        let c = parse(&args("--seconds 0 --interval-us 1000 --cpus 0,1 --rt-priority 0 --load --hog 3000,10000 --out /tmp/p.json")).unwrap();
        assert_eq!(c.seconds, 0.0);
        assert_eq!(c.interval_ns, 1_000_000);
        assert_eq!(c.cpus, Some(vec![0, 1]));
        assert!(c.load);
        assert_eq!(c.hog, Some((3_000_000, 10_000_000)));
    }

    #[test]
    fn rejects_bad_values() {
        assert!(parse(&args("--hog 10000,3000")).unwrap_err().contains("RUN < PERIOD"));
        assert!(parse(&args("--interval-us 1")).unwrap_err().contains("10..1000000"));
        assert!(parse(&args("--rt-priority 120")).unwrap_err().contains("0..99"));
        assert!(parse(&args("--cpus a")).unwrap_err().contains("CPU numbers"));
        assert!(parse(&args("--frob 1")).unwrap_err().contains("unknown option"));
    }

    #[test]
    fn a_probe_records_its_wake_ups_never_more_than_one_per_interval() {
        // Normal scheduling, so the test needs no privileges. It waits for 5 wake-ups of
        // 1 ms however slow the host, then checks they were never more than one per interval.
        let cfg = parse(&args("--seconds 0 --interval-us 1000 --rt-priority 0")).unwrap();
        let stop = AtomicBool::new(false);
        let fd = eventfd().unwrap();
        let late = Mutex::new(Lateness::new());
        let started = mono();
        let elapsed = std::thread::scope(|s| {
            let t = s.spawn(|| timer_thread(allowed_cpus()[0], &cfg, &stop, fd, &late));
            let deadline = mono() + 10_000_000_000;
            while late.lock().unwrap().count() < 5 && mono() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            stop.store(true, Ordering::SeqCst);
            // SAFETY: wakes the probe thread.
            unsafe {
                libc::eventfd_write(fd, 1);
            }
            t.join().unwrap().unwrap();
            mono() - started
        });
        let h = late.into_inner().unwrap();
        assert!(h.count() >= 5, "no 5 wake-ups in 10 s");
        assert!(h.count() as i64 <= elapsed / 1_000_000 + 1, "{} wake-ups in {} ns at 1 ms", h.count(), elapsed);
        let json = to_json(&cfg, &[0], elapsed as f64 / 1e9, &h, 1, true);
        assert!(json.contains("\"lateness_us\": {\"p50\": "), "{}", json);
    }
}
