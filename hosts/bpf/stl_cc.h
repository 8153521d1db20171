/* What every startlab congestion control shares: the kernel's base algorithms, the
 * helpers for windows and pacing, the first-round state of the schemes that size and pace
 * their own first RTT, and STL_CC, which declares a complete struct_ops congestion
 * control from a list of callbacks.
 *
 * A scheme's congestion controls live in hosts/implementations/<scheme>.bpf.c, beside its
 * Python module; build.sh builds each into its own object and the loader registers it
 * per emulation instance (hosts/bpf/loader.py, CongestionControls).
 *
 * The base algorithms are the kernel's, called as kfuncs, so their state sits at the
 * start of the private area (icsk_ca_priv) and a scheme's after it.
 *
 * The kernel does not pace the first 10 data segments of a connection (like sch_fq), so a
 * paced first flight is 10 back-to-back segments, then the paced rest.
 */
#ifndef STL_CC_H
#define STL_CC_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "stl_common.h"
#include "stl_ca_priv.h"

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

static __always_inline struct tcp_sock *tcp(struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

/* A scheme's private state: the start of icsk_ca_priv, which must hold it. */
#define STL_CA_PRIV(type, sk) ((type *)((struct inet_connection_sock *)(sk))->icsk_ca_priv)
#define STL_CA_PRIV_FITS(type)                                                                   \
	_Static_assert(sizeof(type) <= sizeof(((struct inet_connection_sock *)0)->icsk_ca_priv), \
		       #type " does not fit icsk_ca_priv")

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

/* Pacing off and the socket's maximum pacing rate lifted. A cap set through
 * SO_MAX_PACING_RATE also switches the kernel's pacing on (NONE -> NEEDED) and bounds the
 * rate the kernel recomputes on every ACK: a cap left in place holds the connection at it
 * for good. */
static __always_inline void stop_pacing(struct sock *sk)
{
	int unlimited = ~0;

	bpf_setsockopt(sk, SOL_SOCKET, SO_MAX_PACING_RATE, &unlimited, sizeof(unlimited));
	sk->sk_pacing_status = SK_PACING_NONE;
}

/* ---- The base algorithm ----------------------------------------------------------------
 * Every callback of a congestion control gets its base algorithm as the last argument, a
 * constant of its STL_CC line: the compiler keeps only that algorithm's calls. The base_*
 * callbacks are the algorithm unchanged (Reno has no init, state or event hooks of its own;
 * CUBIC's undo is Reno's). */
#define STL_RENO 0
#define STL_CUBIC 1

static __always_inline void base_init(struct sock *sk, int base)
{
	if (base == STL_CUBIC)
		cubictcp_init(sk);
}

static __always_inline u32 base_ssthresh(struct sock *sk, int base)
{
	return base == STL_CUBIC ? cubictcp_recalc_ssthresh(sk) : tcp_reno_ssthresh(sk);
}

static __always_inline void base_cong_avoid(struct sock *sk, u32 ack, u32 acked, int base)
{
	if (base == STL_CUBIC)
		cubictcp_cong_avoid(sk, ack, acked);
	else
		tcp_reno_cong_avoid(sk, ack, acked);
}

static __always_inline void base_set_state(struct sock *sk, u8 new_state, int base)
{
	if (base == STL_CUBIC)
		cubictcp_state(sk, new_state);
}

static __always_inline void base_cwnd_event(struct sock *sk, enum tcp_ca_event ev, int base)
{
	if (base == STL_CUBIC)
		cubictcp_cwnd_event(sk, ev);
}

static __always_inline void base_pkts_acked(struct sock *sk, const struct ack_sample *sample, int base)
{
	if (base == STL_CUBIC)
		cubictcp_acked(sk, sample);
}

static __always_inline u32 base_undo_cwnd(struct sock *sk, int base)
{
	return tcp_reno_undo_cwnd(sk);
}

/* CUBIC's HyStart off for this connection: its per-connection "found the exit" flag held
 * set, so neither detector (ACK train, delay increase) runs. CUBIC clears the flag in its
 * init and its reset on a timeout: call this after base_init and base_set_state. */
static __always_inline void cubic_hystart_off(struct sock *sk)
{
	STL_CA_PRIV(struct bictcp, sk)->found = 1;
}

/* CUBIC's state changes with its HyStart held off: its reset on a timeout clears the flag.
 * The set_state of every scheme that replaces HyStart's exits. */
static __always_inline void hsoff_set_state(struct sock *sk, u8 new_state, int base)
{
	base_set_state(sk, new_state, base);
	cubic_hystart_off(sk);
}

/* The kernel's tcp_is_cwnd_limited() in slow start, for a slow start that grows `growth`
 * times a round (the kernel's: 2): may the window grow on this ACK? It may where the sender
 * was held back by the window in the last window's worth of sending, or while the window is
 * below `growth` times the most segments that were in flight then. A scheme that replaces
 * slow start's growth asks this, as the kernel's Reno and CUBIC do. */
static __always_inline int stl_cwnd_limited(struct tcp_sock *tp, u32 growth)
{
	return BPF_CORE_READ_BITFIELD(tp, is_cwnd_limited) || tp->snd_cwnd < growth * tp->max_packets_out;
}

/* Every callback but init as the base algorithm has it: a scheme that only changes how
 * connections start writes STL_CC(kind, base, init, its_init, STL_BASE_OPS). */
#define STL_BASE_OPS                                                                   \
	ssthresh, base_ssthresh, cong_avoid, base_cong_avoid, set_state, base_set_state, \
	cwnd_event, base_cwnd_event, pkts_acked, base_pkts_acked, undo_cwnd, base_undo_cwnd

/* ---- The first round -------------------------------------------------------------------
 * Jump Start and Quick-Start size their first window themselves and pace it over the first
 * RTT: from the first data segment (CA_EVENT_TX_START) to the first ACK of new data. Their
 * state, after the base algorithm's, is struct stl_round_priv (stl_ca_priv.h). */
STL_CA_PRIV_FITS(struct stl_round_priv);

static __always_inline struct stl_round_priv *round_priv(struct sock *sk)
{
	return STL_CA_PRIV(struct stl_round_priv, sk);
}

static __always_inline void round_init(struct sock *sk, int base)
{
	struct stl_round_priv *p = round_priv(sk);

	base_init(sk, base);
	p->window = 0;
	p->round_high = 0;
	p->phase = ROUND_WAITING;
	p->round_loss = 0;
	p->round_cut = 0;
	p->last_state = TCP_CA_Open;
}

static __always_inline void round_end(struct sock *sk)
{
	struct stl_round_priv *p = round_priv(sk);

	p->phase = ROUND_DONE;
	p->round_high = tcp(sk)->snd_nxt;
	sk->sk_pacing_status = SK_PACING_NONE; /* the base algorithms do not pace */
}

/* Was the segment now being recovered sent in the first round? */
static __always_inline int round_segment_lost(struct sock *sk)
{
	struct stl_round_priv *p = round_priv(sk);

	if (p->phase == ROUND_ACTIVE)
		return 1;
	return p->phase == ROUND_DONE && (s32)(tcp(sk)->snd_una - p->round_high) < 0;
}

/* The first ACK of new data ends the round. */
static __always_inline void round_pkts_acked(struct sock *sk, const struct ack_sample *sample, int base)
{
	if (round_priv(sk)->phase == ROUND_ACTIVE && sample->pkts_acked > 0)
		round_end(sk);
	base_pkts_acked(sk, sample, base);
}

/* Does the state change now end the recovery of a loss in the first round, and is this
 * the first such end? (Then the scheme applies its response once.) */
static __always_inline int round_recovered(struct sock *sk, u8 new_state)
{
	struct stl_round_priv *p = round_priv(sk);

	return p->round_loss && !p->round_cut && new_state == TCP_CA_Open &&
	       (p->last_state == TCP_CA_Recovery || p->last_state == TCP_CA_Loss);
}

/* ---- STL_CC: one congestion control from its callbacks ---------------------------------
 *
 *   STL_CC(js_cubic, STL_CUBIC,
 *          init, round_init, ssthresh, js_ssthresh, ..., undo_cwnd, base_undo_cwnd);
 *
 * declares the struct_ops program of each callback (a tcp_congestion_ops member name,
 * then a function with that member's arguments plus the base algorithm) and the
 * tcp_congestion_ops `stl_<kind>` named "stlXX_<kind>": a same-length placeholder the
 * loader overwrites with the emulation instance's prefix (so it must occur once), which
 * is also how the loader learns the kinds an object declares. Members left out are the
 * kernel's defaults (min_tso_segs: net.ipv4.tcp_min_tso_segs). The kernel requires
 * ssthresh, undo_cwnd and cong_avoid. */
#define STL_CC(kind, base, ...)                                                        \
	STL__PAIRS(STL__PROG, kind, base, __VA_ARGS__)                                 \
	_Static_assert(sizeof(STL_CC_PLACEHOLDER "_" #kind) <= STL_CC_NAME_LEN,       \
		       "the name of congestion control " #kind " is too long");        \
	SEC(".struct_ops")                                                             \
	struct tcp_congestion_ops stl_##kind = {                                       \
		STL__PAIRS(STL__MEMBER, kind, base, __VA_ARGS__)                       \
		.name = STL_CC_PLACEHOLDER "_" #kind,                                  \
	}

#define STL_CC_PLACEHOLDER "stlXX"

/* One struct_ops program per callback, named stl_<kind>_<member>. */
#define STL__PROG(kind, base, op, fn) STL__PROG_##op(kind, base, fn)
#define STL__MEMBER(kind, base, op, fn) .op = (void *)stl_##kind##_##op,

#define STL__PROG_init(kind, base, fn)                                                  \
	SEC("struct_ops/" #kind "_init")                                                \
	void BPF_PROG(stl_##kind##_init, struct sock *sk) { fn(sk, base); }
#define STL__PROG_ssthresh(kind, base, fn)                                              \
	SEC("struct_ops/" #kind "_ssthresh")                                            \
	u32 BPF_PROG(stl_##kind##_ssthresh, struct sock *sk) { return fn(sk, base); }
#define STL__PROG_cong_avoid(kind, base, fn)                                            \
	SEC("struct_ops/" #kind "_cong_avoid")                                          \
	void BPF_PROG(stl_##kind##_cong_avoid, struct sock *sk, u32 ack, u32 acked)     \
	{ fn(sk, ack, acked, base); }
#define STL__PROG_set_state(kind, base, fn)                                             \
	SEC("struct_ops/" #kind "_set_state")                                           \
	void BPF_PROG(stl_##kind##_set_state, struct sock *sk, u8 new_state) { fn(sk, new_state, base); }
#define STL__PROG_cwnd_event(kind, base, fn)                                            \
	SEC("struct_ops/" #kind "_cwnd_event")                                          \
	void BPF_PROG(stl_##kind##_cwnd_event, struct sock *sk, enum tcp_ca_event ev)   \
	{ fn(sk, ev, base); }
#define STL__PROG_pkts_acked(kind, base, fn)                                            \
	SEC("struct_ops/" #kind "_pkts_acked")                                          \
	void BPF_PROG(stl_##kind##_pkts_acked, struct sock *sk, const struct ack_sample *sample) \
	{ fn(sk, sample, base); }
#define STL__PROG_min_tso_segs(kind, base, fn)                                          \
	SEC("struct_ops/" #kind "_min_tso_segs")                                        \
	u32 BPF_PROG(stl_##kind##_min_tso_segs, struct sock *sk) { return fn(sk, base); }
#define STL__PROG_undo_cwnd(kind, base, fn)                                             \
	SEC("struct_ops/" #kind "_undo_cwnd")                                           \
	u32 BPF_PROG(stl_##kind##_undo_cwnd, struct sock *sk) { return fn(sk, base); }
#define STL__PROG_release(kind, base, fn)                                               \
	SEC("struct_ops/" #kind "_release")                                             \
	void BPF_PROG(stl_##kind##_release, struct sock *sk) { fn(sk, base); }

/* M(kind, base, member, function) for each pair of the list (up to nine members);
 * an odd list leaves STL__PAIRS_ undefined, a compile error. */
#define STL__PAIRS(M, kind, base, ...) \
	STL__CAT(STL__PAIRS_, STL__NPAIRS(__VA_ARGS__))(M, kind, base, __VA_ARGS__)
#define STL__CAT(a, b) STL__CAT_(a, b)
#define STL__CAT_(a, b) a##b
#define STL__NPAIRS(...) STL__NTH(__VA_ARGS__, 9, _, 8, _, 7, _, 6, _, 5, _, 4, _, 3, _, 2, _, 1, _)
#define STL__NTH(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, _17, _18, n, ...) n
#define STL__PAIRS_1(M, k, b, op, fn) M(k, b, op, fn)
#define STL__PAIRS_2(M, k, b, op, fn, ...) M(k, b, op, fn) STL__PAIRS_1(M, k, b, __VA_ARGS__)
#define STL__PAIRS_3(M, k, b, op, fn, ...) M(k, b, op, fn) STL__PAIRS_2(M, k, b, __VA_ARGS__)
#define STL__PAIRS_4(M, k, b, op, fn, ...) M(k, b, op, fn) STL__PAIRS_3(M, k, b, __VA_ARGS__)
#define STL__PAIRS_5(M, k, b, op, fn, ...) M(k, b, op, fn) STL__PAIRS_4(M, k, b, __VA_ARGS__)
#define STL__PAIRS_6(M, k, b, op, fn, ...) M(k, b, op, fn) STL__PAIRS_5(M, k, b, __VA_ARGS__)
#define STL__PAIRS_7(M, k, b, op, fn, ...) M(k, b, op, fn) STL__PAIRS_6(M, k, b, __VA_ARGS__)
#define STL__PAIRS_8(M, k, b, op, fn, ...) M(k, b, op, fn) STL__PAIRS_7(M, k, b, __VA_ARGS__)
#define STL__PAIRS_9(M, k, b, op, fn, ...) M(k, b, op, fn) STL__PAIRS_8(M, k, b, __VA_ARGS__)

char LICENSE[] SEC("license") = "GPL";

#endif
