// SPDX-License-Identifier: GPL-2.0
/* TCP Fast Start (Padmanabhan & Katz, Globecom 1998, §3.3) over the kernel's Reno (the
 * paper's NewReno), the congestion control fs:
 *   - cache (§3.3.2): on every ACK that may open the window (congestion avoidance or
 *     slow start, never during recovery) the window just delivered is remembered — per
 *     connection, and per (source, destination) in stl_fs_cache for new connections;
 *   - restart (§3.3.1): when the connection sends after an idle period longer than its
 *     RTO (CA_EVENT_TX_START with nothing in flight), or a new connection to a cached
 *     destination sends its first data, cwnd = the cached window, halved if it was in slow
 *     start, minus one segment in congestion avoidance; ssthresh as cached (srtt and
 *     rttvar are the connection's own, or the kernel's per-destination metrics);
 *   - clocking out (§3.3.3): that window is paced at cwnd / srtt — maxburst-sized bursts
 *     maxburst·srtt/cwnd apart have this average; the kernel's pacer releases one or two
 *     segments at a time, never more than maxburst — until the first ACK of new data
 *     brings ACK clocking back; then pacing stops;
 *   - drop priority (§3.3.1, with STL_FS_PDROP): the fast start packets except the first
 *     carry a low-priority DSCP (IP_TOS set after the first one left, cleared when the
 *     initial window is out or the first ACK arrives);
 *   - quick recovery (§3.3.4, with STL_FS_FLR): the sock_ops program gives the socket a
 *     fine-grained RTO floor, so its timeout is srtt + 4·rttvar; when a fast start packet
 *     other than the first is the earliest one lost, ssthresh is kept (no penalty) and
 *     the kernel's loss recovery (cwnd 1 and slow start after a timeout) goes on from it;
 *   - recovery from multiple losses (§3.3.4, built with STL_FS_GBN, faststart_gbn.bpf.c):
 *     without SACK, a partial ACK during fast recovery cuts cwnd to 1 and slow-starts at
 *     once, go-back-N from that ACK, through the kfunc of the kernel module
 *     hosts/kmod/stl_fs_gbn.c (the kernel's own loss entry; BPF has no way into it).
 *
 * The settings arrive in the socket's mark, set by the sock_ops program just before
 * TCP_CONGESTION, so init reads it (packed by hosts/implementations/faststart.py):
 *   STL_FS_MARK_TAG | generation << 16 | dscp << 8 | flags.
 * The generation changes with every install: cache entries of an earlier run never match.
 * Its state fills the private area from the start: Reno, its base, keeps none there.
 */
#include "stl_cc.h"

#define STL_FS_MARK_TAG 0x46000000u  /* "F" */
#define STL_FS_MARK_MASK 0xff000000u
#define STL_FS_PDROP (1u << 0)       /* mark fast start packets (all but the first) low priority */
#define STL_FS_FLR (1u << 1)         /* quick recovery: fine reset timer, no penalty for their loss */

#define SOL_IP 0
#define IP_TOS 1
#define FS_IDLE 0
#define FS_ACTIVE 1
#define FS_DONE 2

struct fs_key {
	u32 saddr;
	u32 daddr;
	u32 generation;   /* from the socket's mark: one install's entries only */
};

struct fs_cached {
	u32 cwnd;
	u32 ssthresh;
	u32 in_ss;
	u32 updates;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct fs_key);
	__type(value, struct fs_cached);
} stl_fs_cache SEC(".maps");

struct fs_priv {
	u32 good_cwnd;    /* the most recent window delivered without loss */
	u32 good_ssthresh;
	u32 fs_first_end; /* sequence after the first fast start packet (sent unmarked) */
	u32 fs_end;       /* sequence after the initial window of the fast start */
	u8 good_in_ss;
	u8 phase;
	u8 flags;         /* STL_FS_PDROP, STL_FS_FLR */
	u8 dscp;
	u8 marking;       /* IP_TOS is set to the low-priority DSCP */
	u8 failed;        /* a fast start packet was lost */
	u8 starts;        /* fast starts on this connection */
	u8 gbn_entered;   /* this ACK entered go-back-N: cwnd stays 1 until the next one */
};
STL_CA_PRIV_FITS(struct fs_priv);

static __always_inline struct fs_priv *fs(struct sock *sk)
{
	return STL_CA_PRIV(struct fs_priv, sk);
}

static __always_inline struct fs_key fs_key_of(struct sock *sk)
{
	struct fs_key key = {.saddr = sk->__sk_common.skc_rcv_saddr, .daddr = sk->__sk_common.skc_daddr,
			     .generation = (sk->sk_mark >> 16) & 0xff};

	return key;
}

static __always_inline void fs_set_tos(struct sock *sk, int tos)
{
	bpf_setsockopt(sk, SOL_IP, IP_TOS, &tos, sizeof(tos));
}

static __always_inline void fs_stop(struct sock *sk)
{
	struct fs_priv *p = fs(sk);

	if (p->phase == FS_ACTIVE) {
		p->phase = FS_DONE;
		sk->sk_pacing_status = SK_PACING_NONE;
	}
	if (p->marking) {
		fs_set_tos(sk, 0);
		p->marking = 0;
	}
}

static __always_inline void fs_init(struct sock *sk, int base)
{
	struct fs_priv *p = fs(sk);
	struct fs_key key = fs_key_of(sk);
	struct fs_cached *c;
	u32 mark = sk->sk_mark;

	__builtin_memset(p, 0, sizeof(*p));
	if ((mark & STL_FS_MARK_MASK) == STL_FS_MARK_TAG) {
		p->flags = mark & 0xff;
		p->dscp = (mark >> 8) & 0x3f;
	}
	c = bpf_map_lookup_elem(&stl_fs_cache, &key);
	if (c && c->cwnd) {              /* a new connection to a cached destination */
		p->good_cwnd = c->cwnd;
		p->good_ssthresh = c->ssthresh;
		p->good_in_ss = c->in_ss;
	}
}

/* The restart window of §3.3.2 from what was delivered last. */
static __always_inline u32 fs_window(struct fs_priv *p)
{
	u32 w = p->good_in_ss ? p->good_cwnd >> 1 : p->good_cwnd - 1;

	return w < 2 ? 2 : w;
}

static __always_inline void fs_cwnd_event(struct sock *sk, enum tcp_ca_event ev, int base)
{
	struct tcp_sock *tp = tcp(sk);
	struct fs_priv *p = fs(sk);
	u32 idle, w, mss;

	/* TX_START comes whenever nothing is in flight, also when a timeout has marked the
	 * whole flight lost and its first retransmission goes out. Only a connection with
	 * nothing unacknowledged is idle (the kernel's own restart rule asks the same):
	 * a timeout must lead to its loss recovery, never to another fast start. */
	if (ev != CA_EVENT_TX_START || !p->good_cwnd || tp->packets_out)
		return;
	/* lsndtime is still the previous send: the idle time, as the kernel's own restart
	 * rule measures it (tcp_slow_start_after_idle_check). A new connection's first data
	 * starts from the cache as well. */
	idle = (u32)bpf_jiffies64() - tp->lsndtime;
	if (tp->data_segs_out && idle <= ((struct inet_connection_sock *)sk)->icsk_rto)
		return;
	w = fs_window(p);
	if (w > tp->snd_cwnd_clamp)
		w = tp->snd_cwnd_clamp;
	mss = tp->mss_cache ? tp->mss_cache : 536;
	tp->snd_cwnd = w;
	tp->snd_cwnd_cnt = 0;
	if (p->good_ssthresh)
		tp->snd_ssthresh = p->good_ssthresh;
	/* This first packet is being transmitted now (snd_nxt is its sequence). */
	p->fs_first_end = tp->snd_nxt + mss;
	p->fs_end = tp->snd_nxt + w * mss;
	p->phase = FS_ACTIVE;
	p->failed = 0;
	p->starts++;
	start_pacing(sk, pace_rate(tp, w, 1, 1));
}

/* Called before every transmit attempt (tcp_write_xmit): the hook where the marking of
 * the fast start packets after the first is switched on and, once the initial window is
 * out, off again. */
static __always_inline u32 fs_min_tso_segs(struct sock *sk, int base)
{
	struct tcp_sock *tp = tcp(sk);
	struct fs_priv *p = fs(sk);

	if (p->phase == FS_ACTIVE && (p->flags & STL_FS_PDROP)) {
		if (!p->marking && (s32)(tp->snd_nxt - p->fs_first_end) >= 0 &&
		    (s32)(tp->snd_nxt - p->fs_end) < 0) {
			fs_set_tos(sk, p->dscp << 2);
			p->marking = 1;
		} else if (p->marking && (s32)(tp->snd_nxt - p->fs_end) >= 0) {
			fs_set_tos(sk, 0);
			p->marking = 0;
		}
	}
	return 2;
}

#ifdef STL_FS_GBN
extern int stl_fs_gbn_enter_loss(struct sock *sk) __ksym;

/* Partial ACKs that entered go-back-N, per node (its network namespace's cookie): what a
 * run reads back (faststart.py counters), whoever else uses the module meanwhile. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, u64);
	__type(value, u64);
} stl_fs_gbn_n SEC(".maps");          /* a map name holds 15 characters */

static __always_inline void fs_gbn_count(struct sock *sk)
{
	u64 cookie = sk->__sk_common.skc_net.net->net_cookie, one = 1, *n;

	n = bpf_map_lookup_elem(&stl_fs_gbn_n, &cookie);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&stl_fs_gbn_n, &cookie, &one, BPF_NOEXIST);
}
#endif

static __always_inline void fs_pkts_acked(struct sock *sk, const struct ack_sample *sample, int base)
{
	/* The first ACK of new data: ACK clocking has set in, the fast start phase is over. */
	if (fs(sk)->phase == FS_ACTIVE && sample->pkts_acked > 0)
		fs_stop(sk);
#ifdef STL_FS_GBN
	/* Recovery from multiple losses: an ACK of new data in fast recovery that leaves
	 * snd_una short of the recovery point is a partial ACK. pkts_acked comes last in the
	 * ACK's bookkeeping, so the loss entry sees it complete; the module checks the
	 * state again (and that SACK is off) and changes nothing where the rule does not
	 * apply. */
	if (sample->pkts_acked > 0 &&
	    ((struct inet_connection_sock *)sk)->icsk_ca_state == TCP_CA_Recovery &&
	    stl_fs_gbn_enter_loss(sk) == 0) {
		fs(sk)->gbn_entered = 1;
		fs_gbn_count(sk);
	}
#endif
}

static __always_inline void fs_cong_avoid(struct sock *sk, u32 ack, u32 acked, int base)
{
	struct tcp_sock *tp = tcp(sk);
	struct fs_priv *p = fs(sk);
	struct fs_key key = fs_key_of(sk);
	struct fs_cached c = {};

	/* The ACK that entered go-back-N is not one slow start counts: cwnd is 1 from it. */
	if (p->gbn_entered) {
		p->gbn_entered = 0;
		return;
	}
	base_cong_avoid(sk, ack, acked, base);
	/* Only called while the window may open: no loss outstanding, so the window that
	 * was just delivered is a good one. */
	p->good_cwnd = tp->snd_cwnd;
	p->good_ssthresh = tp->snd_ssthresh;
	p->good_in_ss = tp->snd_cwnd < tp->snd_ssthresh;
	c.cwnd = p->good_cwnd;
	c.ssthresh = p->good_ssthresh;
	c.in_ss = p->good_in_ss;
	bpf_map_update_elem(&stl_fs_cache, &key, &c, BPF_ANY);
}

/* Is the earliest unacknowledged segment a fast start packet other than the first? */
static __always_inline int fs_packet_lost(struct sock *sk)
{
	struct tcp_sock *tp = tcp(sk);
	struct fs_priv *p = fs(sk);

	if (!p->starts)
		return 0;
	return (s32)(tp->snd_una - p->fs_first_end) >= 0 && (s32)(tp->snd_una - p->fs_end) < 0;
}

static __always_inline u32 fs_ssthresh(struct sock *sk, int base)
{
	struct tcp_sock *tp = tcp(sk);
	struct fs_priv *p = fs(sk);

	if ((p->flags & STL_FS_FLR) && fs_packet_lost(sk)) {
		/* Slow start without penalty: the optimistic window was wrong, the path is not
		 * known to be congested; keep ssthresh. */
		p->failed = 1;
		fs_stop(sk);
		return tp->snd_ssthresh > 2 ? tp->snd_ssthresh : 2;
	}
	fs_stop(sk);
	return base_ssthresh(sk, base);
}

#ifdef STL_FS_GBN
#define FS_CC(...) STL_CC(fsgbn, __VA_ARGS__)
#else
#define FS_CC(...) STL_CC(fs, __VA_ARGS__)
#endif
FS_CC(STL_RENO,
       init, fs_init, ssthresh, fs_ssthresh, cong_avoid, fs_cong_avoid, cwnd_event, fs_cwnd_event,
       pkts_acked, fs_pkts_acked, min_tso_segs, fs_min_tso_segs, undo_cwnd, base_undo_cwnd);
