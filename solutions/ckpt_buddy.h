/* ckpt_buddy.h — where a rank's in-memory snapshot gets its second copy (chapter 14, --ckpt-mem-every;
 * notes/14-fault-tolerance.md): on a rank of another node, so that a node lost keeps every copy of
 * its ranks' snapshots elsewhere, and one copy per holder, so that the memory is even and each rank
 * knows the one rank it receives from. */
#ifndef ZL_CKPT_BUDDY_H
#define ZL_CKPT_BUDDY_H

/* The buddy of `rank` among `world` ranks, node_of[r] naming each rank's node (0, 1, ...): a
 * permutation of the ranks with no fixed point (world >= 2) — every rank holds exactly one copy,
 * never its own — and, when the ranks are on two or more nodes of equal size, each rank's buddy is
 * on another node. Here: the rank with the same index inside its node on the next node (cyclic). */
int ckpt_buddy_of(const int *node_of, int world, int rank);
#endif
