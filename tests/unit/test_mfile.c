/*
 * test_mfile.c - model files: synthetic models written and read back with
 * the built-in descriptions' shapes and figures, byte-for-byte determinism,
 * and a table of foreign, truncated and inconsistent files, each refused with
 * a message that names what was wrong.
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/knobs.h"
#include "model/expcounts.h"
#include "model/mfile.h"
#include "model/quant.h"
#include "common/vplan.h"

static char dir[256];

/*
 * The files live in $TMPDIR, else in /dev/shm when it has 1 GiB free, else in
 * /tmp. These tests write ~600 MB, each file synced: on a tmpfs that costs
 * the writing only (the real disk's fsync is test_gguf's). Peak use ~250 MB.
 */
static int setup(void **state)
{
	const char *base = getenv("TMPDIR");
	struct statvfs v;

	(void)state;
	if (!base || !*base)
		base = statvfs("/dev/shm", &v) == 0 &&
		               (uint64_t)v.f_bavail * v.f_frsize >= (1ull << 30)
		           ? "/dev/shm"
		           : "/tmp";
	snprintf(dir, sizeof(dir), "%s/ignis-mfile-XXXXXX", base);
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[300];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static void path_of(char *out, size_t cap, const char *name)
{
	snprintf(out, cap, "%s/%s", dir, name);
}

static void write_model(const char *preset, uint64_t seed, enum mfile_dtype dt, const char *name)
{
	struct ig_errbuf eb;
	char path[320];

	path_of(path, sizeof(path), name);
	if (mfile_write_synthetic(mdesc_find(preset), seed, dt, path, &eb))
		fail_msg("write %s: %s", preset, eb.msg);
}

/* The file a tiny built-in's start writes (sup__builtin_weights: bf16, seed 1)
 * describes that built-in: the keys, the knob defaults a file gives, and every
 * figure its plan takes, so that the plan the supervisor prints is the plan
 * of the file it serves (docs/adr/0019). */
static void test_roundtrip_matches_the_builtin(void **state)
{
	static const char *const presets[] = {"tiny-dense", "tiny-moe", "tiny-chat"};

	(void)state;
	for (int i = 0; i < 3; i++) {
		const struct mdesc *b = mdesc_find(presets[i]);
		struct ig_errbuf eb;
		struct mfile f;
		char path[320];

		write_model(presets[i], 1, MFILE_BF16, "m.gguf");
		path_of(path, sizeof(path), "m.gguf");
		if (mfile_open(&f, path, &eb))
			fail_msg("%s: %s", presets[i], eb.msg);
		assert_string_equal(f.desc.name, b->name);
		assert_int_equal(f.desc.family, b->family);
		assert_int_equal(f.desc.layers, b->layers);
		assert_int_equal(f.desc.full_layers, b->full_layers);
		assert_int_equal(f.desc.hidden, b->hidden);
		assert_int_equal(f.desc.q_heads, b->q_heads);
		assert_int_equal(f.desc.kv_heads, b->kv_heads);
		assert_int_equal(f.desc.head_dim, b->head_dim);
		assert_int_equal(f.desc.vocab, b->vocab);
		assert_int_equal(f.desc.default_context, b->default_context);
		assert_int_equal(f.desc.default_lanes, b->default_lanes);
		assert_int_equal(f.desc.arch, b->arch);
		assert_int_equal(mdesc_eos(&f.desc), mdesc_eos(b));
		assert_true(mfile_same_shape(&f.desc, b)); /* every key, the knobs' defaults too */
		/* the figures the plan uses, from the tensors themselves */
		assert_int_equal(mdesc_weight_bytes(&f.desc), mdesc_weight_bytes(b));
		assert_int_equal(mdesc_expert_bytes(&f.desc), mdesc_expert_bytes(b));
		assert_int_equal(mdesc_state_image_bytes(&f.desc), mdesc_state_image_bytes(b));
		assert_int_equal(f.desc.tokenizer, b->tokenizer);
		assert_int_equal(mdesc_kv_bytes_per_token(&f.desc, MDESC_KV_COMPACT),
		                 mdesc_kv_bytes_per_token(b, MDESC_KV_COMPACT));
		if (b->family == MDESC_MOE) {
			assert_int_equal(f.desc.heaviest_layer_expert_bytes,
			                 b->heaviest_layer_expert_bytes);
			assert_int_equal(f.desc.expert_table_bytes, b->expert_table_bytes);
			assert_memory_equal(f.desc.class_record_bytes, b->class_record_bytes,
			                    sizeof(b->class_record_bytes));
			assert_int_equal(f.desc.cache_floor_bytes, b->cache_floor_bytes);
		}
		mfile_close(&f);
	}
}

/* The embedded default, tiny-chat, is tiny-dense in llama.cpp's qwen3
 * layout: what `ignis-mkmodel --preset tiny-dense --layout qwen3` writes,
 * under the built-in's name. */
static void test_tiny_chat_is_tiny_dense_as_qwen3(void **state)
{
	const struct mdesc *chat = mdesc_find("tiny-chat");
	struct mdesc q3;

	(void)state;
	mfile_as_qwen3(mdesc_find("tiny-dense"), &q3);
	assert_true(mfile_same_shape(chat, &q3));
	assert_int_equal(chat->full_layers, q3.full_layers);
	assert_int_equal(chat->eos_id, q3.eos_id);
	assert_int_equal(chat->fixed_lanes, q3.fixed_lanes);
	assert_int_equal(chat->default_retained_host, q3.default_retained_host);
	assert_int_equal(mdesc_weight_bytes(chat), mdesc_weight_bytes(&q3));
	assert_int_equal(mdesc_state_image_bytes(chat), mdesc_state_image_bytes(&q3));
	assert_int_equal(mdesc_kv_bytes_per_token(chat, MDESC_KV_COMPACT),
	                 mdesc_kv_bytes_per_token(&q3, MDESC_KV_COMPACT));
}

/* The tokenizer comes from the file: the byte-level one of the tiny
 * presets (eos 257), and "none" for a vocabulary of 300 ids (ids only, no
 * end of sequence), written and read back; the two are other files. */
static void test_tokenizer_kind(void **state)
{
	struct mdesc m = *mdesc_find("tiny-dense");
	struct ig_errbuf eb;
	struct mfile f;
	char path[320];

	(void)state;
	write_model("tiny-dense", 1, MFILE_BF16, "bytes.gguf");
	path_of(path, sizeof(path), "bytes.gguf");
	assert_int_equal(mfile_open(&f, path, &eb), IG_E_OK);
	assert_int_equal(f.desc.tokenizer, MDESC_TOK_BYTES);
	assert_int_equal(mdesc_eos(&f.desc), MDESC_BYTES_EOS);
	mfile_close(&f);

	m.tokenizer = MDESC_TOK_NONE;
	m.vocab = 300;
	assert_false(mfile_same_shape(&m, mdesc_find("tiny-dense")));
	path_of(path, sizeof(path), "none.gguf");
	assert_int_equal(mfile_write_synthetic(&m, 1, MFILE_BF16, path, &eb), IG_E_OK);
	assert_int_equal(mfile_open(&f, path, &eb), IG_E_OK);
	assert_int_equal(f.desc.tokenizer, MDESC_TOK_NONE);
	assert_int_equal(f.desc.vocab, 300);
	assert_int_equal(mdesc_eos(&f.desc), UINT32_MAX);
	{
		struct gguf_str t;

		assert_int_equal(gguf_get_str(&f.g, MFILE_TOKENIZER_KEY, &t, &eb), IG_E_OK);
		assert_int_equal(t.len, 4);
		assert_memory_equal(t.ptr, "none", 4);
	}
	mfile_close(&f);
	/* the same shape with the byte-level tokenizer but 300 ids: refused */
	m.tokenizer = MDESC_TOK_BYTES;
	assert_int_equal(mfile_write_synthetic(&m, 1, MFILE_BF16, path, &eb), IG_E_INVAL);
	assert_non_null(strstr(eb.msg, "byte-level tokenizer of 260 ids"));
}

static char *slurp(const char *name, size_t *n)
{
	char path[320];
	FILE *f;
	char *buf;

	path_of(path, sizeof(path), name);
	f = fopen(path, "rb");
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	*n = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc(*n);
	assert_int_equal(fread(buf, 1, *n, f), *n);
	fclose(f);
	return buf;
}

static void test_same_seed_same_bytes(void **state)
{
	size_t na, nb, nc;
	char *a, *b, *c;

	(void)state;
	write_model("tiny-dense", 42, MFILE_BF16, "a.gguf");
	write_model("tiny-dense", 42, MFILE_BF16, "b.gguf");
	write_model("tiny-dense", 43, MFILE_BF16, "c.gguf");
	a = slurp("a.gguf", &na);
	b = slurp("b.gguf", &nb);
	c = slurp("c.gguf", &nc);
	assert_int_equal(na, nb);
	assert_memory_equal(a, b, na);
	assert_int_equal(na, nc);
	assert_memory_not_equal(a, c, na);
	free(a);
	free(b);
	free(c);
}

/* mfile_identity: equal for the same bytes, another for other weights of
 * the same shapes (another seed) and for another tensor type. */
static uint64_t identity_of(const char *name)
{
	struct ig_errbuf eb;
	struct mfile f;
	char path[320];
	uint64_t id;

	path_of(path, sizeof(path), name);
	if (mfile_open(&f, path, &eb))
		fail_msg("%s: %s", name, eb.msg);
	id = mfile_identity(&f);
	mfile_close(&f);
	return id;
}

static void test_identity(void **state)
{
	(void)state;
	write_model("tiny-dense", 42, MFILE_BF16, "a.gguf");
	write_model("tiny-dense", 42, MFILE_BF16, "b.gguf");
	write_model("tiny-dense", 43, MFILE_BF16, "c.gguf");
	write_model("tiny-dense", 42, MFILE_Q8_0, "d.gguf");
	assert_true(identity_of("a.gguf") == identity_of("b.gguf"));
	assert_true(identity_of("a.gguf") != identity_of("c.gguf"));
	assert_true(identity_of("a.gguf") != identity_of("d.gguf"));
}

/* FNV-1a 64 of a file's bytes. */
static uint64_t fnv1a_file(const char *name, size_t *n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	char *all = slurp(name, n);

	for (size_t i = 0; i < *n; i++) {
		h ^= (unsigned char)all[i];
		h *= 0x100000001b3ull;
	}
	free(all);
	return h;
}

/*
 * The tiny presets' bytes are pinned: recorded from the in-memory writer
 * (before the streaming writer replaced it) with seed 1. A change here is a
 * format change of every tiny model file (test fixtures, golden outputs).
 */
static void test_tiny_bytes_pinned(void **state)
{
	static const struct {
		const char *preset;
		enum mfile_dtype dt;
		size_t size;
		uint64_t fnv;
	} rows[] = {
	    {"tiny-dense", MFILE_BF16, 5543296, 0x0ddfb3c50edae138ull},
	    {"tiny-dense", MFILE_F16, 5543296, 0x55914be5ec514bc9ull},
	    {"tiny-dense", MFILE_F32, 11082240, 0x6d0a114d7120d3c2ull},
	    {"tiny-moe", MFILE_BF16, 30617824, 0x029b4d629e924d4eull},
	    {"tiny-dense", MFILE_Q8_0, 2955136, 0x6d6c38550ab2cebfull},
	    {"tiny-dense", MFILE_Q4_K, 1574784, 0x9be1f2fd698f5d36ull},
	    /* tiny-moe f16 0x415dc9a2356877fa, f32 0xbc2006319e14a5bb: the same
	     * conversions as tiny-dense's, not rerun for time */
	};

	(void)state;
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		size_t n;
		uint64_t h;

		write_model(rows[i].preset, 1, rows[i].dt, "pin.gguf");
		h = fnv1a_file("pin.gguf", &n);
		if (n != rows[i].size || h != rows[i].fnv)
			fail_msg("%s dtype %d: %zu bytes, fnv1a 0x%016llx; pinned %zu, 0x%016llx",
			         rows[i].preset, (int)rows[i].dt, n, (unsigned long long)h,
			         rows[i].size, (unsigned long long)rows[i].fnv);
	}
}

static void test_dtypes(void **state)
{
	struct ig_errbuf eb;
	struct mfile f;
	char path[320];

	(void)state;
	write_model("tiny-dense", 1, MFILE_F32, "f32.gguf");
	path_of(path, sizeof(path), "f32.gguf");
	if (mfile_open(&f, path, &eb))
		fail_msg("f32: %s", eb.msg);
	/* f32 weights: twice the bf16 bytes */
	assert_int_equal(mdesc_weight_bytes(&f.desc),
	                 2 * mdesc_weight_bytes(mdesc_find("tiny-dense")));
	mfile_close(&f);
}

/* ---- malformed files: a valid one rewritten with one change ---------------- */

enum mut {
	M_NONE,
	M_DROP_KEY,
	M_KEY_AS_U64,
	M_ARCH,
	M_FAMILY,
	M_DROP_TENSOR,
	M_DIMS,
	M_EXTRA_TENSOR,
	M_ZERO_SHAPE,
	M_HEADS,
	M_TOKENIZER,
	M_VOCAB300,
	M_SET_U32,  /* the key takes mut_u32 */
	M_ADD_U32,  /* a new key `what` = mut_u32 */
	M_ADD_BOOLS /* a new key `what`: mut_bools[0 .. mut_nbools) */
};

static uint32_t mut_u32;
static bool mut_bools[8];
static size_t mut_nbools;

static void rewrite(const char *src, const char *dst, enum mut mut, const char *what)
{
	struct gguf_writer w;
	struct ig_errbuf eb;
	struct gguf g;
	char in[320], out[320];
	static const uint16_t extra[4] = {0};

	path_of(in, sizeof(in), src);
	path_of(out, sizeof(out), dst);
	if (gguf_open(&g, in, &eb))
		fail_msg("%s", eb.msg);
	gguf_writer_init(&w);
	for (size_t i = 0; i < g.n_kv; i++) {
		const struct gguf_kv *kv = gguf_kv_at(&g, i);
		bool hit = !strcmp(kv->key, what);

		if (hit && mut == M_DROP_KEY)
			continue;
		if (hit && mut == M_KEY_AS_U64) {
			gguf_writer_add_u64(&w, kv->key, kv->v.u32);
			continue;
		}
		if (hit && (mut == M_ARCH || mut == M_FAMILY)) {
			gguf_writer_add_str(&w, kv->key, mut == M_ARCH ? "llama" : "sparse");
			continue;
		}
		if (hit && mut == M_ZERO_SHAPE) {
			gguf_writer_add_u32(&w, kv->key, 0);
			continue;
		}
		if (hit && mut == M_TOKENIZER) {
			gguf_writer_add_str(&w, kv->key, "llama"); /* a SentencePiece one */
			continue;
		}
		if (hit && mut == M_VOCAB300) {
			gguf_writer_add_u32(&w, kv->key, 300);
			continue;
		}
		if (hit && mut == M_SET_U32) {
			gguf_writer_add_u32(&w, kv->key, mut_u32);
			continue;
		}
		if (hit && mut == M_HEADS) {
			gguf_writer_add_u32(&w, kv->key, 3); /* 4 query heads over 3 KV heads */
			continue;
		}
		switch (kv->type) {
		case GGUF_TYPE_UINT32:
			gguf_writer_add_u32(&w, kv->key, kv->v.u32);
			break;
		case GGUF_TYPE_UINT64:
			gguf_writer_add_u64(&w, kv->key, kv->v.u64);
			break;
		case GGUF_TYPE_FLOAT32:
			gguf_writer_add_f32(&w, kv->key, kv->v.f32);
			break;
		case GGUF_TYPE_STRING:
			gguf_writer_add_strn(&w, kv->key, kv->v.str.ptr, kv->v.str.len);
			break;
		case GGUF_TYPE_BOOL:
			gguf_writer_add_bool(&w, kv->key, kv->v.b);
			break;
		case GGUF_TYPE_ARRAY:
			if (kv->v.arr.type == GGUF_TYPE_STRING) {
				gguf_writer_add_arr_strn(&w, kv->key, kv->v.arr.strs, kv->v.arr.n);
			} else {
				size_t bytes = kv->v.arr.n * gguf_type_size(kv->v.arr.type);
				void *copy = malloc(bytes ? bytes : 1); /* aligned for add_arr */

				assert_non_null(copy);
				memcpy(copy, kv->v.arr.data, bytes);
				gguf_writer_add_arr(&w, kv->key, kv->v.arr.type, copy, kv->v.arr.n);
				free(copy);
			}
			break;
		default:
			fail_msg("unexpected kv type %d", kv->type);
		}
	}
	if (mut == M_ADD_U32)
		gguf_writer_add_u32(&w, what, mut_u32);
	if (mut == M_ADD_BOOLS)
		gguf_writer_add_arr(&w, what, GGUF_TYPE_BOOL, mut_bools, mut_nbools);
	for (size_t i = 0; i < g.n_tensors; i++) {
		const struct gguf_tensor *t = gguf_tensor_at(&g, i);
		bool hit = !strcmp(t->name, what);
		uint64_t dims[4];

		memcpy(dims, t->dims, sizeof(dims));
		if (hit && mut == M_DROP_TENSOR)
			continue;
		if (hit && mut == M_DIMS)
			dims[0] /= 2; /* half the data: a prefix of the original */
		gguf_writer_add_tensor(&w, t->name, t->type, t->n_dims, dims, t->data);
	}
	if (mut == M_EXTRA_TENSOR) {
		const uint64_t d[4] = {4, 1, 1, 1};

		gguf_writer_add_tensor(&w, what, GGUF_TENSOR_BF16, 1, d, extra);
	}
	if (gguf_writer_write(&w, out, &eb))
		fail_msg("rewrite: %s", eb.msg);
	gguf_writer_release(&w);
	gguf_close(&g);
}

static void test_malformed_files(void **state)
{
	static const struct {
		const char *name;
		enum mut mut;
		const char *what;
		const char *say[2];
	} rows[] = {
	    {"a metadata key missing",
	     M_DROP_KEY,
	     "ignis.embedding_length",
	     {"ignis.embedding_length", NULL}},
	    {"a key of the wrong type",
	     M_KEY_AS_U64,
	     "ignis.block_count",
	     {"ignis.block_count", "UINT64"}},
	    {"another architecture",
	     M_ARCH,
	     "general.architecture",
	     {"'llama' model", "ignis-hybrid"}},
	    {"an unknown family", M_FAMILY, "ignis.family", {"'sparse'", "dense or moe"}},
	    {"a tensor missing",
	     M_DROP_TENSOR,
	     "blk.3.attn_q.weight",
	     {"'blk.3.attn_q.weight' is missing", "expected dims"}},
	    {"a tensor of other dims",
	     M_DIMS,
	     "blk.0.ffn_up.weight",
	     {"'blk.0.ffn_up.weight' has dims", "the description says"}},
	    {"an extra tensor", M_EXTRA_TENSOR, "lora.weight", {"'lora.weight' is not part", NULL}},
	    {"a zero shape",
	     M_ZERO_SHAPE,
	     "ignis.vocab_size",
	     {"ignis.vocab_size (vocab) is 0", "accepted: 1 to 16777216"}},
	    {"heads that do not divide",
	     M_HEADS,
	     "ignis.attention.head_count_kv",
	     {"not a multiple", NULL}},
	    /* the tokenizer is stated, never guessed from the vocabulary */
	    {"no tokenizer",
	     M_DROP_KEY,
	     "tokenizer.ggml.model",
	     {"names no tokenizer (no key tokenizer.ggml.model)", "accepted: none"}},
	    {"a tokenizer not built",
	     M_TOKENIZER,
	     "tokenizer.ggml.model",
	     {"tokenizer.ggml.model 'llama'", "accepted: none (token ids only), bytes"}},
	    {"the byte-level tokenizer with 300 ids",
	     M_VOCAB300,
	     "ignis.vocab_size",
	     {"'bytes' is the byte-level tokenizer of 260 ids", "(vocab) is 300"}},
	};
	/* counts that drive the walks over the layers and the experts' tables:
	 * each refused by its bound before any walk (issue 26, item 8) */
	static const struct {
		const char *name;
		const char *from, *key;
		uint32_t value;
		const char *say[2];
	} counts[] = {
	    {"2^24 blocks",
	     "ok.gguf",
	     "ignis.block_count",
	     1u << 24,
	     {"ignis.block_count (layers) is 16777216", "accepted: 1 to 4096"}},
	    {"more blocks than the file's tensors hold",
	     "ok.gguf",
	     "ignis.block_count",
	     40,
	     {"ignis.block_count (layers) is 40", "tensors hold at most 4 layers"}},
	    {"2^24 experts",
	     "okmoe.gguf",
	     "ignis.expert_count",
	     1u << 24,
	     {"ignis.expert_count (experts) is 16777216", "accepted: 1 to 65536"}},
	};
	int failures = 0;

	(void)state;
	write_model("tiny-dense", 1, MFILE_BF16, "ok.gguf");
	write_model("tiny-moe", 1, MFILE_BF16, "okmoe.gguf");
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct ig_errbuf eb = {0};
		struct mfile f;
		char path[320];
		int rc;

		rewrite("ok.gguf", "bad.gguf", rows[i].mut, rows[i].what);
		path_of(path, sizeof(path), "bad.gguf");
		rc = mfile_open(&f, path, &eb);
		if (rc == IG_E_OK) {
			mfile_close(&f);
			printf("FAIL %s: accepted\n", rows[i].name);
			failures++;
			continue;
		}
		for (int w = 0; w < 2 && rows[i].say[w]; w++)
			if (!strstr(eb.msg, rows[i].say[w])) {
				printf("FAIL %s: message lacks '%s': %s\n", rows[i].name,
				       rows[i].say[w], eb.msg);
				failures++;
			}
		if (!strstr(eb.msg, "bad.gguf")) {
			printf("FAIL %s: message does not name the file: %s\n", rows[i].name,
			       eb.msg);
			failures++;
		}
	}
	for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
		struct ig_errbuf eb = {0};
		struct mfile f;
		char path[320];
		int rc;

		mut_u32 = counts[i].value;
		rewrite(counts[i].from, "bad.gguf", M_SET_U32, counts[i].key);
		path_of(path, sizeof(path), "bad.gguf");
		rc = mfile_open(&f, path, &eb);
		if (rc == IG_E_OK)
			mfile_close(&f);
		if (rc != IG_E_INVAL) {
			printf("FAIL %s: %s, wanted IG_E_INVAL %s\n", counts[i].name,
			       ig_err_name(rc), eb.msg);
			failures++;
			continue;
		}
		for (int w = 0; w < 2; w++)
			if (!strstr(eb.msg, counts[i].say[w]) || !strstr(eb.msg, "bad.gguf")) {
				printf("FAIL %s: message lacks '%s' or the file: %s\n",
				       counts[i].name, counts[i].say[w], eb.msg);
				failures++;
			}
	}
	assert_int_equal(failures, 0);
}

/* llama.cpp's qwen3 layout: a synthetic file in it opens with the
 * description it was written from (every layer full attention, no gate,
 * tied output, the gpt2 vocabulary and its eos), as describe says; a file
 * short of a key, or whose vocabulary does not fill the embedding, is
 * refused naming it. */
static void test_qwen3_layout(void **state)
{
	struct mdesc q3;
	struct mfile_synthetic syn;
	struct ig_errbuf eb = {0};
	struct mfile f;
	char path[320];

	(void)state;
	mfile_as_qwen3(mdesc_find("tiny-dense"), &q3);
	path_of(path, sizeof(path), "q3.gguf");
	if (mfile_write_synthetic(&q3, 5, MFILE_Q8_0, path, &eb))
		fail_msg("%s", eb.msg);
	if (mfile_open(&f, path, &eb))
		fail_msg("%s", eb.msg);
	assert_int_equal(f.desc.arch, MDESC_ARCH_QWEN3);
	assert_int_equal(f.desc.tokenizer, MDESC_TOK_GPT2);
	assert_true(f.desc.attn_ungated);
	assert_true(f.desc.tied_output);
	assert_null(gguf_find_tensor(&f.g, "output.weight"));
	assert_int_equal(f.desc.full_layers, q3.layers);
	assert_int_equal(mdesc_eos(&f.desc), MFILE_QWEN3_EOS);
	assert_int_equal(gguf_find_tensor(&f.g, "blk.0.attn_q.weight")->dims[1],
	                 (uint64_t)q3.q_heads * q3.head_dim);
	assert_int_equal(gguf_find_tensor(&f.g, "blk.0.attn_norm.weight")->type, GGUF_TENSOR_F32);
	assert_true(mfile_same_shape(&f.desc, &q3));
	assert_int_equal(mfile_synthetic_describe(&q3, MFILE_Q8_0, &syn, &eb), IG_E_OK);
	assert_int_equal(syn.desc.weight_bytes, f.desc.weight_bytes);
	assert_int_equal(mdesc_state_image_bytes(&f.desc), MDESC_STATE_IMAGE_HEADER);
	mfile_close(&f);

	rewrite("q3.gguf", "q3bad.gguf", M_DROP_KEY, "qwen3.block_count");
	path_of(path, sizeof(path), "q3bad.gguf");
	assert_int_equal(mfile_open(&f, path, &eb), IG_E_INVAL);
	assert_non_null(strstr(eb.msg, "qwen3.block_count is missing"));
	rewrite("q3.gguf", "q3bad.gguf", M_DROP_KEY, "tokenizer.ggml.merges");
	assert_int_equal(mfile_open(&f, path, &eb), IG_E_INVAL);
	assert_non_null(strstr(eb.msg, "tokenizer.ggml.merges"));
	/* a block count past its bound, or past what the tensors hold: refused
	 * by name before any walk over the layers (issue 26, item 8) */
	mut_u32 = 1u << 24;
	rewrite("q3.gguf", "q3bad.gguf", M_SET_U32, "qwen3.block_count");
	assert_int_equal(mfile_open(&f, path, &eb), IG_E_INVAL);
	assert_non_null(strstr(eb.msg, "qwen3.block_count is 16777216; accepted: 1 to 4096"));
	mut_u32 = 4000;
	rewrite("q3.gguf", "q3bad.gguf", M_SET_U32, "qwen3.block_count");
	assert_int_equal(mfile_open(&f, path, &eb), IG_E_INVAL);
	assert_non_null(strstr(eb.msg, "qwen3.block_count is 4000 but the file's"));
	/* a chat template we do not render is refused at load, by name */
	rewrite("q3.gguf", "q3bad.gguf", M_ARCH, "tokenizer.chat_template");
	assert_int_equal(mfile_open(&f, path, &eb), IG_E_INVAL);
	assert_non_null(
	    strstr(eb.msg, "tokenizer.chat_template: a chat template we do not render"));
	q3.vocab = 300; /* 259 tokens and 41 padding: still the embedding's rows */
	path_of(path, sizeof(path), "q3pad.gguf");
	if (mfile_write_synthetic(&q3, 5, MFILE_BF16, path, &eb) || mfile_open(&f, path, &eb))
		fail_msg("%s", eb.msg);
	assert_int_equal(f.desc.vocab, 300);
	mfile_close(&f);
}

/* Open `name`, expecting a refusal whose message holds `words`. */
static void refused(const char *name, const char *words)
{
	struct ig_errbuf eb = {0};
	struct mfile f;
	char path[320];

	path_of(path, sizeof(path), name);
	if (mfile_open(&f, path, &eb) == IG_E_OK) {
		mfile_close(&f);
		fail_msg("%s opened; expected a refusal with '%s'", name, words);
	}
	if (!strstr(eb.msg, words))
		fail_msg("%s: '%s' does not say '%s'", name, eb.msg, words);
}

/*
 * llama.cpp's hybrids (docs/adr/0033): a synthetic file of each opens with
 * the description it was written from and the one describe gives (the
 * figures summed from its tensors, a MoE file's own expert classes), in
 * llama.cpp's names and storage (ssm_a without .weight, split or grouped
 * beta/alpha, post_attention_norm, F32 vectors, norms, routers and
 * convolution), in llama.cpp's Q4_K_M mix; a sparse write is the same file
 * without its bytes; MTP blocks are counted and skipped; what does not fit
 * is refused naming the key or tensor.
 */
static void test_llama_hybrids(void **state)
{
	static const struct {
		enum mdesc_arch arch;
		const char *preset, *name;
	} rows[] = {{MDESC_ARCH_QWEN35, "tiny-dense", "qwen35"},
	            {MDESC_ARCH_QWEN35MOE, "tiny-moe", "qwen35moe"},
	            {MDESC_ARCH_QWEN3NEXT, "tiny-moe", "qwen3next"}};
	struct ig_errbuf eb = {0};
	char path[320], key[96], file[64], bad[64];

	(void)state;
	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
		const char *an = rows[r].name;
		bool moe = rows[r].arch != MDESC_ARCH_QWEN35;
		struct mdesc m;
		struct mfile_synthetic syn;
		struct mfile_wopts wo = {.sparse = true};
		struct mfile f, fs;
		struct stat st;
		uint32_t down_l2, down_l0;

		if (mfile_as_layout(mdesc_find(rows[r].preset), rows[r].arch, &m, &eb))
			fail_msg("%s", eb.msg);
		m.layers = 4; /* 1 full, 3 linear, whatever the preset */
		snprintf(file, sizeof file, "%s.gguf", an);
		path_of(path, sizeof(path), file);
		if (mfile_write_synthetic(&m, 3, MFILE_Q4_K_M, path, &eb) ||
		    mfile_open(&f, path, &eb))
			fail_msg("%s: %s", an, eb.msg);
		assert_int_equal(f.desc.arch, rows[r].arch);
		assert_true(mfile_same_shape(&f.desc, &m));
		assert_false(f.desc.attn_ungated);
		assert_int_equal(f.desc.full_layers, m.layers / m.full_interval);
		assert_int_equal(mfile_synthetic_describe(&m, MFILE_Q4_K_M, &syn, &eb), IG_E_OK);
		assert_int_equal(syn.desc.weight_bytes, f.desc.weight_bytes);
		assert_int_equal(syn.desc.expert_host_bytes, f.desc.expert_host_bytes);
		assert_memory_equal(syn.desc.class_record_bytes, f.desc.class_record_bytes,
		                    sizeof f.desc.class_record_bytes);
		assert_int_equal(gguf_find_tensor(&f.g, "blk.0.ssm_a")->type, GGUF_TENSOR_F32);
		assert_int_equal(gguf_find_tensor(&f.g, "blk.0.ssm_conv1d.weight")->type,
		                 GGUF_TENSOR_F32);
		assert_non_null(gguf_find_tensor(&f.g, "blk.0.ssm_dt.bias"));
		assert_non_null(gguf_find_tensor(&f.g, "blk.3.post_attention_norm.weight"));
		assert_null(gguf_find_tensor(&f.g, "blk.3.ffn_norm.weight"));
		assert_true((gguf_find_tensor(&f.g, "blk.0.ssm_beta.weight") != NULL) ==
		            (rows[r].arch != MDESC_ARCH_QWEN3NEXT));
		assert_true((gguf_find_tensor(&f.g, "blk.0.ssm_ba.weight") != NULL) ==
		            (rows[r].arch == MDESC_ARCH_QWEN3NEXT));
		/* Q4_K_M: ffn_down Q6_K on llama.cpp's use_more_bits (of 4 layers:
		 * 2 and 3), Q4_K elsewhere; where rows are not whole blocks, BF16 */
		down_l0 = gguf_find_tensor(&f.g, moe ? "blk.0.ffn_down_shexp.weight"
		                                     : "blk.0.ffn_down.weight")
		              ->type;
		down_l2 = gguf_find_tensor(&f.g, moe ? "blk.2.ffn_down_shexp.weight"
		                                     : "blk.2.ffn_down.weight")
		              ->type;
		if (!moe) {
			assert_int_equal(down_l0, GGUF_TENSOR_Q4_K);
			assert_int_equal(down_l2, GGUF_TENSOR_Q6_K);
			assert_int_equal(gguf_find_tensor(&f.g, "blk.2.attn_qkv.weight")->type,
			                 GGUF_TENSOR_Q6_K);
			assert_int_equal(gguf_find_tensor(&f.g, "blk.1.attn_qkv.weight")->type,
			                 GGUF_TENSOR_Q4_K);
		} else {
			/* 64-wide rows: BF16; the experts' gate_up one class, down one */
			assert_int_equal(down_l0, GGUF_TENSOR_BF16);
			assert_int_equal(gguf_find_tensor(&f.g, "blk.0.ffn_gate_inp.weight")->type,
			                 GGUF_TENSOR_F32);
			assert_int_equal(
			    f.desc.class_record_bytes[0],
			    (2 * quant_row_bytes(GGUF_TENSOR_Q4_K, m.hidden) * m.expert_inter +
			     4095) /
			        4096 * 4096);
			assert_int_equal(f.desc.class_record_bytes[1], 0);
			assert_int_equal(f.desc.class_record_bytes[4],
			                 (2ull * m.expert_inter * m.hidden + 4095) / 4096 * 4096);
			assert_int_equal(f.desc.class_record_bytes[5], 0);
			assert_int_equal(mdesc_min_expert_bytes(&f.desc),
			                 f.desc.class_record_bytes[0] +
			                     f.desc.class_record_bytes[4]);
		}
		/* sparse: the same file without its bytes */
		snprintf(file, sizeof file, "%s-sparse.gguf", an);
		path_of(path, sizeof(path), file);
		if (mfile_write_synthetic_opts(&m, 3, MFILE_Q4_K_M, path, &wo, &eb) ||
		    mfile_open(&fs, path, &eb))
			fail_msg("%s sparse: %s", an, eb.msg);
		assert_int_equal(stat(path, &st), 0);
		assert_int_equal((uint64_t)st.st_size, syn.file_bytes);
		assert_int_equal(fs.desc.weight_bytes, f.desc.weight_bytes);
		assert_memory_equal(fs.desc.class_record_bytes, f.desc.class_record_bytes,
		                    sizeof f.desc.class_record_bytes);
		assert_int_equal(
		    ((const uint8_t *)gguf_find_tensor(&fs.g, "output_norm.weight")->data)[0], 0);
		mfile_close(&fs);
		mfile_close(&f);

		/* refusals, each naming what is wrong */
		snprintf(file, sizeof file, "%s.gguf", an);
		snprintf(bad, sizeof bad, "%s-bad.gguf", an);
		snprintf(key, sizeof key, "%s.ssm.state_size", an);
		rewrite(file, bad, M_DROP_KEY, key);
		refused(bad, "ssm.state_size is missing");
		snprintf(key, sizeof key, "%s.ssm.inner_size", an);
		mut_u32 = 100;
		rewrite(file, bad, M_SET_U32, key);
		refused(bad, "ssm.inner_size 100 is not ssm.time_step_rank");
		/* counts past their bounds, named before any walk (issue 26, item 8) */
		snprintf(key, sizeof key, "%s.block_count", an);
		mut_u32 = 1u << 24;
		rewrite(file, bad, M_SET_U32, key);
		refused(bad, "block_count is 16777216; accepted: 1 to 4096");
		if (moe) {
			snprintf(key, sizeof key, "%s.expert_count", an);
			rewrite(file, bad, M_SET_U32, key);
			refused(bad, "expert_count is 16777216; accepted: 1 to 65536");
		}
		/* layer 1 full says every second layer; layer 3 then is too */
		snprintf(key, sizeof key, "%s.attention.recurrent_layers", an);
		memcpy(mut_bools, (bool[]){true, false, true, true}, 4 * sizeof(bool));
		mut_nbools = 4;
		rewrite(file, bad, M_ADD_BOOLS, key);
		refused(bad, "layer 3 is linear; Ignis runs one full-attention layer every N");
		mut_nbools = 3;
		rewrite(file, bad, M_ADD_BOOLS, key);
		refused(bad, "has 3 entries; the file has 4 blocks");
		/* the array, when periodic, is the pattern */
		memcpy(mut_bools, (bool[]){true, true, true, false}, 4 * sizeof(bool));
		mut_nbools = 4;
		rewrite(file, bad, M_ADD_BOOLS, key);
		path_of(path, sizeof(path), bad);
		if (mfile_open(&f, path, &eb))
			fail_msg("%s: %s", an, eb.msg);
		assert_int_equal(f.desc.full_interval, 4);
		mfile_close(&f);
		rewrite(file, bad, M_DIMS, "blk.0.ssm_norm.weight");
		refused(bad, "tensor 'blk.0.ssm_norm.weight' has dims");
		rewrite(file, bad, M_DROP_TENSOR, "blk.1.ssm_a");
		refused(bad, "tensor 'blk.1.ssm_a' is missing");
		/* an MTP block: counted in block_count, named by nextn_predict_layers,
		 * its tensors skipped; without that key the same tensor is foreign */
		rewrite(file, bad, M_EXTRA_TENSOR, "blk.4.nextn.eh_proj.weight");
		refused(bad, "tensor 'blk.4.nextn.eh_proj.weight' is not part of a");
		snprintf(key, sizeof key, "%s.block_count", an);
		mut_u32 = 5;
		rewrite(bad, "mtp1.gguf", M_SET_U32, key);
		snprintf(key, sizeof key, "%s.nextn_predict_layers", an);
		mut_u32 = 1;
		rewrite("mtp1.gguf", "mtp2.gguf", M_ADD_U32, key);
		path_of(path, sizeof(path), "mtp2.gguf");
		if (mfile_open(&f, path, &eb))
			fail_msg("%s mtp: %s", an, eb.msg);
		assert_int_equal(f.desc.layers, 4);
		assert_int_equal(f.desc.mtp_layers, 1);
		assert_int_equal(f.mtp_tensors, 1);
		mfile_close(&f);
		mut_u32 = 5;
		rewrite("mtp1.gguf", "mtp2.gguf", M_ADD_U32, key);
		refused("mtp2.gguf", "nextn_predict_layers 5 leaves no layer");
	}
	/* a layout we do not run names the five we do */
	rewrite("qwen35.gguf", "foreign.gguf", M_ARCH, "general.architecture");
	refused("foreign.gguf", "accepted: architecture ignis-hybrid, qwen3, qwen35, qwen35moe or "
	                        "qwen3next");
	/* a dense preset is no MoE layout, and the reverse */
	assert_int_equal(mfile_as_layout(mdesc_find("tiny-dense"), MDESC_ARCH_QWEN3NEXT,
	                                 &(struct mdesc){0}, &eb),
	                 IG_E_INVAL);
	assert_non_null(strstr(eb.msg, "the qwen3next layout is moe"));
}

static void test_truncated_and_foreign(void **state)
{
	struct ig_errbuf eb;
	struct mfile f;
	char path[320];
	size_t n;
	char *all;
	FILE *out;

	(void)state;
	write_model("tiny-dense", 1, MFILE_BF16, "full.gguf");
	all = slurp("full.gguf", &n);
	path_of(path, sizeof(path), "cut.gguf");
	out = fopen(path, "wb");
	fwrite(all, 1, n - 1000, out); /* the last tensor loses its tail */
	fclose(out);
	assert_int_not_equal(mfile_open(&f, path, &eb), IG_E_OK);
	assert_non_null(strstr(eb.msg, "output.weight"));
	free(all);
	path_of(path, sizeof(path), "text.gguf");
	out = fopen(path, "w");
	fputs("not a model at all\n", out);
	fclose(out);
	assert_int_not_equal(mfile_open(&f, path, &eb), IG_E_OK);
	assert_non_null(strstr(eb.msg, "text.gguf"));
	path_of(path, sizeof(path), "absent.gguf");
	assert_int_equal(mfile_open(&f, path, &eb), IG_E_IO);
}

/* ---- the expert counts beside a MoE model (model/expcounts.h) ----------------- */

/* The file's lines, each changed in place by a row's mutator. */
#define XC_LINES 16
#define XC_CAP   512

struct xc_text {
	char line[XC_LINES][XC_CAP];
	size_t n;
};

/* Replace the first word of line `at` (1-based) with `w`. */
static void xc_first(struct xc_text *t, size_t at, const char *w)
{
	char *l = t->line[at - 1], rest[XC_CAP];
	const char *sp = strchr(l, ' ');

	snprintf(rest, sizeof rest, "%s", sp ? sp : "");
	snprintf(l, XC_CAP, "%s%s", w, rest);
}

static void xc_none(struct xc_text *t)
{
	(void)t;
}
static void xc_long(struct xc_text *t)
{
	/* 27 digits: read 23 at a time, it was 0 then 1234, one count too many */
	xc_first(t, 6, "000000000000000000000001234");
}
static void xc_max(struct xc_text *t)
{
	xc_first(t, 4, "18446744073709551615");
}
static void xc_past_max(struct xc_text *t)
{
	xc_first(t, 4, "18446744073709551616");
}
static void xc_sign(struct xc_text *t)
{
	xc_first(t, 4, "-0");
}
static void xc_short_line(struct xc_text *t)
{
	*strrchr(t->line[3], ' ') = '\0';
}
static void xc_long_line(struct xc_text *t)
{
	strcat(t->line[3], " 7");
}
static void xc_layers_wrap(struct xc_text *t)
{
	/* 2^32 + 8: wrapped to 8 as an unsigned, tiny-moe's layers */
	snprintf(t->line[2], XC_CAP, "layers 4294967304 experts 32");
}
static void xc_extra_line(struct xc_text *t)
{
	snprintf(t->line[t->n++], XC_CAP, "1 2 3");
}

/*
 * The counts file of ignis-calibrate: what it wrote reads back exactly; a
 * count that is not a whole number of at most 20 digits (2^64 - 1), a layer
 * line of other than one count an expert, a line past the last layer, a
 * header figure that wraps: each refused naming its line (issue 26, item 9),
 * never split, wrapped or skipped.
 */
static void test_expert_counts_file(void **state)
{
	static const struct {
		const char *name;
		void (*mut)(struct xc_text *t);
		int want;
		const char *say[2];
	} rows[] = {
	    {"as written", xc_none, IG_E_OK, {NULL}},
	    {"2^64 - 1", xc_max, IG_E_OK, {NULL}},
	    {"a count of 27 digits", xc_long, IG_E_INVAL, {"line 6:", "27 digits"}},
	    {"2^64",
	     xc_past_max,
	     IG_E_INVAL,
	     {"line 4:", "'18446744073709551616', above 18446744073709551615"}},
	    {"a sign", xc_sign, IG_E_INVAL, {"line 4:", "is '-0', not a whole number"}},
	    {"a layer short of a count",
	     xc_short_line,
	     IG_E_INVAL,
	     {"line 4:", "count 32 of 32 (layer 0, expert 31) is missing"}},
	    {"a layer with a count too many",
	     xc_long_line,
	     IG_E_INVAL,
	     {"line 4:", "more than 32"}},
	    {"layers 2^32 + 8", xc_layers_wrap, IG_E_INVAL, {"4294967304 layers", NULL}},
	    {"a line past the last layer",
	     xc_extra_line,
	     IG_E_INVAL,
	     {"line 12:", "past the last"}},
	};
	static uint64_t counts[8 * 32];
	char model[320], path[340];
	struct ig_errbuf eb = {0};
	struct mfile f;
	int failures = 0;

	(void)state;
	path_of(model, sizeof model, "okmoe.gguf"); /* test_malformed_files' when it ran */
	if (access(model, F_OK))
		write_model("tiny-moe", 1, MFILE_BF16, "okmoe.gguf");
	assert_int_equal(mfile_open(&f, model, &eb), IG_E_OK);
	assert_int_equal(f.desc.layers * f.desc.experts, 8 * 32);
	assert_int_equal(expcounts_path(path, sizeof path, model, &eb), IG_E_OK);
	for (size_t i = 0; i < 8 * 32; i++)
		counts[i] = i * 1000003u;
	for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
		struct xc_text t = {0};
		uint64_t *back = NULL;
		char *all, *line, *save;
		size_t n;
		FILE *o;
		int rc;

		assert_int_equal(expcounts_write(path, &f, counts, &eb), IG_E_OK);
		all = slurp("okmoe.gguf.experts", &n);
		all = realloc(all, n + 1);
		all[n] = '\0';
		for (line = strtok_r(all, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
			snprintf(t.line[t.n++], XC_CAP, "%s", line);
		free(all);
		assert_int_equal(t.n, 3 + 8);
		rows[r].mut(&t);
		o = fopen(path, "w");
		assert_non_null(o);
		for (size_t i = 0; i < t.n; i++)
			fprintf(o, "%s\n", t.line[i]);
		fclose(o);
		rc = expcounts_read(path, &f, &back, &eb);
		if (rc != rows[r].want) {
			printf("FAIL %s: %s, wanted %s: %s\n", rows[r].name, ig_err_name(rc),
			       ig_err_name(rows[r].want), rc ? eb.msg : "");
			failures++;
		} else if (rc == IG_E_OK) {
			if (back[0] != (rows[r].mut == xc_max ? UINT64_MAX : 0) ||
			    memcmp(back + 1, counts + 1, sizeof counts - sizeof counts[0])) {
				printf("FAIL %s: the counts read are not those written\n",
				       rows[r].name);
				failures++;
			}
		} else {
			for (int w = 0; w < 2 && rows[r].say[w]; w++)
				if (!strstr(eb.msg, rows[r].say[w])) {
					printf("FAIL %s: message lacks '%s': %s\n", rows[r].name,
					       rows[r].say[w], eb.msg);
					failures++;
				}
			if (!strstr(eb.msg, path)) {
				printf("FAIL %s: message does not name the file: %s\n",
				       rows[r].name, eb.msg);
				failures++;
			}
			if (back) {
				printf("FAIL %s: refused, with counts\n", rows[r].name);
				failures++;
			}
		}
		free(back);
	}
	mfile_close(&f);
	assert_int_equal(failures, 0);
}

/* ---- the streaming writer and the dry run ----------------------------------- */

/* A MoE shape of none of the presets: other heads, dims and experts, an
 * interval of 3 (about 9 MB in bf16). */
static struct mdesc custom_moe(void)
{
	struct mdesc m = *mdesc_find("tiny-moe");

	m.name = m.alias = "custom-moe";
	m.layers = 6;
	m.full_interval = 3;
	m.hidden = 192;
	m.q_heads = 6;
	m.kv_heads = 3;
	m.head_dim = 128;
	m.rope_dims = 32;
	m.vocab = 1000;
	m.tokenizer = MDESC_TOK_NONE; /* 1000 ids: token ids only */
	m.lin_k_heads = 3;
	m.lin_v_heads = 6;
	m.lin_dk = 32;
	m.lin_dv = 48;
	m.conv_kernel = 3;
	m.experts = 24;
	m.top_k = 3;
	m.expert_inter = 96;
	m.shared_inter = 80;
	return m;
}

/* A dense shape of none of the presets, mostly feed-forward; its
 * vocabulary is not the byte-level tokenizer's: ids only. */
static struct mdesc custom_dense(uint32_t layers, uint32_t ffn, uint32_t hidden, uint32_t vocab)
{
	struct mdesc m = *mdesc_find("tiny-dense");

	m.name = m.alias = "custom-dense";
	m.layers = layers;
	m.hidden = hidden;
	m.q_heads = 8;
	m.head_dim = 128;
	m.ffn_inter = ffn;
	m.vocab = vocab;
	m.tokenizer = MDESC_TOK_NONE;
	return m;
}

static void write_desc(const struct mdesc *m, enum mfile_dtype dt, size_t chunk, const char *name)
{
	struct mfile_wopts o = {.chunk_bytes = chunk};
	struct ig_errbuf eb;
	char path[320];

	path_of(path, sizeof(path), name);
	if (mfile_write_synthetic_opts(m, 1, dt, path, &o, &eb))
		fail_msg("write %s: %s", m->name, eb.msg);
}

static void assert_same_file(const char *a, const char *b);

/*
 * Block types (ignis-mkmodel --dtype q8_0 ...): each tensor in the type
 * mfile_tensor_type gives it, block-type matrices among them, whose decoded
 * values are the synthetic values within a quantization step; the bytes do
 * not depend on the writer's chunk (which does not fall on blocks); the
 * loader's figures are the tensors' real bytes.
 */
static void test_block_dtypes(void **state)
{
	static const enum mfile_dtype dts[] = {MFILE_Q8_0, MFILE_Q4_0, MFILE_Q4_K, MFILE_Q5_K,
	                                       MFILE_Q6_K};
	const struct mdesc *m = mdesc_find("tiny-dense");

	(void)state;
	for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++) {
		const struct quant_type *q = quant_type_of((uint32_t)dts[d]);
		struct ig_errbuf eb;
		struct mfile f;
		char path[320];
		size_t blocks = 0;
		uint64_t sum = 0;

		write_desc(m, dts[d], 0, "q.gguf");
		write_desc(m, dts[d], 1024, "q-chunked.gguf"); /* no block type divides it */
		assert_same_file("q.gguf", "q-chunked.gguf");
		path_of(path, sizeof(path), "q.gguf");
		if (mfile_open(&f, path, &eb))
			fail_msg("%s: %s", q->name, eb.msg);
		for (size_t i = 0; i < f.g.n_tensors; i++) {
			const struct gguf_tensor *t = gguf_tensor_at(&f.g, i);
			uint32_t want =
			    mfile_tensor_type(&f.desc, dts[d], t->name, t->n_dims, t->dims);

			if (t->type != want)
				fail_msg("%s: tensor %s is %s, mfile_tensor_type says %s", q->name,
				         t->name, gguf_tensor_type_name(t->type),
				         gguf_tensor_type_name(want));
			sum += t->n_bytes;
			if (t->type != (uint32_t)dts[d])
				continue;
			blocks++;
			/* its first row: within a step of the values it encodes */
			{
				size_t n = (size_t)t->dims[0];
				float *x = malloc(n * sizeof(float)),
				      *y = malloc(n * sizeof(float));
				float amax = 0.0f;

				assert_non_null(x);
				assert_non_null(y);
				mfile_synthetic_values(1, t->name, t->dims[0], 0, n, x);
				quant_dequantize(t->type, t->data, y, n);
				for (size_t k = 0; k < n; k++)
					amax = fmaxf(amax, fabsf(x[k]));
				for (size_t k = 0; k < n; k++)
					if (fabsf(y[k] - x[k]) > amax / 3.0f + 1e-6f)
						fail_msg("%s: %s[%zu] is %g, encodes %g", q->name,
						         t->name, k, (double)y[k], (double)x[k]);
				free(x);
				free(y);
			}
		}
		assert_true(blocks >= 4);
		assert_int_equal(mdesc_weight_bytes(&f.desc) <= sum, true);
		mfile_close(&f);
	}
}

static void assert_same_file(const char *a, const char *b)
{
	size_t na, nb;
	char *x = slurp(a, &na), *y = slurp(b, &nb);

	assert_int_equal(na, nb);
	assert_memory_equal(x, y, na);
	free(x);
	free(y);
}

/*
 * The streamed file equals the in-memory writer's: at a small odd chunk and
 * the default one; rewritten through gguf_writer_add_tensor from its own
 * mapping; and every tensor equals the whole tensor generated at once.
 */
static void test_stream_equals_in_memory(void **state)
{
	struct mdesc cm = custom_moe();
	const struct mdesc *models[] = {mdesc_find("tiny-dense"), mdesc_find("tiny-moe"), &cm};

	(void)state;
	for (size_t i = 0; i < 3; i++) {
		enum mfile_dtype dt = i == 2 ? MFILE_F16 : MFILE_BF16;
		struct ig_errbuf eb;
		struct gguf g;
		char path[320];

		write_desc(models[i], dt, 0, "sdef.gguf");
		if (i != 1) { /* tiny-moe's bytes are pinned: not rewritten at 192 B */
			write_desc(models[i], dt, 192, "s192.gguf");
			assert_same_file("s192.gguf", "sdef.gguf");
		}
		rewrite("sdef.gguf", "mem.gguf", M_NONE, "");
		assert_same_file("sdef.gguf", "mem.gguf");
		path_of(path, sizeof(path), "sdef.gguf");
		if (gguf_open(&g, path, &eb))
			fail_msg("%s", eb.msg);
		for (size_t t = 0; t < g.n_tensors; t++) {
			const struct gguf_tensor *x = gguf_tensor_at(&g, t);
			void *whole = malloc(x->n_bytes);

			assert_non_null(whole);
			mfile_synthetic_fill(1, dt, x->name, x->dims[0], 0, x->n_elements, whole);
			if (memcmp(whole, x->data, x->n_bytes))
				fail_msg("%s: tensor %s differs from its whole generation",
				         models[i]->name, x->name);
			free(whole);
		}
		gguf_close(&g);
	}
}

/* ~200 MB written in a child (f32: half the values to generate of bf16): its
 * peak RSS grows by a few MiB, not by the file; the file loads. */
static void test_bounded_memory(void **state)
{
	struct mdesc m = custom_dense(4, 3072, 1024, 4096); /* 212 MB in f32 */
	struct mfile_synthetic s;
	struct ig_errbuf eb;
	struct mfile f;
	char path[320];
	pid_t pid;
	int status;

	(void)state;
	assert_int_equal(mfile_synthetic_describe(&m, MFILE_F32, &s, &eb), 0);
	assert_true(s.file_bytes > 190000000 && s.file_bytes < 230000000);
	path_of(path, sizeof(path), "big.gguf");
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct rusage before, after;
		long grown_kb;

		getrusage(RUSAGE_SELF, &before);
		if (mfile_write_synthetic(&m, 1, MFILE_F32, path, &eb)) {
			fprintf(stderr, "%s\n", eb.msg);
			_exit(1);
		}
		getrusage(RUSAGE_SELF, &after);
		grown_kb = after.ru_maxrss - before.ru_maxrss;
		printf("%llu bytes written: peak RSS grew %ld KiB\n",
		       (unsigned long long)s.file_bytes, grown_kb);
		fflush(stdout);
		_exit(grown_kb < 16 * 1024 ? 0 : 2);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	if (mfile_open(&f, path, &eb))
		fail_msg("%s", eb.msg);
	assert_int_equal(f.g.size, s.file_bytes);
	mfile_close(&f);
	unlink(path);
}

/* Every figure a plan reads from a description. */
static void assert_same_figures(const char *what, const struct mdesc *a, const struct mdesc *b)
{
	if (!mfile_same_shape(a, b))
		fail_msg("%s: the shapes differ", what);
	assert_int_equal(a->full_layers, b->full_layers);
	assert_int_equal(mdesc_weight_bytes(a), mdesc_weight_bytes(b));
	assert_int_equal(mdesc_expert_bytes(a), mdesc_expert_bytes(b));
	assert_int_equal(a->heaviest_layer_expert_bytes, b->heaviest_layer_expert_bytes);
	assert_int_equal(a->expert_table_bytes, b->expert_table_bytes);
	assert_memory_equal(a->class_record_bytes, b->class_record_bytes,
	                    sizeof(a->class_record_bytes));
	assert_int_equal(mdesc_state_image_bytes(a), mdesc_state_image_bytes(b));
	assert_int_equal(a->tokenizer, b->tokenizer);
	assert_int_equal(a->fixed_lanes, b->fixed_lanes);
}

/*
 * The dry run's description and size are the file's: for the presets and
 * custom shapes in every dtype, mfile_synthetic_describe equals what
 * mfile_open reads from the written file, and file_bytes its size. For the
 * tiny presets both equal the built-in description.
 */
static void test_describe_is_the_file(void **state)
{
	struct mdesc cm = custom_moe(), cd = custom_dense(5, 700, 256, 300);
	const struct mdesc *models[] = {mdesc_find("tiny-dense"), mdesc_find("tiny-moe"), &cm, &cd};
	static const enum mfile_dtype dts[] = {MFILE_BF16, MFILE_F16,  MFILE_F32,
	                                       MFILE_Q8_0, MFILE_Q4_K, MFILE_Q6_K};

	(void)state;
	for (size_t i = 0; i < 4; i++)
		for (size_t d = 0; d < (i == 1 ? 1u : 6u); d++) { /* tiny-moe: bf16 */
			struct mfile_synthetic s;
			struct ig_errbuf eb;
			struct mfile f;
			char path[320];

			if (mfile_synthetic_describe(models[i], dts[d], &s, &eb))
				fail_msg("%s: %s", models[i]->name, eb.msg);
			write_desc(models[i], dts[d], 0, "d.gguf");
			path_of(path, sizeof(path), "d.gguf");
			if (mfile_open(&f, path, &eb))
				fail_msg("%s: %s", models[i]->name, eb.msg);
			assert_int_equal(f.g.size, s.file_bytes);
			assert_int_equal(f.g.n_tensors, s.n_tensors);
			assert_string_equal(f.desc.name, s.desc.name);
			assert_same_figures(models[i]->name, &f.desc, &s.desc);
			if (i < 2 && dts[d] == MFILE_BF16)
				assert_same_figures(models[i]->name, &s.desc, models[i]);
			mfile_close(&f);
		}
}

/* A plan from `m` as --model gives it: the built-in by name, or a file's
 * description through the loader (a path). */
static const struct mdesc *loaded;

static const struct mdesc *load_desc(void *ctx, const char *path, const char *where,
                                     struct ig_errbuf *eb)
{
	(void)ctx;
	(void)path;
	(void)where;
	(void)eb;
	return loaded;
}

static void plan_of(const char *model, const struct mdesc *file, uint64_t free_bytes,
                    struct vplan *p)
{
	struct knob_input in;
	struct knobs k;
	struct vplan_device dev = {0};
	struct ig_errbuf eb;
	char free_text[32];
	const struct {
		enum knob_id id;
		const char *text;
	} words[] = {{KNOB_PROFILE, "none"},
	             {KNOB_BACKEND, "cuda"},
	             {KNOB_MODEL, model},
	             {KNOB_DEVICE_FREE_BYTES, free_text}};

	snprintf(free_text, sizeof(free_text), "%llu", (unsigned long long)free_bytes);
	memset(&in, 0, sizeof(in));
	memset(p, 0, sizeof(*p));
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
		in.flag[words[i].id].text = words[i].text;
		snprintf(in.flag[words[i].id].where, sizeof(in.flag[0].where), "test");
	}
	loaded = file;
	in.load_model = load_desc;
	if (knob_resolve(&in, &k, &eb))
		fail_msg("%s: %s", model, eb.msg);
	dev.cuda = true;
	dev.free_bytes = k.v[KNOB_DEVICE_FREE_BYTES].u;
	if (vplan_compute(&k, &dev, p))
		fail_msg("%s: refused: %s", model, p->refusal);
}

/*
 * Planning from a file: the tiny presets' files plan exactly as their
 * built-in descriptions. The reference shapes (described, never written in
 * a test) plan alike in everything their shapes decide; the figures the
 * built-ins carry from the reference (a quantized model: weights, experts,
 * the state image, the expert tables and class records) are not a bf16
 * file's, and those lines are the file's own (printed; ADR 0006).
 */
static void test_plan_from_file(void **state)
{
	static const char *const tiny[] = {"tiny-dense", "tiny-moe"};
	static const char *const refs[] = {"qwen3.8-27b", "qwen3.8-flash-next"};

	(void)state;
	for (size_t i = 0; i < 2; i++) {
		struct mfile_synthetic s;
		struct ig_errbuf eb;
		struct vplan a, b;

		assert_int_equal(mfile_synthetic_describe(mdesc_find(tiny[i]), MFILE_BF16, &s, &eb),
		                 0);
		plan_of(tiny[i], NULL, 8ull << 30, &a);
		plan_of("/synthetic/m.gguf", &s.desc, 8ull << 30, &b);
		assert_memory_equal(a.line, b.line, sizeof(a.line));
		assert_int_equal(a.lines_total, b.lines_total);
		assert_int_equal(a.pool_pages, b.pool_pages);
		assert_int_equal(a.expert_cache_bytes, b.expert_cache_bytes);
		assert_int_equal(a.residency_fixed_bytes, b.residency_fixed_bytes);
		assert_int_equal(a.total_bytes, b.total_bytes);
		assert_int_equal(a.context, b.context);
		assert_int_equal(a.lanes, b.lanes);
	}
	for (size_t i = 0; i < 2; i++) {
		const struct mdesc *ref = mdesc_find(refs[i]);
		struct mfile_synthetic s;
		struct ig_errbuf eb;
		struct vplan a, b;

		assert_int_equal(mfile_synthetic_describe(ref, MFILE_BF16, &s, &eb), 0);
		assert_true(mfile_same_shape(&s.desc, ref));
		assert_int_equal(s.desc.full_layers, ref->full_layers);
		/* a card large enough for the file's own weights: both plans start */
		plan_of(refs[i], NULL, 1ull << 40, &a);
		plan_of("/synthetic/m.gguf", &s.desc, 1ull << 40, &b);
		assert_int_equal(a.kv_bytes_per_token, b.kv_bytes_per_token);
		assert_int_equal(a.page_bytes, b.page_bytes);
		assert_int_equal(a.context, b.context);
		assert_int_equal(a.chunk, b.chunk);
		assert_int_equal(a.lanes, b.lanes);
		assert_int_equal(a.retained_device, b.retained_device);
		assert_int_equal(a.retained_host, b.retained_host);
		for (int l = 0; l < VPLAN_NLINES; l++) {
			if (l == VPLAN_WEIGHTS || l == VPLAN_LANE_STATE ||
			    l == VPLAN_RETAINED_SLOTS || l == VPLAN_RESIDUAL)
				continue; /* the carried figures' lines, and their rounding */
			if (a.line[l] != b.line[l])
				fail_msg("%s: line %s: built-in %llu, file %llu", refs[i],
				         vplan_line_names[l], (unsigned long long)a.line[l],
				         (unsigned long long)b.line[l]);
		}
		printf("%s in bf16: %llu tensors, %llu bytes; weights %llu (built-in %llu), "
		       "experts %llu (built-in %llu), state image %llu (built-in %llu)\n",
		       refs[i], (unsigned long long)s.n_tensors, (unsigned long long)s.file_bytes,
		       (unsigned long long)mdesc_weight_bytes(&s.desc),
		       (unsigned long long)mdesc_weight_bytes(ref),
		       (unsigned long long)mdesc_expert_bytes(&s.desc),
		       (unsigned long long)mdesc_expert_bytes(ref),
		       (unsigned long long)mdesc_state_image_bytes(&s.desc),
		       (unsigned long long)mdesc_state_image_bytes(ref));
	}
}

/* The reference shapes' sizes, as the dry run states them (pinned: a change
 * is a change of the tensor list or of the writer's layout). */
static void test_reference_sizes(void **state)
{
	static const struct {
		const char *preset;
		enum mfile_dtype dt;
		uint64_t tensors, bytes;
	} rows[] = {
	    {"27b", MFILE_BF16, 803, 51818100768ull},
	    {"flash-next", MFILE_BF16, 843, 247975677696ull},
	    {"27b", MFILE_F32, 803, 103636153376ull},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct mfile_synthetic s;
		struct ig_errbuf eb;

		if (mfile_synthetic_describe(mdesc_find(rows[i].preset), rows[i].dt, &s, &eb))
			fail_msg("%s", eb.msg);
		if (s.n_tensors != rows[i].tensors || s.file_bytes != rows[i].bytes)
			fail_msg("%s: %llu tensors, %llu bytes; pinned %llu, %llu", rows[i].preset,
			         (unsigned long long)s.n_tensors, (unsigned long long)s.file_bytes,
			         (unsigned long long)rows[i].tensors,
			         (unsigned long long)rows[i].bytes);
	}
}

/* Descriptions the writer refuses (and mfile_open would): each rule, by the
 * words of its message; nothing is written. */
static void test_check_desc(void **state)
{
	static const struct {
		const char *name;
		const char *field;
		uint64_t value;
		const char *say[2];
	} rows[] = {
	    {"no layers", "layers", 0, {"ignis.block_count (layers) is 0", "accepted: 1 to"}},
	    {"a huge dim", "hidden", MFILE_DIM_MAX + 1ull, {"(hidden) is 16777217", "to 16777216"}},
	    {"65 lanes", "max_lanes", 65, {"(max_lanes) is 65", "1 to 64"}},
	    {"heads", "kv_heads", 3, {"head_count (q_heads) 4 is not a multiple", "(kv_heads) 3"}},
	    {"linear heads",
	     "lin_k_heads",
	     3,
	     {"(lin_v_heads) 4 is not a multiple", "(lin_k_heads) 3"}},
	    {"odd rope", "rope_dims", 15, {"(rope_dims) 15 is odd or larger", "key_length"}},
	    {"wide rope", "rope_dims", 66, {"(rope_dims) 66 is odd or larger", "(head_dim) 64"}},
	    {"head_dim", "head_dim", 96, {"(head_dim) 96 is not a multiple of 64", "compact"}},
	    {"no full layer", "full_interval", 5, {"(layers) 4 is below", "no full-attention"}},
	    {"lanes", "default_lanes", 5, {"(default_lanes) 5 exceeds", "(max_lanes) 4"}},
	    {"4097 layers", "layers", 4097, {"(layers) is 4097", "accepted: 1 to 4096"}},
	    {"vocab", "vocab", 259, {"(vocab) is 259", "byte-level tokenizer"}},
	    {"vocab", "vocab", 261, {"(vocab) is 261", "or tokenizer 'none'"}},
	};
	char path[320];

	(void)state;
	path_of(path, sizeof(path), "refused.gguf");
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct mdesc m = *mdesc_find("tiny-dense");
		const struct mfile_key *k = mfile_key_find(rows[i].field);
		struct mfile_synthetic s;
		struct ig_errbuf eb = {0};
		uint32_t v = (uint32_t)rows[i].value;

		assert_non_null(k);
		memcpy((char *)&m + k->offset, &v, 4);
		assert_int_equal(mfile_synthetic_describe(&m, MFILE_BF16, &s, &eb), IG_E_INVAL);
		for (int w = 0; w < 2; w++)
			if (!strstr(eb.msg, rows[i].say[w]))
				fail_msg("%s: '%s' missing from: %s", rows[i].name, rows[i].say[w],
				         eb.msg);
		assert_int_equal(mfile_write_synthetic(&m, 1, MFILE_BF16, path, &eb), IG_E_INVAL);
		assert_int_equal(access(path, F_OK), -1);
	}
	{
		struct mdesc m = *mdesc_find("tiny-moe");
		struct ig_errbuf eb = {0};

		m.experts = 65537;
		assert_int_equal(mfile_check_desc(&m, &eb), IG_E_INVAL);
		assert_non_null(strstr(eb.msg, "(experts) is 65537; accepted: 1 to 65536"));
		m = *mdesc_find("tiny-moe");
		m.top_k = 33;
		assert_int_equal(mfile_check_desc(&m, &eb), IG_E_INVAL);
		assert_non_null(
		    strstr(eb.msg, "(top_k) 33 exceeds ignis.expert_count (experts) 32"));
		m = *mdesc_find("tiny-moe");
		m.rms_eps = 0.0f;
		assert_int_equal(mfile_check_desc(&m, &eb), IG_E_INVAL);
		assert_non_null(
		    strstr(eb.msg, "(rms_eps) is 0; accepted: a finite number above 0"));
		for (unsigned i = 0; i < mdesc_nbuiltin; i++)
			assert_int_equal(mfile_check_desc(&mdesc_builtin[i], &eb), IG_E_OK);
	}
}

/* A full disk, an interruption: IG_E_IO, clear words, no file left. */
static int count_entries(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)))
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	closedir(d);
	return n;
}

static uint64_t disk_left;

static ssize_t small_disk(int fd, const void *buf, size_t n)
{
	ssize_t r;

	if (!disk_left) {
		errno = ENOSPC;
		return -1;
	}
	r = write(fd, buf, n < disk_left ? n : (size_t)disk_left);
	if (r > 0)
		disk_left -= (uint64_t)r;
	return r;
}

static volatile sig_atomic_t stop_now;

static void stop_at_half(void *ctx, uint64_t done, uint64_t total)
{
	(void)ctx;
	if (done * 2 >= total)
		stop_now = 1;
}

static void test_write_failures(void **state)
{
	const struct mdesc *m = mdesc_find("tiny-moe");
	struct mfile_synthetic s;
	struct ig_errbuf eb;
	char path[320], words[128];
	int before = count_entries();

	(void)state;
	path_of(path, sizeof(path), "nospace.gguf");
	assert_int_equal(mfile_synthetic_describe(m, MFILE_BF16, &s, &eb), 0);
	disk_left = 1u << 20;
	assert_int_equal(mfile_write_synthetic_opts(m, 1, MFILE_BF16, path,
	                                            &(struct mfile_wopts){.write_fn = small_disk},
	                                            &eb),
	                 IG_E_IO);
	snprintf(words, sizeof(words), "after 1048576 of its %llu bytes",
	         (unsigned long long)s.file_bytes);
	if (!strstr(eb.msg, path) || !strstr(eb.msg, strerror(ENOSPC)) || !strstr(eb.msg, words))
		fail_msg("unclear: %s", eb.msg);
	assert_int_equal(count_entries(), before);

	stop_now = 0;
	assert_int_equal(mfile_write_synthetic_opts(
	                     m, 1, MFILE_BF16, path,
	                     &(struct mfile_wopts){.stop = &stop_now, .progress = stop_at_half},
	                     &eb),
	                 IG_E_IO);
	if (!strstr(eb.msg, path) || !strstr(eb.msg, "interrupted at tensor"))
		fail_msg("unclear: %s", eb.msg);
	assert_int_equal(count_entries(), before);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_roundtrip_matches_the_builtin),
	    cmocka_unit_test(test_tiny_chat_is_tiny_dense_as_qwen3),
	    cmocka_unit_test(test_tokenizer_kind),
	    cmocka_unit_test(test_same_seed_same_bytes),
	    cmocka_unit_test(test_identity),
	    cmocka_unit_test(test_tiny_bytes_pinned),
	    cmocka_unit_test(test_dtypes),
	    cmocka_unit_test(test_block_dtypes),
	    cmocka_unit_test(test_malformed_files),
	    cmocka_unit_test(test_truncated_and_foreign),
	    cmocka_unit_test(test_qwen3_layout),
	    cmocka_unit_test(test_llama_hybrids),
	    cmocka_unit_test(test_expert_counts_file),
	    cmocka_unit_test(test_stream_equals_in_memory),
	    cmocka_unit_test(test_bounded_memory),
	    cmocka_unit_test(test_describe_is_the_file),
	    cmocka_unit_test(test_plan_from_file),
	    cmocka_unit_test(test_reference_sizes),
	    cmocka_unit_test(test_check_desc),
	    cmocka_unit_test(test_write_failures),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
