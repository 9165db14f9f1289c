/*
 * ignis-httpload - the HTTP API's door under load (a benchmark, not a test:
 * docs/benchmarks.md; tools/bench-http.sh runs it against a supervisor of
 * its own).
 *
 *   ignis-httpload hold HOST:PORT --model M --conns N [--slowloris S]
 *                  [--sources K] [--innocent R]
 *       N connections held open, spread over K source addresses (127.0.0.2
 *       ...: the per-address limit is the server's to keep, not what this
 *       measures), idle, or with --slowloris a header byte every S seconds
 *       each; meanwhile R innocent requests (a whole completion of one
 *       token, a new connection each, from 127.0.0.1), one after another.
 *       Prints how many connections the server held, and the innocent
 *       requests' p50/p99/max and their failures.
 *   ignis-httpload streams HOST:PORT --model M --streams N --tokens T
 *                  [--seeds K] [--prompt P]
 *       N streamed completions at once (seed i % K + 1, temperature 0.9),
 *       each read to its end. Prints, for each seed, the text every one of
 *       its streams gave (exit 1 when two streams of a seed differ, or one
 *       did not end with [DONE]): the caller compares them with the same
 *       request run alone.
 *   ignis-httpload hog IPC_URL HOST:PORT --model M --sockets S --each E
 *                  --tokens T --seconds D
 *       S nng connections to the front door submit E requests each (T
 *       tokens) and never read; meanwhile one innocent HTTP request a
 *       second for D seconds: their status and time, second by second.
 *
 * HTTP/1.0 requests: the answer ends when the server closes (no chunked
 * coding to undo). The client raises its descriptor limit to the hard one.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "proto/transport.h"

#include <nng/protocol/reqrep0/req.h>

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "ignis-httpload: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(2);
}

struct opts {
	const char *hostport, *model, *prompt, *ipc;
	long conns, sources, innocent, streams, tokens, seeds, sockets, each, seconds;
	double slowloris;
};

static struct sockaddr_in addr_of(const char *hostport)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	char host[64];
	const char *colon = strrchr(hostport, ':');

	if (!colon || (size_t)(colon - hostport) >= sizeof(host))
		die("'%s' is not HOST:PORT", hostport);
	snprintf(host, sizeof(host), "%.*s", (int)(colon - hostport), hostport);
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
		die("'%s' is not an IPv4 address", host);
	sa.sin_port = htons((uint16_t)atoi(colon + 1));
	return sa;
}

/* A socket from source 127.0.0.(2 + src % 250), connecting (non-blocking
 * unless `block`). */
static int dial(const struct sockaddr_in *to, long src, bool block)
{
	struct sockaddr_in from = {.sin_family = AF_INET};
	int fd = socket(AF_INET, SOCK_STREAM | (block ? 0 : SOCK_NONBLOCK), 0);

	if (fd < 0)
		return -1;
	if (src >= 0) {
		from.sin_addr.s_addr = htonl(0x7f000002u + (uint32_t)(src % 250));
		if (bind(fd, (struct sockaddr *)&from, sizeof from)) {
			close(fd);
			return -1;
		}
	}
	if (connect(fd, (const struct sockaddr *)to, sizeof *to) && errno != EINPROGRESS) {
		close(fd);
		return -1;
	}
	return fd;
}

static char *request(const char *hostport, const char *body)
{
	char *r;

	if (asprintf(&r,
	             "POST /v1/completions HTTP/1.0\r\nHost: %s\r\nContent-Type: "
	             "application/json\r\nContent-Length: %zu\r\n\r\n%s",
	             hostport, strlen(body), body) < 0)
		die("%s", "no memory");
	return r;
}

/* One blocking request, read to the server's close: its status, and the
 * body into *out (malloc'd) when out is given. -1 when it failed. */
static int one(const struct sockaddr_in *to, const char *req, char **out)
{
	int fd = dial(to, -1, true), status = -1;
	size_t len = 0, cap = 4096;
	char *buf = malloc(cap);
	ssize_t n;

	if (fd < 0 || !buf || send(fd, req, strlen(req), MSG_NOSIGNAL) < 0)
		goto out;
	while ((n = recv(fd, buf + len, cap - len - 1, 0)) > 0) {
		len += (size_t)n;
		if (len + 1 == cap) {
			char *b = realloc(buf, cap *= 2);

			if (!b)
				goto out;
			buf = b;
		}
	}
	buf[len] = '\0';
	if (len > 12 && !strncmp(buf, "HTTP/1.", 7))
		status = atoi(buf + 9);
out:
	if (fd >= 0)
		close(fd);
	if (out && status >= 0)
		*out = buf;
	else
		free(buf);
	return status;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void print_lat(const char *what, double *lat, long n, long fails)
{
	if (!n) {
		printf("%s: no request answered, %ld failed\n", what, fails);
		return;
	}
	qsort(lat, (size_t)n, sizeof(*lat), cmp_d);
	printf("%s: %ld answered 200, %ld failed; p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", what, n,
	       fails, lat[n / 2] * 1e3, lat[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1] * 1e3,
	       lat[n - 1] * 1e3);
}

/* ---- hold ------------------------------------------------------------------ */

static int cmd_hold(const struct opts *o)
{
	struct sockaddr_in to = addr_of(o->hostport);
	int *fds = calloc((size_t)o->conns, sizeof(int));
	double *lat = calloc((size_t)o->innocent + 1, sizeof(double));
	char *body, *req;
	long held = 0, answered = 0, fails = 0;
	double next_drip;

	if (!fds || !lat)
		die("%s", "no memory");
	if (asprintf(&body,
	             "{\"model\":\"%s\",\"prompt\":\"hello\",\"max_tokens\":1,\"temperature\":0}",
	             o->model) < 0)
		die("%s", "no memory");
	req = request(o->hostport, body);
	for (long i = 0; i < o->conns; i++) {
		fds[i] = dial(&to, i % o->sources, false);
		if (fds[i] < 0)
			die("cannot open connection (%s): raise the descriptor limit",
			    strerror(errno));
	}
	/* the slowloris start a request and never end its headers */
	sleep(1);
	for (long i = 0; i < o->conns && o->slowloris > 0; i++) {
		static const char head[] = "POST /v1/completions HTTP/1.1\r\nX-Slow: ";

		send(fds[i], head, sizeof head - 1, MSG_NOSIGNAL);
	}
	next_drip = now_s() + o->slowloris;
	for (long k = 0; k < o->innocent; k++) {
		double t0 = now_s();
		int st = one(&to, req, NULL);

		if (st == 200)
			lat[answered++] = now_s() - t0;
		else
			fails++;
		if (o->slowloris > 0 && now_s() >= next_drip) {
			for (long i = 0; i < o->conns; i++)
				send(fds[i], "a", 1, MSG_NOSIGNAL);
			next_drip = now_s() + o->slowloris;
		}
	}
	/* held: connections the server has not closed */
	for (long i = 0; i < o->conns; i++) {
		char b;
		ssize_t n = recv(fds[i], &b, 1, MSG_DONTWAIT);

		held += n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
	}
	printf("%ld %s connections opened over %ld addresses, %ld still held by the server\n",
	       o->conns, o->slowloris > 0 ? "slowloris" : "idle", o->sources, held);
	print_lat("innocent requests", lat, answered, fails);
	return fails ? 1 : 0;
}

/* ---- streams ---------------------------------------------------------------- */

struct stream {
	int fd;
	char *req;
	size_t sent, len, cap;
	char *buf;
	bool done;
};

/* The text a stream's events add up to; NULL when it did not end with
 * [DONE] or an event did not parse. */
static char *stream_text(const char *buf)
{
	const char *p = strstr(buf, "\r\n\r\n");
	size_t tlen = 0;
	char *text = calloc(1, 1);
	bool done = false;

	if (!p || strncmp(buf, "HTTP/1.", 7) || strncmp(buf + 8, " 200", 4)) {
		free(text);
		return NULL;
	}
	for (p += 4; p && *p; p = strstr(p, "\n\n"), p = p ? p + 2 : NULL) {
		json_t *j, *t;
		const char *s;

		if (strncmp(p, "data: ", 6))
			continue;
		if (!strncmp(p + 6, "[DONE]", 6)) {
			done = true;
			break;
		}
		j = json_loadb(p + 6, strcspn(p + 6, "\n"), 0, NULL);
		t = j ? json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text")
		      : NULL;
		if (!j) {
			free(text);
			return NULL;
		}
		if ((s = json_string_value(t))) {
			size_t n = strlen(s);
			char *x = realloc(text, tlen + n + 1);

			if (!x)
				die("%s", "no memory");
			text = x;
			memcpy(text + tlen, s, n + 1);
			tlen += n;
		}
		json_decref(j);
	}
	if (!done) {
		free(text);
		return NULL;
	}
	return text;
}

static int cmd_streams(const struct opts *o)
{
	struct sockaddr_in to = addr_of(o->hostport);
	struct stream *s = calloc((size_t)o->streams, sizeof(*s));
	char **want = calloc((size_t)o->seeds, sizeof(char *));
	int ep = epoll_create1(0), bad = 0;
	long left = o->streams;
	double t0 = now_s();

	if (!s || !want || ep < 0)
		die("%s", "no memory");
	for (long i = 0; i < o->streams; i++) {
		char *body;
		struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.u64 = (uint64_t)i};

		if (asprintf(
		        &body,
		        "{\"model\":\"%s\",\"prompt\":\"%s\",\"max_tokens\":%ld,\"temperature\":"
		        "0.9,\"seed\":%ld,\"stream\":true}",
		        o->model, o->prompt, o->tokens, i % o->seeds + 1) < 0)
			die("%s", "no memory");
		s[i].req = request(o->hostport, body);
		free(body);
		s[i].fd = dial(&to, -1, false);
		if (s[i].fd < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, s[i].fd, &ev))
			die("cannot open stream connection (%s)", strerror(errno));
		s[i].cap = 4096;
		s[i].buf = malloc(s[i].cap);
		s[i].len = 0;
	}
	while (left > 0) {
		struct epoll_event evs[256];
		int n = epoll_wait(ep, evs, 256, 120000);

		if (n <= 0) {
			fprintf(stderr, "ignis-httpload: %ld streams stalled for 120 s\n", left);
			return 1;
		}
		for (int k = 0; k < n; k++) {
			struct stream *x = &s[evs[k].data.u64];
			size_t reqlen = strlen(x->req);
			ssize_t r;

			if (x->done)
				continue;
			if ((evs[k].events & EPOLLOUT) && x->sent < reqlen) {
				r = send(x->fd, x->req + x->sent, reqlen - x->sent, MSG_NOSIGNAL);
				if (r > 0)
					x->sent += (size_t)r;
				if (x->sent == reqlen) {
					struct epoll_event ev = {.events = EPOLLIN,
					                         .data.u64 = evs[k].data.u64};

					epoll_ctl(ep, EPOLL_CTL_MOD, x->fd, &ev);
				}
			}
			while ((r = recv(x->fd, x->buf + x->len, x->cap - x->len - 1, 0)) > 0) {
				x->len += (size_t)r;
				if (x->len + 1 == x->cap) {
					char *b = realloc(x->buf, x->cap *= 2);

					if (!b)
						die("%s", "no memory");
					x->buf = b;
				}
			}
			if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
				x->buf[x->len] = '\0';
				x->done = true;
				close(x->fd);
				left--;
			}
		}
	}
	printf("%ld streams of %ld tokens at once: all ended in %.1f s\n", o->streams, o->tokens,
	       now_s() - t0);
	for (long i = 0; i < o->streams; i++) {
		char *t = stream_text(s[i].buf);
		long seed = i % o->seeds;

		if (!t) {
			if (bad++ < 3)
				fprintf(stderr,
				        "stream %ld (seed %ld) did not end with [DONE]: %.200s\n",
				        i, seed + 1, s[i].buf);
			continue;
		}
		if (!want[seed]) {
			want[seed] = t;
		} else {
			if (strcmp(want[seed], t) && bad++ < 3)
				fprintf(stderr,
				        "stream %ld (seed %ld) differs from another of its seed\n",
				        i, seed + 1);
			free(t);
		}
	}
	for (long k = 0; k < o->seeds; k++) {
		json_t *j = json_string(want[k] ? want[k] : "");
		char *enc = json_dumps(j, JSON_ENCODE_ANY);

		printf("seed %ld %s\n", k + 1, enc);
		free(enc);
		json_decref(j);
	}
	printf("%d streams failed or differed\n", bad);
	return bad ? 1 : 0;
}

/* ---- hog ------------------------------------------------------------------- */

static int cmd_hog(const struct opts *o)
{
	struct sockaddr_in to = addr_of(o->hostport);
	static struct msg q;
	struct ig_errbuf eb;
	char *body, *req;
	long sent = 0;
	double t0;

	q.type = MSG_FD_SUBMIT;
	q.u.fd_submit.text = msg_str_of("hold the queue");
	q.u.fd_submit.max_tokens = (uint64_t)o->tokens;
	q.u.fd_submit.class = msg_str_of("agent");
	q.u.fd_submit.top_p = 1.0;
	t0 = now_s();
	for (long i = 0; i < o->sockets; i++) {
		nng_socket s;

		if (tp_dial_url(&s, o->ipc, 5000, &eb) != IG_E_OK)
			die("%s", eb.msg);
		nng_socket_set_ms(s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
		for (long j = 0; j < o->each; j++) {
			nng_ctx ctx;
			nng_aio *aio;
			nng_msg *nm;

			if (nng_ctx_open(&ctx, s) || nng_aio_alloc(&aio, NULL, NULL) ||
			    tp_encode(&q, &nm, &eb))
				die("%s", "cannot submit");
			nng_aio_set_msg(aio, nm);
			nng_ctx_send(ctx, aio);
			nng_aio_wait(aio);
			sent += nng_aio_result(aio) == 0;
		}
	}
	printf("%ld submits sent from %ld connections in %.1f s, never read\n", sent, o->sockets,
	       now_s() - t0);
	if (asprintf(&body,
	             "{\"model\":\"%s\",\"prompt\":\"hello\",\"max_tokens\":1,\"temperature\":0}",
	             o->model) < 0)
		die("%s", "no memory");
	req = request(o->hostport, body);
	t0 = now_s();
	for (long k = 0; k < o->seconds; k++) {
		double a = now_s();
		int st = one(&to, req, NULL);

		printf("t=%2ld s: innocent request %d in %.1f ms\n", (long)(a - t0), st,
		       (now_s() - a) * 1e3);
		fflush(stdout);
		while (now_s() < t0 + (double)(k + 1))
			usleep(10000);
	}
	_exit(0); /* the hog's sockets go with the process */
}

/* ---- main ------------------------------------------------------------------ */

static void usage(FILE *f)
{
	fputs(
	    "usage: ignis-httpload hold HOST:PORT --model M --conns N [--slowloris S] "
	    "[--sources K] [--innocent R]\n"
	    "       ignis-httpload streams HOST:PORT --model M --streams N --tokens T [--seeds K] "
	    "[--prompt P]\n"
	    "       ignis-httpload hog IPC_URL HOST:PORT --model M --sockets S --each E "
	    "--tokens T --seconds D\n",
	    f);
}

int main(int argc, char **argv)
{
	struct opts o = {.model = "tiny-chat",
	                 .prompt = "load test",
	                 .conns = 1000,
	                 .sources = 10,
	                 .innocent = 200,
	                 .streams = 1000,
	                 .tokens = 16,
	                 .seeds = 5,
	                 .sockets = 10,
	                 .each = 2000,
	                 .seconds = 60};
	struct rlimit rl;
	int a = 2;

	if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		usage(stdout);
		return 0;
	}
	if (argc < 3) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "hog")) {
		if (argc < 4) {
			usage(stderr);
			return 2;
		}
		o.ipc = argv[a++];
	}
	o.hostport = argv[a++];
	for (; a + 1 < argc; a += 2) {
		const char *k = argv[a], *v = argv[a + 1];

		if (!strcmp(k, "--model"))
			o.model = v;
		else if (!strcmp(k, "--prompt"))
			o.prompt = v;
		else if (!strcmp(k, "--slowloris"))
			o.slowloris = atof(v);
		else {
			long *dst = !strcmp(k, "--conns")      ? &o.conns
			            : !strcmp(k, "--sources")  ? &o.sources
			            : !strcmp(k, "--innocent") ? &o.innocent
			            : !strcmp(k, "--streams")  ? &o.streams
			            : !strcmp(k, "--tokens")   ? &o.tokens
			            : !strcmp(k, "--seeds")    ? &o.seeds
			            : !strcmp(k, "--sockets")  ? &o.sockets
			            : !strcmp(k, "--each")     ? &o.each
			            : !strcmp(k, "--seconds")  ? &o.seconds
			                                       : NULL;
			char *end;

			if (!dst)
				die("unknown option '%s'", k);
			*dst = strtol(v, &end, 10);
			if (*end || *dst < 1)
				die("'%s' is not a whole number of 1 or more", v);
		}
	}
	if (a != argc) {
		usage(stderr);
		return 2;
	}
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (!strcmp(argv[1], "hold"))
		return cmd_hold(&o);
	if (!strcmp(argv[1], "streams"))
		return cmd_streams(&o);
	if (!strcmp(argv[1], "hog"))
		return cmd_hog(&o);
	usage(stderr);
	return 2;
}
