/*
 * ignis-ttft - the serving path's share of the time to first token, and how
 * fast a burst is admitted (a benchmark, not a test: docs/benchmarks.md).
 *
 *   ignis-ttft --runtime-dir RT --http HOST:PORT [--reps N] [--burst N]
 *
 * Against a running supervisor (tools/bench-ttft.sh starts one). One request
 * (the same prompt, greedy, one token) goes alternately through the nng
 * front door (libignis-client) and through the HTTP API (a streamed
 * /v1/completions on a plain socket), one at a time. For each, the worker's
 * own time from receiving the submit to producing the first token is read
 * from its figures (worker_stats: ttft_sum_us grows by exactly that), and
 * the client's time from sending the request to reading its first token is
 * clocked here: the difference is what the path adds on top of the engine.
 * Printed: p50/p90/max of the three, per path.
 *
 * Then --burst clients (threads, each with its own connection, connected
 * beforehand) submit at the same moment: how long until the last is
 * admitted, and how many worker rounds passed meanwhile (worker_stats
 * rounds before the burst and when the last was admitted).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "client/ignis_client.h"
#include "proto/transport.h"

#define PROMPT "The quick brown fox jumps over the lazy dog, and then"

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void die(const char *what, const char *msg)
{
	fprintf(stderr, "ignis-ttft: %s: %s\n", what, msg);
	exit(1);
}

/* ---- the worker's own figures ------------------------------------------------- */

struct wstat {
	uint64_t ttft_sum_us, ttft_n, rounds;
};

static void worker_stats(nng_socket ws, struct wstat *out)
{
	struct msg q = {.type = MSG_WORKER_STATS};
	struct ig_errbuf eb;
	struct tp_rx rx;
	const struct msg_worker_stats_reply *r;

	if (tp_call(ws, &q, &rx, &eb))
		die("worker_stats", eb.msg);
	if (rx.m.type != MSG_WORKER_STATS_REPLY)
		die("worker_stats", "an unexpected reply");
	r = &rx.m.u.worker_stats_reply;
	out->ttft_sum_us = r->ttft_sum_us;
	out->ttft_n = 0;
	for (uint32_t i = 0; i < r->ttft.n; i++)
		out->ttft_n += r->ttft.v[i].count;
	out->rounds = r->rounds;
	tp_rx_release(&rx);
}

/* ---- the two paths --------------------------------------------------------------- */

/* nng: submit, then follow until a chunk brings a token; the request runs to
 * its end (one token) before the next. Returns the client's microseconds. */
static double via_nng(struct igc_client *c)
{
	struct igc_params p;
	struct igc_submitted sub;
	struct igc_stream *s;
	struct igc_chunk ch;
	struct igc_error err;
	double t0, t1 = 0;

	igc_params_init(&p);
	p.text = PROMPT;
	p.max_tokens = 1;
	t0 = now_us();
	if (igc_submit(c, &p, &sub, &err) || igc_stream_open(c, sub.id, &s, &err))
		die("nng submit", err.message);
	for (;;) {
		if (igc_stream_next(s, 5000, &ch, &err))
			die("nng stream", err.message);
		if (ch.n && !t1)
			t1 = now_us();
		if (ch.done)
			break;
	}
	igc_stream_close(s);
	return t1 - t0;
}

static int tcp_connect(const char *hostport)
{
	char host[256];
	const char *colon = strrchr(hostport, ':');
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;
	int fd;

	if (!colon || (size_t)(colon - hostport) >= sizeof(host))
		die("--http", "accepted: HOST:PORT");
	snprintf(host, sizeof(host), "%.*s", (int)(colon - hostport), hostport);
	if (getaddrinfo(host, colon + 1, &hints, &ai))
		die("--http", "cannot resolve the address");
	fd = socket(ai->ai_family, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen))
		die("http connect", strerror(errno));
	freeaddrinfo(ai);
	return fd;
}

/* HTTP: a streamed /v1/completions on a fresh connection (connected before
 * the clock starts); the first token is the first `data: {` event with a
 * choice. Read to the end ([DONE], then the server closes). */
static double via_http(const char *hostport, const char *model)
{
	char body[512], req[1024], buf[8192];
	size_t have = 0;
	double t0, t1 = 0;
	int fd = tcp_connect(hostport), n, len;

	snprintf(body, sizeof(body),
	         "{\"model\":\"%s\",\"prompt\":\"%s\",\"max_tokens\":1,\"temperature\":0,"
	         "\"stream\":true}",
	         model, PROMPT);
	len = snprintf(req, sizeof(req),
	               "POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: "
	               "application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
	               hostport, strlen(body), body);
	t0 = now_us();
	if (write(fd, req, (size_t)len) != len)
		die("http write", strerror(errno));
	while ((n = (int)read(fd, buf + have, sizeof(buf) - 1 - have)) > 0) {
		have += (size_t)n;
		buf[have] = '\0';
		if (!t1 && strstr(buf, "data: {") && strstr(strstr(buf, "data: {"), "\"choices\""))
			t1 = now_us();
		if (strstr(buf, "data: [DONE]"))
			break;
		if (have > sizeof(buf) / 2) {
			/* keep the tail: a marker may straddle */
			memmove(buf, buf + have - 64, 64);
			have = 64;
		}
	}
	close(fd);
	if (!t1)
		die("http", "the stream ended without a token (is the HTTP API on?)");
	return t1 - t0;
}

/* ---- figures ------------------------------------------------------------------------ */

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double quant(double *v, int n, double q)
{
	int i = (int)(q * (n - 1) + 0.5);

	qsort(v, (size_t)n, sizeof(*v), cmp_d);
	return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

static void report(const char *path, double *client, double *worker, double *over, int n)
{
	printf("ttft  %-5s %4d requests: client p50 %7.0f us p90 %7.0f; engine (worker) p50 %7.0f "
	       "p90 %7.0f; the path adds p50 %6.0f us, p90 %6.0f, max %6.0f\n",
	       path, n, quant(client, n, 0.5), quant(client, n, 0.9), quant(worker, n, 0.5),
	       quant(worker, n, 0.9), quant(over, n, 0.5), quant(over, n, 0.9), quant(over, n, 1));
}

/* ---- the burst ---------------------------------------------------------------------- */

struct burst {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_barrier_t go;
	unsigned admitted, failed, n;
	double t0;
	double *admit_us, *first_us, *door_ms;
};

struct burst_job {
	struct burst *b;
	struct igc_client *c;
	unsigned no;
};

static void *burst_client(void *arg)
{
	struct burst_job *j = arg;
	struct burst *b = j->b;
	struct igc_params p;
	struct igc_submitted sub;
	struct igc_stream *s = NULL;
	struct igc_chunk ch;
	struct igc_error err;
	char prompt[96];
	bool ok;

	igc_params_init(&p);
	snprintf(prompt, sizeof(prompt), "burst client %u says", j->no);
	p.text = prompt;
	p.max_tokens = 4;
	pthread_barrier_wait(&b->go);
	ok = igc_submit(j->c, &p, &sub, &err) == 0;
	pthread_mutex_lock(&b->mu);
	b->admit_us[j->no] = now_us() - b->t0;
	if (ok) {
		b->admitted++;
		b->door_ms[j->no] = (double)sub.queued_ms;
	}
	else
		b->failed++;
	if (b->admitted + b->failed == b->n)
		pthread_cond_broadcast(&b->cv);
	pthread_mutex_unlock(&b->mu);
	if (!ok || igc_stream_open(j->c, sub.id, &s, &err)) {
		fprintf(stderr, "ignis-ttft: burst client %u: %s\n", j->no, err.message);
		return NULL;
	}
	for (;;) {
		if (igc_stream_next(s, 5000, &ch, &err)) {
			fprintf(stderr, "ignis-ttft: burst client %u: %s\n", j->no, err.message);
			break;
		}
		if (ch.n && !b->first_us[j->no])
			b->first_us[j->no] = now_us() - b->t0;
		if (ch.done)
			break;
	}
	igc_stream_close(s);
	return NULL;
}

static void run_burst(const char *rt, nng_socket ws, unsigned n)
{
	struct burst b = {.n = n};
	struct burst_job *jobs = calloc(n, sizeof(*jobs));
	pthread_t *th = calloc(n, sizeof(*th));
	struct wstat w0, w1;
	double last;

	b.admit_us = calloc(n, sizeof(double));
	b.first_us = calloc(n, sizeof(double));
	b.door_ms = calloc(n, sizeof(double));
	if (!jobs || !th || !b.admit_us || !b.first_us || !b.door_ms)
		die("burst", "no memory");
	pthread_mutex_init(&b.mu, NULL);
	pthread_cond_init(&b.cv, NULL);
	pthread_barrier_init(&b.go, NULL, n + 1);
	for (unsigned i = 0; i < n; i++) {
		struct igc_error err;

		jobs[i] = (struct burst_job){.b = &b, .no = i};
		if (igc_connect(&jobs[i].c, NULL, rt, &err))
			die("burst connect", err.message);
		if (pthread_create(&th[i], NULL, burst_client, &jobs[i]))
			die("burst", "cannot start a thread");
	}
	usleep(200000); /* every connection made */
	worker_stats(ws, &w0);
	pthread_mutex_lock(&b.mu);
	b.t0 = now_us();
	pthread_mutex_unlock(&b.mu);
	pthread_barrier_wait(&b.go);
	pthread_mutex_lock(&b.mu);
	while (b.admitted + b.failed < n)
		pthread_cond_wait(&b.cv, &b.mu);
	pthread_mutex_unlock(&b.mu);
	worker_stats(ws, &w1);
	for (unsigned i = 0; i < n; i++) {
		pthread_join(th[i], NULL);
		igc_close(jobs[i].c);
	}
	last = quant(b.admit_us, (int)n, 1);
	printf("burst %u clients at once: admitted p50 %.1f ms, the last %.1f ms after the burst "
	       "began, %" PRIu64 " worker rounds meanwhile (at most); from the door's receipt to "
	       "admission p50 %.0f ms, max %.0f; first tokens p50 %.1f ms, the last %.1f ms; %u "
	       "refused\n",
	       n, quant(b.admit_us, (int)n, 0.5) / 1e3, last / 1e3, w1.rounds - w0.rounds,
	       quant(b.door_ms, (int)n, 0.5), quant(b.door_ms, (int)n, 1),
	       quant(b.first_us, (int)n, 0.5) / 1e3, quant(b.first_us, (int)n, 1) / 1e3, b.failed);
	free(b.admit_us);
	free(b.first_us);
	free(b.door_ms);
	free(jobs);
	free(th);
}

/* A whole number in lo..hi, or the run stops naming the flag. */
static long count_arg(const char *flag, const char *v, long lo, long hi)
{
	char *end;
	long n;

	errno = 0;
	n = strtol(v, &end, 10);
	if (errno || end == v || *end || n < lo || n > hi) {
		fprintf(stderr, "ignis-ttft: %s '%s': accepted a whole number in %ld..%ld\n", flag, v,
		        lo, hi);
		exit(2);
	}
	return n;
}

int main(int argc, char **argv)
{
	const char *rt = NULL, *http = NULL;
	int reps = 200;
	unsigned burst = 300;
	struct igc_client *c;
	struct igc_model mi;
	struct igc_error err;
	struct ig_errbuf eb;
	nng_socket ws;
	double *cl[2], *wk[2], *ov[2];

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--runtime-dir") && i + 1 < argc)
			rt = argv[++i];
		else if (!strcmp(argv[i], "--http") && i + 1 < argc)
			http = argv[++i];
		else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = (int)count_arg("--reps", argv[++i], 1, 100000);
		else if (!strcmp(argv[i], "--burst") && i + 1 < argc)
			burst = (unsigned)count_arg("--burst", argv[++i], 0, 4096);
		else {
			fprintf(stderr, "usage: ignis-ttft --runtime-dir RT --http HOST:PORT [--reps N] "
			                "[--burst N]\n");
			return 2;
		}
	}
	if (!rt || !http)
		die("arguments", "--runtime-dir and --http are needed");
	if (igc_connect(&c, NULL, rt, &err) || igc_model_info(c, &mi, &err))
		die("connect", err.message);
	if (tp_dial(&ws, rt, "gpu-worker", 10000, &eb))
		die("gpu-worker", eb.msg);
	for (int k = 0; k < 2; k++) {
		cl[k] = calloc((size_t)reps, sizeof(double));
		wk[k] = calloc((size_t)reps, sizeof(double));
		ov[k] = calloc((size_t)reps, sizeof(double));
		if (!cl[k] || !wk[k] || !ov[k])
			die("memory", "none");
	}
	for (int i = 0; i < 10; i++) { /* warm both paths */
		via_nng(c);
		via_http(http, mi.name);
	}
	for (int r = 0; r < reps; r++)
		for (int k0 = 0; k0 < 2; k0++) {
			int k = (k0 + r) & 1; /* interleaved, each first in turn */
			struct wstat a, b;
			double t;

			worker_stats(ws, &a);
			t = k == 0 ? via_nng(c) : via_http(http, mi.name);
			worker_stats(ws, &b);
			if (b.ttft_n != a.ttft_n + 1)
				die("worker_stats", "another request ran beside the benchmark's");
			cl[k][r] = t;
			wk[k][r] = (double)(b.ttft_sum_us - a.ttft_sum_us);
			ov[k][r] = t - wk[k][r];
		}
	printf("model %s, %s backend, %u lanes; prompt \"%s\", greedy, 1 token\n", mi.name,
	       mi.backend, mi.lanes, PROMPT);
	report("nng", cl[0], wk[0], ov[0], reps);
	report("http", cl[1], wk[1], ov[1], reps);
	if (burst)
		run_burst(rt, ws, burst);
	nng_close(ws);
	igc_close(c);
	return 0;
}
