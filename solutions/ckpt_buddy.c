/* ckpt_buddy.c — the buddy placement of the in-memory snapshots: a rotation of the ranks, listed
 * node after node, by the largest node's size — on nodes of equal size, the same place on the next
 * node (ckpt_buddy.h; notes/14-fault-tolerance.md).
 *
 *   node 0: r0 r1   node 1: r2 r3   node 2: r4 r5   buddies: r0→r2 r1→r3 r2→r4 r3→r5 r4→r0 r5→r1
 */
#include "ckpt_buddy.h" // ckpt_buddy_of
#include "exercise.h"   // zl_exercise_todo (the generated stub calls it)

int ckpt_buddy_of(const int *node_of, int world, int rank) {
  // BEGIN EXERCISE ckpt_buddy_of notes/14-fault-tolerance.md
  // HINT: a node that is lost takes its ranks' own snapshots with it: the copy must live on another
  // HINT: node; and every rank must hold exactly one copy (no more memory on one rank than another,
  // HINT: and each rank receives from exactly one sender: the exchange is a matched send/receive).
  // HINT2: list the ranks node after node (node 0's in rank order, then node 1's, ...); rank r at
  // HINT2: position p sends to the rank at position (p + s) mod world. Which s puts it on the next
  // HINT2: node when every node has m ranks? With one node, any s in [1, world) will do.
  // HINT3: s = the largest node's rank count (1 with a single node); position p of rank: the ranks of
  // HINT3: lower nodes plus the ranks of its node below it; walk the list again to find position p + s.
  int nodes = 0, largest = 0, pos = 0;
  for (int r = 0; r < world; r++) nodes = node_of[r] + 1 > nodes ? node_of[r] + 1 : nodes;
  for (int n = 0; n < nodes; n++) {
    int size = 0;
    for (int r = 0; r < world; r++) size += node_of[r] == n;
    largest = size > largest ? size : largest;
  }
  for (int r = 0; r < world; r++) /* rank's place in the list, node after node */
    pos += node_of[r] < node_of[rank] || (node_of[r] == node_of[rank] && r < rank);
  int want = (pos + (nodes <= 1 ? 1 : largest)) % world, p = 0;
  for (int n = 0; n < nodes; n++)
    for (int r = 0; r < world; r++)
      if (node_of[r] == n && p++ == want) return r;
  return rank; /* world == 1 */
  // END EXERCISE
}
