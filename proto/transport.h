/*
 * transport.h - nng helpers: request/reply over ipc sockets in the private
 * runtime directory, carrying msg.h messages.
 *
 * Every socket sets NNG_OPT_RECVMAXSZ to MSG_MAX_BYTES (nng's default is
 * unlimited). A listener's socket file is created with mode 0600 inside the
 * 0700 runtime directory, and only after an flock() on "<name>.lock" beside
 * it succeeded: nng 1.5.2 wedges a listener for good when a connection closes
 * before its 8-byte header (upstream issue 1518), and a second process calling
 * nng_listen on a live path does exactly that. The lock file holds the owner's
 * pid, so a refusal can name it.
 */
#ifndef IGNIS_PROTO_TRANSPORT_H
#define IGNIS_PROTO_TRANSPORT_H

#include <stdbool.h>
#include <sys/types.h>

#include <nng/nng.h>

#include "common/err.h"
#include "lisguard.h"
#include "msg.h"
#include "common/rtdir.h"

#define TP_PATH_MAX 128

/* A REP socket listening on `<rtdir>/<name>.sock`, holding `<name>.lock`,
 * its listener guarded against nng's wedge (lisguard.h). */
struct tp_listener {
	nng_socket sock;
	bool sock_open;
	struct lisguard guard;
	int lockfd; /* -1 when not held */
	char path[TP_PATH_MAX];
	char lockpath[TP_PATH_MAX];
	char url[TP_PATH_MAX + 8];
};

/* Take the lock and listen, under a listener guard with options `o`
 * (lisguard.h; NULL: the defaults). IG_E_BUSY when another live process
 * holds the lock (the message names its pid). On failure nothing is left
 * behind. */
int tp_listen_guarded(struct tp_listener *t, const char *rtdir, const char *name,
                      const struct lg_opts *o, struct ig_errbuf *eb);
/* Close the socket, remove the socket and lock files, drop the lock.
 * Idempotent. */
void tp_listener_close(struct tp_listener *t);

/* Take the flock() on `lockpath` (created with mode 0600; our pid written
 * in it) the way tp_listen_guarded takes its own: for a listener opened elsewhere
 * (the supervisor's front door). IG_E_BUSY naming the holder's pid. On
 * success *fd holds the lock until the caller unlinks the file and closes
 * it. */
int tp_lock_take(const char *lockpath, int *fd, struct ig_errbuf *eb);

/* Remove the socket and lock files `<rtdir>/<name>.{sock,lock}` left by a dead
 * owner. Only when the lock can be taken: a live owner's files are left alone
 * and false is returned (its pid in *holder). True when nothing is left. */
bool tp_remove_stale(const char *rtdir, const char *name, pid_t *holder);

/* True when a live process holds `<rtdir>/<name>.lock`; its pid in *holder
 * (0 when unreadable). Touches no socket. */
bool tp_lock_held(const char *rtdir, const char *name, pid_t *holder);

/* Can a client reach the ipc socket at `sock`, whose owner holds the lock
 * file `lock`? Said at once when not, and why: the directory is missing or
 * may not be entered (another user's 0700 runtime directory), nothing holds
 * the lock (no process serves there), or the socket may not be opened.
 * Only locks and file modes are looked at; the socket is never probed (a
 * raw connect would wedge nng 1.5.2's listener). IG_E_NOTFOUND, IG_E_PERM
 * or IG_E_IO with the remedy in the message. `what` names the server in
 * it ("ignis-supervisor's front door"). A socket missing while its lock is
 * held is waited for up to TP_REACH_WAIT_MS (a listener being made again
 * after a wedge, a server still starting). */
#define TP_REACH_WAIT_MS 1000
int tp_reach(const char *sock, const char *lock, const char *what, struct ig_errbuf *eb);
/* The lock beside an ipc socket path: "<path less .sock>.lock" (what the
 * supervisor takes for a --server-bind ipc path). False when too long. */
bool tp_lock_path_of(const char *sock, char *lock, size_t cap);

/* Open a REQ socket dialing `<rtdir>/<name>.sock` in the background (the dial
 * retries until the listener appears). `timeout_ms` bounds each send and
 * receive. */
int tp_dial(nng_socket *s, const char *rtdir, const char *name, int timeout_ms,
            struct ig_errbuf *eb);
int tp_dial_url(nng_socket *s, const char *url, int timeout_ms, struct ig_errbuf *eb);
/* The same, but the first connection is made now: a peer that refuses it
 * (nothing listening at a tcp address) is an error at once. Later losses
 * are redialled in the background as with tp_dial_url. */
int tp_dial_url_now(nng_socket *s, const char *url, int timeout_ms, struct ig_errbuf *eb);

/* A received message. `m`'s string views point into `nm`; release with
 * tp_rx_release (idempotent). */
struct tp_rx {
	nng_msg *nm;
	struct msg m;
};
void tp_rx_release(struct tp_rx *rx);

/* Encode `m` into a new nng message (*out; the caller sends or frees it). */
int tp_encode(const struct msg *m, nng_msg **out, struct ig_errbuf *eb);
/* Decode `nm` into `rx`, which owns it from now on (freed on failure too). */
int tp_decode(nng_msg *nm, struct tp_rx *rx, struct ig_errbuf *eb);
/* Encode and send `m`. */
int tp_send(nng_socket s, const struct msg *m, struct ig_errbuf *eb);
/* Receive and decode one message. IG_E_TIMEOUT when none came in time; a
 * decode failure returns its IG_E_PROTO_* code (rx holds nothing then). */
int tp_recv(nng_socket s, struct tp_rx *rx, struct ig_errbuf *eb);
/* send + recv. A reply of type `error` is turned into its code and message;
 * on success the caller owns `rx`. */
int tp_call(nng_socket s, const struct msg *req, struct tp_rx *rx, struct ig_errbuf *eb);

/* Dial `url` with a socket of its own, ping it (sequence `seq`) and close:
 * IG_E_OK when the pong came back within `timeout_ms` each way. What a
 * watchdog or a probe asks of a listener. */
int tp_ping(const char *url, int timeout_ms, uint64_t seq, struct ig_errbuf *eb);

/* Map an nng error to ours, with `what` and nng's text in `eb`. */
int tp_nng_err(struct ig_errbuf *eb, int nng_rv, const char *what);

#endif
