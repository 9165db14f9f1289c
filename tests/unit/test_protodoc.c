/*
 * test_protodoc.c - docs/protocol.md against the codec, so that the page a
 * client in another language is written from cannot drift from the code.
 *
 *   - every fenced block opened with "```hex example=NAME" holds the
 *     encoding of example NAME of the table below, as msg_encode writes it
 *     today: the map header, `t` and `v` on the first line, then a line per
 *     field (a long field goes on over lines of 24 bytes);
 *   - every run of hex byte pairs on the page (a code span, or a fenced
 *     block's text) that begins with a msgpack map is decoded with the real
 *     decoder and must be a message at MSG_PROTO_VERSION; every example of
 *     the table is on the page exactly once;
 *   - the sentences that state the current version say MSG_PROTO_VERSION,
 *     and the version history has an entry for it;
 *   - a message's row in a table ("| t | `name` | fields | answered by |")
 *     names the codec's fields of that type, no more and no fewer: a field
 *     name is a code span that opens the cell or follows ", " outside
 *     parentheses (a value, "`ram`", follows ": " or "or "; a record,
 *     "array of `stop`", follows "of "); a row naming none ("the KV tiers:
 *     below") is a summary and is skipped, and every type has a row.
 *
 * The examples are generated, never hand-edited: after a change of the
 * codec or of MSG_PROTO_VERSION, `IGNIS_UPDATE_GOLDEN=1 meson test -C build
 * protocol-doc` rewrites the example blocks and the version sentences in
 * place (it leaves every other line of the page as it is), as it rewrites
 * tests/golden/ for the codec test. The page's path is the first argument.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proto/msg.h"

static const char *doc_path = "docs/protocol.md";

/* ---- the examples ------------------------------------------------------- */

static void ex_hello(struct msg *m)
{
	m->type = MSG_HELLO;
	m->u.hello.role = msg_str_of("client");
	m->u.hello.pid = 4242;
	m->u.hello.build = msg_str_of("");
}

static void ex_ping(struct msg *m)
{
	m->type = MSG_PING;
	m->u.ping.seq = 0;
}

static void ex_cancel(struct msg *m)
{
	m->type = MSG_CANCEL;
	m->u.cancel.id = 1;
}

static void ex_tokens(struct msg *m)
{
	struct msg_tokens *t = &m->u.tokens;

	m->type = MSG_TOKENS;
	t->id = 1;
	t->from = 0;
	t->tokens.n = 3;
	t->tokens.v[0] = 0xC3; /* the two bytes of "é" */
	t->tokens.v[1] = 0xA9;
	t->tokens.v[2] = 257; /* <|eos|> */
	t->text = msg_str_of("\xC3\xA9");
	t->state = msg_str_of("done");
	t->done = true;
	t->finish = msg_str_of("eos");
	t->generated = 3;
}

static void ex_submit(struct msg *m)
{
	struct msg_submit *q = &m->u.submit;

	m->type = MSG_SUBMIT;
	q->text = msg_str_of("hi");
	q->max_tokens = 8;
	q->class = msg_str_of("interactive");
	q->temperature = 0.0;
	q->top_p = 1.0;
	q->stop.n = 1;
	q->stop.v[0].text = msg_str_of(".");
}

static void ex_worker_stats(struct msg *m)
{
	m->type = MSG_WORKER_STATS;
	m->u.worker_stats.seq = 0;
}

static void ex_fd_submit(struct msg *m)
{
	struct msg_fd_submit *q = &m->u.fd_submit;

	m->type = MSG_FD_SUBMIT;
	q->text = msg_str_of("hi");
	q->max_tokens = 8;
	q->class = msg_str_of("interactive");
	q->temperature = 0.0;
	q->top_p = 1.0;
	q->top_k = 0;
	q->seed = 0;
}

struct example {
	const char *name;
	void (*fill)(struct msg *m);
};

/* The page shows what each one is in the sentence before its block. */
static const struct example examples[] = {
    {"hello", ex_hello},         {"ping", ex_ping},     {"submit", ex_submit},
    {"cancel", ex_cancel},       {"tokens", ex_tokens}, {"worker_stats", ex_worker_stats},
    {"fd_submit", ex_fd_submit},
};
#define NEXAMPLES (sizeof(examples) / sizeof(examples[0]))

/* ---- msgpack: where one object ends ------------------------------------- */

static uint64_t be(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

/* The offset just past the object at p[at], or 0 when it does not fit in n
 * (the encoder's output always does). */
static size_t mp_end(const uint8_t *p, size_t n, size_t at)
{
	uint64_t items = 0, len = 0;
	size_t head = 1; /* the type byte and what follows it before the payload */
	int count = 0;   /* bytes of a count after the type byte */
	enum { BYTES, ITEMS, PAIRS } counts = BYTES;
	uint8_t b;

	if (at >= n)
		return 0;
	b = p[at];
	if (b >= 0xa0 && b <= 0xbf)
		len = b & 0x1f;
	else if (b >= 0x80 && b <= 0x8f)
		items = 2u * (b & 0x0f);
	else if (b >= 0x90 && b <= 0x9f)
		items = b & 0x0f;
	else if (b == 0xcc || b == 0xd0)
		head = 2;
	else if (b == 0xcd || b == 0xd1)
		head = 3;
	else if (b == 0xca || b == 0xce || b == 0xd2)
		head = 5;
	else if (b == 0xcb || b == 0xcf || b == 0xd3)
		head = 9;
	else if (b == 0xc4 || b == 0xd9)
		count = 1;
	else if (b == 0xc5 || b == 0xda)
		count = 2;
	else if (b == 0xc6 || b == 0xdb)
		count = 4;
	else if (b == 0xdc || b == 0xdd) {
		count = b == 0xdc ? 2 : 4;
		counts = ITEMS;
	} else if (b == 0xde || b == 0xdf) {
		count = b == 0xde ? 2 : 4;
		counts = PAIRS;
	} else if (!(b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3))
		return 0; /* ext types: never written by the encoder */
	if (count) {
		head = 1 + (size_t)count;
		if (at + head > n)
			return 0;
		if (counts == BYTES)
			len = be(p + at + 1, count);
		else
			items = be(p + at + 1, count) * (counts == PAIRS ? 2 : 1);
	}
	if (len > n || at + head + len > n)
		return 0;
	at += head + (size_t)len;
	while (items-- && at)
		at = mp_end(p, n, at);
	return at;
}

static bool mp_is_map(uint8_t b)
{
	return (b >= 0x80 && b <= 0x8f) || b == 0xde || b == 0xdf;
}

/* ---- the text of a block ------------------------------------------------ */

struct text {
	char *p;
	size_t n, cap;
};

static void put(struct text *t, const char *s, size_t n)
{
	if (t->n + n + 1 > t->cap) {
		t->cap = (t->n + n + 1) * 2;
		t->p = realloc(t->p, t->cap);
		assert_non_null(t->p);
	}
	memcpy(t->p + t->n, s, n);
	t->n += n;
	t->p[t->n] = '\0';
}

static void put_bytes(struct text *t, const uint8_t *p, size_t from, size_t to)
{
	for (size_t i = from; i < to; i++) {
		char hex[4];

		snprintf(hex, sizeof(hex), "%02x%s", p[i],
		         i + 1 == to || (i - from) % 24 == 23 ? "\n" : " ");
		put(t, hex, 3);
	}
}

/* Example `e` as the page shows it: lines ending in '\n'. */
static void example_text(const struct example *e, struct text *t)
{
	struct msg m;
	struct msg_buf b = {0};
	struct ig_errbuf eb;
	const uint8_t *p;
	size_t at, end;

	memset(&m, 0, sizeof(m));
	e->fill(&m);
	if (msg_encode(&m, msg_buf_write, &b, &eb))
		fail_msg("example %s: %s", e->name, eb.msg);
	p = (const uint8_t *)b.p;
	/* the map header, then t and v (two keys, two values) */
	at = 1;
	for (int i = 0; i < 4; i++)
		at = mp_end(p, b.n, at);
	assert_true(at > 0);
	put_bytes(t, p, 0, at);
	while (at < b.n) {
		end = mp_end(p, b.n, mp_end(p, b.n, at));
		if (!end)
			fail_msg("example %s: cannot split the encoding at byte %zu", e->name, at);
		put_bytes(t, p, at, end);
		at = end;
	}
	msg_buf_release(&b);
}

/* ---- the page ----------------------------------------------------------- */

static char *read_page(size_t *len)
{
	FILE *f = fopen(doc_path, "rb");
	char *buf;
	long n;

	if (!f)
		fail_msg("cannot read %s (the page's path is this test's argument)", doc_path);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)n + 1);
	assert_non_null(buf);
	if (fread(buf, 1, (size_t)n, f) != (size_t)n)
		fail_msg("cannot read %s", doc_path);
	buf[n] = '\0';
	fclose(f);
	*len = (size_t)n;
	return buf;
}

/* Bytes of `s` (n chars) when it is nothing but hex byte pairs separated by
 * white space, at least two of them; else 0. */
static size_t hex_run(const char *s, size_t n, uint8_t *out, size_t cap)
{
	size_t k = 0, i = 0;

	while (i < n) {
		unsigned v;

		if (s[i] == ' ' || s[i] == '\n' || s[i] == '\t') {
			i++;
			continue;
		}
		if (i + 1 >= n || k == cap || sscanf(s + i, "%2x", &v) != 1 ||
		    !strchr("0123456789abcdefABCDEF", s[i]) ||
		    !strchr("0123456789abcdefABCDEF", s[i + 1]) ||
		    (i + 2 < n && !strchr(" \n\t", s[i + 2])))
			return 0;
		out[k++] = (uint8_t)v;
		i += 2;
	}
	return k >= 2 ? k : 0;
}

/* Decode a hex run of the page that begins with a map: a message at our
 * version. Returns whether it was one (a map). */
static bool check_run(const char *s, size_t n, int line)
{
	static uint8_t bytes[1 << 16];
	size_t k = hex_run(s, n, bytes, sizeof(bytes));
	struct ig_errbuf eb;
	struct msg m;
	void *copy;
	int rc;

	if (!k || !mp_is_map(bytes[0]))
		return false; /* not hex, or a fragment (a value such as cb 80 ...) */
	copy = malloc(k);
	assert_non_null(copy);
	memcpy(copy, bytes, k);
	memset(&m, 0, sizeof(m));
	rc = msg_decode(copy, k, &m, &eb);
	free(copy);
	if (rc)
		fail_msg("%s:%d: the example '%.*s' does not decode: %s (%s)%s", doc_path, line,
		         (int)(n > 60 ? 60 : n), s, ig_err_name(rc), eb.msg,
		         rc == IG_E_PROTO_VERSION ? "; regenerate the examples" : "");
	assert_int_equal(m.version, MSG_PROTO_VERSION);
	return true;
}

/* The sentences that state the current version: a prefix, then the number. */
static const char *const version_prefixes[] = {
    "# The Ignis control protocol (version ",
    "| `v` | uint | protocol version, `",
    "(the protocol version, `",
};

/* Rewrite (update) or check the version sentences of `page` in place;
 * returns the page (reallocated when a number's width changed). */
static char *version_sentences(char *page, bool update)
{
	for (size_t i = 0; i < sizeof(version_prefixes) / sizeof(version_prefixes[0]); i++) {
		const char *pre = version_prefixes[i];
		char *at = strstr(page, pre), *num, *end, *np;
		unsigned long v;
		char want[16];
		size_t w;

		if (!at)
			fail_msg("%s no longer says \"%s<version>\": put it back, or update "
			         "version_prefixes in %s",
			         doc_path, pre, __FILE__);
		if (strstr(at + 1, pre))
			fail_msg("%s says \"%s\" twice", doc_path, pre ? pre : "");
		num = at + strlen(pre);
		v = strtoul(num, &end, 10);
		if (end == num)
			fail_msg("%s: no number after \"%s\"", doc_path, pre);
		if (v == MSG_PROTO_VERSION)
			continue;
		if (!update)
			fail_msg("%s says \"%s%lu\", the code speaks version %u: regenerate with "
			         "IGNIS_UPDATE_GOLDEN=1 meson test protocol-doc",
			         doc_path, pre, v, MSG_PROTO_VERSION);
		w = (size_t)snprintf(want, sizeof(want), "%u", MSG_PROTO_VERSION);
		np = malloc(strlen(page) + w + 1);
		assert_non_null(np);
		memcpy(np, page, (size_t)(num - page));
		memcpy(np + (num - page), want, w);
		strcpy(np + (num - page) + w, end);
		free(page);
		page = np;
	}
	return page;
}

static void test_examples(void **state)
{
	bool update = getenv("IGNIS_UPDATE_GOLDEN") != NULL;
	int seen[NEXAMPLES] = {0}, maps = 0, line = 1, fence_line = 0;
	size_t len;
	char *page = read_page(&len), *p = page, *fence = NULL, *orig, history[32];
	struct text out = {0};
	const struct example *ex = NULL;

	(void)state;
	orig = strdup(page);
	assert_non_null(orig);
	while (*p) {
		char *eol = strchr(p, '\n');
		size_t n = eol ? (size_t)(eol - p) + 1 : strlen(p);

		if (!strncmp(p, "```", 3)) {
			if (!fence) {
				fence = p + n;
				fence_line = line;
				ex = NULL;
				if (!strncmp(p, "```hex example=", 15)) {
					size_t k = strcspn(p + 15, " \n");

					for (size_t i = 0; i < NEXAMPLES; i++)
						if (strlen(examples[i].name) == k &&
						    !strncmp(examples[i].name, p + 15, k))
							ex = &examples[i];
					if (!ex)
						fail_msg("%s:%d: no example '%.*s' in %s", doc_path,
						         line, (int)k, p + 15, __FILE__);
				}
				put(&out, p, n);
			} else {
				/* the fence closes: check or regenerate its text */
				size_t body = (size_t)(p - fence);

				if (ex) {
					struct text want = {0};

					seen[ex - examples]++;
					example_text(ex, &want);
					if (!update &&
					    (body != want.n || memcmp(fence, want.p, body)))
						fail_msg("%s:%d: example %s is stale.\n want:\n%s "
						         "got:\n%.*s"
						         "regenerate with IGNIS_UPDATE_GOLDEN=1 "
						         "meson test "
						         "protocol-doc",
						         doc_path, fence_line, ex->name, want.p,
						         (int)body, fence);
					put(&out, want.p, want.n);
					maps += check_run(want.p, want.n, fence_line + 1);
					free(want.p);
				} else {
					put(&out, fence, body);
					maps += check_run(fence, body, fence_line + 1);
				}
				put(&out, p, n);
				fence = NULL;
			}
		} else if (!fence) {
			/* code spans of this line */
			for (char *q = p; (q = memchr(q, '`', (size_t)(p + n - q))) != NULL;) {
				char *close = memchr(q + 1, '`', (size_t)(p + n - q - 1));

				if (!close)
					break;
				maps += check_run(q + 1, (size_t)(close - q - 1), line);
				q = close + 1;
			}
			put(&out, p, n);
		}
		p += n;
		line++;
	}
	if (fence)
		fail_msg("%s:%d: a fenced block is never closed", doc_path, fence_line);
	for (size_t i = 0; i < NEXAMPLES; i++)
		if (seen[i] != 1)
			fail_msg("%s shows example %s %d times (want once, in a block "
			         "\"```hex example=%s\")",
			         doc_path, examples[i].name, seen[i], examples[i].name);
	print_message("%s: %d messages in hex, each decoded at version %u\n", doc_path, maps,
	              MSG_PROTO_VERSION);
	snprintf(history, sizeof(history), "Version %u ", MSG_PROTO_VERSION);
	if (!strstr(page, history))
		fail_msg("%s has no \"%s...\" in its version history: say what version %u "
		         "changed",
		         doc_path, history, MSG_PROTO_VERSION);
	/* the sentences, once the examples are known good (or regenerated) */
	out.p = version_sentences(out.p, update);
	out.n = strlen(out.p);
	if (update && (out.n != len || memcmp(out.p, orig, len))) {
		FILE *f = fopen(doc_path, "wb");

		assert_non_null(f);
		assert_int_equal(fwrite(out.p, 1, out.n, f), out.n);
		fclose(f);
		print_message("%s: rewritten from the encoder\n", doc_path);
	}
	free(orig);
	free(out.p);
	free(page);
}

/* The splitter the page's layout uses agrees with the encoder. */
static void test_mp_end(void **state)
{
	static const struct {
		const char *hex;
		size_t end;
	} rows[] = {
	    {"00", 1},
	    {"c3", 1},
	    {"a3 61 62 63", 4},
	    {"cc ff", 2},
	    {"cd ff ff", 3},
	    {"ce 00 00 00 01", 5},
	    {"cb 3f f0 00 00 00 00 00 00", 9},
	    {"92 05 ce ff ff ff ff", 7},
	    {"81 a1 61 90", 4},
	    {"d9 01 61", 3},
	    {"dc 00 01 c2", 4},
	    {"91", 0},
	    {"a3 61", 0},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		uint8_t b[16];
		size_t n = 0;

		for (const char *h = rows[i].hex; *h; h += h[2] ? 3 : 2) {
			unsigned v;

			assert_int_equal(sscanf(h, "%2x", &v), 1);
			b[n++] = (uint8_t)v;
		}
		if (mp_end(b, n, 0) != rows[i].end)
			fail_msg("%s: end %zu, want %zu", rows[i].hex, mp_end(b, n, 0),
			         rows[i].end);
	}
}

/* ---- the tables --------------------------------------------------------- */

#define MAX_NAMES 64

/* The field names a row's fields cell [s, e) names (see the top). */
static int cell_names(const char *s, const char *e, char names[][48], int cap)
{
	int depth = 0, n = 0;

	for (const char *p = s; p < e; p++) {
		if (*p == '(')
			depth++;
		else if (*p == ')')
			depth--;
		else if (*p == '`') {
			const char *q = memchr(p + 1, '`', (size_t)(e - p - 1));
			bool lead = p == s || (p - s >= 2 && p[-2] == ',' && p[-1] == ' ');

			if (!q)
				break;
			if (depth == 0 && lead && q - p - 1 < 48 && n < cap) {
				memcpy(names[n], p + 1, (size_t)(q - p - 1));
				names[n++][q - p - 1] = '\0';
			}
			p = q;
		}
	}
	return n;
}

static bool has_name(char names[][48], int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (strcmp(names[i], name) == 0)
			return true;
	return false;
}

static void test_tables(void **state)
{
	static char names[MAX_NAMES][48];
	size_t len;
	char *page = read_page(&len);
	bool seen[256] = {false};
	int bad = 0;

	(void)state;
	for (char *line = page, *next; line && *line; line = next) {
		char *eol = strchr(line, '\n'), *name, *name_end, *cell, *cell_end;
		const struct msg_desc *d;
		unsigned long t;
		int n;

		next = eol ? eol + 1 : NULL;
		if (!eol)
			eol = line + strlen(line);
		if (strncmp(line, "| ", 2) != 0 || !(line[2] >= '0' && line[2] <= '9'))
			continue;
		t = strtoul(line + 2, &name, 10);
		if (strncmp(name, " | `", 4) != 0 || *name == '-')
			continue; /* "15-27": a range of types, a summary */
		name += 4;
		name_end = memchr(name, '`', (size_t)(eol - name));
		if (!name_end || strncmp(name_end, "` | ", 4) != 0)
			continue;
		cell = name_end + 4;
		/* the fields cell ends at the last " | " before the answer cell */
		cell_end = NULL;
		for (char *p = cell; p + 3 <= eol; p++)
			if (strncmp(p, " | ", 3) == 0)
				cell_end = p;
		if (!cell_end)
			continue;
		d = msg_desc_find((uint32_t)t);
		if (!d) {
			print_error("%s: a row for type %lu, which the codec does not know\n",
			            doc_path, t);
			bad++;
			continue;
		}
		if (strlen(d->rec.name) != (size_t)(name_end - name) ||
		    strncmp(d->rec.name, name, (size_t)(name_end - name)) != 0) {
			print_error("%s: type %lu is named `%.*s`; the codec calls it %s\n", doc_path,
			            t, (int)(name_end - name), name, d->rec.name);
			bad++;
		}
		if (t < 256)
			seen[t] = true;
		n = cell_names(cell, cell_end, names, MAX_NAMES);
		if (n == 0)
			continue; /* a summary row: the fields are described below */
		for (uint32_t i = 0; i < d->rec.nfields; i++)
			if (!has_name(names, n, d->rec.fields[i].name)) {
				print_error("%s: the row of %s does not name its field `%s`\n", doc_path,
				            d->rec.name, d->rec.fields[i].name);
				bad++;
			}
		for (int k = 0; k < n; k++) {
			bool found = false;

			for (uint32_t i = 0; i < d->rec.nfields && !found; i++)
				found = strcmp(names[k], d->rec.fields[i].name) == 0;
			if (!found) {
				print_error("%s: the row of %s names `%s`, which is not one of its "
				            "fields\n",
				            doc_path, d->rec.name, names[k]);
				bad++;
			}
		}
	}
	for (size_t i = 0; i < msg_ndescs; i++)
		if (msg_descs[i].type < 256 && !seen[msg_descs[i].type]) {
			print_error("%s: no table row for type %u (%s)\n", doc_path, msg_descs[i].type,
			            msg_descs[i].rec.name);
			bad++;
		}
	free(page);
	if (bad)
		fail_msg("%d disagreements between the page's tables and the codec", bad);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_mp_end),
	    cmocka_unit_test(test_examples),
	    cmocka_unit_test(test_tables),
	};

	if (argc > 1)
		doc_path = argv[1];
	return cmocka_run_group_tests(tests, NULL, NULL);
}
