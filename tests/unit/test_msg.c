/*
 * test_msg.c - the codec, derived from the declarations in proto/msg.h.
 *
 * Every message type gets, without a line written for it here:
 *   - golden bytes at its lower and upper limits (tests/golden/<type>.<min|max>.hex;
 *     IGNIS_UPDATE_GOLDEN=1 rewrites them after a deliberate change);
 *   - a decode of every truncation of those bytes (TRUNCATED, never a read past
 *     the end: each prefix sits in a buffer of exactly its size);
 *   - per field: missing, wrong type, below and above its limits, duplicated,
 *     and an unknown extra field, each with its exact error code;
 *   - seeded random round trips (the seed is printed).
 * A hand-written table adds malformed inputs no declaration describes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <msgpack.h>

#include "msg.h"

/* ---- samples generated from the declarations ------------------------------ */

enum variant { V_MIN, V_MAX, V_RANDOM };

/* Strings of a sample live here (views point into it). */
static char pool[1 << 20];
static size_t pool_used;
static uint64_t rng_state;

static uint64_t rng(void)
{
	/* splitmix64 */
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t pick(uint64_t lo, uint64_t hi)
{
	if (hi - lo == UINT64_MAX)
		return rng();
	return lo + rng() % (hi - lo + 1);
}

/* A valid UTF-8 string of exactly n bytes, mixing 1-, 2- and 3-byte chars. */
static struct msg_str make_str(size_t n, enum variant v)
{
	char *p = pool + pool_used;
	size_t i = 0, k = 0;

	assert_true(pool_used + n < sizeof(pool));
	while (i < n) {
		size_t left = n - i;
		int choice = v == V_RANDOM ? (int)(rng() % 3) : (int)(k % 3);

		if (choice == 2 && left >= 3) {
			memcpy(p + i, "\xe2\x82\xac", 3); /* euro sign */
			i += 3;
		} else if (choice == 1 && left >= 2) {
			memcpy(p + i, "\xc3\xa9", 2); /* e acute */
			i += 2;
		} else {
			p[i] = (char)('a' + (k % 26));
			i++;
		}
		k++;
	}
	pool_used += n;
	return (struct msg_str){p, (uint32_t)n};
}

static void fill_rec(const struct msg_rec *r, char *base, enum variant v)
{
	for (uint32_t i = 0; i < r->nfields; i++) {
		const struct msg_field *f = &r->fields[i];
		char *at = base + f->offset;
		uint64_t lo = f->lo, hi = f->hi;

		switch (f->kind) {
		case MSG_K_U64:
			*(uint64_t *)(void *)at = v == V_MIN ? lo : v == V_MAX ? hi : pick(lo, hi);
			break;
		case MSG_K_BOOL:
			*(bool *)(void *)at = v == V_MAX || (v == V_RANDOM && (rng() & 1));
			break;
		case MSG_K_STR: {
			uint64_t n = v == V_MIN ? lo : v == V_MAX ? hi : pick(lo, hi);

			*(struct msg_str *)(void *)at = make_str((size_t)n, v);
			break;
		}
		case MSG_K_ARR: {
			uint64_t n = v == V_MIN ? lo : v == V_MAX ? hi : pick(lo, hi);

			*(uint32_t *)(void *)at = (uint32_t)n;
			for (uint64_t j = 0; j < n; j++)
				fill_rec(f->sub, base + f->elems + j * f->sub->size, v);
			break;
		}
		}
	}
}

static void make_sample(const struct msg_desc *d, enum variant v, struct msg *m)
{
	memset(m, 0, sizeof(*m));
	m->type = d->type;
	m->version = MSG_PROTO_VERSION;
	fill_rec(&d->rec, (char *)&m->u, v);
}

static void encode(const struct msg *m, struct msg_buf *b)
{
	struct ig_errbuf eb;
	int rc;

	memset(b, 0, sizeof(*b));
	rc = msg_encode(m, msg_buf_write, b, &eb);
	if (rc)
		fail_msg("encode %s: %s", msg_type_name(m->type), eb.msg);
}

/* Decode from a heap copy of exactly `len` bytes, so ASan sees any over-read. */
static int decode_exact(const void *bytes, size_t len, struct msg *out, struct ig_errbuf *eb,
                        void **keep)
{
	void *copy = malloc(len ? len : 1);
	int rc;

	memcpy(copy, bytes, len);
	rc = msg_decode(copy, len, out, eb);
	if (keep)
		*keep = copy;
	else
		free(copy);
	return rc;
}

/* ---- declarations -------------------------------------------------------- */

static void check_rec_decl(const struct msg_rec *r)
{
	assert_true(r->nfields >= 1);
	assert_true(r->nfields <= 64);
	for (uint32_t i = 0; i < r->nfields; i++) {
		const struct msg_field *f = &r->fields[i];

		assert_true(strcmp(f->name, "t") != 0 && strcmp(f->name, "v") != 0);
		assert_true(f->lo <= f->hi);
		for (uint32_t j = 0; j < i; j++)
			assert_string_not_equal(f->name, r->fields[j].name);
		if (f->kind == MSG_K_ARR) {
			assert_non_null(f->sub);
			check_rec_decl(f->sub);
		}
		if (f->kind == MSG_K_STR)
			assert_true(f->hi <= MSG_MAX_BYTES);
	}
}

static void test_declarations(void **state)
{
	(void)state;
	assert_true(msg_ndescs >= 8);
	for (size_t i = 0; i < msg_ndescs; i++) {
		const struct msg_desc *d = &msg_descs[i];

		assert_true(d->type > 0);
		for (size_t j = 0; j < i; j++) {
			assert_int_not_equal(d->type, msg_descs[j].type);
			assert_string_not_equal(d->rec.name, msg_descs[j].rec.name);
		}
		check_rec_decl(&d->rec);
		assert_ptr_equal(msg_desc_find(d->type), d);
		/* Every message at its limits fits in one control message. */
		if (msg_max_encoded(d) > MSG_MAX_BYTES)
			fail_msg("%s can encode to %zu bytes > MSG_MAX_BYTES", d->rec.name,
			         msg_max_encoded(d));
	}
	assert_null(msg_desc_find(0));
	assert_string_equal(msg_type_name(9999), "unknown");
}

/* ---- golden bytes -------------------------------------------------------- */

static const char *golden_dir(void)
{
	const char *d = getenv("IGNIS_GOLDEN_DIR");

	return d ? d : "tests/golden";
}

static char *to_hex(const char *p, size_t n)
{
	char *h = malloc(2 * n + 2);

	for (size_t i = 0; i < n; i++)
		sprintf(h + 2 * i, "%02x", (unsigned char)p[i]);
	h[2 * n] = '\n';
	h[2 * n + 1] = '\0';
	return h;
}

static char *read_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)n + 1);
	if (fread(buf, 1, (size_t)n, f) != (size_t)n)
		n = 0;
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static size_t from_hex(const char *h, char *out)
{
	size_t n = 0;

	while (h[0] && h[1] && h[0] != '\n') {
		unsigned v;

		sscanf(h, "%2x", &v);
		out[n++] = (char)v;
		h += 2;
	}
	return n;
}

static void test_golden(void **state)
{
	static const char *const vname[] = {"min", "max"};
	bool update = getenv("IGNIS_UPDATE_GOLDEN") != NULL;

	(void)state;
	for (size_t i = 0; i < msg_ndescs; i++) {
		for (int v = V_MIN; v <= V_MAX; v++) {
			const struct msg_desc *d = &msg_descs[i];
			char path[512], *hex, *want, *bytes;
			struct msg m, back;
			struct msg_buf b;
			struct ig_errbuf eb;
			void *keep;
			size_t n;
			int rc;

			pool_used = 0;
			make_sample(d, (enum variant)v, &m);
			encode(&m, &b);
			hex = to_hex(b.p, b.n);
			snprintf(path, sizeof(path), "%s/%s.%s.hex", golden_dir(), d->rec.name,
			         vname[v]);
			if (update) {
				FILE *f = fopen(path, "w");

				assert_non_null(f);
				fputs(hex, f);
				fclose(f);
			}
			want = read_file(path);
			if (!want)
				fail_msg("missing golden file %s: run the unit tests once with "
				         "IGNIS_UPDATE_GOLDEN=1 and review the new file",
				         path);
			if (strcmp(want, hex) != 0)
				fail_msg("%s: encoding changed.\n want %s got  %s(a deliberate "
				         "change needs MSG_PROTO_VERSION bumped and "
				         "IGNIS_UPDATE_GOLDEN=1)",
				         path, want, hex);
			/* The golden bytes decode back to the sample. */
			bytes = malloc(strlen(want) / 2 + 1);
			n = from_hex(want, bytes);
			rc = decode_exact(bytes, n, &back, &eb, &keep);
			if (rc)
				fail_msg("%s: decode: %s", path, eb.msg);
			assert_true(msg_equal(&m, &back));
			assert_int_equal(back.version, MSG_PROTO_VERSION);
			free(keep);
			/* Every proper prefix is truncated, and nothing reads past it. */
			for (size_t k = 0; k < n; k++) {
				rc = decode_exact(bytes, k, &back, &eb, NULL);
				if (rc != IG_E_PROTO_TRUNCATED)
					fail_msg("%s: prefix of %zu/%zu bytes gave %s (%s)", path,
					         k, n, ig_err_name(rc), eb.msg);
			}
			free(bytes);
			free(want);
			free(hex);
			msg_buf_release(&b);
		}
	}
}

/* ---- random round trips -------------------------------------------------- */

static void test_roundtrip_random(void **state)
{
	const char *env = getenv("IGNIS_TEST_SEED");
	uint64_t seed = env ? strtoull(env, NULL, 0) : 0x1617u;

	(void)state;
	printf("# roundtrip seed %llu (set IGNIS_TEST_SEED to repeat another)\n",
	       (unsigned long long)seed);
	rng_state = seed;
	for (int it = 0; it < 2000; it++) {
		const struct msg_desc *d = &msg_descs[rng() % msg_ndescs];
		struct msg m, back;
		struct msg_buf b;
		struct ig_errbuf eb;
		void *keep;
		int rc;

		pool_used = 0;
		make_sample(d, V_RANDOM, &m);
		encode(&m, &b);
		rc = decode_exact(b.p, b.n, &back, &eb, &keep);
		if (rc)
			fail_msg("seed %llu iteration %d (%s): %s", (unsigned long long)seed, it,
			         d->rec.name, eb.msg);
		assert_true(msg_equal(&m, &back));
		free(keep);
		msg_buf_release(&b);
	}
}

/* ---- derived malformed messages ------------------------------------------ */

enum mutation {
	MUT_NONE,
	MUT_OMIT,      /* field left out */
	MUT_WRONGTYPE, /* a value of another msgpack type */
	MUT_ABOVE,     /* one past the upper limit */
	MUT_BELOW,     /* one under the lower limit (when lo > 0) */
	MUT_DUPLICATE, /* the field twice */
	MUT_EXTRA,     /* an undeclared key added */
};

static void pack_key(msgpack_packer *pk, const char *k)
{
	msgpack_pack_str(pk, strlen(k));
	msgpack_pack_str_body(pk, k, strlen(k));
}

static void pack_rec(msgpack_packer *pk, const struct msg_rec *r, const char *base);

static void pack_value(msgpack_packer *pk, const struct msg_field *f, const char *base,
                       enum mutation mut)
{
	const char *at = base + f->offset;

	if (mut == MUT_WRONGTYPE) {
		/* Strings where numbers go, numbers where anything else goes. */
		if (f->kind == MSG_K_U64)
			pack_key(pk, "42");
		else
			msgpack_pack_uint8(pk, 1);
		return;
	}
	switch (f->kind) {
	case MSG_K_U64: {
		uint64_t v = *(const uint64_t *)(const void *)at;

		if (mut == MUT_ABOVE)
			v = f->hi + 1;
		if (mut == MUT_BELOW)
			v = f->lo - 1;
		msgpack_pack_uint64(pk, v);
		break;
	}
	case MSG_K_BOOL:
		msgpack_pack_true(pk);
		break;
	case MSG_K_STR: {
		size_t n = mut == MUT_ABOVE ? f->hi + 1 : mut == MUT_BELOW ? f->lo - 1 : 0;
		const struct msg_str *s = (const void *)at;

		if (mut == MUT_ABOVE || mut == MUT_BELOW) {
			char *tmp = calloc(1, n + 1);

			memset(tmp, 'x', n);
			msgpack_pack_str(pk, n);
			msgpack_pack_str_body(pk, tmp, n);
			free(tmp);
		} else {
			msgpack_pack_str(pk, s->n);
			msgpack_pack_str_body(pk, s->p, s->n);
		}
		break;
	}
	case MSG_K_ARR: {
		uint32_t n = *(const uint32_t *)(const void *)at;
		uint32_t emit = mut == MUT_ABOVE   ? (uint32_t)f->hi + 1
		                : mut == MUT_BELOW ? (uint32_t)f->lo - 1
		                                   : n;

		msgpack_pack_array(pk, emit);
		for (uint32_t j = 0; j < emit; j++)
			pack_rec(pk, f->sub,
			         base + f->elems + (size_t)(j < n ? j : 0) * f->sub->size);
		break;
	}
	}
}

static void pack_rec(msgpack_packer *pk, const struct msg_rec *r, const char *base)
{
	msgpack_pack_map(pk, r->nfields);
	for (uint32_t i = 0; i < r->nfields; i++) {
		pack_key(pk, r->fields[i].name);
		pack_value(pk, &r->fields[i], base, MUT_NONE);
	}
}

/* The message `m` with field `idx` mutated by `mut`, packed by hand. */
static void pack_mutated(const struct msg_desc *d, const struct msg *m, uint32_t idx,
                         enum mutation mut, msgpack_sbuffer *sb)
{
	msgpack_packer pk;
	uint32_t n = 2 + d->rec.nfields;

	if (mut == MUT_OMIT)
		n--;
	if (mut == MUT_DUPLICATE || mut == MUT_EXTRA)
		n++;
	msgpack_sbuffer_init(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, n);
	pack_key(&pk, "t");
	msgpack_pack_uint32(&pk, d->type);
	pack_key(&pk, "v");
	msgpack_pack_uint32(&pk, MSG_PROTO_VERSION);
	for (uint32_t i = 0; i < d->rec.nfields; i++) {
		const struct msg_field *f = &d->rec.fields[i];

		if (i == idx && mut == MUT_OMIT)
			continue;
		pack_key(&pk, f->name);
		pack_value(&pk, f, (const char *)&m->u, i == idx ? mut : MUT_NONE);
		if (i == idx && mut == MUT_DUPLICATE) {
			pack_key(&pk, f->name);
			pack_value(&pk, f, (const char *)&m->u, MUT_NONE);
		}
	}
	if (mut == MUT_EXTRA) {
		pack_key(&pk, "surprise");
		msgpack_pack_uint8(&pk, 7);
	}
}

static void expect_code(const char *what, const void *p, size_t n, int want)
{
	struct ig_errbuf eb = {0};
	struct msg out;
	int rc = decode_exact(p, n, &out, &eb, NULL);

	if (rc != want)
		fail_msg("%s: got %s (%s), want %s", what, ig_err_name(rc), eb.msg,
		         ig_err_name(want));
	/* Every refusal says something. */
	if (want != IG_E_OK && eb.msg[0] == '\0')
		fail_msg("%s: %s with an empty message", what, ig_err_name(rc));
}

static void test_derived_malformed(void **state)
{
	int checked = 0;

	(void)state;
	for (size_t i = 0; i < msg_ndescs; i++) {
		const struct msg_desc *d = &msg_descs[i];
		struct msg m;

		pool_used = 0;
		make_sample(d, V_MAX, &m);
		{
			msgpack_sbuffer sb;
			char what[160];

			/* The hand packer itself agrees with the codec when unmutated. */
			pack_mutated(d, &m, UINT32_MAX, MUT_NONE, &sb);
			snprintf(what, sizeof(what), "%s unmutated", d->rec.name);
			expect_code(what, sb.data, sb.size, IG_E_OK);
			msgpack_sbuffer_destroy(&sb);
			pack_mutated(d, &m, UINT32_MAX, MUT_EXTRA, &sb);
			snprintf(what, sizeof(what), "%s with an extra key", d->rec.name);
			expect_code(what, sb.data, sb.size, IG_E_PROTO_UNKNOWN_FIELD);
			msgpack_sbuffer_destroy(&sb);
		}
		for (uint32_t f = 0; f < d->rec.nfields; f++) {
			const struct msg_field *fd = &d->rec.fields[f];
			static const struct {
				enum mutation mut;
				const char *name;
				int want;
			} rows[] = {
			    {MUT_OMIT, "omitted", IG_E_PROTO_MISSING_FIELD},
			    {MUT_WRONGTYPE, "of the wrong type", IG_E_PROTO_FIELD_TYPE},
			    {MUT_ABOVE, "above its limit", IG_E_PROTO_FIELD_RANGE},
			    {MUT_BELOW, "below its limit", IG_E_PROTO_FIELD_RANGE},
			    {MUT_DUPLICATE, "duplicated", IG_E_PROTO_MALFORMED},
			};

			for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
				msgpack_sbuffer sb;
				char what[160];

				if (rows[r].mut == MUT_ABOVE &&
				    (fd->kind == MSG_K_BOOL ||
				     (fd->kind == MSG_K_U64 && fd->hi == UINT64_MAX)))
					continue; /* no value above */
				if (rows[r].mut == MUT_BELOW &&
				    (fd->kind == MSG_K_BOOL || fd->lo == 0))
					continue;
				pack_mutated(d, &m, f, rows[r].mut, &sb);
				snprintf(what, sizeof(what), "%s.%s %s", d->rec.name, fd->name,
				         rows[r].name);
				expect_code(what, sb.data, sb.size, rows[r].want);
				msgpack_sbuffer_destroy(&sb);
				checked++;
			}
		}
	}
	printf("# %d derived malformed messages rejected with their codes\n", checked);
	assert_true(checked > 30);
}

/* ---- the hand-written table ---------------------------------------------- */

static void test_malformed_table(void **state)
{
	/* ping {t:2, v:1, seq:0} is 83 a174 02 a176 01 a3736571 00 */
	static const struct {
		const char *name;
		const char *hex;
		int want;
	} rows[] = {
	    {"a valid ping", "83a17402a17601a373657100", IG_E_OK},
	    {"empty", "", IG_E_PROTO_TRUNCATED},
	    {"nil", "c0", IG_E_PROTO_MALFORMED},
	    {"an array", "9102", IG_E_PROTO_MALFORMED},
	    {"an empty map", "80", IG_E_PROTO_MISSING_FIELD},
	    {"no version", "82a17402a373657100", IG_E_PROTO_MISSING_FIELD},
	    {"type is a string", "83a174a170a17601a373657100", IG_E_PROTO_FIELD_TYPE},
	    {"type is negative", "83a174ffa17601a373657100", IG_E_PROTO_FIELD_RANGE},
	    {"type is a float", "83a174ca40000000a17601a373657100", IG_E_PROTO_FIELD_TYPE},
	    {"version 2", "83a17402a17602a373657100", IG_E_PROTO_VERSION},
	    {"version 0", "83a17402a17600a373657100", IG_E_PROTO_VERSION},
	    {"unknown type 99", "83a17463a17601a373657100", IG_E_PROTO_UNKNOWN_TYPE},
	    {"type 2^32 + 2", "83a174cf0000000100000002a17601a373657100", IG_E_PROTO_UNKNOWN_TYPE},
	    {"type key twice", "84a17402a17402a17601a373657100", IG_E_PROTO_MALFORMED},
	    {"integer key", "84a17402a176010101a373657100", IG_E_PROTO_MALFORMED},
	    {"seq is nil", "83a17402a17601a3736571c0", IG_E_PROTO_FIELD_TYPE},
	    {"seq is negative", "83a17402a17601a3736571ff", IG_E_PROTO_FIELD_RANGE},
	    {"seq is binary", "83a17402a17601a3736571c40100", IG_E_PROTO_FIELD_TYPE},
	    {"seq is an extension", "83a17402a17601a3736571d40100", IG_E_PROTO_FIELD_TYPE},
	    {"seq is a map", "83a17402a17601a373657180", IG_E_PROTO_FIELD_TYPE},
	    {"trailing byte", "83a17402a17601a37365710000", IG_E_PROTO_MALFORMED},
	    {"two messages", "83a17402a17601a37365710083a17402a17601a373657100",
	     IG_E_PROTO_MALFORMED},
	    {"reserved byte 0xc1", "c1", IG_E_PROTO_MALFORMED},
	    {"0xc1 as a value", "83a17402a17601a3736571c1", IG_E_PROTO_MALFORMED},
	    {"array32 claiming 2^32-1 items", "ddffffffff", IG_E_PROTO_TRUNCATED},
	    {"map32 claiming 2^32-1 pairs", "dfffffffff00", IG_E_PROTO_TRUNCATED},
	    {"map16 claiming more than is there", "de0100a174", IG_E_PROTO_TRUNCATED},
	    {"str32 claiming 4 GiB", "dbffffffff6162", IG_E_PROTO_TRUNCATED},
	    {"bin32 claiming 4 GiB", "c6ffffffff", IG_E_PROTO_TRUNCATED},
	    {"ext32 claiming 4 GiB", "c9ffffffff01", IG_E_PROTO_TRUNCATED},
	    {"uint64 cut short", "cf0000", IG_E_PROTO_TRUNCATED},
	    {"nesting deeper than allowed", "91919191919100", IG_E_PROTO_MALFORMED},
	    {"nesting at the limit, not a map", "91919100", IG_E_PROTO_MALFORMED},
	    /* hello {role:"a\0", pid:1, build:""} */
	    {"NUL inside a string",
	     "85a17401a17601a4726f6c65a26100a3706964"
	     "01a56275696c64a0",
	     IG_E_PROTO_FIELD_RANGE},
	    {"invalid UTF-8",
	     "85a17401a17601a4726f6c65a261ffa3706964"
	     "01a56275696c64a0",
	     IG_E_PROTO_FIELD_RANGE},
	    {"overlong UTF-8 for '/'",
	     "85a17401a17601a4726f6c65a2c0afa3706964"
	     "01a56275696c64a0",
	     IG_E_PROTO_FIELD_RANGE},
	    {"UTF-8 surrogate",
	     "85a17401a17601a4726f6c65a3eda080a3706964"
	     "01a56275696c64a0",
	     IG_E_PROTO_FIELD_RANGE},
	    {"role as binary",
	     "85a17401a17601a4726f6c65c40161a3706964"
	     "01a56275696c64a0",
	     IG_E_PROTO_FIELD_TYPE},
	    {"hello with pid 0",
	     "85a17401a17601a4726f6c65a161a3706964"
	     "00a56275696c64a0",
	     IG_E_PROTO_FIELD_RANGE},
	    /* status_reply {seq:0, procs:[nil]} */
	    {"array element not a map", "84a17408a17601a373657100a570726f637391c0",
	     IG_E_PROTO_FIELD_TYPE},
	    {"array element missing fields", "84a17408a17601a373657100a570726f63739180",
	     IG_E_PROTO_MISSING_FIELD},
	};
	int failures = 0;

	(void)state;
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		char buf[256];
		size_t n = from_hex(rows[i].hex, buf);
		struct ig_errbuf eb = {0};
		struct msg out;
		int rc = decode_exact(buf, n, &out, &eb, NULL);

		if (rc != rows[i].want) {
			printf("FAIL %s: got %s (%s), want %s\n", rows[i].name, ig_err_name(rc),
			       eb.msg, ig_err_name(rows[i].want));
			failures++;
		}
	}
	assert_int_equal(failures, 0);
}

static void test_oversize(void **state)
{
	size_t n = MSG_MAX_BYTES + 1;
	char *big = calloc(1, n);

	(void)state;
	expect_code("one byte over MSG_MAX_BYTES", big, n, IG_E_PROTO_OVERSIZE);
	free(big);
}

static void test_version_is_reported(void **state)
{
	static const char bytes[] = "\x83\xa1t\x02\xa1v\x07\xa3seq\x00";
	struct ig_errbuf eb;
	struct msg out;

	(void)state;
	assert_int_equal(msg_decode(bytes, sizeof(bytes) - 1, &out, &eb), IG_E_PROTO_VERSION);
	assert_int_equal(out.version, 7);
	assert_int_equal(out.type, MSG_PING);
	assert_non_null(strstr(eb.msg, "version 7"));
}

/* ---- the encoder refuses what the decoder would refuse -------------------- */

static int count_bytes(void *ctx, const char *buf, size_t len)
{
	(void)buf;
	*(size_t *)ctx += len;
	return 0;
}

static void test_encode_refuses(void **state)
{
	struct ig_errbuf eb;
	struct msg m;
	size_t written = 0;

	(void)state;
	memset(&m, 0, sizeof(m));
	m.type = 4242;
	assert_int_equal(msg_encode(&m, count_bytes, &written, &eb), IG_E_PROTO_UNKNOWN_TYPE);

	memset(&m, 0, sizeof(m));
	m.type = MSG_HELLO;
	m.u.hello.role = msg_str_of("");
	m.u.hello.pid = 1;
	assert_int_equal(msg_encode(&m, count_bytes, &written, &eb), IG_E_PROTO_FIELD_RANGE);
	assert_non_null(strstr(eb.msg, "hello.role"));

	m.u.hello.role = msg_str_of("gpu-worker");
	m.u.hello.pid = (uint64_t)INT32_MAX + 1;
	assert_int_equal(msg_encode(&m, count_bytes, &written, &eb), IG_E_PROTO_FIELD_RANGE);
	assert_non_null(strstr(eb.msg, "hello.pid"));

	m.u.hello.pid = 1;
	m.u.hello.build = msg_str_of("\xff\xfe");
	assert_int_equal(msg_encode(&m, count_bytes, &written, &eb), IG_E_PROTO_FIELD_RANGE);

	memset(&m, 0, sizeof(m));
	m.type = MSG_STATUS_REPLY;
	m.u.status_reply.procs.n = 9;
	assert_int_equal(msg_encode(&m, count_bytes, &written, &eb), IG_E_PROTO_FIELD_RANGE);
	m.u.status_reply.procs.n = 1; /* its element has an empty role */
	assert_int_equal(msg_encode(&m, count_bytes, &written, &eb), IG_E_PROTO_FIELD_RANGE);
	assert_non_null(strstr(eb.msg, "status_reply.procs[0].role"));

	assert_int_equal(written, 0); /* nothing reached the output */
}

static void test_utf8(void **state)
{
	(void)state;
	assert_true(msg_utf8_valid("", 0));
	assert_true(msg_utf8_valid("plain", 5));
	assert_true(msg_utf8_valid("\xf0\x9f\x94\xa5", 4));  /* U+1F525 */
	assert_false(msg_utf8_valid("\xf0\x9f\x94", 3));     /* cut */
	assert_false(msg_utf8_valid("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
	assert_false(msg_utf8_valid("\xe0\x80\xaf", 3));     /* overlong */
	assert_false(msg_utf8_valid("\x80", 1));
	assert_false(msg_utf8_valid("a\0b", 3));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_declarations),
	    cmocka_unit_test(test_golden),
	    cmocka_unit_test(test_roundtrip_random),
	    cmocka_unit_test(test_derived_malformed),
	    cmocka_unit_test(test_malformed_table),
	    cmocka_unit_test(test_oversize),
	    cmocka_unit_test(test_version_is_reported),
	    cmocka_unit_test(test_encode_refuses),
	    cmocka_unit_test(test_utf8),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
