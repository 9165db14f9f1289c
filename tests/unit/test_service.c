/*
 * test_service.c - the control service and the nng transport, in one
 * process over real ipc sockets: builtins, a handler, typed error replies to
 * malformed and unexpected messages (the service keeps serving), the lock
 * that keeps a second listener off a live path, file modes, a client that
 * dies mid-connect, and a clean close.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <fcntl.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/clock.h"
#include "common/event.h"
#include "proto/service.h"

#include <nng/protocol/reqrep0/rep.h>

struct fixture {
	char dir[64];
	struct svc svc;
	pthread_t thread;
	atomic_bool quit;
	int statuses; /* served by the handler */
};

static int handle(void *ctx, const struct msg *req, struct msg *reply, struct ig_errbuf *eb)
{
	struct fixture *f = ctx;

	if (req->type != MSG_STATUS)
		return ig_errf(eb, IG_E_PROTO_UNEXPECTED, "test service takes status only, not %s",
		               msg_type_name(req->type));
	f->statuses++;
	if (req->u.status.seq == 999) /* a long step: the loop away 1.5 s */
		usleep(1500 * 1000);
	reply->type = MSG_STATUS_REPLY;
	reply->u.status_reply.seq = req->u.status.seq;
	reply->u.status_reply.procs.n = 1;
	reply->u.status_reply.procs.v[0] = (struct msg_proc){
	    .role = msg_str_of("test-svc"),
	    .pid = (uint64_t)getpid(),
	    .state = msg_str_of("running"),
	    .uptime_ms = 1,
	    .restarts = 0,
	};
	return IG_E_OK;
}

static void *serve(void *arg)
{
	struct fixture *f = arg;

	while (!atomic_load(&f->quit) && !svc_stop_requested(&f->svc))
		if (svc_poll(&f->svc, 50, handle, f) != IG_E_OK)
			break;
	return NULL;
}

static int setup_ping(void **state, int ping_ms)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct ig_errbuf eb;
	int devnull;

	/* Events go to /dev/null: the test's stdout is for cmocka. */
	devnull = open("/dev/null", O_WRONLY);
	ev_setup("test", devnull);
	snprintf(f->dir, sizeof(f->dir), "/tmp/ignis-test-svc-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	if (svc_open(&f->svc, "test-svc", f->dir, "test", ping_ms, &eb) != IG_E_OK)
		fail_msg("svc_open: %s", eb.msg);
	atomic_init(&f->quit, false);
	assert_int_equal(pthread_create(&f->thread, NULL, serve, f), 0);
	*state = f;
	return 0;
}

static int setup(void **state)
{
	return setup_ping(state, 200);
}

/* The safety-net ping out of reach: only the listener's counters can cure a
 * wedge within the test's time. */
static int setup_noping(void **state)
{
	return setup_ping(state, 600000);
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	char path[128];

	atomic_store(&f->quit, true);
	pthread_join(f->thread, NULL);
	svc_close(&f->svc);
	svc_close(&f->svc); /* idempotent */
	snprintf(path, sizeof(path), "%s/test.sock", f->dir);
	assert_int_not_equal(access(path, F_OK), 0);
	snprintf(path, sizeof(path), "%s/test.lock", f->dir);
	assert_int_not_equal(access(path, F_OK), 0);
	assert_int_equal(rmdir(f->dir), 0); /* nothing left behind */
	free(f);
	return 0;
}

static nng_socket client(struct fixture *f)
{
	struct ig_errbuf eb;
	nng_socket s;

	if (tp_dial(&s, f->dir, "test", 2000, &eb) != IG_E_OK)
		fail_msg("dial: %s", eb.msg);
	return s;
}

static void test_builtins_and_handler(void **state)
{
	struct fixture *f = *state;
	nng_socket s = client(f);
	struct msg req = {.type = MSG_HELLO};
	struct ig_errbuf eb;
	struct tp_rx rx;

	req.u.hello.role = msg_str_of("tester");
	req.u.hello.pid = (uint64_t)getpid();
	assert_int_equal(tp_call(s, &req, &rx, &eb), IG_E_OK);
	assert_int_equal(rx.m.type, MSG_HELLO);
	assert_true(msg_str_eq(rx.m.u.hello.role, "test-svc"));
	assert_int_equal(rx.m.u.hello.pid, (uint64_t)getpid());
	tp_rx_release(&rx);

	req = (struct msg){.type = MSG_PING};
	req.u.ping.seq = 77;
	assert_int_equal(tp_call(s, &req, &rx, &eb), IG_E_OK);
	assert_int_equal(rx.m.type, MSG_PONG);
	assert_int_equal(rx.m.u.pong.seq, 77);
	tp_rx_release(&rx);

	req = (struct msg){.type = MSG_STATUS};
	req.u.status.seq = 5;
	assert_int_equal(tp_call(s, &req, &rx, &eb), IG_E_OK);
	assert_int_equal(rx.m.type, MSG_STATUS_REPLY);
	assert_int_equal(rx.m.u.status_reply.procs.n, 1);
	assert_true(msg_str_eq(rx.m.u.status_reply.procs.v[0].state, "running"));
	tp_rx_release(&rx);

	/* A type the service does not take: a typed error reply, named. */
	req = (struct msg){.type = MSG_ACK};
	req.u.ack.of = 1;
	assert_int_equal(tp_call(s, &req, &rx, &eb), IG_E_PROTO_UNEXPECTED);
	assert_non_null(strstr(eb.msg, "ack"));
	nng_close(s);
}

/* A long step of the loop (a round of a large model) blocks its requests, not
 * its pings: they are answered at once, saying how long the loop has been
 * away, and after the step the loop is back (a small loop_ms). */
struct busy_call {
	struct fixture *f;
	int rc;
};

static void *busy_caller(void *arg)
{
	struct busy_call *b = arg;
	nng_socket s = client(b->f);
	struct msg req = {.type = MSG_STATUS};
	struct ig_errbuf eb;
	struct tp_rx rx;

	req.u.status.seq = 999;
	b->rc = tp_call(s, &req, &rx, &eb);
	if (b->rc == IG_E_OK)
		tp_rx_release(&rx);
	nng_close(s);
	return NULL;
}

static void test_pings_while_busy(void **state)
{
	struct fixture *f = *state;
	struct busy_call b = {f, -1};
	nng_socket s = client(f);
	struct msg ping = {.type = MSG_PING};
	struct ig_errbuf eb;
	struct tp_rx rx;
	pthread_t t;

	assert_int_equal(pthread_create(&t, NULL, busy_caller, &b), 0);
	usleep(600 * 1000); /* the loop is inside the long step */
	for (int i = 0; i < 3; i++) {
		uint64_t t0 = clk_mono_ms();

		ping.u.ping.seq = 100 + (uint64_t)i;
		nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 500);
		assert_int_equal(tp_call(s, &ping, &rx, &eb), IG_E_OK);
		assert_int_equal(rx.m.type, MSG_PONG);
		assert_int_equal(rx.m.u.pong.seq, 100 + (uint64_t)i);
		if (rx.m.u.pong.loop_ms < 400)
			fail_msg("ping %d: the loop away %llu ms inside a 1.5 s step", i,
			         (unsigned long long)rx.m.u.pong.loop_ms);
		tp_rx_release(&rx);
		assert_true(clk_mono_ms() - t0 < 400); /* not waiting for the loop */
		usleep(100 * 1000);
	}
	pthread_join(t, NULL);
	assert_int_equal(b.rc, IG_E_OK);
	usleep(200 * 1000);
	ping.u.ping.seq = 7;
	assert_int_equal(tp_call(s, &ping, &rx, &eb), IG_E_OK);
	if (rx.m.u.pong.loop_ms > 1000)
		fail_msg("the loop away %llu ms after its step",
		         (unsigned long long)rx.m.u.pong.loop_ms);
	tp_rx_release(&rx);
	nng_close(s);
}

/* Send raw bytes, expect an error reply with `want`, then a ping still works. */
static void raw_exchange(struct fixture *f, const void *bytes, size_t n, int want)
{
	nng_socket s = client(f);
	struct msg ping = {.type = MSG_PING};
	struct ig_errbuf eb;
	struct tp_rx rx;

	assert_int_equal(nng_send(s, (void *)bytes, n, 0), 0);
	assert_int_equal(tp_recv(s, &rx, &eb), IG_E_OK);
	assert_int_equal(rx.m.type, MSG_ERROR);
	if (rx.m.u.error.code != (uint64_t)want)
		fail_msg("error reply code %s, want %s", ig_err_name((int)rx.m.u.error.code),
		         ig_err_name(want));
	assert_true(rx.m.u.error.message.n > 0);
	tp_rx_release(&rx);
	ping.u.ping.seq = 9;
	assert_int_equal(tp_call(s, &ping, &rx, &eb), IG_E_OK);
	assert_int_equal(rx.m.u.pong.seq, 9);
	tp_rx_release(&rx);
	nng_close(s);
}

static void test_malformed_gets_typed_error(void **state)
{
	struct fixture *f = *state;
	static const unsigned char junk[] = {0xc1};
	static const unsigned char truncated[] = {0x83, 0xa1, 0x74, 0x02};
	static const unsigned char v127[] = {0x83, 0xa1, 0x74, 0x02, 0xa1, 0x76,
	                                     0x7f, 0xa3, 0x73, 0x65, 0x71, 0x00};
	static const unsigned char unknown[] = {
	    0x83, 0xa1, 0x74, 0x63, 0xa1, 0x76, MSG_PROTO_VERSION, 0xa3, 0x73, 0x65, 0x71, 0x00};

	raw_exchange(f, junk, sizeof(junk), IG_E_PROTO_MALFORMED);
	raw_exchange(f, truncated, sizeof(truncated), IG_E_PROTO_TRUNCATED);
	raw_exchange(f, v127, sizeof(v127), IG_E_PROTO_VERSION);
	raw_exchange(f, unknown, sizeof(unknown), IG_E_PROTO_UNKNOWN_TYPE);
}

/* Poll with fresh clients until the service answers a ping; print how long. */
static bool answers_within(struct fixture *f, uint64_t ms)
{
	uint64_t start = clk_mono_ms();

	while (clk_mono_ms() - start < ms) {
		struct msg ping = {.type = MSG_PING};
		struct ig_errbuf eb;
		struct tp_rx rx;
		nng_socket s;
		bool ok;

		if (tp_dial(&s, f->dir, "test", 500, &eb) != IG_E_OK)
			fail_msg("dial: %s", eb.msg);
		ping.u.ping.seq = 11;
		ok = tp_call(s, &ping, &rx, &eb) == IG_E_OK && rx.m.u.pong.seq == 11;
		tp_rx_release(&rx);
		nng_close(s);
		if (ok) {
			printf("# answered after %llu ms (listener re-created %llu times)\n",
			       (unsigned long long)(clk_mono_ms() - start),
			       (unsigned long long)svc_relistens(&f->svc));
			return true;
		}
	}
	return false;
}

static void test_files_and_lock(void **state)
{
	struct fixture *f = *state;
	struct tp_listener second;
	struct ig_errbuf eb;
	char path[128], want[32];
	struct stat st;
	pid_t holder;

	snprintf(path, sizeof(path), "%s/test.sock", f->dir);
	assert_int_equal(stat(path, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_true(tp_lock_held(f->dir, "test", &holder));
	assert_int_equal(holder, getpid());
	/* flock is per open file description: a second lock in the same
	 * process conflicts too, as it would in another process. */
	assert_int_equal(tp_listen_guarded(&second, f->dir, "test", NULL, &eb), IG_E_BUSY);
	snprintf(want, sizeof(want), "pid %ld", (long)getpid());
	assert_non_null(strstr(eb.msg, want));
	/* ...and the first listener was not disturbed. */
	test_builtins_and_handler(state);
	assert_false(tp_lock_held(f->dir, "nothing-here", &holder));
}

static void poke(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
}

/* A client that connects at the socket level and vanishes before nng's
 * header: the case that wedges an nng 1.5.2 listener. The service answers
 * again by itself, the ping out of reach: the guard saw the wedge in the
 * listener's counters (before: the ping alone cured it, 5-7 s later). */
static void test_client_dies_mid_connect(void **state)
{
	struct fixture *f = *state;
	char path[128];
	uint64_t start;

	snprintf(path, sizeof(path), "%s/test.sock", f->dir);
	/* A poke wedges the listener, or is counted as a connection aborted
	 * before nng accepted it (nng's accept goes on, and the guard leaves
	 * the listener alone): whichever it was, every round is answered again
	 * within 2 s, cured or never wedged. Whether a round wedges is the
	 * kernel's timing (24 rounds under ASan on a loaded CI machine once saw
	 * none), so the wedge itself is not required here: test_guard_cures_
	 * and_keeps_clients below makes 20 and checks each is cured. */
	for (int round = 0; round < 12; round++) {
		for (int i = 0; i < 5; i++)
			poke(path);
		assert_true(answers_within(f, 2000));
		start = clk_mono_ms();
		while (svc_relistens(&f->svc) < 1 && clk_mono_ms() - start < 200)
			clk_sleep_ms(10);
	}
	print_message("# %u listeners re-created over 12 rounds of pokes\n",
	              (unsigned)svc_relistens(&f->svc));
}

/* ---- the guard alone, over an echo socket ---------------------------------- */

struct echo {
	char dir[64], path[128], url[160];
	nng_socket rep;
	struct lisguard g;
	pthread_t thread;
};

static void *echo_serve(void *arg)
{
	struct echo *e = arg;

	for (;;) {
		nng_msg *m;

		if (nng_recvmsg(e->rep, &m, 0) != 0)
			return NULL;
		if (nng_sendmsg(e->rep, m, 0) != 0)
			nng_msg_free(m);
	}
}

static void echo_open(struct echo *e, int retire_ms)
{
	struct lg_opts o = {.ping_ms = 600000, .retire_ms = retire_ms};
	struct ig_errbuf eb;

	snprintf(e->dir, sizeof(e->dir), "/tmp/ignis-test-lg-XXXXXX");
	assert_non_null(mkdtemp(e->dir));
	snprintf(e->path, sizeof(e->path), "%s/echo.sock", e->dir);
	snprintf(e->url, sizeof(e->url), "ipc://%s", e->path);
	assert_int_equal(nng_rep0_open(&e->rep), 0);
	if (lg_open(&e->g, e->rep, e->url, &o, &eb) != IG_E_OK)
		fail_msg("lg_open: %s", eb.msg);
	assert_int_equal(pthread_create(&e->thread, NULL, echo_serve, e), 0);
}

static void echo_close(struct echo *e)
{
	lg_close(&e->g);
	lg_close(&e->g); /* idempotent */
	nng_close(e->rep);
	pthread_join(e->thread, NULL);
	unlink(e->path);
	assert_int_equal(rmdir(e->dir), 0);
}

/* One exchange on `s` within `ms`: the id of the pipe that answered, or 0. */
static uint32_t echo_call(nng_socket s, int ms)
{
	nng_msg *m;
	uint32_t pipe = 0;

	nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, ms);
	nng_socket_set_ms(s, NNG_OPT_SENDTIMEO, ms);
	if (nng_send(s, "hi", 3, 0) != 0)
		return 0;
	if (nng_recvmsg(s, &m, 0) != 0)
		return 0;
	if (nng_msg_len(m) == 3 && !memcmp(nng_msg_body(m), "hi", 3))
		pipe = (uint32_t)nng_pipe_id(nng_msg_get_pipe(m));
	nng_msg_free(m);
	return pipe;
}

static nng_socket echo_client(const struct echo *e)
{
	struct ig_errbuf eb;
	nng_socket s;

	if (tp_dial_url(&s, e->url, 2000, &eb) != IG_E_OK)
		fail_msg("dial: %s", eb.msg);
	return s;
}

/* Twenty wedges in a row: each is cured (a new client answered) and a client
 * connected before them keeps its own pipe through all of them: re-creating
 * the listener does not touch the clients it already has. Prints how long
 * each cure took (docs/adr/0018). */
static void test_guard_cures_and_keeps_clients(void **state)
{
	struct echo e;
	uint64_t worst = 0, total = 0;
	nng_socket old;
	uint32_t old_pipe;

	(void)state;
	echo_open(&e, 600000);
	old = echo_client(&e);
	old_pipe = echo_call(old, 2000);
	assert_int_not_equal(old_pipe, 0);
	for (int i = 0; i < 20; i++) {
		uint64_t t0 = clk_mono_ms(), dt;
		nng_socket fresh;
		uint32_t pipe = 0;

		poke(e.path);
		while (!pipe && clk_mono_ms() - t0 < 3000) {
			fresh = echo_client(&e);
			pipe = echo_call(fresh, 250);
			nng_close(fresh);
		}
		dt = clk_mono_ms() - t0;
		assert_int_not_equal(pipe, 0); /* cured: a new client is answered */
		worst = dt > worst ? dt : worst;
		total += dt;
		/* the client connected before every wedge: the same pipe */
		assert_int_equal(echo_call(old, 2000), old_pipe);
	}
	printf("# 20 wedges cured: mean %.1f ms, worst %llu ms, %llu listeners re-created\n",
	       (double)total / 20, (unsigned long long)worst,
	       (unsigned long long)lg_recreated(&e.g));
	/* most pokes wedge; one nng reads as a plain disconnect cures itself */
	assert_true(lg_recreated(&e.g) >= 1);
	nng_close(old);
	echo_close(&e);
}

/* A client that connected while the listener was wedged is stuck on it; the
 * retired listener is closed after its grace, and that client's request is
 * answered by the new one (nng's REQ sends it again on its new pipe). */
static void test_guard_frees_stuck_clients(void **state)
{
	struct echo e;
	nng_socket old, stuck;
	uint32_t old_pipe, pipe;

	(void)state;
	echo_open(&e, 200);
	old = echo_client(&e);
	old_pipe = echo_call(old, 2000);
	assert_int_not_equal(old_pipe, 0);
	for (int i = 0; i < 5; i++) {
		poke(e.path);
		stuck = echo_client(&e); /* often lands on the wedged listener */
		assert_int_not_equal(echo_call(stuck, 3000), 0);
		nng_close(stuck);
	}
	/* the old client's listener is retired and closed after 200 ms: it
	 * redials the new one by itself and is answered there */
	clk_sleep_ms(400);
	pipe = echo_call(old, 3000);
	assert_int_not_equal(pipe, 0);
	assert_int_not_equal(pipe, old_pipe);
	nng_close(old);
	echo_close(&e);
}

/* The rate limit of rejection events: the first EV_LIMIT_BURST of a period
 * in full, the rest counted, their count due once the period is over, and a
 * new period after it. */
static void test_reject_limit(void **state)
{
	struct ev_limit l = {0};
	uint64_t t0 = 1000000;
	int full = 0;

	(void)state;
	for (int i = 0; i < 100; i++)
		full += ev_limit_take(&l, t0 + (uint64_t)i);
	assert_int_equal(full, EV_LIMIT_BURST);
	assert_int_equal(l.total, 100);
	assert_int_equal(ev_limit_due(&l, t0 + EV_LIMIT_PERIOD_MS / 2), 0); /* not yet */
	/* still in the flood: counted towards the same summary */
	assert_false(ev_limit_take(&l, t0 + EV_LIMIT_PERIOD_MS + 1));
	assert_int_equal(ev_limit_due(&l, t0 + EV_LIMIT_PERIOD_MS + 2), 100 - EV_LIMIT_BURST + 1);
	assert_int_equal(ev_limit_due(&l, t0 + EV_LIMIT_PERIOD_MS + 3), 0); /* said once */
	/* a new period: in full again */
	assert_true(ev_limit_take(&l, t0 + EV_LIMIT_PERIOD_MS + 4));
	assert_int_equal(l.total, 102);
	/* a quiet period: nothing held, nothing due */
	assert_int_equal(ev_limit_due(&l, t0 + 5 * EV_LIMIT_PERIOD_MS), 0);
}

static void test_shutdown_request(void **state)
{
	struct fixture *f = *state;
	nng_socket s = client(f);
	struct msg req = {.type = MSG_SHUTDOWN};
	struct ig_errbuf eb;
	struct tp_rx rx;

	req.u.shutdown.reason = msg_str_of("test over");
	assert_int_equal(tp_call(s, &req, &rx, &eb), IG_E_OK);
	assert_int_equal(rx.m.type, MSG_ACK);
	assert_int_equal(rx.m.u.ack.of, MSG_SHUTDOWN);
	tp_rx_release(&rx);
	nng_close(s);
	pthread_join(f->thread, NULL);
	assert_true(svc_stop_requested(&f->svc));
	assert_string_equal(f->svc.stop_reason, "test over");
	/* teardown joins again: start a no-op thread to keep it simple */
	atomic_store(&f->quit, true);
	assert_int_equal(pthread_create(&f->thread, NULL, serve, f), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_builtins_and_handler, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_malformed_gets_typed_error, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_files_and_lock, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_client_dies_mid_connect, setup_noping, teardown),
	    cmocka_unit_test(test_guard_cures_and_keeps_clients),
	    cmocka_unit_test(test_guard_frees_stuck_clients),
	    cmocka_unit_test(test_reject_limit),
	    cmocka_unit_test_setup_teardown(test_shutdown_request, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_pings_while_busy, setup_noping, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
