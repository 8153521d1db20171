// SPDX-License-Identifier: GPL-2.0
/* The kernel's CUBIC as a startlab congestion control, the base the slow-start schemes vary:
 *   - cubic: every callback the kernel's CUBIC (its kfuncs), HyStart included: the control
 *     that shows the BPF base behaves as the kernel's own `cubic`;
 *   - hsoff: the same with HyStart off for this connection only. The kernel's switch is a
 *     module parameter for every connection of the machine; here CUBIC's per-connection
 *     `found` flag (HyStart has found the exit) is set whenever CUBIC clears it (its init
 *     and its reset on a timeout), so that neither of HyStart's detectors (ACK train and
 *     delay increase) runs. Slow start then ends only with a loss or ECN.
 */
#include "stl_cc.h"

static __always_inline void hsoff_init(struct sock *sk, int base)
{
	base_init(sk, base);
	cubic_hystart_off(sk);
}

STL_CC(cubic, STL_CUBIC, init, base_init, STL_BASE_OPS);

#define HSOFF_OPS                                                                      \
	init, hsoff_init, ssthresh, base_ssthresh, cong_avoid, base_cong_avoid,       \
	set_state, hsoff_set_state, cwnd_event, base_cwnd_event, pkts_acked, base_pkts_acked, \
	undo_cwnd, base_undo_cwnd

STL_CC(hsoff, STL_CUBIC, HSOFF_OPS);
