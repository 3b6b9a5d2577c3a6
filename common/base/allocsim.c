/* allocsim.c — the two allocator designs of allocsim.h replayed over a ledger trace.
 * Notes: notes/zero-r.md (ZeRO-R memory defragmentation). */
#include "allocsim.h" // allocsim_event_t, allocsim_run, ...
#include "check.h"    // die, xcalloc
#include "ledger.h"   // LEDGER_COMM
#include <stdio.h>    // FILE, fgets
#include <stdlib.h>   // realloc, free
#include <string.h>   // strstr, strncpy

#define MIB ((int64_t)1 << 20)
enum { POOL_SMALL = 0, POOL_LARGE, POOL_REGION };

/* one block of a segment */
typedef struct { int64_t off, size; int seg, free, pool, prev, next, alive; } blk_t;
typedef struct { int64_t size; int alive, first; } seg_t;                           /* one cudaMalloc */
typedef struct { blk_t *b; int nb, capb; seg_t *s; int ns, caps; int64_t reserved, allocated; } heap_t;
typedef struct { int blk, heap, alive; } live_t; /* one allocation event's block: its heap, live or freed */

static int64_t round512(int64_t n) { return n <= 0 ? 512 : (n + 511) / 512 * 512; }

static int new_block(heap_t *h, int seg, int64_t off, int64_t size, int pool) {
  if (h->nb == h->capb) {
    h->capb = h->capb ? 2 * h->capb : 64;
    h->b = realloc(h->b, (size_t)h->capb * sizeof *h->b);
    if (!h->b) die("allocsim: out of host memory");
  }
  h->b[h->nb] = (blk_t){
      .off = off, .size = size, .seg = seg, .free = 1, .pool = pool, .prev = -1, .next = -1, .alive = 1};
  return h->nb++;
}

/* A new segment of `size` bytes holding one free block; returns the block. */
static int new_segment(heap_t *h, int64_t size, int pool) {
  if (h->ns == h->caps) {
    h->caps = h->caps ? 2 * h->caps : 16;
    h->s = realloc(h->s, (size_t)h->caps * sizeof *h->s);
    if (!h->s) die("allocsim: out of host memory");
  }
  int i = new_block(h, h->ns, 0, size, pool);
  h->s[h->ns++] = (seg_t){.size = size, .alive = 1, .first = i};
  h->reserved += size;
  return i;
}

/* Best fit: the smallest free block of the pool holding size bytes (ties: lower segment, offset). */
static int best_fit(const heap_t *h, int pool, int64_t size) {
  int best = -1;
  for (int i = 0; i < h->nb; i++) {
    const blk_t *k = &h->b[i];
    if (!k->alive || !k->free || k->pool != pool || k->size < size) continue;
    if (best < 0 || k->size < h->b[best].size ||
        (k->size == h->b[best].size &&
         (k->seg < h->b[best].seg || (k->seg == h->b[best].seg && k->off < h->b[best].off))))
      best = i;
  }
  return best;
}

/* Take size bytes from the front of free block i, splitting off the rest when it is large enough. */
static void take(heap_t *h, int i, int64_t size) {
  int64_t rest = h->b[i].size - size;
  int split = h->b[i].pool == POOL_LARGE ? rest > MIB : rest >= 512;
  if (split) {
    int j = new_block(h, h->b[i].seg, h->b[i].off + size, rest, h->b[i].pool); /* may move h->b */
    h->b[j].prev = i;
    h->b[j].next = h->b[i].next;
    if (h->b[i].next >= 0) h->b[h->b[i].next].prev = j;
    h->b[i].next = j;
    h->b[i].size = size;
  }
  h->b[i].free = 0;
  h->allocated += h->b[i].size;
}

/* Free block i and merge it with free neighbours of its segment. */
static void give(heap_t *h, int i) {
  h->b[i].free = 1;
  h->allocated -= h->b[i].size;
  int n = h->b[i].next;
  if (n >= 0 && h->b[n].free) { /* absorb the next block */
    h->b[i].size += h->b[n].size;
    h->b[i].next = h->b[n].next;
    if (h->b[n].next >= 0) h->b[h->b[n].next].prev = i;
    h->b[n].alive = 0;
  }
  int p = h->b[i].prev;
  if (p >= 0 && h->b[p].free) { /* the previous block absorbs this one */
    h->b[p].size += h->b[i].size;
    h->b[p].next = h->b[i].next;
    if (h->b[i].next >= 0) h->b[h->b[i].next].prev = p;
    h->b[i].alive = 0;
  }
}

/* Release every segment that is one free block (cudaFree of cached memory); returns bytes freed. */
static int64_t release_free(heap_t *h) {
  int64_t got = 0;
  for (int s = 0; s < h->ns; s++) {
    if (!h->s[s].alive) continue;
    blk_t *k = &h->b[h->s[s].first];
    if (k->pool == POOL_REGION || !k->free || k->size != h->s[s].size) continue;
    k->alive = 0;
    h->s[s].alive = 0;
    h->reserved -= h->s[s].size;
    got += h->s[s].size;
  }
  return got;
}

static int64_t largest_free(const heap_t *h) {
  int64_t m = 0;
  for (int i = 0; i < h->nb; i++)
    if (h->b[i].alive && h->b[i].free && h->b[i].size > m) m = h->b[i].size;
  return m;
}

/* The caching allocator: a block of the small or large pool, or -1 when the budget (on
 * h->reserved + other_reserved) refuses a new segment even after releasing cached ones. */
static int caching_alloc(heap_t *h, int64_t bytes, int64_t budget, int64_t other_reserved, int *retries,
                         int *segments) {
  int64_t size = round512(bytes);
  int pool = size <= MIB ? POOL_SMALL : POOL_LARGE;
  int i = best_fit(h, pool, size);
  if (i < 0) {
    int64_t seg = pool == POOL_SMALL ? 2 * MIB
        : size < 10 * MIB            ? 20 * MIB
                                     : (size + 2 * MIB - 1) / (2 * MIB) * (2 * MIB);
    if (budget > 0 && h->reserved + other_reserved + seg > budget) {
      (*retries)++;
      release_free(h);
      if (h->reserved + other_reserved + seg > budget) return -1;
    }
    i = new_segment(h, seg, pool);
    (*segments)++;
  }
  take(h, i, size);
  return i;
}

int allocsim_long_lived(int cat, const char *what) {
  if (cat == LEDGER_COMM) return 0;
  if (what && (strstr(what, "workspace") || strstr(what, "scratch"))) return 0;
  return 1;
}

/* The allocations' event indices in trace order (their ids increase along it: dies otherwise). */
static int *alloc_events(const allocsim_event_t *ev, int n, int *na) {
  int *ix = xcalloc((size_t)(n > 0 ? n : 1), sizeof *ix, "allocsim allocations");
  *na = 0;
  for (int e = 0; e < n; e++) {
    if (ev[e].op != 'A') continue;
    if (*na > 0 && ev[e].id <= ev[ix[*na - 1]].id)
      die("allocsim: event %d allocates id %lld after id %lld: ids must increase along the trace", e,
          (long long)ev[e].id, (long long)ev[ix[*na - 1]].id);
    ix[(*na)++] = e;
  }
  return ix;
}

/* The allocation event that free event e gives back: the one before e with its id (bisection over
 * ix[0..na), the allocations in id order); dies if there is none or it has another category or size. */
static int freed_alloc(const allocsim_event_t *ev, const int *ix, int na, int e) {
  int lo = 0, hi = na;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (ev[ix[mid]].id < ev[e].id) lo = mid + 1;
    else hi = mid;
  }
  int k = lo < na ? ix[lo] : -1;
  if (k < 0 || k > e || ev[k].id != ev[e].id)
    die("allocsim: event %d frees id %lld, which no earlier allocation has", e, (long long)ev[e].id);
  if (ev[k].cat != ev[e].cat || ev[k].bytes != ev[e].bytes)
    die("allocsim: event %d frees id %lld as %lld bytes of category %d; event %d allocated it as %lld of %d",
        e, (long long)ev[e].id, (long long)ev[e].bytes, ev[e].cat, k, (long long)ev[k].bytes, ev[k].cat);
  return k;
}

static void die_twice(const allocsim_event_t *ev, int e) {
  die("allocsim: event %d frees id %lld, which an earlier free gave back already", e, (long long)ev[e].id);
}

int allocsim_run(const allocsim_event_t *ev, int n, allocsim_mode_t mode, int64_t budget,
                 allocsim_result_t *r) {
  *r = (allocsim_result_t){.failed_at = -1};
  heap_t hc = {0}, hr = {0}; /* the caching pools; the long-lived region */
  live_t *live = xcalloc((size_t)(n > 0 ? n : 1), sizeof *live, "allocsim live"); /* by allocation event */
  int na = 0, rc = 0;
  int *ix = alloc_events(ev, n, &na);
  if (mode == ALLOCSIM_REGIONS) { /* the region: the long-lived tensors' live peak, known from the trace */
    int64_t now = 0, peak = 0;
    int *mark = xcalloc((size_t)(n > 0 ? n : 1), sizeof *mark, "allocsim marks"); /* 1 long-lived, -1 freed */
    for (int e = 0; e < n; e++) {
      if (ev[e].op == 'A') {
        if (allocsim_long_lived(ev[e].cat, ev[e].what)) { now += round512(ev[e].bytes); mark[e] = 1; }
        if (now > peak) peak = now;
        continue;
      }
      int k = freed_alloc(ev, ix, na, e);
      if (mark[k] < 0) die_twice(ev, e);
      if (mark[k] == 1) now -= round512(ev[k].bytes);
      mark[k] = -1;
    }
    free(mark);
    if (peak > 0) new_segment(&hr, peak, POOL_REGION);
    r->region_bytes = peak;
    if (budget > 0 && peak > budget) {
      r->failed_at = 0;
      r->fail_bytes = peak;
      snprintf(r->fail_what, sizeof r->fail_what, "long-lived region");
      rc = 1;
    }
  }
  for (int e = 0; e < n && !rc; e++) {
    if (ev[e].op == 'A') {
      int heap = 0, b = -1;
      if (mode == ALLOCSIM_REGIONS && allocsim_long_lived(ev[e].cat, ev[e].what)) {
        b = best_fit(&hr, POOL_REGION, round512(ev[e].bytes));
        if (b >= 0) { take(&hr, b, round512(ev[e].bytes)); heap = 1; }
        else r->spills++;
      }
      if (b < 0) b = caching_alloc(&hc, ev[e].bytes, budget, hr.reserved, &r->retries, &r->segments);
      if (b < 0) {
        r->failed_at = e;
        r->fail_bytes = ev[e].bytes;
        snprintf(r->fail_what, sizeof r->fail_what, "%s", ev[e].what);
        rc = 1;
        break;
      }
      live[e] = (live_t){.blk = b, .heap = heap, .alive = 1};
    } else {
      int k = freed_alloc(ev, ix, na, e); /* exactly the block that allocation took */
      if (!live[k].alive) die_twice(ev, e);
      live[k].alive = 0;
      give(live[k].heap ? &hr : &hc, live[k].blk);
    }
    int64_t res = hc.reserved + hr.reserved, al = hc.allocated + hr.allocated;
    if (al >= r->alloc_peak) { /* the fragmentation where it matters: at the allocated peak */
      int64_t lc = largest_free(&hc), lr = largest_free(&hr);
      r->alloc_peak = al;
      r->cached_at_peak = res - al;
      r->largest_free_at_peak = lc > lr ? lc : lr;
    }
    if (res > r->reserved_peak) r->reserved_peak = res;
    if (res - al > r->cached_peak) r->cached_peak = res - al;
  }
  int64_t lc = largest_free(&hc), lr = largest_free(&hr);
  r->largest_free_end = lc > lr ? lc : lr;
  free(hc.b); free(hc.s); free(hr.b); free(hr.s); free(live); free(ix);
  return rc;
}

int64_t allocsim_min_budget(const allocsim_event_t *ev, int n, allocsim_mode_t mode, int64_t step) {
  allocsim_result_t r;
  allocsim_run(ev, n, mode, 0, &r);
  int64_t hi = (r.reserved_peak + step - 1) / step, lo = 0; /* hi succeeds (it never binds); find the least */
  if (hi == 0) return 0;
  while (hi - lo > 1) { /* bisection: assumes success is monotone in the budget */
    int64_t mid = (lo + hi) / 2;
    if (allocsim_run(ev, n, mode, mid * step, &r) == 0) hi = mid;
    else lo = mid;
  }
  return hi * step;
}

allocsim_event_t *allocsim_load(const char *path, int *n) {
  FILE *f = fopen(path, "r");
  if (!f) die("error: allocsim: cannot open %s", path);
  int cap = 1024, k = 0, line = 0;
  allocsim_event_t *ev = malloc((size_t)cap * sizeof *ev);
  char buf[256];
  while (fgets(buf, sizeof buf, f)) {
    line++;
    char op;
    int arena, cat, used = 0;
    long long bytes, id;
    int got = sscanf(buf, "%c %d %d %lld %lld %n", &op, &arena, &cat, &bytes, &id, &used);
    if (got < 5 || (op != 'A' && op != 'F'))
      die("error: allocsim: %s line %d: expected `A|F arena cat bytes id [what]`", path, line);
    if (arena != 0) continue; /* the host arena has no device budget */
    if (k == cap) { cap *= 2; ev = realloc(ev, (size_t)cap * sizeof *ev); }
    if (!ev) die("allocsim: out of host memory");
    ev[k] = (allocsim_event_t){.op = op, .cat = cat, .bytes = bytes, .id = id};
    if (op == 'A') {
      snprintf(ev[k].what, sizeof ev[k].what, "%s", used ? buf + used : "?");
      ev[k].what[strcspn(ev[k].what, "\n")] = 0;
    }
    k++;
  }
  fclose(f);
  *n = k;
  return ev;
}
