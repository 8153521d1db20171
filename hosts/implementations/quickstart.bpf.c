// SPDX-License-Identifier: GPL-2.0
/* Quick-Start (RFC 4782 §4.6) over the kernel's Reno or CUBIC, the congestion controls
 * qs_reno and qs_cubic: the sock_ops program has checked the receiver's echo and set cwnd
 * to Equation 1's window before handing the socket over; init keeps that window as the
 * Quick-Start window Q and leaves ssthresh alone (the Linux paper's "no adaptation", §5.1):
 *   - from the first data segment to the first ACK of new data, Q is paced at
 *     Q / RTT, which is the approved rate less the header share (the RTT being the
 *     SYN-ACK's sample, the one Equation 1 used); the first ACK ends the phase, pacing
 *     stops and the base algorithm continues from cwnd = Q;
 *   - a lost Quick-Start segment (one sent before the phase ended) makes the sender
 *     fall back to slow start: the base algorithm's ssthresh on the loss, and when
 *     recovery ends cwnd = the RFC 3390 initial window, so it slow-starts from there.
 */
#include "stl_cc.h"

static __always_inline void qs_init(struct sock *sk, int base)
{
	round_init(sk, base);
	round_priv(sk)->window = tcp(sk)->snd_cwnd; /* the Quick-Start window from Equation 1 */
}

static __always_inline void qs_cwnd_event(struct sock *sk, enum tcp_ca_event ev, int base)
{
	struct stl_round_priv *p = round_priv(sk);

	if (ev == CA_EVENT_TX_START && p->phase == ROUND_WAITING) {
		p->phase = ROUND_ACTIVE;
		start_pacing(sk, pace_rate(tcp(sk), p->window, 1, 1));
	}
	base_cwnd_event(sk, ev, base);
}

static __always_inline u32 qs_ssthresh(struct sock *sk, int base)
{
	struct stl_round_priv *p = round_priv(sk);

	if (!p->round_loss && round_segment_lost(sk)) {
		p->round_loss = 1;
		if (p->phase == ROUND_ACTIVE)
			round_end(sk);
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

#define QS_OPS                                                                        \
	init, qs_init, ssthresh, qs_ssthresh, cong_avoid, base_cong_avoid,            \
	set_state, qs_set_state, cwnd_event, qs_cwnd_event, pkts_acked, round_pkts_acked, \
	undo_cwnd, base_undo_cwnd

STL_CC(qs_reno, STL_RENO, QS_OPS);
STL_CC(qs_cubic, STL_CUBIC, QS_OPS);
