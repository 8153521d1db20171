/* What the slow-start schemes built on the kernel's CUBIC (Rapid Start, SEARCH, SUSS) share:
 * settings per install and a per-connection log of the events that define each scheme.
 *
 * The install's generation travels in the accepted socket's mark beside the scheme's tag
 * (hosts/implementations/per_install.py); the configuration map holds that generation's
 * settings, a struct the scheme names in STL_SS_CONFIG before including this header.
 * The log is keyed by the connection and the generation, as per_install.py reads it: a
 * count, the MSS, then STL_SS_EVENTS events of one shape, whose four values each scheme
 * names in its Python module.
 */
#ifndef STL_SSLOG_H
#define STL_SSLOG_H

#include <bpf/bpf_endian.h>
#include <bpf/bpf_core_read.h>

#ifndef STL_SS_CONFIG
#error "define STL_SS_CONFIG (the scheme's configuration struct) before including stl_sslog.h"
#endif

#define STL_SS_EVENTS 48
#define STL_SS_MARK_MASK 0xff000000u
#define STL_SS_NO_RTT 0xffffffffu
#define STL_SS_INFINITE_SSTHRESH 0x7fffffffu /* the kernel's TCP_INFINITE_SSTHRESH */

struct stl_ss_conn {
	u32 saddr;
	u32 daddr;
	u16 sport;
	u16 dport;
	u32 generation;
};

struct stl_ss_event {
	u64 t_ns;
	u32 what;       /* the scheme's event code */
	u32 round;
	u32 cwnd;
	u32 ssthresh;
	u32 v[4];       /* the scheme's values */
};

struct stl_ss_log {
	u32 n;
	u32 mss;
	struct stl_ss_event ev[STL_SS_EVENTS];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, u32);
	__type(value, STL_SS_CONFIG);
} stl_ss_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct stl_ss_conn);
	__type(value, struct stl_ss_log);
} stl_ss_events SEC(".maps");

struct stl_ss_log stl_ss_empty_log = {};

/* The install's generation from the socket's mark (0: not marked with `tag`). */
static __always_inline u8 stl_ss_generation(struct sock *sk, u32 tag)
{
	u32 mark = sk->sk_mark;

	return (mark & STL_SS_MARK_MASK) == tag ? (mark >> 16) & 0xff : 0;
}

static __always_inline STL_SS_CONFIG *stl_ss_config_of(u8 generation)
{
	u32 key = generation;

	return bpf_map_lookup_elem(&stl_ss_config, &key);
}

/* The connection's slow start has not ended yet (ssthresh never set). */
static __always_inline int stl_ss_initial(struct tcp_sock *tp)
{
	return tp->snd_ssthresh >= STL_SS_INFINITE_SSTHRESH;
}

static __always_inline void stl_ss_log(struct sock *sk, u8 generation, u32 what, u32 round,
				       u32 v0, u32 v1, u32 v2, u32 v3)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	struct stl_ss_conn key = {.saddr = sk->__sk_common.skc_rcv_saddr, .daddr = sk->__sk_common.skc_daddr,
				  .sport = sk->__sk_common.skc_num, .dport = bpf_ntohs(sk->__sk_common.skc_dport),
				  .generation = generation};
	struct stl_ss_log *log;
	struct stl_ss_event *e;
	u32 n;

	log = bpf_map_lookup_elem(&stl_ss_events, &key);
	if (!log) {
		bpf_map_update_elem(&stl_ss_events, &key, &stl_ss_empty_log, BPF_NOEXIST);
		log = bpf_map_lookup_elem(&stl_ss_events, &key);
	}
	if (!log)
		return;
	n = log->n;
	log->mss = tp->mss_cache;
	if (n >= STL_SS_EVENTS)
		return;
	e = &log->ev[n];
	e->t_ns = bpf_ktime_get_ns();
	e->what = what;
	e->round = round;
	e->cwnd = tp->snd_cwnd;
	e->ssthresh = tp->snd_ssthresh;
	e->v[0] = v0;
	e->v[1] = v1;
	e->v[2] = v2;
	e->v[3] = v3;
	log->n = n + 1;
}

#endif
