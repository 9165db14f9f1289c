/*
 * err.h - the one table of error codes shared by every Ignis program.
 *
 * Codes cross process boundaries (the proto `error` message carries them), so
 * each has an explicit value: on the wire, never renumber, never reuse.
 * Human detail goes into a caller-supplied `struct ig_errbuf`, not into the
 * code: what failed first, the subject quoted, the remedy when there is one.
 */
#ifndef IGNIS_COMMON_ERR_H
#define IGNIS_COMMON_ERR_H

#include <stdarg.h>
#include <stddef.h>

/* X(NAME, value, "short description") */
#define IG_ERRORS(X)                                                                               \
	X(OK, 0, "success")                                                                        \
	X(NOMEM, 1, "out of host memory")                                                          \
	X(INVAL, 2, "invalid argument")                                                            \
	X(IO, 3, "input/output error")                                                             \
	X(TIMEOUT, 4, "timed out")                                                                 \
	X(CLOSED, 5, "connection closed")                                                          \
	X(BUSY, 6, "resource in use")                                                              \
	X(NOTFOUND, 7, "not found")                                                                \
	X(CONFIG, 8, "bad configuration")                                                          \
	X(PERM, 9, "permission or ownership refused")                                              \
	X(TRANSPORT, 10, "transport error")                                                        \
	X(NOSPACE, 11, "no room: the tier is full")                                                \
	X(NOT_READY, 12, "not ready yet: try again shortly")                                       \
	X(PROTO_TRUNCATED, 20, "message truncated")                                                \
	X(PROTO_OVERSIZE, 21, "message larger than allowed")                                       \
	X(PROTO_MALFORMED, 22, "message is not a well-formed msgpack map")                         \
	X(PROTO_UNKNOWN_TYPE, 23, "unknown message type")                                          \
	X(PROTO_VERSION, 24, "protocol version mismatch")                                          \
	X(PROTO_MISSING_FIELD, 25, "required field missing")                                       \
	X(PROTO_FIELD_TYPE, 26, "field has the wrong type")                                        \
	X(PROTO_FIELD_RANGE, 27, "field value out of range")                                       \
	X(PROTO_UNKNOWN_FIELD, 28, "unknown field")                                                \
	X(PROTO_UNEXPECTED, 29, "unexpected message type")                                         \
	X(CHILD, 40, "child process failed")                                                       \
	X(PLAN_REFUSED, 41, "the VRAM plan refuses the start")                                     \
	X(REQ_CONTEXT, 50, "the request is longer than the context")                               \
	X(REQ_POOL, 51, "the request is larger than the whole KV pool")                            \
	X(KV_LOST, 52, "a stored sequence is lost: torn, corrupt or foreign record")

enum ig_err {
#define IG__ERR_ENUM(name, val, desc) IG_E_##name = val,
	IG_ERRORS(IG__ERR_ENUM)
#undef IG__ERR_ENUM
};

/* The caller's buffer for the human detail of an error. */
struct ig_errbuf {
	int code;
	char msg[512];
};

/* "IG_E_PROTO_TRUNCATED" style name of a code; "IG_E_UNKNOWN" for others. */
const char *ig_err_name(int code);
/* One-line description of a code. */
const char *ig_err_str(int code);
/* True when `code` is a value of the table. */
int ig_err_known(int code);

/*
 * Record `code` and a formatted message in `eb` (which may be NULL) and return
 * `code`, so that callers write `return ig_errf(eb, IG_E_INVAL, "...", ...);`.
 */
int ig_errf(struct ig_errbuf *eb, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int ig_verrf(struct ig_errbuf *eb, int code, const char *fmt, va_list ap);

/* Prefix the message already in `eb` with more context ("what: <old>"). */
int ig_errprefix(struct ig_errbuf *eb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Clear `eb`. */
void ig_errclear(struct ig_errbuf *eb);

#endif
