/*
 * be_cpu.c - the cpu backend's device memory: a simulated device of the
 * plan's free memory, in host memory. Allocations are counted against it as
 * a GPU counts them (4 KiB granules), so every plan rule and every refusal
 * runs on a machine without a GPU.
 *
 * The backend also keeps the list of its live allocations, so that a copy
 * whose device side is not device memory, or whose host side is, is refused
 * here as it would fault (or silently misbehave) on a real device.
 *
 * The transfer stream (contract in backend.h) is one thread doing memcpy
 * over a ring of BE_XFER_DEPTH jobs. Invariants, all under `mu`:
 *
 *   completed <= issued <= completed + BE_XFER_DEPTH
 *   the job of ticket t (completed < t <= issued) is ring[(t - 1) % DEPTH]
 *   failed == 0, or failed <= completed and `fail` describes it
 *
 * The thread takes ticket completed + 1, copies with `mu` released (callers
 * asking done() are never held up by a memcpy), then sets `completed` under
 * `mu`: whoever reads `completed >= t` under `mu` also sees the bytes of t.
 * Its slot stays counted in flight until then, so enqueue cannot reuse it.
 * Nobody spins: the thread sleeps on `work_cv`, waiters on `done_cv`.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "model_cpu.h"

#define BE_CPU_GRANULE 4096u

struct be_cpu_alloc {
	uintptr_t base;
	uint64_t bytes; /* rounded to the granule: what the device holds */
};

struct be_cpu_job {
	void *dst;
	const void *src;
	uint64_t n;
	bool d2h;
	bool fault; /* struct be's fault_xfer named this copy */
};

struct be_cpu {
	/* the simulated device's live allocations; the caller's thread only */
	struct be_cpu_alloc *alloc;
	size_t nalloc, alloc_cap;

	/* the transfer stream */
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t work_cv; /* the thread: a job or `stop` */
	pthread_cond_t done_cv; /* waiters: `completed` moved */
	struct be_cpu_job ring[BE_XFER_DEPTH];
	uint64_t issued;       /* the last ticket given out */
	uint64_t completed;    /* the last ticket done */
	uint64_t failed;       /* the first ticket that failed; 0: none */
	struct ig_errbuf fail; /* its code and description */
	bool stop;             /* close: drain, then exit */
};

static uint64_t be_cpu__round(uint64_t n)
{
	return (n + BE_CPU_GRANULE - 1) / BE_CPU_GRANULE * BE_CPU_GRANULE;
}

/* "async copy #7 (h2d, 4096 bytes, 0x... <- 0x...)"; ticket 0: no number. */
static void be_cpu__describe(char *buf, size_t size, const char *what, uint64_t ticket, bool d2h,
                             const void *dst, const void *src, uint64_t n)
{
	char num[24] = "";

	if (ticket)
		snprintf(num, sizeof(num), " #%" PRIu64, ticket);
	snprintf(buf, size, "%s%s (%s, %" PRIu64 " bytes, %p <- %p)", what, num,
	         d2h ? "d2h" : "h2d", n, dst, src);
}

/* Does [p, p + n) lie inside one allocation (`inside`) or touch any? */
static bool be_cpu__in_device(const struct be_cpu *c, const void *p, uint64_t n, bool inside)
{
	uintptr_t a = (uintptr_t)p, end = a + (uintptr_t)n;

	for (size_t i = 0; i < c->nalloc; i++) {
		uintptr_t lo = c->alloc[i].base, hi = lo + (uintptr_t)c->alloc[i].bytes;

		if (inside ? (a >= lo && end <= hi) : (a < hi && end > lo))
			return true;
	}
	return false;
}

/* The checks a copy passes before it runs or is enqueued. */
static int be_cpu__check(const struct be_cpu *c, const char *what, bool d2h, void *dst,
                         const void *src, uint64_t n, struct ig_errbuf *eb)
{
	const void *dev = d2h ? src : dst, *host = d2h ? (const void *)dst : src;
	const char *why = NULL;
	char desc[160];

	if (!c)
		why = "the backend is not open";
	else if (n == 0)
		return IG_E_OK;
	else if (!dst || !src)
		why = "a null pointer";
	else if ((uintptr_t)dev > UINTPTR_MAX - n || (uintptr_t)host > UINTPTR_MAX - n)
		why = "the range wraps around the address space";
	else if (!be_cpu__in_device(c, dev, n, true))
		why = "the device range is not inside one allocation of the simulated device";
	else if (be_cpu__in_device(c, host, n, false))
		why = "the host range is device memory (the other direction?)";
	if (!why)
		return IG_E_OK;
	be_cpu__describe(desc, sizeof(desc), what, 0, d2h, dst, src, n);
	return ig_errf(eb, IG_E_INVAL, "%s: %s", desc, why);
}

static void *be_cpu__xfer_main(void *arg)
{
	struct be_cpu *c = arg;

	pthread_mutex_lock(&c->mu);
	for (;;) {
		struct be_cpu_job j;
		uint64_t t;
		bool run;

		while (c->completed == c->issued && !c->stop)
			pthread_cond_wait(&c->work_cv, &c->mu);
		if (c->completed == c->issued)
			break; /* stopped, and drained */
		t = c->completed + 1;
		j = c->ring[(t - 1) % BE_XFER_DEPTH];
		run = !c->failed; /* after a failure, later copies are not run */
		pthread_mutex_unlock(&c->mu);

		if (run && !j.fault && j.n)
			memcpy(j.dst, j.src, (size_t)j.n);

		pthread_mutex_lock(&c->mu);
		if (run && j.fault) { /* writes nothing, stops the stream */
			char desc[160];

			be_cpu__describe(desc, sizeof(desc), "async copy", t, j.d2h, j.dst, j.src,
			                 j.n);
			ig_errf(&c->fail, IG_E_IO, "%s: injected fault (struct be.fault_xfer)",
			        desc);
			c->failed = t;
		}
		c->completed = t;
		pthread_cond_broadcast(&c->done_cv);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

static int be_cpu_open(struct be *b, uint64_t sim_bytes, struct ig_errbuf *eb)
{
	struct be_cpu *c = calloc(1, sizeof(*c));
	int e, rc;

	if (!c)
		return ig_errf(eb, IG_E_NOMEM, "host memory for the cpu backend's state");
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->work_cv, NULL);
	pthread_cond_init(&c->done_cv, NULL);
	e = pthread_create(&c->thread, NULL, be_cpu__xfer_main, c);
	if (e) {
		rc = ig_errf(eb, IG_E_NOMEM, "cannot start the cpu backend's transfer thread: %s",
		             strerror(e));
		goto out_destroy;
	}
	b->capacity = sim_bytes;
	b->used = 0;
	b->priv = c;
	return IG_E_OK;

out_destroy:
	pthread_cond_destroy(&c->done_cv);
	pthread_cond_destroy(&c->work_cv);
	pthread_mutex_destroy(&c->mu);
	free(c);
	return rc;
}

static void be_cpu_close(struct be *b)
{
	struct be_cpu *c = b->priv;

	b->capacity = b->used = 0;
	if (!c)
		return;
	pthread_mutex_lock(&c->mu);
	c->stop = true;
	pthread_cond_signal(&c->work_cv);
	pthread_mutex_unlock(&c->mu);
	pthread_join(c->thread, NULL); /* it drains the ring first */
	pthread_cond_destroy(&c->done_cv);
	pthread_cond_destroy(&c->work_cv);
	pthread_mutex_destroy(&c->mu);
	free(c->alloc);
	free(c);
	b->priv = NULL;
}

static void be_cpu_mem_info(struct be *b, uint64_t *free_bytes, uint64_t *total_bytes)
{
	*free_bytes = b->capacity - b->used;
	*total_bytes = b->capacity;
}

static int be_cpu_alloc(struct be *b, uint64_t bytes, void **ptr, struct ig_errbuf *eb)
{
	struct be_cpu *c = b->priv;
	uint64_t n = be_cpu__round(bytes ? bytes : 1);

	if (!c)
		return ig_errf(eb, IG_E_INVAL,
		               "device allocation of %" PRIu64 " bytes: the backend is not open",
		               bytes);
	if (n > b->capacity - b->used)
		return ig_errf(eb, IG_E_NOMEM,
		               "the simulated device has %llu bytes free of %llu; asked for %llu",
		               (unsigned long long)(b->capacity - b->used),
		               (unsigned long long)b->capacity, (unsigned long long)n);
	if (c->nalloc == c->alloc_cap) {
		size_t cap = c->alloc_cap ? 2 * c->alloc_cap : 16;
		struct be_cpu_alloc *a = realloc(c->alloc, cap * sizeof(*a));

		if (!a)
			return ig_errf(eb, IG_E_NOMEM, "host memory for the list of allocations");
		c->alloc = a;
		c->alloc_cap = cap;
	}
	*ptr = aligned_alloc(BE_CPU_GRANULE, (size_t)n);
	if (!*ptr)
		return ig_errf(eb, IG_E_NOMEM, "host memory for %llu simulated device bytes",
		               (unsigned long long)n);
	c->alloc[c->nalloc++] = (struct be_cpu_alloc){(uintptr_t)*ptr, n};
	b->used += n;
	return IG_E_OK;
}

/* Block until every ticket issued is done. */
static void be_cpu__drain(struct be_cpu *c)
{
	pthread_mutex_lock(&c->mu);
	while (c->completed < c->issued)
		pthread_cond_wait(&c->done_cv, &c->mu);
	pthread_mutex_unlock(&c->mu);
}

static void be_cpu_free(struct be *b, void *ptr, uint64_t bytes)
{
	struct be_cpu *c = b->priv;
	size_t i;

	if (!ptr)
		return;
	if (!c) { /* after close: the books are gone, the memory is still ours */
		free(ptr);
		return;
	}
	be_cpu__drain(c); /* as cudaFree: no copy in flight may touch it */
	for (i = 0; i < c->nalloc && c->alloc[i].base != (uintptr_t)ptr; i++)
		;
	if (i == c->nalloc) {
		/* style rule 5: a device error in the worker may abort */
		fprintf(stderr, "be_cpu_free: %p is not an allocation of the simulated device\n",
		        ptr);
		abort();
	}
	c->alloc[i] = c->alloc[--c->nalloc];
	free(ptr);
	b->used -= be_cpu__round(bytes ? bytes : 1);
}

static int be_cpu__copy(struct be *b, bool d2h, void *dst, const void *src, uint64_t n,
                        struct ig_errbuf *eb)
{
	int rc = be_cpu__check(b->priv, "copy", d2h, dst, src, n, eb);

	if (!rc && n)
		memcpy(dst, src, (size_t)n);
	return rc;
}

static int be_cpu_copy_h2d(struct be *b, void *dst, const void *src, uint64_t n,
                           struct ig_errbuf *eb)
{
	return be_cpu__copy(b, false, dst, src, n, eb);
}

static int be_cpu_copy_d2h(struct be *b, void *dst, const void *src, uint64_t n,
                           struct ig_errbuf *eb)
{
	return be_cpu__copy(b, true, dst, src, n, eb);
}

static int be_cpu__enqueue(struct be *b, bool d2h, void *dst, const void *src, uint64_t n,
                           uint64_t *ticket, struct ig_errbuf *eb)
{
	struct be_cpu *c = b->priv;
	char desc[160];
	uint64_t t;
	int rc;

	rc = be_cpu__check(c, "async copy", d2h, dst, src, n, eb);
	if (rc)
		return rc;
	pthread_mutex_lock(&c->mu);
	if (c->failed) {
		be_cpu__describe(desc, sizeof(desc), "async copy", 0, d2h, dst, src, n);
		rc = ig_errf(eb, c->fail.code,
		             "%s: refused, the transfer stream stopped at the failure of %s", desc,
		             c->fail.msg);
		goto out_unlock;
	}
	if (c->issued - c->completed >= BE_XFER_DEPTH) {
		be_cpu__describe(desc, sizeof(desc), "async copy", 0, d2h, dst, src, n);
		rc = ig_errf(eb, IG_E_BUSY,
		             "%s: the transfer stream has %u copies in flight, its depth; wait for "
		             "ticket %" PRIu64 " and enqueue again",
		             desc, BE_XFER_DEPTH, c->completed + 1);
		goto out_unlock;
	}
	t = ++c->issued;
	c->ring[(t - 1) % BE_XFER_DEPTH] = (struct be_cpu_job){
	    .dst = dst, .src = src, .n = n, .d2h = d2h, .fault = b->fault_xfer == t};
	pthread_cond_signal(&c->work_cv);
	*ticket = t;
out_unlock:
	pthread_mutex_unlock(&c->mu);
	return rc;
}

static int be_cpu_copy_h2d_async(struct be *b, void *dst, const void *src, uint64_t n,
                                 uint64_t *ticket, struct ig_errbuf *eb)
{
	return be_cpu__enqueue(b, false, dst, src, n, ticket, eb);
}

static int be_cpu_copy_d2h_async(struct be *b, void *dst, const void *src, uint64_t n,
                                 uint64_t *ticket, struct ig_errbuf *eb)
{
	return be_cpu__enqueue(b, true, dst, src, n, ticket, eb);
}

static bool be_cpu_xfer_done(struct be *b, uint64_t ticket)
{
	struct be_cpu *c = b->priv;
	bool done;

	if (!c || ticket == 0)
		return true;
	pthread_mutex_lock(&c->mu);
	done = ticket > c->issued || c->completed >= ticket;
	pthread_mutex_unlock(&c->mu);
	return done;
}

static int be_cpu_xfer_wait(struct be *b, uint64_t ticket, struct ig_errbuf *eb)
{
	struct be_cpu *c = b->priv;
	int rc = IG_E_OK;

	if (ticket == 0)
		return IG_E_OK;
	if (!c)
		return ig_errf(eb, IG_E_INVAL,
		               "wait for async copy #%" PRIu64 ": the backend is not open", ticket);
	pthread_mutex_lock(&c->mu);
	if (ticket > c->issued) {
		rc = ig_errf(eb, IG_E_INVAL,
		             "wait for async copy #%" PRIu64
		             ": no such ticket (the last issued is %" PRIu64 ")",
		             ticket, c->issued);
		goto out_unlock;
	}
	while (c->completed < ticket)
		pthread_cond_wait(&c->done_cv, &c->mu);
	if (c->failed && c->failed == ticket)
		rc = ig_errf(eb, c->fail.code, "%s", c->fail.msg);
	else if (c->failed && c->failed < ticket)
		rc = ig_errf(eb, c->fail.code, "async copy #%" PRIu64 " not run: %s", ticket,
		             c->fail.msg);
out_unlock:
	pthread_mutex_unlock(&c->mu);
	return rc;
}

static int be_cpu_xfer_wait_all(struct be *b, struct ig_errbuf *eb)
{
	struct be_cpu *c = b->priv;
	uint64_t last;

	if (!c)
		return IG_E_OK;
	pthread_mutex_lock(&c->mu);
	last = c->issued;
	pthread_mutex_unlock(&c->mu);
	return be_cpu_xfer_wait(b, last, eb);
}

/* The cpu backend's compute: the decoder of model_cpu.h on its kernels. */
static int be_cpu_round(struct be *b, const struct mdl *d, const struct mdl_step *steps,
                        uint32_t n_steps, enum mdesc_kv_format fmt, const struct kvpool *kv,
                        uint64_t context, float *logits, void *scratch, struct cpool *pool,
                        struct ig_errbuf *eb)
{
	(void)b;
	return mdl_forward_round(d, steps, n_steps, fmt, kv, context, logits, scratch, pool, eb);
}

const struct be_ops be_cpu_ops = {
    .abi = BE_ABI_VERSION,
    .name = "cpu",
    .granule = BE_CPU_GRANULE,
    .open = be_cpu_open,
    .close = be_cpu_close,
    .mem_info = be_cpu_mem_info,
    .alloc = be_cpu_alloc,
    .free = be_cpu_free,
    .copy_h2d = be_cpu_copy_h2d,
    .copy_d2h = be_cpu_copy_d2h,
    .copy_h2d_async = be_cpu_copy_h2d_async,
    .copy_d2h_async = be_cpu_copy_d2h_async,
    .xfer_done = be_cpu_xfer_done,
    .xfer_wait = be_cpu_xfer_wait,
    .xfer_wait_all = be_cpu_xfer_wait_all,
    .round = be_cpu_round,
};
