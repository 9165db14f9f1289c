/* event.c - JSON-lines event writer (see event.h). */
#include "event.h"
#include "clock.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The early log sink: written once in main before threads start. */
static const char *ev__proc = "ignis";
static int ev__fd = STDOUT_FILENO;

void ev_setup(const char *proc, int fd)
{
	ev__proc = proc;
	ev__fd = fd;
}

size_t ev_json_escape(char *out, size_t cap, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		char tmp[8];
		size_t k = 0;

		if (c == '"' || c == '\\') {
			tmp[k++] = '\\';
			tmp[k++] = (char)c;
		} else if (c == '\n') {
			tmp[k++] = '\\';
			tmp[k++] = 'n';
		} else if (c == '\t') {
			tmp[k++] = '\\';
			tmp[k++] = 't';
		} else if (c < 0x20 || c == 0x7f) {
			memcpy(tmp, "\\u00", 4);
			k = 4;
			tmp[k++] = hex[c >> 4];
			tmp[k++] = hex[c & 15];
		} else {
			tmp[k++] = (char)c;
		}
		if (o + k > cap)
			return (size_t)-1;
		memcpy(out + o, tmp, k);
		o += k;
	}
	return o;
}

static void ev__raw(struct ev *e, const char *s, size_t n)
{
	if (e->full)
		return;
	if (e->len + n > EV_LINE_MAX) {
		e->full = true;
		return;
	}
	memcpy(e->buf + e->len, s, n);
	e->len += n;
}

/* Append `,"key":` with the key escaped. Returns the length before, so a field
 * that does not fit whole can be rolled back. */
static size_t ev__key(struct ev *e, const char *key)
{
	size_t mark = e->len;
	char tmp[256];
	size_t n = ev_json_escape(tmp, sizeof(tmp), key, strlen(key));

	if (n == (size_t)-1)
		n = 0;
	ev__raw(e, ",\"", 2);
	ev__raw(e, tmp, n);
	ev__raw(e, "\":", 2);
	return mark;
}

static void ev__rollback(struct ev *e, size_t mark)
{
	if (e->full)
		e->len = mark;
}

void ev_begin(struct ev *e, enum ev_level level, const char *name)
{
	static const char *const levels[] = {"debug", "info", "warn", "error"};
	char ts[40];
	int n;

	clk_rfc3339(ts, sizeof(ts));
	e->len = 0;
	e->full = false;
	n = snprintf(e->buf, EV_LINE_MAX, "{\"ts\":\"%s\",\"level\":\"%s\",\"event\":\"", ts,
	             levels[level]);
	e->len = (size_t)n;
	ev_strn(e, NULL, name, strlen(name));
	e->buf[e->len++] = '"'; /* always: EV_LINE_MAX keeps 64 bytes spare */
	ev_str(e, "proc", ev__proc);
	ev_u64(e, "pid", (uint64_t)getpid());
}

void ev_strn(struct ev *e, const char *key, const char *val, size_t n)
{
	size_t mark = e->len;
	size_t room, w;

	if (key) {
		mark = ev__key(e, key);
		ev__raw(e, "\"", 1);
	}
	if (e->full)
		return ev__rollback(e, mark);
	room = EV_LINE_MAX - e->len;
	w = ev_json_escape(e->buf + e->len, room, val, n);
	if (w == (size_t)-1) {
		e->full = true;
		return ev__rollback(e, mark);
	}
	e->len += w;
	if (key)
		ev__raw(e, "\"", 1);
	ev__rollback(e, mark);
}

void ev_str(struct ev *e, const char *key, const char *val)
{
	ev_strn(e, key, val ? val : "", val ? strlen(val) : 0);
}

void ev_u64(struct ev *e, const char *key, uint64_t val)
{
	char tmp[32];
	size_t mark = ev__key(e, key);
	int n = snprintf(tmp, sizeof(tmp), "%llu", (unsigned long long)val);

	ev__raw(e, tmp, (size_t)n);
	ev__rollback(e, mark);
}

void ev_i64(struct ev *e, const char *key, int64_t val)
{
	char tmp[32];
	size_t mark = ev__key(e, key);
	int n = snprintf(tmp, sizeof(tmp), "%lld", (long long)val);

	ev__raw(e, tmp, (size_t)n);
	ev__rollback(e, mark);
}

void ev_bool(struct ev *e, const char *key, bool val)
{
	size_t mark = ev__key(e, key);

	ev__raw(e, val ? "true" : "false", val ? 4 : 5);
	ev__rollback(e, mark);
}

void ev_end(struct ev *e)
{
	const char *p;
	size_t left;

	if (e->full) {
		/* Room for this was kept: EV_LINE_MAX leaves 64 bytes spare. */
		memcpy(e->buf + e->len, ",\"truncated\":true", 17);
		e->len += 17;
	}
	e->buf[e->len++] = '}';
	e->buf[e->len++] = '\n';
	p = e->buf;
	left = e->len;
	while (left > 0) {
		ssize_t w = write(ev__fd, p, left);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return; /* stdout gone: events are best effort */
		}
		p += w;
		left -= (size_t)w;
	}
}

void ev_msg(enum ev_level level, const char *name, const char *fmt, ...)
{
	struct ev e;
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	ev_begin(&e, level, name);
	ev_str(&e, "message", msg);
	ev_end(&e);
}

bool ev_limit_take(struct ev_limit *l, uint64_t now_ms)
{
	l->total++;
	if (l->held) {
		l->held++; /* a summary is due: count until it is written */
		return false;
	}
	if (!l->since_ms || now_ms - l->since_ms >= EV_LIMIT_PERIOD_MS) {
		l->since_ms = now_ms ? now_ms : 1;
		l->passed = 0;
	}
	if (l->passed < EV_LIMIT_BURST) {
		l->passed++;
		return true;
	}
	l->held++;
	return false;
}

uint64_t ev_limit_due(struct ev_limit *l, uint64_t now_ms)
{
	uint64_t held = l->held;

	if (!held || now_ms - l->since_ms < EV_LIMIT_PERIOD_MS)
		return 0;
	l->held = 0;
	l->since_ms = 0;
	l->passed = 0;
	return held;
}
