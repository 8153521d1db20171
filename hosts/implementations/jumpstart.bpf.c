// SPDX-License-Identifier: GPL-2.0
/* Jump Start (Liu, Allman, Jin, Wang, PFLDnet 2007) over the kernel's own Reno or CUBIC,
 * the congestion controls js_reno and js_cubic:
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
 * The sock_ops program hands accepted sockets one of them (hosts/implementations/jumpstart.py).
 */
#include "stl_cc.h"

/* D = min(receiver's window, data queued), in segments. Applications write a
 * response in pieces and the kernel sends after each piece, so D is evaluated when
 * the first segment leaves and again at every transmit attempt until the first ACK
 * (min_tso_segs is the congestion control's one hook there): the round admits what
 * is queued during it, up to the window, at D per RTT. */
static __always_inline void js_update(struct sock *sk)
{
	struct tcp_sock *tp = tcp(sk);
	struct stl_round_priv *p = round_priv(sk);
	u32 mss = tp->mss_cache ? tp->mss_cache : 536;
	u32 queued = tp->write_seq - tp->snd_una;
	u32 window = tp->snd_wnd;
	u32 d = ((queued < window ? queued : window) + mss - 1) / mss;

	if (d > tp->snd_cwnd_clamp)
		d = tp->snd_cwnd_clamp;
	if (d <= p->window)
		return;
	p->window = d;
	if (d > tp->snd_cwnd)
		tp->snd_cwnd = d;
	start_pacing(sk, pace_rate(tp, d, 1, 1));
}

static __always_inline u32 js_ssthresh(struct sock *sk, int base)
{
	struct tcp_sock *tp = tcp(sk);
	struct stl_round_priv *p = round_priv(sk);
	u32 after_loss = base_ssthresh(sk, base);

	if (!p->round_loss && round_segment_lost(sk)) {
		p->round_loss = 1;
		if (p->phase == ROUND_ACTIVE)
			round_end(sk);
		return tp->snd_cwnd >> 1 > 2 ? tp->snd_cwnd >> 1 : 2;
	}
	return after_loss;
}

static __always_inline void js_set_state(struct sock *sk, u8 new_state, int base)
{
	struct tcp_sock *tp = tcp(sk);
	struct stl_round_priv *p = round_priv(sk);
	u32 delivered, target;

	base_set_state(sk, new_state, base);
	if (round_recovered(sk, new_state)) {
		delivered = p->window > tp->total_retrans ? p->window - tp->total_retrans : 0;
		target = delivered / 2 > 2 ? delivered / 2 : 2;
		if (target < tp->snd_ssthresh) {
			tp->snd_ssthresh = target;
			tp->snd_cwnd = target;
		}
		p->round_cut = 1;
	}
	p->last_state = new_state;
}

static __always_inline void js_cwnd_event(struct sock *sk, enum tcp_ca_event ev, int base)
{
	if (ev == CA_EVENT_TX_START && round_priv(sk)->phase == ROUND_WAITING) {
		round_priv(sk)->phase = ROUND_ACTIVE;
		js_update(sk);
	}
	base_cwnd_event(sk, ev, base);
}

/* The kernel's default (net.ipv4.tcp_min_tso_segs); the call is our hook, not a TSO policy. */
static __always_inline u32 js_min_tso_segs(struct sock *sk, int base)
{
	if (round_priv(sk)->phase == ROUND_ACTIVE)
		js_update(sk);
	return 2;
}

#define JS_OPS                                                                        \
	init, round_init, ssthresh, js_ssthresh, cong_avoid, base_cong_avoid,         \
	set_state, js_set_state, cwnd_event, js_cwnd_event, pkts_acked, round_pkts_acked, \
	min_tso_segs, js_min_tso_segs, undo_cwnd, base_undo_cwnd

STL_CC(js_reno, STL_RENO, JS_OPS);
STL_CC(js_cubic, STL_CUBIC, JS_OPS);
