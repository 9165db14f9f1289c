/* transport.c - nng sockets carrying msg.h messages (see transport.h). */
#define _GNU_SOURCE
#include "transport.h"
#include "common/clock.h"

#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>

int tp_nng_err(struct ig_errbuf *eb, int rv, const char *what)
{
	int code;

	switch (rv) {
	case NNG_ETIMEDOUT:
		code = IG_E_TIMEOUT;
		break;
	case NNG_ECLOSED:
	case NNG_ECONNSHUT:
	case NNG_ECONNRESET:
		code = IG_E_CLOSED;
		break;
	case NNG_ENOMEM:
		code = IG_E_NOMEM;
		break;
	case NNG_EADDRINUSE:
		code = IG_E_BUSY;
		break;
	case NNG_EMSGSIZE:
		code = IG_E_PROTO_OVERSIZE;
		break;
	default:
		code = IG_E_TRANSPORT;
		break;
	}
	return ig_errf(eb, code, "%s: %s", what, nng_strerror(rv));
}

/* ---- locks --------------------------------------------------------------- */

static pid_t tp__read_pid(int fd)
{
	char buf[32];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);

	if (n <= 0)
		return 0;
	buf[n] = '\0';
	return (pid_t)strtol(buf, NULL, 10);
}

/* Lock `path`, making sure the locked inode is still the one at `path` (a
 * closing owner unlinks it before dropping the lock). */
static int tp__lock(const char *path, int *fdout, struct ig_errbuf *eb)
{
	for (int attempt = 0; attempt < 8; attempt++) {
		struct stat a, b;
		int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		char pid[32];
		int n;

		if (fd < 0)
			return ig_errf(eb, IG_E_IO, "cannot open lock '%s': %s", path,
			               strerror(errno));
		int e = 0;

		/* A prober (tp_lock_held) holds it shared for microseconds: retry for
		 * a moment before calling the lock taken. */
		for (int tries = 0; tries < 25; tries++) {
			e = flock(fd, LOCK_EX | LOCK_NB) == 0 ? 0 : errno;
			if (e != EWOULDBLOCK)
				break;
			clk_sleep_ms(10);
		}
		if (e != 0) {
			pid_t holder = tp__read_pid(fd);

			close(fd);
			if (e == EWOULDBLOCK)
				return ig_errf(
				    eb, IG_E_BUSY,
				    "'%s' is held by a running process (pid %ld); stop it "
				    "first or use another --runtime-dir",
				    path, (long)holder);
			return ig_errf(eb, IG_E_IO, "cannot lock '%s': %s", path, strerror(e));
		}
		if (fstat(fd, &a) != 0 || stat(path, &b) != 0 || a.st_ino != b.st_ino ||
		    a.st_dev != b.st_dev) {
			close(fd);
			continue; /* raced with an owner removing it: take the new file */
		}
		n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
		if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
			e = errno;
			close(fd);
			return ig_errf(eb, IG_E_IO, "cannot write lock '%s': %s", path,
			               strerror(e));
		}
		*fdout = fd;
		return IG_E_OK;
	}
	return ig_errf(eb, IG_E_BUSY, "lock '%s' keeps changing under us", path);
}

int tp_lock_take(const char *lockpath, int *fd, struct ig_errbuf *eb)
{
	return tp__lock(lockpath, fd, eb);
}

static bool tp__lock_held_at(const char *path, pid_t *holder)
{
	bool held = false;
	int fd;

	*holder = 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	if (flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
		held = true;
		*holder = tp__read_pid(fd);
	}
	close(fd);
	return held;
}

bool tp_lock_held(const char *rtdir, const char *name, pid_t *holder)
{
	char path[TP_PATH_MAX];

	*holder = 0;
	if (snprintf(path, sizeof(path), "%s/%s.lock", rtdir, name) >= (int)sizeof(path))
		return false;
	return tp__lock_held_at(path, holder);
}

bool tp_lock_path_of(const char *sock, char *lock, size_t cap)
{
	size_t len = strlen(sock);

	if (len > 5 && !strcmp(sock + len - 5, ".sock"))
		return snprintf(lock, cap, "%.*s.lock", (int)(len - 5), sock) < (int)cap;
	return snprintf(lock, cap, "%s.lock", sock) < (int)cap;
}

int tp_reach(const char *sock, const char *lock, const char *what, struct ig_errbuf *eb)
{
	char dir[TP_PATH_MAX + 8];
	const char *slash = strrchr(sock, '/');
	struct stat st;
	pid_t holder;

	if (!slash || (size_t)(slash - sock) >= sizeof(dir))
		return ig_errf(eb, IG_E_CONFIG, "socket path '%s': accepted: an absolute path",
		               sock);
	snprintf(dir, sizeof(dir), "%.*s", slash == sock ? 1 : (int)(slash - sock), sock);
	if (stat(dir, &st) != 0) {
		if (errno == ENOENT)
			return ig_errf(
			    eb, IG_E_NOTFOUND,
			    "%s does not exist: no %s runs there (start ignis-supervisor, "
			    "or name its runtime directory with --runtime-dir)",
			    dir, what);
		return ig_errf(eb, errno == EACCES ? IG_E_PERM : IG_E_IO, "%s: %s", dir,
		               strerror(errno));
	}
	if (!S_ISDIR(st.st_mode))
		return ig_errf(eb, IG_E_CONFIG, "%s is not a directory", dir);
	if (access(dir, X_OK) != 0)
		return ig_errf(eb, errno == EACCES ? IG_E_PERM : IG_E_IO,
		               "%s: %s (it belongs to uid %u, mode %04o): run as its owner, or "
		               "name a runtime directory of yours",
		               dir, strerror(errno), (unsigned)st.st_uid,
		               (unsigned)(st.st_mode & 07777));
	if (!tp__lock_held_at(lock, &holder))
		return ig_errf(eb, IG_E_NOTFOUND,
		               "no %s runs at %s (nothing holds %s): start ignis-supervisor, or "
		               "name the runtime directory or address of one that runs",
		               what, sock, lock);
	/* a listener being made again (lisguard.h) or a server still starting:
	 * the socket appears within a moment */
	for (int i = 0; i < TP_REACH_WAIT_MS / 10 && access(sock, F_OK) != 0 && errno == ENOENT; i++)
		usleep(10000);
	if (access(sock, R_OK | W_OK) != 0) {
		if (errno == ENOENT)
			return ig_errf(eb, IG_E_NOTFOUND,
			               "%s (pid %ld holds %s) has no socket at %s: is it still "
			               "starting?",
			               what, (long)holder, lock, sock);
		return ig_errf(eb, errno == EACCES ? IG_E_PERM : IG_E_IO,
		               "%s: %s: it belongs to another user; run as them", sock,
		               strerror(errno));
	}
	return IG_E_OK;
}

bool tp_remove_stale(const char *rtdir, const char *name, pid_t *holder)
{
	char lock[TP_PATH_MAX], sock[TP_PATH_MAX];
	int fd;

	*holder = 0;
	if (snprintf(lock, sizeof(lock), "%s/%s.lock", rtdir, name) >= (int)sizeof(lock) ||
	    snprintf(sock, sizeof(sock), "%s/%s.sock", rtdir, name) >= (int)sizeof(sock))
		return false;
	fd = open(lock, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return access(sock, F_OK) != 0 || unlink(sock) == 0; /* no lock: no owner */
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		*holder = tp__read_pid(fd);
		close(fd);
		return false;
	}
	/* Holding the lock: unlink both before letting go (see tp_listener_close). */
	unlink(sock);
	unlink(lock);
	close(fd);
	return true;
}

/* ---- listener ------------------------------------------------------------ */

int tp_listen_guarded(struct tp_listener *t, const char *rtdir, const char *name,
                      const struct lg_opts *o, struct ig_errbuf *eb)
{
	int rc, rv;

	memset(t, 0, sizeof(*t));
	t->lockfd = -1;
	if (snprintf(t->path, sizeof(t->path), "%s/%s.sock", rtdir, name) >= (int)sizeof(t->path) ||
	    snprintf(t->lockpath, sizeof(t->lockpath), "%s/%s.lock", rtdir, name) >=
	        (int)sizeof(t->lockpath))
		return ig_errf(eb, IG_E_CONFIG, "socket path under '%s' is too long", rtdir);
	snprintf(t->url, sizeof(t->url), "ipc://%s", t->path);
	rc = tp__lock(t->lockpath, &t->lockfd, eb);
	if (rc)
		return rc;
	rv = nng_rep0_open(&t->sock);
	if (rv) {
		rc = tp_nng_err(eb, rv, "cannot open a reply socket");
		goto out_unlock;
	}
	rv = nng_socket_set_size(t->sock, NNG_OPT_RECVMAXSZ, MSG_MAX_BYTES);
	if (rv) {
		rc = tp_nng_err(eb, rv, "cannot size the reply socket");
		nng_close(t->sock);
		goto out_unlock;
	}
	t->sock_open = true;
	/* lg_open removes what a dead owner left at the path: we hold the lock */
	rc = lg_open(&t->guard, t->sock, t->url, o, eb);
	if (rc) {
		nng_close(t->sock);
		t->sock_open = false;
		goto out_unlock;
	}
	return IG_E_OK;

out_unlock:
	unlink(t->lockpath);
	close(t->lockfd);
	t->lockfd = -1;
	return rc;
}

void tp_listener_close(struct tp_listener *t)
{
	if (t->sock_open) {
		lg_close(&t->guard);
		nng_close(t->sock);
		t->sock_open = false;
		unlink(t->path);
	}
	if (t->lockfd >= 0) {
		unlink(t->lockpath);
		close(t->lockfd);
		t->lockfd = -1;
	}
}

/* ---- dialer -------------------------------------------------------------- */

static int tp__dial(nng_socket *s, const char *url, int timeout_ms, int flags, struct ig_errbuf *eb)
{
	int rv = nng_req0_open(s);

	if (rv)
		return tp_nng_err(eb, rv, "cannot open a request socket");
	rv = nng_socket_set_size(*s, NNG_OPT_RECVMAXSZ, MSG_MAX_BYTES);
	if (!rv)
		rv = nng_socket_set_ms(*s, NNG_OPT_RECVTIMEO, timeout_ms);
	if (!rv)
		rv = nng_socket_set_ms(*s, NNG_OPT_SENDTIMEO, timeout_ms);
	/* Redial a restarted peer quickly. */
	if (!rv)
		rv = nng_socket_set_ms(*s, NNG_OPT_RECONNMINT, 20);
	if (!rv)
		rv = nng_socket_set_ms(*s, NNG_OPT_RECONNMAXT, 500);
	if (!rv)
		rv = nng_dial(*s, url, NULL, flags);
	if (rv) {
		nng_close(*s);
		return tp_nng_err(eb, rv, url);
	}
	return IG_E_OK;
}

int tp_dial_url(nng_socket *s, const char *url, int timeout_ms, struct ig_errbuf *eb)
{
	return tp__dial(s, url, timeout_ms, NNG_FLAG_NONBLOCK, eb);
}

int tp_dial_url_now(nng_socket *s, const char *url, int timeout_ms, struct ig_errbuf *eb)
{
	return tp__dial(s, url, timeout_ms, 0, eb);
}

int tp_dial(nng_socket *s, const char *rtdir, const char *name, int timeout_ms,
            struct ig_errbuf *eb)
{
	char url[TP_PATH_MAX + 8];

	if (snprintf(url, sizeof(url), "ipc://%s/%s.sock", rtdir, name) >= (int)sizeof(url))
		return ig_errf(eb, IG_E_CONFIG, "socket path under '%s' is too long", rtdir);
	return tp_dial_url(s, url, timeout_ms, eb);
}

/* ---- messages ------------------------------------------------------------ */

static int tp__append(void *ctx, const char *buf, size_t len)
{
	return nng_msg_append(ctx, buf, len) == 0 ? 0 : -1;
}

int tp_encode(const struct msg *m, nng_msg **out, struct ig_errbuf *eb)
{
	nng_msg *nm;
	int rv, rc;

	*out = NULL;
	rv = nng_msg_alloc(&nm, 0);
	if (rv)
		return tp_nng_err(eb, rv, "cannot allocate a message");
	rc = msg_encode(m, tp__append, nm, eb);
	if (rc) {
		nng_msg_free(nm);
		return rc;
	}
	*out = nm;
	return IG_E_OK;
}

int tp_decode(nng_msg *nm, struct tp_rx *rx, struct ig_errbuf *eb)
{
	int rc;

	rx->nm = nm;
	rc = msg_decode(nng_msg_body(nm), nng_msg_len(nm), &rx->m, eb);
	if (rc)
		tp_rx_release(rx);
	return rc;
}

int tp_send(nng_socket s, const struct msg *m, struct ig_errbuf *eb)
{
	nng_msg *nm;
	int rv, rc;

	rc = tp_encode(m, &nm, eb);
	if (rc)
		return rc;
	rv = nng_sendmsg(s, nm, 0);
	if (rv) {
		nng_msg_free(nm);
		return tp_nng_err(eb, rv, "send");
	}
	return IG_E_OK;
}

void tp_rx_release(struct tp_rx *rx)
{
	if (rx->nm) {
		nng_msg_free(rx->nm);
		rx->nm = NULL;
	}
}

int tp_recv(nng_socket s, struct tp_rx *rx, struct ig_errbuf *eb)
{
	int rv;

	rx->nm = NULL;
	rv = nng_recvmsg(s, &rx->nm, 0);
	if (rv)
		return tp_nng_err(eb, rv, "receive");
	return tp_decode(rx->nm, rx, eb);
}

int tp_ping(const char *url, int timeout_ms, uint64_t seq, struct ig_errbuf *eb)
{
	struct msg ping = {.type = MSG_PING};
	struct tp_rx rx;
	nng_socket sock;
	int rc;

	ping.u.ping.seq = seq;
	rc = tp_dial_url(&sock, url, timeout_ms, eb);
	if (rc)
		return rc;
	rc = tp_call(sock, &ping, &rx, eb);
	if (rc == IG_E_OK && (rx.m.type != MSG_PONG || rx.m.u.pong.seq != seq))
		rc = ig_errf(eb, IG_E_PROTO_UNEXPECTED, "%s answered a ping with '%s'", url,
		             msg_type_name(rx.m.type));
	tp_rx_release(&rx);
	nng_close(sock);
	return rc;
}

int tp_call(nng_socket s, const struct msg *req, struct tp_rx *rx, struct ig_errbuf *eb)
{
	int rc = tp_send(s, req, eb);

	rx->nm = NULL;
	if (rc)
		return rc;
	rc = tp_recv(s, rx, eb);
	if (rc)
		return rc;
	if (rx->m.type == MSG_ERROR) {
		char text[sizeof(eb->msg)];
		uint64_t code = rx->m.u.error.code;

		msg_str_copy(text, sizeof(text), rx->m.u.error.message);
		tp_rx_release(rx);
		/* An error reply is never success, whatever code it carries. */
		return ig_errf(eb,
		               code != IG_E_OK && code <= INT32_MAX && ig_err_known((int)code)
		                   ? (int)code
		                   : IG_E_PROTO_UNEXPECTED,
		               "peer refused %s: %s", msg_type_name(req->type), text);
	}
	return IG_E_OK;
}
