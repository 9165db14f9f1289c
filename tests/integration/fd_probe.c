/*
 * fd-probe - a test client that speaks to the front door (ipc:// or tcp://)
 * the way a broken or hostile peer would.
 *
 *   fd-probe URL hex HEXBYTES   send raw bytes over nng; print the reply
 *   fd-probe URL size N         send N zero bytes (oversize tests)
 *   fd-probe URL vanish COUNT   connect at the socket level and close at once,
 *                               before nng's 8-byte header, COUNT times
 *   fd-probe URL half COUNT     connect, send 4 of the header's 8 bytes, close
 *   fd-probe URL flood COUNT HEX  send the bytes COUNT times on one
 *                               connection, each answered; print how many
 *                               answers were errors
 *   fd-probe URL wedge COUNT    COUNT times: vanish once, then time how long
 *                               until a new client's ping is answered; print
 *                               the mean and the worst (exit 1 if one took
 *                               over 5 s: the guard cures one within tens of
 *                               ms, and a ping times out at 250 ms; a sanitized
 *                               build beside a flood test on two cores once
 *                               took over 2 s)
 *   fd-probe URL hog SOCKETS EACH MAX_TOKENS
 *                               SOCKETS connections submit EACH requests each
 *                               (a context a request) and never read a reply
 *                               or a token: one client holding the door's
 *                               queue; prints "sent N" once they are sent,
 *                               then waits for stdin to close
 *   fd-probe version            print the protocol version (to build hex)
 *
 * The reply is printed as "type=<name> code=<IG_E_*> message=..." (code and
 * message for errors only) or "no-reply"; exit 0 when a reply arrived, 3
 * when none did.
 */
#define _GNU_SOURCE
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/clock.h"
#include "proto/transport.h"

#include <nng/protocol/reqrep0/req.h>

/* A stream socket connected to the address under `url`, or -1. */
static int raw_connect(const char *url)
{
	if (!strncmp(url, "ipc://", 6)) {
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		int fd = socket(AF_UNIX, SOCK_STREAM, 0);

		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", url + 6);
		if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			return fd;
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if (!strncmp(url, "tcp://", 6)) {
		char host[256];
		const char *colon = strrchr(url + 6, ':');
		struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
		int fd = -1;

		if (!colon || (size_t)(colon - (url + 6)) >= sizeof(host))
			return -1;
		snprintf(host, sizeof(host), "%.*s", (int)(colon - (url + 6)), url + 6);
		if (getaddrinfo(host, colon + 1, &hints, &ai) != 0)
			return -1;
		fd = socket(ai->ai_family, SOCK_STREAM, 0);
		if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
			close(fd);
			fd = -1;
		}
		freeaddrinfo(ai);
		return fd;
	}
	return -1;
}

static int vanish(const char *url, int count, bool half)
{
	/* nng's SP header for REQ: 0x00 'S' 'P' 0x00, protocol, reserved */
	static const unsigned char header[4] = {0x00, 'S', 'P', 0x00};

	for (int i = 0; i < count; i++) {
		int fd = raw_connect(url);

		if (fd < 0) {
			perror(url);
			return 1;
		}
		if (half && write(fd, header, sizeof(header)) != (ssize_t)sizeof(header)) {
			perror("write");
			close(fd);
			return 1;
		}
		close(fd);
	}
	printf("vanished %d times%s\n", count, half ? " mid-header" : "");
	return 0;
}

static int wedge(const char *url, int count)
{
	uint64_t total = 0, worst = 0;
	struct ig_errbuf eb;

	for (int i = 0; i < count; i++) {
		uint64_t t0, dt;
		int fd = raw_connect(url);

		if (fd < 0) {
			perror(url);
			return 1;
		}
		close(fd);
		t0 = clk_mono_ms();
		while (tp_ping(url, 250, (uint64_t)i + 1, &eb) != IG_E_OK)
			if (clk_mono_ms() - t0 > 5000) {
				printf("wedge %d: not answering 5 s later\n", i);
				return 1;
			}
		dt = clk_mono_ms() - t0;
		total += dt;
		worst = dt > worst ? dt : worst;
	}
	printf("%d wedges: answering again %.1f ms after each on average, %llu ms at worst\n",
	       count, count ? (double)total / count : 0.0, (unsigned long long)worst);
	return 0;
}

static unsigned char *unhex(const char *h, size_t *n)
{
	unsigned char *buf = calloc(1, strlen(h) / 2 + 1);

	*n = 0;
	for (; buf && h[0] && h[1]; h += 2) {
		unsigned v;

		sscanf(h, "%2x", &v);
		buf[(*n)++] = (unsigned char)v;
	}
	return buf;
}

static int flood(const char *url, int count, const char *hex)
{
	struct ig_errbuf eb;
	size_t n;
	unsigned char *buf = unhex(hex, &n);
	int errors = 0;
	nng_socket s;

	if (!buf || tp_dial_url(&s, url, 5000, &eb) != IG_E_OK) {
		fprintf(stderr, "fd-probe: %s\n", buf ? eb.msg : "no memory");
		return 1;
	}
	for (int i = 0; i < count; i++) {
		struct tp_rx rx;

		if (nng_send(s, buf, n, 0) != 0 || tp_recv(s, &rx, &eb) != IG_E_OK) {
			printf("message %d: no answer\n", i);
			return 1;
		}
		errors += rx.m.type == MSG_ERROR;
		tp_rx_release(&rx);
	}
	printf("%d sent, %d answered with an error\n", count, errors);
	fflush(stdout);
	_exit(0);
}

static int hog(const char *url, int socks, int each, int max_tokens)
{
	static struct msg q;
	struct ig_errbuf eb;
	char line[8];
	int sent = 0;

	q.type = MSG_FD_SUBMIT;
	q.u.fd_submit.text = msg_str_of("hold the queue");
	q.u.fd_submit.max_tokens = (uint64_t)max_tokens;
	q.u.fd_submit.class = msg_str_of("agent");
	q.u.fd_submit.top_p = 1.0;
	for (int i = 0; i < socks; i++) {
		nng_socket s;

		if (tp_dial_url(&s, url, 5000, &eb) != IG_E_OK) {
			fprintf(stderr, "fd-probe: %s\n", eb.msg);
			return 1;
		}
		/* never sent again: the door would take a resend as one more */
		nng_socket_set_ms(s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
		for (int j = 0; j < each; j++) {
			nng_ctx ctx;
			nng_aio *aio;
			nng_msg *nm;

			if (nng_ctx_open(&ctx, s) || nng_aio_alloc(&aio, NULL, NULL) ||
			    tp_encode(&q, &nm, &eb)) {
				fprintf(stderr, "fd-probe: cannot send submit %d\n", sent);
				return 1;
			}
			nng_aio_set_msg(aio, nm);
			nng_ctx_send(ctx, aio);
			nng_aio_wait(aio);
			if (nng_aio_result(aio)) {
				fprintf(stderr, "fd-probe: submit %d not sent\n", sent);
				return 1;
			}
			sent++;
		}
	}
	printf("sent %d\n", sent);
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin))
		;
	_exit(0); /* nothing closed: the door sees the connections go at once */
}

int main(int argc, char **argv)
{
	struct ig_errbuf eb;
	unsigned char *buf;
	struct tp_rx rx;
	size_t n = 0;
	nng_socket s;
	int rc;

	if (argc == 2 && !strcmp(argv[1], "version")) {
		printf("%u\n", MSG_PROTO_VERSION);
		return 0;
	}
	if (argc == 5 && !strcmp(argv[2], "flood"))
		return flood(argv[1], atoi(argv[3]), argv[4]);
	if (argc == 6 && !strcmp(argv[2], "hog"))
		return hog(argv[1], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
	if (argc != 4) {
		fprintf(stderr,
		        "usage: fd-probe URL hex HEX | size N | vanish COUNT | half COUNT | wedge "
		        "COUNT | flood COUNT HEX | hog SOCKETS EACH MAX_TOKENS\n");
		return 2;
	}
	if (!strcmp(argv[2], "wedge"))
		return wedge(argv[1], atoi(argv[3]));
	if (!strcmp(argv[2], "vanish") || !strcmp(argv[2], "half"))
		return vanish(argv[1], atoi(argv[3]), !strcmp(argv[2], "half"));
	if (!strcmp(argv[2], "hex")) {
		buf = unhex(argv[3], &n);
	} else {
		n = strtoul(argv[3], NULL, 10);
		buf = calloc(1, n ? n : 1);
	}
	if (tp_dial_url(&s, argv[1], 3000, &eb) != IG_E_OK) {
		fprintf(stderr, "fd-probe: %s\n", eb.msg);
		return 1;
	}
	if (nng_send(s, buf, n, 0) != 0) {
		printf("no-reply\n");
		return 3;
	}
	rc = tp_recv(s, &rx, &eb);
	if (rc != IG_E_OK) {
		printf("no-reply\n");
		/* No nng_close: nng 1.5.2 can hang closing a pipe its peer dropped
		 * mid-message; exiting is the clean way out for a probe. */
		fflush(stdout);
		_exit(3);
	}
	if (rx.m.type == MSG_ERROR)
		printf("type=error code=%s message=%.*s\n", ig_err_name((int)rx.m.u.error.code),
		       (int)rx.m.u.error.message.n, rx.m.u.error.message.p);
	else
		printf("type=%s\n", msg_type_name(rx.m.type));
	tp_rx_release(&rx);
	fflush(stdout);
	_exit(0);
}
