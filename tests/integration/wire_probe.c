/*
 * wire-probe - a test client that speaks to an Ignis control socket the way a
 * broken or hostile peer would.
 *
 *   wire-probe SOCKET hex HEXBYTES     send raw bytes; print the reply
 *   wire-probe SOCKET size N           send N zero bytes (oversize tests)
 *   wire-probe SOCKET vanish [COUNT]   connect at the socket level and close
 *                                      before nng's header, COUNT times
 *   wire-probe fake-daemon NAME ROLE VERSION RTDIR
 *                                      listen as <RTDIR>/<NAME>.sock and answer
 *                                      every request with a hello from ROLE in
 *                                      protocol VERSION (handshake refusal tests)
 *
 * The reply is printed as "type=<name> code=<IG_E_*>" (code for errors only)
 * or "no-reply"; exit 0 when a reply arrived, 3 when none did.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <msgpack.h>

#include "proto/transport.h"

static int vanish(const char *path, int count)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	for (int i = 0; i < count; i++) {
		int fd = socket(AF_UNIX, SOCK_STREAM, 0);

		if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
			perror(path);
			return 1;
		}
		close(fd);
	}
	printf("vanished %d times\n", count);
	return 0;
}

static void pack_key(msgpack_packer *pk, const char *k)
{
	msgpack_pack_str(pk, strlen(k));
	msgpack_pack_str_body(pk, k, strlen(k));
}

/* Packed by hand: msg_encode always writes our own version. */
static int fake_daemon(const char *name, const char *role, unsigned version, const char *rtdir)
{
	struct tp_listener lis;
	struct ig_errbuf eb;

	if (tp_listen_guarded(&lis, rtdir, name, NULL, &eb) != IG_E_OK) {
		fprintf(stderr, "wire-probe: %s\n", eb.msg);
		return 1;
	}
	for (;;) {
		msgpack_sbuffer sb;
		msgpack_packer pk;
		nng_msg *req;

		if (nng_recvmsg(lis.sock, &req, 0) != 0)
			return 1;
		nng_msg_free(req);
		msgpack_sbuffer_init(&sb);
		msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
		msgpack_pack_map(&pk, 5);
		pack_key(&pk, "t");
		msgpack_pack_uint32(&pk, MSG_HELLO);
		pack_key(&pk, "v");
		msgpack_pack_uint32(&pk, version);
		pack_key(&pk, "role");
		pack_key(&pk, role);
		pack_key(&pk, "pid");
		msgpack_pack_uint32(&pk, (uint32_t)getpid());
		pack_key(&pk, "build");
		pack_key(&pk, "fake");
		nng_send(lis.sock, sb.data, sb.size, 0);
		msgpack_sbuffer_destroy(&sb);
	}
}

int main(int argc, char **argv)
{
	char url[TP_PATH_MAX + 8];
	struct ig_errbuf eb;
	unsigned char *buf;
	struct tp_rx rx;
	size_t n = 0;
	nng_socket s;
	int rc;

	if (argc < 3) {
		fprintf(stderr, "usage: wire-probe SOCKET hex HEX | size N | vanish [COUNT]\n");
		return 2;
	}
	if (!strcmp(argv[1], "fake-daemon") && argc == 6)
		return fake_daemon(argv[2], argv[3], (unsigned)atoi(argv[4]), argv[5]);
	if (!strcmp(argv[2], "vanish"))
		return vanish(argv[1], argc > 3 ? atoi(argv[3]) : 1);
	if (argc < 4)
		return 2;
	if (!strcmp(argv[2], "hex")) {
		const char *h = argv[3];

		buf = calloc(1, strlen(h) / 2 + 1);
		for (; h[0] && h[1]; h += 2) {
			unsigned v;

			sscanf(h, "%2x", &v);
			buf[n++] = (unsigned char)v;
		}
	} else {
		n = strtoul(argv[3], NULL, 10);
		buf = calloc(1, n ? n : 1);
	}
	snprintf(url, sizeof(url), "ipc://%s", argv[1]);
	if (tp_dial_url(&s, url, 2000, &eb) != IG_E_OK) {
		fprintf(stderr, "wire-probe: %s\n", eb.msg);
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
