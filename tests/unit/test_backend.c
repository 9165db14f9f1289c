/*
 * test_backend.c - the backend table's memory and transfer stream, on the
 * backend `--backend NAME` names (cpu when none): allocation refused beyond
 * the device with its figures, in whole granules; host memory the device
 * copies at full speed; synchronous copies, and the transfer stream of
 * backend.h: copies of 1 B to a few MiB completing in order with their
 * bytes, done()/wait() over tickets, the queue refusing at its depth
 * without blocking, a fault injected at every position of a run of copies,
 * and close draining copies in flight; a sequence image's windows gathered
 * and scattered on the same stream (in order with the copies, their
 * checksums those of seqimg.h, a mismatch named, a host window in device
 * memory refused).
 *
 *   test-backend [--backend NAME]
 *
 * Device memory is read and written through the table's copies only, never
 * dereferenced, so that every test means the same on a GPU. A backend this
 * build lacks (cuda without CUDA) or whose open finds no device exits 77,
 * meson's skip.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gpu-worker/backend/backend.h"
#include "kvram/kvcopy.h"
#include "model/seqimg.h"
#include "testutil.h"

#define DEFAULT_SEED 20240611u
#define MiB          (1024u * 1024u)

/* The tests' one context (cmocka's prestate): the backend under test. */
struct tb {
	const char *backend;
};

/* Open the backend under test; `sim_bytes` is the cpu backend's simulated
 * device (a real device has its own). */
static void be_open(struct be *b, void **state, uint64_t sim_bytes)
{
	const struct tb *t = *state;
	struct ig_errbuf eb = {0};

	memset(b, 0, sizeof(*b));
	b->ops = backend_find(t->backend, &eb);
	if (!b->ops)
		fail_msg("backend_find(%s): %s", t->backend, eb.msg);
	assert_int_equal(b->ops->abi, BE_ABI_VERSION);
	if (b->ops->open(b, sim_bytes, &eb))
		fail_msg("open: %s", eb.msg);
}

static bool on_cpu(void **state)
{
	return !strcmp(((const struct tb *)*state)->backend, "cpu");
}

/* What an allocation of `n` bytes holds: whole granules (4 KiB on cpu, 2
 * MiB on cuda), all of it device memory to the copies' checks. */
static uint64_t held(const struct be *b, uint64_t n)
{
	return (n + b->ops->granule - 1) / b->ops->granule * b->ops->granule;
}

static void *dev_alloc(struct be *b, uint64_t n)
{
	struct ig_errbuf eb = {0};
	void *p = NULL;

	if (b->ops->alloc(b, n, &p, &eb))
		fail_msg("alloc(%llu): %s", (unsigned long long)n, eb.msg);
	return p;
}

static void fill(struct rng *r, uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)rng_next(r);
}

/* Device bytes through the table's synchronous copies. */
static void dev_put(struct be *b, void *dev, const void *host, uint64_t n)
{
	struct ig_errbuf eb = {0};

	if (b->ops->copy_h2d(b, dev, host, n, &eb))
		fail_msg("copy_h2d of %llu bytes: %s", (unsigned long long)n, eb.msg);
}

static void dev_zero(struct be *b, void *dev, uint64_t n)
{
	void *z = calloc(1, (size_t)n);

	assert_non_null(z);
	dev_put(b, dev, z, n);
	free(z);
}

/* Do the `n` device bytes at `dev` equal `want`? */
static bool dev_equal(struct be *b, const void *dev, const void *want, uint64_t n)
{
	struct ig_errbuf eb = {0};
	void *got = xmalloc((size_t)n);
	bool same;

	if (b->ops->copy_d2h(b, got, dev, n, &eb))
		fail_msg("copy_d2h of %llu bytes: %s", (unsigned long long)n, eb.msg);
	same = !memcmp(got, want, (size_t)n);
	free(got);
	return same;
}

static uint64_t enqueue(struct be *b, bool d2h, void *dst, const void *src, uint64_t n)
{
	struct ig_errbuf eb = {0};
	uint64_t t = 0;
	int rc = d2h ? b->ops->copy_d2h_async(b, dst, src, n, &t, &eb)
	             : b->ops->copy_h2d_async(b, dst, src, n, &t, &eb);

	if (rc)
		fail_msg("enqueue %s of %llu bytes: %s", d2h ? "d2h" : "h2d", (unsigned long long)n,
		         eb.msg);
	assert_true(t > 0);
	return t;
}

static void xwait(struct be *b, uint64_t t)
{
	struct ig_errbuf eb = {0};

	if (b->ops->xfer_wait(b, t, &eb))
		fail_msg("wait #%llu: %s", (unsigned long long)t, eb.msg);
}

/* Beyond the device: IG_E_NOMEM naming free, total and asked
 * (test_layout.c checks the layout's own refusal, not these figures); an
 * allocation takes whole granules, counted in b.used. */
static void test_alloc_refused_with_figures(void **state)
{
	struct ig_errbuf eb = {0};
	uint64_t free_b, total, g, ask;
	char want[128];
	struct be b;
	void *p, *q = NULL;

	be_open(&b, state, 1 * MiB);
	g = b.ops->granule;
	assert_true(g >= 256 && (g & (g - 1)) == 0);
	p = dev_alloc(&b, 1); /* one granule */
	assert_int_equal(b.used, g);
	b.ops->mem_info(&b, &free_b, &total);
	assert_true(free_b <= total && total > 0);
	/* more than the whole device, in whole granules */
	ask = (total / g + 1) * g;
	assert_int_equal(b.ops->alloc(&b, ask, &q, &eb), IG_E_NOMEM);
	assert_null(q);
	snprintf(want, sizeof(want), "bytes free of %llu; asked for %llu",
	         (unsigned long long)total, (unsigned long long)ask);
	if (!strstr(eb.msg, want))
		fail_msg("refused with '%s'; wanted '%s'", eb.msg, want);
	assert_int_equal(b.used, g);
	if (on_cpu(state)) { /* the simulated device's figures are exact */
		assert_int_equal(total, 1 * MiB);
		assert_int_equal(free_b, 1 * MiB - g);
		assert_int_equal(b.ops->alloc(&b, 1 * MiB, &q, &eb), IG_E_NOMEM);
		assert_non_null(strstr(eb.msg, "the simulated device has 1044480 bytes free of "
		                               "1048576; asked for 1048576"));
	}
	b.ops->free(&b, p, 1);
	assert_int_equal(b.used, 0);
	if (on_cpu(state)) {
		b.ops->mem_info(&b, &free_b, &total);
		assert_int_equal(free_b, total);
	}
	b.ops->close(&b);
	b.ops->close(&b); /* idempotent */
}

/* Host memory from host_alloc (pinned on a GPU) is host memory to every
 * check: copies to and from it run, sync and async, and a device copy into
 * it is refused. */
static void test_host_memory(void **state)
{
	enum { N = 3 * MiB + 77 };
	struct rng r = {test_seed("host memory")};
	struct ig_errbuf eb = {0};
	uint8_t *a = NULL, *c = NULL, *dev;
	uint64_t t;
	struct be b;

	be_open(&b, state, 8 * MiB);
	assert_int_equal(b.ops->host_alloc(&b, N, (void **)&a, &eb), IG_E_OK);
	assert_int_equal(b.ops->host_alloc(&b, N, (void **)&c, &eb), IG_E_OK);
	assert_true(a && c);
	dev = dev_alloc(&b, N);
	fill(&r, a, N);
	memset(c, 0, N);
	assert_int_equal(b.ops->copy_h2d_async(&b, dev, a, N, &t, &eb), IG_E_OK);
	assert_int_equal(b.ops->copy_d2h_async(&b, c, dev, N, &t, &eb), IG_E_OK);
	xwait(&b, t);
	assert_memory_equal(a, c, N);
	assert_true(dev_equal(&b, dev, a, N));
	assert_int_equal(b.ops->copy_h2d(&b, a, c, 64, &eb), IG_E_INVAL);
	assert_non_null(strstr(eb.msg, "device range is not inside"));
	b.ops->free(&b, dev, N);
	b.ops->host_free(&b, a, N);
	b.ops->host_free(&b, c, N);
	b.ops->close(&b);
}

static void test_sync_copies(void **state)
{
	struct rng r = {test_seed("sync copies")};
	struct ig_errbuf eb = {0};
	uint8_t *in = xmalloc(65536), *out = xmalloc(65536);
	struct be b;
	uint8_t *dev;

	be_open(&b, state, 4 * MiB);
	dev = dev_alloc(&b, 65536);
	fill(&r, in, 65536);
	assert_int_equal(b.ops->copy_h2d(&b, dev, in, 65536, &eb), IG_E_OK);
	assert_int_equal(b.ops->copy_d2h(&b, out, dev, 65536, &eb), IG_E_OK);
	assert_memory_equal(in, out, 65536);
	/* a part of an allocation, and nothing */
	memset(out, 0, 65536);
	assert_int_equal(b.ops->copy_d2h(&b, out, dev + 1001, 77, &eb), IG_E_OK);
	assert_memory_equal(out, in + 1001, 77);
	assert_int_equal(b.ops->copy_h2d(&b, NULL, NULL, 0, &eb), IG_E_OK);
	/* inside the device: from one allocation to another, and within one */
	{
		uint8_t *dev2 = dev_alloc(&b, 65536);

		assert_int_equal(b.ops->copy_d2d(&b, dev2, dev, 65536, &eb), IG_E_OK);
		assert_int_equal(b.ops->copy_d2h(&b, out, dev2, 65536, &eb), IG_E_OK);
		assert_memory_equal(in, out, 65536);
		assert_int_equal(b.ops->copy_d2d(&b, dev2 + 100, dev2 + 5000, 300, &eb), IG_E_OK);
		assert_int_equal(b.ops->copy_d2h(&b, out, dev2 + 100, 300, &eb), IG_E_OK);
		assert_memory_equal(out, in + 5000, 300);
		/* refused: a host side, a range past its allocation, overlapping ranges */
		assert_int_equal(b.ops->copy_d2d(&b, dev2, in, 16, &eb), IG_E_INVAL);
		assert_non_null(strstr(eb.msg, "inside one allocation"));
		assert_int_equal(b.ops->copy_d2d(&b, dev2 + held(&b, 65536) - 36, dev, 100, &eb),
		                 IG_E_INVAL);
		assert_int_equal(b.ops->copy_d2d(&b, dev2 + 10, dev2, 100, &eb), IG_E_INVAL);
		assert_non_null(strstr(eb.msg, "overlap"));
		assert_int_equal(b.ops->copy_d2d(&b, NULL, NULL, 0, &eb), IG_E_OK);
		b.ops->free(&b, dev2, 65536);
	}
	b.ops->free(&b, dev, 65536);
	b.ops->close(&b);
	free(in);
	free(out);
}

/* Copies whose ranges are wrong are refused at once, synchronous or not,
 * and an async one takes no ticket. */
static void test_bad_ranges_refused(void **state)
{
	struct ig_errbuf eb;
	uint8_t host[64], other[64];
	struct be b;
	uint8_t *dev;
	struct bad_row {
		const char *name;
		bool d2h;
		void *dst;
		const void *src;
		uint64_t n;
		const char *says;
	} rows[6];
	int nrows = 0;

	be_open(&b, state, 1 * MiB);
	dev = dev_alloc(&b, 8192);
#define ROW(nm, d, ds, sr, nn, sy) rows[nrows++] = (struct bad_row){nm, d, ds, sr, nn, sy}
	ROW("h2d into host memory", false, other, host, 64, "device range is not inside");
	ROW("h2d past an allocation's end", false, dev + held(&b, 8192) - 10, host, 20,
	    "device range is not inside");
	ROW("h2d from device memory", false, dev, dev + 4096, 64, "host range is device memory");
	ROW("d2h from host memory", true, other, host, 64, "device range is not inside");
	ROW("d2h into device memory", true, dev + 4096, dev, 64, "host range is device memory");
	ROW("null source", false, dev, NULL, 64, "a null pointer");
#undef ROW
	for (int i = 0; i < nrows; i++) {
		uint64_t t = 0;
		int rc;

		rc = rows[i].d2h ? b.ops->copy_d2h(&b, rows[i].dst, rows[i].src, rows[i].n, &eb)
		                 : b.ops->copy_h2d(&b, rows[i].dst, rows[i].src, rows[i].n, &eb);
		if (rc != IG_E_INVAL || !strstr(eb.msg, rows[i].says) || !strstr(eb.msg, "copy ("))
			fail_msg("%s (sync): %d %s", rows[i].name, rc, eb.msg);
		rc = rows[i].d2h
		         ? b.ops->copy_d2h_async(&b, rows[i].dst, rows[i].src, rows[i].n, &t, &eb)
		         : b.ops->copy_h2d_async(&b, rows[i].dst, rows[i].src, rows[i].n, &t, &eb);
		if (rc != IG_E_INVAL || !strstr(eb.msg, rows[i].says) ||
		    !strstr(eb.msg, "async copy ("))
			fail_msg("%s (async): %d %s", rows[i].name, rc, eb.msg);
		assert_int_equal(t, 0);
	}
	/* nothing was issued: the next copy is the first ticket */
	assert_int_equal(enqueue(&b, false, dev, host, 64), 1);
	assert_int_equal(b.ops->xfer_wait_all(&b, &eb), IG_E_OK);
	b.ops->free(&b, dev, 8192);
	b.ops->close(&b);
}

/* Every copy goes through the same device bytes: each d2h returns what
 * the h2d just before it wrote only if the stream keeps enqueue order. */
static void test_async_sizes_in_order(void **state)
{
	static const uint64_t sizes[] = {
	    1, 2, 3, 7, 63, 64, 65, 4095, 4096, 4097, 65549, 1 * MiB, 3 * MiB + 5, 17,
	};
	enum { N = sizeof(sizes) / sizeof(sizes[0]) };
	struct rng r = {test_seed("async sizes")};
	uint8_t *in[N], *out[N], *dev;
	uint64_t t_in[N], t_out[N], last = 0;
	struct be b;

	be_open(&b, state, 8 * MiB);
	dev = dev_alloc(&b, 3 * MiB + 4096 + 64);
	for (int i = 0; i < N; i++) {
		uint64_t off = (uint64_t)(i % 7) * 9; /* unaligned places too */

		in[i] = xmalloc(sizes[i]);
		out[i] = xmalloc(sizes[i]);
		fill(&r, in[i], sizes[i]);
		memset(out[i], 0, sizes[i]);
		t_in[i] = enqueue(&b, false, dev + off, in[i], sizes[i]);
		t_out[i] = enqueue(&b, true, out[i], dev + off, sizes[i]);
		assert_true(t_in[i] > last && t_out[i] > t_in[i]); /* strictly increasing */
		last = t_out[i];
	}
	xwait(&b, last); /* only the last: done(last) implies every earlier */
	for (int i = 0; i < N; i++) {
		assert_true(b.ops->xfer_done(&b, t_in[i]) && b.ops->xfer_done(&b, t_out[i]));
		if (memcmp(in[i], out[i], sizes[i]))
			fail_msg("copy of %llu bytes: the bytes differ",
			         (unsigned long long)sizes[i]);
		free(in[i]);
		free(out[i]);
	}
	b.ops->free(&b, dev, 3 * MiB + 4096 + 64);
	b.ops->close(&b);
}

/* Watch a run of copies land: whenever done(t) is seen, every earlier
 * ticket is done and t's bytes are there. Tickets 0 and never issued. */
static void test_done_and_wait(void **state)
{
	enum { N = 48, SZ = 256 * 1024 };
	struct rng r = {test_seed("done and wait")};
	uint8_t *in = xmalloc((size_t)N * SZ), *dev;
	uint64_t t[N];
	struct ig_errbuf eb = {0};
	struct be b;
	int seen = 0;

	be_open(&b, state, 16 * MiB);
	assert_true(b.ops->xfer_done(&b, 0));
	assert_int_equal(b.ops->xfer_wait(&b, 0, &eb), IG_E_OK);
	assert_int_equal(b.ops->xfer_wait_all(&b, &eb), IG_E_OK); /* nothing issued */
	assert_true(b.ops->xfer_done(&b, 1));                     /* never issued */
	assert_int_equal(b.ops->xfer_wait(&b, 1, &eb), IG_E_INVAL);
	assert_non_null(strstr(eb.msg, "wait for async copy #1: no such ticket"));

	dev = dev_alloc(&b, (uint64_t)N * SZ);
	dev_zero(&b, dev, (uint64_t)N * SZ);
	fill(&r, in, (size_t)N * SZ);
	for (int i = 0; i < N; i++)
		t[i] = enqueue(&b, false, dev + (size_t)i * SZ, in + (size_t)i * SZ, SZ);
	while (seen < N) {
		/* newest first: a stream out of order would show a later ticket done
		 * and an earlier one not */
		for (int i = N - 1; i >= seen; i--)
			if (b.ops->xfer_done(&b, t[i])) {
				for (int j = 0; j <= i; j++)
					assert_true(b.ops->xfer_done(&b, t[j]));
				for (int j = seen; j <= i; j++)
					assert_true(dev_equal(&b, dev + (size_t)j * SZ,
					                      in + (size_t)j * SZ, SZ));
				seen = i + 1;
				break;
			}
	}
	assert_int_equal(b.ops->xfer_wait(&b, t[0], &eb), IG_E_OK); /* done: returns at once */
	assert_int_equal(b.ops->xfer_wait(&b, t[N - 1] + 1, &eb), IG_E_INVAL);
	b.ops->free(&b, dev, (uint64_t)N * SZ);
	b.ops->close(&b);
	free(in);
}

/* The stream holds BE_XFER_DEPTH copies; one more is refused with
 * IG_E_BUSY while the first is still running, so it did not block. A big
 * first copy (tens of ms) keeps the ring full; if the machine was so slow
 * that it finished before the ring filled, try again. */
static void test_queue_full_refused_at_once(void **state)
{
	enum { BIG = 64 * MiB };
	struct rng r = {test_seed("queue full")};
	uint8_t *big = xmalloc(BIG), small[BE_XFER_DEPTH], *dbig, *dsmall;
	struct ig_errbuf eb = {0};
	bool shown = false;
	struct be b;

	be_open(&b, state, BIG + 1 * MiB);
	dbig = dev_alloc(&b, BIG);
	dsmall = dev_alloc(&b, 4096);
	fill(&r, big, 4096);
	memset(big + 4096, 0x5a, BIG - 4096);
	fill(&r, small, sizeof(small));
	for (int attempt = 0; attempt < 5 && !shown; attempt++) {
		uint64_t t0 = enqueue(&b, false, dbig, big, BIG), t = 0;
		unsigned n = 1;
		int rc = IG_E_OK;

		dev_zero(&b, dsmall, 4096);
		while (n <= BE_XFER_DEPTH) {
			rc = b.ops->copy_h2d_async(&b, dsmall + n - 1, small + n - 1, 1, &t, &eb);
			if (rc)
				break;
			n++;
		}
		if (n == BE_XFER_DEPTH && rc == IG_E_BUSY && !b.ops->xfer_done(&b, t0)) {
			char want[64];

			snprintf(want, sizeof(want), "wait for ticket %llu",
			         (unsigned long long)t0);
			assert_non_null(
			    strstr(eb.msg, "the transfer stream has 64 copies in flight"));
			assert_non_null(strstr(eb.msg, want));
			shown = true;
		}
		if (!shown)
			print_message("# queue full: the first copy ended before the ring filled; "
			              "again\n");
		assert_int_equal(b.ops->xfer_wait_all(&b, &eb), IG_E_OK);
		assert_true(dev_equal(&b, dsmall, small, n - 1));
		assert_true(dev_equal(&b, dbig, big, 4096));
	}
	assert_true(shown);
	/* room again */
	xwait(&b, enqueue(&b, false, dsmall, small, 1));
	b.ops->free(&b, dsmall, 4096);
	b.ops->free(&b, dbig, BIG);
	b.ops->close(&b);
	free(big);
}

/* Fail the Nth of a run of copies, for every N (style rule 12): the ones
 * before land, the failed one and the later ones write nothing, waits
 * name the failed copy, and the stream takes no more. */
static void test_fault_at_every_copy(void **state)
{
	enum { RUN = 8, SZ = 1000 };
	uint8_t in[RUN][SZ], zero[SZ] = {0};

	for (int k = 0; k < RUN; k++)
		memset(in[k], 'a' + k, SZ);
	for (uint64_t nth = 1; nth <= RUN; nth++) {
		struct ig_errbuf eb = {0};
		char failed[64], later[64];
		uint64_t t, issued;
		uint8_t *dev;
		struct be b;

		be_open(&b, state, 1 * MiB);
		dev = dev_alloc(&b, RUN * 4096);
		dev_zero(&b, dev, RUN * 4096);
		b.fault_xfer = nth;
		snprintf(failed, sizeof(failed), "async copy #%llu (h2d, 1000 bytes",
		         (unsigned long long)nth);
		/* the stream may stop before the copies after the fault are all
		 * enqueued: those are then refused, which the contract allows */
		for (issued = 0; issued < RUN; issued++) {
			int rc =
			    b.ops->copy_h2d_async(&b, dev + issued * 4096, in[issued], SZ, &t, &eb);

			if (rc == IG_E_IO && issued >= nth) {
				assert_non_null(strstr(eb.msg, failed));
				break;
			}
			assert_int_equal(rc, IG_E_OK);
			assert_int_equal(t, issued + 1);
		}
		assert_int_equal(b.ops->xfer_wait_all(&b, &eb), IG_E_IO);
		assert_non_null(strstr(eb.msg, failed));
		assert_non_null(strstr(eb.msg, "injected fault"));
		for (t = 1; t <= RUN; t++) {
			int rc = b.ops->xfer_wait(&b, t, &eb);

			if (t > issued) { /* refused at enqueue: no ticket, no bytes */
				assert_int_equal(rc, IG_E_INVAL);
				assert_true(dev_equal(&b, dev + (t - 1) * 4096, zero, SZ));
				continue;
			}
			assert_true(b.ops->xfer_done(&b, t));
			if (t < nth) {
				assert_int_equal(rc, IG_E_OK);
				assert_true(dev_equal(&b, dev + (t - 1) * 4096, in[t - 1], SZ));
				continue;
			}
			assert_int_equal(rc, IG_E_IO);
			assert_non_null(strstr(eb.msg, failed));
			snprintf(later, sizeof(later),
			         "async copy #%llu not run: ", (unsigned long long)t);
			assert_true((strstr(eb.msg, later) != NULL) == (t > nth));
			assert_true(dev_equal(&b, dev + (t - 1) * 4096, zero, SZ));
		}
		assert_int_equal(b.ops->copy_h2d_async(&b, dev, in[0], SZ, &t, &eb), IG_E_IO);
		assert_non_null(strstr(eb.msg, "refused, the transfer stream stopped"));
		assert_non_null(strstr(eb.msg, failed));
		b.ops->free(&b, dev, RUN * 4096);
		b.ops->close(&b);
	}
}

/* Close with copies in flight: it drains them (the bytes land: each went
 * to the device and back into host memory, read after close) and stops the
 * engine; the memory is still the caller's to free. */
static void test_close_drains_in_flight(void **state)
{
	enum { BIG = 16 * MiB, N = 31 }; /* 2 + 2 x 31 copies: the depth, 64 */
	struct rng r = {test_seed("close")};
	uint8_t *big = xmalloc(BIG), *big_back = xmalloc(BIG), small[N], small_back[N];
	uint8_t *dbig, *dsmall;
	struct be b;

	fill(&r, big, BIG);
	fill(&r, small, N);
	for (int round = 0; round < 2; round++) {
		memset(big_back, 0, BIG);
		memset(small_back, 0, N);
		be_open(&b, state, BIG + 1 * MiB);
		dbig = dev_alloc(&b, BIG);
		dsmall = dev_alloc(&b, 4096);
		enqueue(&b, false, dbig, big, BIG);
		enqueue(&b, true, big_back, dbig, BIG);
		for (int i = 0; i < N; i++) {
			enqueue(&b, false, dsmall + i, small + i, 1);
			enqueue(&b, true, small_back + i, dsmall + i, 1);
		}
		if (round == 1) {
			b.ops->free(&b, dsmall, 4096); /* waits for the stream first */
			assert_memory_equal(small_back, small, N);
		}
		b.ops->close(&b);
		b.ops->close(&b);
		assert_null(b.priv);
		assert_memory_equal(big_back, big, BIG);
		assert_memory_equal(small_back, small, N);
		if (round != 1)
			b.ops->free(&b, dsmall, 4096);
		b.ops->free(&b, dbig, BIG);
	}
	free(big);
	free(big_back);
}

/*
 * A sequence image of three device pages and a device state, gathered a
 * window at a time on the stream into a host window (host_alloc's: pinned on
 * a GPU) and scattered back into three other device pages and state: the
 * bytes and each window's checksum are what seqimg.h writes on the host
 * from the same parts' bytes, and the gathers run after an async copy
 * enqueued before them (the stream's order). A wrong checksum is named; a
 * host window inside device memory is refused at enqueue.
 */
static void test_image_windows(void **state)
{
	const struct mdesc *m = mdesc_find("tiny-dense");
	const uint64_t pb = mdesc_page_bytes(m, MDESC_KV_BF16), sb = 1000, window = 40000;
	struct rng g = {test_seed("backend-image")};
	struct ig_errbuf eb = {0};
	void *pages[3], *back[3], *state_d, *state_back, *mirror[3];
	uint8_t sampler[64], sampler_back[64], *state_mirror = xmalloc(sb);
	struct seqimg_header h = {0};
	struct seqimg_writer w, ref;
	struct seqimg_reader r;
	uint64_t sums[16], ticket, n_ref, sum_ref, img_bytes;
	unsigned char *host = NULL, *want;
	uint32_t windows = 0;
	struct be b;

	be_open(&b, state, 64 * MiB);
	for (int i = 0; i < 3; i++) {
		pages[i] = dev_alloc(&b, pb);
		back[i] = dev_alloc(&b, pb);
		mirror[i] = xmalloc(pb); /* the host's copy of each part's bytes */
	}
	state_d = dev_alloc(&b, sb);
	state_back = dev_alloc(&b, sb);
	assert_int_equal(b.ops->host_alloc(&b, 16 * window, (void **)&host, &eb), IG_E_OK);
	want = xmalloc(16 * window);
	/* the device parts' bytes, the first page's by an async copy */
	for (int i = 0; i < 3; i++)
		fill(&g, mirror[i], pb);
	for (int i = 1; i < 3; i++)
		dev_put(&b, pages[i], mirror[i], pb);
	fill(&g, state_mirror, sb);
	dev_put(&b, state_d, state_mirror, sb);
	fill(&g, sampler, sizeof(sampler));
	snprintf(h.model, sizeof(h.model), "%s", m->name);
	h.model_id = seqimg_model_id(m);
	h.kv_format = MDESC_KV_BF16;
	h.page_bytes = (uint32_t)pb;
	h.tokens = 150;
	h.pages = 3;
	h.last_token = 7;
	h.state_bytes = sb;
	h.sampler_bytes = sizeof(sampler);
	seqimg_writer_init(&w, &h, &(struct seqimg_parts){pages, state_d, sampler});
	ticket = enqueue(&b, false, pages[0], mirror[0], pb); /* before the gathers: in order */
	for (;;) {
		struct be_img job = {
		    .w = &w, .dst = host + (uint64_t)windows * window, .window = window};
		uint64_t t2;

		assert_int_equal(b.ops->img_gather_async(&b, &job, &t2, &eb), IG_E_OK);
		assert_true(t2 > ticket);
		xwait(&b, t2);
		if (!job.n)
			break;
		sums[windows++] = job.sum;
		assert_true(windows < 16);
	}
	assert_true(seqimg_writer_done(&w));
	assert_true(windows > 1);
	img_bytes = w.h.image_bytes;
	/* the same image written on the host from the mirrors, window by window */
	seqimg_writer_init(&ref, &h, &(struct seqimg_parts){mirror, state_mirror, sampler});
	for (uint32_t k = 0; k < windows; k++) {
		seqimg_write_window_sum(&ref, want + (uint64_t)k * window, window, &n_ref,
		                        &sum_ref);
		assert_int_equal(sum_ref, sums[k]);
		assert_int_equal(sum_ref, kvcopy_sum(want + (uint64_t)k * window, n_ref));
	}
	assert_memory_equal(host, want, img_bytes);

	/* back: every window in one scatter */
	seqimg_reader_init(&r, m, MDESC_KV_BF16,
	                   &(struct seqimg_parts){back, state_back, sampler_back}, 3, sb,
	                   sizeof(sampler_back));
	{
		struct be_img job = {.r = &r,
		                     .src = host,
		                     .k0 = 0,
		                     .count = windows,
		                     .sums = sums,
		                     .window = window,
		                     .image_bytes = img_bytes};

		assert_int_equal(b.ops->img_scatter_async(&b, &job, &ticket, &eb), IG_E_OK);
		xwait(&b, ticket);
		assert_int_equal(job.rc, IG_E_OK);
	}
	assert_true(seqimg_reader_done(&r));
	for (int i = 0; i < 3; i++)
		assert_true(dev_equal(&b, back[i], mirror[i], pb));
	assert_true(dev_equal(&b, state_back, state_mirror, sb));
	assert_memory_equal(sampler_back, sampler, sizeof(sampler));

	/* a window whose checksum is not the recorded one: named */
	seqimg_reader_init(&r, m, MDESC_KV_BF16,
	                   &(struct seqimg_parts){back, state_back, sampler_back}, 3, sb,
	                   sizeof(sampler_back));
	sums[1] ^= 1;
	{
		struct be_img job = {.r = &r,
		                     .src = host,
		                     .count = windows,
		                     .sums = sums,
		                     .window = window,
		                     .image_bytes = img_bytes};

		assert_int_equal(b.ops->img_scatter_async(&b, &job, &ticket, &eb), IG_E_OK);
		xwait(&b, ticket);
		assert_int_equal(job.rc, IG_E_KV_LOST);
		assert_non_null(strstr(job.why, "window 1 does not match its checksum"));
	}
	/* a host window in device memory: refused, no ticket */
	{
		struct be_img job = {.w = &w, .dst = back[0], .window = 1024};

		ticket = 0;
		assert_int_equal(b.ops->img_gather_async(&b, &job, &ticket, &eb), IG_E_INVAL);
		assert_int_equal(ticket, 0);
		assert_non_null(strstr(eb.msg, "device memory"));
	}
	for (int i = 0; i < 3; i++) {
		b.ops->free(&b, pages[i], pb);
		b.ops->free(&b, back[i], pb);
		free(mirror[i]);
	}
	b.ops->free(&b, state_d, sb);
	b.ops->free(&b, state_back, sb);
	b.ops->host_free(&b, host, 16 * window);
	b.ops->close(&b);
	free(want);
	free(state_mirror);
}

/* Many small round trips through a ring of device slots, taking IG_E_BUSY
 * as the contract says: wait for the oldest ticket, enqueue again. */
static void test_stream_under_pressure(void **state)
{
	enum { ROUNDS = 2000, SLOTS = 32, SLOT = 512 };
	struct rng r = {test_seed("pressure")};
	static uint8_t in[ROUNDS][SLOT / 2], out[ROUNDS][SLOT / 2];
	uint64_t t_out[ROUNDS], len[ROUNDS], oldest = 1;
	struct ig_errbuf eb = {0};
	unsigned busy = 0;
	uint8_t *dev;
	struct be b;

	be_open(&b, state, 1 * MiB);
	dev = dev_alloc(&b, SLOTS * SLOT);
	for (int i = 0; i < ROUNDS; i++) {
		uint64_t n = 1 + rng_next(&r) % (SLOT / 2), off = rng_next(&r) % (SLOT / 2);
		uint8_t *slot = dev + (i % SLOTS) * SLOT + off;
		uint64_t t;

		len[i] = n;
		fill(&r, in[i], n);
		memset(out[i], 0, SLOT / 2);
		for (int dir = 0; dir < 2; dir++) {
			int rc;

			while ((rc = dir ? b.ops->copy_d2h_async(&b, out[i], slot, n, &t, &eb)
			                 : b.ops->copy_h2d_async(&b, slot, in[i], n, &t, &eb)) ==
			       IG_E_BUSY) {
				busy++;
				xwait(&b, oldest);
				oldest++;
			}
			assert_int_equal(rc, IG_E_OK);
		}
		t_out[i] = t;
		/* the slot is reused SLOTS rounds later, by then on the same stream */
		if (i % 97 == 0 && b.ops->xfer_done(&b, t_out[i]))
			assert_memory_equal(out[i], in[i], n);
	}
	xwait(&b, t_out[ROUNDS - 1]);
	for (int i = 0; i < ROUNDS; i++)
		if (memcmp(out[i], in[i], len[i]))
			fail_msg("round %d: the bytes differ", i);
	print_message("# pressure: %u enqueues found the stream full\n", busy);
	b.ops->free(&b, dev, SLOTS * SLOT);
	b.ops->close(&b);
}

int main(int argc, char **argv)
{
	static struct tb t = {"cpu"};
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_prestate(test_alloc_refused_with_figures, &t),
	    cmocka_unit_test_prestate(test_host_memory, &t),
	    cmocka_unit_test_prestate(test_sync_copies, &t),
	    cmocka_unit_test_prestate(test_bad_ranges_refused, &t),
	    cmocka_unit_test_prestate(test_async_sizes_in_order, &t),
	    cmocka_unit_test_prestate(test_done_and_wait, &t),
	    cmocka_unit_test_prestate(test_queue_full_refused_at_once, &t),
	    cmocka_unit_test_prestate(test_fault_at_every_copy, &t),
	    cmocka_unit_test_prestate(test_close_drains_in_flight, &t),
	    cmocka_unit_test_prestate(test_stream_under_pressure, &t),
	    cmocka_unit_test_prestate(test_image_windows, &t),
	};
	struct ig_errbuf eb = {0};
	struct be b = {0};
	int rc;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
			t.backend = argv[++i];
		} else {
			fprintf(stderr, "usage: test-backend [--backend NAME]\n");
			return 2;
		}
	}
	/* a backend this build or machine does not run: skipped, saying why */
	b.ops = backend_find(t.backend, &eb);
	if (!b.ops) {
		printf("# the %s backend: %s\n", t.backend, eb.msg);
		return strcmp(t.backend, "cuda") ? 2 : 77;
	}
	rc = b.ops->open(&b, 1 * MiB, &eb);
	if (rc == IG_E_NOTFOUND) {
		printf("# the %s backend: skipped: %s\n", t.backend, eb.msg);
		return 77;
	}
	if (rc) {
		fprintf(stderr, "the %s backend does not open: %s\n", t.backend, eb.msg);
		return 1;
	}
	b.ops->close(&b);
	printf("# the %s backend\n", t.backend);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
