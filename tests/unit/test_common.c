/*
 * test_common.c - the small shared library in common/: sizes, the error table,
 * JSON-lines events, the runtime directory and the clock helpers.
 *
 * Every check is a row of a table with its name, inputs and exact expected
 * outputs (error codes and the words the message must carry); a failing row
 * prints its name. The event lines are read back through a pipe and, when jq
 * is on the PATH, proved valid JSON by it as well as by a small checker here.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/bytesize.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/event.h"
#include "common/rtdir.h"

/* ---- helpers: each names the row that failed ------------------------------- */

static void check_int(const char *row, const char *what, long long got, long long want)
{
	if (got != want)
		fail_msg("%s: %s is %lld, want %lld", row, what, got, want);
}

static void check_u64(const char *row, const char *what, uint64_t got, uint64_t want)
{
	if (got != want)
		fail_msg("%s: %s is %llu, want %llu", row, what, (unsigned long long)got,
		         (unsigned long long)want);
}

static void check_str(const char *row, const char *what, const char *got, const char *want)
{
	if (strcmp(got, want) != 0)
		fail_msg("%s: %s is \"%s\", want \"%s\"", row, what, got, want);
}

static void check_has(const char *row, const char *what, const char *hay, const char *needle)
{
	if (!strstr(hay, needle))
		fail_msg("%s: %s \"%s\" lacks \"%s\"", row, what, hay, needle);
}

static void check_lacks(const char *row, const char *what, const char *hay, const char *needle)
{
	if (strstr(hay, needle))
		fail_msg("%s: %s \"%s\" should not contain \"%s\"", row, what, hay, needle);
}

/* A string of `n` copies of `c` after `head`, in `out` (cap bytes). */
static void make_path(char *out, size_t cap, const char *head, size_t n, char c)
{
	size_t h = strlen(head);

	assert_true(h + n < cap);
	memcpy(out, head, h);
	memset(out + h, c, n);
	out[h + n] = '\0';
}

/* ---- bytesize ---------------------------------------------------------------- */

struct bsize_ok_row {
	const char *name;
	const char *in;
	bool allow_tokens;
	uint64_t n;
	bool tokens;
};

static const struct bsize_ok_row bsize_ok_rows[] = {
    {"zero", "0", false, 0, false},
    {"one byte", "1", false, 1, false},
    {"1536M", "1536M", false, 1610612736ull, false},
    {"1K", "1K", false, 1024, false},
    {"lower-case k", "1k", false, 1024, false},
    {"2KiB", "2KiB", false, 2048, false},
    {"lower-case kib", "2kib", false, 2048, false},
    {"1G", "1G", false, 1073741824ull, false},
    {"1T", "1T", false, 1099511627776ull, false},
    {"512Ktok", "512Ktok", true, 524288, true},
    {"1Mtok", "1Mtok", true, 1048576, true},
    {"KiB then tok", "1KiBtok", true, 1024, true},
    {"bytes with tokens allowed", "1G", true, 1073741824ull, false},
    {"2^64 - 1", "18446744073709551615", false, UINT64_MAX, false},
    {"largest T", "16777215T", false, 18446742974197923840ull, false},
    {"T then tok", "1Ttok", true, 1099511627776ull, true},
    /* A bare count: the 't' of "tok" is not the T suffix. Last, so that while
     * it fails the rows above still run. */
    {"bare tok", "7tok", true, 7, true},
    {"bare TOK", "512TOK", true, 512, true},
};

static void test_bsize_parse_ok(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(bsize_ok_rows) / sizeof(bsize_ok_rows[0]); i++) {
		const struct bsize_ok_row *r = &bsize_ok_rows[i];
		struct bsize out = {.n = 12345, .tokens = !r->tokens};
		struct ig_errbuf eb = {0};
		int rc = bsize_parse(r->in, r->allow_tokens, &out, &eb);

		if (rc != IG_E_OK)
			fail_msg("%s: bsize_parse(\"%s\") = %s (%s)", r->name, r->in,
			         ig_err_name(rc), eb.msg);
		check_u64(r->name, "n", out.n, r->n);
		check_int(r->name, "tokens", out.tokens, r->tokens);
	}
}

/* The accepted forms as each message must state them. */
#define BS_ACCEPTED "a whole number with an optional suffix K, M, G or T"
#define BS_TOKEN    "a token count with 'tok'"

struct bsize_bad_row {
	const char *name;
	const char *in;
	bool allow_tokens;
	const char *has[3]; /* words the message must carry (the input quoted, ...) */
	const char *lacks;  /* and one it must not, or NULL */
};

#define ACC "expected " BS_ACCEPTED

static const struct bsize_bad_row bsize_bad_rows[] = {
    {"empty", "", false, {"empty size", ACC, NULL}, BS_TOKEN},
    {"empty, tokens", "", true, {"empty size", BS_TOKEN, NULL}, NULL},
    {"sign", "-1", false, {"'-1' is not a size", ACC, NULL}, NULL},
    {"fraction", "1.5G", false, {"'1.5G'", "unknown suffix '.5G'", ACC}, NULL},
    {"unknown suffix", "12X", false, {"'12X'", "unknown suffix 'X'", ACC}, NULL},
    {"decimal KB", "1KB", false, {"'1KB'", "unknown suffix 'B'", ACC}, NULL},
    {"leading space", " 1G", false, {"' 1G' is not a size", ACC, NULL}, NULL},
    {"trailing space", "1G ", false, {"'1G '", "unknown suffix ' '", ACC}, NULL},
    {"inner space", "1 G", false, {"'1 G'", "unknown suffix ' G'", ACC}, NULL},
    /* Overflow names the limit rather than the syntax: the syntax was fine. */
    {"T overflow", "16777216T", false, {"'16777216T'", "too large", "2^64 - 1"}, NULL},
    {"digit overflow", "18446744073709551616", false, {"too large", "2^64 - 1", NULL}, NULL},
    {"tok not allowed", "512Ktok", false, {"'512Ktok'", "unknown suffix 'tok'", ACC}, BS_TOKEN},
    {"tok alone", "tok", true, {"'tok' is not a size", BS_TOKEN, NULL}, NULL},
    {"suffix alone", "G", false, {"'G' is not a size", ACC, NULL}, NULL},
    {"tok then junk", "1Ktokx", true, {"'1Ktokx'", "unknown suffix 'tokx'", BS_TOKEN}, NULL},
    /* Last, as in bsize_ok_rows: the 't' of a bare "tok" is not the T suffix. */
    {"bare tok not allowed", "7tok", false, {"unknown suffix 'tok'", ACC, NULL}, BS_TOKEN},
};

static void test_bsize_parse_bad(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(bsize_bad_rows) / sizeof(bsize_bad_rows[0]); i++) {
		const struct bsize_bad_row *r = &bsize_bad_rows[i];
		struct bsize out = {.n = 12345, .tokens = false};
		struct ig_errbuf eb = {0};
		int rc = bsize_parse(r->in, r->allow_tokens, &out, &eb);

		check_str(r->name, "code", ig_err_name(rc), "IG_E_INVAL");
		check_int(r->name, "eb.code", eb.code, IG_E_INVAL);
		for (size_t k = 0; k < 3 && r->has[k]; k++)
			check_has(r->name, "message", eb.msg, r->has[k]);
		/* The input is quoted in every message but the empty one's. */
		if (r->in[0]) {
			char quoted[64];

			snprintf(quoted, sizeof(quoted), "'%s'", r->in);
			check_has(r->name, "message", eb.msg, quoted);
		}
		if (r->lacks)
			check_lacks(r->name, "message", eb.msg, r->lacks);
		/* A refused size leaves the output alone. */
		check_u64(r->name, "untouched n", out.n, 12345);
		/* And a NULL errbuf gives the same code. */
		check_int(r->name, "code without errbuf",
		          bsize_parse(r->in, r->allow_tokens, &out, NULL), IG_E_INVAL);
	}
}

struct bsize_fmt_row {
	const char *name;
	uint64_t in;
	const char *want;
};

static const struct bsize_fmt_row bsize_fmt_rows[] = {
    {"zero", 0, "0 B"},
    {"below 1K", 1023, "1023 B"},
    {"1K", 1024, "1.00 KiB"},
    {"1.5K", 1536, "1.50 KiB"},
    {"1M", 1048576, "1.00 MiB"},
    {"1.5G", 1610612736ull, "1.50 GiB"},
    {"1T", 1099511627776ull, "1.00 TiB"},
    {"1P", 1125899906842624ull, "1.00 PiB"},
    {"2^64 - 1", UINT64_MAX, "16.00 EiB"},
};

static void test_bsize_format(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(bsize_fmt_rows) / sizeof(bsize_fmt_rows[0]); i++) {
		const struct bsize_fmt_row *r = &bsize_fmt_rows[i];
		char out[32];

		memset(out, 'x', sizeof(out));
		bsize_format(out, sizeof(out), r->in);
		check_str(r->name, "bsize_format", out, r->want);
	}
}

/* ---- err ------------------------------------------------------------------- */

struct err_row {
	int code;
	const char *name;
	const char *desc;
};

static const struct err_row err_rows[] = {
#define ROW(name, val, desc) {val, "IG_E_" #name, desc},
    IG_ERRORS(ROW)
#undef ROW
};

#define N_ERR (sizeof(err_rows) / sizeof(err_rows[0]))

/* Codes cross process boundaries: pinned here so a renumbering fails. A new
 * code in the table must be added here too. */
static const struct err_row err_pinned[] = {
    {0, "IG_E_OK", NULL},
    {1, "IG_E_NOMEM", NULL},
    {2, "IG_E_INVAL", NULL},
    {3, "IG_E_IO", NULL},
    {4, "IG_E_TIMEOUT", NULL},
    {5, "IG_E_CLOSED", NULL},
    {6, "IG_E_BUSY", NULL},
    {7, "IG_E_NOTFOUND", NULL},
    {8, "IG_E_CONFIG", NULL},
    {9, "IG_E_PERM", NULL},
    {10, "IG_E_TRANSPORT", NULL},
    {11, "IG_E_NOSPACE", NULL},
    {12, "IG_E_NOT_READY", NULL},
    {20, "IG_E_PROTO_TRUNCATED", NULL},
    {21, "IG_E_PROTO_OVERSIZE", NULL},
    {22, "IG_E_PROTO_MALFORMED", NULL},
    {23, "IG_E_PROTO_UNKNOWN_TYPE", NULL},
    {24, "IG_E_PROTO_VERSION", NULL},
    {25, "IG_E_PROTO_MISSING_FIELD", NULL},
    {26, "IG_E_PROTO_FIELD_TYPE", NULL},
    {27, "IG_E_PROTO_FIELD_RANGE", NULL},
    {28, "IG_E_PROTO_UNKNOWN_FIELD", NULL},
    {29, "IG_E_PROTO_UNEXPECTED", NULL},
    {40, "IG_E_CHILD", NULL},
    {41, "IG_E_PLAN_REFUSED", NULL},
    {50, "IG_E_REQ_CONTEXT", NULL},
    {51, "IG_E_REQ_POOL", NULL},
    {52, "IG_E_KV_LOST", NULL},
};

static bool err_in_table(int code)
{
	for (size_t i = 0; i < N_ERR; i++)
		if (err_rows[i].code == code)
			return true;
	return false;
}

static void test_err_table(void **state)
{
	(void)state;
	assert_true(N_ERR > 0);
	for (size_t i = 0; i < N_ERR; i++) {
		const struct err_row *r = &err_rows[i];
		bool pinned = false;

		check_str(r->name, "ig_err_name", ig_err_name(r->code), r->name);
		check_str(r->name, "ig_err_str", ig_err_str(r->code), r->desc);
		if (strncmp(r->name, "IG_E_", 5) != 0 || r->name[5] == '\0')
			fail_msg("%s: name does not start with IG_E_", r->name);
		if (r->desc[0] == '\0')
			fail_msg("%s: empty description", r->name);
		if (!ig_err_known(r->code))
			fail_msg("%s: ig_err_known(%d) is false", r->name, r->code);
		for (size_t j = 0; j < i; j++) {
			if (err_rows[j].code == r->code)
				fail_msg("%s: value %d already used by %s", r->name, r->code,
				         err_rows[j].name);
			if (strcmp(err_rows[j].name, r->name) == 0)
				fail_msg("%s: name used twice", r->name);
			if (strcmp(err_rows[j].desc, r->desc) == 0)
				fail_msg("%s: description \"%s\" shared with %s", r->name, r->desc,
				         err_rows[j].name);
		}
		for (size_t j = 0; j < sizeof(err_pinned) / sizeof(err_pinned[0]); j++) {
			if (strcmp(err_pinned[j].name, r->name) == 0) {
				check_int(r->name, "wire value", r->code, err_pinned[j].code);
				pinned = true;
			}
		}
		if (!pinned)
			fail_msg("%s: not pinned in err_pinned[] (add it with its value)", r->name);
	}
	for (size_t j = 0; j < sizeof(err_pinned) / sizeof(err_pinned[0]); j++)
		if (!err_in_table(err_pinned[j].code))
			fail_msg("%s: pinned code %d left the table (codes are never reused)",
			         err_pinned[j].name, err_pinned[j].code);
}

static void test_err_unknown(void **state)
{
	static const int probes[] = {-1, 3, 11, 19, 30, 39, 41, 9999, INT_MIN, INT_MAX};

	(void)state;
	for (size_t i = 0; i < sizeof(probes) / sizeof(probes[0]); i++) {
		int c = probes[i];
		char row[32];

		snprintf(row, sizeof(row), "code %d", c);
		check_int(row, "ig_err_known", ig_err_known(c) != 0, err_in_table(c));
		if (!err_in_table(c)) {
			check_str(row, "ig_err_name", ig_err_name(c), "IG_E_UNKNOWN");
			check_str(row, "ig_err_str", ig_err_str(c), "unknown error");
		}
	}
}

static void test_err_format(void **state)
{
	struct ig_errbuf eb = {0};
	char big[700];
	int rc;

	(void)state;
	/* ig_errf records the code and the formatted message and returns the code. */
	rc = ig_errf(&eb, IG_E_NOTFOUND, "model '%s' not found (%d tries)", "llama", 3);
	check_int("ig_errf", "return", rc, IG_E_NOTFOUND);
	check_int("ig_errf", "eb.code", eb.code, IG_E_NOTFOUND);
	check_str("ig_errf", "eb.msg", eb.msg, "model 'llama' not found (3 tries)");

	/* A NULL errbuf is allowed and the code still comes back. */
	check_int("ig_errf NULL", "return", ig_errf(NULL, IG_E_BUSY, "x %d", 1), IG_E_BUSY);

	/* A message longer than the buffer is cut, NUL-terminated. */
	make_path(big, sizeof(big), "", 600, 'm');
	rc = ig_errf(&eb, IG_E_IO, "%s", big);
	check_int("ig_errf long", "return", rc, IG_E_IO);
	check_u64("ig_errf long", "strlen(msg)", strlen(eb.msg), sizeof(eb.msg) - 1);

	/* ig_errprefix puts "what: " before the message and keeps the code. */
	ig_errf(&eb, IG_E_PERM, "inner");
	rc = ig_errprefix(&eb, "outer %d", 7);
	check_int("ig_errprefix", "return", rc, IG_E_PERM);
	check_int("ig_errprefix", "eb.code", eb.code, IG_E_PERM);
	check_str("ig_errprefix", "eb.msg", eb.msg, "outer 7: inner");
	rc = ig_errprefix(&eb, "top");
	check_str("ig_errprefix twice", "eb.msg", eb.msg, "top: outer 7: inner");
	check_int("ig_errprefix NULL", "return", ig_errprefix(NULL, "x"), 0);

	/* Prefixing a full message cuts the tail, never overruns. */
	ig_errf(&eb, IG_E_IO, "%s", big);
	ig_errprefix(&eb, "ctx");
	check_u64("ig_errprefix long", "strlen(msg)", strlen(eb.msg), sizeof(eb.msg) - 1);
	if (strncmp(eb.msg, "ctx: mmm", 8) != 0)
		fail_msg("ig_errprefix long: msg starts \"%.16s\"", eb.msg);

	ig_errclear(&eb);
	check_int("ig_errclear", "eb.code", eb.code, 0);
	check_str("ig_errclear", "eb.msg", eb.msg, "");
	ig_errclear(NULL);
}

/* ---- event: escaping ------------------------------------------------------- */

struct esc_row {
	const char *name;
	const char *in;
	size_t n; /* bytes of `in` (they may hold a NUL) */
	size_t cap;
	const char *want; /* NULL: the cap is too small, (size_t)-1 */
};

#define S(lit) lit, sizeof(lit) - 1

static const struct esc_row esc_rows[] = {
    {"empty", S(""), 0, ""},
    {"plain", S("hello world"), 64, "hello world"},
    {"quote", S("a\"b"), 64, "a\\\"b"},
    {"backslash", S("a\\b"), 64, "a\\\\b"},
    {"newline", S("a\nb"), 64, "a\\nb"},
    {"tab", S("a\tb"), 64, "a\\tb"},
    {"carriage return", S("a\rb"), 64, "a\\u000db"},
    {"control 0x01", S("\x01"), 64, "\\u0001"},
    {"control 0x1f", S("\x1f"), 64, "\\u001f"},
    {"NUL inside", S("a\0b"), 64, "a\\u0000b"},
    {"DEL 0x7f", S("\x7f"), 64, "\\u007f"},
    {"space 0x20", S(" "), 64, " "},
    {"UTF-8 e acute and euro", S("\xc3\xa9\xe2\x82\xac"), 64, "\xc3\xa9\xe2\x82\xac"},
    {"exact cap", S("abc"), 3, "abc"},
    {"cap one short", S("abcd"), 3, NULL},
    {"escape exact cap", S("\""), 2, "\\\""},
    {"escape cut", S("\""), 1, NULL},
    {"unicode escape exact", S("\x02"), 6, "\\u0002"},
    {"unicode escape cut", S("\x02"), 5, NULL},
    {"zero cap", S("a"), 0, NULL},
};

static void test_ev_json_escape(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(esc_rows) / sizeof(esc_rows[0]); i++) {
		const struct esc_row *r = &esc_rows[i];
		/* Exactly `cap` bytes on the heap, so ASan sees a write past it. */
		char *out = malloc(r->cap ? r->cap : 1);
		char got[128];
		size_t n;

		assert_non_null(out);
		n = ev_json_escape(out, r->cap, r->in, r->n);
		if (!r->want) {
			if (n != (size_t)-1)
				fail_msg("%s: returned %zu, want (size_t)-1", r->name, n);
		} else {
			check_u64(r->name, "length", n, strlen(r->want));
			memcpy(got, out, n);
			got[n] = '\0';
			check_str(r->name, "escaped", got, r->want);
		}
		free(out);
	}
}

/* ---- event: lines through a pipe ------------------------------------------- */

/* Structural JSON check of one object line: strings closed, no raw control
 * bytes in them, escapes legal, braces balanced, nothing after the final '}'
 * but the newline. Not a parser: jq (below) is the real judge. */
static bool json_line_ok(const char *s, size_t n)
{
	int depth = 0;
	bool in_str = false;

	if (n < 3 || s[0] != '{' || s[n - 1] != '\n' || s[n - 2] != '}')
		return false;
	for (size_t i = 0; i < n - 1; i++) {
		unsigned char c = (unsigned char)s[i];

		if (in_str) {
			if (c < 0x20)
				return false;
			if (c == '\\') {
				char e = s[++i];

				if (e == 'u') {
					for (int k = 1; k <= 4; k++)
						if (!strchr("0123456789abcdefABCDEF", s[i + k]) ||
						    s[i + k] == '\0')
							return false;
					i += 4;
				} else if (!strchr("\"\\/bfnrt", e) || e == '\0') {
					return false;
				}
			} else if (c == '"') {
				in_str = false;
			}
			continue;
		}
		if (c == '"')
			in_str = true;
		else if (c == '{' || c == '[')
			depth++;
		else if (c == '}' || c == ']')
			depth--;
		else if (c < 0x20)
			return false;
		if (depth == 0 && i != n - 2)
			return false;
	}
	return !in_str && depth == 0;
}

static bool have_jq(void)
{
	return system("command -v jq >/dev/null 2>&1") == 0;
}

/* Feed `line` to `jq -e '<filter>'`; true when jq exits 0. */
static bool jq_accepts(const char *line, size_t n, const char *filter)
{
	char cmd[512];
	FILE *p;
	int st;

	snprintf(cmd, sizeof(cmd), "jq -e '%s' >/dev/null 2>&1", filter);
	p = popen(cmd, "w");
	assert_non_null(p);
	fwrite(line, 1, n, p);
	st = pclose(p);
	return st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

struct pipe_fixture {
	int fd[2];
};

static int pipe_setup(void **state)
{
	struct pipe_fixture *f = calloc(1, sizeof(*f));

	if (!f || pipe(f->fd) != 0)
		return -1;
	/* Non-blocking read end: "nothing more" reads as EAGAIN, not a hang. */
	fcntl(f->fd[0], F_SETFL, fcntl(f->fd[0], F_GETFL) | O_NONBLOCK);
	ev_setup("test", f->fd[1]);
	*state = f;
	return 0;
}

static int pipe_teardown(void **state)
{
	struct pipe_fixture *f = *state;

	ev_setup("ignis", STDOUT_FILENO);
	close(f->fd[0]);
	close(f->fd[1]);
	free(f);
	return 0;
}

/* Read exactly one line (all that is in the pipe) into `buf`; returns its length. */
static size_t read_one_line(int fd, char *buf, size_t cap)
{
	ssize_t n = read(fd, buf, cap - 1);
	char extra;

	if (n <= 0)
		fail_msg("no event line in the pipe (read: %zd, errno %d)", n, errno);
	buf[n] = '\0';
	/* ev_end is one write(2) below PIPE_BUF: the whole line came in one read. */
	if (read(fd, &extra, 1) != -1 || errno != EAGAIN)
		fail_msg("more than one write for one event line");
	if (memchr(buf, '\n', (size_t)n) != buf + n - 1)
		fail_msg("event is not exactly one line ending in \\n: \"%s\"", buf);
	return (size_t)n;
}

/* Check the fixed head of a line and return the rest after the pid. */
static const char *check_head(const char *row, const char *line, const char *level,
                              const char *name)
{
	char want[256];
	const char *ts = line + 7;
	int n;

	if (strncmp(line, "{\"ts\":\"", 7) != 0)
		fail_msg("%s: line does not start with {\"ts\":\": \"%.40s\"", row, line);
	/* 2026-11-29T11:13:25.123Z */
	for (int i = 0; i < 24; i++) {
		bool ok;

		switch (i) {
		case 4:
		case 7:
			ok = ts[i] == '-';
			break;
		case 10:
			ok = ts[i] == 'T';
			break;
		case 13:
		case 16:
			ok = ts[i] == ':';
			break;
		case 19:
			ok = ts[i] == '.';
			break;
		case 23:
			ok = ts[i] == 'Z';
			break;
		default:
			ok = ts[i] >= '0' && ts[i] <= '9';
		}
		if (!ok)
			fail_msg("%s: bad ts at %d: \"%.24s\"", row, i, ts);
	}
	n = snprintf(want, sizeof(want),
	             "\",\"level\":\"%s\",\"event\":\"%s\",\"proc\":\"test\",\"pid\":%d", level,
	             name, (int)getpid());
	if (strncmp(ts + 24, want, (size_t)n) != 0)
		fail_msg("%s: head after ts is \"%.*s\", want \"%s\"", row, n, ts + 24, want);
	return ts + 24 + n;
}

static void test_ev_line(void **state)
{
	struct pipe_fixture *f = *state;
	struct ev e;
	char buf[2 * EV_LINE_MAX];
	size_t n;
	const char *rest;

	ev_begin(&e, EV_INFO, "ignis.test.x");
	ev_str(&e, "s", "a\"b\\c\nd");
	ev_strn(&e, "sn", "xyz-not-this", 3);
	ev_str(&e, "null", NULL);
	ev_u64(&e, "u", UINT64_MAX);
	ev_i64(&e, "i", INT64_MIN);
	ev_i64(&e, "neg", -42);
	ev_bool(&e, "t", true);
	ev_bool(&e, "f", false);
	ev_end(&e);

	n = read_one_line(f->fd[0], buf, sizeof(buf));
	rest = check_head("normal line", buf, "info", "ignis.test.x");
	check_str("normal line", "fields", rest,
	          ",\"s\":\"a\\\"b\\\\c\\nd\",\"sn\":\"xyz\",\"null\":\"\","
	          "\"u\":18446744073709551615,\"i\":-9223372036854775808,\"neg\":-42,"
	          "\"t\":true,\"f\":false}\n");
	if (!json_line_ok(buf, n))
		fail_msg("normal line: not well-formed JSON: %s", buf);
	if (have_jq()) {
		if (!jq_accepts(buf, n,
		                ".event == \"ignis.test.x\" and .proc == \"test\" and .level == "
		                "\"info\" and .s == \"a\\\"b\\\\c\\nd\" and .sn == \"xyz\" and .t "
		                "== true and .f == false and .neg == -42"))
			fail_msg("normal line: jq refuses it or a field differs: %s", buf);
	} else {
		print_message("jq not found: skipping the jq checks\n");
	}

	/* Levels by name. */
	ev_begin(&e, EV_ERROR, "ignis.test.y");
	ev_end(&e);
	read_one_line(f->fd[0], buf, sizeof(buf));
	check_str("error level", "rest", check_head("error level", buf, "error", "ignis.test.y"),
	          "}\n");

	/* ev_msg is one call with a "message" field. */
	ev_msg(EV_WARN, "ignis.test.msg", "disk %s at %d%%", "sda", 91);
	read_one_line(f->fd[0], buf, sizeof(buf));
	check_str("ev_msg", "rest", check_head("ev_msg", buf, "warn", "ignis.test.msg"),
	          ",\"message\":\"disk sda at 91%\"}\n");
}

static void test_ev_truncated(void **state)
{
	struct pipe_fixture *f = *state;
	static char huge[10001];
	struct ev e;
	char buf[2 * EV_LINE_MAX];
	size_t n, head;
	const char *rest;

	memset(huge, 'h', sizeof(huge) - 1);
	huge[sizeof(huge) - 1] = '\0';

	/* A 10000-char field does not fit: it and every later field are dropped
	 * whole (cut at a field boundary) and the line says so. */
	ev_begin(&e, EV_INFO, "ignis.test.x");
	ev_str(&e, "a", "before");
	ev_str(&e, "big", huge);
	ev_u64(&e, "after", 7);
	ev_bool(&e, "after2", true);
	ev_end(&e);
	n = read_one_line(f->fd[0], buf, sizeof(buf));
	if (n > EV_LINE_MAX + 64)
		fail_msg("truncated line: %zu bytes > EV_LINE_MAX + 64", n);
	rest = check_head("truncated line", buf, "info", "ignis.test.x");
	check_str("truncated line", "fields", rest, ",\"a\":\"before\",\"truncated\":true}\n");
	if (!json_line_ok(buf, n))
		fail_msg("truncated line: not well-formed JSON: %s", buf);
	if (have_jq() && !jq_accepts(buf, n, ".truncated == true and .a == \"before\""))
		fail_msg("truncated line: jq refuses it: %s", buf);

	/* The boundary: measure the bare line, then a field that fills the buffer to
	 * exactly EV_LINE_MAX fits; one byte more is dropped. */
	ev_begin(&e, EV_INFO, "ignis.test.x");
	ev_end(&e);
	head = read_one_line(f->fd[0], buf, sizeof(buf)) - 2; /* less "}\n" */
	for (int extra = 0; extra <= 1; extra++) {
		const char *row = extra ? "one byte over" : "exact fit";
		size_t vlen = EV_LINE_MAX - head - strlen(",\"k\":\"\"") + (size_t)extra;

		huge[vlen] = '\0';
		ev_begin(&e, EV_INFO, "ignis.test.x");
		ev_str(&e, "k", huge);
		ev_end(&e);
		huge[vlen] = 'h';
		n = read_one_line(f->fd[0], buf, sizeof(buf));
		check_u64(row, "line length", n,
		          extra ? head + strlen(",\"truncated\":true}\n") : EV_LINE_MAX + 2);
		check_int(row, "well-formed", json_line_ok(buf, n), 1);
		if (have_jq() && !jq_accepts(buf, n, "."))
			fail_msg("%s: jq refuses it", row);
	}

	/* An escaped string whose escapes push it past the end is dropped too. */
	memset(huge, '"', 3000);
	huge[3000] = '\0';
	ev_begin(&e, EV_INFO, "ignis.test.x");
	ev_str(&e, "q", huge);
	ev_end(&e);
	n = read_one_line(f->fd[0], buf, sizeof(buf));
	check_str("escapes overflow", "fields",
	          check_head("escapes overflow", buf, "info", "ignis.test.x"),
	          ",\"truncated\":true}\n");
	check_int("escapes overflow", "well-formed", json_line_ok(buf, n), 1);
}

/* An event name too long for the line: the contract still holds (cut, marked,
 * valid JSON), whatever is kept of the name. */
static void test_ev_long_name(void **state)
{
	struct pipe_fixture *f = *state;
	static char name[EV_LINE_MAX + 100];
	static const char tail[] = ",\"truncated\":true}\n";
	struct ev e;
	char buf[2 * EV_LINE_MAX];
	size_t n;

	memset(name, 'n', sizeof(name) - 1);
	ev_begin(&e, EV_INFO, name);
	ev_str(&e, "k", "v");
	ev_end(&e);
	n = read_one_line(f->fd[0], buf, sizeof(buf));
	if (n > EV_LINE_MAX + 64)
		fail_msg("long name: %zu bytes > EV_LINE_MAX + 64", n);
	if (n < sizeof(tail) - 1 || strcmp(buf + n - (sizeof(tail) - 1), tail) != 0)
		fail_msg("long name: line does not end in %s: %.80s", tail, buf);
	if (!json_line_ok(buf, n))
		fail_msg("long name: not well-formed JSON: %.120s", buf);
	if (have_jq() && !jq_accepts(buf, n, ".truncated == true"))
		fail_msg("long name: jq refuses it: %.120s", buf);
}

/* The checkers above must be able to say no. */
struct json_bad_row {
	const char *name;
	const char *line;
};

static const struct json_bad_row json_bad_rows[] = {
    {"no newline", "{\"a\":1}"},
    {"unclosed string", "{\"a\":\"x}\n"},
    {"raw newline in string", "{\"a\":\"x\ny\"}\n"},
    {"bad escape", "{\"a\":\"\\q\"}\n"},
    {"short unicode escape", "{\"a\":\"\\u01\"}\n"},
    {"unbalanced", "{\"a\":{\"b\":1}\n"},
    {"junk after", "{\"a\":1}x}\n"},
    {"cut at the quote", "{\"a\":\",\"truncated\":true}\n"},
};

static void test_json_checkers(void **state)
{
	static const char good[] = "{\"a\":\"\\u00e9\\n\",\"b\":[1,{}]}\n";
	bool jq = have_jq();

	(void)state;
	for (size_t i = 0; i < sizeof(json_bad_rows) / sizeof(json_bad_rows[0]); i++) {
		const struct json_bad_row *r = &json_bad_rows[i];
		size_t n = strlen(r->line);

		if (json_line_ok(r->line, n))
			fail_msg("%s: json_line_ok accepts \"%s\"", r->name, r->line);
		if (jq && r->line[n - 1] == '\n' && jq_accepts(r->line, n, "."))
			fail_msg("%s: jq accepts \"%s\"", r->name, r->line);
	}
	if (!json_line_ok(good, sizeof(good) - 1))
		fail_msg("json_line_ok refuses a good line");
	if (jq && jq_accepts("{\"a\":1}\n", 8, ".a == 2"))
		fail_msg("jq -e does not report a false filter");
}

/* ---- rtdir ----------------------------------------------------------------- */

struct env_fixture {
	char *ignis; /* saved values, NULL when unset */
	char *xdg;
};

static char *dup_env(const char *k)
{
	const char *v = getenv(k);

	return v ? strdup(v) : NULL;
}

static void put_env(const char *k, const char *v)
{
	if (v)
		setenv(k, v, 1);
	else
		unsetenv(k);
}

static int env_setup(void **state)
{
	struct env_fixture *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	f->ignis = dup_env("IGNIS_RUNTIME_DIR");
	f->xdg = dup_env("XDG_RUNTIME_DIR");
	*state = f;
	return 0;
}

static int env_teardown(void **state)
{
	struct env_fixture *f = *state;

	put_env("IGNIS_RUNTIME_DIR", f->ignis);
	put_env("XDG_RUNTIME_DIR", f->xdg);
	free(f->ignis);
	free(f->xdg);
	free(f);
	return 0;
}

/* Paths of exact lengths, filled in before the rows are read. */
static char path90[RTDIR_PATH_MAX + 1];      /* "/" + 89: the longest accepted */
static char path91[RTDIR_PATH_MAX + 2];      /* one over */
static char xdg84[RTDIR_PATH_MAX];           /* + "/ignis" = 90 */
static char xdg85[RTDIR_PATH_MAX];           /* + "/ignis" = 91 */
static char path90slash[RTDIR_PATH_MAX + 8]; /* 88 + "//" = 90, trims to 88 */

#define DEFAULT_DIR "@default" /* stands for /tmp/ignis-$UID */

struct resolve_row {
	const char *name;
	const char *flag, *ignis, *xdg; /* NULL: no flag / variable unset */
	size_t cap;                     /* 0: RTDIR_PATH_MAX + 1 */
	int rc;
	const char *want; /* the path on success (NULL: computed), else words of the message */
	const char *also; /* more words of the message, or NULL */
	const char *file; /* the configuration file's runtime_dir, or NULL */
};

#define ABS  "is not an absolute path"
#define LONG "is too long (91 bytes)"

static const struct resolve_row resolve_rows[] = {
    {"flag beats all", "/f", "/e", "/x", 0, IG_E_OK, "/f", NULL, NULL},
    {"env beats XDG", NULL, "/e", "/x", 0, IG_E_OK, "/e", NULL, NULL},
    {"empty flag falls through", "", "/e", "/x", 0, IG_E_OK, "/e", NULL, NULL},
    {"XDG gets /ignis", NULL, NULL, "/run/user/7", 0, IG_E_OK, "/run/user/7/ignis", NULL, NULL},
    {"empty env falls through", NULL, "", "/x", 0, IG_E_OK, "/x/ignis", NULL, NULL},
    {"default", NULL, NULL, NULL, 0, IG_E_OK, DEFAULT_DIR, NULL, NULL},
    {"empty XDG falls through", NULL, NULL, "", 0, IG_E_OK, DEFAULT_DIR, NULL, NULL},
    {"flag trailing slashes", "/a/b///", NULL, NULL, 0, IG_E_OK, "/a/b", NULL, NULL},
    {"env trailing slash", NULL, "/e/", NULL, 0, IG_E_OK, "/e", NULL, NULL},
    {"root stays", "/", NULL, NULL, 0, IG_E_OK, "/", NULL, NULL},
    {"slashes only", "///", NULL, NULL, 0, IG_E_OK, "/", NULL, NULL},
    {"relative flag", "run/ig", "/e", NULL, 0, IG_E_CONFIG, "'run/ig' from --runtime-dir", ABS,
     NULL},
    {"relative env", NULL, "rel", "/x", 0, IG_E_CONFIG, "'rel' from IGNIS_RUNTIME_DIR", ABS, NULL},
    {"relative XDG", NULL, NULL, "run", 0, IG_E_CONFIG, "'run/ignis' from XDG_RUNTIME_DIR", ABS,
     NULL},
    {"flag of 90 fits", path90, NULL, NULL, 0, IG_E_OK, path90, NULL, NULL},
    {"flag of 91", path91, NULL, NULL, 0, IG_E_CONFIG, "from --runtime-dir " LONG, "in 90 bytes",
     NULL},
    /* The limit is RTDIR_PATH_MAX, not the caller's buffer. */
    {"91 in a big buffer", path91, NULL, NULL, 128, IG_E_CONFIG, "(91 bytes)", NULL, NULL},
    {"env of 91", NULL, path91, NULL, 0, IG_E_CONFIG, "from IGNIS_RUNTIME_DIR " LONG, NULL, NULL},
    {"XDG to 90 fits", NULL, NULL, xdg84, 0, IG_E_OK, NULL, NULL, NULL},
    {"XDG to 91", NULL, NULL, xdg85, 0, IG_E_CONFIG, "from XDG_RUNTIME_DIR " LONG, NULL, NULL},
    {"90 with slashes trims", path90slash, NULL, NULL, 0, IG_E_OK, NULL, NULL, NULL},
    {"small cap", "/abcdefghij", NULL, NULL, 8, IG_E_CONFIG, "too long (11 bytes)", NULL, NULL},
    {"cap exact", "/abcdefg", NULL, NULL, 9, IG_E_OK, "/abcdefg", NULL, NULL},
    {"flag beats file", "/f", NULL, "/x", 0, IG_E_OK, "/f", NULL, "/c"},
    {"env beats file", NULL, "/e", "/x", 0, IG_E_OK, "/e", NULL, "/c"},
    {"file beats XDG", NULL, NULL, "/x", 0, IG_E_OK, "/c", NULL, "/c"},
    {"relative file", NULL, NULL, NULL, 0, IG_E_CONFIG, "'c' from config file 't.yaml'", ABS, "c"},
};

static void test_rtdir_resolve(void **state)
{
	char dflt[64];

	(void)state;
	make_path(path90, sizeof(path90), "/", 89, 'p');
	make_path(path91, sizeof(path91), "/", 90, 'p');
	make_path(xdg84, sizeof(xdg84), "/", 83, 'x');
	make_path(xdg85, sizeof(xdg85), "/", 84, 'x');
	make_path(path90slash, sizeof(path90slash), "/", 87, 's');
	strcat(path90slash, "//");
	snprintf(dflt, sizeof(dflt), "/tmp/ignis-%u", (unsigned)getuid());

	for (size_t i = 0; i < sizeof(resolve_rows) / sizeof(resolve_rows[0]); i++) {
		const struct resolve_row *r = &resolve_rows[i];
		size_t cap = r->cap ? r->cap : RTDIR_PATH_MAX + 1;
		char *out = malloc(cap); /* exactly cap: ASan sees an overrun */
		struct ig_errbuf eb = {0};
		char want[RTDIR_PATH_MAX + 8];
		int rc;

		assert_non_null(out);
		put_env("IGNIS_RUNTIME_DIR", r->ignis);
		put_env("XDG_RUNTIME_DIR", r->xdg);
		rc = rtdir_resolve(r->flag, r->file, "config file 't.yaml'", out, cap, &eb);
		if (rc != r->rc)
			fail_msg("%s: rtdir_resolve = %s (%s), want %s", r->name, ig_err_name(rc),
			         eb.msg, ig_err_name(r->rc));
		if (rc == IG_E_OK) {
			if (r->want)
				snprintf(want, sizeof(want), "%s",
				         strcmp(r->want, DEFAULT_DIR) == 0 ? dflt : r->want);
			else if (r->xdg == xdg84)
				snprintf(want, sizeof(want), "%s/ignis", xdg84);
			else
				snprintf(want, sizeof(want), "%.88s", path90slash);
			check_str(r->name, "dir", out, want);
		} else {
			check_int(r->name, "eb.code", eb.code, r->rc);
			check_has(r->name, "message", eb.msg, r->want);
			if (r->also)
				check_has(r->name, "message", eb.msg, r->also);
		}
		free(out);
	}
}

struct tmp_fixture {
	char base[64];
};

/* Every name the prepare rows create under the temporary base. */
static const char *const tmp_names[] = {
    "rt",     "wide",       "group",   "file",      "link",   "dangling",
    "other",  "open/rt",    "open",    "sticky/rt", "sticky", "gwrite/rt",
    "gwrite", "foreign/rt", "foreign", "sub/in/rt", "sub/in", "sub"};

static int tmp_setup(void **state)
{
	struct tmp_fixture *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	snprintf(f->base, sizeof(f->base), "/tmp/ignis-test-common-XXXXXX");
	if (!mkdtemp(f->base))
		return -1;
	umask(022);
	*state = f;
	return 0;
}

static int tmp_teardown(void **state)
{
	struct tmp_fixture *f = *state;
	char p[128];

	for (size_t i = 0; i < sizeof(tmp_names) / sizeof(tmp_names[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", f->base, tmp_names[i]);
		if (unlink(p) != 0)
			rmdir(p);
	}
	if (rmdir(f->base) != 0)
		fprintf(stderr, "could not remove %s: %s\n", f->base, strerror(errno));
	free(f);
	return 0;
}

enum prep_setup {
	PREP_NONE,
	PREP_DIR_0755,
	PREP_DIR_0710,
	PREP_FILE,
	PREP_LINK_RT,
	PREP_LINK_DANGLING,
	PREP_CHOWN,
	PREP_PARENT_0777,      /* the parent: writable by all, not sticky */
	PREP_PARENT_1777,      /* the parent: writable by all, sticky (as /tmp) */
	PREP_PARENT_0775,      /* the parent: writable by its group */
	PREP_PARENT_CHOWN,     /* the parent: another user's, mode 0755 */
	PREP_GRANDPARENT_0777, /* sub/in/rt: sub writable by all */
};

struct prepare_row {
	const char *name;
	const char *sub; /* under the temporary base */
	enum prep_setup setup;
	int rc;
	const char *has[2];
};

/* In order: later rows see what earlier ones made. */
static const struct prepare_row prepare_rows[] = {
    {"creates a missing dir", "rt", PREP_NONE, IG_E_OK, {NULL, NULL}},
    {"accepts it again", "rt", PREP_NONE, IG_E_OK, {NULL, NULL}},
    {"refuses 0755", "wide", PREP_DIR_0755, IG_E_PERM, {"has mode 755", "it must be 0700"}},
    {"refuses 0710", "group", PREP_DIR_0710, IG_E_PERM, {"has mode 710", "0700"}},
    {"refuses a regular file", "file", PREP_FILE, IG_E_PERM, {"is not a directory", NULL}},
    {"refuses a symlink to a good dir",
     "link",
     PREP_LINK_RT,
     IG_E_PERM,
     {"is a symbolic link (to 'rt')", "accepted: a directory itself"}},
    {"refuses a dangling symlink",
     "dangling",
     PREP_LINK_DANGLING,
     IG_E_PERM,
     {"is a symbolic link (to 'nowhere')", "not a link"}},
    {"refuses a parent others can write",
     "open/rt",
     PREP_PARENT_0777,
     IG_E_PERM,
     {"open' (mode 777) can be written by others", "sticky"}},
    {"accepts a sticky parent, as /tmp", "sticky/rt", PREP_PARENT_1777, IG_E_OK, {NULL, NULL}},
    {"refuses a parent its group can write",
     "gwrite/rt",
     PREP_PARENT_0775,
     IG_E_PERM,
     {"gwrite' (mode 775) can be written by others", NULL}},
    {"refuses a grandparent others can write",
     "sub/in/rt",
     PREP_GRANDPARENT_0777,
     IG_E_PERM,
     {"sub' (mode 777) can be written by others", NULL}},
    {"refuses a parent of another user",
     "foreign/rt",
     PREP_PARENT_CHOWN,
     IG_E_PERM,
     {"foreign' belongs to uid 1", "neither root nor"}},
    {"missing parent", "no/such/rt", PREP_NONE, IG_E_IO, {"cannot create runtime directory", NULL}},
    {"refuses another owner", "other", PREP_CHOWN, IG_E_PERM, {"belongs to uid 1", "not to us"}},
};

static void test_rtdir_prepare(void **state)
{
	struct tmp_fixture *f = *state;

	for (size_t i = 0; i < sizeof(prepare_rows) / sizeof(prepare_rows[0]); i++) {
		const struct prepare_row *r = &prepare_rows[i];
		struct ig_errbuf eb = {0};
		char dir[128], quoted[160], parent[128];
		struct stat st;
		int rc, fd;

		snprintf(dir, sizeof(dir), "%s/%s", f->base, r->sub);
		switch (r->setup) {
		case PREP_NONE:
			break;
		case PREP_DIR_0755:
			assert_int_equal(mkdir(dir, 0755), 0);
			assert_int_equal(chmod(dir, 0755), 0);
			break;
		case PREP_DIR_0710:
			assert_int_equal(mkdir(dir, 0700), 0);
			assert_int_equal(chmod(dir, 0710), 0);
			break;
		case PREP_FILE:
			fd = open(dir, O_CREAT | O_WRONLY | O_EXCL, 0600);
			assert_true(fd >= 0);
			close(fd);
			break;
		case PREP_LINK_RT:
			assert_int_equal(symlink("rt", dir), 0);
			break;
		case PREP_LINK_DANGLING:
			assert_int_equal(symlink("nowhere", dir), 0);
			break;
		case PREP_PARENT_0777:
		case PREP_PARENT_1777:
		case PREP_PARENT_0775:
		case PREP_GRANDPARENT_0777:
			snprintf(parent, sizeof(parent), "%s", dir);
			*strrchr(parent, '/') = '\0';
			if (r->setup == PREP_GRANDPARENT_0777) {
				char top[128];

				snprintf(top, sizeof(top), "%s/sub", f->base);
				assert_int_equal(mkdir(top, 0700), 0);
				assert_int_equal(chmod(top, 0777), 0);
			}
			assert_int_equal(mkdir(parent, 0700), 0);
			assert_int_equal(chmod(parent, r->setup == PREP_PARENT_0777   ? 0777
			                               : r->setup == PREP_PARENT_1777 ? 01777
			                               : r->setup == PREP_PARENT_0775 ? 0775
			                                                              : 0700),
			                 0);
			break;
		case PREP_PARENT_CHOWN:
			if (geteuid() != 0) {
				print_message("%s: not root, cannot chown: row skipped\n", r->name);
				continue;
			}
			snprintf(parent, sizeof(parent), "%s", dir);
			*strrchr(parent, '/') = '\0';
			assert_int_equal(mkdir(parent, 0755), 0);
			if (chown(parent, 1, (gid_t)-1) != 0) {
				print_message("%s: chown: %s: row skipped\n", r->name,
				              strerror(errno));
				continue;
			}
			break;
		case PREP_CHOWN:
			if (geteuid() != 0) {
				print_message("%s: not root, cannot chown: row skipped\n", r->name);
				continue;
			}
			assert_int_equal(mkdir(dir, 0700), 0);
			if (chown(dir, 1, (gid_t)-1) != 0) {
				print_message("%s: chown: %s: row skipped\n", r->name,
				              strerror(errno));
				continue;
			}
			break;
		}
		rc = rtdir_prepare(dir, &eb);
		if (rc != r->rc)
			fail_msg("%s: rtdir_prepare = %s (%s), want %s", r->name, ig_err_name(rc),
			         eb.msg, ig_err_name(r->rc));
		if (rc == IG_E_OK) {
			assert_int_equal(lstat(dir, &st), 0);
			if (!S_ISDIR(st.st_mode))
				fail_msg("%s: not a directory", r->name);
			check_int(r->name, "mode", (long long)(st.st_mode & 07777), 0700);
			check_u64(r->name, "owner", st.st_uid, getuid());
		} else {
			check_int(r->name, "eb.code", eb.code, r->rc);
			snprintf(quoted, sizeof(quoted), "'%s'", dir);
			check_has(r->name, "message", eb.msg, quoted);
			for (size_t k = 0; k < 2 && r->has[k]; k++)
				check_has(r->name, "message", eb.msg, r->has[k]);
		}
	}
}

/* ---- clock ----------------------------------------------------------------- */

struct dur_row {
	const char *name;
	uint64_t ms;
	const char *want;
};

static const struct dur_row dur_rows[] = {
    {"zero", 0, "0s"},
    {"under a second", 999, "0s"},
    {"one second", 1000, "1s"},
    {"59.999 s", 59999, "59s"},
    {"one minute", 60000, "1m00s"},
    {"61 s", 61000, "1m01s"},
    {"under an hour", 3599999, "59m59s"},
    {"one hour", 3600000, "1h00m"},
    {"1h02m03s", 3723000, "1h02m"},
    {"under a day", 86399999, "23h59m"},
    {"one day", 86400000, "1d00h"},
    {"1d01h01m01s", 90061000, "1d01h"},
    {"2^64 - 1 ms", UINT64_MAX, "213503982334d14h"},
};

static void test_clk_fmt_duration(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(dur_rows) / sizeof(dur_rows[0]); i++) {
		const struct dur_row *r = &dur_rows[i];
		char out[32];

		memset(out, 'x', sizeof(out));
		clk_fmt_duration(out, sizeof(out), r->ms);
		check_str(r->name, "clk_fmt_duration", out, r->want);
	}
}

static void test_clk_mono(void **state)
{
	uint64_t prev = clk_mono_ms(), t0, t1;

	(void)state;
	for (int i = 0; i < 100000; i++) {
		uint64_t now = clk_mono_ms();

		if (now < prev)
			fail_msg("clk_mono_ms went back: %llu after %llu", (unsigned long long)now,
			         (unsigned long long)prev);
		prev = now;
	}
	/* A 20 ms sleep moves the clock at least 20 ms (both ends truncate to ms). */
	t0 = clk_mono_ms();
	clk_sleep_ms(20);
	t1 = clk_mono_ms();
	if (t1 - t0 < 20 || t1 - t0 > 5000)
		fail_msg("clk_sleep_ms(20) took %llu ms", (unsigned long long)(t1 - t0));
}

static void test_clk_rfc3339(void **state)
{
	char out[40], before[32], after[32];
	struct timespec ts;
	struct tm tm;

	(void)state;
	/* clock_gettime, as clk_rfc3339: time(2) reads a coarser clock that can
	 * still say the last second a few ms into the next (seen in CI) */
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(before, sizeof(before), "%Y-%m-%dT%H:%M:%S", &tm);
	clk_rfc3339(out, sizeof(out));
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(after, sizeof(after), "%Y-%m-%dT%H:%M:%S", &tm);

	check_u64("clk_rfc3339", "length", strlen(out), 24);
	check_int("clk_rfc3339", "char 10", out[10], 'T');
	check_int("clk_rfc3339", "char 19", out[19], '.');
	check_int("clk_rfc3339", "last char", out[23], 'Z');
	for (int i = 20; i < 23; i++)
		if (out[i] < '0' || out[i] > '9')
			fail_msg("clk_rfc3339: millisecond digit %d in \"%s\"", i, out);
	/* The seconds agree with time(2) on one side of a second boundary. */
	if (strncmp(out, before, 19) != 0 && strncmp(out, after, 19) != 0)
		fail_msg("clk_rfc3339: \"%s\" is neither %s nor %s", out, before, after);

	/* A small buffer is cut, NUL-terminated. */
	memset(out, 'x', sizeof(out));
	clk_rfc3339(out, 11);
	check_u64("clk_rfc3339 cap 11", "length", strlen(out), 10);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_bsize_parse_ok),
	    cmocka_unit_test(test_bsize_parse_bad),
	    cmocka_unit_test(test_bsize_format),
	    cmocka_unit_test(test_err_table),
	    cmocka_unit_test(test_err_unknown),
	    cmocka_unit_test(test_err_format),
	    cmocka_unit_test(test_ev_json_escape),
	    cmocka_unit_test_setup_teardown(test_ev_line, pipe_setup, pipe_teardown),
	    cmocka_unit_test_setup_teardown(test_ev_truncated, pipe_setup, pipe_teardown),
	    cmocka_unit_test_setup_teardown(test_ev_long_name, pipe_setup, pipe_teardown),
	    cmocka_unit_test(test_json_checkers),
	    cmocka_unit_test_setup_teardown(test_rtdir_resolve, env_setup, env_teardown),
	    cmocka_unit_test_setup_teardown(test_rtdir_prepare, tmp_setup, tmp_teardown),
	    cmocka_unit_test(test_clk_fmt_duration),
	    cmocka_unit_test(test_clk_mono),
	    cmocka_unit_test(test_clk_rfc3339),
	};

	/* A jq that exits early must not kill us on the write. */
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
