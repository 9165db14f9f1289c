/*
 * be_cuda.c - the cuda backend's table entries: device 0's memory, pinned
 * host memory, and two streams, compute and transfer. The model's entries
 * (bind, sequences, rounds on kernels/'s launchers) are model_cuda.c's, on
 * the compute stream this file opens (cuda_int.h). The books of the
 * memory, the copies' checks and the transfer stream's tickets, depth,
 * failure and faults are the neutral devmem.h's and xfer.h's, as on cpu.
 *
 * Memory. One cudaMalloc per plan line at load (layout.c), each rounded to
 * the granule of 2 MiB, the GPU's large page: what cudaMemGetInfo sees an
 * allocation take, and the planner's own unit (VPLAN_GRANULE_CUDA), so the
 * plan's `residual` line holds exactly the rounding the worker makes. Host
 * memory from host_alloc is pinned (cudaHostAlloc): DMA reads and writes it
 * in place, at the link's full rate, and the copy engine never stages it.
 *
 * Streams. Both non-blocking (cudaStreamNonBlocking), so neither waits for
 * the legacy default stream nor it for them. The compute stream takes the
 * synchronous copies (each waits for it after: cudaStreamSynchronize) and
 * the rounds' kernels when they come; the transfer stream takes the copies
 * and image windows of the table's *_async entries, so a move's windows
 * run beside decode rounds as the copy engines run beside the SMs.
 *
 * The copy engine under the neutral stream (xfer.h) is one host thread, as
 * the cpu backend's is: it takes the stream's jobs in ticket order, issues
 * each one's cudaMemcpyAsync calls on the transfer stream (a window: one a
 * piece, seqimg_mover), records the event `landed` behind them and waits on
 * it, then does the job's host half (a gathered window's checksum, over its
 * bytes once they are in host memory). A thread rather than an event a
 * ring slot on the caller's thread, because cudaMemcpyAsync is not
 * asynchronous for every host memory: from pageable memory it returns once
 * the bytes are staged, to pageable memory once they have landed (the CUDA
 * runtime's "API synchronization behavior"), and a window's host half must
 * follow its copies in stream order. On the thread an enqueue never blocks
 * whatever memory it names, a window's checksum is taken in order, and the
 * cpu backend's rules hold as they are: in order, after a failed job
 * nothing runs (a fault writes nothing). `landed` blocks its waiter
 * (cudaEventBlockingSync) rather than spinning a core against decode.
 * Invariants, all under `mu`:
 *
 *   done <= started; the job of ticket t (done < t <= started) is
 *   job[(t - 1) % DEPTH] (the stream's ring entry, unchanged until reaped)
 *   broken: a job failed; every later one is not run and fails too
 *   rc[], why[] of ticket t are set before `done` reaches t
 *
 * The thread runs a job with `mu` released and sets `done` under it after
 * the job's event completed: whoever reads `done >= t` under `mu` also sees
 * the bytes of t (host bytes the device wrote are visible once the event
 * that follows them has completed). The thread reads nothing of the
 * caller's books: a piece's memory is asked of the runtime
 * (cudaPointerGetAttributes), since devmem.h's books are the caller's
 * thread's alone.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "cuda_int.h"
#include "gpu-worker/backend/backend.h"
#include "gpu-worker/backend/devmem.h"
#include "gpu-worker/backend/xfer.h"
#include "common/vplan.h"
#include "kernels/kernels.h"
#include "model/seqimg.h"

#define BE_CUDA_GRANULE VPLAN_GRANULE_CUDA
#define BE_CUDA_DEVICE  0

struct be_cuda {
	/* first: the stream's table entries are xfer.c's over them. mem: the
	 * device's live allocations */
	struct xfer_books books;
	int dev;
	cudaStream_t compute, transfer;
	cudaEvent_t landed; /* the thread's: behind each job's copies */

	/* the copy engine */
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t work_cv; /* the thread: a job or `stop` */
	pthread_cond_t done_cv; /* waiters: `done` moved */
	const struct xfer_job *job[BE_XFER_DEPTH];
	int rc[BE_XFER_DEPTH];        /* each job's result */
	char why[BE_XFER_DEPTH][160]; /* and what failed, in the runtime's words */
	uint64_t started;             /* the last ticket started */
	uint64_t done;                /* the last ticket done */
	bool broken;                  /* a job failed: run nothing more */
	bool stop;                    /* close: finish the jobs started, then exit */
};

static uint64_t be_cuda__round(uint64_t n)
{
	return (n + BE_CUDA_GRANULE - 1) / BE_CUDA_GRANULE * BE_CUDA_GRANULE;
}

/* A runtime call's failure, named: "cudaMalloc: cudaErrorX (its text)". A
 * failed call also leaves its error as the thread's last one, which a later
 * cudaGetLastError (a kernel launch's check) would report as its own:
 * taken here. A sticky error stays whatever is done. */
static int be_cuda__err(struct ig_errbuf *eb, int code, cudaError_t e, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int be_cuda__err(struct ig_errbuf *eb, int code, cudaError_t e, const char *fmt, ...)
{
	char what[160];
	va_list ap;

	(void)cudaGetLastError();
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return ig_errf(eb, code, "%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

int be_cuda_fail(struct ig_errbuf *eb, int code, cudaError_t e, const char *what)
{
	return be_cuda__err(eb, code, e, "%s", what);
}

cudaStream_t be_cuda_compute(struct be *b)
{
	return ((struct be_cuda *)b->priv)->compute;
}

const struct devmem *be_cuda_mem(struct be *b)
{
	return &((struct be_cuda *)b->priv)->books.mem;
}

/* Is `p` device memory (or managed), as the runtime sees it? A plain host
 * pointer is cudaMemoryTypeUnregistered; a pinned one cudaMemoryTypeHost. */
static cudaError_t be_cuda__on_device(const void *p, bool *dev)
{
	struct cudaPointerAttributes a;
	cudaError_t e = cudaPointerGetAttributes(&a, p);

	*dev = false;
	if (e == cudaErrorInvalidValue) { /* runtimes before 11 said so of host memory */
		(void)cudaGetLastError();
		return cudaSuccess;
	}
	*dev =
	    e == cudaSuccess && (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged);
	return e;
}

/* A piece of an image window (seqimg_mover), on the transfer stream: a
 * page's or the state's bytes between the device and the host window; a
 * host part (the sampler state) by memcpy, as the header is. */
static int be_cuda__move(void *ctx, void *dst, const void *src, uint64_t n, struct ig_errbuf *eb)
{
	struct be_cuda *c = ctx;
	bool dd = false, ds = false;
	cudaError_t e = be_cuda__on_device(dst, &dd);

	if (e == cudaSuccess)
		e = be_cuda__on_device(src, &ds);
	if (e == cudaSuccess && !dd && !ds) {
		memcpy(dst, src, (size_t)n);
		return IG_E_OK;
	}
	if (e == cudaSuccess)
		e = cudaMemcpyAsync(dst, src, (size_t)n,
		                    dd ? (ds ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
		                       : cudaMemcpyDeviceToHost,
		                    c->transfer);
	if (e != cudaSuccess)
		return be_cuda__err(eb, IG_E_IO, e, "a piece of %" PRIu64 " bytes (%p <- %p)", n,
		                    dst, src);
	return IG_E_OK;
}

/* Run job `j` on the transfer stream and wait for it: IG_E_OK, or IG_E_IO
 * with what failed in `why`. A scatter whose window fails its checksum is
 * no failure of the stream: its answer is the job's rc (IG_E_KV_LOST). */
static int be_cuda__run(struct be_cuda *c, const struct xfer_job *j, char *why, size_t cap)
{
	struct seqimg_mover mv = {be_cuda__move, c};
	struct be_img *img = j->img;
	struct ig_errbuf eb = {0};
	cudaError_t e = cudaSuccess;
	int rc = IG_E_OK;

	switch (j->kind) {
	case XFER_COPY:
		if (j->n)
			e = cudaMemcpyAsync(
			    j->dst, j->src, (size_t)j->n,
			    j->d2h ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, c->transfer);
		if (e != cudaSuccess)
			rc = be_cuda__err(&eb, IG_E_IO, e, "cudaMemcpyAsync");
		break;
	case XFER_GATHER:
		rc = seqimg_write_window_by(img->w, img->dst, img->window, &img->n, &mv, &eb);
		break;
	case XFER_SCATTER:
		rc = seqimg_read_windows_checked_by(img->r, img->src, img->k0, img->count,
		                                    img->window, img->image_bytes, img->sums, &mv,
		                                    img->why, sizeof(img->why));
		img->rc = rc;
		if (rc == IG_E_KV_LOST)
			rc = IG_E_OK;
		else if (rc)
			ig_errf(&eb, rc, "%s", img->why);
		break;
	}
	/* what was enqueued lands (or fails) before the job is done, even when
	 * a later piece was refused: its ranges are hands off until then */
	e = cudaEventRecord(c->landed, c->transfer);
	if (e == cudaSuccess)
		e = cudaEventSynchronize(c->landed);
	if (e != cudaSuccess && !rc)
		rc = be_cuda__err(&eb, IG_E_IO, e, "the transfer stream");
	if (!rc && j->kind == XFER_GATHER && img->n)
		img->sum = seqimg_window_sum(img->dst, img->n);
	if (rc)
		snprintf(why, cap, "%s", eb.msg);
	return rc;
}

static void *be_cuda__xfer_main(void *arg)
{
	struct be_cuda *c = arg;
	/* the runtime's current device is the thread's own */
	cudaError_t dev = cudaSetDevice(c->dev);

	pthread_mutex_lock(&c->mu);
	for (;;) {
		const struct xfer_job *j;
		char why[160] = "not run: an earlier job failed";
		uint64_t t;
		bool run;
		int rc = IG_E_IO;

		while (c->done == c->started && !c->stop)
			pthread_cond_wait(&c->work_cv, &c->mu);
		if (c->done == c->started)
			break; /* stopped, and drained */
		t = c->done + 1;
		j = c->job[(t - 1) % BE_XFER_DEPTH];
		run = !c->broken && !j->fault; /* after a failure, later jobs are not run */
		pthread_mutex_unlock(&c->mu);

		if (run && dev != cudaSuccess)
			snprintf(why, sizeof(why), "cudaSetDevice(%d) on the transfer thread: %s",
			         c->dev, cudaGetErrorName(dev));
		else if (run)
			rc = be_cuda__run(c, j, why, sizeof(why));

		pthread_mutex_lock(&c->mu);
		c->broken |= rc != IG_E_OK;
		c->rc[(t - 1) % BE_XFER_DEPTH] = rc;
		memcpy(c->why[(t - 1) % BE_XFER_DEPTH], why, sizeof(why));
		c->done = t;
		pthread_cond_broadcast(&c->done_cv);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

static void be_cuda__start(void *ctx, const struct xfer_job *j, uint64_t t)
{
	struct be_cuda *c = ctx;

	pthread_mutex_lock(&c->mu);
	c->job[(t - 1) % BE_XFER_DEPTH] = j;
	c->started = t;
	pthread_cond_signal(&c->work_cv);
	pthread_mutex_unlock(&c->mu);
}

static bool be_cuda__ready(void *ctx, uint64_t t)
{
	struct be_cuda *c = ctx;
	bool ready;

	pthread_mutex_lock(&c->mu);
	ready = c->done >= t;
	pthread_mutex_unlock(&c->mu);
	return ready;
}

static int be_cuda__await(void *ctx, uint64_t t, struct ig_errbuf *eb)
{
	struct be_cuda *c = ctx;
	int rc;

	pthread_mutex_lock(&c->mu);
	while (c->done < t)
		pthread_cond_wait(&c->done_cv, &c->mu);
	rc = c->rc[(t - 1) % BE_XFER_DEPTH];
	if (rc)
		ig_errf(eb, rc, "%s", c->why[(t - 1) % BE_XFER_DEPTH]);
	pthread_mutex_unlock(&c->mu);
	return rc;
}

/* Give back what open took, in reverse order; `stage` says how far it got. */
enum { BE_CUDA_COMPUTE = 1, BE_CUDA_TRANSFER, BE_CUDA_EVENT, BE_CUDA_THREAD };

static void be_cuda__teardown(struct be_cuda *c, int stage)
{
	if (stage >= BE_CUDA_THREAD) {
		pthread_mutex_lock(&c->mu);
		c->stop = true;
		pthread_cond_signal(&c->work_cv);
		pthread_mutex_unlock(&c->mu);
		pthread_join(c->thread, NULL);
	}
	pthread_cond_destroy(&c->done_cv);
	pthread_cond_destroy(&c->work_cv);
	pthread_mutex_destroy(&c->mu);
	if (stage >= BE_CUDA_EVENT)
		cudaEventDestroy(c->landed);
	if (stage >= BE_CUDA_TRANSFER) {
		cudaStreamSynchronize(c->transfer);
		cudaStreamDestroy(c->transfer);
	}
	if (stage >= BE_CUDA_COMPUTE) {
		cudaStreamSynchronize(c->compute);
		cudaStreamDestroy(c->compute);
	}
	devmem_release(&c->books.mem);
	free(c);
}

/* Device 0 and its two streams. `sim_bytes` is the cpu backend's; a real
 * device reports its own memory. No device (no driver, none visible): the
 * runtime's answer, named, IG_E_NOTFOUND, so that a caller can skip. */
static int be_cuda_open(struct be *b, uint64_t sim_bytes, struct ig_errbuf *eb)
{
	struct be_cuda *c;
	size_t free_b = 0, total = 0;
	int n = 0, stage = 0, rc, pe;
	cudaError_t e = cudaGetDeviceCount(&n);

	(void)sim_bytes;
	if (e != cudaSuccess)
		return be_cuda__err(eb, IG_E_NOTFOUND, e,
		                    "the cuda backend finds no device (--backend cpu runs without "
		                    "one): cudaGetDeviceCount");
	if (n < 1)
		return ig_errf(eb, IG_E_NOTFOUND,
		               "the cuda backend finds no device (--backend cpu runs without one): "
		               "cudaGetDeviceCount counts %d",
		               n);
	c = calloc(1, sizeof(*c));
	if (!c)
		return ig_errf(eb, IG_E_NOMEM, "host memory for the cuda backend's state");
	c->dev = BE_CUDA_DEVICE;
	devmem_init(&c->books.mem, "the GPU");
	xfer_init(&c->books.xf, &(struct xfer_engine){be_cuda__start, be_cuda__ready, be_cuda__await, c});
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->work_cv, NULL);
	pthread_cond_init(&c->done_cv, NULL);
	e = cudaSetDevice(c->dev);
	if (e == cudaSuccess)
		e = cudaMemGetInfo(&free_b, &total); /* creates the context, at open */
	if (e != cudaSuccess) {
		rc = be_cuda__err(eb, IG_E_IO, e, "cannot open CUDA device %d", c->dev);
		goto out_teardown;
	}
	e = cudaStreamCreateWithFlags(&c->compute, cudaStreamNonBlocking);
	if (e != cudaSuccess) {
		rc = be_cuda__err(eb, IG_E_IO, e, "the compute stream");
		goto out_teardown;
	}
	stage = BE_CUDA_COMPUTE;
	e = cudaStreamCreateWithFlags(&c->transfer, cudaStreamNonBlocking);
	if (e != cudaSuccess) {
		rc = be_cuda__err(eb, IG_E_IO, e, "the transfer stream");
		goto out_teardown;
	}
	stage = BE_CUDA_TRANSFER;
	e = cudaEventCreateWithFlags(&c->landed, cudaEventBlockingSync | cudaEventDisableTiming);
	if (e != cudaSuccess) {
		rc = be_cuda__err(eb, IG_E_IO, e, "the transfer stream's event");
		goto out_teardown;
	}
	stage = BE_CUDA_EVENT;
	/* the KV formats' tables the attention kernels read (the compact
	 * format's codebook), once per process */
	e = (cudaError_t)kern_kvfmt_init();
	if (e != cudaSuccess) {
		rc = be_cuda__err(eb, IG_E_IO, e, "the KV formats' tables on the device");
		goto out_teardown;
	}
	pe = pthread_create(&c->thread, NULL, be_cuda__xfer_main, c);
	if (pe) {
		rc = ig_errf(eb, IG_E_NOMEM, "cannot start the cuda backend's transfer thread: %s",
		             strerror(pe));
		goto out_teardown;
	}
	b->capacity = total;
	b->used = 0;
	b->priv = c;
	return IG_E_OK;

out_teardown:
	be_cuda__teardown(c, stage);
	return rc;
}

static void be_cuda_close(struct be *b)
{
	struct be_cuda *c = b->priv;

	b->capacity = b->used = 0;
	if (!c)
		return;
	xfer_drain(&c->books.xf);
	be_cuda__teardown(c, BE_CUDA_THREAD);
	b->priv = NULL;
}

static void be_cuda_mem_info(struct be *b, uint64_t *free_bytes, uint64_t *total_bytes)
{
	size_t f = 0, t = 0;

	if (!b->priv || cudaMemGetInfo(&f, &t) != cudaSuccess) {
		(void)cudaGetLastError();
		f = t = 0;
	}
	*free_bytes = f;
	*total_bytes = t;
}

static int be_cuda_alloc(struct be *b, uint64_t bytes, void **ptr, struct ig_errbuf *eb)
{
	struct be_cuda *c = b->priv;
	uint64_t n = be_cuda__round(bytes ? bytes : 1), free_b, total;
	cudaError_t e;
	int rc;

	*ptr = NULL;
	if (!c)
		return ig_errf(eb, IG_E_INVAL,
		               "device allocation of %" PRIu64 " bytes: the backend is not open",
		               bytes);
	rc = devmem_reserve(&c->books.mem, eb);
	if (rc)
		return rc;
	e = cudaMalloc(ptr, (size_t)n);
	if (e == cudaErrorMemoryAllocation) {
		*ptr = NULL;
		(void)cudaGetLastError();
		be_cuda_mem_info(b, &free_b, &total);
		return ig_errf(eb, IG_E_NOMEM,
		               "the GPU has %" PRIu64 " bytes free of %" PRIu64
		               "; asked for %" PRIu64 " (cudaMalloc: cudaErrorMemoryAllocation)",
		               free_b, total, n);
	}
	if (e != cudaSuccess) {
		*ptr = NULL;
		return be_cuda__err(eb, IG_E_IO, e, "cudaMalloc of %" PRIu64 " bytes", n);
	}
	devmem_add(&c->books.mem, *ptr, n);
	b->used += n;
	return IG_E_OK;
}

/* cudaFree synchronizes the device itself; the stream is drained first so
 * that the books agree: no copy of ours is left in flight over it. */
static void be_cuda_free(struct be *b, void *ptr, uint64_t bytes)
{
	struct be_cuda *c = b->priv;
	cudaError_t e;

	if (!ptr)
		return;
	if (c) {
		xfer_drain(&c->books.xf);
		if (!devmem_remove(&c->books.mem, ptr)) {
			/* style rule 5: a device error in the worker may abort */
			fprintf(stderr, "be_cuda_free: %p is not an allocation of the GPU\n", ptr);
			abort();
		}
		b->used -= be_cuda__round(bytes ? bytes : 1);
	}
	/* after close the books are gone; the memory is still the caller's */
	e = cudaFree(ptr);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		fprintf(stderr, "be_cuda_free: cudaFree(%p): %s\n", ptr, cudaGetErrorName(e));
	}
}

/* Pinned host memory. cudaHostAllocDefault: not write-combined (the host
 * reads it back, a window's checksum, and write-combined memory is slow to
 * read), not mapped (no kernel reads host memory in place). */
static int be_cuda_host_alloc(struct be *b, uint64_t bytes, void **ptr, struct ig_errbuf *eb)
{
	cudaError_t e = cudaHostAlloc(ptr, (size_t)(bytes ? bytes : 1), cudaHostAllocDefault);

	(void)b;
	if (e != cudaSuccess) {
		*ptr = NULL;
		return be_cuda__err(eb, e == cudaErrorMemoryAllocation ? IG_E_NOMEM : IG_E_IO, e,
		                    "no pinned host memory for %" PRIu64 " bytes: cudaHostAlloc",
		                    bytes);
	}
	return IG_E_OK;
}

/* A host window may be in flight on the transfer stream: drained first. */
static void be_cuda_host_free(struct be *b, void *ptr, uint64_t bytes)
{
	struct be_cuda *c = b->priv;
	cudaError_t e;

	(void)bytes;
	if (!ptr)
		return;
	if (c)
		xfer_drain(&c->books.xf);
	e = cudaFreeHost(ptr);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		fprintf(stderr, "be_cuda_host_free: cudaFreeHost(%p): %s\n", ptr,
		        cudaGetErrorName(e));
	}
}

/* The KV-RAM arena where the worker maps it: page-locked and known to the
 * device, so that a window's DMA reads and writes it in place (portable:
 * every context may use it). */
static int be_cuda_host_register(struct be *b, void *p, uint64_t bytes, struct ig_errbuf *eb)
{
	cudaError_t e;

	(void)b;
	e = cudaHostRegister(p, (size_t)bytes, cudaHostRegisterPortable);
	if (e != cudaSuccess)
		return be_cuda__err(eb, IG_E_NOMEM, e, "cudaHostRegister of %" PRIu64 " bytes",
		                    bytes);
	return IG_E_OK;
}

static void be_cuda_host_unregister(struct be *b, void *p)
{
	(void)b;
	if (cudaHostUnregister(p) != cudaSuccess)
		(void)cudaGetLastError();
}

/* A synchronous copy (checked first) on the compute stream, in order with
 * its kernels, landed when it returns. */
static int be_cuda__sync(struct be_cuda *c, enum cudaMemcpyKind kind, bool d2h, void *dst,
                         const void *src, uint64_t n, struct ig_errbuf *eb)
{
	cudaError_t e = cudaMemcpyAsync(dst, src, (size_t)n, kind, c->compute);
	char desc[160];

	if (e == cudaSuccess)
		e = cudaStreamSynchronize(c->compute);
	if (e == cudaSuccess)
		return IG_E_OK;
	if (kind == cudaMemcpyDeviceToDevice)
		snprintf(desc, sizeof(desc), "copy d2d of %" PRIu64 " bytes (%p to %p)", n, src,
		         dst);
	else
		devmem_describe(desc, sizeof(desc), "copy", 0, d2h, dst, src, n);
	return be_cuda__err(eb, IG_E_IO, e, "%s", desc);
}

static int be_cuda__copy(struct be *b, bool d2h, void *dst, const void *src, uint64_t n,
                         struct ig_errbuf *eb)
{
	struct be_cuda *c = b->priv;
	bool empty;
	int rc = devmem_check_copy(c ? &c->books.mem : NULL, "copy", d2h, dst, src, n, &empty, eb);

	if (rc || empty)
		return rc;
	return be_cuda__sync(c, d2h ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, d2h, dst,
	                     src, n, eb);
}

static int be_cuda_copy_h2d(struct be *b, void *dst, const void *src, uint64_t n,
                            struct ig_errbuf *eb)
{
	return be_cuda__copy(b, false, dst, src, n, eb);
}

static int be_cuda_copy_d2h(struct be *b, void *dst, const void *src, uint64_t n,
                            struct ig_errbuf *eb)
{
	return be_cuda__copy(b, true, dst, src, n, eb);
}

static int be_cuda_copy_d2d(struct be *b, void *dst, const void *src, uint64_t n,
                            struct ig_errbuf *eb)
{
	struct be_cuda *c = b->priv;
	bool empty;
	int rc = devmem_check_d2d(c ? &c->books.mem : NULL, dst, src, n, &empty, eb);

	if (rc || empty)
		return rc;
	return be_cuda__sync(c, cudaMemcpyDeviceToDevice, false, dst, src, n, eb);
}

const struct be_ops be_cuda_ops = {
    .abi = BE_ABI_VERSION,
    .name = "cuda",
    .granule = BE_CUDA_GRANULE,
    .open = be_cuda_open,
    .close = be_cuda_close,
    .mem_info = be_cuda_mem_info,
    .alloc = be_cuda_alloc,
    .free = be_cuda_free,
    .host_alloc = be_cuda_host_alloc,
    .host_free = be_cuda_host_free,
    .host_register = be_cuda_host_register,
    .host_unregister = be_cuda_host_unregister,
    .copy_h2d = be_cuda_copy_h2d,
    .copy_d2h = be_cuda_copy_d2h,
    .copy_d2d = be_cuda_copy_d2d,
    .copy_h2d_async = xfer_be_copy_h2d_async,
    .copy_d2h_async = xfer_be_copy_d2h_async,
    .xfer_done = xfer_be_done,
    .xfer_wait = xfer_be_wait,
    .xfer_wait_all = xfer_be_wait_all,
    .img_gather_async = xfer_be_img_gather_async,
    .img_scatter_async = xfer_be_img_scatter_async,
    .model_bind = be_cuda_model_bind,
    .model_needs = be_cuda_model_needs,
    .model_release = be_cuda_model_release,
    .seq_init = be_cuda_seq_init,
    .seq_release = be_cuda_seq_release,
    .seq_image = be_cuda_seq_image,
    .expert_stats = be_cuda_expert_stats,
    .expert_counts = be_cuda_expert_counts,
    .round = be_cuda_round,
};
