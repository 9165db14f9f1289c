/*
 * test_knobs.c - the knob table (common/knobs.h) through the supervisor's
 * configuration (supervisor/config.h): every row from every source.
 *
 * The per-row checks walk knob_defs[0..KNOB__COUNT), so a knob added to the
 * table is covered without touching this file: its default, its flag, its
 * variable, its YAML key (with the file's line in messages), precedence
 * between the three, a bad value from each source, and its spellings in the
 * generated --help and `reference`. Each row takes samples by its type and a
 * model of the family that takes the knob. The cross-knob rules of
 * knob_resolve are a table of their own: name, flags, variables, YAML, model,
 * the expected code, the words of the message and the values that result.
 * A failing check names its row. No IGNIS_ variable survives a test.
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
#include <limits.h>
#include <sys/wait.h>
#include <unistd.h>

#include "supervisor/config.h"
#include "common/err.h"
#include "common/knobs.h"
#include "common/model.h"

/* ---- environment: no IGNIS_ variable of the table leaks ---------------------- */

static void env_clear(void)
{
	for (int i = 0; i < KNOB__COUNT; i++) {
		char name[96];

		knob_env((enum knob_id)i, name, sizeof(name));
		unsetenv(name);
	}
}

static int setup(void **state)
{
	(void)state;
	env_clear();
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	env_clear();
	return 0;
}

/* ---- helpers: each names the row that failed ------------------------------- */

static const char *src_name(enum knob_src s)
{
	switch (s) {
	case KS_DEFAULT:
		return "default";
	case KS_PROFILE:
		return "profile";
	case KS_YAML:
		return "yaml";
	case KS_ENV:
		return "env";
	case KS_FLAG:
		return "flag";
	}
	return "?";
}

static void check_has(const char *row, const char *what, const char *hay, const char *needle)
{
	if (!strstr(hay, needle))
		fail_msg("%s: %s \"%s\" lacks \"%s\"", row, what, hay, needle);
}

/* One configuration: flags set on `c`, the environment as it is, and the YAML
 * file that was at `path` ("" when none). */
struct fx {
	struct cfg c;
	struct ig_errbuf eb;
	char path[64];
};

static void fx_init(struct fx *f)
{
	memset(f, 0, sizeof(*f));
	cfg_init(&f->c);
}

/* Write `text` to a fresh temporary file and load it as the YAML file. */
static int fx_yaml(struct fx *f, const char *row, const char *text)
{
	size_t n = strlen(text);
	int fd, rc;

	snprintf(f->path, sizeof(f->path), "/tmp/ignis-knobs-XXXXXX.yaml");
	fd = mkstemps(f->path, 5);
	if (fd < 0)
		fail_msg("%s: mkstemps: %s", row, strerror(errno));
	if (write(fd, text, n) != (ssize_t)n)
		fail_msg("%s: write %s: %s", row, f->path, strerror(errno));
	close(fd);
	f->eb.msg[0] = '\0';
	rc = cfg_load_file(&f->c, f->path, &f->eb);
	/* Loading reads the file once (lines included): a failing check leaves none. */
	unlink(f->path);
	return rc;
}

static int fx_resolve(struct fx *f)
{
	f->eb.msg[0] = '\0';
	return cfg_resolve(&f->c, &f->eb);
}

static void fx_done(struct fx *f)
{
	cfg_release(&f->c);
}

static void expect_ok(const char *row, const struct fx *f, int rc)
{
	if (rc != IG_E_OK)
		fail_msg("%s: %s, want IG_E_OK: %s", row, ig_err_name(rc), f->eb.msg);
}

static void expect_config(const char *row, const struct fx *f, int rc)
{
	if (rc != IG_E_CONFIG)
		fail_msg("%s: %s, want IG_E_CONFIG (message \"%s\")", row, ig_err_name(rc),
		         f->eb.msg);
}

/* `v` holds the parse of `text`, from `src`, said to come from `where`. */
static void check_value(const char *row, const struct knob_value *v, enum knob_id id,
                        const char *text, enum knob_src src, const char *where)
{
	struct knob_value want;
	struct ig_errbuf eb;

	memset(&want, 0, sizeof(want));
	if (knob_parse(id, text, "sample", &want, &eb) != IG_E_OK)
		fail_msg("%s: the sample '%s' does not parse: %s", row, text, eb.msg);
	if (!v->set)
		fail_msg("%s: not set, want '%s' from %s", row, text, where);
	if (v->src != src)
		fail_msg("%s: source %s (%s), want %s", row, src_name(v->src), v->where,
		         src_name(src));
	if (strcmp(v->where, where) != 0)
		fail_msg("%s: where \"%s\", want \"%s\"", row, v->where, where);
	if (v->u != want.u)
		fail_msg("%s: value %llu, want %llu ('%s')", row, (unsigned long long)v->u,
		         (unsigned long long)want.u, text);
	if (v->tokens != want.tokens)
		fail_msg("%s: tokens %d, want %d ('%s')", row, v->tokens, want.tokens, text);
	if ((v->s == NULL) != (want.s == NULL) || (v->s && strcmp(v->s, want.s) != 0))
		fail_msg("%s: text \"%s\", want \"%s\"", row, v->s ? v->s : "(null)",
		         want.s ? want.s : "(null)");
}

/* ---- rows of the table: spellings, samples and the model that takes it ----- */

struct row {
	enum knob_id id;
	const struct knob_def *d;
	char flag[96], env[96], key[96];
	const char *model; /* a model whose family takes the knob; NULL: the default */
	char good[3][48];  /* valid values, different where the type allows */
	char bad[5][48];   /* invalid values */
	int nbad;
};

/* The choices of an ENUM's `accepted`, "a|b|c". */
static int enum_choices(const char *acc, char out[][48], int max)
{
	int n = 0;

	for (const char *p = acc; p && *p && n < max; n++) {
		const char *bar = strchr(p, '|');
		size_t len = bar ? (size_t)(bar - p) : strlen(p);

		snprintf(out[n], 48, "%.*s", (int)len, p);
		p = bar ? bar + 1 : NULL;
	}
	return n;
}

/* Samples from a knob's ranges (knob_ranges): the middle of the last, the
 * first's low end, the last's high end (an open one: 1M past its low end);
 * outside, the value below each range and above it that no other range
 * holds. */
static void row_ranged(struct row *r)
{
	struct knob_range rg[4];
	int n = knob_ranges(r->id, rg, 4);
	const struct knob_range *last;

	if (n < 1 || n > 4)
		fail_msg("%s: %d ranges in \"%s\"", r->d->name, n,
		         r->d->accepted ? r->d->accepted : "(null)");
	last = &rg[n - 1];
	snprintf(r->good[0], 48, "%llu",
	         (unsigned long long)(last->hi == UINT64_MAX
	                                  ? last->lo * 2 + 1
	                                  : last->lo + (last->hi - last->lo) / 2));
	snprintf(r->good[1], 48, "%llu", (unsigned long long)rg[0].lo);
	snprintf(r->good[2], 48, "%llu",
	         (unsigned long long)(last->hi == UINT64_MAX ? last->lo + (1u << 20) : last->hi));
	snprintf(r->bad[r->nbad++], 48, "12X");
	for (int j = 0; j < n; j++) {
		if (rg[j].lo > 0 && (j == 0 || rg[j - 1].hi + 1 < rg[j].lo))
			snprintf(r->bad[r->nbad++], 48, "%llu", (unsigned long long)rg[j].lo - 1);
		if (rg[j].hi < UINT64_MAX && (j == n - 1 || rg[j].hi + 1 < rg[j + 1].lo - 1))
			snprintf(r->bad[r->nbad++], 48, "%llu", (unsigned long long)rg[j].hi + 1);
	}
}

static void row_init(struct row *r, int i)
{
	const struct knob_def *d = &knob_defs[i];
	char ch[8][48];
	int n;

	memset(r, 0, sizeof(*r));
	r->id = (enum knob_id)i;
	r->d = d;
	if (!d->name || (int)d->id != i)
		fail_msg("knob_defs[%d]: id %d, name %s", i, (int)d->id, d->name ? d->name : "-");
	knob_flag(r->id, r->flag, sizeof(r->flag));
	knob_env(r->id, r->env, sizeof(r->env));
	knob_yaml_key(r->id, r->key, sizeof(r->key));
	if (d->refused_by == KNOB_REFUSE_DENSE)
		r->model = "tiny-moe";
	else if (d->refused_by == KNOB_REFUSE_MOE)
		r->model = "tiny-dense";
	else if (d->refused_by)
		fail_msg("%s: refused by every family", d->name);
	switch (d->type) {
	case KT_BYTES:
		if (d->accepted) {
			row_ranged(r);
			break;
		}
		snprintf(r->good[0], 48, "3M");
		snprintf(r->good[1], 48, "4M");
		snprintf(r->good[2], 48, "5M");
		snprintf(r->bad[r->nbad++], 48, "12X");
		break;
	case KT_POOL:
		snprintf(r->good[0], 48, "2Ktok");
		snprintf(r->good[1], 48, "3M");
		snprintf(r->good[2], 48, "4Ktok");
		snprintf(r->bad[r->nbad++], 48, "12X");
		break;
	case KT_COUNT:
		if (!d->accepted)
			fail_msg("%s: a count without a range", d->name);
		row_ranged(r);
		break;
	case KT_BOOL:
		snprintf(r->good[0], 48, "off");
		snprintf(r->good[1], 48, "on");
		snprintf(r->good[2], 48, "no");
		snprintf(r->bad[r->nbad++], 48, "maybe");
		break;
	case KT_SWITCH:
		snprintf(r->good[0], 48, "on");
		snprintf(r->good[1], 48, "off");
		snprintf(r->good[2], 48, "yes");
		snprintf(r->bad[r->nbad++], 48, "maybe");
		break;
	case KT_ENUM:
		n = enum_choices(d->accepted, ch, 8);
		if (n < 2)
			fail_msg("%s: an enum of %d choices \"%s\"", d->name, n,
			         d->accepted ? d->accepted : "(null)");
		snprintf(r->good[0], 48, "%s", ch[n - 1]);
		snprintf(r->good[1], 48, "%s", ch[0]);
		snprintf(r->good[2], 48, "%s", ch[n > 2 ? n - 2 : 0]);
		snprintf(r->bad[r->nbad++], 48, "nosuch");
		break;
	case KT_MODEL:
		snprintf(r->good[0], 48, "tiny-moe");
		snprintf(r->good[1], 48, "tiny-dense");
		snprintf(r->good[2], 48, "27b");
		snprintf(r->bad[r->nbad++], 48, "nosuch");
		break;
	case KT_PATH:
		snprintf(r->good[0], 48, "/tmp/x");
		snprintf(r->good[1], 48, "/tmp/y");
		snprintf(r->good[2], 48, "/tmp/z");
		snprintf(r->bad[r->nbad++], 48, "relative");
		break;
	case KT_ADDR:
		snprintf(r->good[0], 48, "ipc:///tmp/x.sock");
		snprintf(r->good[1], 48, "tcp://127.0.0.1:7001");
		snprintf(r->good[2], 48, "tcp://localhost:65535");
		snprintf(r->bad[r->nbad++], 48, "ipc://relative");
		snprintf(r->bad[r->nbad++], 48, "tcp://127.0.0.1:0");
		snprintf(r->bad[r->nbad++], 48, "http://127.0.0.1:80");
		break;
	case KT_HOSTPORT:
		snprintf(r->good[0], 48, "127.0.0.1:9464");
		snprintf(r->good[1], 48, "localhost:1");
		snprintf(r->good[2], 48, "0.0.0.0:65535");
		snprintf(r->bad[r->nbad++], 48, "127.0.0.1");
		snprintf(r->bad[r->nbad++], 48, "127.0.0.1:65536");
		snprintf(r->bad[r->nbad++], 48, ":80");
		break;
	case KT_LISTEN:
		snprintf(r->good[0], 48, "127.0.0.1:8000");
		snprintf(r->good[1], 48, "off");
		snprintf(r->good[2], 48, "localhost:65535");
		snprintf(r->bad[r->nbad++], 48, "127.0.0.1");
		snprintf(r->bad[r->nbad++], 48, "on");
		snprintf(r->bad[r->nbad++], 48, "127.0.0.1:0");
		break;
	case KT_REMOVED:
		snprintf(r->bad[r->nbad++], 48, "4");
		break;
	case KT_SECRET:
		snprintf(r->good[0], 48, "sk-local-0123456789");
		snprintf(r->good[1], 48, "k");
		snprintf(r->good[2], 48, "Zx9-_.~key");
		snprintf(r->bad[r->nbad++], 48, "two words");
		snprintf(r->bad[r->nbad++], 48, "caf\xc3\xa9");
		break;
	case KT_ORIGINS:
		snprintf(r->good[0], 48, "https://app.example");
		snprintf(r->good[1], 48, "http://localhost:3000, https://b.example");
		snprintf(r->good[2], 48, "https://a.example,");
		snprintf(r->bad[r->nbad++], 48, "app.example");
		snprintf(r->bad[r->nbad++], 48, "https://a.example/path");
		snprintf(r->bad[r->nbad++], 48, "ftp://a.example");
		snprintf(r->bad[r->nbad++], 48, "https://");
		break;
	case KT_NAMES:
		snprintf(r->good[0], 48, "gpt-4o");
		snprintf(r->good[1], 48, "qwen3, gpt-4o-mini,claude");
		snprintf(r->good[2], 48, "org/Model:latest,");
		snprintf(r->bad[r->nbad++], 48, "p, q ,p");
		snprintf(r->bad[r->nbad++], 48, "a,b,a");

		break;
	default:
		fail_msg("%s: type %d is not one of the table's", d->name, (int)d->type);
	}
}

/* What a row needs besides itself: its model, and the budget that the
 * oversubscription switch is refused without. */
static void row_context(struct cfg *c, const struct row *r)
{
	if (r->model && r->id != KNOB_MODEL)
		cfg_set_flag(c, KNOB_MODEL, r->model);
	if (r->id == KNOB_VRAM_ALLOW_OVERSUBSCRIPTION)
		cfg_set_flag(c, KNOB_VRAM_BUDGET_BYTES, "64M");
}

/* A second YAML key beside the row's, for line numbers: its id, key and value. */
struct companion {
	enum knob_id id;
	char key[96];
	const char *value;
};

static void row_companion(const struct row *r, struct companion *c)
{
	c->id = r->id == KNOB_RUNTIME_DIR ? KNOB_BACKEND : KNOB_RUNTIME_DIR;
	c->value = r->id == KNOB_RUNTIME_DIR ? "cpu" : "/tmp/ignis-knobs-companion";
	knob_yaml_key(c->id, c->key, sizeof(c->key));
}

static void yaml_where(char *out, size_t cap, const struct fx *f, int line)
{
	snprintf(out, cap, "%s:%d", f->path, line);
}

/* ---- 0. the table itself: spellings, declared ranges, unique names ---------- */

static void test_rows_spellings(void **state)
{
	(void)state;
	for (int i = 0; i < KNOB__COUNT; i++) {
		char want_env[96], want_key[96], want_flag[96];
		struct row r;
		size_t n;

		row_init(&r, i);
		/* Spelled here independently of knob_flag/knob_env/knob_yaml_key. */
		n = strlen(r.d->name);
		if (n == 0 || n + 7 > sizeof(want_env))
			fail_msg("knob %d: name \"%s\" is empty or too long", i, r.d->name);
		snprintf(want_flag, sizeof(want_flag), "--%s", r.d->name);
		snprintf(want_env, sizeof(want_env), "IGNIS_");
		for (size_t c = 0; c < n; c++) {
			char ch = r.d->name[c];

			if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-'))
				fail_msg("%s: the name has '%c'; want [a-z0-9-]", r.d->name, ch);
			want_env[6 + c] = ch == '-' ? '_' : (char)(ch >= 'a' ? ch - 'a' + 'A' : ch);
			want_key[c] = ch == '-' ? '_' : ch;
		}
		want_env[6 + n] = '\0';
		want_key[n] = '\0';
		if (strcmp(r.flag, want_flag) || strcmp(r.env, want_env) || strcmp(r.key, want_key))
			fail_msg("%s: spelled %s, %s, %s; want %s, %s, %s", r.d->name, r.flag,
			         r.env, r.key, want_flag, want_env, want_key);
		for (int j = 0; j < i; j++)
			if (!strcmp(knob_defs[j].name, r.d->name))
				fail_msg("%s: named twice (rows %d and %d)", r.d->name, j, i);
		/* `accepted`: ranges for counts (and, where there are limits, sizes),
		 * choices for enums, NULL otherwise. */
		if ((r.d->type == KT_COUNT || r.d->type == KT_ENUM) ? !r.d->accepted
		    : r.d->type == KT_BYTES                         ? false
		                                                    : r.d->accepted != NULL)
			fail_msg("%s: accepted \"%s\" does not fit its type", r.d->name,
			         r.d->accepted ? r.d->accepted : "(null)");
		if ((r.d->type == KT_COUNT || (r.d->type == KT_BYTES && r.d->accepted)) &&
		    knob_ranges(r.id, NULL, 0) < 1)
			fail_msg("%s: the ranges \"%s\" do not parse, or are not ascending and "
			         "apart",
			         r.d->name, r.d->accepted);
		if (!r.d->doc || !r.d->doc[0])
			fail_msg("%s: no doc", r.d->name);
	}
}

/* ---- 1. defaults ------------------------------------------------------------ */

static void test_rows_default(void **state)
{
	(void)state;
	for (int i = 0; i < KNOB__COUNT; i++) {
		const struct knob_value *v;
		char row[160], where[160];
		struct row r;
		struct fx f;
		int rc;

		row_init(&r, i);
		snprintf(row, sizeof(row), "%s, no sources", r.d->name);
		fx_init(&f);
		row_context(&f.c, &r);
		rc = fx_resolve(&f);
		expect_ok(row, &f, rc);
		v = &f.c.k.v[i];
		if (v->set && v->src != KS_DEFAULT && v->src != KS_PROFILE)
			fail_msg("%s: source %s (%s), want default or profile", row,
			         src_name(v->src), v->where);
		if (v->set && v->src == KS_PROFILE && strcmp(v->where, "profile cpu") != 0)
			fail_msg("%s: where \"%s\", want \"profile cpu\"", row, v->where);
		fx_done(&f);

		/* Without a profile: the literal default, the model's, or none. */
		snprintf(row, sizeof(row), "%s, --profile none", r.d->name);
		fx_init(&f);
		if (r.id != KNOB_PROFILE)
			cfg_set_flag(&f.c, KNOB_PROFILE, "none");
		row_context(&f.c, &r);
		rc = fx_resolve(&f);
		expect_ok(row, &f, rc);
		v = &f.c.k.v[i];
		if (r.d->type == KT_REMOVED || !r.d->def[0]) {
			if (v->set)
				fail_msg("%s: set to %llu from %s, want no value", row,
				         (unsigned long long)v->u, v->where);
		} else if (!strcmp(r.d->def, "@model")) {
			const struct mdesc *m =
			    mdesc_find(r.model ? r.model : knob_defs[KNOB_MODEL].def);

			assert_non_null(m);
			snprintf(where, sizeof(where), "%s's default", m->name);
			if (!v->set || v->src != KS_DEFAULT || strcmp(v->where, where) != 0)
				fail_msg("%s: set %d, source %s, where \"%s\"; want \"%s\"", row,
				         v->set, src_name(v->src), v->where, where);
		} else {
			check_value(row, v, r.id, r.d->def, KS_DEFAULT, "default");
		}
		fx_done(&f);
	}
}

/* ---- 2. flags --------------------------------------------------------------- */

static void test_rows_flag(void **state)
{
	(void)state;
	for (int i = 0; i < KNOB__COUNT; i++) {
		char row[160];
		struct row r;
		struct fx f;
		int rc;

		row_init(&r, i);
		if (r.d->type == KT_REMOVED)
			continue; /* test_rows_bad: refused from every source */
		snprintf(row, sizeof(row), "%s %s", r.flag, r.good[0]);
		fx_init(&f);
		row_context(&f.c, &r);
		cfg_set_flag(&f.c, r.id, r.good[0]);
		rc = fx_resolve(&f);
		expect_ok(row, &f, rc);
		check_value(row, &f.c.k.v[i], r.id, r.good[0], KS_FLAG, r.flag);
		fx_done(&f);
	}
}

/* ---- 3. environment ---------------------------------------------------------- */

static void test_rows_env(void **state)
{
	(void)state;
	for (int i = 0; i < KNOB__COUNT; i++) {
		char row[200], text[160];
		struct row r;
		struct fx f;
		int rc;

		row_init(&r, i);
		if (r.d->type == KT_REMOVED)
			continue;
		setenv(r.env, r.good[0], 1);

		snprintf(row, sizeof(row), "%s=%s", r.env, r.good[0]);
		fx_init(&f);
		row_context(&f.c, &r);
		rc = fx_resolve(&f);
		expect_ok(row, &f, rc);
		check_value(row, &f.c.k.v[i], r.id, r.good[0], KS_ENV, r.env);
		fx_done(&f);

		snprintf(row, sizeof(row), "%s=%s over %s: %s", r.env, r.good[0], r.key, r.good[1]);
		fx_init(&f);
		row_context(&f.c, &r);
		snprintf(text, sizeof(text), "%s: %s\n", r.key, r.good[1]);
		rc = fx_yaml(&f, row, text);
		expect_ok(row, &f, rc);
		rc = fx_resolve(&f);
		expect_ok(row, &f, rc);
		check_value(row, &f.c.k.v[i], r.id, r.good[0], KS_ENV, r.env);
		fx_done(&f);

		snprintf(row, sizeof(row), "%s %s over %s=%s", r.flag, r.good[2], r.env, r.good[0]);
		fx_init(&f);
		row_context(&f.c, &r);
		cfg_set_flag(&f.c, r.id, r.good[2]);
		rc = fx_resolve(&f);
		expect_ok(row, &f, rc);
		check_value(row, &f.c.k.v[i], r.id, r.good[2], KS_FLAG, r.flag);
		fx_done(&f);

		unsetenv(r.env);
	}
}

/* ---- 4. YAML ------------------------------------------------------------------ */

static void test_rows_yaml(void **state)
{
	(void)state;
	for (int i = 0; i < KNOB__COUNT; i++) {
		char row[200], text[256], where[160];
		struct companion cp;
		struct row r;
		struct fx f;
		int rc;

		row_init(&r, i);
		if (r.d->type == KT_REMOVED)
			continue;
		row_companion(&r, &cp);

		/* The row's key on line 1, a second key on line 2. */
		snprintf(row, sizeof(row), "%s: %s on line 1", r.key, r.good[0]);
		fx_init(&f);
		row_context(&f.c, &r);
		snprintf(text, sizeof(text), "%s: %s\n%s: %s\n", r.key, r.good[0], cp.key,
		         cp.value);
		rc = fx_yaml(&f, row, text);
		expect_ok(row, &f, rc);
		rc = fx_resolve(&f);
		expect_ok(row, &f, rc);
		yaml_where(where, sizeof(where), &f, 1);
		check_value(row, &f.c.k.v[i], r.id, r.good[0], KS_YAML, where);
		yaml_where(where, sizeof(where), &f, 2);
		check_value(row, &f.c.k.v[cp.id], cp.id, cp.value, KS_YAML, where);
		fx_done(&f);

		/* After a comment and the second key: line 3. */
		snprintf(row, sizeof(row), "%s: %s on line 3", r.key, r.good[1]);
		fx_init(&f);
		row_context(&f.c, &r);
		snprintf(text, sizeof(text), "# ignis\n%s: %s\n%s: %s\n", cp.key, cp.value, r.key,
		         r.good[1]);
		rc = fx_yaml(&f, row, text);
		expect_ok(row, &f, rc);
		rc = fx_resolve(&f);
		expect_ok(row, &f, rc);
		yaml_where(where, sizeof(where), &f, 3);
		check_value(row, &f.c.k.v[i], r.id, r.good[1], KS_YAML, where);
		yaml_where(where, sizeof(where), &f, 2);
		check_value(row, &f.c.k.v[cp.id], cp.id, cp.value, KS_YAML, where);
		fx_done(&f);
	}
}

/* A knob of names (KT_NAMES) takes a YAML list too: its items joined with
 * commas, as the flag writes them, placed at the key's line; a list's item
 * holding a comma, a nested list or a mapping is refused at its line. */
static void test_yaml_names_list(void **state)
{
	static const struct {
		const char *text, *want; /* want NULL: refused, the message holding err */
		const char *err;
		int line;
	} rows[] = {
	    {"profile: cpu\nserved_model_name:\n  - qwen3\n  - gpt-4o-mini\n  - 'org/m:1'\n",
	     "qwen3,gpt-4o-mini,org/m:1", NULL, 2},
	    {"served_model_name: [a, b]\nprofile: cpu\n", "a,b", NULL, 1},
	    {"served_model_name: one\n", "one", NULL, 1},
	    {"served_model_name:\n  - a\n  - 'b,c'\n", NULL, "holds a comma", 3},
	    {"served_model_name:\n  - a\n  - [b]\n", NULL, "nested list", 3},
	    {"served_model_name: {a: b}\n", NULL, "holds a mapping", 1},
	    {"served_model_name: [a, a]\n", NULL, "is not a list of names", 1},
	    {"served_model_name: []\n", NULL, "is not a list of names", 1},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		char row[64], where[96];
		struct fx f;
		int rc;

		snprintf(row, sizeof(row), "yaml names row %zu", i);
		fx_init(&f);
		rc = fx_yaml(&f, row, rows[i].text);
		if (!rc)
			rc = fx_resolve(&f);
		snprintf(where, sizeof(where), "%s:%d", f.path, rows[i].line);
		if (rows[i].want) {
			expect_ok(row, &f, rc);
			check_value(row, &f.c.k.v[KNOB_SERVED_MODEL_NAME], KNOB_SERVED_MODEL_NAME,
			            rows[i].want, KS_YAML, where);
		} else {
			expect_config(row, &f, rc);
			check_has(row, "message", f.eb.msg, rows[i].err);
			check_has(row, "message", f.eb.msg, where);
		}
		fx_done(&f);
	}
}

/* ---- 5. precedence: flag > environment > YAML ------------------------------- */

static void test_rows_precedence(void **state)
{
	(void)state;
	for (int i = 0; i < KNOB__COUNT; i++) {
		char row[200], text[160];
		struct row r;
		struct fx f;
		int rc;

		row_init(&r, i);
		if (r.d->type == KT_REMOVED)
			continue;
		snprintf(text, sizeof(text), "%s: %s\n", r.key, r.good[2]);
		setenv(r.env, r.good[1], 1);

		snprintf(row, sizeof(row), "%s: flag %s, env %s, yaml %s", r.d->name, r.good[0],
		         r.good[1], r.good[2]);
		fx_init(&f);
		row_context(&f.c, &r);
		cfg_set_flag(&f.c, r.id, r.good[0]);
		rc = fx_yaml(&f, row, text);
		expect_ok(row, &f, rc);
		rc = fx_resolve(&f);
		expect_ok(row, &f, rc);
		check_value(row, &f.c.k.v[i], r.id, r.good[0], KS_FLAG, r.flag);
		fx_done(&f);

		snprintf(row, sizeof(row), "%s: env %s, yaml %s", r.d->name, r.good[1], r.good[2]);
		fx_init(&f);
		row_context(&f.c, &r);
		rc = fx_yaml(&f, row, text);
		expect_ok(row, &f, rc);
		rc = fx_resolve(&f);
		expect_ok(row, &f, rc);
		check_value(row, &f.c.k.v[i], r.id, r.good[1], KS_ENV, r.env);
		fx_done(&f);

		unsetenv(r.env);
	}
}

/* ---- 6. a bad value from each source ---------------------------------------- */

enum { FROM_FLAG, FROM_ENV, FROM_YAML };

static void test_rows_bad(void **state)
{
	static const char *const from_name[] = {"flag", "env", "yaml"};

	(void)state;
	for (int i = 0; i < KNOB__COUNT; i++) {
		struct row r;

		row_init(&r, i);
		for (int b = 0; b < r.nbad; b++) {
			for (int s = FROM_FLAG; s <= FROM_YAML; s++) {
				char row[200], text[256], where[160], quoted[64];
				struct companion cp;
				struct fx f;
				int rc;

				snprintf(row, sizeof(row), "%s '%s' from the %s", r.d->name,
				         r.bad[b], from_name[s]);
				fx_init(&f);
				row_context(&f.c, &r);
				if (s == FROM_FLAG) {
					cfg_set_flag(&f.c, r.id, r.bad[b]);
					snprintf(where, sizeof(where), "%s", r.flag);
				} else if (s == FROM_ENV) {
					setenv(r.env, r.bad[b], 1);
					snprintf(where, sizeof(where), "%s", r.env);
				} else {
					/* On line 2, after a good key. */
					row_companion(&r, &cp);
					snprintf(text, sizeof(text), "%s: %s\n%s: %s\n", cp.key,
					         cp.value, r.key, r.bad[b]);
					rc = fx_yaml(&f, row, text);
					expect_ok(row, &f, rc);
					yaml_where(where, sizeof(where), &f, 2);
				}
				rc = fx_resolve(&f);
				expect_config(row, &f, rc);
				check_has(row, "message", f.eb.msg, r.flag);
				check_has(row, "message", f.eb.msg, where);
				check_has(row, "message", f.eb.msg, "accepted");
				if (r.d->type == KT_REMOVED) {
					check_has(row, "message", f.eb.msg, r.d->doc);
				} else if (r.d->type == KT_SECRET) {
					/* a key is never repeated, not even a bad one */
					if (strstr(f.eb.msg, r.bad[b]))
						fail_msg("%s: the message shows the key: %s", row,
						         f.eb.msg);
				} else {
					snprintf(quoted, sizeof(quoted), "'%s'", r.bad[b]);
					check_has(row, "message", f.eb.msg, quoted);
				}
				fx_done(&f);
				unsetenv(r.env);
			}
		}
	}
}

/* ---- 7, 8. --help and reference, generated from the table ------------------- */

/* The supervisor: $IGNIS_SUPERVISOR (meson sets it), else beside this build's
 * tests (build/tests/unit/x -> build/supervisor/ignis-supervisor). */
static bool supervisor_path(char *out, size_t cap)
{
	const char *env = getenv("IGNIS_SUPERVISOR");
	char self[PATH_MAX];
	ssize_t n;

	if (env && *env) {
		snprintf(out, cap, "%s", env);
		if (access(out, X_OK) != 0)
			fail_msg("IGNIS_SUPERVISOR=%s is not executable: %s", env, strerror(errno));
		return true;
	}
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return false;
	self[n] = '\0';
	for (int up = 0; up < 3; up++) {
		char *slash = strrchr(self, '/');

		if (!slash)
			return false;
		*slash = '\0';
	}
	snprintf(out, cap, "%s/supervisor/ignis-supervisor", self);
	return access(out, X_OK) == 0;
}

/* The standard output of `supervisor args`, which must exit 0; free() it. */
static char *supervisor_output(const char *row, const char *args)
{
	char path[PATH_MAX], cmd[PATH_MAX + 64];
	size_t len = 0, cap = 4096;
	char *buf;
	FILE *p;
	int st;

	if (!supervisor_path(path, sizeof(path))) {
		print_message("%s: no ignis-supervisor (set IGNIS_SUPERVISOR); skipped\n", row);
		skip();
	}
	snprintf(cmd, sizeof(cmd), "'%s' %s", path, args);
	p = popen(cmd, "r");
	if (!p)
		fail_msg("%s: popen %s: %s", row, cmd, strerror(errno));
	buf = malloc(cap);
	assert_non_null(buf);
	for (;;) {
		size_t got;

		if (cap - len < 1024) {
			cap *= 2;
			buf = realloc(buf, cap);
			assert_non_null(buf);
		}
		got = fread(buf + len, 1, cap - len - 1, p);
		if (got == 0)
			break;
		len += got;
	}
	buf[len] = '\0';
	st = pclose(p);
	if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		free(buf);
		fail_msg("%s: `%s` exited with status %d", row, cmd, st);
	}
	return buf;
}

static const char *default_text(const struct knob_def *d)
{
	if (!strcmp(d->def, "@model"))
		return "per model";
	return d->def[0] ? d->def : "-";
}

static void test_help(void **state)
{
	char *out = supervisor_output("--help", "--help");

	(void)state;
	for (int i = 0; i < KNOB__COUNT; i++) {
		char row[160], want[256];
		struct row r;

		row_init(&r, i);
		snprintf(row, sizeof(row), "--help, %s", r.d->name);
		/* "  --name <type> doc [IGNIS_NAME; default D]", "; make VAR" after
		 * the variable where the knob has one, "; accepted A" before the ']'
		 * where the table says what it accepts */
		snprintf(want, sizeof(want), "  %s ", r.flag);
		if (!strstr(out, want)) {
			free(out);
			fail_msg("%s: no line starts with \"%s\"", row, want);
		}
		snprintf(want, sizeof(want), "[%s%s%s; default %s%s%s]", r.env,
		         knob_make_var(r.id) ? "; make " : "",
		         knob_make_var(r.id) ? knob_make_var(r.id) : "", default_text(r.d),
		         r.d->accepted ? "; accepted " : "", r.d->accepted ? r.d->accepted : "");
		if (!strstr(out, want)) {
			free(out);
			fail_msg("%s: lacks \"%s\"", row, want);
		}
	}
	free(out);
}

static void test_reference(void **state)
{
	char *out = supervisor_output("reference", "reference");

	(void)state;
	for (int i = 0; i < KNOB__COUNT; i++) {
		char row[160], want[320], line[1024];
		const char *at, *end;
		struct row r;

		row_init(&r, i);
		snprintf(row, sizeof(row), "reference, %s", r.d->name);
		/* the make column: `VAR`, or empty */
		snprintf(want, sizeof(want), "| `%s` | `%s` | `%s` | %s%s%s | %s |", r.flag, r.env,
		         r.key, knob_make_var(r.id) ? "`" : "",
		         knob_make_var(r.id) ? knob_make_var(r.id) : "",
		         knob_make_var(r.id) ? "`" : "", default_text(r.d));
		at = strstr(out, want);
		if (!at) {
			free(out);
			fail_msg("%s: lacks \"%s\"", row, want);
		}
		end = strchr(at, '\n');
		snprintf(line, sizeof(line), "%.*s", (int)(end ? end - at : (ptrdiff_t)strlen(at)),
		         at);
		if ((r.d->refused_by == KNOB_REFUSE_DENSE && !strstr(line, "27B's family")) ||
		    (r.d->refused_by == KNOB_REFUSE_MOE && !strstr(line, "Flash-Next's family"))) {
			free(out);
			fail_msg("%s: the line \"%s\" does not say which family refuses it", row,
			         line);
		}
	}
	free(out);
}

/* The make variables (KNOB_MAKE_VARS): each a make and shell identifier, one
 * a knob and none twice, none of the Makefile's own variables (they would
 * be taken for the knob's), none an IGNIS_* name (make hands a command-line
 * variable to the recipe's environment, where the supervisor reads those);
 * the spec's two among them. */
static void test_make_vars(void **state)
{
	static const char *const makefiles_own[] = {"BUILD", "CONFIG", "FUZZ_SECONDS", "SHELL",
	                                            "PATH",  "MAKE",   "MAKEFLAGS"};
	int named = 0;

	(void)state;
	for (int i = 0; i < KNOB__COUNT; i++) {
		const char *v = knob_make_var((enum knob_id)i);

		if (!v)
			continue;
		named++;
		if (knob_defs[i].type == KT_REMOVED)
			fail_msg("%s: a removed knob has the make variable %s", knob_defs[i].name,
			         v);
		if (!v[0] || !(v[0] >= 'A' && v[0] <= 'Z') ||
		    strspn(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != strlen(v))
			fail_msg("%s: make variable '%s' is not an upper-case identifier",
			         knob_defs[i].name, v);
		if (!strncmp(v, "IGNIS_", 6))
			fail_msg("%s: make variable '%s' is an IGNIS_* name", knob_defs[i].name, v);
		for (size_t j = 0; j < sizeof(makefiles_own) / sizeof(makefiles_own[0]); j++)
			if (!strcmp(v, makefiles_own[j]))
				fail_msg("%s: make variable '%s' is the Makefile's own",
				         knob_defs[i].name, v);
		for (int j = 0; j < i; j++)
			if (knob_make_var((enum knob_id)j) &&
			    !strcmp(knob_make_var((enum knob_id)j), v))
				fail_msg("%s and %s: both have the make variable %s",
				         knob_defs[j].name, knob_defs[i].name, v);
	}
	assert_true(named >= 2);
	assert_string_equal(knob_make_var(KNOB_VRAM_ALLOW_EXPERT_CACHE_BELOW_FLOOR),
	                    "ALLOW_EXPERT_CACHE_BELOW_FLOOR");
	assert_string_equal(knob_make_var(KNOB_VRAM_PINNED_EXPERT_BYTES), "PINNED_EXPERT_BYTES");
	assert_null(knob_make_var(KNOB_RUNTIME_DIR));
}

/* ---- cross-knob rules --------------------------------------------------------- */

enum ex_kind {
	EX_END = 0,
	EX_VALUE,       /* set, u, src (and where, tokens) */
	EX_UNSET,       /* no value */
	EX_PASSED_OVER, /* no value, or 0 from a source other than the profile */
	EX_LANES,       /* struct knobs' lanes == u */
};

struct expect {
	enum ex_kind kind;
	enum knob_id id;
	uint64_t u;
	enum knob_src src;
	const char *where; /* NULL: not checked; "@file:N" the YAML file's line N */
	bool tokens;
};

struct rule {
	const char *name;
	const char *model;    /* --model, NULL: none */
	const char *flags[4]; /* "name=value", or "name" for a bare switch ("on") */
	const char *env[3];   /* "IGNIS_NAME=value" */
	const char *yaml;     /* the file's text, NULL: none */
	int rc;
	const char *words[6]; /* in the message; "@file:N" the YAML file's line N */
	struct expect ex[6];
};

#define GiB 1073741824ull
#define MiB 1048576ull

/* Expectations: a value, no value, passed over (none, or 0 not from the
 * profile), the lanes. */
#define VAL(knob, n, source, wh)                                                                   \
	{                                                                                          \
		.kind = EX_VALUE, .id = KNOB_##knob, .u = (n), .src = (source), .where = (wh)      \
	}
#define TOKENS(knob, n, source, wh)                                                                \
	{                                                                                          \
		.kind = EX_VALUE, .id = KNOB_##knob, .u = (n), .src = (source), .where = (wh),     \
		.tokens = true                                                                     \
	}
#define UNSET(knob)                                                                                \
	{                                                                                          \
		.kind = EX_UNSET, .id = KNOB_##knob                                                \
	}
#define OVER(knob)                                                                                 \
	{                                                                                          \
		.kind = EX_PASSED_OVER, .id = KNOB_##knob                                          \
	}
#define LANES(n)                                                                                   \
	{                                                                                          \
		.kind = EX_LANES, .u = (n)                                                         \
	}
#define RTX "profile rtx5090"

static const struct rule rules[] = {
    /* The removed knob: refused wherever named, naming both replacements. */
    {.name = "--retained-slots 4",
     .flags = {"retained-slots=4"},
     .rc = IG_E_CONFIG,
     .words = {"--retained-slots", "--reuse-retained-device", "--reuse-retained-host"}},
    {.name = "IGNIS_RETAINED_SLOTS=4",
     .env = {"IGNIS_RETAINED_SLOTS=4"},
     .rc = IG_E_CONFIG,
     .words = {"IGNIS_RETAINED_SLOTS", "--reuse-retained-device", "--reuse-retained-host"}},
    {.name = "retained_slots in YAML",
     .yaml = "retained_slots: 4\n",
     .rc = IG_E_CONFIG,
     .words = {"@file:1", "--reuse-retained-device", "--reuse-retained-host"}},

    /* Knobs the model's family refuses when named; a profile's are passed over. */
    {.name = "--spec-decode-lanes 2 on the 27b",
     .model = "27b",
     .flags = {"spec-decode-lanes=2"},
     .rc = IG_E_CONFIG,
     .words = {"--spec-decode-lanes", "qwen3.8-27b", "remove it"}},
    {.name = "IGNIS_SPEC_DECODE_LANES=2 on the 27b",
     .model = "27b",
     .env = {"IGNIS_SPEC_DECODE_LANES=2"},
     .rc = IG_E_CONFIG,
     .words = {"--spec-decode-lanes", "IGNIS_SPEC_DECODE_LANES", "qwen3.8-27b"}},
    {.name = "spec_decode_lanes in YAML on the 27b",
     .model = "27b",
     .yaml = "spec_decode_lanes: 2\n",
     .rc = IG_E_CONFIG,
     .words = {"--spec-decode-lanes", "@file:1", "qwen3.8-27b"}},
    {.name = "--vram-allow-expert-cache-below-floor on the 27b",
     .model = "27b",
     .flags = {"vram-allow-expert-cache-below-floor"},
     .rc = IG_E_CONFIG,
     .words = {"--vram-allow-expert-cache-below-floor", "qwen3.8-27b"}},
    {.name = "--vram-pinned-expert-bytes 1G on the 27b",
     .model = "27b",
     .flags = {"vram-pinned-expert-bytes=1G"},
     .rc = IG_E_CONFIG,
     .words = {"--vram-pinned-expert-bytes", "qwen3.8-27b"}},
    {.name = "--vram-pinned-expert-bytes 0 on the 27b (named, even at its default)",
     .model = "27b",
     .flags = {"vram-pinned-expert-bytes=0"},
     .rc = IG_E_CONFIG,
     .words = {"--vram-pinned-expert-bytes", "qwen3.8-27b"}},
    {.name = "--vram-adapt-spare-tokens 0 on flash-next",
     .model = "flash-next",
     .flags = {"vram-adapt-spare-tokens=0"},
     .rc = IG_E_CONFIG,
     .words = {"--vram-adapt-spare-tokens", "qwen3.8-flash-next"}},
    {.name = "--vram-adapt-spare-tokens 0 on the 27b",
     .model = "27b",
     .flags = {"vram-adapt-spare-tokens=0"},
     .ex = {VAL(VRAM_ADAPT_SPARE_TOKENS, 0, KS_FLAG, "--vram-adapt-spare-tokens")}},
    {.name = "--vram-pinned-expert-bytes 1G on flash-next",
     .model = "flash-next",
     .flags = {"vram-pinned-expert-bytes=1G"},
     .ex = {VAL(VRAM_PINNED_EXPERT_BYTES, GiB, KS_FLAG, "--vram-pinned-expert-bytes")}},

    /* Profiles. */
    {.name = "--profile rtx5090 --model 27b",
     .model = "27b",
     .flags = {"profile=rtx5090"},
     .ex = {OVER(VRAM_PINNED_EXPERT_BYTES), VAL(VRAM_HEADROOM_BYTES, 1200 * MiB, KS_PROFILE, RTX),
            VAL(MODEL_MAX_CONTEXT, 786432, KS_PROFILE, RTX), VAL(BACKEND, 2, KS_PROFILE, RTX),
            UNSET(SPEC_DECODE_LANES), LANES(8)}},
    {.name = "--profile rtx5090 --model flash-next",
     .model = "flash-next",
     .flags = {"profile=rtx5090"},
     .ex = {VAL(VRAM_HEADROOM_BYTES, 1610612736, KS_PROFILE, RTX),
            VAL(MODEL_MAX_CONTEXT, 589824, KS_PROFILE, RTX),
            VAL(VRAM_PINNED_EXPERT_BYTES, 2147483648, KS_PROFILE, RTX),
            VAL(SPEC_DECODE_LANES, 3, KS_PROFILE, RTX), LANES(3)}},
    {.name = "--profile rtx5090 with --vram-headroom-bytes 2G",
     .model = "27b",
     .flags = {"profile=rtx5090", "vram-headroom-bytes=2G"},
     .ex = {VAL(VRAM_HEADROOM_BYTES, 2 * GiB, KS_FLAG, "--vram-headroom-bytes")}},
    {.name = "--profile rtx5090 with IGNIS_MODEL_MAX_CONTEXT",
     .model = "27b",
     .flags = {"profile=rtx5090"},
     .env = {"IGNIS_MODEL_MAX_CONTEXT=65536"},
     .ex = {VAL(MODEL_MAX_CONTEXT, 65536, KS_ENV, "IGNIS_MODEL_MAX_CONTEXT")}},
    {.name = "profile and headroom in YAML",
     .model = "27b",
     .yaml = "profile: rtx5090\nvram_headroom_bytes: 3G\n",
     .ex = {VAL(VRAM_HEADROOM_BYTES, 3 * GiB, KS_YAML, "@file:2"),
            VAL(PROFILE, 1, KS_YAML, "@file:1"), VAL(BACKEND, 2, KS_PROFILE, RTX)}},
    {.name = "--profile none on the 27b",
     .model = "27b",
     .flags = {"profile=none"},
     .ex = {VAL(VRAM_HEADROOM_BYTES, 1536 * MiB, KS_DEFAULT, "default"),
            VAL(BACKEND, 0, KS_DEFAULT, "default"), UNSET(DEVICE_FREE_BYTES)}},

    /* Headroom and budget (both named: test_headroom_and_budget). */
    {.name = "budget with the rtx5090 profile's headroom",
     .model = "27b",
     .flags = {"profile=rtx5090", "vram-budget-bytes=30G"},
     .ex = {UNSET(VRAM_HEADROOM_BYTES),
            VAL(VRAM_BUDGET_BYTES, 30 * GiB, KS_FLAG, "--vram-budget-bytes")}},
    {.name = "budget with the cpu profile's headroom",
     .flags = {"vram-budget-bytes=32M"},
     .ex = {UNSET(VRAM_HEADROOM_BYTES),
            VAL(VRAM_BUDGET_BYTES, 32 * MiB, KS_FLAG, "--vram-budget-bytes")}},
    {.name = "budget with the built-in headroom",
     .flags = {"profile=none", "vram-budget-bytes=32M"},
     .ex = {UNSET(VRAM_HEADROOM_BYTES)}},

    /* Oversubscription needs a budget. */
    {.name = "--vram-allow-oversubscription without a budget",
     .flags = {"vram-allow-oversubscription"},
     .rc = IG_E_CONFIG,
     .words = {"--vram-allow-oversubscription", "--vram-budget-bytes"}},
    {.name = "IGNIS_VRAM_ALLOW_OVERSUBSCRIPTION=on without a budget",
     .env = {"IGNIS_VRAM_ALLOW_OVERSUBSCRIPTION=on"},
     .rc = IG_E_CONFIG,
     .words = {"IGNIS_VRAM_ALLOW_OVERSUBSCRIPTION", "--vram-budget-bytes"}},
    {.name = "--vram-allow-oversubscription with a budget",
     .flags = {"vram-allow-oversubscription", "vram-budget-bytes=1G"},
     .ex = {VAL(VRAM_ALLOW_OVERSUBSCRIPTION, 1, KS_FLAG, "--vram-allow-oversubscription")}},
    {.name = "--vram-allow-oversubscription off without a budget",
     .flags = {"vram-allow-oversubscription=off"},
     .ex = {VAL(VRAM_ALLOW_OVERSUBSCRIPTION, 0, KS_FLAG, "--vram-allow-oversubscription")}},

    /* Prompt reuse. */
    {.name = "--reuse-prompt off on the 27b",
     .model = "27b",
     .flags = {"reuse-prompt=off"},
     .ex = {VAL(REUSE_RETAINED_HOST, 0, KS_DEFAULT, "--reuse-prompt off (from --reuse-prompt)"),
            VAL(REUSE_RETAINED_DEVICE, 0, KS_DEFAULT, NULL)}},
    {.name = "--reuse-prompt off on flash-next",
     .model = "flash-next",
     .flags = {"reuse-prompt=off"},
     .ex = {VAL(REUSE_RETAINED_HOST, 0, KS_DEFAULT, "--reuse-prompt off (from --reuse-prompt)")}},
    {.name = "--reuse-prompt off with --reuse-retained-host 3",
     .model = "27b",
     .flags = {"reuse-prompt=off", "reuse-retained-host=3"},
     .ex = {VAL(REUSE_RETAINED_HOST, 3, KS_FLAG, "--reuse-retained-host")}},
    {.name = "--reuse-prompt off with --reuse-retained-interactive-ttl 10",
     .flags = {"reuse-prompt=off", "reuse-retained-interactive-ttl=10"},
     .rc = IG_E_CONFIG,
     .words = {"--reuse-retained-interactive-ttl", "--reuse-prompt"}},
    {.name = "reuse_prompt off in YAML with IGNIS_REUSE_RETAINED_INTERACTIVE_TTL",
     .env = {"IGNIS_REUSE_RETAINED_INTERACTIVE_TTL=10"},
     .yaml = "reuse_prompt: off\n",
     .rc = IG_E_CONFIG,
     .words = {"IGNIS_REUSE_RETAINED_INTERACTIVE_TTL", "@file:1"}},

    /* Per-model defaults. */
    {.name = "the 27b's defaults",
     .model = "27b",
     .ex = {VAL(REUSE_RETAINED_HOST, 16, KS_DEFAULT, "qwen3.8-27b's default"),
            VAL(REUSE_KV_DISK_BYTES, 0, KS_DEFAULT, "qwen3.8-27b's default"),
            UNSET(SPEC_DECODE_LANES), LANES(8)}},
    {.name = "flash-next's defaults",
     .model = "flash-next",
     .ex = {VAL(REUSE_RETAINED_HOST, 8, KS_DEFAULT, "qwen3.8-flash-next's default"),
            VAL(SPEC_DECODE_LANES, 3, KS_DEFAULT, "qwen3.8-flash-next's default"),
            VAL(REUSE_KV_DISK_BYTES, 4 * GiB, KS_DEFAULT, "qwen3.8-flash-next's default"),
            LANES(3)}},
    {.name = "flash-next at 5 lanes keeps 8 retained host slots",
     .model = "flash-next",
     .flags = {"spec-decode-lanes=5"},
     .ex = {VAL(REUSE_RETAINED_HOST, 8, KS_DEFAULT, NULL), LANES(5)}},
    {.name = "tiny-dense's retained host slots (two per lane)",
     .model = "tiny-dense",
     .ex = {VAL(REUSE_RETAINED_HOST, 8, KS_DEFAULT, "tiny-dense's default"), LANES(4)}},
    {.name = "--spec-decode-lanes 9 on flash-next",
     .model = "flash-next",
     .flags = {"spec-decode-lanes=9"},
     .rc = IG_E_CONFIG,
     .words = {"--spec-decode-lanes", "'9'", "out of range", "1..8", "accepted"}},
    {.name = "--spec-decode-lanes 0 on flash-next",
     .model = "flash-next",
     .flags = {"spec-decode-lanes=0"},
     .rc = IG_E_CONFIG,
     .words = {"--spec-decode-lanes", "'0'", "out of range", "1..8"}},

    /* Sizes' ranges, from the table: each refusal names the range, in the
     * table's words and in bytes. */
    {.name = "--reuse-move-out-window-bytes 1K",
     .flags = {"reuse-move-out-window-bytes=1K"},
     .rc = IG_E_CONFIG,
     .words = {"--reuse-move-out-window-bytes", "'1K'", "out of range", "4K..4G-1",
               "(4096..4294967295 bytes)", "accepted"}},
    {.name = "IGNIS_REUSE_MOVE_IN_WINDOW_BYTES=4G",
     .env = {"IGNIS_REUSE_MOVE_IN_WINDOW_BYTES=4G"},
     .rc = IG_E_CONFIG,
     .words = {"--reuse-move-in-window-bytes", "'4G'", "IGNIS_REUSE_MOVE_IN_WINDOW_BYTES",
               "out of range", "4K..4G-1"}},
    {.name = "reuse_move_in_window_bytes: 4095 in YAML",
     .yaml = "reuse_move_in_window_bytes: 4095\n",
     .rc = IG_E_CONFIG,
     .words = {"--reuse-move-in-window-bytes", "'4095'", "@file:1", "4K..4G-1"}},
    {.name = "move windows at the ends of their range",
     .flags = {"reuse-move-out-window-bytes=4K", "reuse-move-in-window-bytes=4294967295"},
     .ex = {VAL(REUSE_MOVE_OUT_WINDOW_BYTES, 4096, KS_FLAG, "--reuse-move-out-window-bytes"),
            VAL(REUSE_MOVE_IN_WINDOW_BYTES, 4294967295ull, KS_FLAG,
                "--reuse-move-in-window-bytes")}},
    {.name = "--reuse-kv-ram-bytes 32K",
     .flags = {"reuse-kv-ram-bytes=32K"},
     .rc = IG_E_CONFIG,
     .words = {"--reuse-kv-ram-bytes", "'32K'", "out of range", "64K..256T-256M-64K",
               "(65536..281474708209664 bytes)"}},
    {.name = "--reuse-kv-ram-bytes 256T",
     .flags = {"reuse-kv-ram-bytes=256T"},
     .rc = IG_E_CONFIG,
     .words = {"--reuse-kv-ram-bytes", "'256T'", "out of range"}},
    {.name = "--reuse-kv-ram-bytes 64K",
     .flags = {"reuse-kv-ram-bytes=64K"},
     .ex = {VAL(REUSE_KV_RAM_BYTES, 65536, KS_FLAG, "--reuse-kv-ram-bytes")}},
    {.name = "--reuse-kv-disk-bytes 65535 on flash-next",
     .model = "flash-next",
     .flags = {"reuse-kv-disk-bytes=65535"},
     .rc = IG_E_CONFIG,
     .words = {"--reuse-kv-disk-bytes", "'65535'", "out of range",
               "0, or at least 64K (65536 bytes)"}},
    {.name = "--reuse-kv-disk-bytes 0 and 64K",
     .model = "flash-next",
     .flags = {"reuse-kv-disk-bytes=0"},
     .env = {"IGNIS_REUSE_KV_RAM_BYTES=64K"},
     .ex = {VAL(REUSE_KV_DISK_BYTES, 0, KS_FLAG, "--reuse-kv-disk-bytes"),
            VAL(REUSE_KV_RAM_BYTES, 65536, KS_ENV, "IGNIS_REUSE_KV_RAM_BYTES")}},
    {.name = "--reuse-kv-disk-bytes 64K",
     .flags = {"reuse-kv-disk-bytes=64K"},
     .ex = {VAL(REUSE_KV_DISK_BYTES, 65536, KS_FLAG, "--reuse-kv-disk-bytes")}},

    /* Pool sizes in bytes or tokens. */
    {.name = "--vram-kv-pool-bytes 512Ktok",
     .flags = {"vram-kv-pool-bytes=512Ktok"},
     .ex = {TOKENS(VRAM_KV_POOL_BYTES, 524288, KS_FLAG, "--vram-kv-pool-bytes")}},
    {.name = "--vram-kv-pool-bytes 2G",
     .flags = {"vram-kv-pool-bytes=2G"},
     .ex = {VAL(VRAM_KV_POOL_BYTES, 2 * GiB, KS_FLAG, "--vram-kv-pool-bytes")}},
    {.name = "--vram-headroom-bytes 512Ktok (a size only)",
     .flags = {"vram-headroom-bytes=512Ktok"},
     .rc = IG_E_CONFIG,
     .words = {"--vram-headroom-bytes", "'512Ktok'", "accepted"}},

    /* The YAML file itself. */
    {.name = "an unknown YAML key",
     .yaml = "model: 27b\nno_such_knob: 1\n",
     .rc = IG_E_CONFIG,
     .words = {"@file:2", "no_such_knob", "accepted"}},
    {.name = "an unknown YAML key names its line and the nearest key",
     .yaml = "model: 27b\n# the headroom\nvram_headroom: 1G\n",
     .rc = IG_E_CONFIG,
     .words = {"@file:3", "'vram_headroom'", "nearest knob key is 'vram_headroom_bytes'",
               "accepted"}},
    {.name = "a YAML key given twice: at the second, naming the first",
     .yaml = "model: tiny-dense\nvram_headroom_bytes: 8M\nbackend: cpu\n"
             "vram_headroom_bytes: 16M\n",
     .rc = IG_E_CONFIG,
     .words = {"'vram_headroom_bytes'", "@file:4", "first given at line 2", "keep one"}},
    {.name = "a YAML key given twice, once quoted",
     .yaml = "backend: cpu\n\n\"backend\": cuda\n",
     .rc = IG_E_CONFIG,
     .words = {"'backend'", "@file:3", "first given at line 1"}},
    {.name = "a key's line is the key's, not a block scalar's text that looks like it",
     .yaml = "reuse_kv_disk_path: |\n  /tmp/a\n  model: 27b\nmodel: tiny-moe\n",
     .ex = {VAL(MODEL, 0, KS_YAML, "@file:4"), VAL(REUSE_KV_DISK_PATH, 0, KS_YAML, "@file:1")}},
    {.name = "a YAML list for a scalar",
     .yaml = "model: [27b, tiny-moe]\n",
     .rc = IG_E_CONFIG,
     .words = {"@file", "accepted"}},
    {.name = "malformed YAML",
     .yaml = "model: 27b\n  backend: : cpu\n",
     .rc = IG_E_CONFIG,
     .words = {"@file", "accepted"}},
    {.name = "a YAML file of comments only sets nothing",
     .yaml = "# nothing here\n",
     .ex = {VAL(MODEL, 0, KS_DEFAULT, "default")}},
};

/* "@file:N" -> "<path>:N", "@file" -> "<path>"; others as they are. */
static const char *rule_text(const struct fx *f, const char *w, char *buf, size_t cap)
{
	if (strncmp(w, "@file", 5) != 0)
		return w;
	snprintf(buf, cap, "%s%s", f->path, w + 5);
	return buf;
}

static enum knob_id knob_by_name(const char *row, const char *name, size_t n)
{
	for (int i = 0; i < KNOB__COUNT; i++)
		if (strlen(knob_defs[i].name) == n && !strncmp(knob_defs[i].name, name, n))
			return (enum knob_id)i;
	fail_msg("%s: no knob '%.*s' in the table", row, (int)n, name);
	return KNOB__COUNT;
}

static void rule_expect(const char *row, const struct fx *f, const struct expect *e)
{
	const struct knob_value *v = &f->c.k.v[e->id];
	char buf[200];
	const char *where;

	switch (e->kind) {
	case EX_END:
		return;
	case EX_VALUE:
		if (!v->set || v->u != e->u || v->src != e->src || v->tokens != e->tokens)
			fail_msg("%s: %s is set %d, %llu%s from %s (%s); want %llu%s from %s", row,
			         knob_defs[e->id].name, v->set, (unsigned long long)v->u,
			         v->tokens ? " tokens" : "", src_name(v->src), v->where,
			         (unsigned long long)e->u, e->tokens ? " tokens" : "",
			         src_name(e->src));
		if (e->where) {
			where = rule_text(f, e->where, buf, sizeof(buf));
			if (strcmp(v->where, where) != 0)
				fail_msg("%s: %s from \"%s\", want \"%s\"", row,
				         knob_defs[e->id].name, v->where, where);
		}
		return;
	case EX_UNSET:
		if (v->set)
			fail_msg("%s: %s is %llu from %s, want no value", row,
			         knob_defs[e->id].name, (unsigned long long)v->u, v->where);
		return;
	case EX_PASSED_OVER:
		if (v->set && (v->u != 0 || v->src == KS_PROFILE))
			fail_msg("%s: %s is %llu from %s, want it passed over", row,
			         knob_defs[e->id].name, (unsigned long long)v->u, v->where);
		return;
	case EX_LANES:
		if (f->c.k.lanes != e->u)
			fail_msg("%s: lanes %u, want %llu", row, f->c.k.lanes,
			         (unsigned long long)e->u);
		return;
	}
}

static void run_rule(const struct rule *t)
{
	struct fx f;
	int rc = IG_E_OK;

	fx_init(&f);
	if (t->model)
		cfg_set_flag(&f.c, KNOB_MODEL, t->model);
	for (size_t i = 0; i < sizeof(t->flags) / sizeof(t->flags[0]) && t->flags[i]; i++) {
		const char *eq = strchr(t->flags[i], '=');
		size_t n = eq ? (size_t)(eq - t->flags[i]) : strlen(t->flags[i]);

		cfg_set_flag(&f.c, knob_by_name(t->name, t->flags[i], n), eq ? eq + 1 : "on");
	}
	for (size_t i = 0; i < sizeof(t->env) / sizeof(t->env[0]) && t->env[i]; i++) {
		const char *eq = strchr(t->env[i], '=');
		char name[96];

		assert_non_null(eq);
		snprintf(name, sizeof(name), "%.*s", (int)(eq - t->env[i]), t->env[i]);
		setenv(name, eq + 1, 1);
	}
	if (t->yaml)
		rc = fx_yaml(&f, t->name, t->yaml);
	if (rc == IG_E_OK)
		rc = fx_resolve(&f);
	if (rc != t->rc)
		fail_msg("%s: %s, want %s: %s", t->name, ig_err_name(rc), ig_err_name(t->rc),
		         f.eb.msg);
	for (size_t i = 0; rc && i < sizeof(t->words) / sizeof(t->words[0]) && t->words[i]; i++) {
		char buf[200];

		check_has(t->name, "message", f.eb.msg,
		          rule_text(&f, t->words[i], buf, sizeof(buf)));
	}
	for (size_t i = 0; !rc && i < sizeof(t->ex) / sizeof(t->ex[0]); i++)
		rule_expect(t->name, &f, &t->ex[i]);
	fx_done(&f);
	env_clear();
}

static void test_rules(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++)
		run_rule(&rules[i]);
}

/* Headroom and budget both named, from every pair of sources: refused, naming
 * both. */
static void test_headroom_and_budget(void **state)
{
	static const char *const from_name[] = {"flag", "env", "yaml"};

	(void)state;
	for (int hs = FROM_FLAG; hs <= FROM_YAML; hs++) {
		for (int bs = FROM_FLAG; bs <= FROM_YAML; bs++) {
			char row[160], text[128] = "", hw[160], bw[160];
			int line = 0, hline = 0, bline = 0;
			struct fx f;
			int rc;

			snprintf(row, sizeof(row), "headroom from the %s, budget from the %s",
			         from_name[hs], from_name[bs]);
			fx_init(&f);
			if (hs == FROM_FLAG)
				cfg_set_flag(&f.c, KNOB_VRAM_HEADROOM_BYTES, "2G");
			else if (hs == FROM_ENV)
				setenv("IGNIS_VRAM_HEADROOM_BYTES", "2G", 1);
			else {
				strcat(text, "vram_headroom_bytes: 2G\n");
				hline = ++line;
			}
			if (bs == FROM_FLAG)
				cfg_set_flag(&f.c, KNOB_VRAM_BUDGET_BYTES, "20G");
			else if (bs == FROM_ENV)
				setenv("IGNIS_VRAM_BUDGET_BYTES", "20G", 1);
			else {
				strcat(text, "vram_budget_bytes: 20G\n");
				bline = ++line;
			}
			if (line) {
				rc = fx_yaml(&f, row, text);
				expect_ok(row, &f, rc);
			}
			rc = fx_resolve(&f);
			expect_config(row, &f, rc);
			if (hs == FROM_FLAG)
				snprintf(hw, sizeof(hw), "--vram-headroom-bytes");
			else if (hs == FROM_ENV)
				snprintf(hw, sizeof(hw), "IGNIS_VRAM_HEADROOM_BYTES");
			else
				yaml_where(hw, sizeof(hw), &f, hline);
			if (bs == FROM_FLAG)
				snprintf(bw, sizeof(bw), "--vram-budget-bytes");
			else if (bs == FROM_ENV)
				snprintf(bw, sizeof(bw), "IGNIS_VRAM_BUDGET_BYTES");
			else
				yaml_where(bw, sizeof(bw), &f, bline);
			check_has(row, "message", f.eb.msg, hw);
			check_has(row, "message", f.eb.msg, bw);
			check_has(row, "message", f.eb.msg, "keep one");
			fx_done(&f);
			env_clear();
		}
	}
}

/* ---- 9. IGNIS_* variables no knob reads: a warning naming the nearest ------- */

struct env_row {
	const char *env;     /* "NAME=value" */
	const char *nearest; /* the nearest knob's variable; NULL: not warned; "*": any */
};

static const struct env_row env_rows[] = {
    /* typos: warned, with the knob meant */
    {"IGNIS_VRAM_BUDGET=1G", "IGNIS_VRAM_BUDGET_BYTES"},
    {"IGNIS_MODLE=27b", "IGNIS_MODEL"},
    {"IGNIS_RUNTIMEDIR=/x", "IGNIS_RUNTIME_DIR"},
    {"IGNIS_SERVER_METRIC_BIND=127.0.0.1:9", "IGNIS_SERVER_METRICS_BIND"},
    {"IGNIS_REUSE_KV_RAM=1G", "IGNIS_REUSE_KV_RAM_BYTES"},
    {"IGNIS_VRAM_BUDGET_BYTES_=1G", "IGNIS_VRAM_BUDGET_BYTES"},
    {"IGNIS_SERVER=tcp://127.0.0.1:5555", "IGNIS_SERVER_BIND"},
    {"IGNIS_KVSTORE=/x", "*"},
    {"IGNIS_SCHED=1", "*"}, /* the prefix is IGNIS_SCHED_ */
    {"IGNIS_=1", "*"},
    /* knobs' variables, the removed one included (it refuses the start) */
    {"IGNIS_MODEL=27b", NULL},
    {"IGNIS_RETAINED_SLOTS=4", NULL},
    {"IGNIS_SERVER_BIND=tcp://127.0.0.1:5555", NULL},
    /* read by a program, a script or a test */
    {"IGNIS_KVSTORED=/x", NULL},
    {"IGNIS_SUPERVISOR=/x", NULL},
    {"IGNIS_CONFIG=/etc/ignis.yaml", NULL},
    {"IGNIS_TEST_SEED=1", NULL},
    {"IGNIS_TEST_KVDISK_IGNORE_VOLUME=1", NULL},
    {"IGNIS_SCHED_ONLY=x", NULL},
    {"IGNIS_GOLDEN_DIR=x", NULL},
    {"IGNIS_UPDATE_GOLDEN=1", NULL},
    {"IGNIS_SEED=1", NULL},
    /* not ours, or empty (unset) */
    {"IGNIS_VRAM_BUDGET=", NULL},
    {"XIGNIS_MODEL=27b", NULL},
    {"ignis_model=27b", NULL},
    {"PATH=/bin", NULL},
};

static void test_env_unknown(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(env_rows) / sizeof(env_rows[0]); i++) {
		const struct env_row *r = &env_rows[i];
		char *envp[3] = {"HOME=/root", (char *)r->env, NULL};
		struct knob_env_unknown u[2];
		size_t n = knob_env_unknown(envp, u, 2);
		char want[96];

		if (!r->nearest) {
			if (n)
				fail_msg("%s: warned (nearest %s), want no warning", r->env,
				         knob_defs[u[0].nearest].name);
			continue;
		}
		if (n != 1)
			fail_msg("%s: %zu warnings, want 1", r->env, n);
		if (u[0].name != r->env || u[0].len != (size_t)(strchr(r->env, '=') - r->env))
			fail_msg("%s: names '%.*s'", r->env, (int)u[0].len, u[0].name);
		if (knob_defs[u[0].nearest].type == KT_REMOVED)
			fail_msg("%s: proposes the removed %s", r->env,
			         knob_defs[u[0].nearest].name);
		if (strcmp(r->nearest, "*") == 0)
			continue;
		knob_env(u[0].nearest, want, sizeof(want));
		if (strcmp(want, r->nearest) != 0)
			fail_msg("%s: nearest %s, want %s", r->env, want, r->nearest);
	}
	/* Several at once: counted past the room given, filled up to it. */
	{
		char *envp[] = {"IGNIS_MODLE=1", "IGNIS_MODEL=27b", "IGNIS_BAKEND=cpu",
		                "IGNIS_PROFIL=cpu", NULL};
		struct knob_env_unknown u[2];

		assert_int_equal(knob_env_unknown(envp, u, 2), 3);
		assert_int_equal(u[0].nearest, KNOB_MODEL);
		assert_int_equal(u[1].nearest, KNOB_BACKEND);
		assert_int_equal(knob_env_unknown(envp, NULL, 0), 3);
	}
	/* Every spelling finds its own knob at distance 0. */
	for (int i = 0; i < KNOB__COUNT; i++) {
		char flag[96], env[96], key[96];

		if (knob_defs[i].type == KT_REMOVED)
			continue;
		knob_flag((enum knob_id)i, flag, sizeof(flag));
		knob_env((enum knob_id)i, env, sizeof(env));
		knob_yaml_key((enum knob_id)i, key, sizeof(key));
		assert_int_equal(knob_nearest(flag, strlen(flag), KNOB_AS_FLAG), i);
		assert_int_equal(knob_nearest(env, strlen(env), KNOB_AS_ENV), i);
		assert_int_equal(knob_nearest(key, strlen(key), KNOB_AS_YAML), i);
	}
}

/* `supervisor args` with the environment as it is: its exit status and its
 * standard error (free() it). */
static char *supervisor_stderr(const char *row, const char *args, int *status)
{
	char path[PATH_MAX], cmd[PATH_MAX + 96];
	size_t len = 0, cap = 8192;
	char *buf;
	FILE *p;
	int st;

	if (!supervisor_path(path, sizeof(path))) {
		print_message("%s: no ignis-supervisor (set IGNIS_SUPERVISOR); skipped\n", row);
		skip();
	}
	snprintf(cmd, sizeof(cmd), "'%s' %s 2>&1 >/dev/null", path, args);
	p = popen(cmd, "r");
	if (!p)
		fail_msg("%s: popen %s: %s", row, cmd, strerror(errno));
	buf = malloc(cap);
	assert_non_null(buf);
	len = fread(buf, 1, cap - 1, p);
	buf[len] = '\0';
	st = pclose(p);
	*status = st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
	return buf;
}

static void test_env_warning(void **state)
{
	static const char *const vars[] = {"IGNIS_VRAM_BUDGET", "IGNIS_KVSTORED", "IGNIS_TEST_SEED",
	                                   "IGNIS_SCHED_ONLY"};
	const char *row = "plan with IGNIS_VRAM_BUDGET, IGNIS_KVSTORED, IGNIS_TEST_SEED";
	char *err;
	int st, lines = 0;

	(void)state;
	setenv("IGNIS_VRAM_BUDGET", "1G", 1);
	setenv("IGNIS_KVSTORED", "/nonexistent/ignis-kvstored", 1);
	setenv("IGNIS_TEST_SEED", "3", 1);
	setenv("IGNIS_SCHED_ONLY", "x", 1);
	err = supervisor_stderr(row, "plan --json", &st);
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
	for (const char *p = err; *p; p++)
		lines += *p == '\n';
	if (st != 0 || lines != 1 ||
	    !strstr(err, "ignis-supervisor: warning: IGNIS_VRAM_BUDGET is set, but no knob reads "
	                 "it (ignored); the nearest knob's variable is IGNIS_VRAM_BUDGET_BYTES "
	                 "(--vram-budget-bytes)\n")) {
		print_message("%s: exit %d, stderr:\n%s", row, st, err);
		free(err);
		fail_msg("%s: want exit 0 and one warning naming IGNIS_VRAM_BUDGET_BYTES", row);
	}
	free(err);
	/* Nothing to warn about: nothing on stderr (meson's IGNIS_SUPERVISOR
	 * included). */
	err = supervisor_stderr("plan, no stray variable", "plan --json", &st);
	if (st != 0 || err[0]) {
		print_message("exit %d, stderr:\n%s", st, err);
		free(err);
		fail_msg("plan with no stray variable: want exit 0 and an empty stderr");
	}
	free(err);
}

/* knob_ranges reads the table's ranges as this file spells them by hand. */
static void test_ranges(void **state)
{
	static const struct {
		enum knob_id id;
		int n;
		struct knob_range r[2];
	} rows[] = {
	    {KNOB_REUSE_MOVE_OUT_WINDOW_BYTES, 1, {{4096, 4294967295ull}}},
	    {KNOB_REUSE_MOVE_IN_WINDOW_BYTES, 1, {{4096, 4294967295ull}}},
	    {KNOB_REUSE_KV_RAM_BYTES, 1, {{65536, (4294967295ull - 4096) * 65536}}},
	    {KNOB_REUSE_KV_DISK_BYTES, 2, {{0, 0}, {65536, UINT64_MAX}}},
	    {KNOB_SPEC_DECODE_LANES, 1, {{1, 8}}},
	    {KNOB_MODEL_MAX_CONTEXT, 1, {{64, 16777216}}},
	    {KNOB_VRAM_HEADROOM_BYTES, 0, {{0, 0}}},
	    {KNOB_VRAM_KV_POOL_BYTES, 0, {{0, 0}}},
	    {KNOB_MODEL_KV_FORMAT, 0, {{0, 0}}},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct knob_range got[2] = {{0, 0}, {0, 0}};
		/* with room for one, the count is still all of them */
		int n = knob_ranges(rows[i].id, got, 1);

		if (n != rows[i].n)
			fail_msg("%s: %d ranges, want %d", knob_defs[rows[i].id].name, n,
			         rows[i].n);
		n = knob_ranges(rows[i].id, got, 2);
		for (int j = 0; j < n; j++)
			if (got[j].lo != rows[i].r[j].lo || got[j].hi != rows[i].r[j].hi)
				fail_msg("%s: range %d is %llu..%llu, want %llu..%llu",
				         knob_defs[rows[i].id].name, j,
				         (unsigned long long)got[j].lo,
				         (unsigned long long)got[j].hi,
				         (unsigned long long)rows[i].r[j].lo,
				         (unsigned long long)rows[i].r[j].hi);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_rows_spellings, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_ranges, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_rows_default, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_rows_flag, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_rows_env, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_rows_yaml, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_yaml_names_list, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_rows_precedence, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_rows_bad, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_help, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_reference, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_make_vars, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_rules, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_headroom_and_budget, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_env_unknown, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_env_warning, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
