/*
 * copier.c - the cpu backend's copy engine (copier.h).
 *
 * Each lane's state is an atomic: FREE, POSTED (waiting for the thread),
 * RUNNING, then FREE again with a release store once fn returned, so a
 * caller that reads FREE with an acquire load sees everything fn wrote. The
 * mutex and the condition variables only make the sleeps correct: the
 * thread sleeps while nothing is posted, a waiter while its lane is busy.
 */
#include "copier.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

enum { CP_FREE = 0, CP_POSTED, CP_RUNNING };

struct copier {
	pthread_t tid;
	pthread_mutex_t mu;
	pthread_cond_t work_cv, done_cv;
	bool stop; /* under mu */
	struct {
		_Atomic int state;
		void (*fn)(void *ctx);
		void *ctx;
		unsigned long order; /* when it was posted (under mu) */
	} lane[COPIER_LANES];
	unsigned long posted; /* under mu */
};

static void *copier__main(void *arg)
{
	struct copier *c = arg;

	pthread_mutex_lock(&c->mu);
	for (;;) {
		int next = -1;

		for (int i = 0; i < COPIER_LANES; i++)
			if (atomic_load(&c->lane[i].state) == CP_POSTED &&
			    (next < 0 || c->lane[i].order < c->lane[next].order))
				next = i;
		if (next < 0) {
			if (c->stop)
				break;
			pthread_cond_wait(&c->work_cv, &c->mu);
			continue;
		}
		atomic_store(&c->lane[next].state, CP_RUNNING);
		pthread_mutex_unlock(&c->mu);
		c->lane[next].fn(c->lane[next].ctx);
		pthread_mutex_lock(&c->mu);
		atomic_store_explicit(&c->lane[next].state, CP_FREE, memory_order_release);
		pthread_cond_broadcast(&c->done_cv);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

int copier_open(struct copier **out, struct ig_errbuf *eb)
{
	struct copier *c = calloc(1, sizeof(*c));
	int rc;

	if (!c)
		return ig_errf(eb, IG_E_NOMEM, "no memory for the copy engine");
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->work_cv, NULL);
	pthread_cond_init(&c->done_cv, NULL);
	rc = pthread_create(&c->tid, NULL, copier__main, c);
	if (rc) {
		pthread_cond_destroy(&c->done_cv);
		pthread_cond_destroy(&c->work_cv);
		pthread_mutex_destroy(&c->mu);
		free(c);
		return ig_errf(eb, IG_E_NOMEM, "cannot start the copy engine's thread: %s",
		               strerror(rc));
	}
	*out = c;
	return IG_E_OK;
}

void copier_close(struct copier *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->mu);
	c->stop = true; /* the thread finishes what is posted first */
	pthread_cond_broadcast(&c->work_cv);
	pthread_mutex_unlock(&c->mu);
	pthread_join(c->tid, NULL);
	pthread_cond_destroy(&c->done_cv);
	pthread_cond_destroy(&c->work_cv);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

void copier_post(struct copier *c, int lane, void (*fn)(void *ctx), void *ctx)
{
	pthread_mutex_lock(&c->mu);
	c->lane[lane].fn = fn;
	c->lane[lane].ctx = ctx;
	c->lane[lane].order = ++c->posted;
	atomic_store(&c->lane[lane].state, CP_POSTED);
	pthread_cond_signal(&c->work_cv);
	pthread_mutex_unlock(&c->mu);
}

bool copier_busy(struct copier *c, int lane)
{
	return atomic_load_explicit(&c->lane[lane].state, memory_order_acquire) != CP_FREE;
}

void copier_wait(struct copier *c, int lane)
{
	if (!copier_busy(c, lane))
		return;
	pthread_mutex_lock(&c->mu);
	while (atomic_load_explicit(&c->lane[lane].state, memory_order_acquire) != CP_FREE)
		pthread_cond_wait(&c->done_cv, &c->mu);
	pthread_mutex_unlock(&c->mu);
}
