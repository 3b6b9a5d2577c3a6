/* data.h — teacher-student synthetic classification (notes/02-ddp.md).
 * Sample i is a pure function of (seed, i): x ~ N(0, I_D); the label is drawn from
 * softmax(teacher(x)), with a fixed random linear teacher. So the best achievable loss is
 * known: the teacher's mean entropy, printed beside the loss. The global batch of step s is
 * samples [s·B, (s+1)·B); rank r takes its contiguous slice. */
#ifndef ZL_DATA_H
#define ZL_DATA_H
#include <stdint.h> // int64_t, uint64_t

typedef struct data {
  int D, C;
  uint64_t seed;
  float *teacher; /* (C, D) host, scaled so the labels are learnable but not trivial */
} data_t;

void data_init(data_t *d, int D, int C, uint64_t seed);
void data_free(data_t *d);
/* Samples [first, first+n): x (n, D) fp32, y (n) class ids; host memory. */
void data_batch(const data_t *d, int64_t first, int n, void *x, int *y);
/* Mean entropy (nats) of the teacher's label distribution over samples [0, nsamples). */
double data_teacher_entropy(const data_t *d, int64_t nsamples);
/* A counter-based RNG shared by data and model init: a pure function of its inputs. */
uint64_t rng_hash(uint64_t seed, uint64_t stream, uint64_t index);
float rng_normal(uint64_t seed, uint64_t stream, uint64_t index);  /* N(0,1) */
float rng_uniform(uint64_t seed, uint64_t stream, uint64_t index); /* [0,1) */
#endif
