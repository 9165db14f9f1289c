/*
 * test_kvclient.c - the worker's kvstore client (gpu-worker/engine/kvclient.h)
 * against a real ignis-kvstored (IGNIS_KVSTORED names the binary), started
 * in a private runtime directory and configured by the test as the
 * supervisor would (kv_config over a separate REQ socket): a 4 MiB KV-RAM
 * arena named after the test's pid, KV-disk off.
 *
 * Every kvc_start and kvc_poll is timed: none may take KVC_TEST_POLL_MAX_MS
 * (50 ms; they take microseconds, the bound is for a noisy machine), since
 * a decode round must never wait for the kvstore daemon. Cases:
 *   - a sequence moved out window by window (reserve, copy into the mapped
 *     arena, commit each) and fetched back byte for byte; a second request
 *     while one is in flight is IG_E_BUSY;
 *   - kill -9 of the daemon with a fetch in flight (the daemon stopped
 *     first, so the request is surely sent and unanswered), a new daemon on
 *     the same runtime directory, unconfigured for a while, then
 *     configured: the same client gets its reply, the earlier sequence is
 *     there byte for byte, and the client goes on with a new one;
 *   - no daemon at kvc_open: the open succeeds, a reserve waits through the
 *     daemon's start and its configuration, then completes;
 *   - a restarted daemon configured with another arena: the client maps it
 *     (gen 2) before handing out offsets into it, the old mapping stays;
 *   - refusals come back as the daemon's code and message (fetch of an
 *     unknown seq: IG_E_NOTFOUND; a wrong checksum: IG_E_INVAL), kvc_poll
 *     with nothing started is IG_E_INVAL, and a request to no daemon times
 *     out with IG_E_TIMEOUT naming the socket; kvc_close with a request
 *     waiting for no daemon returns at once.
 * Each case kills its daemon, removes its runtime directory and unlinks its
 * arena from /dev/shm, also when it fails.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvstore-daemon/arena.h"
#include "gpu-worker/engine/kvclient.h"
#include "proto/transport.h"

#define KVC_TEST_POLL_MAX_MS  50
#define KVC_TEST_ARENA_BYTES  (4u << 20)
#define KVC_TEST_WAIT_MS      20000u /* a reply that should come, at most (a loaded CI machine) */
#define KVC_TEST_IMAGE_BYTES  1000000u
#define KVC_TEST_WINDOW_BYTES 262144u /* 4 windows, the last 213,568 B */

struct fx {
	char dir[64];
	char arena[64];
	char arena2[64]; /* the one a restarted daemon may be given instead */
	const char *bin;
	pid_t pid; /* the daemon; 0 when none */
	struct kvc *c;
	double max_call_ms; /* the slowest kvc_start or kvc_poll */
	unsigned long calls;
};

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- the daemon ----------------------------------------------------------- */

static void daemon_start(struct fx *f)
{
	char log[96];
	pid_t pid;

	assert_int_equal(f->pid, 0);
	snprintf(log, sizeof(log), "%s/kvstored.log", f->dir);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);

		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execl(f->bin, f->bin, "--runtime-dir", f->dir, (char *)NULL);
		_exit(127);
	}
	f->pid = pid;
}

static void daemon_kill(struct fx *f, int sig)
{
	int status;

	if (!f->pid)
		return;
	kill(f->pid, sig);
	if (sig == SIGTERM) {
		/* an orderly exit takes milliseconds; then no mercy */
		for (int i = 0; i < 300; i++) {
			if (waitpid(f->pid, &status, WNOHANG) == f->pid) {
				f->pid = 0;
				return;
			}
			usleep(10000);
		}
		kill(f->pid, SIGKILL);
	}
	waitpid(f->pid, &status, 0);
	f->pid = 0;
}

/* The supervisor's part: kv_config over a socket of its own. */
static void daemon_configure_arena(struct fx *f, const char *arena)
{
	struct msg q = {.type = MSG_KV_CONFIG};
	struct ig_errbuf eb = {0};
	struct tp_rx rx;
	nng_socket s;
	int rc;

	assert_int_equal(tp_dial(&s, f->dir, "kvstore", (int)KVC_TEST_WAIT_MS, &eb), IG_E_OK);
	q.u.kv_config = (struct msg_kv_config){.arena_name = msg_str_of(arena),
	                                       .arena_bytes = KVC_TEST_ARENA_BYTES,
	                                       .disk_path = msg_str_of(""),
	                                       .disk_bytes = 0,
	                                       .interactive_ttl_s = 0};
	rc = tp_call(s, &q, &rx, &eb);
	if (rc)
		fail_msg("kv_config: %s", eb.msg);
	assert_int_equal(rx.m.type, MSG_ACK);
	tp_rx_release(&rx);
	nng_close(s);
}

static void daemon_configure(struct fx *f)
{
	daemon_configure_arena(f, f->arena);
}

/* ---- fixture ----------------------------------------------------------- */

static int setup(void **state)
{
	static unsigned n;
	struct fx *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	f->bin = getenv("IGNIS_KVSTORED");
	if (!f->bin || access(f->bin, X_OK)) {
		fprintf(stderr, "IGNIS_KVSTORED=%s: not an executable ignis-kvstored\n",
		        f->bin ? f->bin : "(unset)");
		free(f);
		return -1;
	}
	snprintf(f->dir, sizeof(f->dir), "/tmp/ignis-kvc-XXXXXX");
	if (!mkdtemp(f->dir)) {
		free(f);
		return -1;
	}
	snprintf(f->arena, sizeof(f->arena), "ignis-test-kvc-%ld-%u", (long)getpid(), n);
	snprintf(f->arena2, sizeof(f->arena2), "ignis-test-kvc-%ld-%u-b", (long)getpid(), n++);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	struct ig_errbuf eb;
	const char *files[] = {"kvstored.log", "kvstore.sock", "kvstore.lock"};
	char path[128];

	kvc_close(f->c);
	daemon_kill(f, SIGTERM);
	(void)arena_unlink(f->arena, &eb);
	(void)arena_unlink(f->arena2, &eb);
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", f->dir, files[i]);
		unlink(path);
	}
	rmdir(f->dir);
	if (f->calls)
		print_message("# %lu kvc_start/kvc_poll calls, the slowest %.3f ms\n", f->calls,
		              f->max_call_ms);
	free(f);
	return 0;
}

/* ---- the client, every call timed --------------------------------------------- */

static void timed(struct fx *f, double t0, const char *what)
{
	double dt = now_ms() - t0;

	f->calls++;
	if (dt > f->max_call_ms)
		f->max_call_ms = dt;
	if (dt > KVC_TEST_POLL_MAX_MS)
		fail_msg("%s took %.1f ms: it must never wait for the daemon", what, dt);
}

static int start(struct fx *f, const struct msg *q, struct ig_errbuf *eb)
{
	double t0 = now_ms();
	int rc = kvc_start(f->c, q, eb);

	timed(f, t0, "kvc_start");
	return rc;
}

/* Poll for up to `ms`; *done says whether the reply came. */
static int poll_for(struct fx *f, unsigned ms, struct msg *rep, bool *done, struct ig_errbuf *eb)
{
	double end = now_ms() + ms;
	int rc;

	do {
		double t0 = now_ms();

		rc = kvc_poll(f->c, rep, done, eb);
		timed(f, t0, "kvc_poll");
		if (*done)
			return rc;
		assert_int_equal(rc, IG_E_OK);
		usleep(200);
	} while (now_ms() < end);
	return rc;
}

/* A reply that must come. */
static int await(struct fx *f, struct msg *rep, struct ig_errbuf *eb)
{
	bool done = false;
	int rc = poll_for(f, KVC_TEST_WAIT_MS, rep, &done, eb);

	if (!done)
		fail_msg("no reply within %u ms", KVC_TEST_WAIT_MS);
	return rc;
}

static void call_ok(struct fx *f, const struct msg *q, uint32_t want, struct msg *rep)
{
	struct ig_errbuf eb = {0};
	int rc = start(f, q, &eb);

	if (rc)
		fail_msg("kvc_start %s: %s", msg_type_name(q->type), eb.msg);
	rc = await(f, rep, &eb);
	if (rc)
		fail_msg("%s: %s (%s)", msg_type_name(q->type), eb.msg, ig_err_name(rc));
	assert_int_equal(rep->type, want);
}

static void pattern(unsigned char *p, size_t n, uint64_t seed)
{
	uint64_t s = seed;

	for (size_t i = 0; i < n; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		p[i] = (unsigned char)(s >> 56);
	}
}

/* The rest of a move out once kv_reserved came: every window copied into
 * the arena and committed, one request at a time. */
static void commit_all(struct fx *f, uint64_t seq, uint64_t offset, const unsigned char *img)
{
	struct kvc_arena a = kvc_arena(f->c);
	uint64_t at, len;
	struct msg q, rep;

	assert_non_null(a.base);
	assert_true(offset + KVC_TEST_IMAGE_BYTES <= a.bytes);
	for (uint64_t k = 0; kvc_window(KVC_TEST_IMAGE_BYTES, KVC_TEST_WINDOW_BYTES, k, &at, &len);
	     k++) {
		struct ig_errbuf eb = {0};

		if (k % 2) { /* copied and hashed in one pass */
			assert_int_equal(kvc_write_window(f->c, &q, seq, offset,
			                                  KVC_TEST_IMAGE_BYTES,
			                                  KVC_TEST_WINDOW_BYTES, k, img + at, &eb),
			                 IG_E_OK);
		} else { /* bytes already in place (a DMA), hashed there */
			memcpy((unsigned char *)a.base + offset + at, img + at, len);
			assert_int_equal(kvc_req_commit_window(f->c, &q, seq, offset,
			                                       KVC_TEST_IMAGE_BYTES,
			                                       KVC_TEST_WINDOW_BYTES, k, &eb),
			                 IG_E_OK);
		}
		assert_int_equal(q.u.kv_commit.len, len);
		assert_int_equal(q.u.kv_commit.sum, kvc_sum(img + at, len));
		call_ok(f, &q, MSG_ACK, &rep);
		assert_int_equal(rep.u.ack.of, MSG_KV_COMMIT);
	}
}

/* Reserve and commit `seq`; its offset in the arena. */
static uint64_t move_out(struct fx *f, uint64_t seq, const unsigned char *img)
{
	struct msg q, rep;

	kvc_req_reserve(&q, seq, 7, 1, "agent", KVC_TEST_IMAGE_BYTES, KVC_TEST_WINDOW_BYTES);
	call_ok(f, &q, MSG_KV_RESERVED, &rep);
	assert_int_equal(rep.u.kv_reserved.seq, seq);
	assert_int_equal(rep.u.kv_reserved.windows, 4);
	commit_all(f, seq, rep.u.kv_reserved.offset, img);
	return rep.u.kv_reserved.offset;
}

/* Fetch `seq` back and compare it with `img`. */
static void check_back(struct fx *f, uint64_t seq, const unsigned char *img)
{
	struct kvc_arena a;
	struct msg q, rep;

	kvc_req_fetch(&q, seq);
	call_ok(f, &q, MSG_KV_SEQ, &rep);
	a = kvc_arena(f->c);
	assert_non_null(a.base);
	assert_true(msg_str_eq(rep.u.kv_seq.tier, "ram"));
	assert_true(msg_str_eq(rep.u.kv_seq.class, "agent"));
	assert_true(rep.u.kv_seq.complete);
	assert_int_equal(rep.u.kv_seq.committed, 4);
	assert_int_equal(rep.u.kv_seq.image_bytes, KVC_TEST_IMAGE_BYTES);
	assert_int_equal(rep.u.kv_seq.model_id, 7);
	assert_true(rep.u.kv_seq.offset + KVC_TEST_IMAGE_BYTES <= a.bytes);
	assert_memory_equal((unsigned char *)a.base + rep.u.kv_seq.offset, img,
	                    KVC_TEST_IMAGE_BYTES);
	/* the reader's way: the recorded checksums, each window checked while
	 * copied out */
	{
		static unsigned char out[KVC_TEST_IMAGE_BYTES];
		struct ig_errbuf eb = {0};
		const uint64_t *sums = rep.u.kv_seq.sums.v;
		uint32_t n = rep.u.kv_seq.sums.n;
		uint64_t at, len;

		/* the fetch reply carries them, and says where the windows lie */
		assert_int_equal(n, 4);
		assert_int_equal(rep.u.kv_seq.stride, KVC_TEST_WINDOW_BYTES);
		memset(out, 0, sizeof(out));
		for (uint64_t k = 0; k < n; k++) {
			assert_true(
			    kvc_window(KVC_TEST_IMAGE_BYTES, KVC_TEST_WINDOW_BYTES, k, &at, &len));
			assert_int_equal(
			    kvc_read_window(f->c, seq, rep.u.kv_seq.offset, KVC_TEST_IMAGE_BYTES,
			                    KVC_TEST_WINDOW_BYTES, k, sums[k], out + at, &eb),
			    IG_E_OK);
		}
		assert_memory_equal(out, img, KVC_TEST_IMAGE_BYTES);
	}
}

static void open_client(struct fx *f)
{
	struct ig_errbuf eb = {0};
	int rc = kvc_open(&f->c, f->dir, &eb);

	if (rc)
		fail_msg("kvc_open: %s", eb.msg);
}

/* ---- cases ----------------------------------------------------------------- */

static void test_move_out_and_back(void **state)
{
	struct fx *f = *state;
	unsigned char *img = malloc(KVC_TEST_IMAGE_BYTES);
	struct ig_errbuf eb = {0};
	struct msg q, rep;
	bool done;

	assert_non_null(img);
	pattern(img, KVC_TEST_IMAGE_BYTES, 1);
	daemon_start(f);
	daemon_configure(f);
	open_client(f);

	/* one at a time: a second start while the first is out is refused */
	kvc_req_stats(&q);
	assert_int_equal(start(f, &q, &eb), IG_E_OK);
	assert_true(kvc_pending(f->c));
	assert_int_equal(start(f, &q, &eb), IG_E_BUSY);
	assert_non_null(strstr(eb.msg, "kvstore.sock"));
	assert_int_equal(await(f, &rep, &eb), IG_E_OK);
	assert_int_equal(rep.type, MSG_KV_STATS_REPLY);
	assert_true(msg_str_eq(rep.u.kv_stats_reply.arena_name, f->arena));
	assert_false(kvc_pending(f->c));

	move_out(f, 1, img);
	assert_int_equal(kvc_arena(f->c).gen, 1);
	check_back(f, 1, img);

	/* the list shows it, complete */
	kvc_req_list(&q, 0);
	call_ok(f, &q, MSG_KV_LIST_REPLY, &rep);
	assert_int_equal(rep.u.kv_list_reply.seqs.n, 1);
	assert_int_equal(rep.u.kv_list_reply.seqs.v[0].seq, 1);
	assert_true(rep.u.kv_list_reply.seqs.v[0].complete);

	/* nothing started: a question with no request is refused */
	assert_int_equal(kvc_poll(f->c, &rep, &done, &eb), IG_E_INVAL);
	assert_false(done);
	free(img);
}

static void test_daemon_killed_with_request_in_flight(void **state)
{
	struct fx *f = *state;
	unsigned char *img = malloc(KVC_TEST_IMAGE_BYTES), *img2 = malloc(KVC_TEST_IMAGE_BYTES);
	struct ig_errbuf eb = {0};
	struct kvc_arena a;
	struct msg q, rep;
	bool done = false;

	assert_non_null(img);
	assert_non_null(img2);
	pattern(img, KVC_TEST_IMAGE_BYTES, 2);
	pattern(img2, KVC_TEST_IMAGE_BYTES, 3);
	daemon_start(f);
	daemon_configure(f);
	open_client(f);
	move_out(f, 1, img);

	/* stopped, the daemon holds the fetch unanswered; then it dies */
	assert_int_equal(kill(f->pid, SIGSTOP), 0);
	kvc_req_fetch(&q, 1);
	assert_int_equal(start(f, &q, &eb), IG_E_OK);
	poll_for(f, 100, &rep, &done, &eb);
	assert_false(done);
	daemon_kill(f, SIGKILL);
	poll_for(f, 100, &rep, &done, &eb);
	assert_false(done);

	/* a new daemon, not configured yet: the request waits */
	daemon_start(f);
	if (poll_for(f, 300, &rep, &done, &eb) || done)
		fail_msg("the fetch in flight, before kv_config: %s", done ? eb.msg : "");
	daemon_configure(f);
	if (await(f, &rep, &eb))
		fail_msg("the fetch in flight: %s", eb.msg);
	assert_int_equal(rep.type, MSG_KV_SEQ);
	assert_true(rep.u.kv_seq.complete);
	a = kvc_arena(f->c);
	assert_int_equal(a.gen, 1); /* the same object: no remap */
	assert_memory_equal((unsigned char *)a.base + rep.u.kv_seq.offset, img,
	                    KVC_TEST_IMAGE_BYTES);

	/* and it goes on */
	move_out(f, 2, img2);
	check_back(f, 2, img2);
	check_back(f, 1, img);
	free(img);
	free(img2);
}

static void test_no_daemon_at_open(void **state)
{
	struct fx *f = *state;
	unsigned char *img = malloc(KVC_TEST_IMAGE_BYTES);
	struct ig_errbuf eb = {0};
	struct msg q, rep;
	bool done = false;

	assert_non_null(img);
	pattern(img, KVC_TEST_IMAGE_BYTES, 4);
	open_client(f);
	assert_null(kvc_arena(f->c).base);
	kvc_req_reserve(&q, 9, 7, 1, "agent", KVC_TEST_IMAGE_BYTES, KVC_TEST_WINDOW_BYTES);
	assert_int_equal(start(f, &q, &eb), IG_E_OK);
	poll_for(f, 150, &rep, &done, &eb);
	assert_false(done);
	daemon_start(f);
	poll_for(f, 300, &rep, &done, &eb);
	assert_false(done); /* there, but not configured */
	assert_null(kvc_arena(f->c).base);
	daemon_configure(f);
	if (await(f, &rep, &eb))
		fail_msg("the reserve: %s", eb.msg);
	assert_int_equal(rep.type, MSG_KV_RESERVED);
	assert_non_null(kvc_arena(f->c).base);
	commit_all(f, 9, rep.u.kv_reserved.offset, img);
	check_back(f, 9, img);
	free(img);
}

static void test_new_arena_after_restart(void **state)
{
	struct fx *f = *state;
	unsigned char *img = malloc(KVC_TEST_IMAGE_BYTES), *img2 = malloc(KVC_TEST_IMAGE_BYTES);
	struct kvc_arena a1, a2;
	uint64_t off1;

	assert_non_null(img);
	assert_non_null(img2);
	pattern(img, KVC_TEST_IMAGE_BYTES, 5);
	pattern(img2, KVC_TEST_IMAGE_BYTES, 6);
	daemon_start(f);
	daemon_configure(f);
	open_client(f);
	off1 = move_out(f, 1, img);
	a1 = kvc_arena(f->c);
	assert_int_equal(a1.gen, 1);

	/* the next daemon serves another arena: the client maps it before it
	 * hands out the reserve's offsets, and keeps the old one mapped */
	daemon_kill(f, SIGKILL);
	daemon_start(f);
	daemon_configure_arena(f, f->arena2);
	move_out(f, 2, img2);
	a2 = kvc_arena(f->c);
	assert_int_equal(a2.gen, 2);
	assert_ptr_not_equal(a2.base, a1.base);
	check_back(f, 2, img2);
	/* the old mapping is still there, and so is seq 1 in it */
	assert_memory_equal((unsigned char *)a1.base + off1, img, KVC_TEST_IMAGE_BYTES);
	free(img);
	free(img2);
}

static void test_refusals(void **state)
{
	struct fx *f = *state;
	struct ig_errbuf eb = {0};
	struct msg q, rep;
	int rc;

	daemon_start(f);
	daemon_configure(f);
	open_client(f);

	/* the daemon's code and message */
	kvc_req_fetch(&q, 424242);
	assert_int_equal(start(f, &q, &eb), IG_E_OK);
	rc = await(f, &rep, &eb);
	assert_int_equal(rc, IG_E_NOTFOUND);
	assert_non_null(strstr(eb.msg, "seq 424242: held in no tier"));
	assert_non_null(strstr(eb.msg, "kv_fetch"));
	assert_non_null(strstr(eb.msg, f->dir));

	/* a checksum that does not match the bytes is recorded as given (the
	 * daemon does not read committed bytes, ADR 0015): the reader's check
	 * refuses the window */
	kvc_req_reserve(&q, 5, 7, 1, "interactive", KVC_TEST_IMAGE_BYTES, KVC_TEST_WINDOW_BYTES);
	call_ok(f, &q, MSG_KV_RESERVED, &rep);
	{
		static unsigned char out[KVC_TEST_WINDOW_BYTES];
		uint64_t off = rep.u.kv_reserved.offset, sums[8];

		assert_int_equal(rep.u.kv_reserved.stride, KVC_TEST_WINDOW_BYTES);
		kvc_req_commit(&q, 5, 0, KVC_TEST_WINDOW_BYTES, 12345);
		call_ok(f, &q, MSG_ACK, &rep);
		kvc_req_fetch(&q, 5);
		call_ok(f, &q, MSG_KV_SEQ, &rep); /* incomplete: one window committed */
		assert_false(rep.u.kv_seq.complete);
		/* every window's sum, 0 for those not committed */
		assert_int_equal(rep.u.kv_seq.sums.n, rep.u.kv_seq.windows);
		assert_true(rep.u.kv_seq.windows > 1);
		sums[0] = rep.u.kv_seq.sums.v[0];
		assert_int_equal(sums[0], 12345);
		for (uint32_t k = 1; k < rep.u.kv_seq.sums.n; k++)
			assert_int_equal(rep.u.kv_seq.sums.v[k], 0);
		assert_int_equal(kvc_read_window(f->c, 5, off, KVC_TEST_IMAGE_BYTES,
		                                 KVC_TEST_WINDOW_BYTES, 0, sums[0], out, &eb),
		                 IG_E_KV_LOST);
		assert_non_null(strstr(eb.msg, "not the 0000000000003039 committed"));
		assert_int_equal(kvc_read_window(f->c, 5, off, KVC_TEST_IMAGE_BYTES,
		                                 KVC_TEST_WINDOW_BYTES, 4, 0, out, &eb),
		                 IG_E_INVAL);
	}

	/* the client's own: a window past the last, a request out of its limits */
	assert_int_equal(kvc_req_commit_window(f->c, &q, 5, 0, KVC_TEST_IMAGE_BYTES,
	                                       KVC_TEST_WINDOW_BYTES, 4, &eb),
	                 IG_E_INVAL);
	kvc_req_reserve(&q, 0, 7, 1, "agent", 1, 1);
	assert_int_equal(start(f, &q, &eb), IG_E_PROTO_FIELD_RANGE);
	assert_false(kvc_pending(f->c));

	/* the same seq again, another reservation: busy */
	kvc_req_reserve(&q, 5, 7, 1, "agent", KVC_TEST_IMAGE_BYTES, KVC_TEST_WINDOW_BYTES);
	assert_int_equal(start(f, &q, &eb), IG_E_OK);
	assert_int_equal(await(f, &rep, &eb), IG_E_BUSY);
}

static void test_timeout(void **state)
{
	struct fx *f = *state;
	struct ig_errbuf eb = {0};
	struct msg q, rep;
	double t0;

	open_client(f);
	kvc_set_timeout(f->c, 300);
	kvc_req_drop(&q, 3);
	t0 = now_ms();
	assert_int_equal(start(f, &q, &eb), IG_E_OK);
	assert_int_equal(await(f, &rep, &eb), IG_E_TIMEOUT);
	assert_true(now_ms() - t0 < 2000);
	assert_non_null(strstr(eb.msg, "kvstore.sock"));
	assert_non_null(strstr(eb.msg, "kv_drop"));

	/* closing with a request waiting for no daemon and no limit: at once */
	kvc_set_timeout(f->c, 0);
	assert_int_equal(start(f, &q, &eb), IG_E_OK);
	usleep(20000);
	t0 = now_ms();
	kvc_close(f->c);
	f->c = NULL;
	assert_true(now_ms() - t0 < 1000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_move_out_and_back, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_daemon_killed_with_request_in_flight, setup,
	                                    teardown),
	    cmocka_unit_test_setup_teardown(test_no_daemon_at_open, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_new_arena_after_restart, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_timeout, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
