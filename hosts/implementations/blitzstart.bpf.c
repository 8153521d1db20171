// SPDX-License-Identifier: GPL-2.0
/* Blitzstart (Rüth et al.) over the kernel's CUBIC, the congestion control blitz: the
 * sock_ops program has already set cwnd = hint x handshake RTT; init makes ssthresh = cwnd
 * (so CUBIC starts in congestion avoidance) and paces that window over 75 % of the RTT.
 * From the first ACK on the kernel paces at its congestion-avoidance ratio
 * (net.ipv4.tcp_pacing_ca_ratio) and CUBIC runs unchanged.
 */
#include "stl_cc.h"

static __always_inline void blitz_init(struct sock *sk, int base)
{
	struct tcp_sock *tp = tcp(sk);

	base_init(sk, base);
	/* The sock_ops program set cwnd from the hint; a socket given this congestion
	 * control without a hint starts from the initial window, in CA all the same. */
	tp->snd_ssthresh = tp->snd_cwnd;
	start_pacing(sk, pace_rate(tp, tp->snd_cwnd, 3, 4));
}

STL_CC(blitz, STL_CUBIC, init, blitz_init, STL_BASE_OPS);
