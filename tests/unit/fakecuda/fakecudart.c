/*
 * fakecudart.c - a host stand-in for the libcudart calls the cuda backend's
 * table entries make (gpu-worker/backend/cuda/be_cuda.c), so that its
 * control flow runs where there is no GPU: test_backend's backend_cuda_fake
 * row loads it in place of the runtime (LD_LIBRARY_PATH; same soname, same
 * symbol version). It proves nothing about a card: not the runtime's own
 * semantics, nor timing, nor pinned memory. What it catches is the
 * backend's part: a wait missing before bytes are read, a copy's direction
 * or range wrong, a stream used out of order, memory freed twice.
 *
 * As a strict runtime would: device memory (cudaMalloc) and pinned memory
 * (cudaHostAlloc) are host memory in books of their own; a stream is a
 * thread running its queue in order, each copy slowed (a missing wait
 * reads stale bytes); an event is a marker in a stream's queue;
 * cudaMemcpyAsync refuses a direction that does not match the pointers, a
 * device range outside one allocation, the legacy stream and
 * cudaMemcpyDefault (be_cuda names every direction); cudaFree and
 * cudaFreeHost wait for every stream, as the real ones synchronize.
 *
 * The books are process-wide, as the runtime's own state is (style rule 13
 * allows no mutable globals; a stand-in for a library that has them cannot
 * do otherwise), under one lock.
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAKE_QUEUE   4096u
#define FAKE_ALLOCS  4096u
#define FAKE_STREAMS 64u
#define FAKE_TOTAL   (1ull << 30) /* the device's memory: 1 GiB */

/* the registration calls nvcc's host stubs make; declared by no header we
 * include */
void **__cudaRegisterFatBinary(void *fatbin);
void __cudaRegisterFatBinaryEnd(void **handle);
void __cudaUnregisterFatBinary(void **handle);

struct fake_op {
	struct CUevent_st *ev; /* a marker; else a copy */
	uint64_t seq;
	void *dst;
	const void *src;
	size_t n;
};

struct CUstream_st {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t work, idle;
	struct fake_op q[FAKE_QUEUE];
	uint64_t head, tail; /* ops done, ops queued */
	int stop;
};

struct CUevent_st {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t recorded, reached;
};

enum { FAKE_HOST = 1, FAKE_DEVICE = 2 };

static struct {
	pthread_mutex_t mu;
	struct {
		uintptr_t base;
		size_t n;
		int kind;
	} a[FAKE_ALLOCS];
	size_t n_a, used;
	struct CUstream_st *s[FAKE_STREAMS];
	size_t n_s;
} fake = {.mu = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local cudaError_t fake_last;

static cudaError_t fake_fail(cudaError_t e)
{
	fake_last = e;
	return e;
}

/* FAKE_DEVICE or FAKE_HOST when `p` is in an allocation of ours (*inside:
 * and [p, p + n) with it), else 0. */
static int fake_kind(const void *p, size_t n, int *inside)
{
	uintptr_t x = (uintptr_t)p;
	int kind = 0;

	*inside = 0;
	pthread_mutex_lock(&fake.mu);
	for (size_t i = 0; i < fake.n_a; i++)
		if (x >= fake.a[i].base && x < fake.a[i].base + fake.a[i].n) {
			kind = fake.a[i].kind;
			*inside = x + n <= fake.a[i].base + fake.a[i].n;
		}
	pthread_mutex_unlock(&fake.mu);
	return kind;
}

cudaError_t cudaGetDeviceCount(int *count)
{
	*count = 1;
	return cudaSuccess;
}

cudaError_t cudaGetLastError(void)
{
	cudaError_t e = fake_last;

	fake_last = cudaSuccess;
	return e;
}

const char *cudaGetErrorName(cudaError_t e)
{
	switch (e) {
	case cudaSuccess:
		return "cudaSuccess";
	case cudaErrorInvalidValue:
		return "cudaErrorInvalidValue";
	case cudaErrorMemoryAllocation:
		return "cudaErrorMemoryAllocation";
	default:
		return "cudaErrorUnknown";
	}
}

const char *cudaGetErrorString(cudaError_t e)
{
	return e == cudaSuccess ? "no error" : "an error of the stand-in runtime";
}

cudaError_t cudaRuntimeGetVersion(int *version)
{
	*version = 13000;
	return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
	return device == 0 ? cudaSuccess : fake_fail(cudaErrorInvalidValue);
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
	pthread_mutex_lock(&fake.mu);
	*total_bytes = FAKE_TOTAL;
	*free_bytes = FAKE_TOTAL - fake.used;
	pthread_mutex_unlock(&fake.mu);
	return cudaSuccess;
}

static void *fake_stream_main(void *arg)
{
	struct CUstream_st *s = arg;

	pthread_mutex_lock(&s->mu);
	for (;;) {
		struct fake_op o;

		while (s->head == s->tail && !s->stop)
			pthread_cond_wait(&s->work, &s->mu);
		if (s->head == s->tail)
			break;
		o = s->q[s->head % FAKE_QUEUE];
		pthread_mutex_unlock(&s->mu);
		if (o.ev) {
			pthread_mutex_lock(&o.ev->mu);
			if (o.seq > o.ev->reached)
				o.ev->reached = o.seq;
			pthread_cond_broadcast(&o.ev->cv);
			pthread_mutex_unlock(&o.ev->mu);
		} else {
			usleep(o.n > 65536 ? 2000 : 50); /* slow, so a missing wait shows */
			memcpy(o.dst, o.src, o.n);
		}
		pthread_mutex_lock(&s->mu);
		s->head++;
		pthread_cond_broadcast(&s->idle);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

static void fake_push(struct CUstream_st *s, struct fake_op o)
{
	pthread_mutex_lock(&s->mu);
	while (s->tail - s->head >= FAKE_QUEUE)
		pthread_cond_wait(&s->idle, &s->mu);
	s->q[s->tail++ % FAKE_QUEUE] = o;
	pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&s->mu);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags)
{
	struct CUstream_st *s;

	if (flags != cudaStreamNonBlocking || fake.n_s == FAKE_STREAMS)
		return fake_fail(cudaErrorInvalidValue);
	s = calloc(1, sizeof(*s));
	if (!s)
		return fake_fail(cudaErrorMemoryAllocation);
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->work, NULL);
	pthread_cond_init(&s->idle, NULL);
	if (pthread_create(&s->thread, NULL, fake_stream_main, s)) {
		free(s);
		return fake_fail(cudaErrorMemoryAllocation);
	}
	pthread_mutex_lock(&fake.mu);
	fake.s[fake.n_s++] = s;
	pthread_mutex_unlock(&fake.mu);
	*stream = s;
	return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	if (!s) /* the legacy stream: the backend's streams are its own */
		return fake_fail(cudaErrorInvalidValue);
	pthread_mutex_lock(&s->mu);
	while (s->head != s->tail)
		pthread_cond_wait(&s->idle, &s->mu);
	pthread_mutex_unlock(&s->mu);
	return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
	cudaStreamSynchronize(s);
	pthread_mutex_lock(&s->mu);
	s->stop = 1;
	pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&s->mu);
	pthread_join(s->thread, NULL);
	pthread_mutex_lock(&fake.mu);
	for (size_t i = 0; i < fake.n_s; i++)
		if (fake.s[i] == s)
			fake.s[i] = fake.s[--fake.n_s];
	pthread_mutex_unlock(&fake.mu);
	pthread_cond_destroy(&s->idle);
	pthread_cond_destroy(&s->work);
	pthread_mutex_destroy(&s->mu);
	free(s);
	return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
	struct CUevent_st *e = calloc(1, sizeof(*e));

	(void)flags;
	if (!e)
		return fake_fail(cudaErrorMemoryAllocation);
	pthread_mutex_init(&e->mu, NULL);
	pthread_cond_init(&e->cv, NULL);
	*event = e;
	return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
	pthread_cond_destroy(&e->cv);
	pthread_mutex_destroy(&e->mu);
	free(e);
	return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
	uint64_t seq;

	if (!s)
		return fake_fail(cudaErrorInvalidValue);
	pthread_mutex_lock(&e->mu);
	seq = ++e->recorded;
	pthread_mutex_unlock(&e->mu);
	fake_push(s, (struct fake_op){.ev = e, .seq = seq});
	return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
	pthread_mutex_lock(&e->mu);
	while (e->reached < e->recorded)
		pthread_cond_wait(&e->cv, &e->mu);
	pthread_mutex_unlock(&e->mu);
	return cudaSuccess;
}

static cudaError_t fake_alloc(void **p, size_t n, int kind)
{
	*p = NULL;
	pthread_mutex_lock(&fake.mu);
	if (fake.n_a == FAKE_ALLOCS || (kind == FAKE_DEVICE && n > FAKE_TOTAL - fake.used)) {
		pthread_mutex_unlock(&fake.mu);
		return fake_fail(cudaErrorMemoryAllocation);
	}
	*p = aligned_alloc(256, (n + 255) / 256 * 256);
	if (*p) {
		fake.a[fake.n_a].base = (uintptr_t)*p;
		fake.a[fake.n_a].n = n;
		fake.a[fake.n_a++].kind = kind;
		fake.used += kind == FAKE_DEVICE ? n : 0;
	}
	pthread_mutex_unlock(&fake.mu);
	return *p ? cudaSuccess : fake_fail(cudaErrorMemoryAllocation);
}

static cudaError_t fake_free(void *p, int kind)
{
	struct CUstream_st *s[FAKE_STREAMS];
	size_t n_s;

	if (!p)
		return cudaSuccess;
	pthread_mutex_lock(&fake.mu);
	n_s = fake.n_s;
	memcpy(s, fake.s, sizeof(s));
	pthread_mutex_unlock(&fake.mu);
	for (size_t i = 0; i < n_s; i++) /* the real ones synchronize the device */
		cudaStreamSynchronize(s[i]);
	pthread_mutex_lock(&fake.mu);
	for (size_t i = 0; i < fake.n_a; i++)
		if (fake.a[i].base == (uintptr_t)p && fake.a[i].kind == kind) {
			fake.used -= kind == FAKE_DEVICE ? fake.a[i].n : 0;
			fake.a[i] = fake.a[--fake.n_a];
			pthread_mutex_unlock(&fake.mu);
			free(p);
			return cudaSuccess;
		}
	pthread_mutex_unlock(&fake.mu);
	fprintf(stderr, "fakecudart: %s(%p): not an allocation of that kind\n",
	        kind == FAKE_DEVICE ? "cudaFree" : "cudaFreeHost", p);
	abort();
}

cudaError_t cudaMalloc(void **p, size_t n)
{
	return fake_alloc(p, n, FAKE_DEVICE);
}

cudaError_t cudaFree(void *p)
{
	return fake_free(p, FAKE_DEVICE);
}

cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int flags)
{
	(void)flags;
	return fake_alloc(p, n, FAKE_HOST);
}

cudaError_t cudaFreeHost(void *p)
{
	return fake_free(p, FAKE_HOST);
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p)
{
	int inside, kind = fake_kind(p, 1, &inside);

	memset(a, 0, sizeof(*a));
	a->type = kind == FAKE_DEVICE ? cudaMemoryTypeDevice
	          : kind == FAKE_HOST ? cudaMemoryTypeHost
	                              : cudaMemoryTypeUnregistered;
	return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                            cudaStream_t s)
{
	int din, sin, dk = fake_kind(dst, n, &din), sk = fake_kind(src, n, &sin);
	int to_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
	int from_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;

	if (!s || kind == cudaMemcpyDefault || kind == cudaMemcpyHostToHost ||
	    (dk == FAKE_DEVICE) != to_dev || (sk == FAKE_DEVICE) != from_dev || (to_dev && !din) ||
	    (from_dev && !sin)) {
		fprintf(stderr,
		        "fakecudart: cudaMemcpyAsync(%p <- %p, %zu bytes, kind %d): the stream, "
		        "the direction or a range is wrong\n",
		        dst, src, n, (int)kind);
		return fake_fail(cudaErrorInvalidValue);
	}
	fake_push(s, (struct fake_op){.dst = dst, .src = src, .n = n});
	return cudaSuccess;
}

void **__cudaRegisterFatBinary(void *fatbin)
{
	static void *handle;

	(void)fatbin;
	return &handle;
}

void __cudaRegisterFatBinaryEnd(void **handle)
{
	(void)handle;
}

void __cudaUnregisterFatBinary(void **handle)
{
	(void)handle;
}
