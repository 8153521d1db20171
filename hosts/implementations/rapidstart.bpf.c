// SPDX-License-Identifier: GPL-2.0
/* Rapid Start (draft-kazuho-ccwg-rapid-start-02) over the kernel's CUBIC, the congestion
 * control rs. Section numbers are the draft's.
 *
 * The kernel's HyStart is off for the connection (CUBIC's `found` flag held set): Rapid
 * Start's slow start ends only with the first loss (§3.3); until then
 *   - min_rtt is the least RTT sample of the connection, rtt_floor the least of the current
 *     round (a round ends when the ACK passes the snd_nxt of its start: RFC 9406's
 *     currentRoundMinRTT, one of the draft's two examples), the previous round's while the
 *     current one has no sample yet;
 *   - while rtt_floor <= min(min_rtt + thresh_add, min_rtt x thresh_pct / 100), every
 *     segment acknowledged adds two to the window (3x a round), else one (2x) (§3.2);
 *   - the window grows only while the connection is window-limited: the kernel's rule for
 *     slow start (the window below twice the most segments in flight over the last window,
 *     or the sender held back by it) with three times for 3x growth.
 * The first loss (§3.3.1): with K and beta, silence = beta + K(1 - beta), ack = K(1 - beta),
 * loss = silence. Over the first recovery the draft's window falls from pre_cwnd x silence
 * by ack per segment acknowledged and by loss per segment lost, which ends at
 * beta x (pre_cwnd - lost) whatever the loss ratio (its Appendix A), not below
 * pre_cwnd x beta / floor_div. Here the kernel's PRR takes the window down (a congestion
 * control without cong_control cannot replace PRR) towards that end: ssthresh is the end
 * as the losses so far give it, updated on every ACK of the recovery, and is the window
 * the kernel sets when the recovery ends. Then Rapid Start is over: CUBIC's rules, from the
 * window W_max CUBIC noted at the loss.
 * Pacing is the kernel's internal pacing (the variant's `pacing`), at the variant's
 * slow-start ratio (300 % of cwnd/RTT, as quicly paces while it grows 3x).
 *
 * Every round of the rapid phase, the loss and the end of the recovery are logged per
 * connection (stl_sslog.h): the round's rtt_floor and threshold and the segments that grew
 * the window 3x and 2x; the pre-loss window, the losses and the target.
 */
#include "stl_cc.h"

#define STL_RS_MARK_TAG 0x52000000u /* "R" */

/* One install's settings (the draft's defaults in hosts/implementations/rapidstart.py). */
struct rs_config {
	u32 k_num;          /* K = k_num / k_den */
	u32 k_den;
	u32 beta_milli;     /* the window decrease factor beta, x 1000 */
	u32 thresh_add_us;  /* rtt_floor may exceed min_rtt by this ... */
	u32 thresh_pct;     /* ... and by this share of it (%), whichever is smaller */
	u32 floor_div;      /* the first recovery ends no lower than pre_cwnd x beta / floor_div */
	u32 pad[2];
};
#define STL_SS_CONFIG struct rs_config
#include "stl_sslog.h"

enum rs_phase { RS_RAPID = 0, RS_RECOVERY, RS_DONE };
enum rs_event { RS_ROUND = 1, RS_LOSS, RS_EXIT };

struct rs_priv {
	struct bictcp cubic;
	u8 phase;
	u8 generation;
	u8 in_round;
	u8 pad;
	u32 window_end;
	u32 round;
	u32 round_min_us;
	u32 last_round_min_us;
	u32 min_rtt_us;
	u32 acked3;         /* segments acknowledged this round with 3x growth ... */
	u32 acked2;         /* ... and with 2x */
	u32 pre_cwnd;       /* the window when the first loss was detected */
};

STL_CA_PRIV_FITS(struct rs_priv);

static __always_inline struct rs_priv *rs(struct sock *sk)
{
	return STL_CA_PRIV(struct rs_priv, sk);
}

static __always_inline void rs_init(struct sock *sk, int base)
{
	struct rs_priv *p = rs(sk);

	base_init(sk, base);
	cubic_hystart_off(sk);
	p->phase = RS_RAPID;
	p->generation = stl_ss_generation(sk, STL_RS_MARK_TAG);
	p->in_round = 0;
	p->window_end = 0;
	p->round = 0;
	p->round_min_us = STL_SS_NO_RTT;
	p->last_round_min_us = STL_SS_NO_RTT;
	p->min_rtt_us = STL_SS_NO_RTT;
	p->acked3 = 0;
	p->acked2 = 0;
	p->pre_cwnd = 0;
}

static __always_inline u32 rs_threshold(struct rs_priv *p, struct rs_config *cfg)
{
	u32 add = p->min_rtt_us + cfg->thresh_add_us;
	u32 pct = (u32)((u64)p->min_rtt_us * cfg->thresh_pct / 100);

	return add < pct ? add : pct;
}

static __always_inline u32 rs_floor(struct rs_priv *p)
{
	return p->round_min_us != STL_SS_NO_RTT ? p->round_min_us : p->last_round_min_us;
}

/* 3x growth now? (Before any RTT sample: yes.) */
static __always_inline int rs_fast(struct rs_priv *p, struct rs_config *cfg)
{
	u32 floor = rs_floor(p);

	return p->min_rtt_us == STL_SS_NO_RTT || floor == STL_SS_NO_RTT || floor <= rs_threshold(p, cfg);
}

/* Where the first recovery ends: beta x (pre_cwnd - lost), not below pre_cwnd x beta /
 * floor_div, nor below 2. tp->lost counts every loss of the connection, and all of them so
 * far belong to the first recovery. */
static __always_inline u32 rs_target(struct sock *sk, struct rs_config *cfg)
{
	struct tcp_sock *tp = tcp(sk);
	u32 pre = rs(sk)->pre_cwnd;
	u32 delivered = pre > tp->lost ? pre - tp->lost : 0;
	u32 target = (u32)((u64)delivered * cfg->beta_milli / 1000);
	u32 floor = cfg->floor_div ? (u32)((u64)pre * cfg->beta_milli / 1000 / cfg->floor_div) : 0;

	if (target < floor)
		target = floor;
	return target < 2 ? 2 : target;
}

static __always_inline void rs_pkts_acked(struct sock *sk, const struct ack_sample *sample, int base)
{
	struct tcp_sock *tp = tcp(sk);
	struct rs_priv *p = rs(sk);
	struct rs_config *cfg = stl_ss_config_of(p->generation);
	u32 rtt;

	base_pkts_acked(sk, sample, base);
	if (!cfg || !cfg->k_den)
		return;
	if (p->phase == RS_RECOVERY) {
		tp->snd_ssthresh = rs_target(sk, cfg);
		return;
	}
	if (p->phase != RS_RAPID || sample->rtt_us <= 0)
		return;
	rtt = (u32)sample->rtt_us;
	if (!p->in_round || (s32)(tp->snd_una - p->window_end) >= 0) {
		if (p->in_round)
			stl_ss_log(sk, p->generation, RS_ROUND, p->round, rs_floor(p), rs_threshold(p, cfg),
				   p->acked3, p->acked2);
		p->in_round = 1;
		p->round++;
		p->last_round_min_us = p->round_min_us;
		p->round_min_us = STL_SS_NO_RTT;
		p->acked3 = 0;
		p->acked2 = 0;
		p->window_end = tp->snd_nxt;
	}
	if (rtt < p->round_min_us)
		p->round_min_us = rtt;
	if (rtt < p->min_rtt_us)
		p->min_rtt_us = rtt;
}

static __always_inline void rs_cong_avoid(struct sock *sk, u32 ack, u32 acked, int base)
{
	struct tcp_sock *tp = tcp(sk);
	struct rs_priv *p = rs(sk);
	struct rs_config *cfg = stl_ss_config_of(p->generation);
	u32 cwnd;
	int fast;

	if (p->phase != RS_RAPID || !stl_ss_initial(tp) || !cfg || !cfg->k_den) {
		base_cong_avoid(sk, ack, acked, base);
		return;
	}
	fast = rs_fast(p, cfg);
	if (!stl_cwnd_limited(tp, fast ? 3 : 2))
		return;
	if (fast) {
		p->acked3 += acked;
		cwnd = tp->snd_cwnd + 2 * acked;
	} else {
		p->acked2 += acked;
		cwnd = tp->snd_cwnd + acked;
	}
	tp->snd_cwnd = cwnd < tp->snd_cwnd_clamp ? cwnd : tp->snd_cwnd_clamp;
}

/* The first loss starts Rapid Start's recovery; CUBIC notes its W_max as usual. */
static __always_inline u32 rs_ssthresh(struct sock *sk, int base)
{
	struct tcp_sock *tp = tcp(sk);
	struct rs_priv *p = rs(sk);
	struct rs_config *cfg = stl_ss_config_of(p->generation);
	u32 cubic = base_ssthresh(sk, base);
	u32 target;

	if (p->phase != RS_RAPID || !cfg || !cfg->k_den)
		return cubic;
	p->pre_cwnd = tp->snd_cwnd;
	p->phase = RS_RECOVERY;
	target = rs_target(sk, cfg);
	stl_ss_log(sk, p->generation, RS_LOSS, p->round, p->pre_cwnd, tp->lost, target, p->acked3 + p->acked2);
	return target;
}

static __always_inline void rs_set_state(struct sock *sk, u8 new_state, int base)
{
	struct tcp_sock *tp = tcp(sk);
	struct rs_priv *p = rs(sk);
	struct rs_config *cfg = stl_ss_config_of(p->generation);

	if (p->phase == RS_RECOVERY && cfg && (new_state == TCP_CA_Open || new_state == TCP_CA_Loss)) {
		/* The end of the first recovery (the kernel then sets cwnd = ssthresh), or a
		 * timeout within it: Rapid Start is over either way. */
		if (new_state == TCP_CA_Open)
			tp->snd_ssthresh = rs_target(sk, cfg);
		stl_ss_log(sk, p->generation, RS_EXIT, p->round, p->pre_cwnd, tp->lost, tp->snd_ssthresh,
			   new_state == TCP_CA_Loss);
		p->phase = RS_DONE;
	}
	hsoff_set_state(sk, new_state, base);
}

#define RS_OPS                                                                         \
	init, rs_init, ssthresh, rs_ssthresh, cong_avoid, rs_cong_avoid,              \
	set_state, rs_set_state, cwnd_event, base_cwnd_event, pkts_acked, rs_pkts_acked, \
	undo_cwnd, base_undo_cwnd

STL_CC(rs, STL_CUBIC, RS_OPS);
