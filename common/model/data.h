/* data.h — the two data sources: teacher-student synthetic classification (the MLP,
 * notes/02-ddp.md) and text, bytes as tokens (the GPT).
 *
 * Teacher-student: sample i is a pure function of (seed, i): x ~ N(0, I_D); the label is drawn
 * from softmax(teacher(x)), with a fixed random linear teacher. So the best achievable loss is
 * known: the teacher's mean entropy, printed beside the loss.
 *
 * Text: the file's bytes are the tokens (vocab 256). The first 90% of the file is the TRAIN
 * split, the last 10% the VALIDATION split (by position). Train sample i is the window of T+1
 * bytes at a position that is a pure function of (seed, i); validation sample j is the j-th
 * window of T+1 bytes, every T bytes along the validation split (wrapping). Inputs are the first
 * T bytes of the window, targets the next T. Each sample is one pread of T+1 bytes: a rank reads
 * only its own windows, never the whole file.
 *
 * Either way the global batch of step s is samples [s·B, (s+1)·B); rank r takes its contiguous
 * slice, so N ranks see exactly what 1 rank sees. */
#ifndef ZL_DATA_H
#define ZL_DATA_H
#include <stdint.h> // int64_t, uint64_t

typedef struct data {
  int D, C;
  uint64_t seed;
  float *teacher; /* (C, D) host, scaled so the labels are learnable but not trivial */
  /* text (is_text = 1): */
  int is_text;
  int fd;              /* the open --data file */
  int T;               /* seq_len: a sample is T+1 bytes */
  int64_t file_bytes;  /* size of the file */
  int64_t train_bytes; /* [0, train_bytes) is the train split, the rest validation */
} data_t;

void data_init(data_t *d, int D, int C, uint64_t seed);
void data_free(data_t *d);
/* Samples [first, first+n): x (n, D) fp32, y (n) class ids; host memory.
 * Text: train samples, x (n, T) int32 tokens, y (n, T) int32 targets (x shifted by one). */
void data_batch(const data_t *d, int64_t first, int n, void *x, int *y);
/* Mean entropy (nats) of the teacher's label distribution over samples [0, nsamples).
 * Text: NAN (there is no teacher). */
double data_teacher_entropy(const data_t *d, int64_t nsamples);

/* ---- text ---------------------------------------------------------------------------------- */
/* Fewest bytes a file needs for seq_len T: both splits hold a window of T+1 bytes. */
int64_t data_text_min_bytes(int T);
/* 0 when path is a readable regular file of at least data_text_min_bytes(T) bytes; else −1 and
 * why (for the one-line --data error before MPI starts). */
int data_text_check(const char *path, int T, char *why, int why_len);
/* Open the text source (dies, naming the file, where data_text_check would refuse it). */
void data_init_text(data_t *d, const char *path, int T, uint64_t seed);
/* Validation samples [first, first+n): as data_batch, from the validation split. */
void data_val_batch(const data_t *d, int64_t first, int n, int *x, int *y);
/* Byte offsets of train sample i's and validation sample j's windows (for tests). */
int64_t data_text_train_pos(const data_t *d, int64_t i);
int64_t data_text_val_pos(const data_t *d, int64_t j);
/* A counter-based RNG shared by data and model init: a pure function of its inputs. */
uint64_t rng_hash(uint64_t seed, uint64_t stream, uint64_t index);
float rng_normal(uint64_t seed, uint64_t stream, uint64_t index);  /* N(0,1) */
float rng_uniform(uint64_t seed, uint64_t stream, uint64_t index); /* [0,1) */
#endif
