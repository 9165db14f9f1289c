/*
 * gguf.c - the GGUF v3 reader and writer (layout and rules in gguf.h).
 *
 * The reader parses the whole header up front through one bounds-checked
 * cursor (struct rd): no byte outside [base, base + size) is ever read, and
 * every count is checked against the bytes left, then against its stated
 * maximum (GGUF_MAX_*), before anything is read or allocated for it. After
 * the header: duplicate keys and names are found by sorting, the tensors are
 * checked against the data section and against each other. Lookups
 * afterwards are binary searches over arrays sorted by name.
 */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf.c reads and writes little-endian GGUF files by memcpy: a little-endian host is needed"
#endif

_Static_assert(sizeof(float) == 4 && sizeof(double) == 8, "IEEE binary32 and binary64");
_Static_assert(sizeof(bool) == 1, "bool arrays are read as one byte per element");

/* magic 4 + version 4 + tensor_count 8 + kv_count 8 */
#define HEADER_BYTES 24u
/* The fewest bytes a pair can take: key length 8 + empty key + type 4 + a UINT8 1. */
#define KV_MIN_BYTES 13u
/* The fewest bytes a tensor info can take: name length 8 + empty name + n_dims 4 +
 * one dim 8 + type 4 + offset 8. */
#define TI_MIN_BYTES 32u

/* ---- names --------------------------------------------------------------- */

static const char *const type_names[GGUF_TYPE_COUNT] = {
    "UINT8", "INT8",   "UINT16", "INT16",  "UINT32", "INT32",   "FLOAT32",
    "BOOL",  "STRING", "ARRAY",  "UINT64", "INT64",  "FLOAT64",
};

static const size_t type_sizes[GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *gguf_type_name(uint32_t type)
{
	return type < GGUF_TYPE_COUNT ? type_names[type] : "unknown";
}

size_t gguf_type_size(uint32_t type)
{
	return type < GGUF_TYPE_COUNT ? type_sizes[type] : 0;
}

/* ggml's type numbers, so that a refusal names what the file holds. Numbers
 * 4, 5 (old Q4_2, Q4_3) and 31..33 (old Q4_0_4_4 ...) were retired by ggml. */
const char *gguf_tensor_type_name(uint32_t type)
{
	static const char *const names[] = {
	    [0] = "F32",     [1] = "F16",      [2] = "Q4_0",   [3] = "Q4_1",    [6] = "Q5_0",
	    [7] = "Q5_1",    [8] = "Q8_0",     [9] = "Q8_1",   [10] = "Q2_K",   [11] = "Q3_K",
	    [12] = "Q4_K",   [13] = "Q5_K",    [14] = "Q6_K",  [15] = "Q8_K",   [16] = "IQ2_XXS",
	    [17] = "IQ2_XS", [18] = "IQ3_XXS", [19] = "IQ1_S", [20] = "IQ4_NL", [21] = "IQ3_S",
	    [22] = "IQ2_S",  [23] = "IQ4_XS",  [24] = "I8",    [25] = "I16",    [26] = "I32",
	    [27] = "I64",    [28] = "F64",     [29] = "IQ1_M", [30] = "BF16",   [34] = "TQ1_0",
	    [35] = "TQ2_0",  [39] = "MXFP4",
	};

	if (type < sizeof(names) / sizeof(names[0]) && names[type])
		return names[type];
	return "unknown";
}

/*
 * The bytes of a tensor of `type` with `ne` elements whose first dim (a row)
 * is `dim0`: rows are whole blocks of the type (quant.h). 0 with `why` set
 * when the type is not one we read, a row is not whole blocks, or the count
 * overflows 2^63-1.
 */
static uint64_t tensor_bytes(uint32_t type, uint64_t dim0, uint64_t ne, char *why, size_t cap)
{
	const struct quant_type *q = quant_type_of(type);

	if (!q) {
		snprintf(why, cap, "type %s (%" PRIu32 "), which is not accepted; accepted: %s",
		         gguf_tensor_type_name(type), type, quant_accepted());
		return 0;
	}
	if (dim0 % q->block_elems) {
		snprintf(why, cap,
		         "type %s with rows of %" PRIu64 " elements: a row of %s is whole blocks "
		         "of %" PRIu32 " elements",
		         q->name, dim0, q->name, q->block_elems);
		return 0;
	}
	if (ne / q->block_elems > (uint64_t)INT64_MAX / q->block_bytes) {
		snprintf(why, cap,
		         "%" PRIu64 " elements of %s overflow the byte count; at most 2^63-1 bytes "
		         "are accepted",
		         ne, q->name);
		return 0;
	}
	return ne / q->block_elems * q->block_bytes;
}

/* ---- strings ------------------------------------------------------------- */

/* Valid UTF-8 without NUL, overlong forms, surrogates or code points past U+10FFFF. */
static bool utf8_valid(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0;

	while (i < n) {
		unsigned c = p[i];
		size_t k;
		uint32_t cp;

		if (c == 0)
			return false;
		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf) {
			k = 1;
			cp = c & 0x1f;
		} else if (c >= 0xe0 && c <= 0xef) {
			k = 2;
			cp = c & 0x0f;
		} else if (c >= 0xf0 && c <= 0xf4) {
			k = 3;
			cp = c & 0x07;
		} else {
			return false;
		}
		if (n - i - 1 < k)
			return false;
		for (size_t j = 1; j <= k; j++) {
			if ((p[i + j] & 0xc0) != 0x80)
				return false;
			cp = (cp << 6) | (p[i + j] & 0x3f);
		}
		if ((k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) || cp > 0x10ffff ||
		    (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += k + 1;
	}
	return true;
}

/*
 * `s` quoted for a message into `buf`: printable ASCII and (when the whole
 * string is valid UTF-8) multi-byte characters as they are, everything else
 * as \xNN; long strings are cut with "...".
 */
static const char *quote(char *buf, size_t cap, const char *s, size_t n)
{
	bool utf8 = utf8_valid(s, n);
	size_t o = 0, i;

	if (cap < 8)
		return "";
	buf[o++] = '\'';
	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (o + 6 > cap)
			break;
		if ((c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') || (utf8 && c >= 0x80)) {
			buf[o++] = (char)c;
		} else {
			snprintf(buf + o, cap - o, "\\x%02x", c);
			o += 4;
		}
	}
	if (i < n) {
		/* cut: back off to leave room for "...'" */
		while (o + 5 > cap)
			o--;
		memcpy(buf + o, "...", 3);
		o += 3;
	}
	buf[o++] = '\'';
	buf[o] = '\0';
	return buf;
}

#define QCAP 96 /* a quoted name in a message */

/* ---- the reader's cursor ------------------------------------------------- */

struct rd {
	const unsigned char *p;
	size_t size;
	size_t off;
	const char *path;
	struct ig_errbuf *eb;
	char what[160]; /* the item being read: "kv 3 'general.name'" */
};

static int rd_fail(struct rd *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int rd_fail(struct rd *r, const char *fmt, ...)
{
	char detail[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	ig_errf(r->eb, IG_E_INVAL, "'%s': %s", r->path, detail);
	return IG_E_INVAL;
}

/* Take `n` bytes at the cursor; `field` (with index `idx` when >= 0) names them. */
static int rd_take(struct rd *r, size_t n, const void **out, const char *field, int64_t idx)
{
	char at[48] = "";

	if (n <= r->size - r->off) {
		*out = r->p + r->off;
		r->off += n;
		return 0;
	}
	if (idx >= 0)
		snprintf(at, sizeof(at), " %" PRId64, idx);
	return rd_fail(r,
	               "truncated: %s: the %s%s at byte %zu needs %zu bytes but the file ends at "
	               "byte %zu",
	               r->what, field, at, r->off, n, r->size);
}

static int rd_u32(struct rd *r, uint32_t *v, const char *field)
{
	const void *p = NULL;
	int rc = rd_take(r, 4, &p, field, -1);

	if (!rc)
		memcpy(v, p, 4);
	return rc;
}

static int rd_u64(struct rd *r, uint64_t *v, const char *field, int64_t idx)
{
	const void *p = NULL;
	int rc = rd_take(r, 8, &p, field, idx);

	if (!rc)
		memcpy(v, p, 8);
	return rc;
}

/* A gguf string: its length, then its bytes, both inside the file. */
static int rd_str(struct rd *r, struct gguf_str *s, const char *field, int64_t idx)
{
	char lenfield[64], at[48] = "";
	uint64_t len;

	if (r->size - r->off < 8) {
		/* named only on failure: a vocabulary has 10^5 strings */
		snprintf(lenfield, sizeof(lenfield), "%s length", field);
		return rd_u64(r, &len, lenfield, idx);
	}
	memcpy(&len, r->p + r->off, 8);
	r->off += 8;
	if (len > r->size - r->off) {
		if (idx >= 0)
			snprintf(at, sizeof(at), " %" PRId64, idx);
		return rd_fail(r,
		               "truncated: %s: the %s%s at byte %zu claims %" PRIu64
		               " bytes but only %zu are left in the file",
		               r->what, field, at, r->off, len, r->size - r->off);
	}
	s->ptr = (const char *)r->p + r->off;
	s->len = (size_t)len;
	r->off += (size_t)len;
	return 0;
}

/* ---- the reader ---------------------------------------------------------- */

static int nomem(struct ig_errbuf *eb, const char *path, const char *what)
{
	return ig_errf(eb, IG_E_NOMEM, "'%s': out of memory for %s", path, what);
}

/* Grow `*arr` (of `elem` bytes each) to hold at least `need` entries. */
static bool grow(void **arr, size_t *cap, size_t need, size_t elem)
{
	size_t ncap = *cap ? *cap : 16;
	void *p;

	if (need <= *cap)
		return true;
	while (ncap < need)
		ncap *= 2;
	p = realloc(*arr, ncap * elem);
	if (!p)
		return false;
	*arr = p;
	*cap = ncap;
	return true;
}

static int rd_array(struct rd *r, struct gguf_arr *a)
{
	uint32_t elem;
	uint64_t n;
	const void *p = NULL;
	size_t esize;
	int rc;

	rc = rd_u32(r, &elem, "array element type");
	if (rc)
		return rc;
	if (elem == GGUF_TYPE_ARRAY)
		return rd_fail(r, "%s is an array of arrays; nested arrays are not accepted",
		               r->what);
	if (elem >= GGUF_TYPE_COUNT)
		return rd_fail(r,
		               "%s is an array of unknown element type %" PRIu32
		               "; accepted element types are 0..8 and 10..12",
		               r->what, elem);
	rc = rd_u64(r, &n, "array count", -1);
	if (rc)
		return rc;
	/* what the file can hold first (each string takes at least its 8-byte
	 * length), then the stated maximum: before any element is read */
	esize = elem == GGUF_TYPE_STRING ? 8 : type_sizes[elem];
	if (n > (r->size - r->off) / esize) {
		if (elem == GGUF_TYPE_STRING)
			return rd_fail(r,
			               "truncated: %s: %" PRIu64
			               " strings cannot fit in the %zu bytes left in the file",
			               r->what, n, r->size - r->off);
		return rd_fail(r,
		               "truncated: %s: %" PRIu64 " elements of %s (%zu bytes each) cannot "
		               "fit in the %zu bytes left in the file",
		               r->what, n, type_names[elem], esize, r->size - r->off);
	}
	if (n > GGUF_MAX_ARRAY)
		return rd_fail(r,
		               "%s: an array of %" PRIu64 " elements; accepted: up to %u elements "
		               "(GGUF_MAX_ARRAY)",
		               r->what, n, GGUF_MAX_ARRAY);
	a->type = (enum gguf_type)elem;
	a->strs = NULL;
	a->data = r->p + r->off;
	if (elem == GGUF_TYPE_STRING) {
		struct gguf_str *strs;

		strs = malloc(n ? (size_t)n * sizeof(*strs) : 1);
		if (!strs)
			return nomem(r->eb, r->path, "a string array");
		a->strs = strs;
		a->n = n;
		for (uint64_t i = 0; i < n; i++) {
			rc = rd_str(r, &strs[i], "string", (int64_t)i);
			if (rc)
				return rc;
		}
		return 0;
	}
	rc = rd_take(r, (size_t)n * esize, &p, "array elements", -1);
	if (rc)
		return rc;
	a->n = n;
	if (elem == GGUF_TYPE_BOOL) {
		for (uint64_t i = 0; i < n; i++) {
			unsigned char c = ((const unsigned char *)p)[i];

			if (c > 1)
				return rd_fail(
				    r, "%s: BOOL element %" PRIu64 " is %u; a BOOL is 0 or 1",
				    r->what, i, c);
		}
	}
	return 0;
}

static int rd_kv(struct rd *r, struct gguf_kv *kv, size_t idx)
{
	char q[QCAP];
	struct gguf_str key;
	uint32_t type;
	const void *p = NULL;
	int rc;

	snprintf(r->what, sizeof(r->what), "kv %zu", idx);
	rc = rd_str(r, &key, "key", -1);
	if (rc)
		return rc;
	if (key.len == 0)
		return rd_fail(r, "kv %zu has an empty key; keys are non-empty UTF-8", idx);
	if (!utf8_valid(key.ptr, key.len))
		return rd_fail(r,
		               "kv %zu key %s is not valid UTF-8 (or holds a NUL); keys are UTF-8",
		               idx, quote(q, sizeof(q), key.ptr, key.len));
	snprintf(r->what, sizeof(r->what), "kv %zu %s", idx, quote(q, sizeof(q), key.ptr, key.len));
	kv->key = key.ptr; /* a view until the names arena is built */
	kv->key_len = key.len;
	rc = rd_u32(r, &type, "value type");
	if (rc)
		return rc;
	if (type >= GGUF_TYPE_COUNT)
		return rd_fail(
		    r, "%s has unknown value type %" PRIu32 "; accepted value types are 0..12",
		    r->what, type);
	kv->type = (enum gguf_type)type;
	memset(&kv->v, 0, sizeof(kv->v));
	switch (kv->type) {
	case GGUF_TYPE_STRING:
		return rd_str(r, &kv->v.str, "string", -1);
	case GGUF_TYPE_ARRAY:
		return rd_array(r, &kv->v.arr);
	default:
		rc = rd_take(r, type_sizes[type], &p, "value", -1);
		if (rc)
			return rc;
		if (kv->type == GGUF_TYPE_BOOL) {
			unsigned char c = *(const unsigned char *)p;

			if (c > 1)
				return rd_fail(r, "%s: BOOL value is %u; a BOOL is 0 or 1", r->what,
				               c);
		}
		memcpy(&kv->v, p, type_sizes[type]);
		return 0;
	}
}

static int rd_tensor(struct rd *r, struct gguf_tensor *t, size_t idx)
{
	char q[QCAP];
	struct gguf_str name;
	uint32_t type;
	char why[256];
	uint64_t ne;
	int rc;

	snprintf(r->what, sizeof(r->what), "tensor %zu", idx);
	rc = rd_str(r, &name, "name", -1);
	if (rc)
		return rc;
	if (name.len == 0)
		return rd_fail(r, "tensor %zu has an empty name; names are non-empty UTF-8", idx);
	if (!utf8_valid(name.ptr, name.len))
		return rd_fail(r,
		               "tensor %zu name %s is not valid UTF-8 (or holds a NUL); names are "
		               "UTF-8",
		               idx, quote(q, sizeof(q), name.ptr, name.len));
	snprintf(r->what, sizeof(r->what), "tensor %s", quote(q, sizeof(q), name.ptr, name.len));
	t->name = name.ptr; /* a view until the names arena is built */
	t->name_len = name.len;
	rc = rd_u32(r, &t->n_dims, "n_dims");
	if (rc)
		return rc;
	if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
		return rd_fail(r, "%s has n_dims %" PRIu32 "; accepted: 1 to %u", r->what,
		               t->n_dims, GGUF_MAX_DIMS);
	for (uint32_t i = 0; i < GGUF_MAX_DIMS; i++)
		t->dims[i] = 1;
	for (uint32_t i = 0; i < t->n_dims; i++) {
		rc = rd_u64(r, &t->dims[i], "dim", i);
		if (rc)
			return rc;
	}
	rc = rd_u32(r, &type, "type");
	if (rc)
		return rc;
	rc = rd_u64(r, &t->offset, "offset", -1);
	if (rc)
		return rc;

	for (uint32_t i = 0; i < t->n_dims; i++)
		if (t->dims[i] == 0)
			return rd_fail(r,
			               "%s has dim %" PRIu32 " equal to 0; every dim is at least 1",
			               r->what, i);
	ne = 1;
	for (uint32_t i = 0; i < t->n_dims; i++) {
		if (t->dims[i] > (uint64_t)INT64_MAX / ne)
			return rd_fail(r,
			               "%s: the element count of dims [%" PRIu64 ", %" PRIu64
			               ", %" PRIu64 ", %" PRIu64
			               "] overflows; at most 2^63-1 elements are accepted",
			               r->what, t->dims[0], t->dims[1], t->dims[2], t->dims[3]);
		ne *= t->dims[i];
	}
	t->n_bytes = tensor_bytes(type, t->dims[0], ne, why, sizeof(why));
	if (t->n_bytes == 0)
		return rd_fail(r, "%s has %s", r->what, why);
	t->type = (enum gguf_tensor_type)type;
	t->n_elements = ne;
	return 0;
}

/* Order of names during the parse (views) and after (NUL-terminated): the same. */
static int cmp_view(const char *a, size_t alen, const char *b, size_t blen)
{
	int c = memcmp(a, b, alen < blen ? alen : blen);

	if (c)
		return c;
	return alen < blen ? -1 : alen > blen;
}

static int cmp_kv_ptr(const void *a, const void *b)
{
	const struct gguf_kv *x = *(const struct gguf_kv *const *)a;
	const struct gguf_kv *y = *(const struct gguf_kv *const *)b;

	return cmp_view(x->key, x->key_len, y->key, y->key_len);
}

static int cmp_tensor_ptr(const void *a, const void *b)
{
	const struct gguf_tensor *x = *(const struct gguf_tensor *const *)a;
	const struct gguf_tensor *y = *(const struct gguf_tensor *const *)b;

	return cmp_view(x->name, x->name_len, y->name, y->name_len);
}

static int cmp_tensor_offset(const void *a, const void *b)
{
	const struct gguf_tensor *x = *(const struct gguf_tensor *const *)a;
	const struct gguf_tensor *y = *(const struct gguf_tensor *const *)b;

	if (x->offset != y->offset)
		return x->offset < y->offset ? -1 : 1;
	/* same offset: file order, so the message names the earlier one first */
	return x < y ? -1 : x > y;
}

static int check_alignment(struct rd *r, struct gguf *g)
{
	g->alignment = GGUF_DEFAULT_ALIGNMENT;
	for (size_t i = 0; i < g->n_kv; i++) {
		const struct gguf_kv *kv = &g->kvs[i];

		if (cmp_view(kv->key, kv->key_len, GGUF_KEY_ALIGNMENT,
		             sizeof(GGUF_KEY_ALIGNMENT) - 1) != 0)
			continue;
		if (kv->type != GGUF_TYPE_UINT32)
			return rd_fail(r, "%s has type %s; it must be UINT32", GGUF_KEY_ALIGNMENT,
			               gguf_type_name(kv->type));
		if (kv->v.u32 == 0 || (kv->v.u32 & (kv->v.u32 - 1)) != 0)
			return rd_fail(r,
			               "%s is %" PRIu32 "; it must be a power of two (default %u)",
			               GGUF_KEY_ALIGNMENT, kv->v.u32, GGUF_DEFAULT_ALIGNMENT);
		g->alignment = kv->v.u32;
	}
	return 0;
}

/* Tensors inside the data section, aligned, and not overlapping. */
static int check_tensors(struct rd *r, struct gguf *g)
{
	char q1[QCAP], q2[QCAP];
	uint64_t avail = g->size > g->data_offset ? g->size - g->data_offset : 0;
	const struct gguf_tensor **by_off;

	for (size_t i = 0; i < g->n_tensors; i++) {
		const struct gguf_tensor *t = &g->tensors[i];
		const char *nm = quote(q1, sizeof(q1), t->name, t->name_len);

		if (t->offset % g->alignment != 0)
			return rd_fail(r,
			               "tensor %s offset %" PRIu64
			               " is not a multiple of the alignment %" PRIu32,
			               nm, t->offset, g->alignment);
		if (t->offset <= avail && t->n_bytes <= avail - t->offset)
			continue;
		if (t->n_bytes > UINT64_MAX - g->data_offset ||
		    t->offset > UINT64_MAX - g->data_offset - t->n_bytes)
			return rd_fail(r,
			               "truncated: tensor %s offset %" PRIu64
			               " lies past the end of the file (%zu bytes)",
			               nm, t->offset, g->size);
		return rd_fail(r,
		               "truncated: tensor %s needs file bytes %" PRIu64 "..%" PRIu64
		               " (%" PRIu64 " bytes) but the file has %zu bytes: %" PRIu64
		               " bytes short",
		               nm, g->data_offset + t->offset,
		               g->data_offset + t->offset + t->n_bytes, t->n_bytes, g->size,
		               g->data_offset + t->offset + t->n_bytes - (uint64_t)g->size);
	}
	if (g->n_tensors < 2)
		return 0;
	by_off = malloc(g->n_tensors * sizeof(*by_off));
	if (!by_off)
		return nomem(r->eb, r->path, "the tensor table");
	for (size_t i = 0; i < g->n_tensors; i++)
		by_off[i] = &g->tensors[i];
	qsort(by_off, g->n_tensors, sizeof(*by_off), cmp_tensor_offset);
	for (size_t i = 1; i < g->n_tensors; i++) {
		const struct gguf_tensor *a = by_off[i - 1], *b = by_off[i];

		if (a->offset + a->n_bytes > b->offset) {
			int rc = rd_fail(r,
			                 "tensors %s (data bytes %" PRIu64 "..%" PRIu64
			                 ") and %s (data bytes %" PRIu64 "..%" PRIu64
			                 ") overlap; tensors must not share bytes",
			                 quote(q1, sizeof(q1), a->name, a->name_len), a->offset,
			                 a->offset + a->n_bytes,
			                 quote(q2, sizeof(q2), b->name, b->name_len), b->offset,
			                 b->offset + b->n_bytes);

			free(by_off);
			return rc;
		}
	}
	free(by_off);
	return 0;
}

/* Copy keys and names into one arena and point at the copies. */
static int build_names(struct rd *r, struct gguf *g)
{
	size_t total = 1, o = 0;

	for (size_t i = 0; i < g->n_kv; i++)
		total += g->kvs[i].key_len + 1;
	for (size_t i = 0; i < g->n_tensors; i++)
		total += g->tensors[i].name_len + 1;
	g->names = malloc(total);
	if (!g->names)
		return nomem(r->eb, r->path, "the names");
	for (size_t i = 0; i < g->n_kv; i++) {
		memcpy(g->names + o, g->kvs[i].key, g->kvs[i].key_len);
		g->kvs[i].key = g->names + o;
		o += g->kvs[i].key_len;
		g->names[o++] = '\0';
	}
	for (size_t i = 0; i < g->n_tensors; i++) {
		memcpy(g->names + o, g->tensors[i].name, g->tensors[i].name_len);
		g->tensors[i].name = g->names + o;
		o += g->tensors[i].name_len;
		g->names[o++] = '\0';
	}
	return 0;
}

static int parse(struct gguf *g, struct ig_errbuf *eb)
{
	struct rd r = {.p = g->base, .size = g->size, .path = g->path, .eb = eb};
	char q[QCAP];
	uint64_t n_tensors, n_kv;
	size_t rest, cap_kv = 0, cap_t = 0;
	int rc;

	snprintf(r.what, sizeof(r.what), "the header");
	if (g->size < 4 || memcmp(g->base, "GGUF", 4) != 0) {
		char hex[16] = "";

		if (g->size == 0)
			return rd_fail(&r, "empty file; a GGUF file starts with 'GGUF'");
		for (size_t i = 0, o = 0; i < 4 && i < g->size; i++)
			o += (size_t)snprintf(hex + o, sizeof(hex) - o, "%s%02x", i ? " " : "",
			                      g->base[i]);
		if (g->size < 4 && memcmp(g->base, "GGUF", g->size) == 0)
			return rd_fail(
			    &r,
			    "truncated: %zu bytes; a GGUF header takes %u bytes, starting "
			    "with 'GGUF'",
			    g->size, HEADER_BYTES);
		return rd_fail(
		    &r,
		    "not a GGUF file: it starts with %s (%s); a GGUF file starts with "
		    "'GGUF'",
		    quote(q, sizeof(q), (const char *)g->base, g->size < 4 ? g->size : 4), hex);
	}
	r.off = 4;
	rc = rd_u32(&r, &g->version, "version");
	if (rc)
		return rc;
	if (g->version != GGUF_VERSION)
		return rd_fail(
		    &r, "GGUF version %" PRIu32 " is not supported; only version %u is accepted%s",
		    g->version, GGUF_VERSION,
		    g->version == 0x03000000u ? " (this looks like a big-endian file)" : "");
	rc = rd_u64(&r, &n_tensors, "tensor count", -1);
	if (!rc)
		rc = rd_u64(&r, &n_kv, "kv count", -1);
	if (rc)
		return rc;
	rest = g->size - r.off;
	if (n_kv > rest / KV_MIN_BYTES)
		return rd_fail(&r,
		               "truncated: the kv count %" PRIu64
		               " cannot fit in the %zu bytes after the header (a pair takes at "
		               "least %u bytes)",
		               n_kv, rest, KV_MIN_BYTES);
	if (n_tensors > rest / TI_MIN_BYTES)
		return rd_fail(&r,
		               "truncated: the tensor count %" PRIu64
		               " cannot fit in the %zu bytes after the header (a tensor info "
		               "takes at least %u bytes)",
		               n_tensors, rest, TI_MIN_BYTES);
	if (n_kv * KV_MIN_BYTES + n_tensors * TI_MIN_BYTES > rest)
		return rd_fail(&r,
		               "truncated: %" PRIu64 " pairs and %" PRIu64
		               " tensor infos cannot fit in the %zu bytes after the header",
		               n_kv, n_tensors, rest);
	/* then the stated maxima (gguf.h): before any pair or tensor is read */
	if (n_kv > GGUF_MAX_KV)
		return rd_fail(&r,
		               "the kv count %" PRIu64 " is more pairs than a model file has; "
		               "accepted: up to %u (GGUF_MAX_KV)",
		               n_kv, GGUF_MAX_KV);
	if (n_tensors > GGUF_MAX_TENSORS)
		return rd_fail(&r,
		               "the tensor count %" PRIu64
		               " is more tensors than a model file has; "
		               "accepted: up to %u (GGUF_MAX_TENSORS)",
		               n_tensors, GGUF_MAX_TENSORS);

	/* Grown as read, so a lying count costs no more memory than the file backs. */
	for (uint64_t i = 0; i < n_kv; i++) {
		if (!grow((void **)&g->kvs, &cap_kv, (size_t)i + 1, sizeof(*g->kvs)))
			return nomem(eb, g->path, "the kv table");
		memset(&g->kvs[i], 0, sizeof(g->kvs[i]));
		g->n_kv = (size_t)i + 1; /* counted now so that gguf_close frees its strings */
		rc = rd_kv(&r, &g->kvs[i], (size_t)i);
		if (rc)
			return rc;
	}
	if (g->n_kv) {
		g->kv_by_name = malloc(g->n_kv * sizeof(*g->kv_by_name));
		if (!g->kv_by_name)
			return nomem(eb, g->path, "the kv index");
		for (size_t i = 0; i < g->n_kv; i++)
			g->kv_by_name[i] = &g->kvs[i];
		qsort(g->kv_by_name, g->n_kv, sizeof(*g->kv_by_name), cmp_kv_ptr);
		for (size_t i = 1; i < g->n_kv; i++)
			if (cmp_kv_ptr(&g->kv_by_name[i - 1], &g->kv_by_name[i]) == 0)
				return rd_fail(&r, "duplicate key %s; each key may appear once",
				               quote(q, sizeof(q), g->kv_by_name[i]->key,
				                     g->kv_by_name[i]->key_len));
	}
	rc = check_alignment(&r, g);
	if (rc)
		return rc;

	for (uint64_t i = 0; i < n_tensors; i++) {
		if (!grow((void **)&g->tensors, &cap_t, (size_t)i + 1, sizeof(*g->tensors)))
			return nomem(eb, g->path, "the tensor table");
		memset(&g->tensors[i], 0, sizeof(g->tensors[i]));
		rc = rd_tensor(&r, &g->tensors[i], (size_t)i);
		if (rc)
			return rc;
		g->n_tensors = (size_t)i + 1;
	}
	if (g->n_tensors) {
		g->tensor_by_name = malloc(g->n_tensors * sizeof(*g->tensor_by_name));
		if (!g->tensor_by_name)
			return nomem(eb, g->path, "the tensor index");
		for (size_t i = 0; i < g->n_tensors; i++)
			g->tensor_by_name[i] = &g->tensors[i];
		qsort(g->tensor_by_name, g->n_tensors, sizeof(*g->tensor_by_name), cmp_tensor_ptr);
		for (size_t i = 1; i < g->n_tensors; i++)
			if (cmp_tensor_ptr(&g->tensor_by_name[i - 1], &g->tensor_by_name[i]) == 0)
				return rd_fail(
				    &r, "duplicate tensor name %s; each name may appear once",
				    quote(q, sizeof(q), g->tensor_by_name[i]->name,
				          g->tensor_by_name[i]->name_len));
	}

	/* The data section starts at the next multiple of the alignment; with no
	 * tensors it is empty and its padding may be absent. */
	g->data_offset = ((uint64_t)r.off + g->alignment - 1) / g->alignment * g->alignment;
	rc = check_tensors(&r, g);
	if (rc)
		return rc;
	for (size_t i = 0; i < g->n_tensors; i++)
		g->tensors[i].data = g->base + g->data_offset + g->tensors[i].offset;
	return build_names(&r, g);
}

static int open_common(struct gguf *g, const char *name, struct ig_errbuf *eb)
{
	int rc;

	g->path = strdup(name);
	if (!g->path)
		return ig_errf(eb, IG_E_NOMEM, "'%s': out of memory", name);
	rc = parse(g, eb);
	if (rc)
		gguf_close(g);
	return rc;
}

int gguf_open(struct gguf *g, const char *path, struct ig_errbuf *eb)
{
	struct stat st;
	void *map = NULL;
	int fd, rc;

	memset(g, 0, sizeof(*g));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return ig_errf(eb, IG_E_IO, "cannot open GGUF file '%s': %s", path,
		               strerror(errno));
	if (fstat(fd, &st) != 0) {
		rc = ig_errf(eb, IG_E_IO, "cannot stat '%s': %s", path, strerror(errno));
		goto out_close_fd;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = ig_errf(eb, IG_E_IO, "'%s' is not a regular file; a GGUF model is a file",
		             path);
		goto out_close_fd;
	}
	if (st.st_size > 0) {
		map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (map == MAP_FAILED) {
			rc = ig_errf(eb, IG_E_IO, "cannot map '%s' (%lld bytes): %s", path,
			             (long long)st.st_size, strerror(errno));
			goto out_close_fd;
		}
		g->mapped = true;
	}
	close(fd);
	g->base = map;
	g->size = (size_t)st.st_size;
	return open_common(g, path, eb);

out_close_fd:
	close(fd);
	return rc;
}

int gguf_open_mem(struct gguf *g, const void *buf, size_t size, const char *name,
                  struct ig_errbuf *eb)
{
	memset(g, 0, sizeof(*g));
	g->base = buf;
	g->size = size;
	return open_common(g, name, eb);
}

void gguf_close(struct gguf *g)
{
	if (g->mapped && g->base)
		munmap((void *)(uintptr_t)g->base, g->size);
	for (size_t i = 0; i < g->n_kv; i++)
		if (g->kvs[i].type == GGUF_TYPE_ARRAY)
			free((void *)(uintptr_t)g->kvs[i].v.arr.strs);
	free(g->kvs);
	free(g->tensors);
	free(g->kv_by_name);
	free(g->tensor_by_name);
	free(g->names);
	free(g->path);
	memset(g, 0, sizeof(*g));
}

/* ---- lookups ------------------------------------------------------------- */

static int find_kv_cmp(const void *key, const void *elem)
{
	return strcmp(key, (*(const struct gguf_kv *const *)elem)->key);
}

static int find_tensor_cmp(const void *key, const void *elem)
{
	return strcmp(key, (*(const struct gguf_tensor *const *)elem)->name);
}

const struct gguf_kv *gguf_find_kv(const struct gguf *g, const char *key)
{
	const struct gguf_kv *const *hit;

	if (!key || !g->n_kv)
		return NULL;
	hit = bsearch(key, g->kv_by_name, g->n_kv, sizeof(*g->kv_by_name), find_kv_cmp);
	return hit ? *hit : NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf *g, const char *name)
{
	const struct gguf_tensor *const *hit;

	if (!name || !g->n_tensors)
		return NULL;
	hit = bsearch(name, g->tensor_by_name, g->n_tensors, sizeof(*g->tensor_by_name),
	              find_tensor_cmp);
	return hit ? *hit : NULL;
}

const struct gguf_tensor *gguf_tensor_at(const struct gguf *g, size_t i)
{
	return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const struct gguf_kv *gguf_kv_at(const struct gguf *g, size_t i)
{
	return i < g->n_kv ? &g->kvs[i] : NULL;
}

static int get_kv(const struct gguf *g, const char *key, enum gguf_type want,
                  const struct gguf_kv **out, struct ig_errbuf *eb)
{
	const struct gguf_kv *kv = gguf_find_kv(g, key);

	if (!kv)
		return ig_errf(eb, IG_E_NOTFOUND, "'%s': no key '%s'", g->path,
		               key ? key : "(null)");
	if (kv->type != want)
		return ig_errf(eb, IG_E_INVAL, "'%s': key '%s' has type %s, wanted %s", g->path,
		               key, gguf_type_name(kv->type), gguf_type_name(want));
	*out = kv;
	return 0;
}

int gguf_get_u32(const struct gguf *g, const char *key, uint32_t *out, struct ig_errbuf *eb)
{
	const struct gguf_kv *kv = NULL;
	int rc = get_kv(g, key, GGUF_TYPE_UINT32, &kv, eb);

	if (!rc)
		*out = kv->v.u32;
	return rc;
}

int gguf_get_u64(const struct gguf *g, const char *key, uint64_t *out, struct ig_errbuf *eb)
{
	const struct gguf_kv *kv = NULL;
	int rc = get_kv(g, key, GGUF_TYPE_UINT64, &kv, eb);

	if (!rc)
		*out = kv->v.u64;
	return rc;
}

int gguf_get_f32(const struct gguf *g, const char *key, float *out, struct ig_errbuf *eb)
{
	const struct gguf_kv *kv = NULL;
	int rc = get_kv(g, key, GGUF_TYPE_FLOAT32, &kv, eb);

	if (!rc)
		*out = kv->v.f32;
	return rc;
}

int gguf_get_bool(const struct gguf *g, const char *key, bool *out, struct ig_errbuf *eb)
{
	const struct gguf_kv *kv = NULL;
	int rc = get_kv(g, key, GGUF_TYPE_BOOL, &kv, eb);

	if (!rc)
		*out = kv->v.b;
	return rc;
}

int gguf_get_str(const struct gguf *g, const char *key, struct gguf_str *out, struct ig_errbuf *eb)
{
	const struct gguf_kv *kv = NULL;
	int rc = get_kv(g, key, GGUF_TYPE_STRING, &kv, eb);

	if (!rc)
		*out = kv->v.str;
	return rc;
}

int gguf_get_arr(const struct gguf *g, const char *key, enum gguf_type elem, struct gguf_arr *out,
                 struct ig_errbuf *eb)
{
	const struct gguf_kv *kv = gguf_find_kv(g, key);

	if (!kv)
		return ig_errf(eb, IG_E_NOTFOUND, "'%s': no key '%s'", g->path,
		               key ? key : "(null)");
	if (kv->type != GGUF_TYPE_ARRAY)
		return ig_errf(eb, IG_E_INVAL, "'%s': key '%s' has type %s, wanted ARRAY of %s",
		               g->path, key, gguf_type_name(kv->type), gguf_type_name(elem));
	if (kv->v.arr.type != elem)
		return ig_errf(eb, IG_E_INVAL,
		               "'%s': key '%s' has type ARRAY of %s, wanted ARRAY of %s", g->path,
		               key, gguf_type_name(kv->v.arr.type), gguf_type_name(elem));
	*out = kv->v.arr;
	return 0;
}

int gguf_get_arr_str(const struct gguf *g, const char *key, uint64_t i, struct gguf_str *out,
                     struct ig_errbuf *eb)
{
	struct gguf_arr a;
	int rc = gguf_get_arr(g, key, GGUF_TYPE_STRING, &a, eb);

	if (rc)
		return rc;
	if (i >= a.n)
		return ig_errf(eb, IG_E_INVAL,
		               "'%s': index %" PRIu64 " is past the end of '%s' (%" PRIu64
		               " strings)",
		               g->path, i, key, a.n);
	*out = a.strs[i];
	return 0;
}

/* ---- conversions --------------------------------------------------------- */

static uint32_t f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

static float bits_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

float gguf_bf16_to_f32(uint16_t h)
{
	return bits_f32((uint32_t)h << 16);
}

uint16_t gguf_f32_to_bf16(float f)
{
	uint32_t u = f32_bits(f);

	if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep sign and top payload, force quiet */
		return (uint16_t)((u >> 16) | 0x0040u);
	u += 0x7fffu + ((u >> 16) & 1u); /* ties to even; the carry rounds up to Inf */
	return (uint16_t)(u >> 16);
}

float gguf_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu;
	uint32_t mant = h & 0x3ffu;

	if (exp == 0x1f) /* Inf, NaN (payload kept) */
		return bits_f32(sign | 0x7f800000u | (mant << 13));
	if (exp == 0) {
		if (mant == 0)
			return bits_f32(sign);
		/* denormal: mant x 2^-24, normalised into binary32 */
		exp = 113; /* 127 - 15 + 1 */
		while (!(mant & 0x400u)) {
			mant <<= 1;
			exp--;
		}
		mant &= 0x3ffu;
		return bits_f32(sign | (exp << 23) | (mant << 13));
	}
	return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t gguf_f32_to_f16(float f)
{
	uint32_t u = f32_bits(f);
	uint32_t sign = (u >> 16) & 0x8000u;
	uint32_t exp = (u >> 23) & 0xffu;
	uint32_t mant = u & 0x7fffffu;
	int32_t e = (int32_t)exp - 127 + 15;
	uint32_t h, rem;

	if (exp == 0xff) /* Inf, or NaN made quiet with its top payload */
		return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0));
	if (e >= 31)
		return (uint16_t)(sign | 0x7c00u);
	if (e <= 0) {
		/* a binary16 denormal counts units of 2^-24: (1.mant x 2^(e-15)) / 2^-24 */
		uint32_t shift, half;

		if (e < -10) /* below half the smallest denormal: zero */
			return (uint16_t)sign;
		mant |= 0x800000u;
		shift = (uint32_t)(14 - e);
		h = mant >> shift;
		rem = mant & ((1u << shift) - 1);
		half = 1u << (shift - 1);
		if (rem > half || (rem == half && (h & 1u)))
			h++; /* may carry into the smallest normal: still right */
		return (uint16_t)(sign | h);
	}
	h = ((uint32_t)e << 10) | (mant >> 13);
	rem = mant & 0x1fffu;
	if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
		h++; /* may carry into Inf: right for round to nearest */
	return (uint16_t)(sign | h);
}

/* ---- the writer ---------------------------------------------------------- */

struct gguf_wkv {
	char *key;
	size_t key_len;
	uint32_t type;
	unsigned char *val; /* the value as on disk, after the type */
	size_t val_len;
};

struct gguf_wtensor {
	char *name;
	size_t name_len;
	uint32_t type;
	uint32_t n_dims;
	uint64_t dims[GGUF_MAX_DIMS];
	uint64_t n_elements, n_bytes;
	uint64_t offset;
	const void *data;  /* referenced bytes, or NULL when `fill` produces them */
	gguf_fill_fn fill; /* see gguf_writer_add_tensor_fill */
	void *fill_ctx;
};

static int w_fail(struct gguf_writer *w, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int w_fail(struct gguf_writer *w, int code, const char *fmt, ...)
{
	va_list ap;

	if (w->err.code)
		return w->err.code;
	va_start(ap, fmt);
	ig_verrf(&w->err, code, fmt, ap);
	va_end(ap);
	return code;
}

void gguf_writer_init(struct gguf_writer *w)
{
	memset(w, 0, sizeof(*w));
	w->alignment = GGUF_DEFAULT_ALIGNMENT;
}

void gguf_writer_release(struct gguf_writer *w)
{
	for (size_t i = 0; i < w->n_kv; i++) {
		free(w->kvs[i].key);
		free(w->kvs[i].val);
	}
	for (size_t i = 0; i < w->n_tensors; i++)
		free(w->tensors[i].name);
	free(w->kvs);
	free(w->tensors);
	memset(w, 0, sizeof(*w));
}

static int w_check_name(struct gguf_writer *w, const char *what, const char *s)
{
	char q[QCAP];

	if (!s || !*s)
		return w_fail(w, IG_E_INVAL, "gguf writer: empty %s; %ss are non-empty UTF-8", what,
		              what);
	if (!utf8_valid(s, strlen(s)))
		return w_fail(w, IG_E_INVAL, "gguf writer: %s %s is not valid UTF-8", what,
		              quote(q, sizeof(q), s, strlen(s)));
	return 0;
}

/* Append a pair whose on-disk value is `val` (`len` bytes, already serialised). On
 * success the writer owns `val`; on failure it is freed. */
static int w_push(struct gguf_writer *w, const char *key, uint32_t type, unsigned char *val,
                  size_t len)
{
	struct gguf_wkv *kv;
	int rc;

	if (w->err.code) {
		free(val);
		return w->err.code;
	}
	rc = w_check_name(w, "key", key);
	if (rc) {
		free(val);
		return rc;
	}
	if (!grow((void **)&w->kvs, &w->cap_kv, w->n_kv + 1, sizeof(*w->kvs))) {
		free(val);
		return w_fail(w, IG_E_NOMEM, "gguf writer: out of memory for key '%s'", key);
	}
	kv = &w->kvs[w->n_kv];
	kv->key = strdup(key);
	if (!kv->key) {
		free(val);
		return w_fail(w, IG_E_NOMEM, "gguf writer: out of memory for key '%s'", key);
	}
	kv->key_len = strlen(key);
	kv->type = type;
	kv->val = val;
	kv->val_len = len;
	w->n_kv++;
	return 0;
}

static int w_scalar(struct gguf_writer *w, const char *key, uint32_t type, const void *v)
{
	size_t n = type_sizes[type];
	unsigned char *val;
	int rc;

	if (w->err.code)
		return w->err.code;
	if (key && strcmp(key, GGUF_KEY_ALIGNMENT) == 0) {
		uint32_t a;

		if (type != GGUF_TYPE_UINT32)
			return w_fail(w, IG_E_INVAL, "gguf writer: %s must be UINT32, not %s",
			              GGUF_KEY_ALIGNMENT, type_names[type]);
		memcpy(&a, v, 4);
		if (a == 0 || (a & (a - 1)) != 0)
			return w_fail(w, IG_E_INVAL,
			              "gguf writer: %s %" PRIu32
			              " is not a power of two (default %u)",
			              GGUF_KEY_ALIGNMENT, a, GGUF_DEFAULT_ALIGNMENT);
	}
	val = malloc(n);
	if (!val)
		return w_fail(w, IG_E_NOMEM, "gguf writer: out of memory");
	memcpy(val, v, n);
	if (type == GGUF_TYPE_BOOL)
		val[0] = val[0] ? 1 : 0;
	rc = w_push(w, key, type, val, n);
	if (rc == 0 && type == GGUF_TYPE_UINT32 && strcmp(key, GGUF_KEY_ALIGNMENT) == 0)
		memcpy(&w->alignment, v, 4);
	return rc;
}

int gguf_writer_add_u8(struct gguf_writer *w, const char *key, uint8_t v)
{
	return w_scalar(w, key, GGUF_TYPE_UINT8, &v);
}

int gguf_writer_add_i8(struct gguf_writer *w, const char *key, int8_t v)
{
	return w_scalar(w, key, GGUF_TYPE_INT8, &v);
}

int gguf_writer_add_u16(struct gguf_writer *w, const char *key, uint16_t v)
{
	return w_scalar(w, key, GGUF_TYPE_UINT16, &v);
}

int gguf_writer_add_i16(struct gguf_writer *w, const char *key, int16_t v)
{
	return w_scalar(w, key, GGUF_TYPE_INT16, &v);
}

int gguf_writer_add_u32(struct gguf_writer *w, const char *key, uint32_t v)
{
	return w_scalar(w, key, GGUF_TYPE_UINT32, &v);
}

int gguf_writer_add_i32(struct gguf_writer *w, const char *key, int32_t v)
{
	return w_scalar(w, key, GGUF_TYPE_INT32, &v);
}

int gguf_writer_add_f32(struct gguf_writer *w, const char *key, float v)
{
	return w_scalar(w, key, GGUF_TYPE_FLOAT32, &v);
}

int gguf_writer_add_bool(struct gguf_writer *w, const char *key, bool v)
{
	unsigned char b = v ? 1 : 0;

	return w_scalar(w, key, GGUF_TYPE_BOOL, &b);
}

int gguf_writer_add_u64(struct gguf_writer *w, const char *key, uint64_t v)
{
	return w_scalar(w, key, GGUF_TYPE_UINT64, &v);
}

int gguf_writer_add_i64(struct gguf_writer *w, const char *key, int64_t v)
{
	return w_scalar(w, key, GGUF_TYPE_INT64, &v);
}

int gguf_writer_add_f64(struct gguf_writer *w, const char *key, double v)
{
	return w_scalar(w, key, GGUF_TYPE_FLOAT64, &v);
}

static int w_alignment_type(struct gguf_writer *w, const char *key, const char *what)
{
	if (key && strcmp(key, GGUF_KEY_ALIGNMENT) == 0)
		return w_fail(w, IG_E_INVAL, "gguf writer: %s must be UINT32, not %s",
		              GGUF_KEY_ALIGNMENT, what);
	return 0;
}

int gguf_writer_add_strn(struct gguf_writer *w, const char *key, const char *s, size_t len)
{
	unsigned char *val;
	uint64_t n = len;

	if (w->err.code)
		return w->err.code;
	if (w_alignment_type(w, key, "STRING"))
		return w->err.code;
	if (!s && len)
		return w_fail(w, IG_E_INVAL, "gguf writer: key '%s': NULL string", key);
	if (len > SIZE_MAX - 8 || !(val = malloc(8 + len)))
		return w_fail(w, IG_E_NOMEM, "gguf writer: out of memory for a string of %zu bytes",
		              len);
	memcpy(val, &n, 8);
	if (len)
		memcpy(val + 8, s, len);
	return w_push(w, key, GGUF_TYPE_STRING, val, 8 + len);
}

int gguf_writer_add_str(struct gguf_writer *w, const char *key, const char *s)
{
	if (!s)
		return w_fail(w, IG_E_INVAL, "gguf writer: key '%s': NULL string",
		              key ? key : "(null)");
	return gguf_writer_add_strn(w, key, s, strlen(s));
}

int gguf_writer_add_arr(struct gguf_writer *w, const char *key, enum gguf_type elem,
                        const void *elems, size_t n)
{
	unsigned char *val;
	uint32_t t = elem;
	uint64_t n64 = n;
	size_t esize;

	if (w->err.code)
		return w->err.code;
	if (w_alignment_type(w, key, "ARRAY"))
		return w->err.code;
	esize = gguf_type_size(elem);
	if (esize == 0)
		return w_fail(w, IG_E_INVAL,
		              "gguf writer: key '%s': an array of %s (%u) is not a scalar array; "
		              "use gguf_writer_add_arr_str for strings, arrays of arrays are not "
		              "accepted",
		              key ? key : "(null)", gguf_type_name(elem), (unsigned)elem);
	if (!elems && n)
		return w_fail(w, IG_E_INVAL, "gguf writer: key '%s': NULL elements",
		              key ? key : "(null)");
	if (n > (SIZE_MAX - 12) / esize || !(val = malloc(12 + n * esize)))
		return w_fail(w, IG_E_NOMEM, "gguf writer: out of memory for an array of %zu %s", n,
		              gguf_type_name(elem));
	memcpy(val, &t, 4);
	memcpy(val + 4, &n64, 8);
	if (n)
		memcpy(val + 12, elems, n * esize);
	if (elem == GGUF_TYPE_BOOL)
		for (size_t i = 0; i < n; i++)
			val[12 + i] = val[12 + i] ? 1 : 0;
	return w_push(w, key, GGUF_TYPE_ARRAY, val, 12 + n * esize);
}

int gguf_writer_add_arr_strn(struct gguf_writer *w, const char *key, const struct gguf_str *strs,
                             size_t n)
{
	unsigned char *val;
	uint32_t t = GGUF_TYPE_STRING;
	uint64_t n64 = n;
	size_t len = 12, o;

	if (w->err.code)
		return w->err.code;
	if (w_alignment_type(w, key, "ARRAY"))
		return w->err.code;
	if (!strs && n)
		return w_fail(w, IG_E_INVAL, "gguf writer: key '%s': NULL strings",
		              key ? key : "(null)");
	for (size_t i = 0; i < n; i++) {
		if (!strs[i].ptr && strs[i].len)
			return w_fail(w, IG_E_INVAL, "gguf writer: key '%s': string %zu is NULL",
			              key ? key : "(null)", i);
		if (strs[i].len > SIZE_MAX - 8 - len)
			return w_fail(w, IG_E_NOMEM, "gguf writer: key '%s': strings too large",
			              key ? key : "(null)");
		len += 8 + strs[i].len;
	}
	val = malloc(len);
	if (!val)
		return w_fail(w, IG_E_NOMEM, "gguf writer: out of memory for %zu strings", n);
	memcpy(val, &t, 4);
	memcpy(val + 4, &n64, 8);
	o = 12;
	for (size_t i = 0; i < n; i++) {
		uint64_t l = strs[i].len;

		memcpy(val + o, &l, 8);
		o += 8;
		if (l)
			memcpy(val + o, strs[i].ptr, strs[i].len);
		o += strs[i].len;
	}
	return w_push(w, key, GGUF_TYPE_ARRAY, val, len);
}

int gguf_writer_add_arr_str(struct gguf_writer *w, const char *key, const char *const *strs,
                            size_t n)
{
	struct gguf_str *views;
	int rc;

	if (w->err.code)
		return w->err.code;
	if (!strs && n)
		return w_fail(w, IG_E_INVAL, "gguf writer: key '%s': NULL strings",
		              key ? key : "(null)");
	views = malloc(n ? n * sizeof(*views) : 1);
	if (!views)
		return w_fail(w, IG_E_NOMEM, "gguf writer: out of memory for %zu strings", n);
	for (size_t i = 0; i < n; i++) {
		if (!strs[i]) {
			free(views);
			return w_fail(w, IG_E_INVAL, "gguf writer: key '%s': string %zu is NULL",
			              key ? key : "(null)", i);
		}
		views[i] = (struct gguf_str){strs[i], strlen(strs[i])};
	}
	rc = gguf_writer_add_arr_strn(w, key, views, n);
	free(views);
	return rc;
}

static int w_add_tensor(struct gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                        const uint64_t *dims, const void *data, gguf_fill_fn fill, void *ctx)
{
	struct gguf_wtensor *t;
	char why[256];
	uint64_t ne = 1, n_bytes;
	int rc;

	if (w->err.code)
		return w->err.code;
	rc = w_check_name(w, "tensor name", name);
	if (rc)
		return rc;
	if (n_dims < 1 || n_dims > GGUF_MAX_DIMS || !dims)
		return w_fail(w, IG_E_INVAL,
		              "gguf writer: tensor '%s' has n_dims %" PRIu32 "; accepted: 1 to %u",
		              name, n_dims, GGUF_MAX_DIMS);
	for (uint32_t i = 0; i < n_dims; i++) {
		if (dims[i] == 0)
			return w_fail(w, IG_E_INVAL,
			              "gguf writer: tensor '%s' has dim %" PRIu32
			              " equal to 0; every dim is at least 1",
			              name, i);
		if (dims[i] > (uint64_t)INT64_MAX / ne)
			return w_fail(w, IG_E_INVAL,
			              "gguf writer: tensor '%s': the element count overflows; at "
			              "most 2^63-1 elements are accepted",
			              name);
		ne *= dims[i];
	}
	n_bytes = tensor_bytes(type, dims[0], ne, why, sizeof(why));
	if (n_bytes == 0)
		return w_fail(w, IG_E_INVAL, "gguf writer: tensor '%s' has %s", name, why);
	if (!data && !fill)
		return w_fail(w, IG_E_INVAL, "gguf writer: tensor '%s': NULL data", name);
	if (!grow((void **)&w->tensors, &w->cap_tensors, w->n_tensors + 1, sizeof(*w->tensors)))
		return w_fail(w, IG_E_NOMEM, "gguf writer: out of memory for tensor '%s'", name);
	t = &w->tensors[w->n_tensors];
	memset(t, 0, sizeof(*t));
	t->name = strdup(name);
	if (!t->name)
		return w_fail(w, IG_E_NOMEM, "gguf writer: out of memory for tensor '%s'", name);
	t->name_len = strlen(name);
	t->type = type;
	t->n_dims = n_dims;
	for (uint32_t i = 0; i < GGUF_MAX_DIMS; i++)
		t->dims[i] = i < n_dims ? dims[i] : 1;
	t->n_bytes = n_bytes;
	t->n_elements = ne;
	t->data = data;
	t->fill = fill;
	t->fill_ctx = ctx;
	w->n_tensors++;
	return 0;
}

int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                           const uint64_t *dims, const void *data)
{
	return w_add_tensor(w, name, type, n_dims, dims, data, NULL, NULL);
}

int gguf_writer_add_tensor_fill(struct gguf_writer *w, const char *name, uint32_t type,
                                uint32_t n_dims, const uint64_t *dims, gguf_fill_fn fill, void *ctx)
{
	if (!w->err.code && !fill)
		return w_fail(w, IG_E_INVAL, "gguf writer: tensor '%s': NULL fill callback",
		              name ? name : "");
	return w_add_tensor(w, name, type, n_dims, dims, NULL, fill, ctx);
}

static int cmp_wkv(const void *a, const void *b)
{
	return strcmp((*(const struct gguf_wkv *const *)a)->key,
	              (*(const struct gguf_wkv *const *)b)->key);
}

static int cmp_wtensor(const void *a, const void *b)
{
	return strcmp((*(const struct gguf_wtensor *const *)a)->name,
	              (*(const struct gguf_wtensor *const *)b)->name);
}

/* Refuse duplicate keys and names (sticky: the content is wrong). */
static int w_check_unique(struct gguf_writer *w, struct ig_errbuf *eb)
{
	size_t n = w->n_kv > w->n_tensors ? w->n_kv : w->n_tensors;
	const void **idx;
	int rc = 0;

	if (n < 2)
		return 0;
	idx = malloc(n * sizeof(*idx));
	if (!idx)
		return ig_errf(eb, IG_E_NOMEM, "gguf writer: out of memory for the name index");
	for (size_t i = 0; i < w->n_kv; i++)
		idx[i] = &w->kvs[i];
	qsort(idx, w->n_kv, sizeof(*idx), cmp_wkv);
	for (size_t i = 1; i < w->n_kv && !rc; i++)
		if (cmp_wkv(&idx[i - 1], &idx[i]) == 0)
			rc = w_fail(w, IG_E_INVAL,
			            "gguf writer: duplicate key '%s'; each key may appear once",
			            ((const struct gguf_wkv *)idx[i])->key);
	for (size_t i = 0; i < w->n_tensors && !rc; i++)
		idx[i] = &w->tensors[i];
	if (!rc)
		qsort(idx, w->n_tensors, sizeof(*idx), cmp_wtensor);
	for (size_t i = 1; i < w->n_tensors && !rc; i++)
		if (cmp_wtensor(&idx[i - 1], &idx[i]) == 0)
			rc = w_fail(
			    w, IG_E_INVAL,
			    "gguf writer: duplicate tensor name '%s'; each name may appear once",
			    ((const struct gguf_wtensor *)idx[i])->name);
	free(idx);
	return rc;
}

/*
 * The output: one buffer of the writer's chunk, flushed with write(2) (or the
 * test's write_fn), every return checked. `done` counts the bytes the kernel
 * took, so that a failure says exactly how far the file got.
 */
struct wout {
	int fd;
	unsigned char *buf;
	size_t len, cap;
	uint64_t pos;  /* bytes handed over so far: the file offset of buf + len */
	uint64_t done; /* bytes written to the file */
	int err;       /* errno of the first failure */
	ssize_t (*write_fn)(int fd, const void *buf, size_t n);
};

static void flush(struct wout *o)
{
	size_t off = 0;

	while (!o->err && off < o->len) {
		size_t left = o->len - off;
		ssize_t n = o->write_fn ? o->write_fn(o->fd, o->buf + off, left)
		                        : write(o->fd, o->buf + off, left);

		if (n < 0) {
			if (errno != EINTR)
				o->err = errno ? errno : EIO;
		} else if (n == 0 || (size_t)n > left) {
			o->err = EIO; /* write(2) took nothing of a non-empty buffer */
		} else {
			off += (size_t)n;
			o->done += (uint64_t)n;
		}
	}
	o->len = 0;
}

static void put(struct wout *o, const void *p, size_t n)
{
	const unsigned char *s = p;

	while (!o->err && n) {
		size_t take;

		if (o->len == o->cap)
			flush(o);
		if (o->err)
			break;
		take = o->cap - o->len < n ? o->cap - o->len : n;
		memcpy(o->buf + o->len, s, take);
		o->len += take;
		o->pos += take;
		s += take;
		n -= take;
	}
}

static void put_u32(struct wout *o, uint32_t v)
{
	put(o, &v, 4);
}

static void put_u64(struct wout *o, uint64_t v)
{
	put(o, &v, 8);
}

static void pad_to(struct wout *o, uint64_t to)
{
	static const unsigned char zeros[4096];

	while (!o->err && o->pos < to) {
		uint64_t n = to - o->pos;

		put(o, zeros, n < sizeof(zeros) ? (size_t)n : sizeof(zeros));
	}
}

/* A produced tensor: the callback fills the output buffer in place, one chunk
 * at a time, so the data never exists anywhere else. */
static int put_filled(struct wout *o, const struct gguf_wtensor *t, size_t chunk, const char *path,
                      struct ig_errbuf *eb)
{
	struct gguf_tensor view;
	struct ig_errbuf feb;

	memset(&view, 0, sizeof(view));
	view.name = t->name;
	view.name_len = t->name_len;
	view.type = (enum gguf_tensor_type)t->type;
	view.n_dims = t->n_dims;
	memcpy(view.dims, t->dims, sizeof(view.dims));
	view.n_elements = t->n_elements;
	view.n_bytes = t->n_bytes;
	view.offset = t->offset;
	for (uint64_t off = 0; off < t->n_bytes && !o->err; off += chunk) {
		size_t n = t->n_bytes - off < chunk ? (size_t)(t->n_bytes - off) : chunk;
		int rc;

		if (o->cap - o->len < n)
			flush(o);
		if (o->err)
			break;
		ig_errclear(&feb);
		rc = t->fill(t->fill_ctx, &view, off, o->buf + o->len, n, &feb);
		if (rc) {
			if (!feb.msg[0])
				return ig_errf(eb, rc,
				               "'%s': tensor '%s': its data could not be made: %s",
				               path, t->name, ig_err_str(rc));
			return ig_errf(eb, rc, "'%s': %s", path, feb.msg);
		}
		o->len += n;
		o->pos += n;
	}
	return 0;
}

static uint64_t align_up(uint64_t x, uint32_t a)
{
	return (x + a - 1) / a * a;
}

/*
 * The layout, refused as a whole when the content is not right: the header,
 * the pairs, the tensor infos, padding, then each tensor at the next multiple
 * of the alignment, the last one padded too (as llama.cpp writes). Sets every
 * tensor's offset, `*data_offset` and `*file_bytes`. `path` (or NULL) prefixes
 * the writer's sticky error.
 */
static int w_layout(struct gguf_writer *w, const char *path, uint64_t *data_offset,
                    uint64_t *file_bytes, struct ig_errbuf *eb)
{
	uint64_t header = HEADER_BYTES, off = 0;
	int rc;

	rc = w->err.code ? 0 : w_check_unique(w, eb);
	if (w->err.code) {
		if (eb) {
			*eb = w->err;
			if (path)
				ig_errprefix(eb, "'%s'", path);
		}
		return w->err.code;
	}
	if (rc)
		return rc;
	if (w->chunk_bytes % 64u)
		return ig_errf(eb, IG_E_INVAL,
		               "gguf writer: chunk_bytes %zu; accepted: 0 (%u) or a multiple of 64",
		               w->chunk_bytes, GGUF_WRITE_CHUNK);
	for (size_t i = 0; i < w->n_kv; i++)
		header += 8 + w->kvs[i].key_len + 4 + w->kvs[i].val_len;
	for (size_t i = 0; i < w->n_tensors; i++)
		header += 8 + w->tensors[i].name_len + 4 + 8 * w->tensors[i].n_dims + 4 + 8;
	*data_offset = align_up(header, w->alignment);
	for (size_t i = 0; i < w->n_tensors; i++) {
		off = align_up(off, w->alignment);
		w->tensors[i].offset = off;
		off += w->tensors[i].n_bytes;
		if (off > (uint64_t)INT64_MAX / 2)
			return ig_errf(
			    eb, IG_E_INVAL,
			    "gguf writer: %s%s%sthe data section is too large (over 2^62 "
			    "bytes)",
			    path ? "'" : "", path ? path : "", path ? "': " : "");
	}
	*file_bytes = *data_offset + (w->n_tensors ? align_up(off, w->alignment) : 0);
	return 0;
}

int gguf_writer_file_size(struct gguf_writer *w, uint64_t *bytes, struct ig_errbuf *eb)
{
	uint64_t data_offset;

	return w_layout(w, NULL, &data_offset, bytes, eb);
}

int gguf_writer_write(struct gguf_writer *w, const char *path, struct ig_errbuf *eb)
{
	struct wout o = {.fd = -1, .write_fn = w->write_fn};
	uint64_t data_offset, file_bytes;
	const char *slash = strrchr(path, '/');
	size_t dirlen = slash ? (size_t)(slash - path) : 0;
	const char *base = slash ? slash + 1 : path;
	size_t chunk = w->chunk_bytes ? w->chunk_bytes : GGUF_WRITE_CHUNK;
	char *tmp = NULL, *dir = NULL;
	int fd = -1, rc;

	if (!w->err.code && !*base)
		return ig_errf(eb, IG_E_INVAL, "gguf writer: '%s' names a directory, not a file",
		               path);
	rc = w_layout(w, path, &data_offset, &file_bytes, eb);
	if (rc)
		return rc;

	/* One buffer: the chunk, or the whole file when that is smaller (every
	 * tensor, hence every fill call, still fits it). */
	o.cap = file_bytes < chunk ? (size_t)align_up(file_bytes, 64) : chunk;
	o.buf = malloc(o.cap);
	/* ".<name>.tmp-XXXXXX" beside the target, so that rename() is atomic. */
	dir = malloc(dirlen + 2);
	tmp = malloc(dirlen + strlen(base) + 16);
	if (!o.buf || !dir || !tmp) {
		rc = ig_errf(eb, IG_E_NOMEM, "gguf writer: out of memory for '%s'", path);
		goto out_free;
	}
	if (slash) {
		memcpy(dir, path, dirlen);
		dir[dirlen] = '\0';
		if (dirlen == 0)
			strcpy(dir, "/");
	} else {
		strcpy(dir, ".");
	}
	sprintf(tmp, "%s/.%s.tmp-XXXXXX", dir, base);
	fd = mkstemp(tmp);
	if (fd < 0) {
		rc = ig_errf(eb, IG_E_IO,
		             "gguf writer: cannot create a temporary file beside '%s': %s", path,
		             strerror(errno));
		goto out_free;
	}
	if (fchmod(fd, 0644) != 0) {
		rc = ig_errf(eb, IG_E_IO, "gguf writer: cannot chmod '%s': %s", tmp,
		             strerror(errno));
		goto out_close;
	}
	o.fd = fd;

	put(&o, "GGUF", 4);
	put_u32(&o, GGUF_VERSION);
	put_u64(&o, w->n_tensors);
	put_u64(&o, w->n_kv);
	for (size_t i = 0; i < w->n_kv; i++) {
		const struct gguf_wkv *kv = &w->kvs[i];

		put_u64(&o, kv->key_len);
		put(&o, kv->key, kv->key_len);
		put_u32(&o, kv->type);
		put(&o, kv->val, kv->val_len);
	}
	for (size_t i = 0; i < w->n_tensors; i++) {
		const struct gguf_wtensor *t = &w->tensors[i];

		put_u64(&o, t->name_len);
		put(&o, t->name, t->name_len);
		put_u32(&o, t->n_dims);
		put(&o, t->dims, 8 * t->n_dims);
		put_u32(&o, t->type);
		put_u64(&o, t->offset);
	}
	pad_to(&o, data_offset);
	for (size_t i = 0; i < w->n_tensors && !o.err && !w->sparse; i++) {
		const struct gguf_wtensor *t = &w->tensors[i];

		pad_to(&o, data_offset + t->offset);
		if (t->fill) {
			rc = put_filled(&o, t, chunk, path, eb);
			if (rc)
				goto out_close;
		} else {
			put(&o, t->data, (size_t)t->n_bytes);
		}
	}
	if (!w->sparse)
		pad_to(&o, file_bytes);
	flush(&o);
	/* sparse: the data section is a hole of its size (it reads as zeros) */
	if (w->sparse && !o.err) {
		if (ftruncate(fd, (off_t)file_bytes) != 0)
			o.err = errno ? errno : EIO;
		else
			o.done = file_bytes;
	}
	if (!o.err && o.done != file_bytes)
		o.err = EIO; /* cannot happen: every byte handed over went out */
	if (o.err) {
		rc = ig_errf(eb, IG_E_IO,
		             "gguf writer: cannot write '%s': %s after %" PRIu64 " of its %" PRIu64
		             " bytes; the partial file is removed",
		             path, strerror(o.err), o.done, file_bytes);
		goto out_close;
	}
	if (fsync(fd) != 0) {
		rc = ig_errf(eb, IG_E_IO,
		             "gguf writer: cannot write '%s': fsync after all %" PRIu64
		             " bytes: %s; the partial file is removed",
		             path, file_bytes, strerror(errno));
		goto out_close;
	}
	rc = close(fd);
	fd = -1;
	if (rc != 0) {
		rc = ig_errf(eb, IG_E_IO,
		             "gguf writer: cannot write '%s': close after all %" PRIu64
		             " bytes: %s; the partial file is removed",
		             path, file_bytes, strerror(errno));
		goto out_unlink;
	}
	if (rename(tmp, path) != 0) {
		rc = ig_errf(eb, IG_E_IO, "gguf writer: cannot rename '%s' to '%s': %s", tmp, path,
		             strerror(errno));
		goto out_unlink;
	}
	/* The rename is durable once the directory is synced (a directory we may not
	 * open for reading is left to the file system's own schedule). */
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		if (fsync(fd) != 0) {
			rc = ig_errf(eb, IG_E_IO, "gguf writer: cannot fsync directory '%s': %s",
			             dir, strerror(errno));
			close(fd);
			goto out_free;
		}
		close(fd);
	}
	rc = 0;
	goto out_free;

out_close:
	close(fd);
out_unlink:
	unlink(tmp);
out_free:
	free(o.buf);
	free(tmp);
	free(dir);
	return rc;
}
