// SPDX-License-Identifier: GPL-2.0
/* SEARCH (draft-chung-ccwg-search, its "4.0" form of revision -09: delivered bytes against
 * the bytes sent one RTT earlier) over the kernel's CUBIC, the congestion control search.
 *
 * The kernel's HyStart is off for the connection (CUBIC's `found` flag held set); in the
 * initial slow start SEARCH decides the exit:
 *   - the first RTT sample is initial_rtt; the window is 3.5 x initial_rtt in W = 10 bins of
 *     0.35 x initial_rtt each;
 *   - at each bin boundary (the first ACK past it) the bins store the connection's
 *     cumulative bytes acknowledged and sent (bins skipped in between keep the last value:
 *     they add nothing); more than W bins at once start SEARCH afresh (the draft's optional
 *     missed-bin reset, as neqo does);
 *   - then the check: curr_delv = acked over the last W bins; prev_sent = sent over the W
 *     bins that ended one RTT (the ACK's RTT sample) earlier, interpolated between whole
 *     bins (backwards, as neqo corrects the draft); with enough history (the earlier window
 *     within the EXTRA_BINS = 15 kept) norm = max(0, prev_sent - curr_delv) / prev_sent;
 *   - norm >= THRESH ends slow start: ssthresh = cwnd (neqo's exit; the draft's optional
 *     drain towards the bytes delivered is not built), CUBIC from there.
 * Sent bytes count retransmissions (tp->bytes_sent); before the exit there are none unless
 * a loss came first, which ends slow start as CUBIC's.
 *
 * The bins (11 acked, 26 sent, rounded up to powers of two) do not fit the congestion
 * control's private area: they live in the socket's storage. Every check is logged per
 * connection (stl_sslog.h) with norm, prev_sent and curr_delv, and the exit.
 */
#include "stl_cc.h"

#define STL_SEARCH_MARK_TAG 0x53000000u /* "S" */
#define SEARCH_W 10
#define SEARCH_EXTRA_BINS 15
#define ACKED_RING 16            /* >= W + 1 */
#define SENT_RING 32             /* >= W + 1 + EXTRA_BINS + 1 */

struct search_config {
	u32 thresh_milli;        /* THRESH x 1000 */
	u32 window_pct;          /* the window, % of initial_rtt (350) */
	u32 pad[6];
};
#define STL_SS_CONFIG struct search_config
#include "stl_sslog.h"

enum search_event { SEARCH_CHECK = 1, SEARCH_EXIT, SEARCH_RESET };

struct search_bins {
	u64 bin_end_us;
	u32 initial_rtt_us;
	u32 bin_us;
	u32 idx;                 /* the current bin; 0: not started */
	u32 started;
	u32 acked[ACKED_RING];   /* cumulative bytes acknowledged at each bin's end (low 32 bits) */
	u32 sent[SENT_RING];     /* cumulative bytes sent */
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct search_bins);
} stl_search_bins SEC(".maps");

struct search_priv {
	struct bictcp cubic;
	u8 generation;
	u8 done;                 /* SEARCH has exited (or slow start ended otherwise) */
	u16 checks;
};

STL_CA_PRIV_FITS(struct search_priv);

static __always_inline struct search_priv *search(struct sock *sk)
{
	return STL_CA_PRIV(struct search_priv, sk);
}

static __always_inline void search_init(struct sock *sk, int base)
{
	struct search_priv *p = search(sk);
	struct search_bins *b;

	base_init(sk, base);
	cubic_hystart_off(sk);
	p->generation = stl_ss_generation(sk, STL_SEARCH_MARK_TAG);
	p->done = 0;
	p->checks = 0;
	b = bpf_sk_storage_get(&stl_search_bins, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (b)
		b->started = 0;
}

static __always_inline void search_start(struct sock *sk, struct search_bins *b, u32 rtt_us,
					 struct search_config *cfg)
{
	struct tcp_sock *tp = tcp(sk);

	b->initial_rtt_us = rtt_us;
	b->bin_us = (u32)((u64)rtt_us * cfg->window_pct / 100 / SEARCH_W);
	if (!b->bin_us)
		b->bin_us = 1;
	b->bin_end_us = tp->tcp_mstamp + b->bin_us;
	b->idx = 0;
	b->acked[0] = (u32)tp->bytes_acked;
	b->sent[0] = (u32)tp->bytes_sent;
	b->started = 1;
}

static __always_inline u32 sent_at(struct search_bins *b, u32 i)
{
	return b->sent[i & (SENT_RING - 1)];
}

/* One bin boundary (or more) has passed: store the counters, then check. */
static __always_inline void search_bin(struct sock *sk, struct search_bins *b, u32 rtt_us,
				       struct search_config *cfg)
{
	struct tcp_sock *tp = tcp(sk);
	struct search_priv *p = search(sk);
	u32 passed = (u32)((tp->tcp_mstamp - b->bin_end_us) / b->bin_us) + 1;
	u32 last_acked = b->acked[b->idx & (ACKED_RING - 1)];
	u32 last_sent = sent_at(b, b->idx);
	u32 back, frac, prev, curr_delv, prev_sent, diff, norm;
	int i;

	if (passed > SEARCH_W) {                 /* missed bins: start again at the next ACK */
		stl_ss_log(sk, p->generation, SEARCH_RESET, b->idx, passed, 0, 0, 0);
		b->started = 0;
		return;
	}
	for (i = 1; i < SEARCH_W; i++) {         /* the skipped bins add nothing */
		if (i >= passed)
			break;
		b->acked[(b->idx + i) & (ACKED_RING - 1)] = last_acked;
		b->sent[(b->idx + i) & (SENT_RING - 1)] = last_sent;
	}
	b->idx += passed;
	b->bin_end_us += (u64)passed * b->bin_us;
	b->acked[b->idx & (ACKED_RING - 1)] = (u32)tp->bytes_acked;
	b->sent[b->idx & (SENT_RING - 1)] = (u32)tp->bytes_sent;

	back = rtt_us / b->bin_us;
	frac = (u32)((u64)(rtt_us % b->bin_us) * 1000 / b->bin_us);
	if (back > b->idx)
		return;
	prev = b->idx - back;
	if (prev <= SEARCH_W || back >= SEARCH_EXTRA_BINS)
		return;                          /* not enough history yet, or too far back */
	curr_delv = b->acked[b->idx & (ACKED_RING - 1)] - b->acked[(b->idx - SEARCH_W) & (ACKED_RING - 1)];
	prev_sent = (u32)(((u64)frac * (sent_at(b, prev - 1) - sent_at(b, prev - 1 - SEARCH_W)) +
			   (u64)(1000 - frac) * (sent_at(b, prev) - sent_at(b, prev - SEARCH_W))) / 1000);
	if (!prev_sent)
		return;
	diff = prev_sent > curr_delv ? prev_sent - curr_delv : 0;
	norm = (u32)((u64)diff * 1000 / prev_sent);
	p->checks++;
	stl_ss_log(sk, p->generation, SEARCH_CHECK, b->idx, norm, prev_sent, curr_delv, rtt_us);
	if (norm >= cfg->thresh_milli) {
		tp->snd_ssthresh = tp->snd_cwnd;
		p->done = 1;
		stl_ss_log(sk, p->generation, SEARCH_EXIT, b->idx, norm, prev_sent, curr_delv, b->initial_rtt_us);
	}
}

static __always_inline void search_pkts_acked(struct sock *sk, const struct ack_sample *sample, int base)
{
	struct tcp_sock *tp = tcp(sk);
	struct search_priv *p = search(sk);
	struct search_config *cfg;
	struct search_bins *b;

	base_pkts_acked(sk, sample, base);
	if (p->done || sample->rtt_us <= 0)
		return;
	if (!stl_ss_initial(tp)) {
		p->done = 1;                     /* a loss ended slow start first */
		return;
	}
	cfg = stl_ss_config_of(p->generation);
	b = bpf_sk_storage_get(&stl_search_bins, sk, 0, 0);
	if (!cfg || !cfg->window_pct || !b)
		return;
	if (!b->started)
		search_start(sk, b, (u32)sample->rtt_us, cfg);
	else if (tp->tcp_mstamp > b->bin_end_us && b->bin_us)
		search_bin(sk, b, (u32)sample->rtt_us, cfg);
}

#define SEARCH_OPS                                                                     \
	init, search_init, ssthresh, base_ssthresh, cong_avoid, base_cong_avoid,      \
	set_state, hsoff_set_state, cwnd_event, base_cwnd_event, pkts_acked, search_pkts_acked, \
	undo_cwnd, base_undo_cwnd

STL_CC(search, STL_CUBIC, SEARCH_OPS);
