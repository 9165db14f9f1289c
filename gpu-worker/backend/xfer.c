/* xfer.c - the transfer stream's books (see xfer.h). */
#include "xfer.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

void xfer_init(struct xfer *x, const struct xfer_engine *eng)
{
	memset(x, 0, sizeof(*x));
	x->eng = *eng;
}

static const struct xfer_job *xfer__job(const struct xfer *x, uint64_t t)
{
	return &x->ring[(t - 1) % BE_XFER_DEPTH];
}

/* See ticket reaped + 1 done (waiting for it when `block`): its failure
 * recorded when it is the first. False when it is not done and `block` is
 * not set. */
static bool xfer__reap(struct xfer *x, bool block)
{
	uint64_t t = x->reaped + 1;
	const struct xfer_job *j = xfer__job(x, t);
	struct ig_errbuf eb = {0};
	int rc;

	if (!block && !x->eng.ready(x->eng.ctx, t))
		return false;
	rc = x->eng.wait(x->eng.ctx, t, &eb);
	if (rc && !x->failed) {
		char desc[160];

		devmem_describe(desc, sizeof(desc), "async copy", t, j->d2h, j->dst, j->src, j->n);
		if (j->fault)
			ig_errf(&x->fail, IG_E_IO, "%s: injected fault (struct be.fault_xfer)",
			        desc);
		else
			ig_errf(&x->fail, rc, "%s: %s", desc, eb.msg);
		x->failed = t;
	}
	x->reaped = t;
	return true;
}

/* Every ticket the engine has completed, reaped. */
static void xfer__reap_ready(struct xfer *x)
{
	while (x->reaped < x->issued && xfer__reap(x, false))
		;
}

void xfer_drain(struct xfer *x)
{
	while (x->reaped < x->issued)
		xfer__reap(x, true);
}

/* Put job `j` (checked) on the ring and start it: its ticket in *ticket. */
static int xfer__push(struct xfer *x, uint64_t fault_ticket, struct xfer_job j, uint64_t *ticket,
                      struct ig_errbuf *eb)
{
	char desc[160];
	uint64_t t;

	xfer__reap_ready(x);
	if (x->failed) {
		devmem_describe(desc, sizeof(desc), "async copy", 0, j.d2h, j.dst, j.src, j.n);
		return ig_errf(eb, x->fail.code,
		               "%s: refused, the transfer stream stopped at the failure of %s",
		               desc, x->fail.msg);
	}
	if (x->issued - x->reaped >= BE_XFER_DEPTH) {
		devmem_describe(desc, sizeof(desc), "async copy", 0, j.d2h, j.dst, j.src, j.n);
		return ig_errf(
		    eb, IG_E_BUSY,
		    "%s: the transfer stream has %u copies in flight, its depth; wait for "
		    "ticket %" PRIu64 " and enqueue again",
		    desc, BE_XFER_DEPTH, x->reaped + 1);
	}
	t = ++x->issued;
	j.fault = fault_ticket == t;
	x->ring[(t - 1) % BE_XFER_DEPTH] = j;
	x->eng.start(x->eng.ctx, xfer__job(x, t), t);
	*ticket = t;
	return IG_E_OK;
}

int xfer_copy(struct xfer *x, const struct devmem *mem, uint64_t fault_ticket, bool d2h, void *dst,
              const void *src, uint64_t n, uint64_t *ticket, struct ig_errbuf *eb)
{
	bool empty;
	int rc = devmem_check_copy(mem, "async copy", d2h, dst, src, n, &empty, eb);

	if (rc)
		return rc;
	return xfer__push(
	    x, fault_ticket,
	    (struct xfer_job){.kind = XFER_COPY, .dst = dst, .src = src, .n = n, .d2h = d2h},
	    ticket, eb);
}

int xfer_img(struct xfer *x, const struct devmem *mem, uint64_t fault_ticket, enum xfer_kind kind,
             struct be_img *job, uint64_t *ticket, struct ig_errbuf *eb)
{
	bool gather = kind == XFER_GATHER;
	const void *host = gather ? (const void *)job->dst : job->src;
	uint64_t n = gather ? job->window : (uint64_t)job->count * job->window;

	/* a scatter's last window may be short: its range ends with the image */
	if (!gather && job->image_bytes && (uint64_t)job->k0 * job->window < job->image_bytes &&
	    job->image_bytes - (uint64_t)job->k0 * job->window < n)
		n = job->image_bytes - (uint64_t)job->k0 * job->window;

	if (!host || !job->window || (gather ? !job->w : !job->r || !job->sums || !job->count))
		return ig_errf(eb, IG_E_INVAL, "image window: %s without its parts",
		               gather ? "a gather" : "a scatter");
	if (devmem_touches(mem, host, n))
		return ig_errf(eb, IG_E_INVAL,
		               "image window %s %p: the host window is device memory",
		               gather ? "gather to" : "scatter from", host);
	job->rc = IG_E_OK;
	job->why[0] = '\0';
	return xfer__push(x, fault_ticket,
	                  (struct xfer_job){.kind = kind, .d2h = gather, .img = job}, ticket, eb);
}

bool xfer_done(struct xfer *x, uint64_t ticket)
{
	if (ticket == 0 || ticket > x->issued || ticket <= x->reaped)
		return true;
	/* in order: ticket done implies every earlier one */
	return x->eng.ready(x->eng.ctx, ticket);
}

int xfer_wait(struct xfer *x, uint64_t ticket, struct ig_errbuf *eb)
{
	if (ticket == 0)
		return IG_E_OK;
	if (ticket > x->issued)
		return ig_errf(eb, IG_E_INVAL,
		               "wait for async copy #%" PRIu64
		               ": no such ticket (the last issued is %" PRIu64 ")",
		               ticket, x->issued);
	while (x->reaped < ticket)
		xfer__reap(x, true);
	if (x->failed && x->failed == ticket)
		return ig_errf(eb, x->fail.code, "%s", x->fail.msg);
	if (x->failed && x->failed < ticket)
		return ig_errf(eb, x->fail.code, "async copy #%" PRIu64 " not run: %s", ticket,
		               x->fail.msg);
	return IG_E_OK;
}

int xfer_wait_all(struct xfer *x, struct ig_errbuf *eb)
{
	return xfer_wait(x, x->issued, eb);
}

/* ---- the stream's table entries over a backend's books ------------------ */

static int xfer__enqueue(struct be *b, bool d2h, void *dst, const void *src, uint64_t n,
                         uint64_t *ticket, struct ig_errbuf *eb)
{
	struct xfer_books *k = b->priv;

	if (!k)
		return ig_errf(eb, IG_E_INVAL,
		               "async copy of %" PRIu64 " bytes: the backend is not open", n);
	return xfer_copy(&k->xf, &k->mem, b->fault_xfer, d2h, dst, src, n, ticket, eb);
}

int xfer_be_copy_h2d_async(struct be *b, void *dst, const void *src, uint64_t n,
                           uint64_t *ticket, struct ig_errbuf *eb)
{
	return xfer__enqueue(b, false, dst, src, n, ticket, eb);
}

int xfer_be_copy_d2h_async(struct be *b, void *dst, const void *src, uint64_t n,
                           uint64_t *ticket, struct ig_errbuf *eb)
{
	return xfer__enqueue(b, true, dst, src, n, ticket, eb);
}

bool xfer_be_done(struct be *b, uint64_t ticket)
{
	struct xfer_books *k = b->priv;

	return !k || xfer_done(&k->xf, ticket);
}

int xfer_be_wait(struct be *b, uint64_t ticket, struct ig_errbuf *eb)
{
	struct xfer_books *k = b->priv;

	if (ticket == 0)
		return IG_E_OK;
	if (!k)
		return ig_errf(eb, IG_E_INVAL,
		               "wait for async copy #%" PRIu64 ": the backend is not open", ticket);
	return xfer_wait(&k->xf, ticket, eb);
}

int xfer_be_wait_all(struct be *b, struct ig_errbuf *eb)
{
	struct xfer_books *k = b->priv;

	return k ? xfer_wait_all(&k->xf, eb) : IG_E_OK;
}

static int xfer__img(struct be *b, enum xfer_kind kind, struct be_img *job, uint64_t *ticket,
                     struct ig_errbuf *eb)
{
	struct xfer_books *k = b->priv;

	if (!k)
		return ig_errf(eb, IG_E_INVAL, "image window: the backend is not open");
	return xfer_img(&k->xf, &k->mem, b->fault_xfer, kind, job, ticket, eb);
}

int xfer_be_img_gather_async(struct be *b, struct be_img *job, uint64_t *ticket,
                             struct ig_errbuf *eb)
{
	return xfer__img(b, XFER_GATHER, job, ticket, eb);
}

int xfer_be_img_scatter_async(struct be *b, struct be_img *job, uint64_t *ticket,
                              struct ig_errbuf *eb)
{
	return xfer__img(b, XFER_SCATTER, job, ticket, eb);
}
