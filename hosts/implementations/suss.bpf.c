// SPDX-License-Identifier: GPL-2.0
/* SUSS (Arghavani et al., SIGCOMM 2024: "SUSS: Improving TCP Performance by Speeding Up
 * Slow-Start") over the kernel's CUBIC, the congestion control suss. Read from the
 * authors' kernel patch (Linux 6.8, tcp_cubic.c/tcp_input.c/tcp_output.c); rewritten here
 * as a BPF congestion control, with the departures named below.
 *
 * Rounds: a round starts with the first ACK past the snd_nxt of the last round's start
 * (head), seen in pkts_acked before HyStart's detectors, as the kernel's HyStart does. In round r >= 2 the first ACKs acknowledge the last round's ACK-clocked ("blue")
 * segments, IW x 2^(r-2) of them; the ACK that acknowledges the last of them (the tail)
 * measures the blue train: dt_bat = its length from the round's first ACK, scaled to the
 * IW x 2^(r-2) segments expected. There SUSS decides the round's growth, G = 4 or 2:
 *   - r = 2: G = 4 if min_rtt > 10 ms and dt_bat < min_rtt / 4; else SUSS is off for the
 *     connection (plain slow start with HyStart from then on);
 *   - r >= 3, while every earlier round chose 4: G = 4 if (dt_bat 2^(r-2))^2 /
 *     (prev_dt_bat 2^(r-3)) <= min_rtt, r < suss_max + 2, and the round's RTT is within
 *     min_rtt x (1 + k / (8 (k + 1))), k the rounds since min_rtt last fell; else 2, and 2
 *     from then on.
 * With G = 4 the window is raised at the tail to what ends the round at four times its
 * start (blue_pkt x (2^(r-1) - 1) "red" segments more, less the red ACKs still to come) and
 * the red segments are paced over min_rtt - min_rtt / 2^(r-1), when that leaves room after
 * the blue train (T = min_rtt / 2^(r-1) > dt_bat; the jumps J count the paced rounds);
 * the red ACKs then add nothing. The next round starts unpaced.
 * Slow start's exits are HyStart's (the kernel's HyStart is off for the connection; these
 * are its detectors, run on SUSS's rounds): the delay detector (the round's first 8 RTT
 * samples above min_rtt + clamp(min_rtt / 8, 4 ms, 16 ms)) and the ACK train (ACKs <= 2 ms
 * apart reaching past (min_rtt + ack delay) / 2 from the round's start, halved only for an
 * unpaced socket, as the kernel). While SUSS is on, a long train of blue ACKs sets a cap
 * instead: cwnd + blue_cnt (2^J - 1), and the exit comes when the window passes it. An exit after
 * paced jumps (J > 1) sets the window to the segments in flight; ssthresh = cwnd. A loss
 * before that ends SUSS (the window to the segments in flight), CUBIC's response follows.
 *
 * Departures, by what a BPF congestion control can do: the patch paces the red segments
 * from a moment after the blue train (a guard g = (T - dt_bat) / 2, by writing the socket's
 * next departure time); here pacing starts once the blue segments are sent (checked before
 * every transmit attempt, in min_tso_segs), at the rate that ends the red segments when the
 * patch's would (red bytes over P + g), capped through SO_MAX_PACING_RATE (the kernel
 * rewrites the pacing rate on every ACK). The socket has one pacing rate: set at the tail
 * it also spaced the blue segments still unsent (measured: 16 of round 2's 20 when the
 * IW's ACKs came within 60 µs), and round 3 then measured a train of ~50 ms, the red
 * period. The call that sends the last blue segments may send a red one or two unpaced. The patch raises the window by 2 per
 * transmitted segment up to the limit; here the window is the limit at once and pacing
 * spaces the sending. The patch overrides the peer's receive window; here the variant's
 * client opens it (as Jump Start's). The patch enables itself on port 80 for unpaced
 * sockets only; here every connection of the install (unpaced: the variant sets no pacing).
 *
 * Every round's start and decision, and the exit, are logged per connection (stl_sslog.h).
 */
#include "stl_cc.h"

#define STL_SUSS_MARK_TAG 0x55000000u /* "U" */
/* Rounds past this leave SUSS (its blue segments, IW x 2^(r-1), no longer fit 32 bits of
 * sequence space); SUSS accelerates in rounds 2 to suss_max + 1 anyway. */
#define SUSS_MAX_ROUND 16
#define HYSTART_LOW_WINDOW 16
#define HYSTART_MIN_SAMPLES 8
#define HYSTART_ACK_DELTA_US 2000
#define HYSTART_DELAY_MIN_US 4000
#define HYSTART_DELAY_MAX_US 16000

struct suss_config {
	u32 iw;             /* the IW the rounds count from */
	u32 suss_max;       /* rounds of acceleration: r < suss_max + 2 */
	u32 min_rtt_us;     /* SUSS only where min_rtt exceeds this (10 ms) */
	u32 pad[5];
};
#define STL_SS_CONFIG struct suss_config
#include "stl_sslog.h"

enum suss_state { SUSS_BLUE = 1, SUSS_PACING, SUSS_RED, SUSS_DONE, SUSS_OFF, SUSS_PACE_WAIT };
enum suss_event { SUSS_ROUND = 1, SUSS_TAIL, SUSS_EXIT };
enum suss_exit { EXIT_DELAY = 1, EXIT_TRAIN, EXIT_CAP, EXIT_LOSS };

struct suss_priv {
	struct bictcp cubic;
	u8 state;
	u8 generation;
	u8 grow4;           /* every round so far chose G = 4 */
	u8 jumps;           /* J: rounds whose red segments were paced */
	u8 round;
	u8 minrtt_round;    /* the round in which min_rtt last fell */
	u8 samples;         /* RTT samples of this round (the delay detector's first 8) */
	u8 capped;
	u32 head_seq;
	u32 tail_seq;
	u32 round_start_us;
	u32 last_ack_us;
	u32 blue_cnt;
	u32 prev_dt_bat_us;
	u32 round_min_us;
	u32 cap;
	u32 red_left;       /* red ACKs this round still to come (they add nothing) */
};

STL_CA_PRIV_FITS(struct suss_priv);

static __always_inline struct suss_priv *suss(struct sock *sk)
{
	return STL_CA_PRIV(struct suss_priv, sk);
}

static __always_inline u32 now_us(struct sock *sk)
{
	return (u32)tcp(sk)->tcp_mstamp;
}

static __always_inline u32 min_rtt(struct sock *sk)
{
	return suss(sk)->cubic.delay_min;   /* CUBIC's, in microseconds */
}

/* The red segments' pacing rate (bytes/s) in round r, whose blue train was dt_bat: their
 * bytes over the rest of the round and the guard, min_rtt - T + (T - dt_bat) / 2 with
 * T = min_rtt / 2^(r-1); 0 when T leaves no room after the train (no pacing). */
static __always_inline u32 suss_red_rate(struct sock *sk, struct suss_config *cfg, u32 r, u32 dt_bat)
{
	u32 m = min_rtt(sk), t = m >> (r - 1), blue_pkt = cfg->iw << (r - 1);
	u32 red_pkt = blue_pkt * ((1u << (r - 1)) - 1), period = m - t;

	if (t <= dt_bat)
		return 0;
	return (u32)((u64)red_pkt * tcp(sk)->mss_cache * USEC_PER_SEC / (period + (t - dt_bat) / 2));
}

/* Pace what is still to send (the red segments of this round) at their rate. */
static __always_inline void suss_pace(struct sock *sk)
{
	struct suss_priv *p = suss(sk);
	struct suss_config *cfg = stl_ss_config_of(p->generation);
	u32 rate = cfg ? suss_red_rate(sk, cfg, p->round, p->prev_dt_bat_us) : 0;

	if (!rate) {
		p->state = SUSS_RED;
		return;
	}
	bpf_setsockopt(sk, SOL_SOCKET, SO_MAX_PACING_RATE, &rate, sizeof(rate));
	p->state = SUSS_PACING;
}

static __always_inline void suss_init(struct sock *sk, int base)
{
	struct tcp_sock *tp = tcp(sk);
	struct suss_priv *p = suss(sk);
	struct suss_config *cfg;

	base_init(sk, base);
	cubic_hystart_off(sk);
	p->generation = stl_ss_generation(sk, STL_SUSS_MARK_TAG);
	cfg = stl_ss_config_of(p->generation);
	p->state = cfg && cfg->iw ? SUSS_BLUE : SUSS_OFF;
	p->grow4 = 1;
	p->jumps = 0;
	p->round = 1;
	p->minrtt_round = 1;
	p->samples = 0;
	p->capped = 0;
	p->head_seq = tp->snd_nxt;
	p->tail_seq = tp->snd_nxt + (cfg ? cfg->iw : 10) * tp->mss_cache - 1;
	p->round_start_us = now_us(sk);
	p->last_ack_us = p->round_start_us;
	p->blue_cnt = 0;
	p->prev_dt_bat_us = 0;
	p->round_min_us = STL_SS_NO_RTT;
	p->cap = 0;
	p->red_left = 0;
}

static __always_inline int suss_on(struct suss_priv *p)
{
	return p->state == SUSS_BLUE || p->state == SUSS_PACING || p->state == SUSS_RED ||
	       p->state == SUSS_PACE_WAIT;
}

/* Slow start ends: ssthresh = cwnd (after paced jumps, the window is what is in flight). */
static __always_inline void suss_exit(struct sock *sk, u32 why)
{
	struct tcp_sock *tp = tcp(sk);
	struct suss_priv *p = suss(sk);

	if (p->jumps > 1 && tp->packets_out > 1 && suss_on(p))
		tp->snd_cwnd = tp->packets_out;
	tp->snd_ssthresh = tp->snd_cwnd;
	if (p->state == SUSS_PACING)
		stop_pacing(sk);
	stl_ss_log(sk, p->generation, SUSS_EXIT, p->round, why, p->round_min_us, min_rtt(sk), p->jumps);
	p->state = SUSS_DONE;
}

static __always_inline u32 ack_delay_us(struct sock *sk)
{
	u64 rate = sk->sk_pacing_rate;
	u64 d;

	if (!rate)
		return 0;
	d = (u64)sk->sk_gso_max_size * 4 * USEC_PER_SEC / rate;
	return d < 1000 ? (u32)d : 1000;
}

/* Before every transmit attempt: the red segments' pacing starts once the blue ones are
 * sent. The kernel's default otherwise (net.ipv4.tcp_min_tso_segs); the call is our hook,
 * not a TSO policy. */
static __always_inline u32 suss_min_tso_segs(struct sock *sk, int base)
{
	struct suss_priv *p = suss(sk);

	if (p->state == SUSS_PACE_WAIT && (s32)(tcp(sk)->snd_nxt - (p->tail_seq + 1)) >= 0)
		suss_pace(sk);
	return 2;
}

/* A new round: the ACK passed the snd_nxt of the last round's start. */
static __always_inline void suss_round(struct sock *sk)
{
	struct tcp_sock *tp = tcp(sk);
	struct suss_priv *p = suss(sk);

	if (p->state == SUSS_PACING)
		stop_pacing(sk);
	p->round++;
	p->head_seq = tp->snd_nxt;
	p->round_start_us = now_us(sk);
	p->last_ack_us = p->round_start_us;
	p->blue_cnt = 0;
	p->red_left = 0;
	p->samples = 0;
	p->round_min_us = STL_SS_NO_RTT;
	if (suss_on(p))
		p->state = p->round <= SUSS_MAX_ROUND ? SUSS_BLUE : SUSS_OFF;
	stl_ss_log(sk, p->generation, SUSS_ROUND, p->round, p->jumps, p->grow4, p->state, 0);
}

/* Rounds, and HyStart's detectors on them (initial slow start, from 16 segments). */
static __always_inline void suss_pkts_acked(struct sock *sk, const struct ack_sample *sample, int base)
{
	struct tcp_sock *tp = tcp(sk);
	struct suss_priv *p = suss(sk);
	u32 before = min_rtt(sk), m, now, thresh, train;

	base_pkts_acked(sk, sample, base);     /* CUBIC's delay_min */
	if (min_rtt(sk) != before)
		p->minrtt_round = p->round;
	if (p->state == SUSS_DONE || !stl_ss_initial(tp))
		return;
	if ((s32)(tp->snd_una - p->head_seq) > 0)
		suss_round(sk);
	if (tp->snd_cwnd < HYSTART_LOW_WINDOW || sample->rtt_us <= 0)
		return;
	m = min_rtt(sk);
	now = now_us(sk);
	if ((s32)(now - p->last_ack_us) <= HYSTART_ACK_DELTA_US) {
		p->last_ack_us = now;
		train = now - p->round_start_us;
		if (suss_on(p)) {
			/* SUSS's cap, on blue ACKs only: their train, scaled by 2^J, past
			 * (min_rtt + ack delay) / 2 */
			if (p->state == SUSS_BLUE && !p->capped && ((u64)train << p->jumps) > (m + ack_delay_us(sk)) / 2) {
				p->capped = 1;
				p->cap = tp->snd_cwnd + p->blue_cnt * ((1u << p->jumps) - 1);
			}
		} else {
			thresh = m + ack_delay_us(sk);
			if (sk->sk_pacing_status == SK_PACING_NONE)
				thresh >>= 1;
			if (train > thresh) {
				suss_exit(sk, EXIT_TRAIN);
				return;
			}
		}
	}
	if (p->samples < HYSTART_MIN_SAMPLES) {
		if ((u32)sample->rtt_us < p->round_min_us)
			p->round_min_us = (u32)sample->rtt_us;
		if (++p->samples == HYSTART_MIN_SAMPLES) {
			thresh = m >> 3;
			thresh = thresh < HYSTART_DELAY_MIN_US ? HYSTART_DELAY_MIN_US :
				 thresh > HYSTART_DELAY_MAX_US ? HYSTART_DELAY_MAX_US : thresh;
			if (p->round_min_us > m + thresh)
				suss_exit(sk, EXIT_DELAY);
		}
	}
}

/* At the blue tail of round r: G and, for 4, the window and the red segments' pacing. */
static __always_inline void suss_tail(struct sock *sk, u32 acked, struct suss_config *cfg)
{
	struct tcp_sock *tp = tcp(sk);
	struct suss_priv *p = suss(sk);
	u32 r = p->round, m = min_rtt(sk), mss = tp->mss_cache;
	u32 blue_pkt = cfg->iw << (r - 1), elapsed = now_us(sk) - p->round_start_us;
	u32 blue_cnt = p->blue_cnt ? p->blue_cnt : 1;
	u32 dt_bat = (u32)((u64)blue_pkt * elapsed / (2 * blue_cnt));
	u32 red_pkt = 0, limit = 0, k, rate = 0;
	u64 dt, dtp;
	int grow4 = 0;

	p->tail_seq = p->head_seq + blue_pkt * mss - 1;   /* the next round's blue segments */
	if (r == 2) {
		grow4 = m > cfg->min_rtt_us && dt_bat < m / 4;
		if (!grow4) {
			p->state = SUSS_OFF;
			stl_ss_log(sk, p->generation, SUSS_TAIL, r, dt_bat, 0, 0, 0);
			return;
		}
	} else if (p->grow4 && p->prev_dt_bat_us) {
		dt = (u64)dt_bat << (r - 2);
		dtp = (u64)p->prev_dt_bat_us << (r - 3);
		k = r - p->minrtt_round;
		grow4 = dt * dt / dtp <= m && r < cfg->suss_max + 2 &&
			(u64)(k + 1) * p->round_min_us <= (u64)(k + 1) * m + k * m / 8;
	}
	p->prev_dt_bat_us = dt_bat;
	if (!grow4) {
		p->grow4 = 0;
		p->state = SUSS_RED;
		stl_ss_log(sk, p->generation, SUSS_TAIL, r, dt_bat, 2, 0, 0);
		return;
	}
	red_pkt = blue_pkt * ((1u << (r - 1)) - 1);
	p->red_left = (blue_pkt / 2) * ((1u << (r - 2)) - 1);
	limit = tp->snd_cwnd + acked + red_pkt - p->red_left;
	tp->snd_cwnd = limit < tp->snd_cwnd_clamp ? limit : tp->snd_cwnd_clamp;
	rate = suss_red_rate(sk, cfg, r, dt_bat);
	if (rate) {
		p->jumps++;
		/* The socket has one pacing rate: set now, it would space the blue segments
		 * still unsent too (ACKs that come in a burst leave most of them queued behind
		 * the small-queue limit), and the next round would measure a train as long as
		 * the red segments' period. So pacing starts once the blue segments are out
		 * (suss_min_tso_segs, before every transmit attempt), or now when this ACK's
		 * own transmission sends the last of them. */
		if ((s32)(p->tail_seq + 1 - tp->snd_nxt) <= (s32)(2 * acked * mss))
			suss_pace(sk);
		else
			p->state = SUSS_PACE_WAIT;
	} else {
		p->state = SUSS_RED;
	}
	stl_ss_log(sk, p->generation, SUSS_TAIL, r, dt_bat, 4, limit, rate);
}

static __always_inline void suss_cong_avoid(struct sock *sk, u32 ack, u32 acked, int base)
{
	struct tcp_sock *tp = tcp(sk);
	struct suss_priv *p = suss(sk);
	struct suss_config *cfg = stl_ss_config_of(p->generation);

	if (!suss_on(p) || !stl_ss_initial(tp) || !cfg || !cfg->iw) {
		base_cong_avoid(sk, ack, acked, base);
		return;
	}
	if (p->capped && tp->snd_cwnd > p->cap) {
		suss_exit(sk, EXIT_CAP);
		return;
	}
	if (p->state == SUSS_BLUE && p->round >= 2) {
		if ((s32)(ack - p->tail_seq) <= 0) {  /* a blue ACK: slow start */
			p->blue_cnt += acked;
			base_cong_avoid(sk, ack, acked, base);
		} else {
			p->blue_cnt += acked;
			suss_tail(sk, acked, cfg);
			if (p->state == SUSS_OFF || p->state == SUSS_RED)
				base_cong_avoid(sk, ack, acked, base);
		}
		return;
	}
	if (p->red_left) {                        /* a red ACK of a 4x round adds nothing */
		p->red_left = acked < p->red_left ? p->red_left - acked : 0;
		return;
	}
	base_cong_avoid(sk, ack, acked, base);
}

/* A loss or ECN in SUSS: the window to what is in flight, then CUBIC's response. */
static __always_inline u32 suss_ssthresh(struct sock *sk, int base)
{
	struct tcp_sock *tp = tcp(sk);
	struct suss_priv *p = suss(sk);

	if (suss_on(p)) {
		if (tp->packets_out > 1)
			tp->snd_cwnd = tp->packets_out;
		if (p->state == SUSS_PACING)
			stop_pacing(sk);
		stl_ss_log(sk, p->generation, SUSS_EXIT, p->round, EXIT_LOSS, p->round_min_us, min_rtt(sk), p->jumps);
		p->state = SUSS_DONE;
	}
	return base_ssthresh(sk, base);
}

#define SUSS_OPS                                                                       \
	init, suss_init, ssthresh, suss_ssthresh, cong_avoid, suss_cong_avoid,        \
	set_state, hsoff_set_state, cwnd_event, base_cwnd_event, pkts_acked, suss_pkts_acked, \
	min_tso_segs, suss_min_tso_segs, undo_cwnd, base_undo_cwnd

STL_CC(suss, STL_CUBIC, SUSS_OPS);
