/*
 * test_client.c - libignis-client without a server, and against a fake one
 * in this process: bad addresses and parameters are refused naming what is
 * accepted; a server that is not there is a timeout that says so; an error
 * reply reaches the caller with its code and words; a stream reassembles
 * chunks in order, decodes split UTF-8 whole, and ends with the request's
 * error when it failed.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "client/ignis_client.h"
#include "proto/transport.h"

static void test_refusals_without_server(void **state)
{
	struct igc_client *c = NULL;
	struct igc_error err;
	struct igc_params p;
	struct igc_submitted sub;
	uint32_t ids[4097] = {0};
	char dir[] = "/tmp/ignis-test-client-XXXXXX", url[128];
	struct tp_listener lis;
	struct ig_errbuf eb;

	(void)state;
	assert_int_equal(igc_connect(&c, "http://x", NULL, &err), IGC_E_INVAL);
	assert_non_null(strstr(err.message, "accepted ipc:///absolute/path or tcp://HOST:PORT"));
	assert_null(c);
	/* nothing there: said at once, and why (issue 13, item 4) */
	assert_int_equal(igc_connect(&c, "ipc:///nonexistent/ignis/client.sock", NULL, &err),
	                 IGC_E_NOTFOUND);
	assert_non_null(strstr(err.message, "/nonexistent/ignis does not exist"));
	assert_null(c);
	assert_non_null(mkdtemp(dir));
	snprintf(url, sizeof(url), "ipc://%s/client.sock", dir);
	assert_int_equal(igc_connect(&c, url, NULL, &err), IGC_E_NOTFOUND);
	assert_non_null(strstr(err.message, "nothing holds"));
	assert_null(c);
	/* a listener that never answers */
	assert_int_equal(tp_listen_guarded(&lis, dir, "client", NULL, &eb), IG_E_OK);
	assert_int_equal(igc_connect(&c, url, NULL, &err), 0);
	igc_set_timeout(c, 300);
	igc_set_submit_timeout(c, 300);
	igc_params_init(&p);
	p.ids = ids;
	p.n_ids = 4097;
	assert_int_equal(igc_submit(c, &p, &sub, &err), IGC_E_FIELD_RANGE);
	assert_non_null(strstr(err.message, "prompt: 4097 token ids; accepted: at most 4096"));
	p.n_ids = 1;
	assert_int_equal(igc_submit(c, &p, &sub, &err), IGC_E_TIMEOUT);
	assert_non_null(strstr(err.message, "is ignis-supervisor running"));
	assert_string_equal(igc_code_name(IGC_E_BUSY), "IG_E_BUSY");
	igc_close(c);
	tp_listener_close(&lis);
	rmdir(dir);
}

/* A fake front door: answers fd_model, then fd_tokens in three chunks for
 * request 7, each with the text the server sent for it (as the worker does:
 * "é" split over two tokens comes whole with the one that completes it),
 * the last ending in an error; an fd_cancel gets an error reply. The ids
 * are not bytes (a vocabulary of another tokenizer): the client prints the
 * server's text, it does not decode ids. */
struct fake {
	struct tp_listener lis;
	int served;
};

static void *fake_serve(void *arg)
{
	struct fake *f = arg;
	static const uint32_t chunks[3][2] = {{1000, 1001}, {1002, 1003}, {1004, 0}};
	static const char *const texts[3] = {"h", "\xc3\xa9!", ""};

	for (;;) {
		static struct msg reply;
		struct ig_errbuf eb;
		struct tp_rx rx;

		if (tp_recv(f->lis.sock, &rx, &eb) != IG_E_OK)
			return NULL;
		memset(&reply, 0, sizeof(reply));
		if (rx.m.type == MSG_FD_MODEL) {
			reply.type = MSG_FD_MODEL_REPLY;
			reply.u.fd_model_reply =
			    (struct msg_fd_model_reply){.model = msg_str_of("fake"),
			                                .backend = msg_str_of("cpu"),
			                                .kv_format = msg_str_of("bf16"),
			                                .vocab = 2000,
			                                .context_tokens = 64,
			                                .page_tokens = 64,
			                                .pool_pages = 1,
			                                .lanes = 1,
			                                .chunk_tokens = 1,
			                                .default_max_tokens = 1,
			                                .tokenizer = msg_str_of("none"),
			                                .eos = UINT32_MAX,
			                                .serving = true,
			                                .worker = msg_str_of("running")};
		} else if (rx.m.type == MSG_FD_POLL) {
			uint32_t k = (uint32_t)rx.m.u.fd_poll.from / 2;
			struct msg_fd_tokens *t = &reply.u.fd_tokens;

			reply.type = MSG_FD_TOKENS;
			t->id = rx.m.u.fd_poll.id;
			t->from = rx.m.u.fd_poll.from;
			t->tokens.n = k < 2 ? 2 : 1;
			memcpy(t->tokens.v, chunks[k < 3 ? k : 2], t->tokens.n * sizeof(uint32_t));
			t->text = msg_str_of(texts[k < 3 ? k : 2]);
			t->state = msg_str_of(k == 2 ? "done" : "decode");
			t->done = k == 2;
			t->finish = msg_str_of(k == 2 ? "error" : "");
			t->generated = 2 * k + t->tokens.n;
			t->code = k == 2 ? 40 : 0;
			t->message = msg_str_of(k == 2 ? "the gpu-worker (pid 1) stopped" : "");
		} else {
			reply.type = MSG_ERROR;
			reply.u.error.code = 7;
			reply.u.error.message = msg_str_of("fd_cancel.id: no request 7");
		}
		tp_rx_release(&rx);
		tp_send(f->lis.sock, &reply, &eb);
		f->served++;
	}
}

static void test_stream_against_a_fake_door(void **state)
{
	static struct fake f;
	char dir[] = "/tmp/ignis-test-client-XXXXXX", url[128], text[64] = "";
	struct igc_client *c;
	struct igc_stream *s;
	struct igc_error err;
	struct igc_chunk ch;
	struct ig_errbuf eb;
	pthread_t th;
	uint32_t n = 0;
	int rc = 0;

	(void)state;
	assert_non_null(mkdtemp(dir));
	assert_int_equal(tp_listen_guarded(&f.lis, dir, "client", NULL, &eb), IG_E_OK);
	assert_int_equal(pthread_create(&th, NULL, fake_serve, &f), 0);
	snprintf(url, sizeof(url), "ipc://%s/client.sock", dir);
	assert_int_equal(igc_connect(&c, url, NULL, &err), 0);
	assert_int_equal(igc_stream_open(c, 7, &s, &err), 0);
	do {
		static const char *const want[3] = {"h", "\xc3\xa9!", ""};
		uint32_t k = n / 2;

		rc = igc_stream_next(s, 10, &ch, &err);
		assert_int_equal(ch.from, n);
		/* each chunk's text is the server's for it: é once, whole */
		assert_int_equal(ch.text_len, strlen(want[k]));
		assert_memory_equal(ch.text, want[k], ch.text_len);
		assert_int_equal(ch.text[ch.text_len], '\0');
		n += (uint32_t)ch.n;
		strncat(text, ch.text, ch.text_len);
	} while (!rc && !ch.done);
	assert_int_equal(rc, IGC_E_WORKER);
	assert_true(ch.done);
	assert_string_equal(ch.finish, "error");
	assert_string_equal(err.message, "the gpu-worker (pid 1) stopped");
	assert_int_equal(n, 5);
	assert_string_equal(text, "h\xc3\xa9!"); /* é whole; the last token gives no text */
	assert_int_equal(igc_cancel(c, 7, &err), IGC_E_NOTFOUND);
	assert_string_equal(err.message, "fd_cancel.id: no request 7");
	igc_stream_close(s);
	igc_close(c);
	tp_listener_close(&f.lis); /* the fake's receive fails: it returns */
	pthread_join(th, NULL);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_refusals_without_server),
	    cmocka_unit_test(test_stream_against_a_fake_door),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
