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
#define STL_SERVER_JS (1u << 2)    /* give accepted sockets the Jump Start CC */

#define STL_CC_NAME_LEN 16

struct stl_node_cfg {
	__u32 flags;
	__u32 hint_kbps;      /* client: the hint to send */
	__u32 tech;           /* client: access-technology code (low 8 bits sent) */
	__u32 sndbuf;         /* server: SO_SNDBUF for accepted sockets (0 = kernel's) */
	char cc[STL_CC_NAME_LEN]; /* server: congestion control for accepted sockets */
	/* Written by the program (observability, read by tests and the loader). */
	__u32 syns_hinted;    /* client: SYNs that carried the option */
	__u32 hints_seen;     /* server: accepted sockets whose SYN carried the option */
	__u32 last_hint_kbps; /* server: hint of the last one */
	__u32 last_rtt_us;    /* server: handshake RTT used for it */
	__u32 last_cwnd;      /* server: initial cwnd set for it (segments) */
	__u32 cc_set;         /* server: sockets given cfg.cc */
	__u32 errors;         /* any helper call that failed */
	__u32 pad;
};

#endif
