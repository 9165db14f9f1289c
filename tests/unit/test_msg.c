/*
 * test_msg.c - the codec, derived from the declarations in proto/msg.h.
 *
 * Every message type gets, without a line written for it here:
 *   - golden bytes at its lower and upper limits (tests/golden/<type>.<min|max>.hex;
 *     IGNIS_UPDATE_GOLDEN=1 rewrites them after a deliberate change);
 *   - a decode of every truncation of those bytes (TRUNCATED, never a read past
 *     the end: each prefix sits in a buffer of exactly its size);
 *   - per field: missing, wrong type, below and above its limits, duplicated,
 *     and an unknown extra field, each with its exact error code and a message
 *     naming the message and the field; per F64 field also NaN, infinity,
 *     integers past 2^53 and the other accepted encodings (float32, integer);
 *     per IDS field an id that is too big, negative, a float or a string;
 *   - seeded random round trips (the seed is printed).
 * Hand-written tables add malformed inputs no declaration describes and every
 * wire form of the F64 and IDS kinds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <math.h>

#include <cmocka.h>
#include <msgpack.h>

#include "proto/msg.h"

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

/* A double in lo..hi: a bound, a value a float32 holds, or any. */
static double pick_f64(double lo, double hi)
{
	double u = (double)(rng() >> 11) * 0x1p-53, x = lo + (hi - lo) * u;

	switch (rng() % 4) {
	case 0:
		return lo;
	case 1:
		return hi;
	case 2:
		x = (double)(float)x;
		break;
	default:
		break;
	}
	return x < lo ? lo : x > hi ? hi : x;
}

/* A token id of any width (1 to 32 significant bits), 0 sometimes. */
static uint32_t pick_id(void)
{
	uint32_t r = (uint32_t)rng();

	return rng() % 16 == 0 ? 0 : r >> (rng() % 32);
}

/* The next double after x towards +inf (dir > 0) or -inf, x finite. */
static double step_f64(double x, int dir)
{
	uint64_t b;

	if (x == 0)
		return dir > 0 ? 0x1p-1074 : -0x1p-1074;
	memcpy(&b, &x, sizeof(b));
	b += (x > 0) == (dir > 0) ? 1 : (uint64_t)-1;
	memcpy(&x, &b, sizeof(x));
	return x;
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
		case MSG_K_F64:
			*(double *)(void *)at = v == V_MIN   ? f->flo
			                        : v == V_MAX ? f->fhi
			                                     : pick_f64(f->flo, f->fhi);
			break;
		case MSG_K_IDS: {
			uint64_t n = v == V_MIN ? lo : v == V_MAX ? hi : pick(lo, hi);
			uint32_t *ids = (uint32_t *)(void *)(base + f->elems);

			*(uint32_t *)(void *)at = (uint32_t)n;
			for (uint64_t j = 0; j < n; j++)
				ids[j] = v == V_MIN ? 0 : v == V_MAX ? UINT32_MAX : pick_id();
			break;
		}
		case MSG_K_U64S: {
			uint64_t n = v == V_MIN ? lo : v == V_MAX ? hi : pick(lo, hi);
			uint64_t *e = (uint64_t *)(void *)(base + f->elems);

			*(uint32_t *)(void *)at = (uint32_t)n;
			for (uint64_t j = 0; j < n; j++)
				e[j] = v == V_MIN   ? 0
				       : v == V_MAX ? UINT64_MAX
				                    : pick(0, UINT64_MAX);
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
		if (f->kind == MSG_K_F64) {
			/* Finite bounds, so infinities are out of range. */
			assert_true(isfinite(f->flo) && isfinite(f->fhi));
			assert_true(f->flo <= f->fhi);
			assert_true(f->lo == 0 && f->hi == 0);
		} else {
			assert_true(f->flo == 0 && f->fhi == 0);
		}
		if (f->kind == MSG_K_IDS)
			assert_true(f->hi * sizeof(uint32_t) <= MSG_MAX_BYTES);
		if (f->kind == MSG_K_U64S)
			assert_true(f->hi * 9 <= MSG_MAX_BYTES); /* each uint64 at its widest */
	}
}

/* The generated C types, as the rest of the tree uses them. */
_Static_assert(sizeof(((struct msg_submit *)0)->prompt.v) == MSG_IDS_MAX * sizeof(uint32_t),
               "an IDS field holds hi uint32_t ids");
_Static_assert(sizeof(((struct msg_submit *)0)->temperature) == sizeof(double),
               "an F64 field is a double");

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
			if (b.n > msg_max_encoded(d))
				fail_msg("%s.%s: %zu bytes > msg_max_encoded %zu", d->rec.name,
				         vname[v], b.n, msg_max_encoded(d));
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
	MUT_NAN,       /* F64: a float64 NaN */
	MUT_NAN32,     /* F64: a float32 NaN */
	MUT_INF,       /* F64: +infinity */
	MUT_NEGINF,    /* F64: -infinity */
	MUT_BIGINT,    /* F64: the integer 2^53 + 1 */
	MUT_BIGNEG,    /* F64: the integer -(2^53 + 1) */
	MUT_AS_F32,    /* F64: the same value as a float32 (accepted) */
	MUT_AS_INT,    /* F64: the same value as an integer (accepted) */
	MUT_ID_BIG,    /* IDS: the first id 2^32 */
	MUT_ID_NEG,    /* IDS: the first id -1 */
	MUT_ID_FLOAT,  /* IDS: the first id 1.0 */
	MUT_ID_STR,    /* IDS: the first id "1" */
	MUT_U_NEG,     /* U64S: the first element -1 */
	MUT_U_STR,     /* U64S: the first element "1" */
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
		if (f->kind == MSG_K_U64 || f->kind == MSG_K_F64)
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
	case MSG_K_F64: {
		double v = *(const double *)(const void *)at;

		switch (mut) {
		case MUT_ABOVE:
			msgpack_pack_double(pk, step_f64(f->fhi, +1));
			break;
		case MUT_BELOW:
			msgpack_pack_double(pk, step_f64(f->flo, -1));
			break;
		case MUT_NAN:
			msgpack_pack_double(pk, NAN);
			break;
		case MUT_NAN32:
			msgpack_pack_float(pk, NAN);
			break;
		case MUT_INF:
			msgpack_pack_double(pk, INFINITY);
			break;
		case MUT_NEGINF:
			msgpack_pack_double(pk, -INFINITY);
			break;
		case MUT_BIGINT:
			msgpack_pack_uint64(pk, MSG_F64_INT_MAX + 1);
			break;
		case MUT_BIGNEG:
			msgpack_pack_int64(pk, -(int64_t)MSG_F64_INT_MAX - 1);
			break;
		case MUT_AS_F32:
			msgpack_pack_float(pk, (float)v);
			break;
		case MUT_AS_INT:
			msgpack_pack_int64(pk, (int64_t)v);
			break;
		default:
			msgpack_pack_double(pk, v);
			break;
		}
		break;
	}
	case MSG_K_IDS: {
		uint32_t n = *(const uint32_t *)(const void *)at;
		const uint32_t *ids = (const uint32_t *)(const void *)(base + f->elems);
		uint32_t emit = mut == MUT_ABOVE   ? (uint32_t)f->hi + 1
		                : mut == MUT_BELOW ? (uint32_t)f->lo - 1
		                                   : n;
		bool bad_first = mut == MUT_ID_BIG || mut == MUT_ID_NEG || mut == MUT_ID_FLOAT ||
		                 mut == MUT_ID_STR;

		if (bad_first && emit == 0)
			emit = 1;
		msgpack_pack_array(pk, emit);
		for (uint32_t j = 0; j < emit; j++) {
			if (j == 0 && mut == MUT_ID_BIG)
				msgpack_pack_uint64(pk, (uint64_t)UINT32_MAX + 1);
			else if (j == 0 && mut == MUT_ID_NEG)
				msgpack_pack_int8(pk, -1);
			else if (j == 0 && mut == MUT_ID_FLOAT)
				msgpack_pack_double(pk, 1.0);
			else if (j == 0 && mut == MUT_ID_STR)
				pack_key(pk, "1");
			else
				msgpack_pack_uint32(pk, j < n ? ids[j] : 7);
		}
		break;
	}
	case MSG_K_U64S: {
		uint32_t n = *(const uint32_t *)(const void *)at;
		const uint64_t *e = (const uint64_t *)(const void *)(base + f->elems);
		uint32_t emit = mut == MUT_ABOVE   ? (uint32_t)f->hi + 1
		                : mut == MUT_BELOW ? (uint32_t)f->lo - 1
		                                   : n;
		bool bad_first = mut == MUT_U_NEG || mut == MUT_U_STR;

		if (bad_first && emit == 0)
			emit = 1;
		msgpack_pack_array(pk, emit);
		for (uint32_t j = 0; j < emit; j++) {
			if (j == 0 && mut == MUT_U_NEG)
				msgpack_pack_int8(pk, -1);
			else if (j == 0 && mut == MUT_U_STR)
				pack_key(pk, "1");
			else
				msgpack_pack_uint64(pk, j < n ? e[j] : 7);
		}
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

#define K(kind) (1u << MSG_K_##kind)
#define K_ALL   (K(U64) | K(BOOL) | K(STR) | K(ARR) | K(F64) | K(IDS) | K(U64S))

/* Per field: the mutation, the kinds it applies to, the code it gets and a
 * word the message must hold besides the message and field names. */
static const struct {
	enum mutation mut;
	const char *name;
	unsigned kinds;
	int want;
	const char *says;
} derived_rows[] = {
    {MUT_OMIT, "omitted", K_ALL, IG_E_PROTO_MISSING_FIELD, "missing"},
    {MUT_WRONGTYPE, "of the wrong type", K_ALL, IG_E_PROTO_FIELD_TYPE, "expected"},
    {MUT_ABOVE, "above its limit", K_ALL, IG_E_PROTO_FIELD_RANGE, "accepted"},
    {MUT_BELOW, "below its limit", K_ALL, IG_E_PROTO_FIELD_RANGE, "accepted"},
    {MUT_DUPLICATE, "duplicated", K_ALL, IG_E_PROTO_MALFORMED, "twice"},
    {MUT_NAN, "NaN (float64)", K(F64), IG_E_PROTO_FIELD_RANGE, "NaN"},
    {MUT_NAN32, "NaN (float32)", K(F64), IG_E_PROTO_FIELD_RANGE, "NaN"},
    {MUT_INF, "+infinity", K(F64), IG_E_PROTO_FIELD_RANGE, "accepted"},
    {MUT_NEGINF, "-infinity", K(F64), IG_E_PROTO_FIELD_RANGE, "accepted"},
    {MUT_BIGINT, "the integer 2^53 + 1", K(F64), IG_E_PROTO_FIELD_RANGE, "2^53"},
    {MUT_BIGNEG, "the integer -(2^53 + 1)", K(F64), IG_E_PROTO_FIELD_RANGE, "2^53"},
    {MUT_AS_F32, "as a float32", K(F64), IG_E_OK, NULL},
    {MUT_AS_INT, "as an integer", K(F64), IG_E_OK, NULL},
    {MUT_ID_BIG, "with an id of 2^32", K(IDS), IG_E_PROTO_FIELD_RANGE, "[0]"},
    {MUT_ID_NEG, "with an id of -1", K(IDS), IG_E_PROTO_FIELD_RANGE, "[0]"},
    {MUT_ID_FLOAT, "with an id of 1.0", K(IDS), IG_E_PROTO_FIELD_TYPE, "[0]"},
    {MUT_ID_STR, "with an id of \"1\"", K(IDS), IG_E_PROTO_FIELD_TYPE, "[0]"},
    {MUT_U_NEG, "with an element of -1", K(U64S), IG_E_PROTO_FIELD_RANGE, "[0]"},
    {MUT_U_STR, "with an element \"1\"", K(U64S), IG_E_PROTO_FIELD_TYPE, "[0]"},
};

/* Whether an accepted other form exists for the F64 value v. */
static bool f64_has_form(enum mutation mut, double v)
{
	if (mut == MUT_AS_F32)
		return (double)(float)v == v;
	if (mut == MUT_AS_INT)
		return fabs(v) <= (double)MSG_F64_INT_MAX && v == (double)(int64_t)v;
	return true;
}

/* Decode a mutated `m`: the code `want`; a refusal names the message, the
 * field and `says`; an acceptance decodes equal to `m`. */
static void expect_field_error(const char *what, const struct msg_desc *d,
                               const struct msg_field *fd, const struct msg *m, const void *p,
                               size_t n, int want, const char *says)
{
	struct ig_errbuf eb = {0};
	struct msg out;
	void *keep;
	int rc = decode_exact(p, n, &out, &eb, &keep);

	if (rc != want)
		fail_msg("%s: got %s (%s), want %s", what, ig_err_name(rc), eb.msg,
		         ig_err_name(want));
	if (want == IG_E_OK) {
		if (!msg_equal(m, &out))
			fail_msg("%s: decoded to a different message", what);
	} else if (!strstr(eb.msg, d->rec.name) || !strstr(eb.msg, fd->name) ||
	           (says && !strstr(eb.msg, says))) {
		fail_msg("%s: the message \"%s\" should name %s, %s and say \"%s\"", what, eb.msg,
		         d->rec.name, fd->name, says ? says : "");
	}
	free(keep);
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
			const char *at = (const char *)&m.u + fd->offset;

			for (size_t r = 0; r < sizeof(derived_rows) / sizeof(derived_rows[0]);
			     r++) {
				enum mutation mut = derived_rows[r].mut;
				msgpack_sbuffer sb;
				char what[160];

				if (!(derived_rows[r].kinds & (1u << fd->kind)))
					continue;
				if (mut == MUT_ABOVE &&
				    (fd->kind == MSG_K_BOOL ||
				     (fd->kind == MSG_K_U64 && fd->hi == UINT64_MAX)))
					continue; /* no value above */
				if (mut == MUT_BELOW && (fd->kind == MSG_K_BOOL ||
				                         (fd->kind != MSG_K_F64 && fd->lo == 0)))
					continue;
				if (fd->kind == MSG_K_IDS && mut >= MUT_ID_BIG && fd->hi == 0)
					continue; /* no room for a bad id */
				if (fd->kind == MSG_K_F64 &&
				    !f64_has_form(mut, *(const double *)at))
					continue;
				pack_mutated(d, &m, f, mut, &sb);
				snprintf(what, sizeof(what), "%s.%s %s", d->rec.name, fd->name,
				         derived_rows[r].name);
				/* a message at its limits with a field twice may pass
				 * the size limit (tokens_many's reqs): refused for
				 * that first, before it is parsed */
				if (sb.size > MSG_MAX_BYTES && derived_rows[r].want != IG_E_OK)
					expect_code(what, sb.data, sb.size, IG_E_PROTO_OVERSIZE);
				else if (mut == MUT_OMIT && fd->optional) {
					/* an optional field left out reads as 0 (false, "") */
					struct msg *z = malloc(sizeof(*z));

					assert_non_null(z);
					*z = m;
					memset((char *)&z->u + fd->offset, 0,
					       fd->kind == MSG_K_BOOL  ? sizeof(bool)
					       : fd->kind == MSG_K_STR ? sizeof(struct msg_str)
					                               : sizeof(uint64_t));
					expect_field_error(what, d, fd, z, sb.data, sb.size,
					                   IG_E_OK, NULL);
					free(z);
				} else
					expect_field_error(what, d, fd, &m, sb.data, sb.size,
					                   derived_rows[r].want,
					                   derived_rows[r].says);
				msgpack_sbuffer_destroy(&sb);
				checked++;
			}
		}
	}
	printf("# %d derived malformed messages rejected (or other forms accepted) with their "
	       "codes\n",
	       checked);
	assert_true(checked > 30);
}

/* ---- the hand-written table ---------------------------------------------- */

/* from_hex of `hex` with each "VV" the protocol version's byte. */
static size_t from_hex_v(const char *hex, char *out)
{
	char h[512];
	size_t k = 0;

	for (size_t i = 0; hex[i] && k + 3 < sizeof(h); i++) {
		if (hex[i] == 'V' && hex[i + 1] == 'V') {
			k += (size_t)snprintf(h + k, sizeof(h) - k, "%02x", MSG_PROTO_VERSION);
			i++;
			continue;
		}
		h[k++] = hex[i];
	}
	h[k] = '\0';
	return from_hex(h, out);
}

static void test_malformed_table(void **state)
{
	/* ping {t:2, v:6, seq:0} is 83 a174 02 a176 06 a3736571 00; VV is
	 * the version of proto/msg.h (from_hex_v), so the rows hold at every
	 * version; the rows of other versions name theirs */
	static const struct {
		const char *name;
		const char *hex;
		int want;
	} rows[] = {
	    {"a valid ping", "83a17402a176VVa373657100", IG_E_OK},
	    {"empty", "", IG_E_PROTO_TRUNCATED},
	    {"nil", "c0", IG_E_PROTO_MALFORMED},
	    {"an array", "9102", IG_E_PROTO_MALFORMED},
	    {"an empty map", "80", IG_E_PROTO_MISSING_FIELD},
	    {"no version", "82a17402a373657100", IG_E_PROTO_MISSING_FIELD},
	    {"type is a string", "83a174a170a176VVa373657100", IG_E_PROTO_FIELD_TYPE},
	    {"type is negative", "83a174ffa176VVa373657100", IG_E_PROTO_FIELD_RANGE},
	    {"type is a float", "83a174ca40000000a176VVa373657100", IG_E_PROTO_FIELD_TYPE},
	    {"version 1", "83a17402a17601a373657100", IG_E_PROTO_VERSION},
	    {"version 2", "83a17402a17602a373657100", IG_E_PROTO_VERSION},
	    {"version 3", "83a17402a17603a373657100", IG_E_PROTO_VERSION},
	    {"version 0", "83a17402a17600a373657100", IG_E_PROTO_VERSION},
	    {"version 5, before the text of tokens", "83a17402a17605a373657100",
	     IG_E_PROTO_VERSION},
	    {"version 6, before kv_seq's sums", "83a17402a17606a373657100", IG_E_PROTO_VERSION},
	    {"unknown type 99", "83a17463a176VVa373657100", IG_E_PROTO_UNKNOWN_TYPE},
	    {"type 2^32 + 2", "83a174cf0000000100000002a176VVa373657100", IG_E_PROTO_UNKNOWN_TYPE},
	    {"type key twice", "84a17402a17402a176VVa373657100", IG_E_PROTO_MALFORMED},
	    {"integer key", "84a17402a176VV0101a373657100", IG_E_PROTO_MALFORMED},
	    {"seq is nil", "83a17402a176VVa3736571c0", IG_E_PROTO_FIELD_TYPE},
	    {"seq is negative", "83a17402a176VVa3736571ff", IG_E_PROTO_FIELD_RANGE},
	    {"seq is binary", "83a17402a176VVa3736571c40100", IG_E_PROTO_FIELD_TYPE},
	    {"seq is an extension", "83a17402a176VVa3736571d40100", IG_E_PROTO_FIELD_TYPE},
	    {"seq is a map", "83a17402a176VVa373657180", IG_E_PROTO_FIELD_TYPE},
	    {"trailing byte", "83a17402a176VVa37365710000", IG_E_PROTO_MALFORMED},
	    {"two messages", "83a17402a176VVa37365710083a17402a176VVa373657100",
	     IG_E_PROTO_MALFORMED},
	    {"reserved byte 0xc1", "c1", IG_E_PROTO_MALFORMED},
	    {"0xc1 as a value", "83a17402a176VVa3736571c1", IG_E_PROTO_MALFORMED},
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
	     "85a17401a176VVa4726f6c65a26100a3706964"
	     "01a56275696c64a0",
	     IG_E_PROTO_FIELD_RANGE},
	    {"invalid UTF-8",
	     "85a17401a176VVa4726f6c65a261ffa3706964"
	     "01a56275696c64a0",
	     IG_E_PROTO_FIELD_RANGE},
	    {"overlong UTF-8 for '/'",
	     "85a17401a176VVa4726f6c65a2c0afa3706964"
	     "01a56275696c64a0",
	     IG_E_PROTO_FIELD_RANGE},
	    {"UTF-8 surrogate",
	     "85a17401a176VVa4726f6c65a3eda080a3706964"
	     "01a56275696c64a0",
	     IG_E_PROTO_FIELD_RANGE},
	    {"role as binary",
	     "85a17401a176VVa4726f6c65c40161a3706964"
	     "01a56275696c64a0",
	     IG_E_PROTO_FIELD_TYPE},
	    {"hello with pid 0",
	     "85a17401a176VVa4726f6c65a161a3706964"
	     "00a56275696c64a0",
	     IG_E_PROTO_FIELD_RANGE},
	    /* status_reply {seq:0, procs:[nil]} */
	    {"array element not a map", "84a17408a176VVa373657100a570726f637391c0",
	     IG_E_PROTO_FIELD_TYPE},
	    {"array element missing fields", "84a17408a176VVa373657100a570726f63739180",
	     IG_E_PROTO_MISSING_FIELD},
	    /* cancel {id:1} */
	    {"a valid cancel", "83a1740ea176VVa2696401", IG_E_OK},
	    {"cancel id 0", "83a1740ea176VVa2696400", IG_E_PROTO_FIELD_RANGE},
	    {"cancel id as a float", "83a1740ea176VVa26964cb3ff0000000000000",
	     IG_E_PROTO_FIELD_TYPE},
	    /* tokens {id:1, from:0, tokens:[5, 2^32-1], text:"", state:"done",
	     * done:true, finish:"eos", generated:2, cached:0} */
	    {"a valid tokens reply",
	     "8ba1740da176VVa2696401a466726f6d00a6746f6b656e7392"
	     "05ceffffffffa474657874a0a57374617465a4646f6e65a4646f6e65c3a666"
	     "696e697368a3656f73a967656e65726174656402a663616368656400",
	     IG_E_OK},
	    {"a tokens reply of version 5 (no text)",
	     "89a1740da176VVa2696401a466726f6d00a6746f6b656e7392"
	     "05ceffffffffa57374617465a4646f6e65a4646f6e65c3a666"
	     "696e697368a3656f73a967656e65726174656402",
	     IG_E_PROTO_MISSING_FIELD},
	    {"tokens as array32 claiming 2^32-1 ids",
	     "8ba1740da176VVa2696401a466726f6d00a6746f6b656e73ddffffffff", IG_E_PROTO_TRUNCATED},
	    {"tokens as array16 claiming 4097 ids, 1 there",
	     "8ba1740da176VVa2696401a466726f6d00a6746f6b656e73dc100100", IG_E_PROTO_TRUNCATED},
	};
	int failures = 0;

	(void)state;
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		char buf[256];
		size_t n = from_hex_v(rows[i].hex, buf);
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

/* ---- every wire form of the F64 and IDS kinds ------------------------------ */

/* A submit packed by hand with the value of `field` given as raw msgpack. */
static void pack_submit_with(const char *field, const char *raw, size_t rawn, msgpack_sbuffer *sb)
{
	const struct msg_desc *d = msg_desc_find(MSG_SUBMIT);
	msgpack_packer pk;
	struct msg m;

	memset(&m, 0, sizeof(m));
	m.u.submit.class = msg_str_of("agent");
	m.u.submit.temperature = 0.5;
	m.u.submit.top_p = 1.0;
	msgpack_sbuffer_init(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 2 + d->rec.nfields);
	pack_key(&pk, "t");
	msgpack_pack_uint32(&pk, MSG_SUBMIT);
	pack_key(&pk, "v");
	msgpack_pack_uint32(&pk, MSG_PROTO_VERSION);
	for (uint32_t i = 0; i < d->rec.nfields; i++) {
		const struct msg_field *f = &d->rec.fields[i];

		pack_key(&pk, f->name);
		if (strcmp(f->name, field) == 0)
			msgpack_sbuffer_write(sb, raw, rawn);
		else
			pack_value(&pk, f, (const char *)&m.u, MUT_NONE);
	}
}

/* Decode a submit whose `field` is `hex`; returns the code, `out` decoded. */
static int decode_submit_with(const char *what, const char *field, const char *hex, int want,
                              const char *says, struct msg *out)
{
	struct ig_errbuf eb = {0};
	msgpack_sbuffer sb;
	char raw[64];
	size_t n = from_hex(hex, raw);
	int rc;

	assert_true(strlen(hex) < 2 * sizeof(raw));
	pack_submit_with(field, raw, n, &sb);
	rc = decode_exact(sb.data, sb.size, out, &eb, NULL);
	msgpack_sbuffer_destroy(&sb);
	if (rc != want) {
		printf("FAIL %s: got %s (%s), want %s\n", what, ig_err_name(rc), eb.msg,
		       ig_err_name(want));
		return -1;
	}
	/* A field's refusal names it; the prescan's speaks of bytes. */
	if ((rc == IG_E_PROTO_FIELD_RANGE || rc == IG_E_PROTO_FIELD_TYPE) && !strstr(eb.msg, field))
		says = field;
	if (rc != IG_E_OK && says && !strstr(eb.msg, says)) {
		printf("FAIL %s: message \"%s\" should say \"%s\"\n", what, eb.msg, says);
		return -1;
	}
	return 0;
}

static void test_f64_wire_forms(void **state)
{
	static const struct {
		const char *field, *name, *hex;
		int want;
		double value;     /* when accepted */
		const char *says; /* when refused */
	} rows[] = {
	    {"temperature", "float64 100 (the upper bound)", "cb4059000000000000", IG_E_OK, 100.0,
	     NULL},
	    {"temperature", "float64 0", "cb0000000000000000", IG_E_OK, 0.0, NULL},
	    {"temperature", "float64 -0", "cb8000000000000000", IG_E_OK, -0.0, NULL},
	    {"temperature", "float64 0.1", "cb3fb999999999999a", IG_E_OK, 0.1, NULL},
	    {"temperature", "float64 just above 100", "cb4059000000000001", IG_E_PROTO_FIELD_RANGE,
	     0, "100.00000000000001 is out of range; accepted 0..100"},
	    {"temperature", "float64 -5e-324", "cb8000000000000001", IG_E_PROTO_FIELD_RANGE, 0,
	     "accepted 0..100"},
	    {"temperature", "float32 0.5", "ca3f000000", IG_E_OK, 0.5, NULL},
	    {"temperature", "float32 0.1, widened exactly", "ca3dcccccd", IG_E_OK, (double)0.1f,
	     NULL},
	    {"temperature", "float32 100", "ca42c80000", IG_E_OK, 100.0, NULL},
	    {"temperature", "float32 just above 100", "ca42c80001", IG_E_PROTO_FIELD_RANGE, 0,
	     "out of range"},
	    {"temperature", "positive fixint 7", "07", IG_E_OK, 7.0, NULL},
	    {"temperature", "uint8 100", "cc64", IG_E_OK, 100.0, NULL},
	    {"temperature", "uint64 0", "cf0000000000000000", IG_E_OK, 0.0, NULL},
	    {"temperature", "int8 5 (a non-negative int)", "d005", IG_E_OK, 5.0, NULL},
	    {"temperature", "uint8 101", "cc65", IG_E_PROTO_FIELD_RANGE, 0, "101 is out of range"},
	    {"temperature", "negative fixint -1", "ff", IG_E_PROTO_FIELD_RANGE, 0,
	     "-1 is out of range"},
	    {"temperature", "int64 -2^53 (exact)", "d3ffe0000000000000", IG_E_PROTO_FIELD_RANGE, 0,
	     "-9007199254740992 is out of range"},
	    {"temperature", "int64 -(2^53 + 1)", "d3ffdfffffffffffff", IG_E_PROTO_FIELD_RANGE, 0,
	     "2^53"},
	    {"temperature", "uint64 2^53 (exact)", "cf0020000000000000", IG_E_PROTO_FIELD_RANGE, 0,
	     "9007199254740992 is out of range"},
	    {"temperature", "uint64 2^53 + 1", "cf0020000000000001", IG_E_PROTO_FIELD_RANGE, 0,
	     "2^53"},
	    {"temperature", "uint64 2^64 - 1", "cfffffffffffffffff", IG_E_PROTO_FIELD_RANGE, 0,
	     "2^53"},
	    {"temperature", "float64 NaN", "cb7ff8000000000000", IG_E_PROTO_FIELD_RANGE, 0, "NaN"},
	    {"temperature", "float64 -NaN", "cbfff8000000000000", IG_E_PROTO_FIELD_RANGE, 0, "NaN"},
	    {"temperature", "float64 signalling NaN", "cb7ff0000000000001", IG_E_PROTO_FIELD_RANGE,
	     0, "NaN"},
	    {"temperature", "float32 NaN", "ca7fc00000", IG_E_PROTO_FIELD_RANGE, 0, "NaN"},
	    {"temperature", "float64 +inf", "cb7ff0000000000000", IG_E_PROTO_FIELD_RANGE, 0,
	     "inf is out of range"},
	    {"temperature", "float32 -inf", "caff800000", IG_E_PROTO_FIELD_RANGE, 0,
	     "-inf is out of range"},
	    {"temperature", "true", "c3", IG_E_PROTO_FIELD_TYPE, 0, "expected a number"},
	    {"temperature", "nil", "c0", IG_E_PROTO_FIELD_TYPE, 0, "got nil"},
	    {"temperature", "string \"1\"", "a131", IG_E_PROTO_FIELD_TYPE, 0, "got a string"},
	    {"temperature", "array [1]", "9101", IG_E_PROTO_FIELD_TYPE, 0, "got an array"},
	    {"temperature", "binary", "c40101", IG_E_PROTO_FIELD_TYPE, 0, "got binary"},
	    {"top_p", "float64 1", "cb3ff0000000000000", IG_E_OK, 1.0, NULL},
	    {"top_p", "float64 1 + 2^-52", "cb3ff0000000000001", IG_E_PROTO_FIELD_RANGE, 0,
	     "accepted 0..1"},
	    {"top_p", "fixint 1", "01", IG_E_OK, 1.0, NULL},
	    {"top_p", "fixint 0 (refused above the codec)", "00", IG_E_OK, 0.0, NULL},
	    {"top_p", "fixint 2", "02", IG_E_PROTO_FIELD_RANGE, 0, "2 is out of range"},
	};
	int failures = 0;

	(void)state;
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct msg out;
		double got;

		if (decode_submit_with(rows[i].name, rows[i].field, rows[i].hex, rows[i].want,
		                       rows[i].says, &out)) {
			failures++;
			continue;
		}
		if (rows[i].want != IG_E_OK)
			continue;
		got = strcmp(rows[i].field, "top_p") == 0 ? out.u.submit.top_p
		                                          : out.u.submit.temperature;
		/* Bit for bit: -0 stays -0. */
		if (memcmp(&got, &rows[i].value, sizeof(got)) != 0) {
			printf("FAIL %s: decoded %.17g, want %.17g\n", rows[i].name, got,
			       rows[i].value);
			failures++;
		}
	}
	assert_int_equal(failures, 0);
}

static void test_ids_wire_forms(void **state)
{
	static const struct {
		const char *name, *hex;
		int want;
		uint32_t n, first, last; /* when accepted */
		const char *says;        /* when refused */
	} rows[] = {
	    {"empty", "90", IG_E_OK, 0, 0, 0, NULL},
	    {"[0, 127, 2^32-1]", "93007fceffffffff", IG_E_OK, 3, 0, UINT32_MAX, NULL},
	    {"uint8, uint16 and uint64 forms", "93cc80cd0100cf00000000ffffffff", IG_E_OK, 3, 128,
	     UINT32_MAX, NULL},
	    {"int8 5 (a non-negative int)", "91d005", IG_E_OK, 1, 5, 5, NULL},
	    {"array16 of one", "dc000101", IG_E_OK, 1, 1, 1, NULL},
	    {"array32 of one", "dd0000000101", IG_E_OK, 1, 1, 1, NULL},
	    {"an id of 2^32", "91cf0000000100000000", IG_E_PROTO_FIELD_RANGE, 0, 0, 0,
	     "prompt[0]: token id 4294967296 is out of range; accepted 0..4294967295"},
	    {"an id of -1", "9201ff", IG_E_PROTO_FIELD_RANGE, 0, 0, 0, "prompt[1]"},
	    {"an id of 1.0", "91cb3ff0000000000000", IG_E_PROTO_FIELD_TYPE, 0, 0, 0,
	     "prompt[0]: expected an unsigned integer, got a float"},
	    {"an id as float32", "91ca3f800000", IG_E_PROTO_FIELD_TYPE, 0, 0, 0, "prompt[0]"},
	    {"an id as a string", "91a131", IG_E_PROTO_FIELD_TYPE, 0, 0, 0, "prompt[0]"},
	    {"an id of nil", "930102c0", IG_E_PROTO_FIELD_TYPE, 0, 0, 0, "prompt[2]"},
	    {"an id of true", "91c3", IG_E_PROTO_FIELD_TYPE, 0, 0, 0, "prompt[0]"},
	    {"an id that is an array", "919101", IG_E_PROTO_FIELD_TYPE, 0, 0, 0, "prompt[0]"},
	    {"a map", "80", IG_E_PROTO_FIELD_TYPE, 0, 0, 0, "expected an array of token ids"},
	    {"a string", "a0", IG_E_PROTO_FIELD_TYPE, 0, 0, 0, "got a string"},
	    {"binary", "c40101", IG_E_PROTO_FIELD_TYPE, 0, 0, 0, "got binary"},
	    {"array32 claiming 2^32-1 ids", "ddffffffff", IG_E_PROTO_TRUNCATED, 0, 0, 0, NULL},
	};
	int failures = 0;

	(void)state;
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct msg out;
		uint32_t n;

		if (decode_submit_with(rows[i].name, "prompt", rows[i].hex, rows[i].want,
		                       rows[i].says, &out)) {
			failures++;
			continue;
		}
		if (rows[i].want != IG_E_OK)
			continue;
		n = out.u.submit.prompt.n;
		if (n != rows[i].n || (n && (out.u.submit.prompt.v[0] != rows[i].first ||
		                             out.u.submit.prompt.v[n - 1] != rows[i].last))) {
			printf("FAIL %s: decoded %u ids\n", rows[i].name, n);
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
	/* a version one past ours: refused, the peer's version reported */
	static const char bytes[] = {
	    '\x83', '\xa1', 't', '\x02', '\xa1', 'v', (char)(MSG_PROTO_VERSION + 1),
	    '\xa3', 's',    'e', 'q',    '\x00'};
	char want[32];
	struct ig_errbuf eb;
	struct msg out;

	(void)state;
	assert_int_equal(msg_decode(bytes, sizeof(bytes), &out, &eb), IG_E_PROTO_VERSION);
	assert_int_equal(out.version, MSG_PROTO_VERSION + 1);
	assert_int_equal(out.type, MSG_PING);
	snprintf(want, sizeof(want), "version %u", MSG_PROTO_VERSION + 1);
	assert_non_null(strstr(eb.msg, want));
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

	memset(&m, 0, sizeof(m));
	m.type = MSG_SUBMIT;
	m.u.submit.class = msg_str_of("agent");
	m.u.submit.temperature = NAN;
	assert_int_equal(msg_encode(&m, count_bytes, &written, &eb), IG_E_PROTO_FIELD_RANGE);
	assert_non_null(strstr(eb.msg, "submit.temperature: NaN"));
	m.u.submit.temperature = 100.5;
	assert_int_equal(msg_encode(&m, count_bytes, &written, &eb), IG_E_PROTO_FIELD_RANGE);
	assert_non_null(strstr(eb.msg, "submit.temperature: 100.5 is out of range"));
	m.u.submit.temperature = -INFINITY;
	assert_int_equal(msg_encode(&m, count_bytes, &written, &eb), IG_E_PROTO_FIELD_RANGE);
	m.u.submit.temperature = 1.0;
	m.u.submit.top_p = 1.0000001;
	assert_int_equal(msg_encode(&m, count_bytes, &written, &eb), IG_E_PROTO_FIELD_RANGE);
	assert_non_null(strstr(eb.msg, "submit.top_p"));
	m.u.submit.top_p = 1.0;
	m.u.submit.prompt.n = MSG_IDS_MAX + 1;
	assert_int_equal(msg_encode(&m, count_bytes, &written, &eb), IG_E_PROTO_FIELD_RANGE);
	assert_non_null(strstr(eb.msg, "submit.prompt: 4097 elements; accepted 0..4096"));

	memset(&m, 0, sizeof(m));
	m.type = MSG_TOKENS;
	m.u.tokens.id = 1;
	m.u.tokens.state = msg_str_of("decode");
	m.u.tokens.tokens.n = UINT32_MAX;
	assert_int_equal(msg_encode(&m, count_bytes, &written, &eb), IG_E_PROTO_FIELD_RANGE);
	assert_non_null(strstr(eb.msg, "tokens.tokens"));

	assert_int_equal(written, 0); /* nothing reached the output */

	/* The encoder writes every F64 as a float64, even an integral value. */
	memset(&m, 0, sizeof(m));
	m.type = MSG_SUBMIT;
	m.u.submit.class = msg_str_of("agent");
	m.u.submit.temperature = 2.0;
	m.u.submit.top_p = 0.5;
	{
		struct msg_buf b;
		char *hex;

		encode(&m, &b);
		hex = to_hex(b.p, b.n);
		assert_non_null(strstr(hex, "ab74656d7065726174757265cb4000000000000000"));
		assert_non_null(strstr(hex, "a5746f705f70cb3fe0000000000000"));
		free(hex);
		msg_buf_release(&b);
	}
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

/* ---- re-tagging: fd_submit forwarded as submit ------------------------------ */

/* An fd_submit packed by hand: "v" first, then "t" in the msgpack form
 * `tform` (0: fixint, else 0xcc..0xcf, 0xd0..0xd3), then its fields. */
static void pack_fd_submit(unsigned tform, const struct msg *m, msgpack_sbuffer *sb)
{
	const struct msg_desc *d = msg_desc_find(MSG_FD_SUBMIT);
	msgpack_packer pk;

	msgpack_sbuffer_init(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 2 + d->rec.nfields);
	pack_key(&pk, "v");
	msgpack_pack_uint32(&pk, MSG_PROTO_VERSION);
	pack_key(&pk, "t");
	switch (tform) {
	case 0xcc:
		msgpack_pack_fix_uint8(&pk, MSG_FD_SUBMIT);
		break;
	case 0xcd:
		msgpack_pack_fix_uint16(&pk, MSG_FD_SUBMIT);
		break;
	case 0xce:
		msgpack_pack_fix_uint32(&pk, MSG_FD_SUBMIT);
		break;
	case 0xcf:
		msgpack_pack_fix_uint64(&pk, MSG_FD_SUBMIT);
		break;
	case 0xd0:
		msgpack_pack_fix_int8(&pk, MSG_FD_SUBMIT);
		break;
	case 0xd3:
		msgpack_pack_fix_int64(&pk, MSG_FD_SUBMIT);
		break;
	default:
		msgpack_pack_uint32(&pk, MSG_FD_SUBMIT);
		break;
	}
	for (uint32_t i = 0; i < d->rec.nfields; i++) {
		pack_key(&pk, d->rec.fields[i].name);
		pack_value(&pk, &d->rec.fields[i], (const char *)&m->u, MUT_NONE);
	}
}

static void test_retag(void **state)
{
	static const unsigned forms[] = {0, 0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd3};
	struct ig_errbuf eb = {0};
	struct msg m, got;
	msgpack_sbuffer sb;
	struct msg_buf b = {0};
	void *keep;

	(void)state;
	memset(&m, 0, sizeof(m));
	m.type = MSG_FD_SUBMIT;
	m.u.fd_submit.text = msg_str_of("hello, door");
	m.u.fd_submit.plain.n = 2;
	m.u.fd_submit.plain.v[0] = 0;
	m.u.fd_submit.plain.v[1] = 5;
	m.u.fd_submit.class = msg_str_of("agent");
	m.u.fd_submit.temperature = 0.75;
	m.u.fd_submit.top_p = 0.5;
	m.u.fd_submit.top_k = 40;
	m.u.fd_submit.seed = UINT64_MAX;
	m.u.fd_submit.max_tokens = 9;
	m.u.fd_submit.stop.n = 1;
	m.u.fd_submit.stop.v[0].text = msg_str_of("</s>");
	m.u.fd_submit.logprobs = true; /* optional fields travel re-tagged too */
	m.u.fd_submit.top_logprobs = 5;
	m.u.fd_submit.echo = true; /* (pack_value writes every bool true) */
	/* our encoder's bytes: one byte changes, and they decode as the submit */
	assert_int_equal(msg_encode(&m, msg_buf_write, &b, &eb), IG_E_OK);
	{
		char *orig = malloc(b.n);
		size_t diff = 0;

		assert_non_null(orig);
		memcpy(orig, b.p, b.n);
		assert_int_equal(msg_retag(b.p, b.n, MSG_FD_SUBMIT, MSG_SUBMIT, &eb), IG_E_OK);
		for (size_t i = 0; i < b.n; i++)
			diff += orig[i] != b.p[i];
		assert_int_equal(diff, 1);
		free(orig);
	}
	assert_int_equal(decode_exact(b.p, b.n, &got, &eb, &keep), IG_E_OK);
	assert_int_equal(got.type, MSG_SUBMIT);
	got.type = MSG_FD_SUBMIT; /* the same fields, the same layout */
	assert_true(msg_equal(&m, &got));
	free(keep);
	/* the type written as it was: re-tagging it again is refused */
	assert_int_equal(msg_retag(b.p, b.n, MSG_FD_SUBMIT, MSG_SUBMIT, &eb), IG_E_INVAL);
	/* types that declare other fields are refused, nothing changed */
	assert_int_equal(msg_retag(b.p, b.n, MSG_SUBMIT, MSG_POLL, &eb), IG_E_INVAL);
	assert_int_equal(msg_retag(b.p, b.n, MSG_SUBMIT, 9999, &eb), IG_E_INVAL);
	assert_int_equal(decode_exact(b.p, b.n, &got, &eb, NULL), IG_E_OK);
	assert_int_equal(got.type, MSG_SUBMIT);
	msg_buf_release(&b);
	/* a sender's other forms of the type, "t" after "v" */
	for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
		pack_fd_submit(forms[i], &m, &sb);
		assert_int_equal(decode_exact(sb.data, sb.size, &got, &eb, NULL), IG_E_OK);
		assert_int_equal(got.type, MSG_FD_SUBMIT);
		if (msg_retag(sb.data, sb.size, MSG_FD_SUBMIT, MSG_SUBMIT, &eb) != IG_E_OK)
			fail_msg("form 0x%02x: %s", forms[i], eb.msg);
		assert_int_equal(decode_exact(sb.data, sb.size, &got, &eb, &keep), IG_E_OK);
		assert_int_equal(got.type, MSG_SUBMIT);
		got.type = MSG_FD_SUBMIT;
		assert_true(msg_equal(&m, &got));
		free(keep);
		msgpack_sbuffer_destroy(&sb);
	}
	/* a message cut short has no type to re-tag */
	pack_fd_submit(0, &m, &sb);
	assert_int_equal(msg_retag(sb.data, sb.size, MSG_FD_SUBMIT, MSG_FD_SUBMIT, &eb), IG_E_OK);
	assert_int_equal(msg_retag(sb.data, 3, MSG_FD_SUBMIT, MSG_SUBMIT, &eb), IG_E_INVAL);
	msgpack_sbuffer_destroy(&sb);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_declarations),
	    cmocka_unit_test(test_golden),
	    cmocka_unit_test(test_roundtrip_random),
	    cmocka_unit_test(test_derived_malformed),
	    cmocka_unit_test(test_malformed_table),
	    cmocka_unit_test(test_f64_wire_forms),
	    cmocka_unit_test(test_ids_wire_forms),
	    cmocka_unit_test(test_oversize),
	    cmocka_unit_test(test_version_is_reported),
	    cmocka_unit_test(test_encode_refuses),
	    cmocka_unit_test(test_utf8),
	    cmocka_unit_test(test_retag),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
