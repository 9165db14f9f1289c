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
#include "gpu-worker/backend/devmem.h"
#include "gpu-worker/backend/xfer.h"
#include "cpu_pool.h"
#include "model/mfile.h"
#include "expcache.h"
#include "model_cpu.h"
#include "model/seqimg.h"

#define BE_CPU_GRANULE 4096u

/* A model bound on the cpu backend: the decoder's tensors, the thread pool
 * its rounds run on, and what it carved of the caller's regions: the round
 * scratch (workspace), the device rows of logits (sampling) and the state
 * slots (lane_state). A round runs in passes of at most pass_tokens tokens
 * and logit_rows rows of logits; pass[] holds one pass's steps. */
struct be_cpu_model {
	struct mdl d;
	struct cpool *pool;
	void *scratch;
	uint32_t max_tokens;  /* a round's tokens at most ... */
	uint64_t context;     /* ... over sequences of this context at most */
	uint32_t pass_tokens; /* what the scratch holds */
	float *logits;        /* logit_rows x vocab, device memory */
	uint32_t logit_rows;
	struct be_step *pass; /* max_tokens steps (a step holds a token at least) */
	uint8_t *states;      /* n_states slots of slot_bytes, device memory */
	uint64_t slot_bytes;
	uint32_t n_states;
	bool *held;        /* n_states: slot i is a sequence's */
	struct xcache *xc; /* a MoE model's experts (docs/adr/0039), or NULL */
};

struct be_cpu {
	struct devmem mem; /* the simulated device's live allocations */
	struct xfer xf;    /* the transfer stream's books */

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
	devmem_init(&c->mem, "the simulated device");
	xfer_init(&c->xf, &(struct xfer_engine){be_cpu__start, be_cpu__ready, be_cpu__await, c});
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
	xfer_drain(&c->xf);
	pthread_mutex_lock(&c->mu);
	c->stop = true;
	pthread_cond_signal(&c->work_cv);
	pthread_mutex_unlock(&c->mu);
	pthread_join(c->thread, NULL);
	pthread_cond_destroy(&c->done_cv);
	pthread_cond_destroy(&c->work_cv);
	pthread_mutex_destroy(&c->mu);
	devmem_release(&c->mem);
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
	rc = devmem_reserve(&c->mem, eb);
	if (rc)
		return rc;
	*ptr = aligned_alloc(BE_CPU_GRANULE, (size_t)n);
	if (!*ptr)
		return ig_errf(eb, IG_E_NOMEM, "host memory for %llu simulated device bytes",
		               (unsigned long long)n);
	devmem_add(&c->mem, *ptr, n);
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
	xfer_drain(&c->xf); /* as cudaFree: no copy in flight may touch it */
	if (!devmem_remove(&c->mem, ptr)) {
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
	int rc = devmem_check_copy(c ? &c->mem : NULL, "copy", d2h, dst, src, n, &empty, eb);

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
	int rc = devmem_check_d2d(c ? &c->mem : NULL, dst, src, n, &empty, eb);

	if (!rc && !empty)
		memcpy(dst, src, (size_t)n);
	return rc;
}

static int be_cpu__enqueue(struct be *b, bool d2h, void *dst, const void *src, uint64_t n,
                           uint64_t *ticket, struct ig_errbuf *eb)
{
	struct be_cpu *c = b->priv;
	bool empty;

	if (!c)
		return devmem_check_copy(NULL, "async copy", d2h, dst, src, n, &empty, eb);
	return xfer_copy(&c->xf, &c->mem, b->fault_xfer, d2h, dst, src, n, ticket, eb);
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

	return !c || xfer_done(&c->xf, ticket);
}

static int be_cpu_xfer_wait(struct be *b, uint64_t ticket, struct ig_errbuf *eb)
{
	struct be_cpu *c = b->priv;

	if (ticket == 0)
		return IG_E_OK;
	if (!c)
		return ig_errf(eb, IG_E_INVAL,
		               "wait for async copy #%" PRIu64 ": the backend is not open", ticket);
	return xfer_wait(&c->xf, ticket, eb);
}

static int be_cpu_xfer_wait_all(struct be *b, struct ig_errbuf *eb)
{
	struct be_cpu *c = b->priv;

	return c ? xfer_wait_all(&c->xf, eb) : IG_E_OK;
}

static int be_cpu__img(struct be *b, enum xfer_kind kind, struct be_img *job, uint64_t *ticket,
                       struct ig_errbuf *eb)
{
	struct be_cpu *c = b->priv;

	if (!c)
		return ig_errf(eb, IG_E_INVAL, "image window: the backend is not open");
	return xfer_img(&c->xf, &c->mem, b->fault_xfer, kind, job, ticket, eb);
}

static int be_cpu_img_gather_async(struct be *b, struct be_img *job, uint64_t *ticket,
                                   struct ig_errbuf *eb)
{
	return be_cpu__img(b, XFER_GATHER, job, ticket, eb);
}

static int be_cpu_img_scatter_async(struct be *b, struct be_img *job, uint64_t *ticket,
                                    struct ig_errbuf *eb)
{
	return be_cpu__img(b, XFER_SCATTER, job, ticket, eb);
}

/* ---- the model and its sequences: the decoder of model_cpu.h ------------ */

static uint64_t be_cpu__align(uint64_t n)
{
	return (n + 63u) & ~(uint64_t)63u;
}

/* A state slot's bytes: the linear states, 64-byte aligned, and never 0 (a
 * model without linear layers still gives each sequence a slot of its own,
 * so slots count sequences alike on every model). */
static uint64_t be_cpu__slot_bytes(const struct mdesc *m)
{
	struct mdesc_lin_state ls;
	uint64_t n;

	mdesc_lin_state(m, &ls);
	n = be_cpu__align(ls.bytes);
	return n ? n : 64u;
}

/* The one place the regions' needs are worked out: what model_needs says
 * and what model_bind checks. */
static void be_cpu__needs(const struct mdesc *m, const struct be_bind_opts *o, struct be_needs *n)
{
	uint32_t tokens = o->max_round_tokens ? o->max_round_tokens : 1;
	uint32_t states = o->states ? o->states : 1;
	uint64_t row = (uint64_t)m->vocab * sizeof(float);

	*n = (struct be_needs){
	    .workspace_min = be_cpu__align(mdl_scratch_bytes(m, 1, o->context)),
	    .workspace_one_pass = be_cpu__align(mdl_scratch_bytes(m, tokens, o->context)),
	    .sampling_min = row,
	    .sampling_one_pass = row * states,
	    .lane_state = (uint64_t)states * be_cpu__slot_bytes(m),
	};
}

static int be_cpu_model_needs(struct be *b, const struct mfile *f, const struct be_bind_opts *o,
                              struct be_needs *n, struct ig_errbuf *eb)
{
	(void)b;
	(void)eb;
	be_cpu__needs(&f->desc, o, n);
	return IG_E_OK;
}

static void be_cpu_model_release(struct be *b, struct be_model *m)
{
	struct be_cpu_model *cm = m->impl;

	(void)b;
	if (!cm)
		return;
	cpool_destroy(cm->pool);
	free(cm->pass);
	free(cm->held);
	xc_destroy(cm->xc);
	mdl_release(&cm->d);
	free(cm);
	memset(m, 0, sizeof(*m));
}

/* A region of the caller's must be device memory of this backend. */
static int be_cpu__region_ok(const struct be_cpu *c, const char *line, const struct be_region *r,
                             uint64_t least, struct ig_errbuf *eb)
{
	return devmem_check_region(&c->mem, "cpu", line, r->base, r->bytes, least, eb);
}

/* Carve the caller's regions: the scratch of as many tokens a pass as the
 * workspace holds, as many rows of logits as sampling holds, o->states state
 * slots. */
static int be_cpu__carve(struct be *b, struct be_cpu_model *cm, const struct be_bind_opts *o,
                         struct ig_errbuf *eb)
{
	const struct be_cpu *c = b->priv;
	const struct mdesc *m = cm->d.m;
	uint64_t row = (uint64_t)m->vocab * sizeof(float);
	uint32_t lo = 1, hi = cm->max_tokens;
	struct be_needs n;
	int rc;

	if (o->states == 0)
		return ig_errf(eb, IG_E_INVAL,
		               "a bound model needs 1 state slot at least; given 0");
	be_cpu__needs(m, o, &n);
	cm->slot_bytes = be_cpu__slot_bytes(m);
	cm->n_states = o->states;
	rc = be_cpu__region_ok(c, "workspace", &o->workspace, n.workspace_min, eb);
	if (!rc)
		rc = be_cpu__region_ok(c, "sampling", &o->sampling, n.sampling_min, eb);
	if (!rc)
		rc = be_cpu__region_ok(c, "lane_state", &o->lane_state, n.lane_state, eb);
	if (rc)
		return rc;
	/* the most tokens whose scratch fits (it grows with the tokens) */
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo + 1) / 2;

		if (be_cpu__align(mdl_scratch_bytes(m, mid, cm->context)) <= o->workspace.bytes)
			lo = mid;
		else
			hi = mid - 1;
	}
	cm->pass_tokens = lo;
	cm->scratch = o->workspace.base;
	cm->logits = o->sampling.base;
	cm->logit_rows =
	    o->sampling.bytes / row > UINT32_MAX ? UINT32_MAX : (uint32_t)(o->sampling.bytes / row);
	cm->states = o->lane_state.base;
	cm->pass = calloc(cm->max_tokens, sizeof(*cm->pass));
	cm->held = calloc(cm->n_states, sizeof(*cm->held));
	if (!cm->pass || !cm->held)
		return ig_errf(eb, IG_E_NOMEM, "host memory for the books of %u state slots",
		               cm->n_states);
	return IG_E_OK;
}

static int be_cpu_model_bind(struct be *b, struct mfile *f, const struct be_placer *placer,
                             const struct be_bind_opts *o, struct be_model *m, struct ig_errbuf *eb)
{
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
	cm->max_tokens = o->max_round_tokens ? o->max_round_tokens : 1;
	cm->context = o->context;
	rc = be_cpu__carve(b, cm, o, eb);
	if (!rc)
		rc = cpool_create(&cm->pool, o->threads ? o->threads : 1, eb);
	/* a MoE model's experts where the plan put them (docs/adr/0039) */
	if (!rc && cm->d.m->family == MDESC_MOE && o->expert_cache.base) {
		rc = be_cpu__region_ok(b->priv, "expert_cache", &o->expert_cache, 1, eb);
		if (!rc && o->residency.base)
			rc = be_cpu__region_ok(b->priv, "residency", &o->residency, 1, eb);
		if (!rc)
			rc = xc_create(
			    &cm->xc, b, f, o->expert_cache, o->residency, o->experts_offloaded,
			    &(struct xc_pins){o->pinned_expert_bytes, o->expert_counts,
			                      o->states * (f->desc.top_k + f->desc.prefetch_width)},
			    eb);
		if (!rc)
			cm->d.experts = xc_experts(cm->xc);
	}
	if (rc) {
		be_cpu_model_release(b, m);
		return rc;
	}
	m->m = cm->d.m;
	{
		struct mdesc_lin_state ls;

		mdesc_lin_state(cm->d.m, &ls);
		m->state_bytes = ls.bytes;
	}
	m->scratch_bytes = mdl_scratch_bytes(cm->d.m, cm->pass_tokens, cm->context);
	m->pass_tokens = cm->pass_tokens;
	m->logit_rows = cm->logit_rows;
	m->states = cm->n_states;
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
	struct mdesc_lin_state ls;

	(void)b;
	for (uint32_t i = 0; i < cm->n_states; i++) {
		if (cm->held[i])
			continue;
		cm->held[i] = true;
		s->state = cm->states + (uint64_t)i * cm->slot_bytes;
		mdesc_lin_state(cm->d.m, &ls);
		memset(s->state, 0, (size_t)ls.bytes);
		s->pos = 0;
		return IG_E_OK;
	}
	return ig_errf(eb, IG_E_NOSPACE,
	               "every one of the %u state slots (the plan's lane_state line) is held",
	               cm->n_states);
}

static void be_cpu_seq_release(struct be *b, const struct be_model *m, struct be_seq *s)
{
	struct be_cpu_model *cm = m->impl;
	uint64_t at;

	(void)b;
	if (!s->state)
		return;
	at = (uint64_t)((uint8_t *)s->state - cm->states);
	if ((uint8_t *)s->state >= cm->states && at % cm->slot_bytes == 0 &&
	    at / cm->slot_bytes < cm->n_states)
		cm->held[at / cm->slot_bytes] = false;
	s->state = NULL;
}

static void be_cpu_seq_image(struct be *b, const struct be_model *m, const struct be_seq *s,
                             const struct kvpool *kv, enum mdesc_kv_format fmt, uint32_t last_token,
                             uint64_t sampler_bytes, struct seqimg_header *h, void **pages_out)
{
	const struct be_cpu_model *cm = m->impl;

	(void)b;
	mdl_seq_image(&cm->d, s, kv, fmt, last_token, sampler_bytes, h, pages_out);
}

/* The next pass of a round from step *i, token *off on: at most pass_tokens
 * tokens and logit_rows steps that want logits; a step cut by the pass's end
 * goes on in the next, the logits only with its last piece. Returns the
 * pass's steps (in cm->pass) and its rows of logits in *rows. */
static uint32_t be_cpu__pass(struct be_cpu_model *cm, const struct be_step *steps, uint32_t n_steps,
                             uint32_t *i, uint32_t *off, uint32_t *rows)
{
	uint32_t n = 0, toks = 0;

	*rows = 0;
	while (*i < n_steps && toks < cm->pass_tokens && *rows < cm->logit_rows) {
		const struct be_step *st = &steps[*i];
		uint32_t left = st->n_tok - *off;
		uint32_t take = left < cm->pass_tokens - toks ? left : cm->pass_tokens - toks;
		bool last = take == left;

		cm->pass[n++] =
		    (struct be_step){st->s, st->tokens + *off, take, last && st->want_logits};
		toks += take;
		*rows += last && st->want_logits;
		if (!last) {
			*off += take;
			break; /* the pass is full */
		}
		(*i)++;
		*off = 0;
	}
	return n;
}

/* The cpu backend's compute: the decoder of model_cpu.h on its kernels, in
 * passes when the workspace holds fewer tokens than the round (the same
 * bits: model_cpu.h), each pass's logits copied out of the device rows. */
static int be_cpu_round(struct be *b, const struct be_model *m, const struct be_step *steps,
                        uint32_t n_steps, enum mdesc_kv_format fmt, const struct kvpool *kv,
                        uint64_t context, float *logits, struct ig_errbuf *eb)
{
	struct be_cpu_model *cm = m->impl;
	size_t vocab = cm->d.m->vocab;
	uint64_t tokens = 0, out = 0;
	uint32_t i = 0, off = 0;
	int rc;

	(void)b;
	for (uint32_t k = 0; k < n_steps; k++)
		tokens += steps[k].n_tok;
	if (tokens > cm->max_tokens || context > cm->context)
		return ig_errf(eb, IG_E_INVAL,
		               "a round of %" PRIu64 " tokens over a context of %" PRIu64
		               ": the model was bound for rounds of at most %u tokens and a "
		               "context of %" PRIu64,
		               tokens, context, cm->max_tokens, cm->context);
	rc = mdl_check_round(&cm->d, steps, n_steps, context, eb);
	while (!rc && i < n_steps) {
		uint32_t rows, n = be_cpu__pass(cm, steps, n_steps, &i, &off, &rows);

		rc = mdl_forward_round(&cm->d, cm->pass, n, fmt, kv, context, cm->logits,
		                       cm->scratch, cm->pool, eb);
		if (!rc && rows) {
			memcpy(logits + out * vocab, cm->logits,
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
    .copy_h2d_async = be_cpu_copy_h2d_async,
    .copy_d2h_async = be_cpu_copy_d2h_async,
    .xfer_done = be_cpu_xfer_done,
    .xfer_wait = be_cpu_xfer_wait,
    .xfer_wait_all = be_cpu_xfer_wait_all,
    .img_gather_async = be_cpu_img_gather_async,
    .img_scatter_async = be_cpu_img_scatter_async,
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
