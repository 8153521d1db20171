// SPDX-License-Identifier: GPL-2.0
/* stl_fs_gbn: TCP Fast Start's multiple-loss heuristic (Padmanabhan & Katz 1998, §3.3.4),
 * the one rule a BPF congestion control cannot carry out alone: without SACK, a partial
 * ACK during fast recovery cuts cwnd to 1 and slow-starts at once, go-back-N from the
 * partial ACK with the rest of the window marked lost, as a timeout does, but without a
 * timeout's penalty (no RTO back-off, ssthresh as fast recovery left it).
 *
 * The mechanism is the kernel's own loss entry, tcp_enter_loss(), called from the
 * congestion control's pkts_acked callback through one kfunc, stl_fs_gbn_enter_loss().
 * pkts_acked is the last thing tcp_clean_rtx_queue() does, so the ACK's bookkeeping is
 * complete; the same tcp_ack() then takes the Loss state's path (tcp_process_loss: every
 * segment lost, cwnd 1) and retransmits the segment at snd_una. Firing the retransmission
 * timer instead (what the kernel does on SACK reneging) would be neither at once (the
 * timer wheel's next jiffy, and tcp_ack re-arms the timer after pkts_acked) nor exact
 * (NewReno retransmits the same segment first, and the timeout backs off the RTO).
 *
 * tcp_enter_loss is not exported to modules. Its address comes from /proc/kallsyms as the
 * parameter enter_loss and is checked here against the kernel's own symbol table
 * (sprint_symbol) before it is used. On a CPU with indirect branch tracking the kernel
 * seals the ENDBR of functions nothing calls indirectly (Debian's 6.12 is built with
 * CONFIG_X86_KERNEL_IBT, tcp_enter_loss among them): an indirect call would fault, so
 * the module refuses to load there, saying why. No IBT under QEMU's TCG, nor in 6.1.
 */
#include <linux/module.h>
#include <linux/bpf.h>
#include <linux/btf.h>
#include <linux/btf_ids.h>
#include <linux/kallsyms.h>
#include <net/tcp.h>
#ifdef CONFIG_X86_KERNEL_IBT
#include <asm/cpufeature.h>
#define STL_ENDBR64 0xfa1e0ff3u           /* f3 0f 1e fa; a sealed function starts with a NOP */
#endif

#ifndef __bpf_kfunc                       /* 6.1 has no annotation of its own */
#define __bpf_kfunc __used noinline
#endif

static unsigned long enter_loss;
module_param(enter_loss, ulong, 0400);
MODULE_PARM_DESC(enter_loss, "the address of tcp_enter_loss (from /proc/kallsyms)");

static void (*enter_loss_fn)(struct sock *sk);

__diag_push();
__diag_ignore_all("-Wmissing-prototypes", "a kfunc, called from BPF only");

/* Enter go-back-N on the partial ACK being processed: only a socket without SACK, in fast
 * recovery, whose ACK left snd_una short of the recovery point. Returns 0 when it entered,
 * -EINVAL (and changes nothing) otherwise. */
__bpf_kfunc int stl_fs_gbn_enter_loss(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);

	if (inet_csk(sk)->icsk_ca_state != TCP_CA_Recovery || !tcp_is_reno(tp) ||
	    !before(tp->snd_una, tp->high_seq))
		return -EINVAL;
	enter_loss_fn(sk);
	return 0;
}

__diag_pop();

#ifdef BTF_KFUNCS_START
BTF_KFUNCS_START(stl_fs_gbn_kfuncs)
BTF_ID_FLAGS(func, stl_fs_gbn_enter_loss)
BTF_KFUNCS_END(stl_fs_gbn_kfuncs)
#else
BTF_SET8_START(stl_fs_gbn_kfuncs)
BTF_ID_FLAGS(func, stl_fs_gbn_enter_loss)
BTF_SET8_END(stl_fs_gbn_kfuncs)
#endif

static const struct btf_kfunc_id_set stl_fs_gbn_set = {
	.owner = THIS_MODULE,
	.set = &stl_fs_gbn_kfuncs,
};

static int __init stl_fs_gbn_init(void)
{
	char name[KSYM_SYMBOL_LEN];

	if (!enter_loss) {
		pr_err("stl_fs_gbn: no enter_loss address given\n");
		return -EINVAL;
	}
	sprint_symbol(name, enter_loss);
	if (strncmp(name, "tcp_enter_loss+0x0/", strlen("tcp_enter_loss+0x0/"))) {
		pr_err("stl_fs_gbn: %lx is %s, not tcp_enter_loss\n", enter_loss, name);
		return -EINVAL;
	}
#ifdef CONFIG_X86_KERNEL_IBT
	if (cpu_feature_enabled(X86_FEATURE_IBT) && *(u32 *)enter_loss != STL_ENDBR64) {
		pr_err("stl_fs_gbn: indirect branch tracking sealed tcp_enter_loss: it cannot be called from a module (boot with ibt=off)\n");
		return -EPERM;
	}
#endif
	enter_loss_fn = (void (*)(struct sock *))enter_loss;
	return register_btf_kfunc_id_set(BPF_PROG_TYPE_STRUCT_OPS, &stl_fs_gbn_set);
}

static void __exit stl_fs_gbn_exit(void)
{
}

module_init(stl_fs_gbn_init);
module_exit(stl_fs_gbn_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("startlab: TCP Fast Start's go-back-N on a partial ACK in fast recovery");
