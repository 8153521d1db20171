/* Definitions shared by startlab's BPF programs and mirrored in hosts/bpf/loader.py.
 *
 * The layout of struct stl_node_cfg is the value of the per-instance map that tells
 * the sock_ops program what to do in which network namespace; the Python loader
 * packs the same layout, so change both together.
 */
#ifndef STL_COMMON_H
#define STL_COMMON_H

/* Blitzstart hint: RFC 6994 shared experimental option (kind 253) with a 16-bit
 * experiment identifier, then the bandwidth hint in kbit/s (32 bits, network order),
 * the access-technology code (8 bits) and one reserved byte: 10 bytes in all. */
#define STL_OPT_KIND 253
#define STL_OPT_EXID 0x5354 /* "ST": not in the IANA ExID registry */
#define STL_OPT_LEN 10

/* stl_node_cfg.flags */
#define STL_CLIENT_HINT (1u << 0) /* write the hint option on our SYNs */
#define STL_SERVER_BLITZ (1u << 1) /* read the hint from SYNs, blitz-start the socket */
#define STL_SERVER_CC (1u << 2)    /* accepted sockets get cfg.accept_opts, then cfg.cc */
#define STL_CLIENT_QS (1u << 3)    /* echo Quick-Start requests in TCP option 27 */
#define STL_SERVER_QS (1u << 4)    /* check echoes, start approved sockets with cfg.cc */
#define STL_PACE (1u << 5)         /* kernel pacing for every connection (linux-tcp pacing) */
#define STL_CWND_CLAMP (1u << 6)   /* every connection's cwnd is clamped to cfg.cwnd_clamp segments */

#define STL_CC_NAME_LEN 16

/* Socket option numbers the programs pass to bpf_setsockopt (the kernel's uapi values:
 * vmlinux.h carries types, not macros). */
#define SOL_SOCKET 1
#define SOL_TCP 6
#define SO_MARK 36
#define SO_MAX_PACING_RATE 47
/* A 32-bit ~0 means "unlimited" (no pacing) to the kernel; one less is a real cap. */
#define STL_PACING_CAP 0xfffffffeu

/* A socket option set on accepted sockets (bpf_setsockopt with an int value). */
struct stl_sockopt {
	__u32 level;
	__u32 optname;
	__s32 value;
};
#define STL_ACCEPT_OPTS 4

struct stl_node_cfg {
	__u32 flags;
	__u32 hint_kbps;      /* client: the hint to send */
	__u32 tech;           /* client: access-technology code (low 8 bits sent) */
	__u32 cwnd_clamp;     /* with STL_CWND_CLAMP: the sender's largest window, in segments */
	char cc[STL_CC_NAME_LEN]; /* server: congestion control for accepted sockets */
	/* With STL_SERVER_CC: set on accepted sockets in this order before cfg.cc (a send
	 * buffer, a mark the congestion control's init reads, an RTO floor, ...). */
	__u32 n_accept_opts;
	struct stl_sockopt accept_opts[STL_ACCEPT_OPTS];
	/* Written by the program (observability, read by tests and the loader). */
	__u32 syns_hinted;    /* client: SYNs that carried the option */
	__u32 hints_seen;     /* server: accepted sockets whose SYN carried the option */
	__u32 last_hint_kbps; /* server: hint of the last one */
	__u32 last_rtt_us;    /* server: handshake RTT used for it */
	__u32 last_cwnd;      /* server: initial cwnd set for it (segments) */
	__u32 cc_set;         /* server: sockets given cfg.cc */
	__u32 errors;         /* any helper call that failed */
};

/* ---- Quick-Start (RFC 4782; the codec is analysis/quickstart.py) ---- */
#define STL_QS_IPOPT 25        /* IPv4 option type */
#define STL_QS_TCPOPT 27       /* TCP option kind of the response */
#define STL_QS_LEN 8
#define STL_QS_FUNC_REPORT 8  /* the option's function: Report of Approved Rate */
#define STL_QS_HDR 52          /* H of Equation 1: IPv4 + TCP + timestamp option bytes */

/* A Quick-Start server socket's mark, set by the sock_ops program, read by its congestion
 * control (approvals) and seen by the tc sender on its packets (skb->mark): the tag in
 * the top byte, whether the handshake's request was approved, the id of the last
 * approval (0 at the handshake, the restart count after idle) and its window. */
#define STL_QS_MARK_TAG 0x51u                 /* 'Q' */
#define STL_QS_MARK_START (1u << 23)
#define STL_QS_MARK(id, window) ((STL_QS_MARK_TAG << 24) | (((id) & 0x7fu) << 16) | ((window) & 0xffffu))
#define STL_QS_MARK_IS(mark) (((mark) >> 24) == STL_QS_MARK_TAG)
#define STL_QS_MARK_ID(mark) (((mark) >> 16) & 0x7fu)
#define STL_QS_MARK_WINDOW(mark) ((mark) & 0xffffu)

/* One connection, seen from either end (network byte order throughout). */
struct stl_qs_key {
	__u32 client_ip;
	__u32 server_ip;
	__u16 client_port;
	__u16 server_port;
};

/* A request: what the server sent (map stl_qs_sent) or what the client received
 * (map stl_qs_recv); ttl_diff = (IP TTL - QS TTL) mod 256 at either point. */
struct stl_qs_req {
	__u32 rate_code;
	__u32 ttl_diff;
	__u32 nonce;           /* 30 bits */
	__u32 restart;         /* 0: on the SYN-ACK; n: on the first data after the n-th idle restart */
};

/* Per Quick-Start host (key: its IPv4 address), config from the loader, counters from
 * the programs. Packed by hosts/bpf/loader.py (QS_HOST_FORMAT): change both together. */
struct stl_qs_host {
	__u32 rate_code;       /* server: the code it requests */
	__u32 after_idle;      /* server: request again after each restart after idle */
	__u32 requests_sent;   /* server: SYN-ACKs that carried the IP option */
	__u32 echoes;          /* server: handshake ACKs that carried option 27 */
	__u32 approved;        /* server: echoes that passed the checks with rate > 0 */
	__u32 rejected;        /* server: echoes of rate 0 */
	__u32 ttl_mismatch;    /* server: TTL diff differed (a router without Quick-Start) */
	__u32 nonce_mismatch;  /* server: nonce or rate check failed */
	__u32 no_echo;         /* server: handshake completed without an echo */
	__u32 last_rate_code;  /* server: approved code of the last approved connection */
	__u32 last_rtt_us;
	__u32 last_cwnd;       /* server: Equation 1's window for it, segments */
	__u32 requests_seen;   /* client: segments that carried a request (SYN-ACKs, data after idle) */
	__u32 echoes_sent;     /* client: ACKs that carried option 27 */
	__u32 errors;
	__u32 restart_requests; /* server: data segments after idle that carried a request */
	__u32 restart_approved; /* server: their echoes that passed the checks with rate > 0 */
	__u32 reports_sent;    /* server: packets that carried a Report of Approved Rate */
	__u32 reports_zero;    /* server: of them, reports of rate 0 (the request not approved) */
	__u32 reports_gso;     /* server: of them, packets of several segments (each carries a copy) */
};

/* Server side: the Report of Approved Rate a request's outcome owes (RFC 4782 §3.1, §4.4):
 * the approved code, or 0 when the request was denied, failed the checks or went
 * unanswered, with the request's nonce. The next packet of the connection carries it. */
struct stl_qs_report {
	__u32 rate_code;
	__u32 nonce;
};

/* Router, one per egress interface (array map of one entry). The loader writes the
 * config half (QS_ROUTER_FORMAT in loader.py), the programs the rest. */
#define STL_QS_SLOTS 8
#define STL_QS_EWMA 1
#define STL_QS_BUCKETS 64      /* Extreme: what approvals promise, by when it expires */
#define STL_QS_BUCKET_NS (16 * 1000 * 1000ULL)   /* 16 ms: 64 of them look ~1 s ahead */

/* Extreme Quick-Start: one approved request (map stl_qs_approvals, by flow), from the
 * approval to the end of its Quick-Start phase (the RTT after its first packet here). */
struct stl_qs_flow {
	__u64 rate_bps;        /* approved here; lowered by the sender's Report of Approved Rate */
	__u64 left_bps;        /* what it still promises (counted in promise_bps[bucket]) */
	__u64 bucket;          /* the bucket its promise expires with (absolute number) */
	__u64 t_approve;
	__u64 t_first;         /* the flow's first packet after the approval (0: none yet) */
	__u64 rtt_ns;          /* the flow's RTT seen from this router (its handshake) */
	__u64 arrived;         /* bytes of the flow in [t_first, t_first + rtt) */
};

struct stl_qs_router {
	struct bpf_spin_lock lock;
	__u32 method;          /* 0 = peak over n_intervals, STL_QS_EWMA = moving average */
	__u64 capacity_bps;
	__u64 interval_ns;     /* s */
	__u32 n_intervals;     /* N (<= STL_QS_SLOTS - 1) */
	__u32 approval_intervals; /* intervals recent approvals are summed over */
	__u32 thresh_permille; /* qs_thresh x 1000 */
	__u32 ewma_permille;   /* w x 1000 */
	__u64 approval_interval_ns; /* length of those intervals (s unless set apart) */
	__u32 extreme;         /* 1: Extreme Quick-Start (per-flow state) instead of recent approvals */
	__u32 pad;
	/* state */
	__u64 epoch;           /* current interval number (time / interval_ns) */
	__u64 bytes[STL_QS_SLOTS];     /* bytes sent per interval, slot = epoch % SLOTS */
	__u64 aepoch;          /* current approval interval (time / approval_interval_ns) */
	__u64 approved_bps[STL_QS_SLOTS];
	__u64 ewma_bps;
	__u64 promise_bucket[STL_QS_BUCKETS]; /* Extreme: the absolute bucket each slot holds */
	__u64 promise_bps[STL_QS_BUCKETS];    /* Extreme: the promise that expires with it */
	/* counters */
	__u64 requests;
	__u64 approved;
	__u64 reduced;
	__u64 rejected;
	__u64 granted_bps;     /* sum of the rates approved or reduced to */
	__u64 last_util_bps;   /* utilisation estimate used for the last request */
	__u64 reports;         /* Reports of Approved Rate seen */
	__u64 reports_lower;   /* Extreme: reports below this router's approval (rate returned) */
	__u64 reports_untracked; /* Extreme: reports of flows with no approval tracked */
	__u64 returned_bps;    /* Extreme: sum of the rates those reports returned */
	__u64 tracked;         /* Extreme: approvals tracked */
	__u64 tracked_used;    /* Extreme: of them, approvals whose flow sent a packet after */
	__u64 phase_bytes;     /* Extreme: bytes counted in the flows' Quick-Start phases */
	__u64 last_promised_bps; /* approvals counted for the last request (recent or promised) */
	__u64 fin_returned_bps; /* Extreme: promises returned when their flow's server closed */
	__u64 sum_util_bps;    /* the utilisation estimates of all requests (mean: / requests) */
	__u64 sum_promised_bps; /* the approvals counted for all requests (recent or promised) */
};

#endif
