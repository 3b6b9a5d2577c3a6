/* data.c — teacher-student synthetic classification and text windows, addressed by sample
 * index (notes/02-ddp.md; data.h for the text source). Nothing here keeps a generator state: every random
 * number is a pure
 * function of (seed, stream, index), so sample i is the same whichever rank makes it, in
 * whatever batch, in whatever order — the property every parity test leans on. */
#include "data.h"   // data_t, data_init, data_batch, rng_*
#include <errno.h>    // errno
#include <fcntl.h>    // open
#include <math.h>     // sqrt, log, exp, sqrtf, logf, cosf, sinf, NAN
#include <stdio.h>    // snprintf
#include <stdlib.h>   // free
#include <string.h>   // strerror
#include <sys/stat.h> // fstat
#include <unistd.h>   // pread, close
#include "check.h"    // die, xmalloc, check_rank

/* Streams: independent sequences for independent purposes (model.c uses its own). */
enum { DATA_STREAM_TEACHER = 1, DATA_STREAM_X = 2, DATA_STREAM_LABEL = 3, DATA_STREAM_TEXT = 4 };
/* Std of a teacher logit (over x): large enough that labels follow x, small enough that they
 * stay noisy — the teacher's entropy is well below log C yet above 0. */
#define DATA_LOGIT_STD 2.5

/* splitmix64's finalizer: a bijection of 64-bit words that mixes every bit into every bit. */
static inline uint64_t rng_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t rng_hash(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t h = rng_mix(seed + 0x9e3779b97f4a7c15ULL);
  h = rng_mix(h ^ (stream * 0xd1b54a32d192ed03ULL + 0x632be59bd9b4e019ULL));
  return rng_mix(h ^ (index * 0x9e3779b97f4a7c15ULL + 0x8cb92ba72f3d8dd7ULL));
}

float rng_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return (float)(rng_hash(seed, stream, index) >> 40) * 0x1.0p-24f; /* 24 bits: exact in fp32, < 1 */
}

/* Box-Muller: normals 2k and 2k+1 of a stream are r·cos θ and r·sin θ of ONE hash (of k), so
 * a loop can make them in pairs, while rng_normal still computes any one alone, bit for bit
 * the same. Float math: the data generator runs every step and must stay cheap. */
static inline void rng_polar(uint64_t seed, uint64_t stream, uint64_t pair, float *r, float *theta) {
  uint64_t h = rng_hash(seed, stream, pair);
  float u1 = (float)((h >> 40) + 1) * 0x1.0p-24f;             /* (0, 1]: log is finite */
  float u2 = (float)((h >> 16) & 0xffffffULL) * 0x1.0p-24f;   /* [0, 1) */
  *r = sqrtf(-2.0f * logf(u1));
  *theta = 6.28318530717958648f * u2;
}

float rng_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  float r, theta;
  rng_polar(seed, stream, index >> 1, &r, &theta);
  return (index & 1) ? r * sinf(theta) : r * cosf(theta);
}

/* out[k] = rng_normal(seed, stream, first + k) for k < n, sharing each pair's hash and log. */
static void rng_normals(uint64_t seed, uint64_t stream, uint64_t first, int n, float *out) {
  int k = 0;
  if (n > 0 && (first & 1)) { out[0] = rng_normal(seed, stream, first); k = 1; }
  for (; k + 1 < n; k += 2) {
    float r, theta;
    rng_polar(seed, stream, (first + k) >> 1, &r, &theta);
    out[k] = r * cosf(theta);
    out[k + 1] = r * sinf(theta);
  }
  if (k < n) out[k] = rng_normal(seed, stream, first + k);
}

void data_init(data_t *d, int D, int C, uint64_t seed) {
  if (D < 1 || C < 1) die_on_rank("data_init: input %d and classes %d must be >= 1", D, C);
  *d = (data_t){.D = D, .C = C, .seed = seed, .fd = -1};
  d->teacher = xmalloc((size_t)C * D * sizeof(float), "data teacher"); // (C, D)
  float scale = (float)(DATA_LOGIT_STD / sqrt((double)D));           // logit std ≈ DATA_LOGIT_STD
  for (int64_t k = 0; k < (int64_t)C * D; k++)
    d->teacher[k] = scale * rng_normal(seed, DATA_STREAM_TEACHER, k);
}

void data_free(data_t *d) {
  free(d->teacher);
  d->teacher = NULL;
  if (d->is_text && d->fd >= 0) close(d->fd);
  d->fd = -1;
}

/* x (D) of sample i. */
static void data_x(const data_t *d, int64_t i, float *x) {
  rng_normals(d->seed, DATA_STREAM_X, (uint64_t)i * d->D, d->D, x);
}

/* p (C) = softmax(teacher · x), in double; returns the distribution's entropy (nats). */
static double data_teacher_probs(const data_t *d, const float *x, double *p) {
  double mx = -INFINITY, sum = 0.0, ent = 0.0;
  for (int c = 0; c < d->C; c++) {
    const float *t = d->teacher + (int64_t)c * d->D;
    double z = 0.0;
    for (int k = 0; k < d->D; k++) z += (double)t[k] * x[k];
    p[c] = z;
    mx = z > mx ? z : mx;
  }
  for (int c = 0; c < d->C; c++) sum += (p[c] = exp(p[c] - mx));
  for (int c = 0; c < d->C; c++) {
    p[c] /= sum;
    if (p[c] > 0) ent -= p[c] * log(p[c]);
  }
  return ent;
}

static void text_window(const data_t *d, int64_t pos, int *x, int *y);

void data_batch(const data_t *d, int64_t first, int n, void *xv, int *y) {
  if (d->is_text) {
    for (int r = 0; r < n; r++)
      text_window(d, data_text_train_pos(d, first + r), (int *)xv + (int64_t)r * d->T, y + (int64_t)r * d->T);
    return;
  }
  float *x = xv;
  double *p = xmalloc((size_t)d->C * sizeof(double), "data label probabilities"); // (C)
  for (int r = 0; r < n; r++) {
    int64_t i = first + r;
    float *xr = x + (int64_t)r * d->D;
    data_x(d, i, xr);
    data_teacher_probs(d, xr, p);
    /* inverse CDF with one uniform per sample; the last class catches rounding */
    double u = rng_uniform(d->seed, DATA_STREAM_LABEL, (uint64_t)i), cdf = 0.0;
    int label = d->C - 1;
    for (int c = 0; c < d->C - 1; c++) {
      cdf += p[c];
      if (u < cdf) {
        label = c;
        break;
      }
    }
    y[r] = label;
  }
  free(p);
}

double data_teacher_entropy(const data_t *d, int64_t nsamples) {
  if (d->is_text) return NAN;
  if (nsamples <= 0) return 0.0;
  double *p = xmalloc((size_t)d->C * sizeof(double), "data label probabilities"); // (C)
  float *x = xmalloc((size_t)d->D * sizeof(float), "data sample");                // (D)
  double total = 0.0;
  for (int64_t i = 0; i < nsamples; i++) {
    data_x(d, i, x);
    total += data_teacher_probs(d, x, p);
  }
  free(p);
  free(x);
  return total / (double)nsamples;
}

/* ---- text ----------------------------------------------------------------------------------- */
int64_t data_text_min_bytes(int T) { return 10 * ((int64_t)T + 1); } /* the 10% validation tail holds T+1 */

static int64_t val_bytes(const data_t *d) { return d->file_bytes - d->train_bytes; }

int data_text_check(const char *path, int T, char *why, int why_len) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) {
    snprintf(why, (size_t)why_len, "cannot open: %s", strerror(errno));
    return -1;
  }
  struct stat st;
  int rc = fstat(fd, &st);
  char probe;
  ssize_t got = rc == 0 && S_ISREG(st.st_mode) ? pread(fd, &probe, 1, 0) : -1;
  close(fd);
  if (rc != 0 || !S_ISREG(st.st_mode)) {
    snprintf(why, (size_t)why_len, "not a regular file");
    return -1;
  }
  if (got < 0) {
    snprintf(why, (size_t)why_len, "cannot read: %s", strerror(errno));
    return -1;
  }
  if ((int64_t)st.st_size < data_text_min_bytes(T)) {
    snprintf(why, (size_t)why_len,
             "%lld bytes, too short for --seq-len %d: needs at least %lld (10%% validation split "
             "holding one window of seq_len+1 bytes)",
             (long long)st.st_size, T, (long long)data_text_min_bytes(T));
    return -1;
  }
  return 0;
}

void data_init_text(data_t *d, const char *path, int T, uint64_t seed) {
  char why[256];
  if (data_text_check(path, T, why, sizeof why)) die_on_rank("--data %s: %s", path, why);
  *d = (data_t){.seed = seed, .is_text = 1, .T = T, .fd = open(path, O_RDONLY)};
  if (d->fd < 0) die_on_rank("--data %s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(d->fd, &st) != 0) die_on_rank("--data %s: cannot stat: %s", path, strerror(errno));
  d->file_bytes = (int64_t)st.st_size;
  d->train_bytes = d->file_bytes - d->file_bytes / 10; /* the last 10% is validation */
}

int64_t data_text_train_pos(const data_t *d, int64_t i) {
  /* windows [p, p+T] inside [0, train_bytes): p in [0, train_bytes − T) */
  return (int64_t)(rng_hash(d->seed, DATA_STREAM_TEXT, (uint64_t)i) % (uint64_t)(d->train_bytes - d->T));
}

int64_t data_text_val_pos(const data_t *d, int64_t j) {
  /* every T bytes along the validation split, wrapping: windows inside [train_bytes, file_bytes) */
  return d->train_bytes + (int64_t)(((uint64_t)j * (uint64_t)d->T) % (uint64_t)(val_bytes(d) - d->T));
}

/* One pread of the T+1 bytes at pos: x = bytes 0..T−1, y = bytes 1..T. */
static void text_window(const data_t *d, int64_t pos, int *x, int *y) {
  unsigned char buf[65537], *b = buf;
  if (d->T + 1 > (int)sizeof buf) b = xmalloc((size_t)d->T + 1, "text window");
  int64_t done = 0;
  while (done < d->T + 1) {
    ssize_t k = pread(d->fd, b + done, (size_t)(d->T + 1 - done), (off_t)(pos + done));
    if (k <= 0) die_on_rank("--data: read of %d bytes at %lld failed (%s)", d->T + 1, (long long)pos,
                    k < 0 ? strerror(errno) : "end of file: did the file shrink?");
    done += k;
  }
  for (int t = 0; t < d->T; t++) {
    x[t] = b[t];
    y[t] = b[t + 1];
  }
  if (b != buf) free(b);
}

void data_val_batch(const data_t *d, int64_t first, int n, int *x, int *y) {
  if (!d->is_text) die_on_rank("data_val_batch: not a text source");
  for (int r = 0; r < n; r++)
    text_window(d, data_text_val_pos(d, first + r), x + (int64_t)r * d->T, y + (int64_t)r * d->T);
}
