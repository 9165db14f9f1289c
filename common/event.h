/*
 * event.h - structured events, one JSON object per line on stdout.
 *
 *   {"ts":"2026-11-29T11:13:25.123Z","level":"info","event":"ignis.supervisor.child_started",
 *    "proc":"supervisor","pid":1234,...}
 *
 * Events are the only thing an Ignis program writes to stdout; human
 * diagnostics of a command-line verb go to stderr. A line is built in a
 * caller-owned `struct ev` and written with one write(2), so lines from the
 * three processes sharing one stdout never interleave mid-line (lines are far
 * below PIPE_BUF in practice; a line that would exceed EV_LINE_MAX is cut at a
 * field boundary and marked "truncated":true).
 */
#ifndef IGNIS_COMMON_EVENT_H
#define IGNIS_COMMON_EVENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EV_LINE_MAX 4000

enum ev_level { EV_DEBUG, EV_INFO, EV_WARN, EV_ERROR };

struct ev {
	size_t len;
	bool full;
	char buf[EV_LINE_MAX + 64];
};

/*
 * The process's event identity ("supervisor", "gpu-worker", "kvstore") and the
 * descriptor events go to (stdout unless set). Set once in main, before any
 * thread starts: these are the early log sink style rule 13 allows.
 */
void ev_setup(const char *proc, int fd);

/* Start an event line: ts, level, event, proc, pid. */
void ev_begin(struct ev *e, enum ev_level level, const char *name);
void ev_str(struct ev *e, const char *key, const char *val);
/* A string given as pointer and length (need not be NUL-terminated). */
void ev_strn(struct ev *e, const char *key, const char *val, size_t n);
void ev_u64(struct ev *e, const char *key, uint64_t val);
void ev_i64(struct ev *e, const char *key, int64_t val);
void ev_bool(struct ev *e, const char *key, bool val);
/* Finish the line and write it. */
void ev_end(struct ev *e);

/* One-call event with a single "message" field. */
void ev_msg(enum ev_level level, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * A rate limit for one kind of event that outsiders can cause (a malformed
 * message, a vanished client): the first EV_LIMIT_BURST of a period are
 * written in full, the rest only counted, and once the period is over the
 * count left out is due for one summary event. The caller owns it, zeroed,
 * and serialises its use.
 */
#define EV_LIMIT_BURST     5
#define EV_LIMIT_PERIOD_MS 10000

struct ev_limit {
	uint64_t since_ms; /* the period's start; 0: none running */
	uint32_t passed;   /* written in full this period */
	uint64_t held;     /* counted and not written since the last summary */
	uint64_t total;    /* every occurrence */
};

/* Count one occurrence at `now_ms`: true when it is to be written in full. */
bool ev_limit_take(struct ev_limit *l, uint64_t now_ms);
/* When the period is over: the occurrences left out (then cleared, and the
 * next occurrence starts a new period), for the caller's summary event;
 * else 0. */
uint64_t ev_limit_due(struct ev_limit *l, uint64_t now_ms);

/* Append `s` (n bytes) to `out` as the body of a JSON string (no quotes).
 * Returns the bytes written, or (size_t)-1 when `cap` is too small. */
size_t ev_json_escape(char *out, size_t cap, const char *s, size_t n);

#endif
