// SPDX-License-Identifier: GPL-2.0
/* HyStart++ (RFC 9406) over the kernel's CUBIC, the congestion control hspp. Section
 * numbers are the RFC's.
 *
 * The kernel's own HyStart is off for the connection (CUBIC's `found` flag held set, as
 * bpf_cubic.bpf.c's hsoff), and the initial slow start is HyStart++'s (§4.2):
 *   - rounds: a round ends when the ACK passes windowEnd, the snd_nxt of its start;
 *   - each round keeps the least RTT sample of its ACKs (currentRoundMinRTT) and the
 *     previous round's (lastRoundMinRTT);
 *   - slow start grows the window by min(acked, L) segments per ACK; once a round has
 *     N_RTT_SAMPLE samples and currentRoundMinRTT >= lastRoundMinRTT + RttThresh,
 *     RttThresh = clamp(lastRoundMinRTT / MIN_RTT_DIVISOR, MIN_RTT_THRESH, MAX_RTT_THRESH),
 *     it enters Conservative Slow Start (CSS) with cssBaselineMinRtt = currentRoundMinRTT;
 *   - CSS grows by min(acked, L) / CSS_GROWTH_DIVISOR per ACK (the remainder carried);
 *     a round of CSS with N_RTT_SAMPLE samples whose currentRoundMinRTT falls below the
 *     baseline returns to slow start; after CSS_ROUNDS rounds of CSS, ssthresh = cwnd and
 *     congestion avoidance (CUBIC's);
 *   - a loss in slow start or CSS is CUBIC's (its ssthresh), as every later slow start is
 *     the kernel's: HyStart++ is for the initial slow start only (§4.3).
 * L is 8 without pacing (the kernel's CUBIC does not pace), as §4.2 says; the variant sets it.
 *
 * Settings: the socket's mark carries the tag and the install's generation; stl_hspp_config
 * holds that generation's constants. Every change of phase is logged per connection in
 * stl_hspp_events, with the round's RTTs and the window, for the run's record.
 */
#include "stl_cc.h"
#include <bpf/bpf_endian.h>

#define STL_HSPP_MARK_TAG 0x48000000u  /* "H" */
#define STL_HSPP_MARK_MASK 0xff000000u
#define STL_HSPP_EVENTS 64
#define NO_RTT 0xffffffffu
#define INFINITE_SSTHRESH 0x7fffffffu   /* the kernel's TCP_INFINITE_SSTHRESH (a macro, not in BTF) */

enum hspp_phase { HSPP_SS = 0, HSPP_CSS, HSPP_CA };

/* The RFC's constants for one install (times in µs). */
struct hspp_config {
	u32 min_rtt_thresh_us;
	u32 max_rtt_thresh_us;
	u32 min_rtt_divisor;
	u32 n_rtt_sample;
	u32 css_growth_divisor;
	u32 css_rounds;
	u32 l;
	u32 pad;
};

struct hspp_conn {
	u32 saddr;
	u32 daddr;
	u16 sport;
	u16 dport;
	u32 generation;
};

struct hspp_event {
	u64 t_ns;
	u8 old_phase;
	u8 new_phase;
	u8 css_rounds;
	u8 pad;
	u32 cwnd;
	u32 ssthresh;
	u32 round;
	u32 current_min_us;
	u32 last_min_us;
	u32 baseline_us;
	u32 samples;
};

struct hspp_log {
	u32 n;
	u32 mss;
	struct hspp_event ev[STL_HSPP_EVENTS];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, u32);
	__type(value, struct hspp_config);
} stl_hspp_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct hspp_conn);
	__type(value, struct hspp_log);
} stl_hspp_events SEC(".maps");

struct hspp_log hspp_empty_log = {};

struct hspp_priv {
	struct bictcp cubic;
	u8 phase;
	u8 css_rounds;
	u8 generation;
	u8 in_round;          /* windowEnd is set */
	u32 window_end;
	u32 current_min_us;
	u32 last_min_us;
	u32 baseline_us;
	u32 samples;
	u32 round;
	u32 css_carry;        /* CSS growth not yet a whole segment (segments x divisor) */
};

STL_CA_PRIV_FITS(struct hspp_priv);

static __always_inline struct hspp_priv *hspp(struct sock *sk)
{
	return STL_CA_PRIV(struct hspp_priv, sk);
}

static __always_inline struct hspp_config *hspp_config(struct sock *sk)
{
	u32 generation = hspp(sk)->generation;

	return bpf_map_lookup_elem(&stl_hspp_config, &generation);
}

static __always_inline void hspp_phase(struct sock *sk, u8 next)
{
	struct tcp_sock *tp = tcp(sk);
	struct hspp_priv *p = hspp(sk);
	struct hspp_conn key = {.saddr = sk->__sk_common.skc_rcv_saddr, .daddr = sk->__sk_common.skc_daddr,
				.sport = sk->__sk_common.skc_num, .dport = bpf_ntohs(sk->__sk_common.skc_dport),
				.generation = p->generation};
	struct hspp_log *log;
	struct hspp_event *e;
	u32 n;

	log = bpf_map_lookup_elem(&stl_hspp_events, &key);
	if (!log) {
		bpf_map_update_elem(&stl_hspp_events, &key, &hspp_empty_log, BPF_NOEXIST);
		log = bpf_map_lookup_elem(&stl_hspp_events, &key);
	}
	if (log) {
		n = log->n;
		log->mss = tp->mss_cache;
		if (n < STL_HSPP_EVENTS) {
			e = &log->ev[n];
			e->t_ns = bpf_ktime_get_ns();
			e->old_phase = p->phase;
			e->new_phase = next;
			e->css_rounds = p->css_rounds;
			e->cwnd = tp->snd_cwnd;
			e->ssthresh = tp->snd_ssthresh;
			e->round = p->round;
			e->current_min_us = p->current_min_us;
			e->last_min_us = p->last_min_us;
			e->baseline_us = p->baseline_us;
			e->samples = p->samples;
			log->n = n + 1;
		}
	}
	p->phase = next;
}

static __always_inline void hspp_init(struct sock *sk, int base)
{
	struct hspp_priv *p = hspp(sk);
	u32 mark = sk->sk_mark;

	base_init(sk, base);
	cubic_hystart_off(sk);              /* the kernel's HyStart off: HyStart++ instead */
	p->phase = HSPP_SS;
	p->css_rounds = 0;
	p->in_round = 0;
	p->window_end = 0;
	p->current_min_us = NO_RTT;
	p->last_min_us = NO_RTT;
	p->baseline_us = NO_RTT;
	p->samples = 0;
	p->round = 0;
	p->css_carry = 0;
	p->generation = (mark & STL_HSPP_MARK_MASK) == STL_HSPP_MARK_TAG ? (mark >> 16) & 0xff : 0;
}

static __always_inline int initial_slow_start(struct tcp_sock *tp)
{
	return tp->snd_ssthresh >= INFINITE_SSTHRESH;
}

/* §4.2, per ACK with an RTT sample, in the initial slow start or CSS. */
static __always_inline void hspp_sample(struct sock *sk, u32 rtt_us, struct hspp_config *cfg)
{
	struct tcp_sock *tp = tcp(sk);
	struct hspp_priv *p = hspp(sk);
	u32 thresh;

	if (!p->in_round || (s32)(tp->snd_una - p->window_end) >= 0) {
		/* a round ends: in CSS, CSS_ROUNDS of them end it */
		if (p->in_round && p->phase == HSPP_CSS && ++p->css_rounds >= cfg->css_rounds) {
			tp->snd_ssthresh = tp->snd_cwnd;
			hspp_phase(sk, HSPP_CA);
			return;
		}
		p->in_round = 1;
		p->round++;
		p->last_min_us = p->current_min_us;
		p->current_min_us = NO_RTT;
		p->samples = 0;
		p->window_end = tp->snd_nxt;
	}
	if (rtt_us < p->current_min_us)
		p->current_min_us = rtt_us;
	p->samples++;
	if (p->samples < cfg->n_rtt_sample || p->current_min_us == NO_RTT)
		return;
	if (p->phase == HSPP_SS) {
		if (p->last_min_us == NO_RTT)
			return;
		thresh = p->last_min_us / cfg->min_rtt_divisor;
		if (thresh > cfg->max_rtt_thresh_us)
			thresh = cfg->max_rtt_thresh_us;
		if (thresh < cfg->min_rtt_thresh_us)
			thresh = cfg->min_rtt_thresh_us;
		if (p->current_min_us >= p->last_min_us + thresh) {
			p->baseline_us = p->current_min_us;
			p->css_rounds = 0;
			p->css_carry = 0;
			hspp_phase(sk, HSPP_CSS);
		}
	} else if (p->current_min_us < p->baseline_us) {
		p->baseline_us = NO_RTT;         /* the RTT fell: the increase was spurious */
		hspp_phase(sk, HSPP_SS);
	}
}

static __always_inline void hspp_pkts_acked(struct sock *sk, const struct ack_sample *sample, int base)
{
	struct hspp_priv *p = hspp(sk);
	struct hspp_config *cfg;

	base_pkts_acked(sk, sample, base);
	if (p->phase == HSPP_CA || !initial_slow_start(tcp(sk)) || sample->rtt_us <= 0)
		return;
	cfg = hspp_config(sk);
	if (cfg && cfg->n_rtt_sample && cfg->min_rtt_divisor && cfg->css_growth_divisor)
		hspp_sample(sk, (u32)sample->rtt_us, cfg);
}

/* Slow start's and CSS's growth; everything else is CUBIC's. */
static __always_inline void hspp_cong_avoid(struct sock *sk, u32 ack, u32 acked, int base)
{
	struct tcp_sock *tp = tcp(sk);
	struct hspp_priv *p = hspp(sk);
	struct hspp_config *cfg;
	u32 grow, cwnd;

	cfg = hspp_config(sk);
	if (p->phase == HSPP_CA || !initial_slow_start(tp) || !cfg || !cfg->css_growth_divisor) {
		base_cong_avoid(sk, ack, acked, base);
		return;
	}
	if (!stl_cwnd_limited(tp, 2))           /* an application-limited sender does not grow */
		return;
	grow = acked < cfg->l ? acked : cfg->l;
	if (p->phase == HSPP_CSS) {
		p->css_carry += grow;
		grow = p->css_carry / cfg->css_growth_divisor;
		p->css_carry -= grow * cfg->css_growth_divisor;
	}
	cwnd = tp->snd_cwnd + grow;
	tp->snd_cwnd = cwnd < tp->snd_cwnd_clamp ? cwnd : tp->snd_cwnd_clamp;
}

static __always_inline u32 hspp_ssthresh(struct sock *sk, int base)
{
	struct hspp_priv *p = hspp(sk);

	if (p->phase != HSPP_CA)
		hspp_phase(sk, HSPP_CA);        /* a loss ends the initial slow start (or CSS) */
	return base_ssthresh(sk, base);
}

#define HSPP_OPS                                                                       \
	init, hspp_init, ssthresh, hspp_ssthresh, cong_avoid, hspp_cong_avoid,        \
	set_state, hsoff_set_state, cwnd_event, base_cwnd_event, pkts_acked, hspp_pkts_acked, \
	undo_cwnd, base_undo_cwnd

STL_CC(hspp, STL_CUBIC, HSPP_OPS);
