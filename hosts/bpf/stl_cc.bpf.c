// SPDX-License-Identifier: GPL-2.0
/* startlab's congestion controls, registered per emulation instance as struct_ops.
 *
 * stl_js_reno / stl_js_cubic — Jump Start (Liu, Allman, Jin, Wang, PFLDnet 2007)
 * over the kernel's own Reno or CUBIC:
 *   - from the first data segment (CA_EVENT_TX_START) to the first ACK,
 *     D = min(receiver's window, data queued) in segments, cwnd = D and the pacing
 *     rate D / RTT, the RTT being the handshake's sample (the only one yet);
 *   - the first ACK of new data ends Jump Start: pacing stops and the base
 *     algorithm continues from cwnd = D (ssthresh still infinite, as after any start);
 *   - a loss among the Jump Start segments halves cwnd (ssthresh = cwnd / 2, not
 *     CUBIC's 0.7), and when recovery ends cwnd and ssthresh are cut further to
 *     half of what the Jump Start round actually delivered, (D - retransmitted) / 2:
 *     D was a guess, the segments that got through in one RTT are the measurement,
 *     and halving that is the usual response to the loss the guess caused.
 *
 * stl_blitz — Blitzstart (Rueth et al.) over the kernel's CUBIC: the sock_ops
 * program has already set cwnd = hint x handshake RTT; init makes ssthresh = cwnd
 * (so CUBIC starts in congestion avoidance) and paces that window over 75 % of the
 * RTT. From the first ACK on the kernel paces at its congestion-avoidance ratio
 * (net.ipv4.tcp_pacing_ca_ratio) and CUBIC runs unchanged.
 *
 * stl_qs_reno / stl_qs_cubic — Quick-Start (RFC 4782 §4.6) over the kernel's Reno or
 * CUBIC: the sock_ops program has checked the receiver's echo and set cwnd to Equation
 * 1's window before handing the socket over; init keeps that window as the Quick-Start
 * window Q and leaves ssthresh alone (the Linux paper's "no adaptation", §5.1):
 *   - from the first data segment to the first ACK of new data, Q is paced at
 *     Q / RTT, which is the approved rate less the header share (the RTT being the
 *     SYN-ACK's sample, the one Equation 1 used); the first ACK ends the phase, pacing
 *     stops and the base algorithm continues from cwnd = Q;
 *   - a lost Quick-Start segment (one sent before the phase ended) makes the sender
 *     fall back to slow start: the base algorithm's ssthresh on the loss, and when
 *     recovery ends cwnd = the RFC 3390 initial window, so it slow-starts from there.
 *
 * The base algorithms are the kernel's, called as kfuncs, so their state sits at
 * the start of the private area and ours after it.
 *
 * The kernel does not pace the first 10 data segments of a connection (like sch_fq),
 * so the first flight is 10 back-to-back segments, then the paced rest.
 *
 * stl_fs — TCP Fast Start over the kernel's Reno: see its section below.
 *
 * The ".name" strings are placeholders: the loader writes the instance prefix over
 * "stlXX" so that concurrent instances register distinct congestion controls.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "stl_common.h"

extern void cubictcp_init(struct sock *sk) __ksym;
extern u32 cubictcp_recalc_ssthresh(struct sock *sk) __ksym;
extern void cubictcp_cong_avoid(struct sock *sk, u32 ack, u32 acked) __ksym;
extern void cubictcp_state(struct sock *sk, u8 new_state) __ksym;
extern void cubictcp_cwnd_event(struct sock *sk, enum tcp_ca_event event) __ksym;
extern void cubictcp_acked(struct sock *sk, const struct ack_sample *sample) __ksym;
extern u32 tcp_reno_ssthresh(struct sock *sk) __ksym;
extern void tcp_reno_cong_avoid(struct sock *sk, u32 ack, u32 acked) __ksym;
extern u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;

#define USEC_PER_SEC 1000000ULL
#define TCP_INFINITE_SSTHRESH 0x7fffffff

enum js_phase { JS_WAITING = 0, JS_ACTIVE, JS_DONE };

struct stl_priv {
	struct bictcp cubic; /* the kernel CUBIC's state (unused under Reno) */
	u32 d;               /* Jump Start: segments admitted in the first RTT so far */
	u32 js_high;         /* snd_nxt when Jump Start ended: the end of its flight */
	u8 phase;
	u8 js_loss;          /* a Jump Start segment was lost ... */
	u8 js_cut;           /* ... and the end-of-recovery cut was applied */
	u8 last_state;       /* the CA state before the current set_state call */
};

_Static_assert(sizeof(struct stl_priv) <= sizeof(((struct inet_connection_sock *)0)->icsk_ca_priv),
	       "private state does not fit icsk_ca_priv");

static __always_inline struct stl_priv *priv(struct sock *sk)
{
	return (struct stl_priv *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

static __always_inline struct tcp_sock *tcp(struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

/* bytes/s that send `segs` full segments in `num`/`den` of the smoothed RTT */
static __always_inline u64 pace_rate(struct tcp_sock *tp, u32 segs, u32 num, u32 den)
{
	u64 rtt_us = tp->srtt_us >> 3;

	if (!rtt_us)
		rtt_us = 1;
	return (u64)segs * tp->mss_cache * USEC_PER_SEC * den / (rtt_us * num);
}

static __always_inline void start_pacing(struct sock *sk, u64 rate)
{
	sk->sk_pacing_rate = rate;
	sk->sk_pacing_status = SK_PACING_NEEDED;
}

/* ---- Jump Start ------------------------------------------------------------ */

static __always_inline void js_init(struct sock *sk, int cubic)
{
	struct stl_priv *p = priv(sk);

	if (cubic)
		cubictcp_init(sk);
	p->d = 0;
	p->js_high = 0;
	p->phase = JS_WAITING;
	p->js_loss = 0;
	p->js_cut = 0;
	p->last_state = TCP_CA_Open;
}

/* D = min(receiver's window, data queued), in segments. Applications write a
 * response in pieces and the kernel sends after each piece, so D is evaluated when
 * the first segment leaves and again at every transmit attempt until the first ACK
 * (min_tso_segs is the congestion control's one hook there): the round admits what
 * is queued during it, up to the window, at D per RTT. */
static __always_inline void js_update(struct sock *sk)
{
	struct tcp_sock *tp = tcp(sk);
	struct stl_priv *p = priv(sk);
	u32 mss = tp->mss_cache ? tp->mss_cache : 536;
	u32 queued = tp->write_seq - tp->snd_una;
	u32 window = tp->snd_wnd;
	u32 d = ((queued < window ? queued : window) + mss - 1) / mss;

	if (d > tp->snd_cwnd_clamp)
		d = tp->snd_cwnd_clamp;
	if (d <= p->d)
		return;
	p->d = d;
	if (d > tp->snd_cwnd)
		tp->snd_cwnd = d;
	start_pacing(sk, pace_rate(tp, d, 1, 1));
}

static __always_inline void js_end(struct sock *sk)
{
	struct stl_priv *p = priv(sk);

	p->phase = JS_DONE;
	p->js_high = tcp(sk)->snd_nxt;
	sk->sk_pacing_status = SK_PACING_NONE; /* the base algorithms do not pace */
}

/* Was the segment now being recovered sent in the Jump Start round? */
static __always_inline int js_segment_lost(struct sock *sk)
{
	struct stl_priv *p = priv(sk);

	if (p->phase == JS_ACTIVE)
		return 1;
	return p->phase == JS_DONE && (s32)(tcp(sk)->snd_una - p->js_high) < 0;
}

static __always_inline u32 js_ssthresh(struct sock *sk, int cubic)
{
	struct tcp_sock *tp = tcp(sk);
	struct stl_priv *p = priv(sk);
	u32 base = cubic ? cubictcp_recalc_ssthresh(sk) : tcp_reno_ssthresh(sk);

	if (!p->js_loss && js_segment_lost(sk)) {
		p->js_loss = 1;
		if (p->phase == JS_ACTIVE)
			js_end(sk);
		return tp->snd_cwnd >> 1 > 2 ? tp->snd_cwnd >> 1 : 2;
	}
	return base;
}

static __always_inline void js_set_state(struct sock *sk, u8 new_state, int cubic)
{
	struct tcp_sock *tp = tcp(sk);
	struct stl_priv *p = priv(sk);
	u32 delivered, target;

	if (cubic)
		cubictcp_state(sk, new_state);
	if (p->js_loss && !p->js_cut && new_state == TCP_CA_Open &&
	    (p->last_state == TCP_CA_Recovery || p->last_state == TCP_CA_Loss)) {
		delivered = p->d > tp->total_retrans ? p->d - tp->total_retrans : 0;
		target = delivered / 2 > 2 ? delivered / 2 : 2;
		if (target < tp->snd_ssthresh) {
			tp->snd_ssthresh = target;
			tp->snd_cwnd = target;
		}
		p->js_cut = 1;
	}
	p->last_state = new_state;
}

static __always_inline void js_cwnd_event(struct sock *sk, enum tcp_ca_event ev, int cubic)
{
	if (ev == CA_EVENT_TX_START && priv(sk)->phase == JS_WAITING) {
		priv(sk)->phase = JS_ACTIVE;
		js_update(sk);
	}
	if (cubic)
		cubictcp_cwnd_event(sk, ev);
}

static __always_inline void js_acked(struct sock *sk, const struct ack_sample *sample, int cubic)
{
	if (priv(sk)->phase == JS_ACTIVE && sample->pkts_acked > 0)
		js_end(sk);
	if (cubic)
		cubictcp_acked(sk, sample);
}

/* The kernel's default (net.ipv4.tcp_min_tso_segs); the call is our hook, not a TSO policy. */
static __always_inline u32 js_min_tso_segs(struct sock *sk)
{
	if (priv(sk)->phase == JS_ACTIVE)
		js_update(sk);
	return 2;
}

SEC("struct_ops/stl_jsr_init")
void BPF_PROG(stl_jsr_init, struct sock *sk) { js_init(sk, 0); }
SEC("struct_ops/stl_jsr_ssthresh")
u32 BPF_PROG(stl_jsr_ssthresh, struct sock *sk) { return js_ssthresh(sk, 0); }
SEC("struct_ops/stl_jsr_cong_avoid")
void BPF_PROG(stl_jsr_cong_avoid, struct sock *sk, u32 ack, u32 acked) { tcp_reno_cong_avoid(sk, ack, acked); }
SEC("struct_ops/stl_jsr_set_state")
void BPF_PROG(stl_jsr_set_state, struct sock *sk, u8 new_state) { js_set_state(sk, new_state, 0); }
SEC("struct_ops/stl_jsr_cwnd_event")
void BPF_PROG(stl_jsr_cwnd_event, struct sock *sk, enum tcp_ca_event ev) { js_cwnd_event(sk, ev, 0); }
SEC("struct_ops/stl_jsr_acked")
void BPF_PROG(stl_jsr_acked, struct sock *sk, const struct ack_sample *sample) { js_acked(sk, sample, 0); }
SEC("struct_ops/stl_jsr_min_tso")
u32 BPF_PROG(stl_jsr_min_tso, struct sock *sk) { return js_min_tso_segs(sk); }
SEC("struct_ops/stl_jsr_undo")
u32 BPF_PROG(stl_jsr_undo, struct sock *sk) { return tcp_reno_undo_cwnd(sk); }

SEC(".struct_ops")
struct tcp_congestion_ops stl_js_reno = {
	.init = (void *)stl_jsr_init,
	.ssthresh = (void *)stl_jsr_ssthresh,
	.cong_avoid = (void *)stl_jsr_cong_avoid,
	.set_state = (void *)stl_jsr_set_state,
	.cwnd_event = (void *)stl_jsr_cwnd_event,
	.pkts_acked = (void *)stl_jsr_acked,
	.min_tso_segs = (void *)stl_jsr_min_tso,
	.undo_cwnd = (void *)stl_jsr_undo,
	.name = "stlXX_js_reno",
};

SEC("struct_ops/stl_jsc_init")
void BPF_PROG(stl_jsc_init, struct sock *sk) { js_init(sk, 1); }
SEC("struct_ops/stl_jsc_ssthresh")
u32 BPF_PROG(stl_jsc_ssthresh, struct sock *sk) { return js_ssthresh(sk, 1); }
SEC("struct_ops/stl_jsc_cong_avoid")
void BPF_PROG(stl_jsc_cong_avoid, struct sock *sk, u32 ack, u32 acked) { cubictcp_cong_avoid(sk, ack, acked); }
SEC("struct_ops/stl_jsc_set_state")
void BPF_PROG(stl_jsc_set_state, struct sock *sk, u8 new_state) { js_set_state(sk, new_state, 1); }
SEC("struct_ops/stl_jsc_cwnd_event")
void BPF_PROG(stl_jsc_cwnd_event, struct sock *sk, enum tcp_ca_event ev) { js_cwnd_event(sk, ev, 1); }
SEC("struct_ops/stl_jsc_acked")
void BPF_PROG(stl_jsc_acked, struct sock *sk, const struct ack_sample *sample) { js_acked(sk, sample, 1); }
SEC("struct_ops/stl_jsc_min_tso")
u32 BPF_PROG(stl_jsc_min_tso, struct sock *sk) { return js_min_tso_segs(sk); }
SEC("struct_ops/stl_jsc_undo")
u32 BPF_PROG(stl_jsc_undo, struct sock *sk) { return tcp_reno_undo_cwnd(sk); }

SEC(".struct_ops")
struct tcp_congestion_ops stl_js_cubic = {
	.init = (void *)stl_jsc_init,
	.ssthresh = (void *)stl_jsc_ssthresh,
	.cong_avoid = (void *)stl_jsc_cong_avoid,
	.set_state = (void *)stl_jsc_set_state,
	.cwnd_event = (void *)stl_jsc_cwnd_event,
	.pkts_acked = (void *)stl_jsc_acked,
	.min_tso_segs = (void *)stl_jsc_min_tso,
	.undo_cwnd = (void *)stl_jsc_undo,
	.name = "stlXX_js_cubic",
};

/* ---- Blitzstart ------------------------------------------------------------ */

SEC("struct_ops/stl_blitz_init")
void BPF_PROG(stl_blitz_init, struct sock *sk)
{
	struct tcp_sock *tp = tcp(sk);

	cubictcp_init(sk);
	/* The sock_ops program set cwnd from the hint; a socket given this congestion
	 * control without a hint starts from the initial window, in CA all the same. */
	tp->snd_ssthresh = tp->snd_cwnd;
	start_pacing(sk, pace_rate(tp, tp->snd_cwnd, 3, 4));
}
SEC("struct_ops/stl_blitz_ssthresh")
u32 BPF_PROG(stl_blitz_ssthresh, struct sock *sk) { return cubictcp_recalc_ssthresh(sk); }
SEC("struct_ops/stl_blitz_cong_avoid")
void BPF_PROG(stl_blitz_cong_avoid, struct sock *sk, u32 ack, u32 acked) { cubictcp_cong_avoid(sk, ack, acked); }
SEC("struct_ops/stl_blitz_set_state")
void BPF_PROG(stl_blitz_set_state, struct sock *sk, u8 new_state) { cubictcp_state(sk, new_state); }
SEC("struct_ops/stl_blitz_cwnd_event")
void BPF_PROG(stl_blitz_cwnd_event, struct sock *sk, enum tcp_ca_event ev) { cubictcp_cwnd_event(sk, ev); }
SEC("struct_ops/stl_blitz_acked")
void BPF_PROG(stl_blitz_acked, struct sock *sk, const struct ack_sample *sample) { cubictcp_acked(sk, sample); }
SEC("struct_ops/stl_blitz_undo")
u32 BPF_PROG(stl_blitz_undo, struct sock *sk) { return tcp_reno_undo_cwnd(sk); }

SEC(".struct_ops")
struct tcp_congestion_ops stl_blitz = {
	.init = (void *)stl_blitz_init,
	.ssthresh = (void *)stl_blitz_ssthresh,
	.cong_avoid = (void *)stl_blitz_cong_avoid,
	.set_state = (void *)stl_blitz_set_state,
	.cwnd_event = (void *)stl_blitz_cwnd_event,
	.pkts_acked = (void *)stl_blitz_acked,
	.undo_cwnd = (void *)stl_blitz_undo,
	.name = "stlXX_blitz",
};

/* ---- Quick-Start ------------------------------------------------------------ */

static __always_inline void qs_init(struct sock *sk, int cubic)
{
	js_init(sk, cubic);
	priv(sk)->d = tcp(sk)->snd_cwnd; /* the Quick-Start window from Equation 1 */
}

static __always_inline void qs_cwnd_event(struct sock *sk, enum tcp_ca_event ev, int cubic)
{
	struct stl_priv *p = priv(sk);

	if (ev == CA_EVENT_TX_START && p->phase == JS_WAITING) {
		p->phase = JS_ACTIVE;
		start_pacing(sk, pace_rate(tcp(sk), p->d, 1, 1));
	}
	if (cubic)
		cubictcp_cwnd_event(sk, ev);
}

static __always_inline u32 qs_ssthresh(struct sock *sk, int cubic)
{
	struct stl_priv *p = priv(sk);

	if (!p->js_loss && js_segment_lost(sk)) {
		p->js_loss = 1;
		if (p->phase == JS_ACTIVE)
			js_end(sk);
	}
	return cubic ? cubictcp_recalc_ssthresh(sk) : tcp_reno_ssthresh(sk);
}

/* RFC 3390: min(4 MSS, max(2 MSS, 4380 bytes)), in segments */
static __always_inline u32 rfc3390_iw(struct tcp_sock *tp)
{
	u32 mss = tp->mss_cache ? tp->mss_cache : 536;
	u32 segs = 4380 / mss;

	return segs < 2 ? 2 : (segs > 4 ? 4 : segs);
}

static __always_inline void qs_set_state(struct sock *sk, u8 new_state, int cubic)
{
	struct tcp_sock *tp = tcp(sk);
	struct stl_priv *p = priv(sk);

	if (cubic)
		cubictcp_state(sk, new_state);
	if (p->js_loss && !p->js_cut && new_state == TCP_CA_Open &&
	    (p->last_state == TCP_CA_Recovery || p->last_state == TCP_CA_Loss)) {
		tp->snd_cwnd = rfc3390_iw(tp);
		p->js_cut = 1;
	}
	p->last_state = new_state;
}

SEC("struct_ops/stl_qsr_init")
void BPF_PROG(stl_qsr_init, struct sock *sk) { qs_init(sk, 0); }
SEC("struct_ops/stl_qsr_ssthresh")
u32 BPF_PROG(stl_qsr_ssthresh, struct sock *sk) { return qs_ssthresh(sk, 0); }
SEC("struct_ops/stl_qsr_cong_avoid")
void BPF_PROG(stl_qsr_cong_avoid, struct sock *sk, u32 ack, u32 acked) { tcp_reno_cong_avoid(sk, ack, acked); }
SEC("struct_ops/stl_qsr_set_state")
void BPF_PROG(stl_qsr_set_state, struct sock *sk, u8 new_state) { qs_set_state(sk, new_state, 0); }
SEC("struct_ops/stl_qsr_cwnd_event")
void BPF_PROG(stl_qsr_cwnd_event, struct sock *sk, enum tcp_ca_event ev) { qs_cwnd_event(sk, ev, 0); }
SEC("struct_ops/stl_qsr_acked")
void BPF_PROG(stl_qsr_acked, struct sock *sk, const struct ack_sample *sample) { js_acked(sk, sample, 0); }
SEC("struct_ops/stl_qsr_undo")
u32 BPF_PROG(stl_qsr_undo, struct sock *sk) { return tcp_reno_undo_cwnd(sk); }

SEC(".struct_ops")
struct tcp_congestion_ops stl_qs_reno = {
	.init = (void *)stl_qsr_init,
	.ssthresh = (void *)stl_qsr_ssthresh,
	.cong_avoid = (void *)stl_qsr_cong_avoid,
	.set_state = (void *)stl_qsr_set_state,
	.cwnd_event = (void *)stl_qsr_cwnd_event,
	.pkts_acked = (void *)stl_qsr_acked,
	.undo_cwnd = (void *)stl_qsr_undo,
	.name = "stlXX_qs_reno",
};

SEC("struct_ops/stl_qsc_init")
void BPF_PROG(stl_qsc_init, struct sock *sk) { qs_init(sk, 1); }
SEC("struct_ops/stl_qsc_ssthresh")
u32 BPF_PROG(stl_qsc_ssthresh, struct sock *sk) { return qs_ssthresh(sk, 1); }
SEC("struct_ops/stl_qsc_cong_avoid")
void BPF_PROG(stl_qsc_cong_avoid, struct sock *sk, u32 ack, u32 acked) { cubictcp_cong_avoid(sk, ack, acked); }
SEC("struct_ops/stl_qsc_set_state")
void BPF_PROG(stl_qsc_set_state, struct sock *sk, u8 new_state) { qs_set_state(sk, new_state, 1); }
SEC("struct_ops/stl_qsc_cwnd_event")
void BPF_PROG(stl_qsc_cwnd_event, struct sock *sk, enum tcp_ca_event ev) { qs_cwnd_event(sk, ev, 1); }
SEC("struct_ops/stl_qsc_acked")
void BPF_PROG(stl_qsc_acked, struct sock *sk, const struct ack_sample *sample) { js_acked(sk, sample, 1); }
SEC("struct_ops/stl_qsc_undo")
u32 BPF_PROG(stl_qsc_undo, struct sock *sk) { return tcp_reno_undo_cwnd(sk); }

SEC(".struct_ops")
struct tcp_congestion_ops stl_qs_cubic = {
	.init = (void *)stl_qsc_init,
	.ssthresh = (void *)stl_qsc_ssthresh,
	.cong_avoid = (void *)stl_qsc_cong_avoid,
	.set_state = (void *)stl_qsc_set_state,
	.cwnd_event = (void *)stl_qsc_cwnd_event,
	.pkts_acked = (void *)stl_qsc_acked,
	.undo_cwnd = (void *)stl_qsc_undo,
	.name = "stlXX_qs_cubic",
};

/* ---- TCP Fast Start (Padmanabhan & Katz, Globecom 1998, §3.3) ---------------
 *
 * stl_fs over the kernel's Reno (the paper's NewReno):
 *   - cache (§3.3.2): on every ACK that may open the window (congestion avoidance or
 *     slow start, never during recovery) the window just delivered is remembered — per
 *     connection, and per (source, destination) in stl_fs_cache for new connections;
 *   - restart (§3.3.1): when the connection sends after an idle period longer than its
 *     RTO (CA_EVENT_TX_START with nothing in flight), or a new connection to a cached
 *     destination sends its first data, cwnd = the cached window, halved if it was in slow
 *     start, minus one segment in congestion avoidance; ssthresh as cached (srtt and
 *     rttvar are the connection's own, or the kernel's per-destination metrics);
 *   - clocking out (§3.3.3): that window is paced at cwnd / srtt — maxburst-sized bursts
 *     maxburst·srtt/cwnd apart have this average; the kernel's pacer releases one or two
 *     segments at a time, never more than maxburst — until the first ACK of new data
 *     brings ACK clocking back; then pacing stops;
 *   - drop priority (§3.3.1, with STL_FS_PDROP): the fast start packets except the first
 *     carry a low-priority DSCP (IP_TOS set after the first one left, cleared when the
 *     initial window is out or the first ACK arrives);
 *   - quick recovery (§3.3.4, with STL_FS_FLR): the sock_ops program gives the socket a
 *     fine-grained RTO floor, so its timeout is srtt + 4·rttvar; when a fast start packet
 *     other than the first is the earliest one lost, ssthresh is kept (no penalty) and
 *     the kernel's loss recovery (cwnd 1 and slow start after a timeout) goes on from it.
 * The settings (flags, DSCP) arrive in the socket's mark, written by sock_ops. */

#define SOL_IP 0
#define IP_TOS 1
#define FS_IDLE 0
#define FS_ACTIVE 1
#define FS_DONE 2

struct fs_key {
	u32 saddr;
	u32 daddr;
	u32 generation;   /* from the socket's mark: one install's entries only */
};

struct fs_cached {
	u32 cwnd;
	u32 ssthresh;
	u32 in_ss;
	u32 updates;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct fs_key);
	__type(value, struct fs_cached);
} stl_fs_cache SEC(".maps");

struct fs_priv {
	u32 good_cwnd;    /* the most recent window delivered without loss */
	u32 good_ssthresh;
	u32 fs_first_end; /* sequence after the first fast start packet (sent unmarked) */
	u32 fs_end;       /* sequence after the initial window of the fast start */
	u8 good_in_ss;
	u8 phase;
	u8 flags;         /* STL_FS_PDROP, STL_FS_FLR */
	u8 dscp;
	u8 marking;       /* IP_TOS is set to the low-priority DSCP */
	u8 failed;        /* a fast start packet was lost */
	u8 starts;        /* fast starts on this connection */
	u8 pad;
};

_Static_assert(sizeof(struct fs_priv) <= sizeof(((struct inet_connection_sock *)0)->icsk_ca_priv),
	       "fast start state does not fit icsk_ca_priv");

static __always_inline struct fs_priv *fs(struct sock *sk)
{
	return (struct fs_priv *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

static __always_inline struct fs_key fs_key_of(struct sock *sk)
{
	struct fs_key key = {.saddr = sk->__sk_common.skc_rcv_saddr, .daddr = sk->__sk_common.skc_daddr,
			     .generation = (sk->sk_mark >> 16) & 0xff};

	return key;
}

static __always_inline void fs_set_tos(struct sock *sk, int tos)
{
	bpf_setsockopt(sk, SOL_IP, IP_TOS, &tos, sizeof(tos));
}

static __always_inline void fs_stop(struct sock *sk)
{
	struct fs_priv *p = fs(sk);

	if (p->phase == FS_ACTIVE) {
		p->phase = FS_DONE;
		sk->sk_pacing_status = SK_PACING_NONE;
	}
	if (p->marking) {
		fs_set_tos(sk, 0);
		p->marking = 0;
	}
}

SEC("struct_ops/stl_fs_init")
void BPF_PROG(stl_fs_init, struct sock *sk)
{
	struct fs_priv *p = fs(sk);
	struct fs_key key = fs_key_of(sk);
	struct fs_cached *c;
	u32 mark = sk->sk_mark;

	__builtin_memset(p, 0, sizeof(*p));
	if ((mark & STL_FS_MARK_MASK) == STL_FS_MARK_TAG) {
		p->flags = mark & 0xff;
		p->dscp = (mark >> 8) & 0x3f;
	}
	c = bpf_map_lookup_elem(&stl_fs_cache, &key);
	if (c && c->cwnd) {              /* a new connection to a cached destination */
		p->good_cwnd = c->cwnd;
		p->good_ssthresh = c->ssthresh;
		p->good_in_ss = c->in_ss;
	}
}

/* The restart window of §3.3.2 from what was delivered last. */
static __always_inline u32 fs_window(struct fs_priv *p)
{
	u32 w = p->good_in_ss ? p->good_cwnd >> 1 : p->good_cwnd - 1;

	return w < 2 ? 2 : w;
}

SEC("struct_ops/stl_fs_cwnd_event")
void BPF_PROG(stl_fs_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	struct tcp_sock *tp = tcp(sk);
	struct fs_priv *p = fs(sk);
	u32 idle, w, mss;

	/* TX_START comes whenever nothing is in flight, also when a timeout has marked the
	 * whole flight lost and its first retransmission goes out. Only a connection with
	 * nothing unacknowledged is idle (the kernel's own restart rule asks the same):
	 * a timeout must lead to its loss recovery, never to another fast start. */
	if (ev != CA_EVENT_TX_START || !p->good_cwnd || tp->packets_out)
		return;
	/* lsndtime is still the previous send: the idle time, as the kernel's own restart
	 * rule measures it (tcp_slow_start_after_idle_check). A new connection's first data
	 * starts from the cache as well. */
	idle = (u32)bpf_jiffies64() - tp->lsndtime;
	if (tp->data_segs_out && idle <= ((struct inet_connection_sock *)sk)->icsk_rto)
		return;
	w = fs_window(p);
	if (w > tp->snd_cwnd_clamp)
		w = tp->snd_cwnd_clamp;
	mss = tp->mss_cache ? tp->mss_cache : 536;
	tp->snd_cwnd = w;
	tp->snd_cwnd_cnt = 0;
	if (p->good_ssthresh)
		tp->snd_ssthresh = p->good_ssthresh;
	/* This first packet is being transmitted now (snd_nxt is its sequence). */
	p->fs_first_end = tp->snd_nxt + mss;
	p->fs_end = tp->snd_nxt + w * mss;
	p->phase = FS_ACTIVE;
	p->failed = 0;
	p->starts++;
	start_pacing(sk, pace_rate(tp, w, 1, 1));
}

/* Called before every transmit attempt (tcp_write_xmit): the hook where the marking of
 * the fast start packets after the first is switched on and, once the initial window is
 * out, off again. */
SEC("struct_ops/stl_fs_min_tso")
u32 BPF_PROG(stl_fs_min_tso, struct sock *sk)
{
	struct tcp_sock *tp = tcp(sk);
	struct fs_priv *p = fs(sk);

	if (p->phase == FS_ACTIVE && (p->flags & STL_FS_PDROP)) {
		if (!p->marking && (s32)(tp->snd_nxt - p->fs_first_end) >= 0 &&
		    (s32)(tp->snd_nxt - p->fs_end) < 0) {
			fs_set_tos(sk, p->dscp << 2);
			p->marking = 1;
		} else if (p->marking && (s32)(tp->snd_nxt - p->fs_end) >= 0) {
			fs_set_tos(sk, 0);
			p->marking = 0;
		}
	}
	return 2;
}

SEC("struct_ops/stl_fs_acked")
void BPF_PROG(stl_fs_acked, struct sock *sk, const struct ack_sample *sample)
{
	/* The first ACK of new data: ACK clocking has set in, the fast start phase is over. */
	if (fs(sk)->phase == FS_ACTIVE && sample->pkts_acked > 0)
		fs_stop(sk);
}

SEC("struct_ops/stl_fs_cong_avoid")
void BPF_PROG(stl_fs_cong_avoid, struct sock *sk, u32 ack, u32 acked)
{
	struct tcp_sock *tp = tcp(sk);
	struct fs_priv *p = fs(sk);
	struct fs_key key = fs_key_of(sk);
	struct fs_cached c = {};

	tcp_reno_cong_avoid(sk, ack, acked);
	/* Only called while the window may open: no loss outstanding, so the window that
	 * was just delivered is a good one. */
	p->good_cwnd = tp->snd_cwnd;
	p->good_ssthresh = tp->snd_ssthresh;
	p->good_in_ss = tp->snd_cwnd < tp->snd_ssthresh;
	c.cwnd = p->good_cwnd;
	c.ssthresh = p->good_ssthresh;
	c.in_ss = p->good_in_ss;
	bpf_map_update_elem(&stl_fs_cache, &key, &c, BPF_ANY);
}

/* Is the earliest unacknowledged segment a fast start packet other than the first? */
static __always_inline int fs_packet_lost(struct sock *sk)
{
	struct tcp_sock *tp = tcp(sk);
	struct fs_priv *p = fs(sk);

	if (!p->starts)
		return 0;
	return (s32)(tp->snd_una - p->fs_first_end) >= 0 && (s32)(tp->snd_una - p->fs_end) < 0;
}

SEC("struct_ops/stl_fs_ssthresh")
u32 BPF_PROG(stl_fs_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp(sk);
	struct fs_priv *p = fs(sk);

	if ((p->flags & STL_FS_FLR) && fs_packet_lost(sk)) {
		/* Slow start without penalty: the optimistic window was wrong, the path is not
		 * known to be congested; keep ssthresh. */
		p->failed = 1;
		fs_stop(sk);
		return tp->snd_ssthresh > 2 ? tp->snd_ssthresh : 2;
	}
	fs_stop(sk);
	return tcp_reno_ssthresh(sk);
}

SEC("struct_ops/stl_fs_undo")
u32 BPF_PROG(stl_fs_undo, struct sock *sk) { return tcp_reno_undo_cwnd(sk); }

SEC(".struct_ops")
struct tcp_congestion_ops stl_fs = {
	.init = (void *)stl_fs_init,
	.ssthresh = (void *)stl_fs_ssthresh,
	.cong_avoid = (void *)stl_fs_cong_avoid,
	.cwnd_event = (void *)stl_fs_cwnd_event,
	.pkts_acked = (void *)stl_fs_acked,
	.min_tso_segs = (void *)stl_fs_min_tso,
	.undo_cwnd = (void *)stl_fs_undo,
	.name = "stlXX_fs",
};

char LICENSE[] SEC("license") = "GPL";
