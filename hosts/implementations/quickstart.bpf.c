// SPDX-License-Identifier: GPL-2.0
/* Quick-Start (RFC 4782 §4.6) over the kernel's Reno or CUBIC, the congestion controls
 * qs_reno and qs_cubic. Every connection of a Quick-Start server runs one; the sock_ops
 * program tells it what was approved through the socket's mark (STL_QS_MARK, stl_common.h).
 *
 * At connection start, when the handshake's request was approved, the sock_ops program
 * has set cwnd to Equation 1's window; init keeps that window as the Quick-Start window Q
 * and leaves ssthresh alone (the Linux paper's "no adaptation", §5.1):
 *   - from the first data segment to the first ACK of new data, Q is paced at Q / RTT,
 *     which is the approved rate less the header share (the RTT being the SYN-ACK's
 *     sample, the one Equation 1 used); the first ACK ends the phase, pacing stops and
 *     the base algorithm continues from cwnd = Q;
 *   - a lost Quick-Start segment (one sent before the phase ended) makes the sender fall
 *     back to slow start: the base algorithm's ssthresh on the loss, and when recovery
 *     ends cwnd = the RFC 3390 initial window, so it slow-starts from there.
 * Not approved, the connection slow-starts from the namespace's initial window.
 *
 * After idle (Scharf's Linux implementation: requests "after long idle periods", once
 * congestion window validation has reduced the window): the kernel's restart after idle
 * (CA_EVENT_CWND_RESTART) counts `restarts`, which the tc sender reads from the socket to
 * put a request on the first data segment that follows. When the client's echo of it is
 * approved, the sock_ops program marks the socket with the restart's id and Equation 1's
 * window; the next ACK applies it: cwnd = max(cwnd, Q), paced at Q / RTT until the data
 * sent from then on is acknowledged (one RTT), with the same fallback on a loss. The
 * sock_ops program also caps the pacing rate at Q / RTT for that round; the cap is lifted
 * when the round ends, and at once when Q does not exceed cwnd (nothing is applied).
 */
#include "stl_cc.h"

STL_CA_PRIV_FITS(struct stl_qs_priv);

static __always_inline struct stl_qs_priv *qs_priv(struct sock *sk)
{
	return STL_CA_PRIV(struct stl_qs_priv, sk);
}

static __always_inline void qs_init(struct sock *sk, int base)
{
	struct stl_qs_priv *q = qs_priv(sk);
	u32 mark = sk->sk_mark;

	round_init(sk, base);
	q->restarts = 0;
	q->restart_round = 0;
	q->restart_flight = 0;
	q->applied = STL_QS_MARK_ID(mark);
	if (STL_QS_MARK_IS(mark) && (mark & STL_QS_MARK_START)) {
		q->round.window = tcp(sk)->snd_cwnd; /* the Quick-Start window from Equation 1 */
	} else {
		q->round.phase = ROUND_DONE;         /* not approved: slow start, nothing to pace */
		q->round.round_high = tcp(sk)->snd_nxt;
	}
}

/* Packets of one segment until the next ACK, so that the tc sender finds room for the
 * request after idle on the first of them (it cannot split a packet of several segments).
 * The kernel sizes a packet to 1 ms at the socket's pacing rate, at least min_tso_segs
 * segments (qs_min_tso_segs: 1 in this flight). Unpaced, the rate sizes nothing else, and
 * it is the one from before the idle period (2 cwnd / srtt): once the idle time took
 * fewer halvings off the window than usual (an RTO inflated on a busy host, an idle
 * period just over one RTO), the first packet after idle held two segments, and the
 * request waited for the response's last, short one. Set below one segment per 1 ms
 * (1/1024 s, the default sk_pacing_shift), until the kernel recomputes it on that ACK. */
static __always_inline void single_segment_packets(struct sock *sk)
{
	if (sk->sk_pacing_status == SK_PACING_NONE)
		sk->sk_pacing_rate = (u64)tcp(sk)->mss_cache * 512;
}

static __always_inline void qs_cwnd_event(struct sock *sk, enum tcp_ca_event ev, int base)
{
	struct stl_qs_priv *q = qs_priv(sk);

	if (ev == CA_EVENT_TX_START && q->round.phase == ROUND_WAITING) {
		q->round.phase = ROUND_ACTIVE;
		start_pacing(sk, pace_rate(tcp(sk), q->round.window, 1, 1));
	}
	if (ev == CA_EVENT_CWND_RESTART) {        /* 1..127 in turn: never 0 ("none") and equal */
		q->restarts = q->restarts % 127 + 1;  /* to the approval id the mark carries (7 bits) */
		q->restart_flight = 1;
		single_segment_packets(sk);
	}
	base_cwnd_event(sk, ev, base);
}

/* An approval after idle the sock_ops program marked and this socket has not applied. */
static __always_inline void qs_apply_approval(struct sock *sk)
{
	struct stl_qs_priv *q = qs_priv(sk);
	struct tcp_sock *tp = tcp(sk);
	u32 mark = sk->sk_mark, window;

	if (!STL_QS_MARK_IS(mark) || STL_QS_MARK_ID(mark) == q->applied || q->round.phase == ROUND_ACTIVE)
		return;
	q->applied = STL_QS_MARK_ID(mark);
	window = STL_QS_MARK_WINDOW(mark);
	if (window <= tp->snd_cwnd) {
		stop_pacing(sk);                     /* the window is already larger: nothing to */
		return;                              /* pace, and the approval's cap must not bind */
	}
	tp->snd_cwnd = window;
	q->round.window = window;
	q->round.phase = ROUND_ACTIVE;
	q->round.round_high = tp->snd_nxt;       /* the round ends when data sent from now is acked */
	q->round.round_loss = 0;
	q->round.round_cut = 0;
	q->restart_round = 1;
	start_pacing(sk, pace_rate(tp, window, 1, 1));
}

/* The end of a Quick-Start round; after idle, the approval's pacing cap goes with it. */
static __always_inline void qs_round_end(struct sock *sk)
{
	round_end(sk);
	if (qs_priv(sk)->restart_round)
		stop_pacing(sk);
}

static __always_inline void qs_pkts_acked(struct sock *sk, const struct ack_sample *sample, int base)
{
	struct stl_qs_priv *q = qs_priv(sk);

	if (sample->pkts_acked > 0)
		q->restart_flight = 0;
	if (q->round.phase == ROUND_ACTIVE && sample->pkts_acked > 0 &&
	    (!q->restart_round || (s32)(tcp(sk)->snd_una - q->round.round_high) > 0))
		qs_round_end(sk);
	else
		qs_apply_approval(sk);
	base_pkts_acked(sk, sample, base);
}

static __always_inline u32 qs_ssthresh(struct sock *sk, int base)
{
	struct stl_round_priv *p = round_priv(sk);

	if (!p->round_loss && round_segment_lost(sk)) {
		p->round_loss = 1;
		if (p->phase == ROUND_ACTIVE)
			qs_round_end(sk);
	}
	return base_ssthresh(sk, base);
}

/* RFC 3390: min(4 MSS, max(2 MSS, 4380 bytes)), in segments */
static __always_inline u32 rfc3390_iw(struct tcp_sock *tp)
{
	u32 mss = tp->mss_cache ? tp->mss_cache : 536;
	u32 segs = 4380 / mss;

	return segs < 2 ? 2 : (segs > 4 ? 4 : segs);
}

static __always_inline void qs_set_state(struct sock *sk, u8 new_state, int base)
{
	struct tcp_sock *tp = tcp(sk);
	struct stl_round_priv *p = round_priv(sk);

	base_set_state(sk, new_state, base);
	if (round_recovered(sk, new_state)) {
		tp->snd_cwnd = rfc3390_iw(tp);
		p->round_cut = 1;
	}
	p->last_state = new_state;
}

/* One segment per packet while an approved window is paced (the kernel sizes packets to
 * its pacing rate, at least min_tso_segs segments): each Quick-Start segment leaves on its
 * own, and the Report of Approved Rate on the first of them only. Likewise in the first
 * flight after a restart (single_segment_packets). Otherwise the kernel's default
 * (net.ipv4.tcp_min_tso_segs). */
static __always_inline u32 qs_min_tso_segs(struct sock *sk, int base)
{
	return round_priv(sk)->phase == ROUND_DONE && !qs_priv(sk)->restart_flight ? 2 : 1;
}

#define QS_OPS                                                                        \
	init, qs_init, ssthresh, qs_ssthresh, cong_avoid, base_cong_avoid,            \
	set_state, qs_set_state, cwnd_event, qs_cwnd_event, pkts_acked, qs_pkts_acked, \
	min_tso_segs, qs_min_tso_segs, undo_cwnd, base_undo_cwnd

STL_CC(qs_reno, STL_RENO, QS_OPS);
STL_CC(qs_cubic, STL_CUBIC, QS_OPS);
