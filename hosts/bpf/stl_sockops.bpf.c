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
 *  - A server of a scheme that only hands accepted sockets its congestion control
 *    (STL_SERVER_CC: Jump Start, Fast Start, ...): the socket options the node's entry
 *    lists, in order (Jump Start's send buffer, large enough that the whole response
 *    can be queued before the first segment leaves; Fast Start's settings in the
 *    socket's mark, which its congestion control's init reads, and with quick
 *    recovery a fine-grained RTO floor), then the congestion control cfg.cc.
 *  - Paced kernel TCP: gives every connection a maximum pacing rate, which turns on the
 *    kernel's internal pacing (at tcp_pacing_ss_ratio / tcp_pacing_ca_ratio of cwnd/RTT;
 *    the cap itself, ~34 Gbit/s, never binds).
 *  - Quick-Start client: echoes a request a segment arrived with (recorded by the tc
 *    program stl_qs_receiver: on the SYN-ACK, or on the first data after idle) in TCP
 *    option 27 on its next ACK (the handshake's, or the one that acknowledges it).
 *  - Quick-Start server: checks the handshake's echo against the request its tc program
 *    stl_qs_sender put on the SYN-ACK (rate not above the request, TTL diff, the nonce
 *    bits of the steps at or below the echoed rate: RFC 4782 §4.3); if it passes,
 *    cwnd = rate x RTT x MSS/(MSS+H) (Equation 1 of §4.6.1, the RTT being the SYN-ACK's
 *    sample). Every accepted socket gets the Quick-Start congestion control cfg.cc, and a
 *    mark that tells it whether to pace that window at the approved rate or slow-start
 *    from the namespace's initial window. Later ACKs with option 27 are parsed: an echo
 *    of a request sent after idle, approved, marks the socket with its window, which the
 *    congestion control applies (quickstart.bpf.c). Every outcome, approved or not, owes
 *    a Report of Approved Rate (stl_qs_reports), which the tc sender puts on the next packet.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "stl_common.h"
#include "stl_qs_maps.h"

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

/* STL_SERVER_CC: the node's socket options, then its congestion control. */
static __always_inline void cc_accept(struct bpf_sock_ops *skops, struct stl_node_cfg *cfg)
{
	__u32 i, n = cfg->n_accept_opts;
	int value;

	for (i = 0; i < STL_ACCEPT_OPTS && i < n; i++) {
		value = cfg->accept_opts[i].value;
		if (bpf_setsockopt(skops, cfg->accept_opts[i].level, cfg->accept_opts[i].optname,
				   &value, sizeof(value)))
			__sync_fetch_and_add(&cfg->errors, 1);
	}
	if (bpf_setsockopt(skops, SOL_TCP, TCP_CONGESTION, cfg->cc, STL_CC_NAME_LEN))
		__sync_fetch_and_add(&cfg->errors, 1);
	else
		__sync_fetch_and_add(&cfg->cc_set, 1);
}

/* The connection's key in the Quick-Start maps, from the client's or the server's side.
 * remote_port holds the network-order port in its upper 16 bits (a sock_ops quirk). */
static __always_inline void qs_key(struct bpf_sock_ops *skops, struct stl_qs_key *key, int is_client)
{
	__u16 local = bpf_htons((__u16)skops->local_port);
	__u16 remote = (__u16)(skops->remote_port >> 16);

	if (is_client) {
		key->client_ip = skops->local_ip4;
		key->server_ip = skops->remote_ip4;
		key->client_port = local;
		key->server_port = remote;
	} else {
		key->client_ip = skops->remote_ip4;
		key->server_ip = skops->local_ip4;
		key->client_port = remote;
		key->server_port = local;
	}
}

static __always_inline void qs_client_ops(struct bpf_sock_ops *skops)
{
	struct stl_qs_key key = {};
	struct stl_qs_req *got;
	struct stl_qs_host *host;
	__u32 ip = skops->local_ip4, word;
	__u8 opt[STL_QS_LEN];

	switch (skops->op) {
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
		/* for the whole connection: a request may arrive on any segment (after idle) */
		bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags |
					  BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG);
		break;
	case BPF_SOCK_OPS_HDR_OPT_LEN_CB:
		if (skops->skb_tcp_flags & TCPHDR_SYN)
			break;
		qs_key(skops, &key, 1);
		if (bpf_map_lookup_elem(&stl_qs_recv, &key))
			bpf_reserve_hdr_opt(skops, STL_QS_LEN, 0);
		break;
	case BPF_SOCK_OPS_WRITE_HDR_OPT_CB:
		if (skops->skb_tcp_flags & TCPHDR_SYN)
			break;
		qs_key(skops, &key, 1);
		got = bpf_map_lookup_elem(&stl_qs_recv, &key);
		host = bpf_map_lookup_elem(&stl_qs_hosts, &ip);
		if (!got || !host)
			break;
		word = bpf_htonl(got->nonce << 2);
		opt[0] = STL_QS_TCPOPT;
		opt[1] = STL_QS_LEN;
		opt[2] = got->rate_code & 15;        /* 4 reserved bits, then the rate */
		opt[3] = got->ttl_diff;
		__builtin_memcpy(&opt[4], &word, 4);
		if (bpf_store_hdr_opt(skops, opt, STL_QS_LEN, 0)) {
			__sync_fetch_and_add(&host->errors, 1);
			break;
		}
		__sync_fetch_and_add(&host->echoes_sent, 1);
		bpf_map_delete_elem(&stl_qs_recv, &key);
		break;
	}
}

/* The client's echo of a request this server sent (`sent`): Equation 1's window in
 * segments if it passes the checks of RFC 4782 §4.3 (rate not above the request, TTL diff,
 * the nonce bits of the steps at or below the echoed rate) with a rate above 0, else 0,
 * counted in `host` either way. */
static __always_inline __u32 qs_check_echo(struct bpf_sock_ops *skops, struct stl_qs_host *host,
					   struct stl_qs_req *sent, __u8 *opt)
{
	__u32 rate = opt[2] & 15, diff = opt[3], nonce, mask, rtt_us, mss, cwnd;
	__u64 win;

	__sync_fetch_and_add(&host->echoes, 1);
	nonce = ((__u32)opt[4] << 22) | ((__u32)opt[5] << 14) | ((__u32)opt[6] << 6) | (opt[7] >> 2);
	mask = (1u << (2 * rate)) - 1;
	if (!rate) {
		__sync_fetch_and_add(&host->rejected, 1);
		return 0;
	}
	if (rate > sent->rate_code || ((nonce ^ sent->nonce) & mask)) {
		__sync_fetch_and_add(&host->nonce_mismatch, 1);
		return 0;
	}
	if (diff != sent->ttl_diff) {
		__sync_fetch_and_add(&host->ttl_mismatch, 1);
		return 0;
	}
	rtt_us = skops->srtt_us >> 3;
	mss = skops->mss_cache;
	if (!rtt_us || !mss) {
		__sync_fetch_and_add(&host->errors, 1);
		return 0;
	}
	/* Equation 1: rate [bit/s] / 8 x RTT x MSS/(MSS+H) bytes, in segments of MSS */
	win = ((40000ULL << rate) * rtt_us + 4000000ULL * (mss + STL_QS_HDR)) /
	      (8000000ULL * (mss + STL_QS_HDR));
	cwnd = win < 2 ? 2 : (win > 65535 ? 65535 : win);
	__sync_fetch_and_add(&host->approved, 1);
	host->last_rate_code = rate;
	host->last_rtt_us = rtt_us;
	host->last_cwnd = cwnd;
	return cwnd;
}

/* The Quick-Start option 27 of the segment being processed: 1 if found, 0 if absent,
 * -1 if malformed (counted as an error). */
static __always_inline int qs_load_echo(struct bpf_sock_ops *skops, struct stl_qs_host *host, __u8 *opt)
{
	int ret;

	opt[0] = STL_QS_TCPOPT;
	opt[1] = 0;
	ret = bpf_load_hdr_opt(skops, opt, STL_QS_LEN, 0);
	if (ret == -ENOMSG)
		return 0;
	if (ret < STL_QS_LEN || opt[1] != STL_QS_LEN) {
		__sync_fetch_and_add(&host->errors, 1);
		return -1;
	}
	return 1;
}

static __always_inline void qs_set_mark(struct bpf_sock_ops *skops, struct stl_qs_host *host, __u32 mark)
{
	if (bpf_setsockopt(skops, SOL_SOCKET, SO_MARK, &mark, sizeof(mark)))
		__sync_fetch_and_add(&host->errors, 1);
}

/* The Report of Approved Rate this outcome owes (RFC 4782 §3.1, §4.4: after every request,
 * approved or not): the approved code, or 0; the tc sender puts it on the next packet. */
static __always_inline void qs_owe_report(struct stl_qs_key *key, struct stl_qs_req *sent, __u32 code)
{
	struct stl_qs_report rep = {.rate_code = code, .nonce = sent->nonce};

	bpf_map_update_elem(&stl_qs_reports, key, &rep, BPF_ANY);
}

/* Every accepted socket of a Quick-Start server gets its congestion control (which sees
 * restarts after idle) and the parsing of option 27 on later ACKs; an approved handshake
 * request also sets Equation 1's window as the initial window. */
static __always_inline void qs_server_accept(struct bpf_sock_ops *skops, struct stl_node_cfg *cfg)
{
	__u8 opt[STL_QS_LEN] = {};
	struct stl_qs_key key = {};
	struct stl_qs_req sent, *found;
	struct stl_qs_host *host;
	__u32 ip = skops->local_ip4, cwnd = 0, mark = STL_QS_MARK(0, 0);

	host = bpf_map_lookup_elem(&stl_qs_hosts, &ip);
	if (!host)
		return;
	qs_key(skops, &key, 0);
	found = bpf_map_lookup_elem(&stl_qs_sent, &key);
	if (found) {
		sent = *found;
		bpf_map_delete_elem(&stl_qs_sent, &key);
		switch (qs_load_echo(skops, host, opt)) {
		case 0:
			__sync_fetch_and_add(&host->no_echo, 1);
			break;
		case 1:
			cwnd = qs_check_echo(skops, host, &sent, opt);
			break;
		}
		qs_owe_report(&key, &sent, cwnd ? opt[2] & 15 : 0);
	}
	if (cwnd) {
		mark = STL_QS_MARK(0, cwnd) | STL_QS_MARK_START;
		if (bpf_setsockopt(skops, SOL_TCP, TCP_BPF_IW, &cwnd, sizeof(cwnd)))
			__sync_fetch_and_add(&host->errors, 1);
	}
	qs_set_mark(skops, host, mark);
	bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags |
				  BPF_SOCK_OPS_PARSE_UNKNOWN_HDR_OPT_CB_FLAG);
	if (bpf_setsockopt(skops, SOL_TCP, TCP_CONGESTION, cfg->cc, STL_CC_NAME_LEN))
		__sync_fetch_and_add(&host->errors, 1);
	else
		__sync_fetch_and_add(&cfg->cc_set, 1);
}

/* An ACK with option 27 on an established connection: the echo of a request sent after
 * idle (stl_qs_sender recorded it with its restart id). Approved, the socket is marked
 * with that id and Equation 1's window, which its congestion control applies on this ACK. */
static __always_inline void qs_server_parse(struct bpf_sock_ops *skops)
{
	__u8 opt[STL_QS_LEN] = {};
	struct stl_qs_key key = {};
	struct stl_qs_req sent, *found;
	struct stl_qs_host *host;
	__u32 ip = skops->local_ip4, cwnd, cap;
	__u64 rate;

	host = bpf_map_lookup_elem(&stl_qs_hosts, &ip);
	if (!host)
		return;
	qs_key(skops, &key, 0);
	found = bpf_map_lookup_elem(&stl_qs_sent, &key);
	if (!found || !found->restart)
		return;                          /* no request after idle outstanding */
	if (qs_load_echo(skops, host, opt) != 1)
		return;                          /* an ACK without the echo: keep waiting for it */
	sent = *found;
	bpf_map_delete_elem(&stl_qs_sent, &key);
	cwnd = qs_check_echo(skops, host, &sent, opt);
	qs_owe_report(&key, &sent, cwnd ? opt[2] & 15 : 0);
	if (!cwnd)
		return;
	__sync_fetch_and_add(&host->restart_approved, 1);
	/* The kernel recomputes the pacing rate on every ACK (ratio x cwnd / RTT), and ACKs of
	 * the data sent before the approval arrive during its paced round: capped at Q / RTT,
	 * the rate stays the approved one. The congestion control lifts the cap when the round
	 * ends, or at once when it does not apply the approval (qs_apply_approval). */
	rate = (__u64)cwnd * skops->mss_cache * 1000000ULL / (skops->srtt_us >> 3);
	cap = rate > STL_PACING_CAP ? STL_PACING_CAP : rate;   /* bytes/s, a 32-bit socket option */
	if (bpf_setsockopt(skops, SOL_SOCKET, SO_MAX_PACING_RATE, &cap, sizeof(cap)))
		__sync_fetch_and_add(&host->errors, 1);
	qs_set_mark(skops, host, STL_QS_MARK(sent.restart, cwnd));
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
	if (cfg->flags & STL_CLIENT_QS)
		qs_client_ops(skops);
	if (skops->op == BPF_SOCK_OPS_TCP_LISTEN_CB && (cfg->flags & STL_SERVER_BLITZ)) {
		if (bpf_setsockopt(skops, SOL_TCP, TCP_SAVE_SYN, &one, sizeof(one)))
			__sync_fetch_and_add(&cfg->errors, 1);
	}
	if ((cfg->flags & STL_PACE) && (skops->op == BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB ||
					skops->op == BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB)) {
		__u32 cap = STL_PACING_CAP;

		if (bpf_setsockopt(skops, SOL_SOCKET, SO_MAX_PACING_RATE, &cap, sizeof(cap)))
			__sync_fetch_and_add(&cfg->errors, 1);
		else
			__sync_fetch_and_add(&cfg->cc_set, 1);
	}
	if ((cfg->flags & STL_CWND_CLAMP) && (skops->op == BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB ||
					      skops->op == BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB)) {
		/* A window-limited sender (the papers' "maximum window"): asked of the
		 * receiver with TCP_WINDOW_CLAMP it is not held, the sender holds it exactly. */
		int clamp = cfg->cwnd_clamp;

		if (bpf_setsockopt(skops, SOL_TCP, TCP_BPF_SNDCWND_CLAMP, &clamp, sizeof(clamp)))
			__sync_fetch_and_add(&cfg->errors, 1);
		else
			__sync_fetch_and_add(&cfg->cc_set, 1);
	}
	if (skops->op == BPF_SOCK_OPS_PARSE_HDR_OPT_CB && (cfg->flags & STL_SERVER_QS))
		qs_server_parse(skops);
	if (skops->op == BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB) {
		if (cfg->flags & STL_SERVER_BLITZ)
			blitz_accept(skops, cfg);
		else if (cfg->flags & STL_SERVER_QS)
			qs_server_accept(skops, cfg);
		else if (cfg->flags & STL_SERVER_CC)
			cc_accept(skops, cfg);
	}
	return 1;
}

char LICENSE[] SEC("license") = "GPL";
