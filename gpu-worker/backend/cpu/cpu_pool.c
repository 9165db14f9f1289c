/*
 * cpu_pool.c - the fixed thread pool of cpu_pool.h.
 *
 * One job slot guarded by `mu`. The caller publishes a job by filling the
 * slot, setting `pending` to the number of workers and bumping `gen` (all
 * under `mu`), then broadcasts `start_cv`. A worker that sees a new `gen`
 * runs its share, decrements `pending`, and the one that brings it to zero
 * signals `done_cv` under `mu`. `gen` and `pending` are also atomics so the
 * bounded spin before each sleep can poll them without the lock; the lock
 * and the condition variables are what make sleeping correct (a waiter
 * re-checks its condition under `mu` before it sleeps, and every change is
 * made or signalled under `mu`).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_pool.h"

/*
 * Polls before sleeping. A poll with a pause hint costs ~20-150 cycles, so
 * 2000 polls keep a worker awake some tens of microseconds: about the gap
 * between two kernels of a decode step, far below a scheduler tick.
 */
#define CPOOL_SPIN 2000

struct cpool {
	int n;                  /* threads, the caller included */
	pthread_t *tid;         /* n - 1 workers */
	int started;            /* workers actually started (for a failed create) */
	pthread_mutex_t run_mu; /* one cpool_run at a time */
	pthread_mutex_t mu;
	pthread_cond_t start_cv;
	pthread_cond_t done_cv;
	_Atomic unsigned long gen; /* job generation; changed under mu */
	_Atomic int pending;       /* workers still on the current job */
	bool stop;                 /* under mu */
	/* the current job: written under mu before gen moves */
	cpool_fn fn;
	void *ctx;
	size_t n_items;
};

struct worker_arg {
	struct cpool *p;
	int k; /* share index, 1..n-1 */
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static void share_of(size_t n_items, int n, int k, size_t *begin, size_t *end)
{
	size_t q = n_items / (size_t)n, r = n_items % (size_t)n, uk = (size_t)k;

	*begin = uk * q + (uk < r ? uk : r);
	*end = (uk + 1) * q + (uk + 1 < r ? uk + 1 : r);
}

static void run_share(struct cpool *p, cpool_fn fn, void *ctx, size_t n_items, int k)
{
	size_t b, e;

	share_of(n_items, p->n, k, &b, &e);
	if (b < e)
		fn(ctx, b, e);
}

static void *worker_main(void *arg)
{
	struct worker_arg wa = *(struct worker_arg *)arg;
	struct cpool *p = wa.p;
	unsigned long seen = 0;

	free(arg);
	for (;;) {
		cpool_fn fn;
		void *ctx;
		size_t n_items;

		for (int i = 0; i < CPOOL_SPIN && atomic_load(&p->gen) == seen; i++)
			cpu_relax();
		pthread_mutex_lock(&p->mu);
		while (atomic_load_explicit(&p->gen, memory_order_relaxed) == seen && !p->stop)
			pthread_cond_wait(&p->start_cv, &p->mu);
		if (p->stop) {
			pthread_mutex_unlock(&p->mu);
			return NULL;
		}
		seen = atomic_load_explicit(&p->gen, memory_order_relaxed);
		fn = p->fn;
		ctx = p->ctx;
		n_items = p->n_items;
		pthread_mutex_unlock(&p->mu);

		run_share(p, fn, ctx, n_items, wa.k);

		if (atomic_fetch_sub(&p->pending, 1) == 1) {
			pthread_mutex_lock(&p->mu);
			pthread_cond_signal(&p->done_cv);
			pthread_mutex_unlock(&p->mu);
		}
	}
}

static void stop_workers(struct cpool *p)
{
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_cond_broadcast(&p->start_cv);
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < p->started; i++)
		pthread_join(p->tid[i], NULL);
	p->started = 0;
}

int cpool_create(struct cpool **out, int n_threads, struct ig_errbuf *eb)
{
	struct cpool *p;
	int rc;

	*out = NULL;
	if (n_threads < 1 || n_threads > CPOOL_MAX_THREADS)
		return ig_errf(eb, IG_E_INVAL, "cpu pool: %d threads: give 1 to %d", n_threads,
		               CPOOL_MAX_THREADS);
	p = calloc(1, sizeof(*p));
	if (!p)
		return ig_errf(eb, IG_E_NOMEM, "cpu pool: out of memory");
	p->n = n_threads;
	atomic_init(&p->gen, 0);
	atomic_init(&p->pending, 0);
	pthread_mutex_init(&p->run_mu, NULL);
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->start_cv, NULL);
	pthread_cond_init(&p->done_cv, NULL);
	if (n_threads > 1) {
		p->tid = calloc((size_t)n_threads - 1, sizeof(*p->tid));
		if (!p->tid) {
			rc = ig_errf(eb, IG_E_NOMEM, "cpu pool: out of memory");
			goto out_destroy;
		}
	}
	for (int k = 1; k < n_threads; k++) {
		struct worker_arg *wa = malloc(sizeof(*wa));
		int e;

		if (!wa) {
			rc = ig_errf(eb, IG_E_NOMEM, "cpu pool: out of memory");
			goto out_destroy;
		}
		wa->p = p;
		wa->k = k;
		e = pthread_create(&p->tid[k - 1], NULL, worker_main, wa);
		if (e) {
			free(wa);
			rc = ig_errf(eb, IG_E_NOMEM, "cpu pool: starting thread %d of %d: %s",
			             k + 1, n_threads, strerror(e));
			goto out_destroy;
		}
		p->started++;
	}
	*out = p;
	return IG_E_OK;

out_destroy:
	cpool_destroy(p);
	return rc;
}

void cpool_destroy(struct cpool *p)
{
	if (!p)
		return;
	stop_workers(p);
	pthread_cond_destroy(&p->done_cv);
	pthread_cond_destroy(&p->start_cv);
	pthread_mutex_destroy(&p->mu);
	pthread_mutex_destroy(&p->run_mu);
	free(p->tid);
	free(p);
}

int cpool_threads(const struct cpool *p)
{
	return p ? p->n : 1;
}

void cpool_run(struct cpool *p, size_t n_items, cpool_fn fn, void *ctx)
{
	if (n_items == 0)
		return;
	if (!p || p->n == 1) {
		fn(ctx, 0, n_items);
		return;
	}
	pthread_mutex_lock(&p->run_mu);

	pthread_mutex_lock(&p->mu);
	p->fn = fn;
	p->ctx = ctx;
	p->n_items = n_items;
	atomic_store(&p->pending, p->n - 1);
	atomic_fetch_add(&p->gen, 1);
	pthread_cond_broadcast(&p->start_cv);
	pthread_mutex_unlock(&p->mu);

	run_share(p, fn, ctx, n_items, 0);

	for (int i = 0; i < CPOOL_SPIN && atomic_load(&p->pending) != 0; i++)
		cpu_relax();
	if (atomic_load(&p->pending) != 0) {
		pthread_mutex_lock(&p->mu);
		while (atomic_load(&p->pending) != 0)
			pthread_cond_wait(&p->done_cv, &p->mu);
		pthread_mutex_unlock(&p->mu);
	}

	pthread_mutex_unlock(&p->run_mu);
}

void cpool_run_sized(struct cpool *p, size_t n_items, size_t work_per_item, cpool_fn fn, void *ctx)
{
	if (n_items && work_per_item <= CPOOL_INLINE_WORK / n_items)
		p = NULL;
	cpool_run(p, n_items, fn, ctx);
}
