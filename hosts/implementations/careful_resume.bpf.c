// SPDX-License-Identifier: GPL-2.0
/* Careful Resume (RFC 9959, draft-ietf-tsvwg-careful-resume-24) over the kernel's CUBIC, the
 * congestion control cr_cubic. Section numbers are the draft's.
 *
 *   Observing (§3.1): every round of a connection that is not resuming measures the data
 *     acknowledged in one RTT; with the path's minimum RTT (the kernel's windowed minimum,
 *     5 minutes) it is saved per path, (local address, destination), in stl_cr_cache, when
 *     it is at least min_save x IW; an application-limited round does not lower an
 *     earlier, higher observation.
 *   Reconnaissance (§3.2): a new connection to a path with saved parameters, in their
 *     lifetime and used by no other connection, starts from the IW under CUBIC. It stops
 *     resuming on congestion, when its minimum RTT is at most saved_rtt / 2 or more than
 *     10 x saved_rtt (§4.2.1), or when the jump would not raise the window. Once the
 *     initial data (IW segments) is acknowledged without congestion and it has more to
 *     send than the window allows, it jumps.
 *   Unvalidated (§3.3): PipeSize = flight size, cwnd = jump_cwnd = min(max_jump,
 *     saved_cwnd / 2), paced at jump_cwnd per current RTT (§4.3.2), held there by the
 *     socket's maximum pacing rate (cr_pace_jump); each ACK adds the
 *     segments it acknowledges to PipeSize, and the window does not grow (it would pass
 *     jump_cwnd). An RTT sample outside (saved_rtt / 2, 10 x saved_rtt] is a path change:
 *     Safe Retreat, the window set to PipeSize / 2 at once (no recovery is under way).
 *     It ends when the flight reaches the window,
 *     when the first unvalidated segment is acknowledged, or after one RTT: then if the
 *     flight is below the IW or at most PipeSize, cwnd = max(PipeSize, IW) and normal
 *     CUBIC (rate_limited), else cwnd = flight size and Validating.
 *   Validating (§3.4): CUBIC grows the window; PipeSize counts on; the ACK of the last
 *     unvalidated segment ends Careful Resume.
 *   Safe Retreat (§3.5): congestion in Unvalidated or Validating deletes the saved
 *     parameters and sets ssthresh = PipeSize / 2, which the kernel's recovery reduces the
 *     window to (see below); the window does not grow; when the last segment sent before
 *     the retreat is acknowledged, ssthresh = PipeSize x beta and normal CUBIC.
 *   A timeout (§3.6) ends Careful Resume in any phase, and deletes the saved parameters
 *   when it strikes unvalidated data.
 *
 * Safe Retreat and the kernel: the draft asks for cwnd <= PipeSize / 2 at once and says
 * Proportional Rate Reduction is "not appropriate" there (§4.5). A BPF congestion control
 * cannot skip the kernel's PRR without taking over all of its window control (cong_control),
 * so the retreat is PRR towards PipeSize / 2: it sends ssthresh / prior cwnd of what is
 * delivered until the flight is below PipeSize / 2, and recovery ends at PipeSize / 2.
 *
 * TCP has no packet numbers: the first and last unvalidated "packets" are sequence
 * numbers (snd_nxt when the jump starts and when the Unvalidated phase ends).
 *
 * Settings: the socket's mark carries the tag and the install's generation (set by the
 * sock_ops program before TCP_CONGESTION, read by init); stl_cr_config holds that
 * generation's lifetime, max_jump, beta and min_save, written by the loader. Every phase
 * change is logged per connection in stl_cr_events, with the state after it, for the
 * run's record (the qlog draft's CarefulResumePhaseUpdated).
 */
#include "stl_cc.h"
#include <bpf/bpf_endian.h>

#define STL_CR_MARK_TAG 0x43000000u  /* "C" */
#define STL_CR_MARK_MASK 0xff000000u
#define STL_CR_EVENTS 8

enum cr_phase { CR_OBSERVING = 0, CR_RECON, CR_UNVALIDATED, CR_VALIDATING, CR_RETREAT, CR_NORMAL };

/* The qlog draft's triggers (careful-resume-qlog-02 §3.2), in this order. */
enum cr_trigger {
	CR_T_NONE = 0, CR_T_CWND_LIMITED, CR_T_RTT_EXCEEDED, CR_T_FIRST_UNVAL_ACKED, CR_T_LAST_UNVAL_SENT,
	CR_T_LAST_UNVAL_ACKED, CR_T_RTT_NOT_VALIDATED, CR_T_RATE_LIMITED, CR_T_PATH_CHANGED,
	CR_T_PACKET_LOSS, CR_T_ECN_CE, CR_T_EXIT_RECOVERY,
};

struct cr_config {
	u64 lifetime_ns;
	u32 max_jump;         /* segments */
	u32 beta_permille;    /* 500 .. 1000 */
	u32 min_save;         /* save only at least min_save x IW */
	u32 pad;
};

struct cr_path {
	u32 saddr;
	u32 daddr;
	u32 generation;       /* one install's entries only */
};

struct cr_saved {
	u64 saved_ns;         /* when observed: the lifetime counts from here */
	u32 saved_cwnd;       /* segments acknowledged in one RTT */
	u32 saved_rtt_us;     /* the path's minimum RTT then */
	u32 in_use;           /* a connection is resuming from it */
	u32 observations;
};

struct cr_conn {
	u32 saddr;
	u32 daddr;
	u16 sport;
	u16 dport;
	u32 generation;
};

struct cr_event {
	u64 t_ns;
	u8 old_phase;
	u8 new_phase;
	u8 trigger;
	u8 pad;
	u32 cwnd;
	u32 ssthresh;
	u32 pipesize;
	u32 first_unvalidated;
	u32 last_unvalidated;
	u32 saved_cwnd;
	u32 saved_rtt_us;
	u32 srtt_us;          /* the smoothed RTT then */
	u32 pacing_rate;      /* bytes/s, the socket's pacing rate after the change */
};

struct cr_log {
	u32 n;
	u32 mss;
	struct cr_event ev[STL_CR_EVENTS];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, u32);
	__type(value, struct cr_config);
} stl_cr_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct cr_path);
	__type(value, struct cr_saved);
} stl_cr_cache SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct cr_conn);
	__type(value, struct cr_log);
} stl_cr_events SEC(".maps");

/* A new connection's empty log (too large for the stack). */
struct cr_log cr_empty_log = {};

/* After CUBIC's state: 44 bytes of icsk_ca_priv are left. */
struct cr_priv {
	struct bictcp cubic;
	u8 phase;
	u8 generation;
	u8 iw;
	u8 retreat_exit_pending;
	u32 saved_cwnd;
	u32 saved_rtt_us;
	u32 pipesize;
	u32 recon_end;        /* seq: the end of the initial data (IW segments) */
	u32 first_unval;      /* seq: snd_nxt when the jump started */
	u32 last_unval;       /* seq: snd_nxt when the Unvalidated phase ended */
	u32 t_unval_us;       /* when the jump started (tcp_mstamp, low 32 bits) */
	u32 round_end;        /* Observing: the round ends when this seq is acknowledged */
	u32 round_delivered;  /* Observing: tp->delivered when the round started */
};

STL_CA_PRIV_FITS(struct cr_priv);

static __always_inline struct cr_priv *cr(struct sock *sk)
{
	return STL_CA_PRIV(struct cr_priv, sk);
}

static __always_inline struct cr_path cr_path_of(struct sock *sk, u32 generation)
{
	struct cr_path key = {.saddr = sk->__sk_common.skc_rcv_saddr, .daddr = sk->__sk_common.skc_daddr,
			      .generation = generation};
	return key;
}

static __always_inline u32 in_flight(struct tcp_sock *tp)
{
	return tp->packets_out - (tp->sacked_out + tp->lost_out) + tp->retrans_out;
}

/* Log a phase change with the state after it. */
static __always_inline void cr_phase(struct sock *sk, u8 next, u8 trigger)
{
	struct tcp_sock *tp = tcp(sk);
	struct cr_priv *p = cr(sk);
	struct cr_conn key = {.saddr = sk->__sk_common.skc_rcv_saddr, .daddr = sk->__sk_common.skc_daddr,
			      .sport = sk->__sk_common.skc_num, .dport = bpf_ntohs(sk->__sk_common.skc_dport),
			      .generation = p->generation};
	struct cr_log *log;
	struct cr_event *e;
	u32 n;

	log = bpf_map_lookup_elem(&stl_cr_events, &key);
	if (!log) {
		bpf_map_update_elem(&stl_cr_events, &key, &cr_empty_log, BPF_NOEXIST);
		log = bpf_map_lookup_elem(&stl_cr_events, &key);
	}
	if (log) {
		n = log->n;
		log->mss = tp->mss_cache;
		if (n < STL_CR_EVENTS) {
			e = &log->ev[n];
			e->t_ns = bpf_ktime_get_ns();
			e->old_phase = p->phase;
			e->new_phase = next;
			e->trigger = trigger;
			e->cwnd = tp->snd_cwnd;
			e->ssthresh = tp->snd_ssthresh;
			e->pipesize = p->pipesize;
			e->first_unvalidated = p->first_unval;
			e->last_unvalidated = p->last_unval;
			e->saved_cwnd = p->saved_cwnd;
			e->saved_rtt_us = p->saved_rtt_us;
			e->srtt_us = tp->srtt_us >> 3;
			e->pacing_rate = sk->sk_pacing_rate > 0xffffffffULL ? 0xffffffffU : (u32)sk->sk_pacing_rate;
			log->n = n + 1;
		}
	}
	p->phase = next;
}

/* This connection lets go of its saved parameters: it frees them for another connection,
 * or deletes them (§3.5, after congestion on unvalidated data). One place for both, so a
 * retreat deletes once and its exit only frees (a later observation may own the entry). */
static __always_inline void cr_let_go(struct sock *sk, int delete)
{
	struct cr_path key = cr_path_of(sk, cr(sk)->generation);
	struct cr_saved *s;

	if (delete) {
		bpf_map_delete_elem(&stl_cr_cache, &key);
		return;
	}
	s = bpf_map_lookup_elem(&stl_cr_cache, &key);
	if (s)
		s->in_use = 0;
}

/* Careful Resume is over for this connection: its saved parameters are let go, and
 * observing may begin. */
static __always_inline void cr_stop(struct sock *sk, u8 trigger, int delete)
{
	struct cr_priv *p = cr(sk);

	stop_pacing(sk);                            /* CUBIC does not pace */
	cr_let_go(sk, delete);
	cr_phase(sk, CR_NORMAL, trigger);
	p->round_end = tcp(sk)->snd_nxt;
	p->round_delivered = tcp(sk)->delivered;
}

static __always_inline void cr_init(struct sock *sk, int base)
{
	struct tcp_sock *tp = tcp(sk);
	struct cr_priv *p = cr(sk);
	u32 mark = sk->sk_mark, generation;
	struct cr_config *cfg;
	struct cr_saved *s;
	struct cr_path key;

	base_init(sk, base);
	p->phase = CR_OBSERVING;
	p->retreat_exit_pending = 0;
	p->saved_cwnd = 0;
	p->saved_rtt_us = 0;
	p->pipesize = 0;
	p->first_unval = 0;
	p->last_unval = 0;
	p->iw = tp->snd_cwnd > 255 ? 255 : tp->snd_cwnd;
	p->round_end = tp->snd_nxt;
	p->round_delivered = tp->delivered;
	generation = (mark & STL_CR_MARK_MASK) == STL_CR_MARK_TAG ? (mark >> 16) & 0xff : 0;
	p->generation = generation;
	if (!generation)
		return;
	key = cr_path_of(sk, generation);
	cfg = bpf_map_lookup_elem(&stl_cr_config, &generation);
	s = bpf_map_lookup_elem(&stl_cr_cache, &key);
	if (!cfg || !s || !s->saved_cwnd)
		return;
	if (bpf_ktime_get_ns() - s->saved_ns > cfg->lifetime_ns) {
		bpf_map_delete_elem(&stl_cr_cache, &key);   /* §3.2: expired parameters are deleted */
		return;
	}
	if (s->in_use)
		return;                                     /* §3.2: one connection at a time */
	s->in_use = 1;
	p->saved_cwnd = s->saved_cwnd;
	p->saved_rtt_us = s->saved_rtt_us;
	p->recon_end = tp->snd_una + (u32)p->iw * (tp->mss_cache ? tp->mss_cache : 536);
	cr_phase(sk, CR_RECON, CR_T_NONE);
}

static __always_inline u32 cr_jump(struct sock *sk)
{
	struct cr_priv *p = cr(sk);
	struct cr_config *cfg;
	u32 generation = p->generation, jump = p->saved_cwnd / 2;

	cfg = bpf_map_lookup_elem(&stl_cr_config, &generation);
	if (cfg && cfg->max_jump && cfg->max_jump < jump)
		jump = cfg->max_jump;
	return jump < tcp(sk)->snd_cwnd_clamp ? jump : tcp(sk)->snd_cwnd_clamp;
}

/* The Unvalidated phase's pacing: `rate` (bytes/s) and no faster. The kernel recomputes a
 * paced socket's rate on every ACK, this one included (tcp_update_pacing_rate: 200 % of
 * cwnd/srtt below ssthresh/2), so a rate written here alone would send the jump at twice
 * jump_cwnd/srtt; the socket's maximum pacing rate bounds that recomputation, and the phase's
 * end lifts it (stop_pacing). */
static __always_inline void cr_pace_jump(struct sock *sk, u64 rate)
{
	u32 cap = rate > 0xfffffffeULL ? 0xfffffffeU : (u32)rate;   /* ~0 would mean no cap */

	start_pacing(sk, cap);
	bpf_setsockopt(sk, SOL_SOCKET, SO_MAX_PACING_RATE, &cap, sizeof(cap));
}

/* Reconnaissance, on each ACK without congestion: confirm the path, then jump. */
static __always_inline void cr_reconnoitre(struct sock *sk)
{
	struct tcp_sock *tp = tcp(sk);
	struct cr_priv *p = cr(sk);
	u32 min_rtt = p->cubic.delay_min, jump;

	if ((s32)(tp->snd_una - p->recon_end) < 0)
		return;                                     /* the initial data is not all acknowledged */
	if (min_rtt && (min_rtt <= p->saved_rtt_us / 2 || min_rtt > 10 * p->saved_rtt_us)) {
		cr_stop(sk, CR_T_RTT_NOT_VALIDATED, 0);
		return;
	}
	jump = cr_jump(sk);
	if (jump <= tp->snd_cwnd) {
		cr_stop(sk, CR_T_RATE_LIMITED, 0);          /* the jump would not raise the window */
		return;
	}
	if (tp->write_seq == tp->snd_nxt)
		return;                                     /* §4.2: nothing more to send yet: defer */
	p->pipesize = in_flight(tp);
	p->first_unval = tp->snd_nxt;
	p->t_unval_us = (u32)tp->tcp_mstamp;
	tp->snd_cwnd = jump;
	cr_pace_jump(sk, pace_rate(tp, jump, 1, 1));   /* jump_cwnd per current RTT (§4.3.2) */
	cr_phase(sk, CR_UNVALIDATED, CR_T_CWND_LIMITED);
}

/* The end of the Unvalidated phase (§3.3, "Check flight_size"). */
static __always_inline void cr_unvalidated_end(struct sock *sk, u8 trigger)
{
	struct tcp_sock *tp = tcp(sk);
	struct cr_priv *p = cr(sk);
	u32 flight = in_flight(tp);

	if (flight < p->iw || flight <= p->pipesize) {
		tp->snd_cwnd = p->pipesize > p->iw ? p->pipesize : p->iw;
		p->last_unval = tp->snd_nxt;
		cr_stop(sk, CR_T_RATE_LIMITED, 0);
		return;
	}
	tp->snd_cwnd = flight;
	p->last_unval = tp->snd_nxt;
	stop_pacing(sk);
	cr_phase(sk, CR_VALIDATING, trigger);
}

/* The Unvalidated phase's three ends, checked on each ACK and before each transmission. */
static __always_inline void cr_unvalidated_check(struct sock *sk)
{
	struct tcp_sock *tp = tcp(sk);
	struct cr_priv *p = cr(sk);

	if (p->phase != CR_UNVALIDATED)
		return;
	if ((s32)(tp->snd_una - p->first_unval) > 0)
		cr_unvalidated_end(sk, CR_T_FIRST_UNVAL_ACKED);
	else if (in_flight(tp) >= tp->snd_cwnd)
		cr_unvalidated_end(sk, CR_T_LAST_UNVAL_SENT);
	else if ((u32)tp->tcp_mstamp - p->t_unval_us > (tp->srtt_us >> 3))
		cr_unvalidated_end(sk, CR_T_RTT_EXCEEDED);
}

/* Observing (§3.1): at the end of each round, the data acknowledged in it. */
static __always_inline void cr_observe(struct sock *sk)
{
	struct tcp_sock *tp = tcp(sk);
	struct cr_priv *p = cr(sk);
	u32 generation = p->generation, acked, min_rtt;
	struct cr_saved fresh = {}, *s;
	struct cr_config *cfg;
	struct cr_path key;

	if ((s32)(tp->snd_una - p->round_end) < 0)
		return;
	acked = tp->delivered - p->round_delivered;
	p->round_end = tp->snd_nxt;
	p->round_delivered = tp->delivered;
	if (!generation)
		return;
	cfg = bpf_map_lookup_elem(&stl_cr_config, &generation);
	if (!cfg || acked < cfg->min_save * p->iw)
		return;
	min_rtt = tp->rtt_min.s[0].v;
	if (!min_rtt || min_rtt == ~0U)
		return;
	key = cr_path_of(sk, generation);
	s = bpf_map_lookup_elem(&stl_cr_cache, &key);
	if (!s) {
		bpf_map_update_elem(&stl_cr_cache, &key, &fresh, BPF_NOEXIST);
		s = bpf_map_lookup_elem(&stl_cr_cache, &key);
		if (!s)
			return;
	}
	/* A round the application limited (the kernel's app_limited mark, or nothing left to
	 * send at its end: a transfer's last round) does not lower an earlier, higher
	 * observation (§4.1). */
	if ((tp->app_limited || tp->write_seq == tp->snd_nxt) && acked < s->saved_cwnd)
		return;
	s->saved_cwnd = acked;
	s->saved_rtt_us = min_rtt;
	s->saved_ns = bpf_ktime_get_ns();
	s->observations++;
}

/* Safe Retreat begins (§3.5): the saved parameters are deleted; the window the retreat
 * holds, PipeSize/2, is returned (at least 2 segments). */
static __always_inline u32 cr_retreat(struct sock *sk, u8 trigger)
{
	struct tcp_sock *tp = tcp(sk);
	struct cr_priv *p = cr(sk);
	u32 half = p->pipesize / 2;

	if (p->phase == CR_UNVALIDATED)
		p->last_unval = tp->snd_nxt;
	cr_phase(sk, CR_RETREAT, trigger);
	cr_let_go(sk, 1);                           /* §3.5: removing saved information */
	stop_pacing(sk);
	return half < 2 ? 2 : half;
}

static __always_inline void cr_pkts_acked(struct sock *sk, const struct ack_sample *sample, int base)
{
	struct tcp_sock *tp = tcp(sk);
	struct cr_priv *p = cr(sk);
	u8 state = ((struct inet_connection_sock *)sk)->icsk_ca_state;

	base_pkts_acked(sk, sample, base);
	if (sample->pkts_acked > 0 &&
	    (p->phase == CR_UNVALIDATED || p->phase == CR_VALIDATING || p->phase == CR_RETREAT))
		p->pipesize += sample->pkts_acked;
	switch (p->phase) {
	case CR_OBSERVING:
	case CR_NORMAL:
		if (state == TCP_CA_Open) {
			cr_observe(sk);
		} else {
			/* a round counts only if all of it was without congestion: the deliveries
			 * of a recovery span several RTTs */
			p->round_end = tp->snd_nxt;
			p->round_delivered = tp->delivered;
		}
		break;
	case CR_RECON:
		if (state == TCP_CA_Open && !tp->lost_out && !tp->retrans_out)
			cr_reconnoitre(sk);
		break;
	case CR_UNVALIDATED:
		/* §3.3: a path change, an RTT sample outside the bounds Reconnaissance checked
		 * (§4.2.1): retreat, outside recovery, so the window is set here. */
		if (sample->rtt_us > 0 && ((u32)sample->rtt_us <= p->saved_rtt_us / 2 ||
					   (u32)sample->rtt_us > 10 * p->saved_rtt_us)) {
			tp->snd_cwnd = cr_retreat(sk, CR_T_PATH_CHANGED);
			break;
		}
		cr_unvalidated_check(sk);
		break;
	case CR_VALIDATING:
		if ((s32)(tp->snd_una - p->last_unval) >= 0)
			cr_stop(sk, CR_T_LAST_UNVAL_ACKED, 0);
		break;
	case CR_RETREAT:
		if ((s32)(tp->snd_una - p->last_unval) >= 0) {
			u32 generation = p->generation, beta = 500, ss;
			struct cr_config *cfg = bpf_map_lookup_elem(&stl_cr_config, &generation);

			if (cfg)
				beta = cfg->beta_permille;
			ss = (u64)p->pipesize * beta / 1000;
			tp->snd_ssthresh = ss < 2 ? 2 : ss;
			cr_stop(sk, CR_T_EXIT_RECOVERY, 0);   /* deleted on entry already */
		}
		break;
	}
}

/* Congestion (a loss entering recovery, or ECN's CWR): Reconnaissance stops resuming;
 * Unvalidated and Validating retreat (§3.5). */
static __always_inline u32 cr_ssthresh(struct sock *sk, int base)
{
	struct tcp_sock *tp = tcp(sk);
	struct cr_priv *p = cr(sk);
	/* recovery begins with a segment marked lost; a reduction without one is ECN's */
	u8 trigger = tp->lost_out ? CR_T_PACKET_LOSS : CR_T_ECN_CE;
	u32 half;

	switch (p->phase) {
	case CR_RECON:
		cr_stop(sk, trigger, 0);
		break;
	case CR_UNVALIDATED:
	case CR_VALIDATING:
		return cr_retreat(sk, trigger);
	case CR_RETREAT:
		half = p->pipesize / 2;                     /* §3.5: no more than PipeSize/2 */
		return half < 2 ? 2 : half;
	}
	return base_ssthresh(sk, base);
}

/* The window does not grow while the jump is out (it would pass jump_cwnd, which §3.3
 * bounds by saved_cwnd/2) nor in Safe Retreat (§3.5); elsewhere CUBIC's rules. */
static __always_inline void cr_cong_avoid(struct sock *sk, u32 ack, u32 acked, int base)
{
	u8 phase = cr(sk)->phase;

	if (phase == CR_UNVALIDATED || phase == CR_RETREAT)
		return;
	base_cong_avoid(sk, ack, acked, base);
}

/* A timeout (§3.6) ends Careful Resume; on unvalidated data it deletes the saved parameters. */
static __always_inline void cr_set_state(struct sock *sk, u8 new_state, int base)
{
	struct cr_priv *p = cr(sk);

	base_set_state(sk, new_state, base);
	if (new_state != TCP_CA_Loss)
		return;
	if (p->phase == CR_UNVALIDATED || p->phase == CR_VALIDATING)
		cr_stop(sk, CR_T_PACKET_LOSS, 1);
	else if (p->phase == CR_RECON || p->phase == CR_RETREAT)
		cr_stop(sk, CR_T_PACKET_LOSS, 0);        /* a retreat deleted them on entry */
}

/* Called before every transmit attempt: the Unvalidated phase ends when the flight reaches
 * the window, and a deferred jump (nothing was left to send at confirmation) may go now.
 * The kernel's default otherwise (net.ipv4.tcp_min_tso_segs). */
static __always_inline u32 cr_min_tso_segs(struct sock *sk, int base)
{
	struct cr_priv *p = cr(sk);

	if (p->phase == CR_UNVALIDATED)
		cr_unvalidated_check(sk);
	return p->phase == CR_UNVALIDATED ? 1 : 2;
}

/* The socket goes: a connection still resuming frees its saved parameters. */
static __always_inline void cr_release(struct sock *sk, int base)
{
	u8 phase = cr(sk)->phase;

	if (phase != CR_OBSERVING && phase != CR_NORMAL)
		cr_let_go(sk, 0);
}

#define CR_OPS                                                                        \
	init, cr_init, ssthresh, cr_ssthresh, cong_avoid, cr_cong_avoid,              \
	set_state, cr_set_state, cwnd_event, base_cwnd_event, pkts_acked, cr_pkts_acked, \
	min_tso_segs, cr_min_tso_segs, release, cr_release, undo_cwnd, base_undo_cwnd

STL_CC(cr_cubic, STL_CUBIC, CR_OPS);
