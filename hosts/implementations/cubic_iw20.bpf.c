// SPDX-License-Identifier: GPL-2.0
/* CUBIC whose connections start from 20 segments, the congestion control cubic20: the
 * kernel's CUBIC in every callback but init, which sets the window after CUBIC's own init
 * (the sock_ops program hands accepted sockets over when the handshake completes, before
 * any data has left).
 */
#include "stl_cc.h"

#define IW 20

static __always_inline void iw20_init(struct sock *sk, int base)
{
	struct tcp_sock *tp = tcp(sk);

	base_init(sk, base);
	tp->snd_cwnd = IW < tp->snd_cwnd_clamp ? IW : tp->snd_cwnd_clamp;
}

STL_CC(cubic20, STL_CUBIC, init, iw20_init, STL_BASE_OPS);
