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

#include "clock.h"
#include "event.h"
#include "service.h"

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

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct ig_errbuf eb;
	int devnull;

	/* Events go to /dev/null: the test's stdout is for cmocka. */
	devnull = open("/dev/null", O_WRONLY);
	ev_setup("test", devnull);
	snprintf(f->dir, sizeof(f->dir), "/tmp/ignis-test-svc-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	if (svc_open(&f->svc, "test-svc", f->dir, "test", 200, &eb) != IG_E_OK)
		fail_msg("svc_open: %s", eb.msg);
	atomic_init(&f->quit, false);
	assert_int_equal(pthread_create(&f->thread, NULL, serve, f), 0);
	*state = f;
	return 0;
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
	static const unsigned char v9[] = {0x83, 0xa1, 0x74, 0x02, 0xa1, 0x76,
	                                   0x09, 0xa3, 0x73, 0x65, 0x71, 0x00};
	static const unsigned char unknown[] = {
	    0x83, 0xa1, 0x74, 0x63, 0xa1, 0x76, MSG_PROTO_VERSION, 0xa3, 0x73, 0x65, 0x71, 0x00};

	raw_exchange(f, junk, sizeof(junk), IG_E_PROTO_MALFORMED);
	raw_exchange(f, truncated, sizeof(truncated), IG_E_PROTO_TRUNCATED);
	raw_exchange(f, v9, sizeof(v9), IG_E_PROTO_VERSION);
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
			       (unsigned long long)f->svc.relistens);
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
	assert_int_equal(tp_listen(&second, f->dir, "test", &eb), IG_E_BUSY);
	snprintf(want, sizeof(want), "pid %ld", (long)getpid());
	assert_non_null(strstr(eb.msg, want));
	/* ...and the first listener was not disturbed. */
	test_builtins_and_handler(state);
	assert_false(tp_lock_held(f->dir, "nothing-here", &holder));
}

/* A client that connects at the socket level and vanishes before nng's
 * header: the case that wedges an nng 1.5.2 listener. The service must answer
 * again, by itself, within a few watchdog periods. */
static void test_client_dies_mid_connect(void **state)
{
	struct fixture *f = *state;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/test.sock", f->dir);
	for (int i = 0; i < 5; i++) {
		int fd = socket(AF_UNIX, SOCK_STREAM, 0);

		assert_true(fd >= 0);
		assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
		close(fd);
	}
	assert_true(answers_within(f, 15000));
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
	    cmocka_unit_test_setup_teardown(test_client_dies_mid_connect, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_shutdown_request, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
