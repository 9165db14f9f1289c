/*
 * xfer.h - the transfer stream's books, the same on every backend
 * (backend.h states the contract; docs/adr/0045): tickets, the ring of
 * BE_XFER_DEPTH jobs in flight, the refusal at depth, the sticky failure
 * and the fault injection of struct be.fault_xfer. A backend supplies only
 * its copy engine (struct xfer_engine): how a job starts, whether it has
 * completed, and how its completion is waited for.
 *
 * Invariants (the caller's thread only: a backend is driven from one thread):
 *
 *   reaped <= issued <= reaped + BE_XFER_DEPTH
 *   the job of ticket t (reaped < t <= issued) is ring[(t - 1) % DEPTH]:
 *     started on the engine, not yet seen done here
 *   failed == 0, or failed <= reaped and `fail` describes it
 *
 * A ticket is reaped once the engine says it completed (in ticket order);
 * only then may its ring slot take another job. The first job reaped with a
 * failure stops the stream: later enqueues are refused, later waits report
 * it. The engine keeps the other half of that rule: after a job failed it
 * runs no later one (and reports each as failed, not run).
 */
#ifndef IGNIS_GPU_WORKER_XFER_H
#define IGNIS_GPU_WORKER_XFER_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "devmem.h"
#include "common/err.h"

enum xfer_kind { XFER_COPY, XFER_GATHER, XFER_SCATTER };

/* One job on the stream: a plain copy, or a move's image window
 * (backend.h's struct be_img: the caller's until the ticket is done). */
struct xfer_job {
	enum xfer_kind kind;
	void *dst;
	const void *src;
	uint64_t n;
	bool d2h;
	bool fault;         /* struct be's fault_xfer named this job: fail, write nothing */
	struct be_img *img; /* XFER_GATHER, XFER_SCATTER */
};

/* A backend's copy engine. `j` stays valid and unchanged from start until
 * the stream has seen the job done (wait returned). */
struct xfer_engine {
	/* Start job `j` of ticket `t`, after every earlier one (in order). A
	 * job with `fault` set, or any job after a failed one, writes nothing
	 * and completes with a failure. */
	void (*start)(void *ctx, const struct xfer_job *j, uint64_t t);
	/* Has job `t` (started) completed? Never blocks. */
	bool (*ready)(void *ctx, uint64_t t);
	/* Block until job `t` (started) completed: IG_E_OK when it landed,
	 * else its failure (its message in `eb`; an injected fault's needs
	 * none, the stream writes it). */
	int (*wait)(void *ctx, uint64_t t, struct ig_errbuf *eb);
	void *ctx;
};

struct xfer {
	struct xfer_engine eng;
	struct xfer_job ring[BE_XFER_DEPTH];
	uint64_t issued;       /* the last ticket given out */
	uint64_t reaped;       /* the last ticket seen done */
	uint64_t failed;       /* the first ticket that failed; 0: none */
	struct ig_errbuf fail; /* its code and description */
};

void xfer_init(struct xfer *x, const struct xfer_engine *eng);
/* Every job issued done (their failures recorded, not reported): what free
 * and close wait for. */
void xfer_drain(struct xfer *x);

/* Enqueue a copy of `n` bytes (checked against the books `mem` first:
 * IG_E_INVAL, no ticket), `fault_ticket` the struct be's fault_xfer. Its
 * ticket in *ticket; IG_E_BUSY at depth; the failure's code once the
 * stream stopped. */
int xfer_copy(struct xfer *x, const struct devmem *mem, uint64_t fault_ticket, bool d2h, void *dst,
              const void *src, uint64_t n, uint64_t *ticket, struct ig_errbuf *eb);
/* Enqueue an image window (XFER_GATHER or XFER_SCATTER): its host side
 * checked against `mem`, its outputs reset. */
int xfer_img(struct xfer *x, const struct devmem *mem, uint64_t fault_ticket, enum xfer_kind kind,
             struct be_img *job, uint64_t *ticket, struct ig_errbuf *eb);

/* The table's xfer_done, xfer_wait and xfer_wait_all (backend.h). */
bool xfer_done(struct xfer *x, uint64_t ticket);
int xfer_wait(struct xfer *x, uint64_t ticket, struct ig_errbuf *eb);
int xfer_wait_all(struct xfer *x, struct ig_errbuf *eb);

/*
 * The books every backend keeps the same way: its device memory's live
 * allocations and its transfer stream. A backend's state (struct be's
 * `priv`) starts with them, so that the stream's seven table entries below
 * are one code for every backend: copy_h2d_async, copy_d2h_async,
 * xfer_done, xfer_wait, xfer_wait_all, img_gather_async, img_scatter_async
 * (backend.h says what each answers; a closed backend, priv NULL, refuses
 * an enqueue by name and has nothing to wait for).
 */
struct xfer_books {
	struct devmem mem;
	struct xfer xf;
};

int xfer_be_copy_h2d_async(struct be *b, void *dst, const void *src, uint64_t n,
                           uint64_t *ticket, struct ig_errbuf *eb);
int xfer_be_copy_d2h_async(struct be *b, void *dst, const void *src, uint64_t n,
                           uint64_t *ticket, struct ig_errbuf *eb);
bool xfer_be_done(struct be *b, uint64_t ticket);
int xfer_be_wait(struct be *b, uint64_t ticket, struct ig_errbuf *eb);
int xfer_be_wait_all(struct be *b, struct ig_errbuf *eb);
int xfer_be_img_gather_async(struct be *b, struct be_img *job, uint64_t *ticket,
                             struct ig_errbuf *eb);
int xfer_be_img_scatter_async(struct be *b, struct be_img *job, uint64_t *ticket,
                              struct ig_errbuf *eb);

#endif
