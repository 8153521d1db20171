// SPDX-License-Identifier: GPL-2.0
/* startlab's per-connection hooks (attached once per emulation instance to the
 * cgroup v2 root, so they run for every namespace on the machine).
 *
 * Only namespaces whose netns cookie is a key of stl_nodes are touched: the
 * loader writes one entry per installed node. Everything else returns at once.
 *
 *  - Blitzstart client: writes the bandwidth hint option on its SYNs.
 *  - Blitzstart server: saves the SYN of its listeners, and when a connection is
 *    accepted reads the hint, sets cwnd = hint x handshake RTT and hands the socket
 *    to the Blitzstart congestion control (which sets ssthresh and the pacing).
 *  - Jump Start server: gives accepted sockets the Jump Start congestion control and
 *    a send buffer large enough that the whole response can be queued before the
 *    first segment leaves (D is what is queued then).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "stl_common.h"

#define SOL_SOCKET 1
#define SO_SNDBUF 7
#define SOL_TCP 6
#define TCP_CONGESTION 13
#define TCP_SAVE_SYN 27
#define TCPHDR_SYN 0x02
#define TCPHDR_ACK 0x10
#define ENOMSG 42

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u64); /* netns cookie */
	__type(value, struct stl_node_cfg);
} stl_nodes SEC(".maps");

static __always_inline int is_syn(struct bpf_sock_ops *skops)
{
	return (skops->skb_tcp_flags & (TCPHDR_SYN | TCPHDR_ACK)) == TCPHDR_SYN;
}

static __always_inline void client_ops(struct bpf_sock_ops *skops, struct stl_node_cfg *cfg)
{
	__u8 opt[STL_OPT_LEN] = {};
	__u32 hint;

	switch (skops->op) {
	case BPF_SOCK_OPS_TCP_CONNECT_CB:
		bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags |
					  BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG);
		break;
	case BPF_SOCK_OPS_HDR_OPT_LEN_CB:
		if (is_syn(skops) && bpf_reserve_hdr_opt(skops, STL_OPT_LEN, 0))
			__sync_fetch_and_add(&cfg->errors, 1);
		break;
	case BPF_SOCK_OPS_WRITE_HDR_OPT_CB:
		if (!is_syn(skops))
			break;
		hint = bpf_htonl(cfg->hint_kbps);
		opt[0] = STL_OPT_KIND;
		opt[1] = STL_OPT_LEN;
		opt[2] = STL_OPT_EXID >> 8;
		opt[3] = STL_OPT_EXID & 0xff;
		__builtin_memcpy(&opt[4], &hint, 4);
		opt[8] = cfg->tech & 0xff;
		if (bpf_store_hdr_opt(skops, opt, STL_OPT_LEN, 0))
			__sync_fetch_and_add(&cfg->errors, 1);
		else
			__sync_fetch_and_add(&cfg->syns_hinted, 1);
		break;
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
		/* The option belongs on the SYN only: stop being called per packet. */
		bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags &
					  ~BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG);
		break;
	}
}

/* cwnd in segments for `hint_kbps` over `rtt_us`: the bandwidth-delay product. */
static __always_inline __u32 bdp_segments(__u32 hint_kbps, __u32 rtt_us, __u32 mss)
{
	__u64 bytes = (__u64)hint_kbps * rtt_us / 8000; /* kbit/s * us / 8000 = bytes */
	__u64 segs = (bytes + mss - 1) / mss;

	if (segs < 2)
		segs = 2;
	if (segs > 65535)
		segs = 65535;
	return segs;
}

static __always_inline void blitz_accept(struct bpf_sock_ops *skops, struct stl_node_cfg *cfg)
{
	__u8 opt[STL_OPT_LEN] = {STL_OPT_KIND, 4, STL_OPT_EXID >> 8, STL_OPT_EXID & 0xff};
	__u32 hint, rtt_us, mss, cwnd;
	int ret;

	ret = bpf_load_hdr_opt(skops, opt, sizeof(opt), BPF_LOAD_HDR_OPT_TCP_SYN);
	if (ret == -ENOMSG)
		return; /* a client without the hint: the kernel's default start */
	if (ret < STL_OPT_LEN || opt[1] != STL_OPT_LEN) {
		__sync_fetch_and_add(&cfg->errors, 1);
		return;
	}
	__builtin_memcpy(&hint, &opt[4], 4);
	hint = bpf_ntohl(hint);
	if (!hint)
		return;
	rtt_us = skops->srtt_us >> 3; /* the SYN-ACK's RTT sample: the only one yet */
	mss = skops->mss_cache;
	if (!rtt_us || !mss) {
		__sync_fetch_and_add(&cfg->errors, 1);
		return;
	}
	cwnd = bdp_segments(hint, rtt_us, mss);
	__sync_fetch_and_add(&cfg->hints_seen, 1);
	cfg->last_hint_kbps = hint;
	cfg->last_rtt_us = rtt_us;
	cfg->last_cwnd = cwnd;
	/* cwnd first: the congestion control's init reads it (ssthresh = cwnd). */
	if (bpf_setsockopt(skops, SOL_TCP, TCP_BPF_IW, &cwnd, sizeof(cwnd)) ||
	    bpf_setsockopt(skops, SOL_TCP, TCP_CONGESTION, cfg->cc, STL_CC_NAME_LEN))
		__sync_fetch_and_add(&cfg->errors, 1);
	else
		__sync_fetch_and_add(&cfg->cc_set, 1);
}

static __always_inline void js_accept(struct bpf_sock_ops *skops, struct stl_node_cfg *cfg)
{
	int sndbuf = cfg->sndbuf;

	if (sndbuf && bpf_setsockopt(skops, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)))
		__sync_fetch_and_add(&cfg->errors, 1);
	if (bpf_setsockopt(skops, SOL_TCP, TCP_CONGESTION, cfg->cc, STL_CC_NAME_LEN))
		__sync_fetch_and_add(&cfg->errors, 1);
	else
		__sync_fetch_and_add(&cfg->cc_set, 1);
}

SEC("sockops")
int stl_sockops(struct bpf_sock_ops *skops)
{
	__u64 cookie = bpf_get_netns_cookie(skops);
	struct stl_node_cfg *cfg = bpf_map_lookup_elem(&stl_nodes, &cookie);
	int one = 1;

	if (!cfg)
		return 1;
	if (cfg->flags & STL_CLIENT_HINT)
		client_ops(skops, cfg);
	if (skops->op == BPF_SOCK_OPS_TCP_LISTEN_CB && (cfg->flags & STL_SERVER_BLITZ)) {
		if (bpf_setsockopt(skops, SOL_TCP, TCP_SAVE_SYN, &one, sizeof(one)))
			__sync_fetch_and_add(&cfg->errors, 1);
	}
	if (skops->op == BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB) {
		if (cfg->flags & STL_SERVER_BLITZ)
			blitz_accept(skops, cfg);
		else if (cfg->flags & STL_SERVER_JS)
			js_accept(skops, cfg);
	}
	return 1;
}

char LICENSE[] SEC("license") = "GPL";
