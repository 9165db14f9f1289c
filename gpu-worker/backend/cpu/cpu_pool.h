/*
 * cpu_pool.h - a small fixed pool of threads for the cpu backend's kernels.
 *
 * The pool runs one job at a time: `cpool_run` cuts [0, n_items) into one
 * contiguous range per thread by a fixed rule (below), hands each range to
 * `fn` and returns when every range is done. The calling thread works too:
 * a pool of N threads starts N - 1 workers and the caller takes range 0.
 *
 * Invariants the kernels build on:
 *  - the partition depends only on (n_items, n_threads): with q = n_items / N
 *    and r = n_items % N, thread k gets [k * q + min(k, r), (k + 1) * q +
 *    min(k + 1, r)) (the first r threads one item more); empty ranges are not
 *    called;
 *  - `fn` is never called twice for an item, and every item is called once;
 *  - when `cpool_run` returns, every write `fn` made is visible to the caller.
 * So a kernel whose output elements each belong to exactly one item, and are
 * computed the same way whatever thread runs the item, gives bit-identical
 * results for every thread count.
 *
 * Waiting: an idle worker spins briefly (a bounded number of polls, so a
 * decode step's back-to-back jobs do not pay a sleep and wake-up each), then
 * sleeps on a condition variable; nothing spins forever.
 */
#ifndef IGNIS_GPU_WORKER_CPU_POOL_H
#define IGNIS_GPU_WORKER_CPU_POOL_H

#include <stddef.h>

#include "common/err.h"

/* More threads than this is a configuration mistake, not a machine. */
#define CPOOL_MAX_THREADS 256

struct cpool;

/* One share of a job: items [begin, end), begin < end. */
typedef void (*cpool_fn)(void *ctx, size_t begin, size_t end);

/*
 * Create a pool of `n_threads` threads, the caller of `cpool_run` included:
 * 1 starts no thread and runs every job inline. On success *out is the pool,
 * owned by the caller until `cpool_destroy`. Errors: IG_E_INVAL (n_threads
 * outside 1..CPOOL_MAX_THREADS), IG_E_NOMEM (memory or a thread could not be
 * had); *out is then NULL and nothing is left running.
 */
int cpool_create(struct cpool **out, int n_threads, struct ig_errbuf *eb);

/* Stop and join the workers, free the pool. NULL does nothing. No job may be
 * running. */
void cpool_destroy(struct cpool *p);

/* Threads of the pool, the caller included; 1 for a NULL pool. */
int cpool_threads(const struct cpool *p);

/*
 * Run `fn(ctx, begin, end)` over the fixed partition of [0, n_items) and
 * return when all shares are done. `p` NULL runs inline, like a pool of one.
 * n_items 0 calls nothing. Calls from several threads are serialised; a call
 * from inside `fn` (a nested job) would deadlock and is not allowed.
 */
void cpool_run(struct cpool *p, size_t n_items, cpool_fn fn, void *ctx);

/* Below this much work (in multiply-adds, roughly) a job runs inline: waking
 * the workers costs more than it saves. */
#define CPOOL_INLINE_WORK 32768u

/* cpool_run for a job of `n_items` items of about `work_per_item`
 * multiply-adds each: inline when the whole job is below CPOOL_INLINE_WORK.
 * Which thread runs an item never changes its result (every job here
 * computes each output in one item), so this changes time only. */
void cpool_run_sized(struct cpool *p, size_t n_items, size_t work_per_item, cpool_fn fn, void *ctx);

#endif
