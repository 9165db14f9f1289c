/*
 * be_cpu.c - the cpu backend's table entries: a simulated device of the
 * plan's free memory, in host memory, its copy engine, and the decoder of
 * model_cpu.h on its kernels. Allocations are counted against the simulated
 * device as a GPU counts them (4 KiB granules), so every plan rule and
 * every refusal runs on a machine without a GPU; the books of them and the
 * copies' checks are the neutral devmem.h's.
 *
 * The copy engine under the neutral transfer stream (xfer.h: tickets, ring,
 * depth, sticky failure, faults) is one thread running the stream's jobs in
 * order: plain copies (memcpy) and a move's image windows (gathered or
 * scattered with their checksums, seqimg.h): the cpu backend's copy engine,
 * beside the round's compute as a GPU's copy engine runs beside its kernels.
 * Invariants, all under `mu`:
 *
 *   done <= started; the job of ticket t (done < t <= started) is
 *   job[(t - 1) % DEPTH] (the stream's ring entry, unchanged until reaped)
 *   broken: a job failed; every later one is not run and fails too
 *
 * The thread takes ticket done + 1, runs it with `mu` released (callers
 * asking ready() are never held up by a memcpy), then sets `done` under
 * `mu`: whoever reads `done >= t` under `mu` also sees the bytes of t.
 * Nobody spins: the thread sleeps on `work_cv`, waiters on `done_cv`.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu-worker/backend/backend.h"
#include "gpu-worker/backend/bind.h"
#include "gpu-worker/backend/devmem.h"
#include "gpu-worker/backend/expcache.h"
#include "gpu-worker/backend/xfer.h"
#include "cpu_pool.h"
#include "model/mfile.h"
#include "model_cpu.h"
#include "model/seqimg.h"

#define BE_CPU_GRANULE 4096u

/* A model bound on the cpu backend: the decoder's tensors, the thread pool
 * its rounds run on, what it carved of the caller's regions (bind.h), and a
 * MoE model's expert cache. */
struct be_cpu_model {
	struct mdl d;
	struct cpool *pool;
	struct bind bd;
	struct xcache *xc;      /* a MoE model's experts (docs/adr/0039), or NULL */
	struct lffn_experts xp; /* the feed-forward's way to them (over xc) */
};

struct be_cpu {
	/* first: the stream's table entries are xfer.c's over them. mem: the
	 * simulated device's live allocations */
	struct xfer_books books;

	/* the copy engine */
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t work_cv; /* the thread: a job or `stop` */
	pthread_cond_t done_cv; /* waiters: `done` moved */
	const struct xfer_job *job[BE_XFER_DEPTH];
	int rc[BE_XFER_DEPTH]; /* each job's result */
	uint64_t started;      /* the last ticket started */
	uint64_t done;         /* the last ticket done */
	bool broken;           /* a job failed: run nothing more */
	bool stop;             /* close: finish the jobs started, then exit */
};

static uint64_t be_cpu__round(uint64_t n)
{
	return (n + BE_CPU_GRANULE - 1) / BE_CPU_GRANULE * BE_CPU_GRANULE;
}

static void *be_cpu__xfer_main(void *arg)
{
	struct be_cpu *c = arg;

	pthread_mutex_lock(&c->mu);
	for (;;) {
		const struct xfer_job *j;
		uint64_t t;
		bool run;
		int rc = IG_E_OK;

		while (c->done == c->started && !c->stop)
			pthread_cond_wait(&c->work_cv, &c->mu);
		if (c->done == c->started)
			break; /* stopped, and drained */
		t = c->done + 1;
		j = c->job[(t - 1) % BE_XFER_DEPTH];
		run = !c->broken && !j->fault; /* after a failure, later jobs are not run */
		pthread_mutex_unlock(&c->mu);

		if (run) {
			if (j->kind == XFER_GATHER)
				seqimg_write_window_sum(j->img->w, j->img->dst, j->img->window,
				                        &j->img->n, &j->img->sum);
			else if (j->kind == XFER_SCATTER)
				j->img->rc = seqimg_read_windows_checked(
				    j->img->r, j->img->src, j->img->k0, j->img->count,
				    j->img->window, j->img->image_bytes, j->img->sums, j->img->why,
				    sizeof(j->img->why));
			else if (j->n)
				memcpy(j->dst, j->src, (size_t)j->n);
		} else {
			rc = IG_E_IO; /* writes nothing, stops the engine */
		}

		pthread_mutex_lock(&c->mu);
		c->broken |= rc != IG_E_OK;
		c->rc[(t - 1) % BE_XFER_DEPTH] = rc;
		c->done = t;
		pthread_cond_broadcast(&c->done_cv);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

static void be_cpu__start(void *ctx, const struct xfer_job *j, uint64_t t)
{
	struct be_cpu *c = ctx;

	pthread_mutex_lock(&c->mu);
	c->job[(t - 1) % BE_XFER_DEPTH] = j;
	c->started = t;
	pthread_cond_signal(&c->work_cv);
	pthread_mutex_unlock(&c->mu);
}

static bool be_cpu__ready(void *ctx, uint64_t t)
{
	struct be_cpu *c = ctx;
	bool ready;

	pthread_mutex_lock(&c->mu);
	ready = c->done >= t;
	pthread_mutex_unlock(&c->mu);
	return ready;
}

static int be_cpu__await(void *ctx, uint64_t t, struct ig_errbuf *eb)
{
	struct be_cpu *c = ctx;
	int rc;

	pthread_mutex_lock(&c->mu);
	while (c->done < t)
		pthread_cond_wait(&c->done_cv, &c->mu);
	rc = c->rc[(t - 1) % BE_XFER_DEPTH];
	pthread_mutex_unlock(&c->mu);
	if (rc)
		ig_errf(eb, rc, "not run: an earlier job failed");
	return rc;
}

static int be_cpu_open(struct be *b, uint64_t sim_bytes, struct ig_errbuf *eb)
{
	struct be_cpu *c = calloc(1, sizeof(*c));
	int e, rc;

	if (!c)
		return ig_errf(eb, IG_E_NOMEM, "host memory for the cpu backend's state");
	devmem_init(&c->books.mem, "the simulated device");
	xfer_init(&c->books.xf, &(struct xfer_engine){be_cpu__start, be_cpu__ready, be_cpu__await, c});
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
	xfer_drain(&c->books.xf);
	pthread_mutex_lock(&c->mu);
	c->stop = true;
	pthread_cond_signal(&c->work_cv);
	pthread_mutex_unlock(&c->mu);
	pthread_join(c->thread, NULL);
	pthread_cond_destroy(&c->done_cv);
	pthread_cond_destroy(&c->work_cv);
	pthread_mutex_destroy(&c->mu);
	devmem_release(&c->books.mem);
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
	int rc;

	if (!c)
		return ig_errf(eb, IG_E_INVAL,
		               "device allocation of %" PRIu64 " bytes: the backend is not open",
		               bytes);
	if (n > b->capacity - b->used)
		return ig_errf(eb, IG_E_NOMEM,
		               "the simulated device has %llu bytes free of %llu; asked for %llu",
		               (unsigned long long)(b->capacity - b->used),
		               (unsigned long long)b->capacity, (unsigned long long)n);
	rc = devmem_reserve(&c->books.mem, eb);
	if (rc)
		return rc;
	*ptr = aligned_alloc(BE_CPU_GRANULE, (size_t)n);
	if (!*ptr)
		return ig_errf(eb, IG_E_NOMEM, "host memory for %llu simulated device bytes",
		               (unsigned long long)n);
	devmem_add(&c->books.mem, *ptr, n);
	b->used += n;
	return IG_E_OK;
}

static void be_cpu_free(struct be *b, void *ptr, uint64_t bytes)
{
	struct be_cpu *c = b->priv;

	if (!ptr)
		return;
	if (!c) { /* after close: the books are gone, the memory is still ours */
		free(ptr);
		return;
	}
	xfer_drain(&c->books.xf); /* as cudaFree: no copy in flight may touch it */
	if (!devmem_remove(&c->books.mem, ptr)) {
		/* style rule 5: a device error in the worker may abort */
		fprintf(stderr, "be_cpu_free: %p is not an allocation of the simulated device\n",
		        ptr);
		abort();
	}
	free(ptr);
	b->used -= be_cpu__round(bytes ? bytes : 1);
}

/* Host memory (plain on the cpu backend: nothing to pin). */
static int be_cpu_host_alloc(struct be *b, uint64_t bytes, void **ptr, struct ig_errbuf *eb)
{
	(void)b;
	*ptr = aligned_alloc(BE_CPU_GRANULE, (size_t)be_cpu__round(bytes ? bytes : 1));
	if (!*ptr)
		return ig_errf(eb, IG_E_NOMEM, "no host memory for %" PRIu64 " bytes", bytes);
	return IG_E_OK;
}

static void be_cpu_host_free(struct be *b, void *ptr, uint64_t bytes)
{
	(void)b;
	(void)bytes;
	free(ptr);
}

static int be_cpu__copy(struct be *b, bool d2h, void *dst, const void *src, uint64_t n,
                        struct ig_errbuf *eb)
{
	struct be_cpu *c = b->priv;
	bool empty;
	int rc = devmem_check_copy(c ? &c->books.mem : NULL, "copy", d2h, dst, src, n, &empty, eb);

	if (!rc && !empty)
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

static int be_cpu_copy_d2d(struct be *b, void *dst, const void *src, uint64_t n,
                           struct ig_errbuf *eb)
{
	struct be_cpu *c = b->priv;
	bool empty;
	int rc = devmem_check_d2d(c ? &c->books.mem : NULL, dst, src, n, &empty, eb);

	if (!rc && !empty)
		memcpy(dst, src, (size_t)n);
	return rc;
}

/* ---- the model and its sequences: the decoder of model_cpu.h ------------ */

static uint64_t be_cpu__scratch(const struct mdesc *m, uint32_t n_tok, uint64_t context)
{
	return mdl_scratch_bytes(m, n_tok, context);
}

static int be_cpu_model_needs(struct be *b, const struct mfile *f, const struct be_bind_opts *o,
                              struct be_needs *n, struct ig_errbuf *eb)
{
	(void)b;
	(void)eb;
	bind_needs(&f->desc, o, be_cpu__scratch, n);
	return IG_E_OK;
}

static void be_cpu_model_release(struct be *b, struct be_model *m)
{
	struct be_cpu_model *cm = m->impl;

	(void)b;
	if (!cm)
		return;
	cpool_destroy(cm->pool);
	bind_release(&cm->bd);
	xc_destroy(cm->xc);
	mdl_release(&cm->d);
	free(cm);
	memset(m, 0, sizeof(*m));
}

/* The feed-forward's experts (layer_ffn.h) read where the neutral expert
 * cache keeps them: its views are the kernels' weights. */
static int be_cpu__xp_prepare(void *ctx, uint32_t layer, const uint32_t *ids, uint32_t n,
                              struct ig_errbuf *eb)
{
	return xc_prepare(ctx, layer, ids, n, eb);
}

static void be_cpu__xp_get(void *ctx, uint32_t layer, uint32_t e, struct cop_w w[3])
{
	struct be_weight v[3];

	xc_get(ctx, layer, e, v);
	for (int i = 0; i < 3; i++)
		w[i] = (struct cop_w){v[i].p, v[i].type};
}

static void be_cpu__xp_prefetch(void *ctx, uint32_t layer, const uint32_t *ids, uint32_t n)
{
	xc_prefetch(ctx, layer, ids, n);
}

static int be_cpu_model_bind(struct be *b, struct mfile *f, const struct be_placer *placer,
                             const struct be_bind_opts *o, struct be_model *m, struct ig_errbuf *eb)
{
	struct be_cpu *c = b->priv;
	struct be_cpu_model *cm = calloc(1, sizeof(*cm));
	int rc;

	memset(m, 0, sizeof(*m));
	if (!cm)
		return ig_errf(eb, IG_E_NOMEM, "host memory for a bound model");
	m->impl = cm;
	rc = mdl_bind_placed(&cm->d, f,
	                     placer ? &(struct mdl_placer){placer->place, placer->ctx} : NULL, eb);
	if (rc) {
		free(cm);
		m->impl = NULL;
		return rc;
	}
	cm->d.kv_sinks = o->kv_window ? o->kv_sinks : 0;
	cm->d.kv_window = o->kv_window;
	rc = bind_carve(&cm->bd, &c->books.mem, "cpu", cm->d.m, o, be_cpu__scratch, eb);
	if (!rc)
		rc = cpool_create(&cm->pool, o->threads ? o->threads : 1, eb);
	/* a MoE model's experts where the plan put them (docs/adr/0039) */
	if (!rc && cm->d.m->family == MDESC_MOE && o->expert_cache.base) {
		rc = devmem_check_region(&c->books.mem, "cpu", "expert_cache", o->expert_cache.base,
		                         o->expert_cache.bytes, 1, eb);
		if (!rc && o->residency.base)
			rc = devmem_check_region(&c->books.mem, "cpu", "residency", o->residency.base,
			                         o->residency.bytes, 1, eb);
		if (!rc)
			rc = xc_create(
			    &cm->xc, b, f, o->expert_cache, o->residency, o->experts_offloaded,
			    &(struct xc_pins){o->pinned_expert_bytes, o->expert_counts,
			                      o->states * (f->desc.top_k + f->desc.prefetch_width)},
			    eb);
		if (!rc) {
			cm->xp = (struct lffn_experts){be_cpu__xp_prepare, be_cpu__xp_get,
			                               be_cpu__xp_prefetch, cm->xc};
			cm->d.experts = &cm->xp;
		}
	}
	if (rc) {
		be_cpu_model_release(b, m);
		return rc;
	}
	m->m = cm->d.m;
	m->state_bytes = mdl_state_bytes(&cm->d);
	m->scratch_bytes = mdl_scratch_bytes(cm->d.m, cm->bd.pass_tokens, cm->bd.context);
	m->pass_tokens = cm->bd.pass_tokens;
	m->logit_rows = cm->bd.logit_rows;
	m->states = cm->bd.n_states;
	m->placed_bytes = cm->d.placed_bytes;
	m->threads = (uint32_t)cpool_threads(cm->pool);
	return IG_E_OK;
}

static void be_cpu_expert_stats(struct be *b, const struct be_model *m, struct be_expert_stats *st)
{
	const struct be_cpu_model *cm = m->impl;

	(void)b;
	if (cm && cm->xc)
		xc_stats(cm->xc, st);
	else
		memset(st, 0, sizeof(*st));
}

static uint64_t be_cpu_expert_counts(struct be *b, const struct be_model *m, uint64_t *out,
                                     uint64_t n)
{
	const struct be_cpu_model *cm = m->impl;

	(void)b;
	return cm && cm->xc ? xc_counts(cm->xc, out, n) : 0;
}

static int be_cpu_seq_init(struct be *b, const struct be_model *m, struct be_seq *s,
                           struct ig_errbuf *eb)
{
	struct be_cpu_model *cm = m->impl;
	int rc = bind_seq_take(&cm->bd, s, eb);

	(void)b;
	if (!rc)
		memset(s->state, 0, (size_t)m->state_bytes);
	return rc;
}

static void be_cpu_seq_release(struct be *b, const struct be_model *m, struct be_seq *s)
{
	struct be_cpu_model *cm = m->impl;

	(void)b;
	bind_seq_give(&cm->bd, s);
}

static void be_cpu_seq_image(struct be *b, const struct be_model *m, const struct be_seq *s,
                             const struct kvpool *kv, enum mdesc_kv_format fmt, uint32_t last_token,
                             uint64_t sampler_bytes, struct seqimg_header *h, void **pages_out)
{
	(void)b;
	bind_seq_image(m->m, m->state_bytes, s, kv, fmt, last_token, sampler_bytes, h, pages_out);
}

/* The cpu backend's compute: the decoder of model_cpu.h on its kernels, in
 * the passes of bind.h (the same bits: backend.h's exactness contract),
 * each pass's logits copied out of the device rows. */
static int be_cpu_round(struct be *b, const struct be_model *m, const struct be_step *steps,
                        uint32_t n_steps, enum mdesc_kv_format fmt, const struct kvpool *kv,
                        uint64_t context, float *logits, struct ig_errbuf *eb)
{
	struct be_cpu_model *cm = m->impl;
	size_t vocab = cm->d.m->vocab;
	uint64_t out = 0;
	uint32_t i = 0, off = 0;
	int rc;

	cm->d.trace = b->trace;
	rc = bind_check_round(&cm->bd, steps, n_steps, context, eb);
	while (!rc && i < n_steps) {
		uint32_t rows, n = bind_pass(&cm->bd, steps, n_steps, &i, &off, &rows);

		rc = mdl_forward_round(&cm->d, cm->bd.pass, n, fmt, kv, context, cm->bd.logits,
		                       cm->bd.scratch, cm->pool, eb);
		if (!rc && rows) {
			memcpy(logits + out * vocab, cm->bd.logits,
			       (size_t)rows * vocab * sizeof(float));
			out += rows;
		}
	}
	return rc;
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
    .host_alloc = be_cpu_host_alloc,
    .host_free = be_cpu_host_free,
    .copy_h2d = be_cpu_copy_h2d,
    .copy_d2h = be_cpu_copy_d2h,
    .copy_d2d = be_cpu_copy_d2d,
    .copy_h2d_async = xfer_be_copy_h2d_async,
    .copy_d2h_async = xfer_be_copy_d2h_async,
    .xfer_done = xfer_be_done,
    .xfer_wait = xfer_be_wait,
    .xfer_wait_all = xfer_be_wait_all,
    .img_gather_async = xfer_be_img_gather_async,
    .img_scatter_async = xfer_be_img_scatter_async,
    .model_bind = be_cpu_model_bind,
    .model_needs = be_cpu_model_needs,
    .model_release = be_cpu_model_release,
    .seq_init = be_cpu_seq_init,
    .seq_release = be_cpu_seq_release,
    .seq_image = be_cpu_seq_image,
    .expert_stats = be_cpu_expert_stats,
    .expert_counts = be_cpu_expert_counts,
    .round = be_cpu_round,
};
