/* The private state of startlab's congestion controls that size and pace a round of their
 * own (Jump Start, Quick-Start), after the base algorithm's; shared with the programs that
 * read it from the socket (the Quick-Start tc sender reads a connection's restarts). */
#ifndef STL_CA_PRIV_H
#define STL_CA_PRIV_H

enum stl_round { ROUND_WAITING = 0, ROUND_ACTIVE, ROUND_DONE };

struct stl_round_priv {
	struct bictcp cubic; /* the kernel CUBIC's state (unused under Reno) */
	u32 window;          /* segments admitted in the first round (Jump Start's D, Quick-Start's Q) */
	u32 round_high;      /* snd_nxt when the round ended: the end of its flight */
	u8 phase;
	u8 round_loss;       /* a segment of the round was lost ... */
	u8 round_cut;        /* ... and the scheme's end-of-recovery response was applied */
	u8 last_state;       /* the CA state before the current set_state call */
};
/* Quick-Start's (quickstart.bpf.c): the round, then what its requests after idle need. */
struct stl_qs_priv {
	struct stl_round_priv round;
	u8 restarts;      /* counts CA_EVENT_CWND_RESTARTs 1..127 in turn (0: none yet); each new
			   * value asks for a request, and names its approval in the mark */
	u8 applied;       /* id of the last approval applied (from the socket's mark) */
	u8 restart_round; /* the paced round follows an approval after idle */
	u8 restart_flight; /* a restart's first flight is out and none of it acknowledged yet:
			    * its first packet must be a single segment to carry the request */
};

#endif
